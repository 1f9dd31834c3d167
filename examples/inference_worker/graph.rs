//! The decode step as a real graph-mode worker runs it: static shapes, compute on one stream
//! and collectives on another, captured once as an ACL graph and replayed every step.
//!
//! Every tensor of the step is allocated once, before the capture; the step reads the tokens
//! and the step number from device buffers that its last kernel advances, so a replay needs
//! no host input. The MoE layer dispatches with fixed counts (each rank sends every rank one
//! slot per row it owns, zero where the row is not routed there, as capacity-padded MoE
//! does), so its AlltoAllV is the same call at every step. The rank's compute runs as host
//! functions on the compute stream (the emulator's kernels, over device memory that is host
//! memory); events order the two streams. The same step is run eagerly (enqueued anew each
//! step, through the pool) and replayed, both checked against the host reference's logits at
//! every step.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use symheap::{
    AllocDesc, Event, ParallelGroups, Result, Stream, SymPool, SymVec, packed_displacements,
};

use super::{BATCH, EP, HIDDEN, STEPS, TP, VOCAB, Weights};
use super::{argmax_tokens, expert_of, first_tokens, gathered_index, matmul, rows_of};

/// Rows of a TP rank's share of its replica's batch: the slots it sends every EP rank.
const CAP: usize = BATCH / TP;

/// What the graph-mode run measured on one rank.
pub struct GraphReport {
    /// Steps per second, eager.
    pub eager_rate: f64,
    /// Steps per second, replayed.
    pub replayed_rate: f64,
    /// Host time to enqueue one eager step, in microseconds.
    pub eager_host_us: f64,
    /// Host time to enqueue one replay, in microseconds.
    pub replayed_host_us: f64,
    /// Pool calls (allocations, frees, collectives) per eager step.
    pub eager_calls: f64,
    /// Pool calls per replayed step.
    pub replayed_calls: f64,
    /// The tokens of this replica's batch row 0.
    pub tokens: Vec<usize>,
}

/// A device buffer's address and length, for the step's kernels.
struct Dev<T> {
    addr: usize,
    len: usize,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Dev<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Dev<T> {}

impl<T: symheap::Element> Dev<T> {
    fn of(v: &SymVec<T>) -> Self {
        Dev {
            addr: v.device_ptr().as_raw() as usize,
            len: v.len(),
            _t: PhantomData,
        }
    }

    /// The buffer as a host slice.
    ///
    /// # Safety
    /// The runtime is host-addressable (the emulator), the buffer is alive, and while the
    /// slice lives nothing else uses the buffer.
    unsafe fn view<'a>(self) -> &'a mut [T] {
        // SAFETY: the caller's contract: emulated device memory is host memory of this
        // process, alive and used by nothing else meanwhile.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut T, self.len) }
    }
}

/// The step's tensors, allocated once.
struct Buffers {
    tokens: SymVec<u32>,
    step: SymVec<u32>,
    y: SymVec<f32>,
    kv: SymVec<f32>,
    dispatch: SymVec<f32>,
    received: SymVec<f32>,
    expert_out: SymVec<f32>,
    combined: SymVec<f32>,
    mine: SymVec<f32>,
    z: SymVec<f32>,
    logits: SymVec<f32>,
    all_logits: SymVec<f32>,
}

impl Buffers {
    fn new(pool: &SymPool, d: usize) -> Result<Self> {
        let f = |len, tag| SymVec::<f32>::zeroed_with(pool, len, AllocDesc::tagged(tag));
        let slots = EP * CAP * HIDDEN;
        Ok(Buffers {
            tokens: SymVec::from_host_with(
                pool,
                &first_tokens_u32(d),
                AllocDesc::tagged("tokens"),
            )?,
            step: SymVec::from_host_with(pool, &[0u32], AllocDesc::tagged("tokens"))?,
            y: f(BATCH * HIDDEN, "activations")?,
            kv: f(STEPS * BATCH * HIDDEN, "kv-cache")?,
            dispatch: f(slots, "moe")?,
            received: f(slots, "moe")?,
            expert_out: f(slots, "moe")?,
            combined: f(slots, "moe")?,
            mine: f(CAP * HIDDEN, "activations")?,
            z: f(BATCH * HIDDEN, "activations")?,
            logits: f(BATCH * VOCAB / TP, "logits")?,
            all_logits: f(BATCH * VOCAB, "logits")?,
        })
    }

