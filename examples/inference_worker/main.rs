//! The main job: an expert- and tensor-parallel decode loop on four emulated ranks, one
//! process per device as real deployments run (`--threads`: four threads of one process),
//! laid out as TP = 2 x EP = 4: two tensor-parallel pairs ({0, 1} and {2, 3}), each a
//! data-parallel replica decoding its own sequences, and one expert-parallel group of all
//! four. Every tensor comes from one symmetric pool on the world, attached to the TP pairs,
//! and is freed each step.
//!
//! ```sh
//! cargo run --release --example inference_worker              # 4 processes
//! cargo run --release --example inference_worker -- --threads # 4 threads
//! cargo run --release --example inference_worker -- --graph   # only the graph-mode step
//! cargo run --release --example inference_worker -- --colocate # only the RL colocate cycle
//! cargo run --release --example inference_worker -- --elastic  # only the lost-rank part
//! cargo run --release --example inference_worker -- --snapshot /tmp/snap
//! cargo run --release -p symheap-tools --bin symheap-map -- /tmp/snap/rank-*.json -o /tmp/snap/heap-map.html
//! ```
//!
//! Started plainly, the program re-runs itself through the launcher as four processes
//! ([`Job::this_program`]), each of which joins with [`Comm::from_env`] and splits its groups
//! with [`ParallelGroups`]; on an Atlas A3 node the same binary, built against
//! `symheap::raw::load` instead of the emulator, runs under `symheap-run -n 16`, torchrun or
//! mpirun.
//!
//! Each step, in each TP pair: the tokens' embeddings, a column-parallel up-projection, GELU
//! and a row-parallel down-projection, AllReduced in the pair. Then the MoE layer over EP:
//! each TP rank dispatches its share of the pair's rows to the rank that hosts each row's
//! expert (AlltoAllV), every rank applies its expert to what it received, and the results go
//! back (AlltoAllV again) and are AllGathered in the pair. A KV cache grows with the sequence.
//! Last, a column-parallel vocabulary projection, AllGathered in the pair, picks the next
//! tokens. Every rank checks its results, step by step, against a host reference that
//! computes the whole model alone. Then it runs the same loop registering and deregistering a
//! window per tensor (in the communicator the tensor is used in), the naive alternative, and
//! prints both rates and their ratio.
//!
//! Then the graph mode of a real decode worker ([`graph`]): the step with static shapes,
//! compute on one stream and collectives on another, run eagerly and then captured once as an
//! ACL graph ([`SymPool::capture`]) and replayed each step, both checked against the host
//! reference; it prints both rates, the host time to enqueue a step and the pool calls per
//! step (none for a replay). `--graph` runs only this part.
//!
//! Then the RL colocate cycle ([`colocate`]), as verl runs vllm-ascend beside a trainer:
//! with each device limited to what the worker uses awake plus one granule, the worker
//! decodes, sleeps ([`SymPool::sleep`]: weights offloaded to host memory, KV cache and
//! activations discarded), a training phase allocates and writes the device memory the
//! sleep freed, frees it, and the worker wakes, re-prefills its KV cache and decodes on; the
//! same allocation tried while awake fails with out-of-memory. Four cycles alternate a
//! shallow sleep and a deep one (communicators destroyed; woken on a new world with new
//! groups, [`SymPool::wake_on`]). It prints, per cycle, the device memory in use awake,
//! asleep and after the wake, the sleep and wake times and the residual growth (asserted 0),
//! and checks that the tokens equal an uninterrupted run's. `--colocate` runs only this part.
//!
//! Last, a job that survives a lost rank ([`elastic`]), in jobs of its own that the parent
//! starts (as processes only: `--threads` skips it). Four ranks under the elastic launcher,
//! laid out as EP = 4 x TP = 1 (each rank a replica with the dense layers whole, hosting 2 of
//! 8 experts), decode; one rank, chosen at random, SIGKILLs itself at a random step. The
//! survivors form their world ([`symheap::Survivors::shrink`]), move the pool to it
//! ([`SymPool::shrink`]), re-shard the experts over 3 ranks (those kept moved on the device,
//! the lost ones loaded from the host), re-prefill the KV cache the cut-short step left
//! unspecified, redo that step and decode to the end, every step checked against the host
//! reference. It prints the time from the kill to the survivors' first good step, by phase,
//! against a full restart of the survivors' job measured in the same run.
//! `INFERENCE_WORKER_RESIDENT_MIB` sets each rank's resident weights (default 256 MiB),
//! `INFERENCE_WORKER_ELASTIC_SEED` the victim and its step. `--elastic` runs only this part.
//!
//! With `--snapshot DIR` every rank writes `DIR/rank-N.json`, its pool's
//! [`snapshot`](SymPool::snapshot) during the last decode step (weights, the KV cache, that
//! step's tensors, tagged), and rank 0 prints the `symheap-map` command that draws them.

pub mod colocate;
pub mod elastic;
mod graph;

use std::ops::DerefMut;
use std::path::{Path, PathBuf};
use std::time::Instant;

