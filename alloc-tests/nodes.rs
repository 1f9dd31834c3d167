//! Jobs of several emulated nodes, as `symheap-run --nnodes N --nproc-per-node M` starts them:
//! this test binary re-runs itself as the ranks ([`Job::on_nodes`], the launcher's library
//! side, which the binary's flags build), each on device = its local rank.
//!
//! The 384-rank job (24 nodes of 16, a CloudMatrix384) takes about 25 s and 2 GiB on 2 cores
//! and is ignored in a normal run:
//! `cargo test --release --test alloc-tests nodes:: -- --ignored --exact nodes::a_light_program_runs_as_24_nodes_of_16`.

use symheap::{Comm, CommConfig, PoolConfig, ReduceOp, Runtime, SymPool, SymVec};
use symheap_tools::launcher::Outcome;

use crate::pool::random_program;
use crate::processes::{failed, rank_job_on_nodes};

/// The job that runs the test `nodes::rank_test` of this binary as `nodes` x `per_node`
/// processes.
fn on_nodes(nodes: u32, per_node: u32, rank_test: &str) -> Outcome {
    rank_job_on_nodes("nodes", nodes, per_node, rank_test)
        .run()
        .expect("the ranks start")
}

/// A variable the launcher sets, as a number.
fn var(name: &str) -> u32 {
    let value = std::env::var(name).unwrap_or_else(|_| panic!("the launcher sets {name}"));
    value.parse().unwrap_or_else(|_| panic!("{name}={value}"))
}

/// Joins from the environment after checking that the launcher placed this rank where its
/// global rank says: node `rank / per_node`, device = local rank `rank % per_node`.
fn join_on_a_node() -> (Runtime, Comm) {
    let (rank, per_node) = (var("RANK"), var("LOCAL_WORLD_SIZE"));
    assert_eq!(var("SYMHEAP_RANK"), rank);
    assert_eq!(var("LOCAL_RANK"), rank % per_node);
    assert_eq!(var("SYMHEAP_DEVICE"), rank % per_node);
    assert_eq!(var("GROUP_RANK"), rank / per_node);
    assert_eq!(var("SYMHEAP_EMU_NODE"), rank / per_node);
    let rt = Runtime::emulated().unwrap();
    // Hundreds of processes on 2 cores: slow peers get time.
    let comm = Comm::from_env(&rt, CommConfig::new().exec_timeout_secs(300)).unwrap();
    assert_eq!(comm.device(), rank % per_node, "device = local rank");
    (rt, comm)
}

/// Rank `r`'s element `i`: small integers, whose sums are exact.
fn value(rank: u32, i: usize) -> i32 {
    (rank % 7) as i32 + (i % 5) as i32
}

/// A `len`-element AllReduce (sum) on the pool, checked against the host's sum.
fn all_reduce_checked(pool: &SymPool, comm: &Comm, len: usize) {
    let mine: Vec<i32> = (0..len).map(|i| value(comm.rank(), i)).collect();
    let input = SymVec::from_host(pool, &mine).unwrap();
    let mut output = SymVec::<i32>::zeroed(pool, len).unwrap();
    pool.all_reduce(&input, &mut output, ReduceOp::Sum).unwrap();
    let want: Vec<i32> = (0..len)
        .map(|i| (0..comm.rank_count()).map(|r| value(r, i)).sum())
        .collect();
    assert_eq!(output.to_host().unwrap(), want, "rank {}", comm.rank());
}

/// Every rank's `digest`, gathered: all equal, or the rank with another one is named.
fn same_on_every_rank(pool: &SymPool, comm: &Comm, digest: u64) {
    let mine = SymVec::from_host(pool, &[digest]).unwrap();
    let mut all = SymVec::<u64>::zeroed(pool, comm.rank_count() as usize).unwrap();
    pool.all_gather(&mine, &mut all).unwrap();
    let all = all.to_host().unwrap();
    let other = all.iter().position(|&d| d != digest);
    assert_eq!(other, None, "placements differ: {all:x?}");
}

#[test]
#[ignore = "one rank of a multi-node test"]
fn rank_of_a_pool_program_on_nodes() {
    let (_rt, comm) = join_on_a_node();
    let pool = SymPool::new(&comm, PoolConfig::new(2 << 20).max_capacity(8 << 20)).unwrap();
    // Allocations of many sizes, freed and reused: the same offsets on every rank.
    let placements = random_program(&pool, 33, 200).unwrap();
    pool.verify_symmetric().unwrap();
    for len in [1000, 100_000, 3] {
        all_reduce_checked(&pool, &comm, len);
    }
    let digest = placements.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, p| {
        let (w, o, l) = p.unwrap_or((usize::MAX, u64::MAX, u64::MAX));
        [w as u64, o, l]
            .iter()
            .fold(h, |h, &x| (h ^ x).wrapping_mul(0x0100_0000_01b3))
    });
    same_on_every_rank(&pool, &comm, digest);
}

/// 64 ranks as 4 nodes of 16 (`symheap-run --nnodes 4 --nproc-per-node 16`): device ids
/// 0..16 on each node, identical offsets, correct results.
#[test]
fn a_pool_program_runs_as_4_nodes_of_16_with_identical_offsets() {
    let outcome = on_nodes(4, 16, "rank_of_a_pool_program_on_nodes");
    assert!(outcome.success(), "{}", failed(&outcome));
}

#[test]
#[ignore = "one rank of a multi-node test"]
fn rank_of_a_light_program_on_nodes() {
    let (_rt, comm) = join_on_a_node();
    let pool = SymPool::new(&comm, PoolConfig::new(2 << 20)).unwrap();
    all_reduce_checked(&pool, &comm, 16);
}

/// 384 ranks as 24 nodes of 16 (`symheap-run --nnodes 24 --nproc-per-node 16`): join, one
/// small AllReduce checked, leave.
#[test]
#[ignore = "384 processes: about 25 s and 2 GiB on 2 cores; run on its own"]
fn a_light_program_runs_as_24_nodes_of_16() {
    let outcome = on_nodes(24, 16, "rank_of_a_light_program_on_nodes");
    assert!(outcome.success(), "{}", failed(&outcome));
}
