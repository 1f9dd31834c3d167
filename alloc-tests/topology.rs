//! Nodes and SuperPoDs: a job's ranks on emulated nodes, as threads of one process and as
//! processes. A communicator whose ranks span two SuperPoDs has no windows (HCCL refuses
//! them there), so the pool's collectives stage, `SymPool::path` predicts
//! `Staged(CrossSuperPod)` before they run, and the emulator's counters agree; within one
//! SuperPoD the same collective, across two nodes, is symmetric.

use std::time::Duration;

use symheap::emu::{self, NodeLayout};
use symheap::{
    Collective, CollectivePath, CommConfig, PoolConfig, ReduceOp, Staged, SymPool, SymVec,
};

use crate::harness::EmuSession;
use crate::processes::{failed, placement, rank_job_on_nodes};

/// What one rank saw of a pooled AllReduce.
struct Pooled {
    /// The result.
    sum: Vec<f32>,
    /// The path `SymPool::path` predicted before it ran.
    predicted: CollectivePath,
    /// The AllReduces the pool's stats counted, by path.
    counted: Vec<(CollectivePath, u64)>,
}

/// On `comm`: a pool and an fp32 AllReduce of every rank's `rank + 1`.
fn pooled_all_reduce(comm: &symheap::Comm) -> symheap::Result<Pooled> {
    let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
    let mut v = SymVec::from_host(&pool, &[comm.rank() as f32 + 1.0; 8])?;
    let predicted = pool.path(Collective::AllReduce, &v, &v);
    pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
    pool.synchronize()?;
    let counted = pool
        .stats()
        .collectives
        .iter()
        .filter(|c| c.kind == Collective::AllReduce)
        .map(|c| (c.path, c.count))
        .collect();
    Ok(Pooled {
        sum: v.to_host()?,
        predicted,
        counted,
    })
}

/// What a thread job on two nodes saw: each rank's AllReduce and whether its communicator
/// spans SuperPoDs, and how many collectives the emulator ran on each path meanwhile.
struct TwoNodes {
    ranks: Vec<(Pooled, bool)>,
    symmetric: u64,
    staged: u64,
}

/// Runs [`pooled_all_reduce`] on 2 nodes of 2 ranks each, as threads, in SuperPoDs of
/// `nodes_per_superpod` nodes.
fn two_nodes(nodes_per_superpod: u32) -> TwoNodes {
    let layout = NodeLayout::new(2, 2).nodes_per_superpod(nodes_per_superpod);
    let config = CommConfig::new().exec_timeout_secs(60);
    let before = emu::testing::counters();
    let ranks = emu::launch_nodes_with(&layout, &config, |world| {
        // Device = local rank, as a multi-node job's processes are.
        assert_eq!(world.runtime().current_device()?, world.rank() % 2);
        let pooled = pooled_all_reduce(world)?;
        let counted = [(pooled.predicted, 1)];
        assert_eq!(
            pooled.counted, counted,
            "the pool counted what it predicted"
        );
        Ok((pooled, world.spans_superpods()))
    })
    .unwrap();
    let after = emu::testing::counters();
    TwoNodes {
        ranks,
        symmetric: after.symmetric_collectives - before.symmetric_collectives,
        staged: after.staged_collectives - before.staged_collectives,
    }
}

#[test]
fn a_collective_across_two_superpods_stages_as_the_pool_predicts() {
    let session = EmuSession::start();
    // One node per SuperPoD: the 2 nodes are 2 SuperPoDs.
    let run = two_nodes(1);
    for (pooled, spans) in &run.ranks {
        assert_eq!(pooled.sum, [10.0; 8], "1 + 2 + 3 + 4");
        let staged = CollectivePath::Staged(Staged::CrossSuperPod);
        assert_eq!(pooled.predicted, staged);
        assert!(spans);
    }
    assert_eq!(run.symmetric, 0, "no window, nothing symmetric");
    // Per rank at least the pool's warm-up and the AllReduce staged.
    assert!(run.staged >= 4 * 2, "{}", run.staged);
    session.assert_clean();
}

