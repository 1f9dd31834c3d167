//! Pool benchmarks, each against its peer in the same run (`cargo bench --bench pool`):
//!
//! - `alloc_free`: a pooled alloc + free pair against reserving, mapping and registering a
//!   window per tensor (and undoing it), the way a framework without a pool would;
//! - `all_reduce`: a 2-rank fp32 AllReduce on pooled (registered) memory, which takes the
//!   symmetric zero-copy path, against the same AllReduce on unregistered memory, which stages
//!   through the HCCL buffer; 4 KiB to 64 MiB;
//! - `strict_symmetry`: the same pooled AllReduce in a default pool against one in a pool with
//!   `PoolConfig::strict_symmetry(true)` (an op-hash AllGather and a stream synchronisation
//!   before every collective), at the sizes of a decode step's and a prefill's all-reduces.

use std::hint::black_box;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use symheap::raw::{Mapping, Window};
use symheap::{Comm, CommConfig, Element, ReduceOp, RootInfo, Stream};
use symheap::{PoolConfig, Result, Runtime, SymPool, SymVec};

/// A communicator of `ranks` on this thread, as rank `rank`.
fn join(rt: &Runtime, root: &RootInfo, ranks: u32, rank: u32) -> Result<Comm> {
    rt.set_device(rank)?;
    Comm::init(rt, ranks, root, rank, &CommConfig::new())
}

/// Reserve + allocate + map + register, then undo it all: one tensor without a pool.
fn register_one(comm: &Comm, bytes: u64) -> Result<()> {
    Window::allocate(comm, bytes)?.deregister()
}

fn alloc_free(c: &mut Criterion) {
    let rt = Runtime::emulated().unwrap();
    let root = RootInfo::new(&rt).unwrap();
    let comm = join(&rt, &root, 1, 0).unwrap();
    let pool = SymPool::new(&comm, PoolConfig::new(256 << 20)).unwrap();
    // A pool with a realistic number of live tensors around the one being churned.
    let _live: Vec<_> = (0..1000u64)
        .map(|i| pool.alloc(512 << (i % 10), 0).unwrap())
        .collect();
    let mut group = c.benchmark_group("alloc_free");
    group.bench_function("pool", |b| {
        b.iter(|| drop(black_box(pool.alloc(black_box(64 << 10), 0).unwrap())))
    });
    group.bench_function("register_per_tensor", |b| {
        b.iter(|| register_one(&comm, 2 << 20).unwrap())
    });
    group.finish();
}

/// Sizes of the AllReduce comparison.
const SIZES: [u64; 8] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
];

/// Sizes of the strict-against-default comparison: a decode step's all-reduce (batch x hidden
/// x 2 B: 8 x 4096 x 2 = 64 KiB, 64 x 8192 x 2 = 1 MiB) and a prefill's (16 MiB).
const STRICT_SIZES: [u64; 3] = [64 << 10, 1 << 20, 16 << 20];

/// Where a run's AllReduces go.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// A default pool: symmetric zero-copy path.
    Pooled,
    /// A pool with `strict_symmetry(true)`: symmetric zero-copy path, checked.
    Strict,
    /// An unregistered mapping: staged through the HCCL buffer.
    Unregistered,
}

/// One rank's buffers: a pooled vector and an unregistered mapping per size, and a strict
/// pool's vector per strict size (by its index in `SIZES`).
struct RankBuffers {
    pool: SymPool,
    pooled: Vec<SymVec<f32>>,
    strict: SymPool,
    strict_pooled: Vec<SymVec<f32>>,
    plain: Mapping,
    stream: Stream,
}

impl RankBuffers {
    fn new(comm: &Comm) -> Result<Self> {
        let total: u64 = SIZES.iter().sum();
        let pool = SymPool::new(comm, PoolConfig::new(total + (8 << 20)))?;
        let pooled = SIZES
            .iter()
            .map(|&bytes| SymVec::zeroed(&pool, (bytes / 4) as usize))
            .collect::<Result<_>>()?;
        // The strict pool's vectors, by the same index: empty but at the strict sizes.
        let strict_total: u64 = STRICT_SIZES.iter().sum();
        let strict = SymPool::new(
            comm,
            PoolConfig::new(strict_total + (8 << 20)).strict_symmetry(true),
        )?;
        let strict_pooled = SIZES
            .iter()
            .map(|bytes| match STRICT_SIZES.contains(bytes) {
                true => SymVec::zeroed(&strict, (bytes / 4) as usize),
                false => SymVec::zeroed(&strict, 0),
            })
            .collect::<Result<_>>()?;
        let rt = comm.runtime();
        let max = SIZES[SIZES.len() - 1];
        let plain = Mapping::allocate(rt, max, comm.device())?;
        Ok(RankBuffers {
            pool,
            pooled,
            strict,
            strict_pooled,
            plain,
            stream: Stream::new(rt)?,
        })
    }