use symheap::raw::Window;
use symheap::{
    AllocDesc, CommConfig, Element, PoolConfig, Result, Runtime, Snapshot, SymPool, SymVec, emu,
};
use symheap::{Comm, GroupSizes, ParallelGroups, ReduceOp, Stream, packed_displacements};
use symheap_tools::launcher::{self, Job};

const RANKS: u32 = 4;
/// Tensor-parallel ranks per pair, and expert-parallel ranks (the world).
const TP: usize = 2;
const EP: usize = 4;
/// Data-parallel replicas: one per TP pair.
const DP: usize = RANKS as usize / TP;
/// The worker's parallel groups.
const SIZES: GroupSizes = GroupSizes {
    tp: TP as u32,
    dp: DP as u32,
    ep: EP as u32,
};
const STEPS: usize = 300;
/// Sequences each replica decodes.
const BATCH: usize = 2;
const HIDDEN: usize = 64;
const FFN: usize = 4 * HIDDEN;
const VOCAB: usize = 512;
/// The KV cache grows in chunks of this many tokens (a reallocation each time it fills).
const KV_CHUNK: usize = 32;

/// Which communicator a tensor's collectives run on.
#[derive(Clone, Copy)]
enum Group {
    /// The rank's tensor-parallel pair.
    Tp,
    /// The expert-parallel group (the world).
    Ep,
}

/// Where a step's tensors come from: the pool, or a freshly registered window each.
trait Tensors {
    type Tensor;
    /// A zeroed tensor for collectives on `group`; `tag` says what it is for (the pool's
    /// stats and snapshots use it).
    fn zeros(&self, len: usize, tag: &'static str, group: Group) -> Result<Self::Tensor>;
    fn host<'a>(&self, t: &'a mut Self::Tensor) -> Result<impl DerefMut<Target = [f32]> + 'a>;
    /// AllReduce (sum) in the TP pair, in place.
    fn tp_all_reduce(&self, t: &mut Self::Tensor) -> Result<()>;
    /// AllGather in the TP pair.
    fn tp_all_gather(&self, input: &Self::Tensor, output: &mut Self::Tensor) -> Result<()>;
    /// AlltoAllV over EP: `send[p]` elements to rank `p`, `recv[p]` from it, packed.
    fn ep_all_to_all_v(
        &self,
        input: &Self::Tensor,
        send: &[usize],
        output: &mut Self::Tensor,
        recv: &[usize],
    ) -> Result<()>;
    fn end_step(&self) -> Result<()>;
    /// What the backing memory holds now, where there is a pool to ask.
    fn snapshot(&self) -> Option<Snapshot> {
        None
    }
}

/// symheap: one pool on the world, attached to the TP pair; blocks carved per tensor.
struct Pooled {
    pool: SymPool,
    /// The same pool, its collectives on the TP pair.
    tp: SymPool,
}

impl Tensors for Pooled {
    type Tensor = SymVec<f32>;
    fn zeros(&self, len: usize, tag: &'static str, _: Group) -> Result<SymVec<f32>> {
        SymVec::zeroed_with(&self.pool, len, AllocDesc::tagged(tag))
    }
    fn host<'a>(&self, t: &'a mut SymVec<f32>) -> Result<impl DerefMut<Target = [f32]> + 'a> {
        t.host_mut()
    }
    fn tp_all_reduce(&self, t: &mut SymVec<f32>) -> Result<()> {
        self.tp.all_reduce_in_place(t, ReduceOp::Sum)
    }
    fn tp_all_gather(&self, input: &SymVec<f32>, output: &mut SymVec<f32>) -> Result<()> {
        self.tp.all_gather(input, output)
    }
    fn ep_all_to_all_v(
        &self,
        input: &SymVec<f32>,
        send: &[usize],
        output: &mut SymVec<f32>,
        recv: &[usize],
    ) -> Result<()> {
        let (sd, rd) = (packed_displacements(send), packed_displacements(recv));
        self.pool.all_to_all_v(input, send, &sd, output, recv, &rd)
    }
    fn end_step(&self) -> Result<()> {
        self.pool.synchronize()
    }
    fn snapshot(&self) -> Option<Snapshot> {
        Some(self.pool.snapshot())
    }
}

/// The naive alternative: every tensor reserves, allocates, maps and registers its own window
/// in the communicator it is used in (collective), and deregisters and releases it when
/// dropped.
struct PerTensor {
    groups: ParallelGroups,
    stream: Stream,
}

/// A window that owns its memory: deregistered, then unmapped and freed, on drop.
struct Registered {
    window: Window,
    len: usize,
}

impl PerTensor {
    fn comm(&self, group: Group) -> &Comm {
        match group {
            Group::Tp => self.groups.tp(),
            Group::Ep => self.groups.ep(),
        }
    }
}