#[test]
fn the_same_collective_within_one_superpod_is_symmetric_across_nodes() {
    let session = EmuSession::start();
    let run = two_nodes(24);
    for (pooled, spans) in &run.ranks {
        assert_eq!(pooled.sum, [10.0; 8]);
        assert_eq!(pooled.predicted, CollectivePath::Symmetric);
        assert!(!spans);
    }
    // Per rank: the warm-up and the AllReduce, on windows.
    assert_eq!(run.symmetric, 4 * 2);
    session.assert_clean();
}

#[test]
fn a_node_layout_without_ranks_is_refused() {
    for layout in [NodeLayout::new(0, 2), NodeLayout::new(2, 0)] {
        let err = emu::launch_nodes_with(&layout, &CommConfig::new(), |_| Ok(())).unwrap_err();
        assert!(err.to_string().contains("at least one node"), "{err}");
    }
    let empty_pods = NodeLayout::new(2, 2).nodes_per_superpod(0);
    let err = emu::launch_nodes_with(&empty_pods, &CommConfig::new(), |_| Ok(())).unwrap_err();
    assert!(err.to_string().contains("SuperPoD"), "{err}");
}

/// One rank of [`across_two_superpods_as_processes`]: on node `rank / 2` (the launcher's
/// `SYMHEAP_EMU_NODE`), its SuperPoD the node's, since the job sets
/// `SYMHEAP_EMU_NODES_PER_SUPERPOD=1`.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_across_superpods() {
    placement();
    let rt = symheap::Runtime::emulated().unwrap();
    let comm = symheap::Comm::from_env(&rt, CommConfig::new().exec_timeout_secs(60)).unwrap();
    assert!(comm.spans_superpods());
    let before = emu::testing::counters().symmetric_collectives;
    let pooled = pooled_all_reduce(&comm).unwrap();
    assert_eq!(pooled.sum, [10.0; 8]);
    let staged = CollectivePath::Staged(Staged::CrossSuperPod);
    assert_eq!(pooled.predicted, staged);
    assert_eq!(pooled.counted, [(staged, 1)]);
    assert_eq!(emu::testing::counters().symmetric_collectives, before);
}

#[test]
fn across_two_superpods_as_processes() {
    let job = rank_job_on_nodes("topology", 2, 2, "rank_across_superpods")
        .env("SYMHEAP_EMU_NODES_PER_SUPERPOD", "1")
        .grace(Duration::from_secs(20));
    let outcome = job.run().expect("the ranks start");
    assert!(outcome.success(), "{}", failed(&outcome));
}

#[test]
fn one_rank_per_node_stages_as_the_pool_predicts() {
    let session = EmuSession::start();
    let before = emu::testing::counters().symmetric_collectives;
    // A data-parallel group's shape: one rank on each of 2 nodes of one SuperPoD.
    let ranks = emu::launch_nodes(2, 1, |world| {
        assert!(!world.spans_superpods());
        assert!(world.has_uneven_nodes());
        pooled_all_reduce(world)
    })
    .unwrap();
    for pooled in &ranks {
        assert_eq!(pooled.sum, [3.0; 8]);
        let staged = CollectivePath::Staged(Staged::RanksPerNode);
        assert_eq!(pooled.predicted, staged);
        assert_eq!(pooled.counted, [(staged, 1)]);
    }
    let symmetric = emu::testing::counters().symmetric_collectives - before;
    assert_eq!(symmetric, 0, "windows registered, but nothing symmetric");
    session.assert_clean();
}

/// A C program written for CANN (`alloc-tests/c/rank_graph.c`), compiled with `-Werror`
/// against the emulator's headers and linked with `-lhccl -lascendcl`, run as 4 processes on
/// 2 nodes in 2 SuperPoDs: the rank graph through the C ABI, the window refused with
/// `HCCL_E_NOT_SUPPORT`, and a staged AllReduce.
#[test]
fn a_c_program_reads_the_rank_graph_across_superpods() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("alloc-tests");
    let include = format!("-I{}", root.join("emu-cdylib/include").display());
    let flags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", &include];
    let program =
        crate::dlopen::compile_for_cann("rank-graph", "cc", &flags, &root.join("c/rank_graph.c"));
    let outcome = symheap_tools::launcher::Job::on_nodes(2, 2, program)
        .env("SYMHEAP_EMU_NODES_PER_SUPERPOD", "1")
        .grace(Duration::from_secs(20))
        .capture_output()
        .run()
        .unwrap();
    assert!(outcome.success(), "{}", failed(&outcome));
}
