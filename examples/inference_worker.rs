//! The main job: a tensor-parallel decode loop on four emulated ranks, one process per device
//! as real deployments run (`--threads`: four threads of one process), every activation
//! allocated from one symmetric pool and freed each step.
//!
//! ```sh
//! cargo run --release --example inference_worker              # 4 processes
//! cargo run --release --example inference_worker -- --threads # 4 threads
//! cargo run --release --example inference_worker -- --snapshot /tmp/snap
//! cargo run --release -p symheap-tools --bin symheap-map -- /tmp/snap/rank-*.json -o /tmp/snap/heap-map.html
//! ```
//!
//! Started plainly, the program re-runs itself through the launcher as four processes
//! ([`Job::this_program`]), each of which joins with [`Comm::from_env`]; on an Atlas A3 node
//! the same binary, built against [`Runtime::load`] instead of the emulator, runs under
//! `symheap-run -n 16`, torchrun or mpirun.
//!
//! Each step runs a small transformer-style MLP block (column-parallel matmul, GELU,
//! row-parallel matmul, AllReduce), appends to a KV cache that grows with the sequence, projects
//! to vocabulary logits (column-parallel) and AllGathers them to pick the next token. It then
//! runs the same loop registering and deregistering a window per tensor, the naive alternative,
//! and prints both rates and their ratio.
//!
//! With `--snapshot DIR` every rank writes `DIR/rank-N.json`, its pool's
//! [`snapshot`](SymPool::snapshot) during the last decode step (weights, the KV cache, that
//! step's tensors, tagged), and rank 0 prints the `symheap-map` command that draws them.

use std::path::{Path, PathBuf};
use std::time::Instant;

use symheap::{Comm, ReduceOp, Stream, Window};
use symheap::{CommConfig, Element, PoolConfig, Result, Runtime, Snapshot, SymPool, SymVec, emu};
use symheap_tools::launcher::{self, Job};

const RANKS: u32 = 4;
const STEPS: usize = 300;
const BATCH: usize = 2;
const HIDDEN: usize = 64;
const FFN: usize = 4 * HIDDEN;
const VOCAB: usize = 512;
/// The KV cache grows in chunks of this many tokens (a reallocation each time it fills).
const KV_CHUNK: usize = 32;

/// Where a step's tensors come from: the pool, or a freshly registered window each.
trait Tensors {
    type Tensor;
    /// A zeroed tensor; `tag` says what it is for (the pool's stats and snapshots use it).
    fn zeros(&self, len: usize, tag: &'static str) -> Result<Self::Tensor>;
    fn host<'a>(&self, t: &'a mut Self::Tensor) -> Result<&'a mut [f32]>;
    fn all_reduce(&self, t: &mut Self::Tensor) -> Result<()>;
    fn all_gather(&self, input: &Self::Tensor, output: &mut Self::Tensor) -> Result<()>;
    fn end_step(&self) -> Result<()>;
    /// What the backing memory holds now, where there is a pool to ask.
    fn snapshot(&self) -> Option<Snapshot> {
        None
    }
}

/// symheap: one window registered at start, blocks carved per tensor.
struct Pooled(SymPool);

impl Tensors for Pooled {
    type Tensor = SymVec<f32>;
    fn zeros(&self, len: usize, tag: &'static str) -> Result<SymVec<f32>> {
        SymVec::zeroed_tagged(&self.0, len, tag)
    }
    fn host<'a>(&self, t: &'a mut SymVec<f32>) -> Result<&'a mut [f32]> {
        t.host_mut()
    }
    fn all_reduce(&self, t: &mut SymVec<f32>) -> Result<()> {
        self.0.all_reduce_in_place(t, ReduceOp::Sum)
    }
    fn all_gather(&self, input: &SymVec<f32>, output: &mut SymVec<f32>) -> Result<()> {
        self.0.all_gather(input, output)
    }
    fn end_step(&self) -> Result<()> {
        self.0.synchronize()
    }
    fn snapshot(&self) -> Option<Snapshot> {
        Some(self.0.snapshot())
    }
}

/// The naive alternative: every tensor reserves, allocates, maps and registers its own window
/// (collective), and deregisters and releases it when dropped.
struct PerTensor {
    comm: Comm,
    stream: Stream,
}

/// A window that owns its memory: deregistered, then unmapped and freed, on drop.
struct Registered {
    window: Window,
    len: usize,
}