impl Tensors for PerTensor {
    type Tensor = Registered;
    fn zeros(&self, len: usize, _tag: &'static str, group: Group) -> Result<Registered> {
        let comm = self.comm(group);
        let window = Window::allocate(comm, (len * 4) as u64)?;
        // SAFETY: fresh, mapped memory of at least `len` floats, not yet used by any stream.
        unsafe { comm.runtime().raw().memset(window.ptr(), 0, len * 4)? };
        Ok(Registered { window, len })
    }
    fn host<'a>(&self, t: &'a mut Registered) -> Result<impl DerefMut<Target = [f32]> + 'a> {
        // SAFETY: emulated device memory is host memory; every collective on it was
        // synchronised before returning, and `&mut` excludes other uses.
        Ok(unsafe { std::slice::from_raw_parts_mut(t.window.ptr().as_raw().cast(), t.len) })
    }
    fn tp_all_reduce(&self, t: &mut Registered) -> Result<()> {
        let (p, tp) = (t.window.ptr(), self.groups.tp());
        // SAFETY: a live window of `len` floats, synchronised before returning.
        unsafe {
            tp.raw().all_reduce(
                p,
                p,
                t.len as u64,
                f32::DATA_TYPE.into(),
                ReduceOp::Sum,
                &self.stream,
            )?
        };
        tp.synchronize(&self.stream)
    }
    fn tp_all_gather(&self, input: &Registered, output: &mut Registered) -> Result<()> {
        let tp = self.groups.tp();
        let (i, o) = (input.window.ptr(), output.window.ptr());
        // SAFETY: live windows sized for the gather, synchronised before returning.
        unsafe {
            tp.raw()
                .all_gather(i, o, input.len as u64, f32::DATA_TYPE.into(), &self.stream)?
        };
        tp.synchronize(&self.stream)
    }
    fn ep_all_to_all_v(
        &self,
        input: &Registered,
        send: &[usize],
        output: &mut Registered,
        recv: &[usize],
    ) -> Result<()> {
        let ep = self.groups.ep();
        let words = |v: &[usize]| v.iter().map(|&c| c as u64).collect::<Vec<u64>>();
        let (sc, rc) = (words(send), words(recv));
        let (sd, rd) = (
            words(&packed_displacements(send)),
            words(&packed_displacements(recv)),
        );
        let (i, o) = (input.window.ptr(), output.window.ptr());
        // SAFETY: live windows holding every packed region, synchronised before returning.
        unsafe {
            ep.raw().all_to_all_v(
                i,
                &sc,
                &sd,
                o,
                &rc,
                &rd,
                f32::DATA_TYPE.into(),
                &self.stream,
            )?
        };
        ep.synchronize(&self.stream)
    }
    fn end_step(&self) -> Result<()> {
        self.groups.world().synchronize(&self.stream)
    }
}

/// The model's weights, deterministic pseudo-random: TP shard `t` of the dense layers (the
/// same in every replica), every expert, and the replicated embedding. Each rank uses its
/// shard and its expert; the host reference uses them all.
struct Weights {
    w1: Vec<Vec<f32>>,      // per shard: HIDDEN x FFN/TP   (column-parallel)
    w2: Vec<Vec<f32>>,      // per shard: FFN/TP x HIDDEN   (row-parallel)
    wv: Vec<Vec<f32>>,      // per shard: HIDDEN x VOCAB/TP (column-parallel)
    experts: Vec<Vec<f32>>, // per EP rank: HIDDEN x HIDDEN
    embed: Vec<f32>,        // VOCAB x HIDDEN (replicated)
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
    fn new() -> Self {
        let shards = |seed: u64, len: usize, n: usize| {
            (0..n as u64)
                .map(|i| pseudo_random(seed + i, len))
                .collect()
        };
        Weights {
            w1: shards(10, HIDDEN * FFN / TP, TP),
            w2: shards(20, FFN / TP * HIDDEN, TP),
            wv: shards(30, HIDDEN * VOCAB / TP, TP),
            experts: (0..EP).map(expert_weights).collect(),
            embed: pseudo_random(1, VOCAB * HIDDEN),
        }
    }

    /// TP shard `t`'s part of the dense block on `x` (rows of HIDDEN): what the pair
    /// AllReduces.
    fn dense_part(&self, t: usize, x: &[f32], out: &mut [f32]) {
        let rows = x.len() / HIDDEN;
        let mut h = vec![0.0; rows * FFN / TP];
        matmul(x, &self.w1[t], &mut h, HIDDEN, FFN / TP);
        h.iter_mut().for_each(|v| *v = gelu(*v));
        matmul(&h, &self.w2[t], out, FFN / TP, HIDDEN);
    }

    /// Expert `e` on `rows` (each HIDDEN long), with the residual, into `out`.
    fn expert(&self, e: usize, rows: &[f32], out: &mut [f32]) {
        apply_expert(&self.experts[e], rows, out);
    }

    /// The embeddings of `tokens`, one row of HIDDEN each.
    fn embedding(&self, tokens: &[usize]) -> Vec<f32> {
        tokens
            .iter()
            .flat_map(|&t| self.embed[t * HIDDEN..][..HIDDEN].iter().copied())
            .collect()
    }

