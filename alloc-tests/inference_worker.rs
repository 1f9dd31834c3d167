//! The main job (`examples/inference_worker/`), compiled into this binary: its graph mode on
//! four rank threads runs the decode step eagerly and as a replayed graph, both checked
//! against the host reference at every step (the example asserts that), and a replay makes
//! no pool call; its RL colocate cycle sleeps, trains and wakes the worker between decode
//! segments; its elastic part, as rank processes of this binary, loses a rank in the middle
//! of decoding and decodes on.

#[path = "../examples/inference_worker/main.rs"]
#[allow(dead_code)] // the example's `main`, printing and dynamic loops
mod example;

use example::Parts;

use crate::harness::EmuSession;
use crate::processes::rank_job_in;

#[test]
fn the_inference_workers_graph_mode_matches_the_reference_and_replays_without_pool_calls() {
    let session = EmuSession::start();
    let reports =
        symheap::emu::launch(4, |comm| example::rank_main(comm, None, Parts::Graph)).unwrap();
    let graph = |r: &example::Report| r.graph.as_ref().expect("the graph mode ran").tokens.clone();
    for (rank, r) in reports.iter().enumerate() {
        assert!(r.dynamic.is_none() && r.colocate.is_none());
        let g = r.graph.as_ref().unwrap();
        // Each eager step enqueues its five collectives through the pool; a replay none.
        assert_eq!(g.eager_calls, 5.0, "rank {rank}");
        assert_eq!(g.replayed_calls, 0.0, "rank {rank}");
    }
    // Both ranks of a replica decode the same tokens.
    assert_eq!(graph(&reports[0]), graph(&reports[1]));
    assert_eq!(graph(&reports[2]), graph(&reports[3]));
    session.assert_clean();
}

/// Restores the emulator's default device memory limit, even when the test fails half-way.
struct DefaultLimit;

impl Drop for DefaultLimit {
    fn drop(&mut self) {
        symheap::emu::testing::set_device_memory_limit(0);
    }
}

#[test]
fn the_colocated_worker_sleeps_for_training_and_wakes_to_the_uninterrupted_tokens() {
    let session = EmuSession::start();
    let _limit = DefaultLimit;
    // An uninterrupted run first (the graph mode), then the colocate cycle on the same world
    // (its deep sleeps destroy that world).
    let reports = symheap::emu::launch(4, |comm| {
        let uninterrupted = example::rank_main(comm, None, Parts::Graph)?;
        let colocated = example::rank_main(comm, None, Parts::Colocate)?;
        Ok((uninterrupted, colocated))
    })
    .unwrap();
    for (rank, (uninterrupted, colocated)) in reports.iter().enumerate() {
        let c = colocated.colocate.as_ref().expect("the colocate cycle ran");
        assert!(colocated.dynamic.is_none() && colocated.graph.is_none());
        let u = &uninterrupted.graph.as_ref().unwrap().tokens;
        assert_eq!(
            &c.tokens, u,
            "rank {rank}: tokens differ from an uninterrupted run"
        );
        assert_eq!(c.tokens, c.reference_tokens, "rank {rank}");
        assert_eq!(c.cycles.len(), example::colocate::CYCLES);
        assert!(c.cycles.iter().any(|c| c.deep) && c.cycles.iter().any(|c| !c.deep));
        for (i, cycle) in c.cycles.iter().enumerate() {
            let at = format!("rank {rank}, cycle {i}");
            assert_eq!(cycle.residual_growth, 0, "{at}");
            assert_eq!(cycle.woke_used, cycle.awake_used, "{at}");
            assert!(cycle.freed > 0, "{at}");
            assert!(
                cycle.trained as f64 >= 0.9 * cycle.freed as f64,
                "{at}: training took {} of {} freed bytes",
                cycle.trained,
                cycle.freed
            );
            assert!(
                cycle.training_used >= cycle.asleep_used + cycle.trained,
                "{at}"
            );
            assert!(cycle.awake_training_out_of_memory, "{at}");
            let refused = cycle.awake_training_error.as_deref().unwrap_or_default();
            assert!(refused.contains("out of memory"), "{at}: {refused}");
            assert!(cycle.offloaded > 0, "{at}: the weights were offloaded");
            // A deep sleep destroys the world and the TP pair; a shallow one nothing.
            let released = if cycle.deep { 2 } else { 0 };
            assert_eq!(cycle.communicators_released, released, "{at}");
        }
        // The limit left the worker one granule: the training fits only while it sleeps.
        assert!(c.cycles.iter().all(|cycle| cycle.awake_used < c.limit));
    }
    session.assert_clean();
}

/// The elastic part: 4 rank processes under the elastic launcher, one SIGKILLed at a random
/// decode step (the seed is the time, or `INFERENCE_WORKER_ELASTIC_SEED`; a failure names
/// it). The part itself checks that the launcher lost that rank alone, that every survivor
/// re-sharded, redid the failed step and decoded to the end with every step's logits equal
/// to the host reference's (the ranks assert that), and that a fresh job of the survivors'
/// size made its first good step. 16 MiB of resident weights per rank keep it short.
#[test]
fn the_elastic_worker_loses_a_rank_reshards_its_experts_and_decodes_on() {
    let settings = example::elastic::Settings {
        resident_mib: 16,
        ..example::elastic::Settings::from_env()
    };
    let start = |ranks| rank_job_in("inference_worker", ranks, "rank_of_the_elastic_worker");
    let report = example::elastic::run(&start, &settings).unwrap_or_else(|e| panic!("{e}"));
    let seed = report.seed;
    let survivors = example::elastic::RANKS as usize - 1;
    assert_eq!(report.reshards.len(), survivors, "seed {seed}");
    for (line, launch_rank) in report
        .reshards
        .iter()
        .zip((0..example::elastic::RANKS).filter(|&r| r != report.victim))
    {
        assert!(
            line.starts_with(&format!("launch rank {launch_rank}, now rank ")),
            "seed {seed}: {line}"
        );
        // The step the loss cut short was writing the KV cache: never used as it was.
        assert!(line.contains("re-prefilled"), "seed {seed}: {line}");
    }
    assert!(
        report.noticed.contains("exited or were killed"),
        "seed {seed}: {}",
        report.noticed
    );
    assert!(
        report.recovery_ms > 0.0 && report.restart_ms > 0.0,
        "seed {seed}"
    );
}

#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_of_the_elastic_worker() {
    // Ends libtest's `test NAME ... ` line, so that the part's stamps start lines of their own.
    println!();
    example::elastic::rank_main().unwrap();
}