impl Tensors for PerTensor {
    type Tensor = Registered;
    fn zeros(&self, len: usize, _tag: &'static str) -> Result<Registered> {
        let window = Window::allocate(&self.comm, (len * 4) as u64)?;
        // SAFETY: fresh, mapped memory of at least `len` floats, not yet used by any stream.
        unsafe { self.comm.runtime().memset(window.ptr(), 0, len * 4)? };
        Ok(Registered { window, len })
    }
    fn host<'a>(&self, t: &'a mut Registered) -> Result<&'a mut [f32]> {
        // SAFETY: emulated device memory is host memory; every collective on it was
        // synchronised before returning, and `&mut` excludes other uses.
        Ok(unsafe { std::slice::from_raw_parts_mut(t.window.ptr().as_raw().cast(), t.len) })
    }
    fn all_reduce(&self, t: &mut Registered) -> Result<()> {
        let p = t.window.ptr();
        // SAFETY: a live window of `len` floats, synchronised before returning.
        unsafe {
            self.comm.all_reduce(
                p,
                p,
                t.len as u64,
                f32::DATA_TYPE,
                ReduceOp::Sum,
                &self.stream,
            )?
        };
        self.comm.synchronize(&self.stream)
    }
    fn all_gather(&self, input: &Registered, output: &mut Registered) -> Result<()> {
        // SAFETY: live windows sized for the gather, synchronised before returning.
        unsafe {
            self.comm.all_gather(
                input.window.ptr(),
                output.window.ptr(),
                input.len as u64,
                f32::DATA_TYPE,
                &self.stream,
            )?
        };
        self.comm.synchronize(&self.stream)
    }
    fn end_step(&self) -> Result<()> {
        self.comm.synchronize(&self.stream)
    }
}

/// This rank's shards of the weights, deterministic pseudo-random.
struct Weights {
    w1: Vec<f32>,    // HIDDEN x FFN/RANKS   (column-parallel)
    w2: Vec<f32>,    // FFN/RANKS x HIDDEN   (row-parallel)
    wv: Vec<f32>,    // HIDDEN x VOCAB/RANKS (column-parallel)
    embed: Vec<f32>, // VOCAB x HIDDEN (replicated)
}

fn pseudo_random(seed: u64, n: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2
        })
        .collect()
}

impl Weights {
    fn new(rank: u32) -> Self {
        let r = u64::from(rank);
        let ranks = RANKS as usize;
        Weights {
            w1: pseudo_random(10 + r, HIDDEN * FFN / ranks),
            w2: pseudo_random(20 + r, FFN / ranks * HIDDEN),
            wv: pseudo_random(30 + r, HIDDEN * VOCAB / ranks),
            embed: pseudo_random(1, VOCAB * HIDDEN),
        }
    }
}

/// `out[b][j] = sum_k a[b][k] * w[k][j]`.
fn matmul(a: &[f32], w: &[f32], out: &mut [f32], k: usize, n: usize) {
    for (row, out_row) in a.chunks(k).zip(out.chunks_mut(n)) {
        for (&x, w_row) in row.iter().zip(w.chunks(n)) {
            for (o, &wv) in out_row.iter_mut().zip(w_row) {
                *o += x * wv;
            }
        }
    }
}

fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + (0.797_884_6 * (x + 0.044_715 * x * x * x)).tanh())
}

/// What a decode loop produced.
struct Decoded {
    /// Steps per second.
    rate: f64,
    /// The token sequence of batch row 0.
    tokens: Vec<usize>,
    /// The backend's snapshot during the last step, before its synchronisation.
    snapshot: Option<Snapshot>,
}