    /// The whole dense block on `x` (rows of HIDDEN): every TP shard's part, summed in shard
    /// order, as the pair's AllReduce sums them.
    fn dense(&self, x: &[f32]) -> Vec<f32> {
        let mut y = vec![0.0; x.len()];
        for t in 0..TP {
            let mut part = vec![0.0; x.len()];
            self.dense_part(t, x, &mut part);
            y.iter_mut().zip(&part).for_each(|(a, &p)| *a += p);
        }
        y
    }

    /// The whole vocabulary projection of `z` (BATCH rows of HIDDEN): every TP shard's
    /// logits, concatenated as the pair's AllGather lays them out ([`argmax_tokens`] reads
    /// that layout).
    fn logits(&self, z: &[f32]) -> Vec<f32> {
        let mut logits = vec![0.0; BATCH * VOCAB];
        for t in 0..TP {
            let shard = &mut logits[t * BATCH * VOCAB / TP..][..BATCH * VOCAB / TP];
            matmul(z, &self.wv[t], shard, HIDDEN, VOCAB / TP);
        }
        logits
    }
}

/// Expert `e`'s weights (HIDDEN x HIDDEN), deterministic pseudo-random: the TP x EP layout
/// uses the first `EP`, the elastic part ([`elastic`]) more.
fn expert_weights(e: usize) -> Vec<f32> {
    pseudo_random(40 + e as u64, HIDDEN * HIDDEN)
}

/// An expert of weights `weights` on `rows` (each HIDDEN long), with the residual, into
/// `out`.
fn apply_expert(weights: &[f32], rows: &[f32], out: &mut [f32]) {
    matmul(rows, weights, out, HIDDEN, HIDDEN);
    out.iter_mut().zip(rows).for_each(|(o, &r)| *o += r);
}

/// The first tokens of replica `d`.
fn first_tokens(d: usize) -> [usize; BATCH] {
    std::array::from_fn(|b| 1 + 7 * d + b)
}

/// The EP rank whose expert row `b` of replica `d` goes to at `step`: a fixed routing that
/// sends rows everywhere over the steps (real routers score the row; any rule will do here).
fn expert_of(d: usize, b: usize, step: usize) -> usize {
    (d * BATCH + b + step) % EP
}

/// The rows of the pair that TP rank `t` dispatches: its share, `t, t + TP, ...`.
fn rows_of(t: usize) -> impl Iterator<Item = usize> {
    (t..BATCH).step_by(TP)
}

