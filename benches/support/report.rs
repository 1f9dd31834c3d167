//! The numbers that are not criterion timings, printed before the criterion groups run.

use std::time::Instant;

use super::allocators::Allocator;
use super::workloads::{self, CAPACITY, Steady, TraceOp};

/// Seeds of the efficiency runs that the targets are stated for.
pub const EFFICIENCY_SEEDS: std::ops::Range<u64> = 0..30;
/// More seeds, to show how much the 30-seed minimum owes to luck.
const MORE_EFFICIENCY_SEEDS: std::ops::Range<u64> = 1000..1300;
/// Traces (besides the timed one) whose smallest workable capacity is averaged.
const MORE_TRACE_SEEDS: std::ops::Range<u64> = 100..120;

fn mean_min(runs: &[f64]) -> (f64, f64) {
    let mean = runs.iter().sum::<f64>() / runs.len() as f64;
    (mean, runs.iter().copied().fold(f64::INFINITY, f64::min))
}

/// One row of the efficiency table: fill at the first failure, mean and min.
pub fn efficiency_row<A: Allocator>() {
    let runs = |seeds: std::ops::Range<u64>| -> Vec<f64> {
        seeds.map(workloads::efficiency::<A>).collect()
    };
    let (mean, min) = mean_min(&runs(EFFICIENCY_SEEDS));
    let (more_mean, more_min) = mean_min(&runs(MORE_EFFICIENCY_SEEDS));
    println!(
        "  {:<18} {mean:>7.1} % {min:>7.1} %   {more_mean:>7.1} % {more_min:>7.1} %",
        A::NAME
    );
}

/// One row of the trace table: the timed trace's space use, and the capacity overhead averaged
/// over more traces.
pub fn trace_row<A: Allocator>(ops: &[TraceOp], slots: usize) {
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    let overhead = |ops: &[TraceOp], slots: usize| {
        let stats = workloads::trace_stats::<A>(ops, slots, CAPACITY);
        let min = workloads::min_capacity::<A>(ops, slots, stats.peak_live);
        let overhead = 100.0 * (min as f64 / stats.peak_live as f64 - 1.0);
        (stats, min, overhead)
    };
    let (s, min, over) = overhead(ops, slots);
    let more: Vec<f64> = MORE_TRACE_SEEDS
        .map(|seed| {
            let (ops, slots) = workloads::llm_trace(seed);
            overhead(&ops, slots).2
        })
        .collect();
    let (more_mean, _) = mean_min(&more);
    let more_max = more.iter().copied().fold(0.0, f64::max);
    println!(
        "  {:<18} {:>6} {:>8.0} {:>10.0} {:>8.0} {over:>+7.1} % {:>7.1} % {:>7.1} % {more_mean:>+8.1} % {more_max:>+7.1} %",
        A::NAME,
        s.failed,
        mib(s.peak_live),
        mib(s.peak_extent),
        mib(min),
        s.mean_fragmentation,
        s.max_fragmentation,
    );
}

/// The efficiency table's header.
pub fn efficiency_header() {
    println!(
        "\nefficiency: % of 1 GiB in use at the first failed alloc (random actions: 60 % alloc"
    );
    println!("of 512 B..16 MiB log-uniform, 40 % free of a random live block)");
    println!(
        "  {:<18} {:^21}   {:^21}",
        "", "seeds 0..30", "seeds 1000..1300"
    );
    println!(
        "  {:<18} {:>9} {:>9}   {:>9} {:>9}",
        "allocator", "mean", "min", "mean", "min"
    );
}

/// The trace table's header.
pub fn trace_header(ops: &[TraceOp]) {
    let calls = ops
        .iter()
        .filter(|op| !matches!(op, TraceOp::StepEnd))
        .count();
    println!(
        "\nllm trace: space use ({calls} calls in 1 GiB). frag = 1 - largest free / free, per"
    );
    println!(
        "decode step. min cap = smallest capacity (1 MiB steps) with no failed alloc, found by"
    );
    println!("bisection; overhead = min cap / peak live - 1; also over 20 more traces (mean, max)");
    println!(
        "  {:<18} {:>6} {:>8} {:>10} {:>8} {:>9} {:>9} {:>9} {:>10} {:>9}",
        "allocator",
        "failed",
        "peak MiB",
        "extent MiB",
        "min cap",
        "overhead",
        "mean frag",
        "max frag",
        "20: mean",
        "20: max"
    );
}

/// Times `pairs` steady-state free+alloc pairs; ns per pair. The caller alternates allocators
/// round by round and takes medians, as a cross-check of criterion's numbers on a noisy
/// machine: criterion measures one allocator after the other, so drift between them shows up
/// as a difference between allocators.
pub fn paired_round<A: Allocator>(steady: &mut Steady<A>, pairs: u32) -> f64 {
    let start = Instant::now();
    for _ in 0..pairs {
        steady.step();
    }
    start.elapsed().as_nanos() as f64 / f64::from(pairs)
}

/// The median of `samples`.
pub fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}