/// Runs the decode loop.
fn decode<B: Tensors>(backend: &B, comm: &Comm) -> Result<Decoded> {
    let ranks = comm.size() as usize;
    let w = Weights::new(comm.rank());
    let mut tokens = [1usize; BATCH];
    let mut history = Vec::with_capacity(STEPS);
    let mut kv = backend.zeros(KV_CHUNK * BATCH * HIDDEN, "kv-cache")?;
    let mut snapshot = None;
    let start = Instant::now();
    // One token per step is appended to the KV cache, so the step is also its length.
    for kv_tokens in 0..STEPS {
        // Embedding lookup (replicated).
        let mut x = backend.zeros(BATCH * HIDDEN, "activations")?;
        for (b, row) in backend.host(&mut x)?.chunks_mut(HIDDEN).enumerate() {
            row.copy_from_slice(&w.embed[tokens[b] * HIDDEN..][..HIDDEN]);
        }
        // Column-parallel up-projection and GELU, then row-parallel down-projection.
        let mut h = backend.zeros(BATCH * FFN / ranks, "activations")?;
        {
            let xs = backend.host(&mut x)?.to_vec();
            let hs = backend.host(&mut h)?;
            matmul(&xs, &w.w1, hs, HIDDEN, FFN / ranks);
            hs.iter_mut().for_each(|v| *v = gelu(*v));
        }
        let mut y = backend.zeros(BATCH * HIDDEN, "activations")?;
        {
            let hs = backend.host(&mut h)?.to_vec();
            matmul(&hs, &w.w2, backend.host(&mut y)?, FFN / ranks, HIDDEN);
        }
        backend.all_reduce(&mut y)?;
        // Append to the KV cache, growing it by a chunk when full.
        if (kv_tokens + 1) * BATCH * HIDDEN > backend.host(&mut kv)?.len() {
            let mut bigger =
                backend.zeros((kv_tokens + 1 + KV_CHUNK) * BATCH * HIDDEN, "kv-cache")?;
            let old = backend.host(&mut kv)?.to_vec();
            backend.host(&mut bigger)?[..old.len()].copy_from_slice(&old);
            kv = bigger;
        }
        let ys = backend.host(&mut y)?.to_vec();
        backend.host(&mut kv)?[kv_tokens * BATCH * HIDDEN..][..BATCH * HIDDEN].copy_from_slice(&ys);
        // Column-parallel vocabulary projection; gather the shards and take the argmax.
        let mut logits = backend.zeros(BATCH * VOCAB / ranks, "logits")?;
        matmul(
            &ys,
            &w.wv,
            backend.host(&mut logits)?,
            HIDDEN,
            VOCAB / ranks,
        );
        let mut all_logits = backend.zeros(BATCH * VOCAB, "logits")?;
        backend.all_gather(&logits, &mut all_logits)?;
        let gathered = backend.host(&mut all_logits)?;
        let shard = BATCH * VOCAB / ranks;
        for (b, token) in tokens.iter_mut().enumerate() {
            let score = |v: usize| {
                gathered[(v / (VOCAB / ranks)) * shard + b * (VOCAB / ranks) + v % (VOCAB / ranks)]
            };
            *token = (0..VOCAB)
                .max_by(|&a, &c| score(a).total_cmp(&score(c)))
                .unwrap_or(0);
        }
        history.push(tokens[0]);
        // The step's tensors are done with: those that took part in a collective wait for
        // the synchronisation (pending), the others are free at once.
        drop((x, h, y, logits, all_logits));
        if kv_tokens + 1 == STEPS {
            snapshot = backend.snapshot();
        }
        backend.end_step()?;
    }
    Ok(Decoded {
        rate: STEPS as f64 / start.elapsed().as_secs_f64(),
        tokens: history,
        snapshot,
    })
}

/// What one rank measured.
struct Report {
    pooled_rate: f64,
    naive_rate: f64,
    tokens: Vec<usize>,
    registrations_at_start: u64,
    stats: symheap::PoolStats,
    /// The pool's `memory_summary` after the decode loop.
    summary: String,
}

/// One rank's whole job: the pooled loop, then the window-per-tensor loop, then a check that
/// every rank computed the same tokens. With `snapshot_dir`, writes the pool's snapshot from
/// the last pooled step to `rank-N.json` there.
fn rank_main(comm: &Comm, snapshot_dir: Option<&Path>) -> Result<Report> {
    let pool = SymPool::new(comm, PoolConfig::new(64 << 20))?;
    let registrations_at_start = pool.stats().registrations;
    // The weights stay resident in device memory, as a real worker keeps them (the emulated
    // matmuls read the host copies).
    let w = Weights::new(comm.rank());
    let resident = [&w.w1, &w.w2, &w.wv, &w.embed]
        .into_iter()
        .map(|v| SymVec::from_host_tagged(&pool, v, "weights"))
        .collect::<Result<Vec<_>>>()?;
    let backend = Pooled(pool);
    let Decoded {
        rate: pooled_rate,
        tokens,
        snapshot,
    } = decode(&backend, comm)?;
    drop(resident);
    let stats = backend.0.stats();
    assert_eq!(
        stats.registrations, registrations_at_start,
        "the hot path registered a window"
    );
    let summary = backend.0.memory_summary();
    if let (Some(dir), Some(snapshot)) = (snapshot_dir, snapshot) {
        write_snapshot(dir, &snapshot)?;
    }
    let naive = PerTensor {
        comm: comm.clone(),
        stream: Stream::new(comm.runtime())?,
    };
    let Decoded {
        rate: naive_rate,
        tokens: naive_tokens,
        ..
    } = decode(&naive, comm)?;
    assert_eq!(
        naive_tokens, tokens,
        "the naive loop computed different tokens"
    );
    // Every rank's tokens, gathered: they must agree.
    let pool = &backend.0;
    let digest = tokens
        .iter()
        .fold(0u64, |h, &t| h.wrapping_mul(31).wrapping_add(t as u64));
    let mine = SymVec::from_host_tagged(pool, &[digest], "check")?;
    let mut all = SymVec::<u64>::zeroed_tagged(pool, comm.size() as usize, "check")?;
    pool.all_gather(&mine, &mut all)?;
    assert!(
        all.to_host()?.iter().all(|&d| d == digest),
        "ranks disagree on the tokens"
    );
    Ok(Report {
        pooled_rate,
        naive_rate,
        tokens,
        registrations_at_start,
        stats,
        summary,
    })
}

