//! The mixture-of-experts example (`examples/moe_dispatch.rs`), compiled into this binary and
//! run on four rank threads: its outputs and expert loads match its host reference, and it
//! registers no window after start.

#[path = "../examples/moe_dispatch.rs"]
#[allow(dead_code)] // the example's `main` and printing
mod example;

use crate::harness::EmuSession;

#[test]
fn the_moe_dispatch_example_matches_its_host_reference_without_registering() {
    let session = EmuSession::start();
    let reports = symheap::emu::launch(example::RANKS as u32, example::rank_main).unwrap();
    for (rank, report) in reports.iter().enumerate() {
        assert!(example::passed(report), "rank {rank}: {report:?}");
        assert!(report.rows_in > 0, "rank {rank}'s experts got no rows");
    }
    // Every token was routed to two experts, and every routed row reached one.
    let tokens: usize = reports.iter().map(|r| r.tokens).sum();
    let rows: usize = reports.iter().map(|r| r.rows_in).sum();
    assert_eq!(rows, 2 * tokens);
    session.assert_clean();
}
