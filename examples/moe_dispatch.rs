//! Mixture-of-experts dispatch and combine with `all_to_all_v` on pooled memory: four ranks,
//! eight experts (two per rank), top-2 routing, checked against a single-process reference.
//!
//! ```sh
//! cargo run --release --example moe_dispatch              # 4 processes
//! cargo run --release --example moe_dispatch -- --threads # 4 threads
//! ```
//!
//! Each step, every rank draws a batch of random tokens (a seeded xorshift generator, so any
//! process can redraw any rank's batch) of a random size, and a router picks each token's two
//! highest-scoring experts, weighted by the softmax of their two scores. Then, as a real MoE
//! layer does:
//! 1. the ranks exchange how many rows each expert gets from them (an `all_to_all` of the
//!    per-expert counts), so every rank knows its receive counts;
//! 2. **dispatch**: an `all_to_all_v` sends each token's row to the ranks of its two experts,
//!    rows grouped by destination rank and, within it, by expert;
//! 3. each rank applies its experts (a dense layer with ReLU, weights per expert) to the rows it
//!    received;
//! 4. **combine**: an `all_to_all_v` with the dispatch's counts swapped sends every result back
//!    to the token's rank, which sums its two experts' outputs with the router's weights.
//!
//! Every rank checks its outputs against the same computation done on the host alone (the same
//! `f32` operations in the same order, so equality is exact), and its experts' loads against
//! the routing of every rank's batch redrawn on the host. The buffers are allocated from the
//! pool each step with fixed capacities (the same calls on every rank, as the pool requires),
//! so later steps reuse freed blocks, and no window is registered after the pool's first. The
//! program exits non-zero on any mismatch or registration.

use std::time::Instant;

use symheap::{
    AllocDesc, Comm, CommConfig, PoolConfig, ReduceOp, Result, Runtime, SymPool, SymVec, emu,
    packed_displacements,
};
use symheap_tools::launcher::{self, Job};

/// Ranks (devices).
pub const RANKS: usize = 4;
/// Experts, `EXPERTS / RANKS` on each rank: expert `e` lives on rank `e / EXPERTS_PER_RANK`.
pub const EXPERTS: usize = 8;
const EXPERTS_PER_RANK: usize = EXPERTS / RANKS;
/// Experts per token.
const TOP_K: usize = 2;
/// Elements per token row.
const HIDDEN: usize = 32;
/// A rank's batch holds between `MIN_TOKENS` and `MAX_TOKENS` tokens.
const MIN_TOKENS: usize = 16;
const MAX_TOKENS: usize = 64;
/// Steps, each with new tokens and so a new routing.
pub const STEPS: usize = 8;

/// A tiny xorshift64* generator: deterministic in every process, no dependency.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        // Mix the seed so nearby seeds start far apart; never zero.
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1).
    fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// The model: the router's weights and each expert's dense layer, the same on every rank.
struct Model {
    /// `EXPERTS x HIDDEN`.
    router: Vec<f32>,
    /// Per expert: `HIDDEN x HIDDEN` weights, then `HIDDEN` biases.
    experts: Vec<Vec<f32>>,
}

impl Model {
    fn new() -> Self {
        let mut rng = XorShift::new(0x5EED);
        let mut draw =
            |n: usize, scale: f32| -> Vec<f32> { (0..n).map(|_| rng.next_f32() * scale).collect() };
        let router = draw(EXPERTS * HIDDEN, 1.0);
        let experts = (0..EXPERTS)
            .map(|_| draw(HIDDEN * HIDDEN + HIDDEN, 0.3))
            .collect();
        Model { router, experts }
    }

    /// The top-2 experts of a token, best first, with their softmax weights.
    fn route(&self, token: &[f32]) -> [(usize, f32); TOP_K] {
        let score = |e: usize| dot(&self.router[e * HIDDEN..][..HIDDEN], token);
        let mut best = (0..EXPERTS).collect::<Vec<_>>();
        // Highest score first; ties broken by the lower expert number.
        best.sort_by(|&a, &b| score(b).total_cmp(&score(a)).then(a.cmp(&b)));
        let (e0, e1) = (best[0], best[1]);
        let w0 = 1.0 / (1.0 + (score(e1) - score(e0)).exp());
        [(e0, w0), (e1, 1.0 - w0)]
    }

    /// Expert `e` applied to one row: `relu(W x + b)`.
    fn expert(&self, e: usize, row: &[f32], out: &mut [f32]) {
        let (weights, bias) = self.experts[e].split_at(HIDDEN * HIDDEN);
        for (i, o) in out.iter_mut().enumerate() {
            *o = (dot(&weights[i * HIDDEN..][..HIDDEN], row) + bias[i]).max(0.0);
        }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0.0, |acc, (x, y)| acc + x * y)
}

/// Rank `rank`'s batch of step `step`: `tokens x HIDDEN`, row-major.
fn batch(step: usize, rank: usize) -> Vec<f32> {
    let mut rng = XorShift::new((step * RANKS + rank) as u64 + 1);
    let tokens = MIN_TOKENS + (rng.next_u64() as usize) % (MAX_TOKENS - MIN_TOKENS + 1);
    (0..tokens * HIDDEN).map(|_| rng.next_f32()).collect()
}