/// Writes `dir/rank-N.json`.
#[cfg(feature = "serde")]
fn write_snapshot(dir: &Path, snapshot: &Snapshot) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| io_error(format!("cannot create {}", dir.display()), e))?;
    let path = dir.join(format!("rank-{}.json", snapshot.rank));
    std::fs::write(&path, snapshot.to_json())
        .map_err(|e| io_error(format!("cannot write {}", path.display()), e))
}

#[cfg(feature = "serde")]
fn io_error(what: String, source: std::io::Error) -> symheap::Error {
    symheap::Error::Io {
        what,
        source: std::sync::Arc::new(source),
    }
}

#[cfg(not(feature = "serde"))]
fn write_snapshot(_dir: &Path, _snapshot: &Snapshot) -> Result<()> {
    Err(symheap::Error::InvalidArgument(
        "--snapshot needs symheap's serde feature".into(),
    ))
}

/// `--snapshot DIR`, if given.
fn snapshot_dir() -> Option<PathBuf> {
    let mut args = std::env::args_os().skip_while(|a| a != "--snapshot");
    args.next()?;
    match args.next() {
        Some(dir) => Some(PathBuf::from(dir)),
        None => {
            eprintln!("--snapshot needs a directory");
            std::process::exit(2);
        }
    }
}

/// Says how to draw the snapshots (rank 0, once every rank has written its own).
fn print_map_command(dir: Option<&Path>) {
    if let Some(dir) = dir {
        let d = dir.display();
        println!("snapshots: {d}/rank-*.json; draw them with");
        println!(
            "  cargo run --release -p symheap-tools --bin symheap-map -- {d}/rank-*.json -o {d}/heap-map.html"
        );
    }
}

fn print_report(r: &Report) {
    println!("rank 0's pool after the decode loop (the weights already dropped):");
    println!("{}", r.summary);
    let added = r.stats.registrations - r.registrations_at_start;
    let at_start = r.registrations_at_start;
    println!("checked, on every rank:");
    println!(
        "  no window registered while decoding: {at_start} at start, {added} added in {STEPS} steps"
    );
    println!("  the pooled and the window-per-tensor loops decoded the same tokens");
    println!("  every rank decoded the same tokens (a digest of them, gathered with AllGather)");
    println!(
        "decoded tokens (sequence 0, greedy, ids in a {VOCAB}-token vocabulary), the first 8: {:?}",
        &r.tokens[..8.min(r.tokens.len())]
    );
    println!("pooled:                 {:>10.1} steps/s", r.pooled_rate);
    println!(
        "window per tensor:      {:>10.1} steps/s  (a window registered per tensor)",
        r.naive_rate
    );
    println!(
        "speed-up:               {:>10.1}x",
        r.pooled_rate / r.naive_rate
    );
    println!("all checks passed");
}

fn main() -> Result<()> {
    let shape = format!("{STEPS} decode steps, batch {BATCH}, hidden {HIDDEN}");
    let dir = snapshot_dir();
    if std::env::args().any(|a| a == "--threads") {
        // All ranks as threads of this process.
        println!("symheap inference worker: {RANKS} emulated ranks as threads, {shape}");
        let reports = emu::launch(RANKS, |comm| rank_main(comm, dir.as_deref()))?;
        print_report(&reports[0]);
        print_map_command(dir.as_deref());
        return Ok(());
    }
    if !launcher::in_a_rank() {
        // One process per device, as real deployments run: this program again, as each rank.
        println!("symheap inference worker: {RANKS} emulated ranks as processes, {shape}");
        let outcome = Job::this_program(RANKS)?.run()?;
        if !outcome.success() {
            eprintln!("{}", outcome.summary());
            std::process::exit(1);
        }
        return Ok(());
    }
    let rt = Runtime::emulated()?;
    let comm = Comm::from_env(&rt, CommConfig::new())?;
    let report = rank_main(&comm, dir.as_deref())?;
    if comm.rank() == 0 {
        print_report(&report);
        print_map_command(dir.as_deref());
    }
    Ok(())
}