    /// Back to the first step (host copies, which wait for the streams that used them).
    fn reset(&mut self, d: usize) -> Result<()> {
        self.tokens.copy_from_host(&first_tokens_u32(d))?;
        self.step.copy_from_host(&[0])
    }
}

fn first_tokens_u32(d: usize) -> [u32; BATCH] {
    first_tokens(d).map(|t| t as u32)
}

/// What the kernels record for the host to check.
#[derive(Default)]
struct Log {
    /// Steps whose logits differ from the reference's.
    mismatches: AtomicUsize,
    /// Steps run.
    steps: AtomicUsize,
    tokens: Mutex<Vec<usize>>,
}

type Kernel = Arc<dyn Fn() + Send + Sync>;

/// The rank's compute, one host function per stage of the step.
struct Kernels {
    dense: Kernel,
    dispatch: Kernel,
    expert: Kernel,
    combine: Kernel,
    project: Kernel,
    pick: Kernel,
}

impl Kernels {
    /// The kernels of world rank `rank` over `b`, checking against `expected`.
    ///
    /// Each kernel views the buffers it uses only while it runs. The kernels run one at a
    /// time on the compute stream, and the communication stream's collectives on these
    /// buffers are ordered against them by events, so nothing else uses a buffer a kernel
    /// views (the safety contract of [`Dev::view`]); the buffers outlive every launch and
    /// the graph ([`run`] drops them last).
    fn new(
        rank: usize,
        b: &Buffers,
        w: &Arc<Weights>,
        expected: &Arc<Vec<Vec<Vec<f32>>>>,
        log: &Arc<Log>,
    ) -> Kernels {
        let (d, t) = (rank / TP, rank % TP);
        let (tokens, step) = (Dev::of(&b.tokens), Dev::of(&b.step));
        let (y, kv, dispatch) = (Dev::of(&b.y), Dev::of(&b.kv), Dev::of(&b.dispatch));
        let (received, expert_out) = (Dev::of(&b.received), Dev::of(&b.expert_out));
        let (combined, mine, z) = (Dev::of(&b.combined), Dev::of(&b.mine), Dev::of(&b.z));
        let (logits, all_logits) = (Dev::of(&b.logits), Dev::of(&b.all_logits));
        // Every `view` below is safe as the doc comment says.
        let now = move || {
            // SAFETY: see above.
            unsafe { step.view()[0] as usize }
        };
        let dense = {
            let w = w.clone();
            Arc::new(move || {
                // SAFETY: see above.
                let (tokens, y) = unsafe { (tokens.view(), y.view()) };
                let x: Vec<f32> = tokens
                    .iter()
                    .flat_map(|&tok| w.embed[tok as usize * HIDDEN..][..HIDDEN].iter().copied())
                    .collect();
                y.fill(0.0);
                w.dense_part(t, &x, y);
            }) as Kernel
        };
        let dispatch_k = Arc::new(move || {
            let s = now();
            // SAFETY: see above.
            let (y, kv, out) = unsafe { (y.view(), kv.view(), dispatch.view()) };
            kv[s * BATCH * HIDDEN..][..BATCH * HIDDEN].copy_from_slice(y);
            out.fill(0.0);
            for r in rows_of(t) {
                let slot = expert_of(d, r, s) * CAP + r / TP;
                out[slot * HIDDEN..][..HIDDEN].copy_from_slice(&y[r * HIDDEN..][..HIDDEN]);
            }
        }) as Kernel;
        let expert = {
            let w = w.clone();
            Arc::new(move || {
                // SAFETY: see above.
                let (rows, out) = unsafe { (received.view(), expert_out.view()) };
                out.fill(0.0);
                w.expert(rank, rows, out);
            }) as Kernel
        };
        let combine = Arc::new(move || {
            let s = now();
            // SAFETY: see above.
            let (back, out) = unsafe { (combined.view(), mine.view()) };
            for r in rows_of(t) {
                let slot = expert_of(d, r, s) * CAP + r / TP;
                out[(r / TP) * HIDDEN..][..HIDDEN]
                    .copy_from_slice(&back[slot * HIDDEN..][..HIDDEN]);
            }
        }) as Kernel;
        let project = {
            let w = w.clone();
            Arc::new(move || {
                // SAFETY: see above.
                let (zs, out) = unsafe { (z.view(), logits.view()) };
                let zb: Vec<f32> = (0..BATCH)
                    .flat_map(|r| zs[gathered_index(r) * HIDDEN..][..HIDDEN].to_vec())
                    .collect();
                out.fill(0.0);
                matmul(&zb, &w.wv[t], out, HIDDEN, VOCAB / TP);
            }) as Kernel
        };
        let pick = {
            let (expected, log) = (expected.clone(), log.clone());
            Arc::new(move || {
                // SAFETY: see above.
                let (gathered, toks, s) =
                    unsafe { (all_logits.view(), tokens.view(), step.view()) };
                let at = s[0] as usize;
                if expected
                    .get(at)
                    .is_none_or(|e| e[d].as_slice() != &gathered[..])
                {
                    log.mismatches.fetch_add(1, Ordering::SeqCst);
                }
                let next = argmax_tokens(gathered);
                for (tok, &n) in toks.iter_mut().zip(&next) {
                    *tok = n as u32;
                }
                log.tokens.lock().unwrap().push(next[0]);
                log.steps.fetch_add(1, Ordering::SeqCst);
                s[0] += 1;
            }) as Kernel
        };
        Kernels {
            dense,
            dispatch: dispatch_k,
            expert,
            combine,
            project,
            pick,
        }
    }
}

/// The two streams, the pool on the communication stream (world and TP pair), and an event
/// pair per hop between the streams.
struct Streams {
    compute: Stream,
    comm: Stream,
    ep: SymPool,
    tp: SymPool,
    hops: Vec<(Event, Event)>,
}

impl Streams {
    /// Runs `collective` on the communication stream after the compute stream's work so
    /// far, and makes the compute stream's later work wait for it (hop `i`).
    fn communicate(&self, i: usize, collective: impl FnOnce() -> Result<()>) -> Result<()> {
        let (to_comm, to_compute) = &self.hops[i];
        to_comm.record(&self.compute)?;
        self.comm.wait(to_comm)?;
        collective()?;
        to_compute.record(&self.comm)?;
        self.compute.wait(to_compute)
    }