/// The single-process reference for one batch: each token's weighted sum of its experts.
fn reference(model: &Model, tokens: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0f32; tokens.len()];
    let mut y = [0.0f32; HIDDEN];
    for (token, out) in tokens.chunks(HIDDEN).zip(out.chunks_mut(HIDDEN)) {
        let mut acc = [0.0f32; HIDDEN];
        for (e, w) in model.route(token) {
            model.expert(e, token, &mut y);
            for (a, y) in acc.iter_mut().zip(&y) {
                *a += w * y;
            }
        }
        out.copy_from_slice(&acc);
    }
    out
}

/// What one rank saw, summed over the steps.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Tokens of this rank's batches.
    pub tokens: usize,
    /// Rows this rank received for its experts.
    pub rows_in: usize,
    /// Output elements that differ from the reference, on every rank (all-reduced).
    pub mismatches: u64,
    /// Expert loads that differ from the host's routing, on every rank (all-reduced).
    pub load_mismatches: u64,
    /// Windows registered after the pool was made.
    pub registrations_added: u64,
    /// Rows per expert in the last step, every rank's (the host's routing).
    pub last_loads: [usize; EXPERTS],
    /// Wall time of the steps, seconds.
    pub seconds: f64,
}

/// One rank's part: `STEPS` steps of route, count exchange, dispatch, experts, combine.
pub fn rank_main(comm: &Comm) -> Result<Report> {
    assert_eq!(
        comm.rank_count() as usize,
        RANKS,
        "the example runs on {RANKS} ranks"
    );
    let r = comm.rank() as usize;
    let model = Model::new();
    let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
    let registrations_at_start = pool.stats().registrations;
    let mut report = Report::default();
    let start = Instant::now();
    for step in 0..STEPS {
        let tokens = batch(step, r);
        let n_tokens = tokens.len() / HIDDEN;
        report.tokens += n_tokens;
        // Route, and lay out the dispatch rows grouped by expert (so by destination rank).
        let routes: Vec<_> = tokens.chunks(HIDDEN).map(|t| model.route(t)).collect();
        let mut per_expert = [0usize; EXPERTS];
        for route in &routes {
            for &(e, _) in route {
                per_expert[e] += 1;
            }
        }
        let first_row = packed_displacements(&per_expert);
        let mut next_row = first_row.clone();
        // Where each (token, choice) sits in the dispatch buffer.
        let mut row_of = vec![[0usize; TOP_K]; n_tokens];
        let mut send_rows = vec![0.0f32; n_tokens * TOP_K * HIDDEN];
        for (t, route) in routes.iter().enumerate() {
            for (k, &(e, _)) in route.iter().enumerate() {
                let row = next_row[e];
                next_row[e] += 1;
                row_of[t][k] = row;
                send_rows[row * HIDDEN..][..HIDDEN]
                    .copy_from_slice(&tokens[t * HIDDEN..][..HIDDEN]);
            }
        }

        // 1. Exchange the counts: block p of the result is what rank p sends our experts.
        let counts = per_expert.map(|c| c as u64);
        let counts_out = SymVec::from_host_with(&pool, &counts, AllocDesc::tagged("counts"))?;
        let mut counts_in =
            SymVec::<u64>::zeroed_with(&pool, EXPERTS, AllocDesc::tagged("counts"))?;
        pool.all_to_all(&counts_out, &mut counts_in)?;
        let counts_in = counts_in.to_host()?;
        let rows_from = |p: usize| -> usize {
            counts_in[p * EXPERTS_PER_RANK..][..EXPERTS_PER_RANK]
                .iter()
                .sum::<u64>() as usize
        };
        let rows_to = |p: usize| -> usize {
            per_expert[p * EXPERTS_PER_RANK..][..EXPERTS_PER_RANK]
                .iter()
                .sum()
        };
        let send_counts: Vec<usize> = (0..RANKS).map(|p| rows_to(p) * HIDDEN).collect();
        let recv_counts: Vec<usize> = (0..RANKS).map(|p| rows_from(p) * HIDDEN).collect();
        let (send_displs, recv_displs) = (
            packed_displacements(&send_counts),
            packed_displacements(&recv_counts),
        );

        // 2. Dispatch. Capacities are fixed (every rank allocates alike): the most rows a rank
        // sends, and the most it can receive (every token of every rank).
        let send_cap = MAX_TOKENS * TOP_K * HIDDEN;
        let recv_cap = RANKS * send_cap;
        let mut dispatch =
            SymVec::<f32>::zeroed_with(&pool, send_cap, AllocDesc::tagged("dispatch"))?;
        dispatch.host_mut()?[..send_rows.len()].copy_from_slice(&send_rows);
        let mut received =
            SymVec::<f32>::zeroed_with(&pool, recv_cap, AllocDesc::tagged("expert in"))?;
        pool.all_to_all_v(
            &dispatch,
            &send_counts,
            &send_displs,
            &mut received,
            &recv_counts,
            &recv_displs,
        )?;

        // 3. The experts. From each rank p, its rows for our first expert come first.
        let mut expert_out =
            SymVec::<f32>::zeroed_with(&pool, recv_cap, AllocDesc::tagged("expert out"))?;
        {
            let input = received.host()?;
            let mut output = expert_out.host_mut()?;
            let mut row = 0;
            for p in 0..RANKS {
                for local in 0..EXPERTS_PER_RANK {
                    let e = r * EXPERTS_PER_RANK + local;
                    for _ in 0..counts_in[p * EXPERTS_PER_RANK + local] {
                        let at = row * HIDDEN;
                        model.expert(e, &input[at..at + HIDDEN], &mut output[at..at + HIDDEN]);
                        row += 1;
                    }
                }
            }
            report.rows_in += row;
        }

        // 4. Combine: the dispatch in reverse, results back in the dispatch layout.
        let mut combined =
            SymVec::<f32>::zeroed_with(&pool, send_cap, AllocDesc::tagged("combine"))?;
        pool.all_to_all_v(
            &expert_out,
            &recv_counts,
            &recv_displs,
            &mut combined,
            &send_counts,
            &send_displs,
        )?;
        let combined = combined.to_host()?;
        let mut out = vec![0.0f32; tokens.len()];
        for (t, route) in routes.iter().enumerate() {
            let acc = &mut out[t * HIDDEN..][..HIDDEN];
            for (k, &(_, w)) in route.iter().enumerate() {
                let y = &combined[row_of[t][k] * HIDDEN..][..HIDDEN];
                for (a, y) in acc.iter_mut().zip(y) {
                    *a += w * y;
                }
            }
        }

        // The checks: outputs against the single-process reference, our experts' loads
        // against every rank's batch routed on the host.
        let want = reference(&model, &tokens);
        let wrong = out.iter().zip(&want).filter(|(a, b)| a != b).count() as u64;
        let mut loads = [0usize; EXPERTS];
        for p in 0..RANKS {
            for t in batch(step, p).chunks(HIDDEN) {
                for (e, _) in model.route(t) {
                    loads[e] += 1;
                }
            }
        }
        let load_wrong = (0..EXPERTS_PER_RANK)
            .filter(|&local| {
                let e = r * EXPERTS_PER_RANK + local;
                let got: u64 = (0..RANKS)
                    .map(|p| counts_in[p * EXPERTS_PER_RANK + local])
                    .sum();
                got != loads[e] as u64
            })
            .count() as u64;
        let mut tally =
            SymVec::from_host_with(&pool, &[wrong, load_wrong], AllocDesc::tagged("tally"))?;
        pool.all_reduce_in_place(&mut tally, ReduceOp::Sum)?;
        let tally = tally.to_host()?;
        report.mismatches += tally[0];
        report.load_mismatches += tally[1];
        report.last_loads = loads;
        // The step's buffers go back to the pool here; the next step reuses them.
    }
    pool.synchronize()?;
    report.seconds = start.elapsed().as_secs_f64();
    report.registrations_added = pool.stats().registrations - registrations_at_start;
    Ok(report)
}