/// The index of `b` in the pair's gathered rows (TP rank major).
fn gathered_index(b: usize) -> usize {
    (b % TP) * (BATCH / TP) + b / TP
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

/// The next tokens from a pair's gathered logits (`TP` shards of `BATCH x VOCAB/TP`).
fn argmax_tokens(gathered: &[f32]) -> [usize; BATCH] {
    let (part, shard) = (VOCAB / TP, BATCH * VOCAB / TP);
    std::array::from_fn(|b| {
        let score = |v: usize| gathered[(v / part) * shard + b * part + v % part];
        (0..VOCAB)
            .max_by(|&a, &c| score(a).total_cmp(&score(c)))
            .unwrap_or(0)
    })
}

/// The whole model on the host, every replica and shard alone, with the same arithmetic as
/// the ranks: per step, replica `d`'s gathered logits.
fn reference(w: &Weights) -> Vec<Vec<Vec<f32>>> {
    let moe = |d, b, step, row: &[f32], out: &mut [f32]| w.expert(expert_of(d, b, step), row, out);
    let mut tokens: Vec<[usize; BATCH]> = (0..DP).map(first_tokens).collect();
    let mut out = Vec::with_capacity(STEPS);
    for step in 0..STEPS {
        let mut step_logits = Vec::with_capacity(DP);
        for (d, toks) in tokens.iter_mut().enumerate() {
            let logits = reference_step(w, d, step, toks, moe);
            *toks = argmax_tokens(&logits);
            step_logits.push(logits);
        }
        out.push(step_logits);
    }
    out
}

/// One step of the whole model on the host for replica `d`, whose input tokens at `step` are
/// `tokens`, and whose MoE layer is `moe(d, b, step, row, out)`: the expert that row `b` goes
/// to, on `row`, into `out` (zeroed). The logits, in the gathered layout.
fn reference_step(
    w: &Weights,
    d: usize,
    step: usize,
    tokens: &[usize; BATCH],
    moe: impl Fn(usize, usize, usize, &[f32], &mut [f32]),
) -> Vec<f32> {
    let y = w.dense(&w.embedding(tokens));
    let mut z = vec![0.0; BATCH * HIDDEN];
    for (b, (row, z_row)) in y.chunks(HIDDEN).zip(z.chunks_mut(HIDDEN)).enumerate() {
        moe(d, b, step, row, z_row);
    }
    w.logits(&z)
}

/// What a decode loop produced.
struct Decoded {
    /// Steps per second.
    rate: f64,
    /// The token sequence of this replica's batch row 0.
    tokens: Vec<usize>,
    /// The backend's snapshot during the last step, before its synchronisation.
    snapshot: Option<Snapshot>,
}

/// Runs the decode loop of world rank `rank`, checking every step's logits against
/// `expected` (the host reference's).
fn decode<B: Tensors>(backend: &B, rank: usize, expected: &[Vec<Vec<f32>>]) -> Result<Decoded> {
    let mut decoder = Decoder::new(backend, rank)?;
    let start = Instant::now();
    decoder.run(backend, expected, expected.len())?;
    Ok(Decoded {
        rate: expected.len() as f64 / start.elapsed().as_secs_f64(),
        tokens: decoder.history,
        snapshot: decoder.snapshot,
    })
}

/// The decode loop's state between steps, so that a worker can stop (to sleep) and go on.
struct Decoder<B: Tensors> {
    w: Weights,
    rank: usize,
    /// The next step's input tokens.
    tokens: [usize; BATCH],
    /// Every step's input tokens so far (what a prefill recomputes the KV cache from).
    inputs: Vec<[usize; BATCH]>,
    /// The token sequence of this replica's batch row 0.
    history: Vec<usize>,
    kv: B::Tensor,
    /// The backend's snapshot during the last step, before its synchronisation.
    snapshot: Option<Snapshot>,
}

impl<B: Tensors> Decoder<B> {
    /// Before the first step: the first tokens and an empty KV cache of one chunk.
    fn new(backend: &B, rank: usize) -> Result<Self> {
        Ok(Decoder {
            w: Weights::new(),
            rank,
            tokens: first_tokens(rank / TP),
            inputs: Vec::with_capacity(STEPS),
            history: Vec::with_capacity(STEPS),
            kv: backend.zeros(KV_CHUNK * BATCH * HIDDEN, "kv-cache", Group::Tp)?,
            snapshot: None,
        })
    }

    /// Steps done so far.
    fn step(&self) -> usize {
        self.inputs.len()
    }

    /// The next `steps` steps (at most to the end of `expected`), each checked against the
    /// host reference.
    fn run(&mut self, backend: &B, expected: &[Vec<Vec<f32>>], steps: usize) -> Result<()> {
        let (rank, w) = (self.rank, &self.w);
        let (d, t) = (rank / TP, rank % TP);
        let first = self.step();
        let last = (first + steps).min(expected.len());
        let (tokens, kv) = (&mut self.tokens, &mut self.kv);
        for (step, expected) in expected.iter().enumerate().take(last).skip(first) {
            self.inputs.push(*tokens);
            // Embedding lookup (replicated in the pair), then the dense block, AllReduced.
            let x: Vec<f32> = tokens
                .iter()
                .flat_map(|&tok| w.embed[tok * HIDDEN..][..HIDDEN].iter().copied())
                .collect();
            let mut y = backend.zeros(BATCH * HIDDEN, "activations", Group::Tp)?;
            w.dense_part(t, &x, &mut backend.host(&mut y)?);
            backend.tp_all_reduce(&mut y)?;
            let ys = backend.host(&mut y)?.to_vec();
            // Append to the KV cache, growing it by a chunk when full.
            if (step + 1) * BATCH * HIDDEN > backend.host(kv)?.len() {
                let len = (step + 1 + KV_CHUNK) * BATCH * HIDDEN;
                let mut bigger = backend.zeros(len, "kv-cache", Group::Tp)?;
                let old = backend.host(kv)?.to_vec();
                backend.host(&mut bigger)?[..old.len()].copy_from_slice(&old);
                *kv = bigger;
            }
            backend.host(kv)?[step * BATCH * HIDDEN..][..BATCH * HIDDEN].copy_from_slice(&ys);
            // MoE dispatch: this rank's rows to their experts' ranks, in row order per rank.
            let (sent, got) = moe_counts(d, t, rank, step);
            let mut dispatch =
                backend.zeros(sent.iter().sum::<usize>().max(1), "moe", Group::Ep)?;
            let mut at = 0;
            for e in 0..EP {
                for b in rows_of(t).filter(|&b| expert_of(d, b, step) == e) {
                    backend.host(&mut dispatch)?[at..][..HIDDEN]
                        .copy_from_slice(&ys[b * HIDDEN..][..HIDDEN]);
                    at += HIDDEN;
                }
            }
            let mut received = backend.zeros(got.iter().sum::<usize>().max(1), "moe", Group::Ep)?;
            backend.ep_all_to_all_v(&dispatch, &sent, &mut received, &got)?;
            // This rank's expert on what it received; the results go back where they came from.
            let mut expert_out =
                backend.zeros(got.iter().sum::<usize>().max(1), "moe", Group::Ep)?;
            {
                let rows = backend.host(&mut received)?.to_vec();
                let n = got.iter().sum::<usize>();
                w.expert(rank, &rows[..n], &mut backend.host(&mut expert_out)?[..n]);
            }
            let mut combined =
                backend.zeros(sent.iter().sum::<usize>().max(1), "moe", Group::Ep)?;
            backend.ep_all_to_all_v(&expert_out, &got, &mut combined, &sent)?;
            // Back in row order, then gathered in the pair.
            let mut mine = backend.zeros(BATCH / TP * HIDDEN, "activations", Group::Tp)?;
            {
                let back = backend.host(&mut combined)?.to_vec();
                let mut out = backend.host(&mut mine)?;
                let mut at = 0;
                for e in 0..EP {
                    for b in rows_of(t).filter(|&b| expert_of(d, b, step) == e) {
                        out[(b / TP) * HIDDEN..][..HIDDEN].copy_from_slice(&back[at..][..HIDDEN]);
                        at += HIDDEN;
                    }
                }
            }
            let mut z = backend.zeros(BATCH * HIDDEN, "activations", Group::Tp)?;
            backend.tp_all_gather(&mine, &mut z)?;
            let zs = backend.host(&mut z)?.to_vec();
            let zb: Vec<f32> = (0..BATCH)
                .flat_map(|b| zs[gathered_index(b) * HIDDEN..][..HIDDEN].to_vec())
                .collect();
            // Column-parallel vocabulary projection; gather the shards and take the argmax.
            let mut logits = backend.zeros(BATCH * VOCAB / TP, "logits", Group::Tp)?;
            matmul(
                &zb,
                &w.wv[t],
                &mut backend.host(&mut logits)?,
                HIDDEN,
                VOCAB / TP,
            );
            let mut all_logits = backend.zeros(BATCH * VOCAB, "logits", Group::Tp)?;
            backend.tp_all_gather(&logits, &mut all_logits)?;
            let gathered = backend.host(&mut all_logits)?.to_vec();
            assert!(
                gathered == expected[d],
                "rank {rank}: step {step}'s logits differ from the host reference"
            );
            *tokens = argmax_tokens(&gathered);
            self.history.push(tokens[0]);
            // The step's tensors are done with: those that took part in a collective wait for
            // the synchronisation (pending), the others are free at once.
            drop((
                y, dispatch, received, expert_out, combined, mine, z, logits, all_logits,
            ));
            if step + 1 == STEPS {
                self.snapshot = backend.snapshot();
            }
            backend.end_step()?;
        }
        Ok(())
    }

    /// The KV cache's contents so far (what the steps appended).
    fn kv_contents(&mut self, backend: &B) -> Result<Vec<f32>> {
        let n = self.step() * BATCH * HIDDEN;
        Ok(backend.host(&mut self.kv)?[..n].to_vec())
    }

    /// Recomputes the KV cache from every step's input tokens in one batched pass (the dense
    /// block on all the rows, AllReduced in the pair), as a worker re-prefills its sequences
    /// after a sleep discarded the cache.
    fn prefill(&mut self, backend: &B) -> Result<()> {
        let t = self.rank % TP;
        let rows = self.step() * BATCH;
        let x: Vec<f32> = (self.inputs.iter().flatten())
            .flat_map(|&tok| self.w.embed[tok * HIDDEN..][..HIDDEN].iter().copied())
            .collect();
        let mut y = backend.zeros(rows.max(1) * HIDDEN, "activations", Group::Tp)?;
        self.w
            .dense_part(t, &x, &mut backend.host(&mut y)?[..rows * HIDDEN]);
        backend.tp_all_reduce(&mut y)?;
        let ys = backend.host(&mut y)?[..rows * HIDDEN].to_vec();
        backend.host(&mut self.kv)?[..rows * HIDDEN].copy_from_slice(&ys);
        drop(y);
        backend.end_step()
    }
}

/// Elements world rank `rank` (TP rank `t` of replica `d`) sends to each EP rank at `step`,
/// and receives from each: every rank knows every row's route.
fn moe_counts(d: usize, t: usize, rank: usize, step: usize) -> (Vec<usize>, Vec<usize>) {
    let sent = (0..EP)
        .map(|e| rows_of(t).filter(|&b| expert_of(d, b, step) == e).count() * HIDDEN)
        .collect();
    let got = (0..RANKS as usize)
        .map(|src| {
            let (sd, st) = (src / TP, src % TP);
            rows_of(st)
                .filter(|&b| expert_of(sd, b, step) == rank)
                .count()
                * HIDDEN
        })
        .collect();
    (sent, got)
}

/// Which parts of the job to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parts {
    /// Everything: the dynamic loops, the graph mode, the colocate cycle, and (as processes)
    /// the elastic part.
    All,
    /// The graph mode alone (`--graph`).
    Graph,
    /// The colocate cycle alone (`--colocate`).
    Colocate,
    /// The elastic part alone (`--elastic`): jobs of their own, started by the parent.
    Elastic,
}

