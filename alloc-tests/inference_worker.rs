//! The main job (`examples/inference_worker/`), compiled into this binary: its graph mode on
//! four rank threads runs the decode step eagerly and as a replayed graph, both checked
//! against the host reference at every step (the example asserts that), and a replay makes
//! no pool call.

#[path = "../examples/inference_worker/main.rs"]
#[allow(dead_code)] // the example's `main`, printing and dynamic loops
mod example;

use crate::harness::EmuSession;

#[test]
fn the_inference_workers_graph_mode_matches_the_reference_and_replays_without_pool_calls() {
    let session = EmuSession::start();
    let reports = symheap::emu::launch(4, |comm| example::rank_main(comm, None, true)).unwrap();
    for (rank, r) in reports.iter().enumerate() {
        assert!(r.dynamic.is_none());
        // Each eager step enqueues its five collectives through the pool; a replay none.
        assert_eq!(r.graph.eager_calls, 5.0, "rank {rank}");
        assert_eq!(r.graph.replayed_calls, 0.0, "rank {rank}");
    }
    // Both ranks of a replica decode the same tokens.
    assert_eq!(reports[0].graph.tokens, reports[1].graph.tokens);
    assert_eq!(reports[2].graph.tokens, reports[3].graph.tokens);
    session.assert_clean();
}