/// Whether a report passes: no mismatch, no registration after start.
pub fn passed(report: &Report) -> bool {
    report.mismatches == 0 && report.load_mismatches == 0 && report.registrations_added == 0
}

fn print_report(report: &Report) {
    println!(
        "{STEPS} steps: rank 0 routed {} tokens, received {} rows for its experts; {:.1} ms",
        report.tokens,
        report.rows_in,
        report.seconds * 1e3
    );
    println!("last step's rows per expert: {:?}", report.last_loads);
    println!(
        "mismatches against the host reference: {} outputs, {} expert loads (all ranks)",
        report.mismatches, report.load_mismatches
    );
    println!(
        "windows registered after start: {}",
        report.registrations_added
    );
    println!("{}", if passed(report) { "OK" } else { "FAILED" });
}

fn main() -> Result<()> {
    let shape = format!(
        "{EXPERTS} experts, top-{TOP_K}, hidden {HIDDEN}, {MIN_TOKENS}..{MAX_TOKENS} tokens per rank"
    );
    let report = if std::env::args().any(|a| a == "--threads") {
        println!("symheap moe_dispatch: {RANKS} emulated ranks as threads, {shape}");
        emu::launch(RANKS as u32, rank_main)?.swap_remove(0)
    } else if !launcher::in_a_rank() {
        // One process per device: this program again, as each rank.
        println!("symheap moe_dispatch: {RANKS} emulated ranks as processes, {shape}");
        let outcome = Job::this_program(RANKS as u32)?.run()?;
        if !outcome.success() {
            eprintln!("{}", outcome.summary());
            std::process::exit(1);
        }
        return Ok(());
    } else {
        let rt = Runtime::emulated()?;
        let comm = Comm::from_env(&rt, CommConfig::new())?;
        let report = rank_main(&comm)?;
        if comm.rank() != 0 {
            // Every rank saw the all-reduced tallies; only rank 0 prints them.
            if !passed(&report) {
                std::process::exit(1);
            }
            return Ok(());
        }
        report
    };
    print_report(&report);
    if !passed(&report) {
        std::process::exit(1);
    }
    Ok(())
}