    /// Runs `iters` AllReduces of size index `size` and waits for them.
    fn run(&mut self, size: usize, mode: Mode, iters: u64) -> Result<()> {
        for _ in 0..iters {
            if mode == Mode::Pooled {
                self.pool
                    .all_reduce_in_place(&mut self.pooled[size], ReduceOp::Sum)?;
            } else if mode == Mode::Strict {
                self.strict
                    .all_reduce_in_place(&mut self.strict_pooled[size], ReduceOp::Sum)?;
            } else {
                let ptr = self.plain.ptr();
                let count = SIZES[size] / 4;
                // SAFETY: the mapping holds the largest size; synchronised below.
                unsafe {
                    self.pool.comm().raw().all_reduce(
                        ptr,
                        ptr,
                        count,
                        f32::DATA_TYPE.into(),
                        ReduceOp::Sum,
                        &self.stream,
                    )?
                };
            }
        }
        if mode == Mode::Pooled {
            self.pool.synchronize()
        } else if mode == Mode::Strict {
            self.strict.synchronize()
        } else {
            self.pool.comm().synchronize(&self.stream)
        }
    }
}

/// Rank 1, driven over a channel; rank 0 runs on the benchmark thread.
enum Command {
    Run { size: usize, mode: Mode, iters: u64 },
    Stop,
}

fn peer(rt: Runtime, root: RootInfo, commands: Receiver<Command>, done: Sender<()>) {
    let comm = join(&rt, &root, 2, 1).unwrap();
    let mut buffers = RankBuffers::new(&comm).unwrap();
    done.send(()).unwrap();
    while let Ok(Command::Run { size, mode, iters }) = commands.recv() {
        buffers.run(size, mode, iters).unwrap();
        done.send(()).unwrap();
    }
}

fn all_reduce(c: &mut Criterion) {
    let rt = Runtime::emulated().unwrap();
    let root = RootInfo::new(&rt).unwrap();
    let (to_peer, commands) = channel();
    let (done_tx, done) = channel();
    let peer_thread = {
        let (rt, root) = (rt.clone(), root.clone());
        std::thread::spawn(move || peer(rt, root, commands, done_tx))
    };
    let comm = join(&rt, &root, 2, 0).unwrap();
    let mut buffers = RankBuffers::new(&comm).unwrap();
    done.recv().unwrap();
    let mut group = c.benchmark_group("all_reduce_2_ranks");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    // Each size (an index in `SIZES`) in each mode.
    let mut measure = |group: &mut criterion::BenchmarkGroup<'_, _>, sizes: &[usize], modes| {
        for &size in sizes {
            let bytes = SIZES[size];
            group.throughput(Throughput::Bytes(bytes));
            for &(name, mode) in modes {
                group.bench_with_input(BenchmarkId::new(name, bytes), &size, |b, &size| {
                    b.iter_custom(|iters| {
                        to_peer.send(Command::Run { size, mode, iters }).unwrap();
                        let start = Instant::now();
                        buffers.run(size, mode, iters).unwrap();
                        let elapsed = start.elapsed();
                        done.recv().unwrap();
                        elapsed
                    })
                });
            }
        }
    };
    let modes = [
        ("pooled", Mode::Pooled),
        ("unregistered", Mode::Unregistered),
    ];
    measure(
        &mut group,
        &(0..SIZES.len()).collect::<Vec<_>>(),
        &modes[..],
    );
    group.finish();
    // Strict mode's cost per collective: the same AllReduce, default pool against strict.
    let mut group = c.benchmark_group("strict_symmetry_2_ranks");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let modes = [("default", Mode::Pooled), ("strict", Mode::Strict)];
    let strict_sizes: Vec<usize> = STRICT_SIZES
        .iter()
        .map(|b| SIZES.iter().position(|s| s == b).unwrap())
        .collect();
    measure(&mut group, &strict_sizes, &modes[..]);
    group.finish();
    to_peer.send(Command::Stop).unwrap();
    drop(buffers); // collective deregistration, matched by the peer's drop
    peer_thread.join().unwrap();
}

criterion_group!(benches, alloc_free, all_reduce);
criterion_main!(benches);