impl Parts {
    /// From the command line.
    fn from_args() -> Parts {
        let flags = [
            ("--graph", Parts::Graph),
            ("--colocate", Parts::Colocate),
            ("--elastic", Parts::Elastic),
        ];
        let given: Vec<Parts> = (flags.iter())
            .filter(|(flag, _)| std::env::args().any(|a| a == *flag))
            .map(|&(_, part)| part)
            .collect();
        match given[..] {
            [] => Parts::All,
            [part] => part,
            _ => {
                eprintln!("--graph, --colocate and --elastic each run one part: give one of them");
                std::process::exit(2);
            }
        }
    }

    /// Whether the ranks of the main job run the dynamic loops or the graph mode.
    fn decodes_in_tp_pairs(self) -> bool {
        matches!(self, Parts::All | Parts::Graph)
    }

    /// Whether the ranks of the main job run the colocate cycle.
    fn colocates(self) -> bool {
        matches!(self, Parts::All | Parts::Colocate)
    }
}

/// What one rank measured: the dynamic loops, the graph mode and the colocate cycle, each
/// where it ran.
pub struct Report {
    /// The pooled and window-per-tensor loops.
    pub dynamic: Option<Dynamic>,
    /// The graph mode.
    pub graph: Option<graph::GraphReport>,
    /// The RL colocate cycle.
    pub colocate: Option<colocate::ColocateReport>,
}