    fn launch(&self, k: &Kernel) -> Result<()> {
        let k = k.clone();
        self.compute.launch_replayable_host_fn(move || k())
    }
}

/// Enqueues one decode step.
fn enqueue_step(s: &Streams, k: &Kernels, b: &mut Buffers) -> Result<()> {
    let slots = [CAP * HIDDEN; EP];
    let displs = packed_displacements(&slots);
    s.launch(&k.dense)?;
    s.communicate(0, || {
        s.tp.all_reduce_in_place(&mut b.y, symheap::ReduceOp::Sum)
    })?;
    s.launch(&k.dispatch)?;
    // The MoE layer's AlltoAllV: the same fixed counts at every step.
    let exchange = |input: &SymVec<f32>, output: &mut SymVec<f32>| {
        s.ep.all_to_all_v(input, &slots, &displs, output, &slots, &displs)
    };
    s.communicate(1, || exchange(&b.dispatch, &mut b.received))?;
    s.launch(&k.expert)?;
    s.communicate(2, || exchange(&b.expert_out, &mut b.combined))?;
    s.launch(&k.combine)?;
    s.communicate(3, || s.tp.all_gather(&b.mine, &mut b.z))?;
    s.launch(&k.project)?;
    s.communicate(4, || s.tp.all_gather(&b.logits, &mut b.all_logits))?;
    s.launch(&k.pick)
}

/// Pool calls so far: allocations, frees and collectives.
fn pool_calls(pool: &SymPool) -> u64 {
    let s = pool.stats();
    s.alloc_count + s.free_count + s.collectives.iter().map(|c| c.count).sum::<u64>()
}

/// What one loop measured: steps/s, host microseconds to enqueue a step, pool calls a step.
struct Loop {
    rate: f64,
    host_us: f64,
    calls: f64,
}

/// Runs `STEPS` steps through `enqueue`, then waits for both streams.
fn timed(pool: &SymPool, s: &Streams, mut enqueue: impl FnMut() -> Result<()>) -> Result<Loop> {
    let calls = pool_calls(pool);
    let start = Instant::now();
    for _ in 0..STEPS {
        enqueue()?;
    }
    let host = start.elapsed();
    s.compute.synchronize()?;
    s.comm.synchronize()?;
    let total = start.elapsed();
    Ok(Loop {
        rate: STEPS as f64 / total.as_secs_f64(),
        host_us: host.as_secs_f64() * 1e6 / STEPS as f64,
        calls: (pool_calls(pool) - calls) as f64 / STEPS as f64,
    })
}

/// Checks what the kernels logged for one loop, and clears it.
fn check(log: &Log, rank: usize, expected: &[Vec<Vec<f32>>], what: &str) -> Vec<usize> {
    let d = rank / TP;
    assert_eq!(
        log.steps.swap(0, Ordering::SeqCst),
        STEPS,
        "rank {rank}: {what}: steps run"
    );
    assert_eq!(
        log.mismatches.swap(0, Ordering::SeqCst),
        0,
        "rank {rank}: {what}: logits differ from the host reference"
    );
    let tokens = std::mem::take(&mut *log.tokens.lock().unwrap());
    let want: Vec<usize> = expected.iter().map(|e| argmax_tokens(&e[d])[0]).collect();
    assert_eq!(tokens, want, "rank {rank}: {what}: tokens");
    tokens
}

/// The graph-mode run of world rank `rank`: the step eagerly, then captured and replayed.
pub fn run(
    pool: &SymPool,
    groups: &ParallelGroups,
    rank: usize,
    expected: &[Vec<Vec<f32>>],
) -> Result<GraphReport> {
    assert!(
        pool.runtime().is_host_addressable(),
        "the step's kernels are host functions over device memory: the emulator's"
    );
    let rt = pool.runtime();
    let (compute, comm) = (Stream::new(rt)?, Stream::new(rt)?);
    let streams = Streams {
        tp: pool.on_group(groups.tp())?.on(&comm),
        ep: pool.on(&comm),
        hops: (0..5)
            .map(|_| Ok((Event::new(rt)?, Event::new(rt)?)))
            .collect::<Result<_>>()?,
        compute,
        comm,
    };
    // Allocated on the compute stream, which uses them first: recycled memory is zeroed in
    // that stream's order, before the kernels.
    let mut bufs = Buffers::new(&pool.on(&streams.compute), rank / TP)?;
    let log = Arc::new(Log::default());
    let expected_arc = Arc::new(expected.to_vec());
    let kernels = Kernels::new(rank, &bufs, &Arc::new(Weights::new()), &expected_arc, &log);

    let eager = timed(pool, &streams, || {
        enqueue_step(&streams, &kernels, &mut bufs)
    })?;
    let tokens = check(&log, rank, expected, "eager");

    bufs.reset(rank / TP)?;
    let graph = pool.capture(&streams.compute, |_| {
        enqueue_step(&streams, &kernels, &mut bufs)
    })?;
    let replayed = timed(pool, &streams, || graph.replay(&streams.compute))?;
    check(&log, rank, expected, "replayed");
    // The graph first: the buffers its kernels use outlive it.
    drop(graph);
    drop(kernels);
    drop(bufs);
    Ok(GraphReport {
        eager_rate: eager.rate,
        replayed_rate: replayed.rate,
        eager_host_us: eager.host_us,
        replayed_host_us: replayed.host_us,
        eager_calls: eager.calls,
        replayed_calls: replayed.calls,
        tokens,
    })
}
