//! The numbers that are not criterion timings, printed before the criterion groups run.

use std::ops::Range;
use std::time::Instant;

use super::allocators::Allocator;
use super::best_fit::BestFit;
use super::workloads::{self, CAPACITY, Fill, Steady, TraceOp};

/// Seeds of the fill runs that the targets are stated for (fixed before any tuning).
pub const FILL_SEEDS: Range<u64> = 0..30;
/// More seeds for the random fill workloads: the heap's large-block threshold was chosen on
/// these, and they show how much a 30-seed minimum owes to luck.
const MORE_FILL_SEEDS: Range<u64> = 1000..1300;
/// Traces (besides the timed one) whose smallest workable capacity is averaged.
const MORE_TRACE_SEEDS: Range<u64> = 100..120;

fn mean_min(runs: &[f64]) -> (f64, f64) {
    let mean = runs.iter().sum::<f64>() / runs.len() as f64;
    (mean, runs.iter().copied().fold(f64::INFINITY, f64::min))
}

/// The fill table's header.
pub fn fill_header() {
    println!(
        "
fill at the first failed alloc: % of 1 GiB in live blocks (random workloads: 60 %"
    );
    println!("alloc, 40 % free of a random live block; llm trace: peak live / smallest capacity");
    println!("without a failed alloc)");
    println!(
        "  {:<34} {:^19}   {:^19}",
        "", "seeds 0..30", "seeds 1000..1300"
    );
    println!(
        "  {:<34} {:>8} {:>8}   {:>8} {:>8}",
        "workload, allocator", "mean", "min", "mean", "min"
    );
}

/// The title of one workload's rows in the fill table.
pub fn fill_title(name: &str) {
    println!("  {name}");
}

/// One row of the fill table: `A` on a random fill workload.
pub fn fill_row<A: Allocator>(fill: Fill) {
    let runs = |seeds: Range<u64>| -> Vec<f64> {
        seeds
            .map(|seed| workloads::fill_at_first_failure::<A>(fill, seed))
            .collect()
    };
    let (mean, min) = mean_min(&runs(FILL_SEEDS));
    let (more_mean, more_min) = mean_min(&runs(MORE_FILL_SEEDS));
    println!(
        "    {:<32} {mean:>6.2} % {min:>6.2} %   {more_mean:>6.2} % {more_min:>6.2} %",
        A::NAME
    );
}

/// The paired comparison with the exact best fit over `seeds` (`HEAP_FILL_SEEDS=a..b`): per
/// random workload, `A`'s mean and minimum fill, the mean of its per-seed difference from the
/// best fit's fill with its standard error, and the number of seeds on which the two fills are
/// equal. Fills at the first failure are chaotic (one placement that differs changes the rest of
/// the run), so a 30-seed mean moves by about half a point either way; the paired difference over
/// thousands of seeds tells a real difference from that noise.
pub fn paired_fill<A: Allocator>(seeds: Range<u64>) {
    println!(
        "\n{} against btree-best-fit, seeds {}..{}: mean, min, mean difference ± standard error, \
         seeds with equal fill",
        A::NAME,
        seeds.start,
        seeds.end
    );
    for fill in [workloads::ISSUE, workloads::LARGE, workloads::MIXED] {
        let (mut runs, mut diffs) = (Vec::new(), Vec::new());
        for seed in seeds.clone() {
            let own = workloads::fill_at_first_failure::<A>(fill, seed);
            let best = workloads::fill_at_first_failure::<BestFit>(fill, seed);
            runs.push(own);
            diffs.push(own - best);
        }
        let (mean, min) = mean_min(&runs);
        let n = diffs.len() as f64;
        let diff = diffs.iter().sum::<f64>() / n;
        let var = diffs.iter().map(|d| (d - diff) * (d - diff)).sum::<f64>() / (n - 1.0);
        let equal = diffs.iter().filter(|d| **d == 0.0).count();
        println!(
            "  {:<34} {mean:>6.2} % {min:>6.2} %   {diff:+.3} ± {:.3}   {equal} of {}",
            fill.name,
            (var / n).sqrt(),
            diffs.len()
        );
    }
}

/// One row of the fill table: `A` on the inference traces of [`FILL_SEEDS`].
pub fn trace_fill_row<A: Allocator>() {
    let runs: Vec<f64> = FILL_SEEDS.map(workloads::trace_fill::<A>).collect();
    let (mean, min) = mean_min(&runs);
    println!("    {:<32} {mean:>6.2} % {min:>6.2} %", A::NAME);
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