/// What the dynamic loops measured.
pub struct Dynamic {
    pooled_rate: f64,
    naive_rate: f64,
    tokens: Vec<usize>,
    /// Registrations per communicator before and after decoding.
    before: Vec<u64>,
    stats: symheap::PoolStats,
    /// The pool's `memory_summary` after the decode loop.
    summary: String,
}

/// One rank's whole job (the parts `parts` names): the pooled loop, then the
/// window-per-tensor loop, then a check that every rank of a replica computed the same
/// tokens; then the graph mode; then the colocate cycle, on a pool of its own (its deep
/// sleeps destroy `comm`, which the caller must not use afterwards). With `snapshot_dir`,
/// writes the pool's snapshot from the last pooled step to `rank-N.json` there.
pub fn rank_main(comm: &Comm, snapshot_dir: Option<&Path>, parts: Parts) -> Result<Report> {
    let expected = reference(&Weights::new());
    let (mut dynamic, mut graph) = (None, None);
    if parts.decodes_in_tp_pairs() {
        let groups = ParallelGroups::new(comm, SIZES)?;
        let pool = SymPool::new(comm, PoolConfig::new(64 << 20))?;
        // EP is the world itself, where the pool lives: only the TP pair is attached.
        pool.attach(groups.tp())?;
        if parts == Parts::All {
            dynamic = Some(dynamic_loops(
                comm,
                &groups,
                &pool,
                &expected,
                snapshot_dir,
            )?);
        }
        let g = graph::run(&pool, &groups, comm.rank() as usize, &expected)?;
        if let Some(d) = &dynamic {
            assert_eq!(d.tokens, g.tokens, "the graph mode decoded other tokens");
        }
        graph = Some(g);
    }
    let colocate = match parts.colocates() {
        true => Some(colocate::run(comm, &expected)?),
        false => None,
    };
    if let (Some(d), Some(c)) = (&dynamic, &colocate) {
        assert_eq!(
            d.tokens, c.tokens,
            "the colocated worker decoded other tokens than the uninterrupted loop"
        );
    }
    Ok(Report {
        dynamic,
        graph,
        colocate,
    })
}

