//! symheap's heap against its peers, all in the same run: offset-allocator 0.2 (TLSF, 512-byte
//! units) and an exact best fit over B-trees with coalescing. Numbers: the workspace's
//! `benches/README.md`.
//! (rlsf is not among them: it keeps its headers in the memory it manages, see the README.)
//!
//! `cargo bench -p symheap-heap --bench heap` first prints what is not a criterion timing: the fill at the first
//! failure on four workloads (three random size mixes and the inference traces; with
//! `HEAP_FILL_SEEDS=start..end`, also a seed-by-seed comparison with the best fit over those
//! seeds), the inference trace's space use, and a steady-state timing taken in alternation as a
//! cross-check. Then the
//! criterion groups run:
//! * `steady_state/{1000,4000}`: one random free + one random alloc (512 B..1 MiB, log-uniform)
//!   in 1 GiB holding that many live blocks; the time is per free+alloc pair;
//! * `llm_trace`: one whole inference-shaped trace (`support::workloads::llm_trace`), replayed
//!   on a fresh allocator.

#[path = "../tests/support/rng.rs"]
mod rng;
mod support;

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput};
use support::allocators::Allocator;
use support::best_fit::BestFit;
use support::report::{self, median, paired_round};
use support::workloads::{self, CAPACITY, Steady, TraceOp};
use symheap_heap::Heap;

type OffsetAllocator = offset_allocator::Allocator;

/// The trace that is timed and whose space use is shown in detail.
const TRACE_SEED: u64 = 7;
/// Seed of the steady-state workloads.
const STEADY_SEED: u64 = 42;

fn print_tables(ops: &[TraceOp], slots: usize) {
    report::fill_header();
    for fill in [workloads::ISSUE, workloads::LARGE, workloads::MIXED] {
        report::fill_title(fill.name);
        report::fill_row::<Heap>(fill);
        report::fill_row::<OffsetAllocator>(fill);
        report::fill_row::<BestFit>(fill);
    }
    report::fill_title("llm trace (support::workloads::llm_trace)");
    report::trace_fill_row::<Heap>();
    report::trace_fill_row::<OffsetAllocator>();
    report::trace_fill_row::<BestFit>();

    // More seeds on request, compared seed by seed with the best fit (README: "30 seeds are
    // not enough").
    if let Ok(seeds) = std::env::var("HEAP_FILL_SEEDS") {
        let (start, end) = seeds
            .split_once("..")
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            .expect("HEAP_FILL_SEEDS=start..end");
        report::paired_fill::<Heap>(start..end);
        report::paired_fill::<OffsetAllocator>(start..end);
    }

    report::trace_header(ops);
    report::trace_row::<Heap>(ops, slots);
    report::trace_row::<OffsetAllocator>(ops, slots);
    report::trace_row::<BestFit>(ops, slots);

    println!("\nsteady state timed in alternation, after 20 M warm-up pairs (best fit: 2 M):");
    println!("ns per free+alloc pair, median of 15 rounds of 1 M pairs (best fit: 50 k)");
    println!(
        "  {:<7} {:>10} {:>17} {:>15}",
        "live", "symheap", "offset-allocator", "btree-best-fit"
    );
    for live in [1000, 4000] {
        let mut heap = Steady::<Heap>::new(live, STEADY_SEED);
        let mut offset = Steady::<OffsetAllocator>::new(live, STEADY_SEED);
        let mut best = Steady::<BestFit>::new(live, STEADY_SEED);
        // Criterion runs each workload for ~100 M pairs: compare states that far along.
        paired_round(&mut heap, 20_000_000);
        paired_round(&mut offset, 20_000_000);
        paired_round(&mut best, 2_000_000);
        let (mut h, mut o, mut b) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..15 {
            h.push(paired_round(&mut heap, 1_000_000));
            o.push(paired_round(&mut offset, 1_000_000));
            b.push(paired_round(&mut best, 50_000));
        }
        let (h, o, b) = (median(h), median(o), median(b));
        println!(
            "  {live:<7} {h:>10.1} {o:>17.1} {b:>15.1}   (symheap / offset-allocator {:.2})",
            h / o
        );
    }
    println!();
}

fn bench_steady<A: Allocator>(c: &mut Criterion, live: usize) {
    let mut group = c.benchmark_group(format!("steady_state/{live}"));
    let mut steady = Steady::<A>::new(live, STEADY_SEED);
    group.bench_function(A::NAME, |b| b.iter(|| steady.step()));
    group.finish();
}

fn bench_trace<A: Allocator>(c: &mut Criterion, ops: &[TraceOp], slots: usize) {
    let calls = ops
        .iter()
        .filter(|op| !matches!(op, TraceOp::StepEnd))
        .count();
    let mut group = c.benchmark_group("llm_trace");
    // A trace takes milliseconds (the best fit about 10): fewer, longer samples.
    group
        .sample_size(15)
        .measurement_time(Duration::from_secs(4));
    group.throughput(Throughput::Elements(calls as u64));
    group.bench_function(A::NAME, |b| {
        b.iter_batched(
            || {
                let slots: Vec<Option<A::Handle>> = (0..slots).map(|_| None).collect();
                (A::with_capacity(CAPACITY), slots)
            },
            |(mut alloc, mut slots)| {
                workloads::replay(&mut alloc, black_box(ops), &mut slots);
                (alloc, slots) // dropped outside the timing
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn main() {
    let (ops, slots) = workloads::llm_trace(TRACE_SEED);
    // `cargo bench -- <filter>` still prints the tables; `cargo test --benches` (criterion's
    // test mode) skips them.
    if !std::env::args().any(|arg| arg == "--test") {
        print_tables(&ops, slots);
    }

    // Short runs: the whole bench takes a couple of minutes on two cores.
    let mut c = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .configure_from_args();
    for live in [1000, 4000] {
        bench_steady::<Heap>(&mut c, live);
        bench_steady::<OffsetAllocator>(&mut c, live);
        bench_steady::<BestFit>(&mut c, live);
    }
    bench_trace::<Heap>(&mut c, &ops, slots);
    bench_trace::<OffsetAllocator>(&mut c, &ops, slots);
    bench_trace::<BestFit>(&mut c, &ops, slots);
    c.final_summary();
}