/// The pooled and the window-per-tensor loops.
fn dynamic_loops(
    comm: &Comm,
    groups: &ParallelGroups,
    pool: &SymPool,
    expected: &[Vec<Vec<f32>>],
    snapshot_dir: Option<&Path>,
) -> Result<Dynamic> {
    let registrations = |s: &symheap::PoolStats| -> Vec<u64> {
        s.communicators.iter().map(|c| c.registrations).collect()
    };
    let before = registrations(&pool.stats());
    let w = Weights::new();
    // This rank's weights stay resident in device memory, as a real worker keeps them (the
    // emulated matmuls read the host copies).
    let (r, t) = (comm.rank() as usize, comm.rank() as usize % TP);
    let resident = [&w.w1[t], &w.w2[t], &w.wv[t], &w.experts[r], &w.embed]
        .into_iter()
        .map(|v| SymVec::from_host_with(pool, v, AllocDesc::tagged("weights")))
        .collect::<Result<Vec<_>>>()?;
    let backend = Pooled {
        tp: pool.on_group(groups.tp())?,
        pool: pool.clone(),
    };
    let Decoded {
        rate: pooled_rate,
        tokens,
        snapshot,
    } = decode(&backend, r, expected)?;
    drop(resident);
    let stats = backend.pool.stats();
    assert_eq!(
        registrations(&stats),
        before,
        "the hot path registered a window"
    );
    let summary = backend.pool.memory_summary();
    if let (Some(dir), Some(snapshot)) = (snapshot_dir, snapshot) {
        write_snapshot(dir, &snapshot)?;
    }
    let naive = PerTensor {
        groups: groups.clone(),
        stream: Stream::new(comm.runtime())?,
    };
    let Decoded {
        rate: naive_rate,
        tokens: naive_tokens,
        ..
    } = decode(&naive, r, expected)?;
    assert_eq!(
        naive_tokens, tokens,
        "the naive loop computed different tokens"
    );
    // The pair's tokens, gathered: both ranks of a replica must agree.
    let digest = tokens
        .iter()
        .fold(0u64, |h, &t| h.wrapping_mul(31).wrapping_add(t as u64));
    let mine = SymVec::from_host_with(&backend.pool, &[digest], AllocDesc::tagged("check"))?;
    let mut all = SymVec::<u64>::zeroed_with(&backend.pool, TP, AllocDesc::tagged("check"))?;
    backend.tp.all_gather(&mine, &mut all)?;
    assert!(
        all.to_host()?.iter().all(|&d| d == digest),
        "the ranks of a pair disagree on the tokens"
    );
    Ok(Dynamic {
        pooled_rate,
        naive_rate,
        tokens,
        before,
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

fn print_report(report: &Report) {
    if let Some(r) = &report.dynamic {
        print_dynamic(r);
    }
    if let Some(g) = &report.graph {
        print_graph(g);
    }
    if let Some(c) = &report.colocate {
        colocate::print(c);
    }
}

fn print_graph(g: &graph::GraphReport) {
    println!(
        "graph mode (static shapes; compute and collectives on two streams joined by events), \
         {STEPS} steps checked against the host reference, rank 0:"
    );
    println!(
        "  eager:    {:>8.1} steps/s, {:>7.1} us of host time to enqueue a step, {:.1} pool \
         calls a step",
        g.eager_rate, g.eager_host_us, g.eager_calls
    );
    println!(
        "  replayed: {:>8.1} steps/s, {:>7.1} us of host time to enqueue a step, {:.1} pool \
         calls a step (one aclmdlRIExecuteAsync)",
        g.replayed_rate, g.replayed_host_us, g.replayed_calls
    );
    println!(
        "  replayed / eager: {:.2}x the steps/s, {:.1}x less host time",
        g.replayed_rate / g.eager_rate,
        g.eager_host_us / g.replayed_host_us
    );
    assert_eq!(g.replayed_calls, 0.0, "a replay called the pool");
}

fn print_dynamic(r: &Dynamic) {
    println!("rank 0's pool after the decode loop (the weights already dropped):");
    println!("{}", r.summary);
    println!("checked, on every rank:");
    for (c, before) in r.stats.communicators.iter().zip(&r.before) {
        let added = c.registrations - before;
        println!(
            "  {:<4} ({} ranks): {before} window registration(s) at start, {added} added in \
             {STEPS} steps; collectives {} symmetric, {} staged",
            if c.ranks as usize == TP { "TP" } else { "EP" },
            c.ranks,
            c.symmetric,
            c.staged
        );
    }
    println!("  every step's logits equal the host reference's (the whole model, computed alone)");
    println!("  the pooled and the window-per-tensor loops decoded the same tokens");
    println!("  both ranks of each TP pair decoded the same tokens (a digest, AllGathered)");
    println!(
        "decoded tokens (replica 0, sequence 0, greedy, ids in a {VOCAB}-token vocabulary), \
         the first 8: {:?}",
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
}

fn main() -> Result<()> {
    if launcher::in_a_rank() && elastic::in_an_elastic_rank() {
        // A rank of the elastic part's jobs, which the parent below started.
        return elastic::rank_main();
    }
    let shape = format!(
        "TP = {TP} x EP = {EP} ({DP} replicas), {STEPS} decode steps, batch {BATCH} per \
         replica, hidden {HIDDEN}"
    );
    let dir = snapshot_dir();
    let parts = Parts::from_args();
    if std::env::args().any(|a| a == "--threads") {
        // All ranks as threads of this process.
        println!("symheap inference worker: {RANKS} emulated ranks as threads, {shape}");
        if parts != Parts::Elastic {
            let reports = emu::launch(RANKS, |comm| rank_main(comm, dir.as_deref(), parts))?;
            print_report(&reports[0]);
            print_map_command(dir.as_deref());
        }
        if matches!(parts, Parts::All | Parts::Elastic) {
            println!(
                "elastic part: skipped, it runs with ranks as processes (the default): a lost \
                 rank is a killed process"
            );
        }
        if parts != Parts::Elastic {
            println!("all checks passed");
        }
        return Ok(());
    }
    if !launcher::in_a_rank() {
        // One process per device, as real deployments run: this program again, as each rank.
        if parts != Parts::Elastic {
            println!("symheap inference worker: {RANKS} emulated ranks as processes, {shape}");
            let outcome = Job::this_program(RANKS)?.run()?;
            if !outcome.success() {
                eprintln!("{}", outcome.summary());
                std::process::exit(1);
            }
        }
        if matches!(parts, Parts::All | Parts::Elastic) {
            // Jobs of their own: this program again, as the ranks of the elastic part.
            let exe = std::env::current_exe()
                .map_err(|e| symheap::Error::InvalidArgument(format!("no program path: {e}")))?;
            let start = |ranks| Job::new(ranks, &exe);
            match elastic::run(&start, &elastic::Settings::from_env()) {
                Ok(report) => elastic::print(&report),
                Err(failure) => {
                    eprintln!("the elastic part failed: {failure}");
                    std::process::exit(1);
                }
            }
        }
        println!("all checks passed");
        return Ok(());
    }
    let rt = Runtime::emulated()?;
    let comm = Comm::from_env(&rt, CommConfig::new())?;
    let report = rank_main(&comm, dir.as_deref(), parts)?;
    if comm.rank() == 0 {
        print_report(&report);
        print_map_command(dir.as_deref());
    }
    Ok(())
}
