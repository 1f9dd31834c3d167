//! One pool shared by a TP x EP layout against one pool per group, in the same run
//! (`cargo bench --bench groups`): device memory reserved, windows registered and symmetric
//! address space reserved per rank, and steps per second, on 4 emulated ranks as threads
//! (TP pairs {0, 1} and {2, 3}; EP = the world).
//!
//! Each step has a tensor-parallel phase (activations, one AllReduce in the pair) and an
//! expert-parallel phase (dispatch and combine buffers, AlltoAll over the world), whose
//! sizes vary from step to step (the same on every rank), then a synchronize. With one
//! pool, the two phases reuse the same memory; with a pool per group, each pool must hold its
//! own phase's peak.

use std::time::Instant;

use symheap::{
    Comm, GroupSizes, ParallelGroups, PoolConfig, PoolStats, ReduceOp, Result, SymPool, SymVec, emu,
};

#[path = "../symheap-heap/tests/support/rng.rs"]
mod rng;

const STEPS: usize = 200;
const ROUNDS: usize = 5;
/// Every pool starts with this much and grows by at least as much.
const CHUNK: u64 = 2 << 20;
/// `hcclSymWinMaxMemSizePerRank`'s default: the symmetric address space HCCL reserves per
/// rank of each communicator with a window.
const STRIDE_GIB: u64 = 16;

/// Where a phase's tensors come from.
struct Pools {
    /// For the TP phase's tensors and collectives.
    tp: SymPool,
    /// For the EP phase's.
    ep: SymPool,
    /// Every distinct pool, for the accounting.
    all: Vec<SymPool>,
}

/// One pool on the world, attached to the TP pair.
fn shared(world: &Comm, groups: &ParallelGroups) -> Result<Pools> {
    let pool = SymPool::new(world, PoolConfig::new(CHUNK).max_capacity(1 << 30))?;
    pool.attach(groups.tp())?;
    Ok(Pools {
        tp: pool.on_group(groups.tp())?,
        ep: pool.clone(),
        all: vec![pool],
    })
}

/// A pool per group: one on the TP pair's communicator, one on the world for EP.
fn per_group(world: &Comm, groups: &ParallelGroups) -> Result<Pools> {
    let config = PoolConfig::new(CHUNK).max_capacity(1 << 30);
    let tp = SymPool::new(groups.tp(), config.clone())?;
    let ep = SymPool::new(world, config)?;
    Ok(Pools {
        all: vec![tp.clone(), ep.clone()],
        tp,
        ep,
    })
}

/// What one layout measured on one rank.
#[derive(Clone, Copy)]
struct Measured {
    steps_per_s: f64,
    reserved: u64,
    windows: usize,
    registrations: u64,
    /// Symmetric address space reserved per rank, in GiB: a heap of `STRIDE_GIB` x its size
    /// per communicator that has a window.
    va_gib: u64,
}

/// The workload on `pools`.
fn run(pools: &Pools) -> Result<Measured> {
    let mut rng = rng::Rng::new(11);
    let started = Instant::now();
    for _ in 0..STEPS {
        // Tensor-parallel phase: 1 to 6 MiB of activations, one AllReduce in the pair.
        let acts: Vec<SymVec<f32>> = (0..3)
            .map(|_| SymVec::zeroed(&pools.tp, rng.log_uniform(64 << 10, 2 << 20) as usize / 4))
            .collect::<Result<_>>()?;
        let mut y = SymVec::<f32>::zeroed(&pools.tp, 16 << 10)?;
        pools.tp.all_reduce_in_place(&mut y, ReduceOp::Sum)?;
        drop((acts, y));
        // Expert-parallel phase: dispatch and combine buffers, an AlltoAll over the world.
        let per_peer = rng.log_uniform(64 << 10, 1 << 20) as usize / 4;
        let ranks = pools.ep.group().rank_count() as usize;
        let dispatch = SymVec::<f32>::zeroed(&pools.ep, per_peer * ranks)?;
        let mut combine = SymVec::<f32>::zeroed(&pools.ep, per_peer * ranks)?;
        pools.ep.all_to_all(&dispatch, &mut combine)?;
        drop((dispatch, combine));
        for pool in &pools.all {
            pool.synchronize()?;
        }
    }
    let rate = STEPS as f64 / started.elapsed().as_secs_f64();
    let stats: Vec<PoolStats> = pools.all.iter().map(SymPool::stats).collect();
    let mut comms: Vec<u32> = Vec::new();
    for s in &stats {
        comms.extend(s.communicators.iter().map(|c| c.ranks));
    }
    Ok(Measured {
        steps_per_s: rate,
        reserved: stats.iter().map(|s| s.reserved).sum(),
        windows: stats.iter().map(|s| s.windows).sum(),
        registrations: stats.iter().map(|s| s.registrations).sum(),
        va_gib: comms.iter().map(|&n| STRIDE_GIB * u64::from(n)).sum(),
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; nothing else is read.
    println!(
        "one pool shared by TP x EP against a pool per group: 4 ranks as threads, TP = 2, EP = 4"
    );
    println!("{STEPS} steps per round, {ROUNDS} rounds in alternation; rank 0's numbers");
    let rounds = emu::launch(4, |world| {
        let groups = ParallelGroups::new(
            world,
            GroupSizes {
                tp: 2,
                dp: 2,
                ep: 4,
            },
        )?;
        let mut out = Vec::new();
        for _ in 0..ROUNDS {
            let a = run(&shared(world, &groups)?)?;
            let b = run(&per_group(world, &groups)?)?;
            out.push((a, b));
        }
        Ok(out)
    })?;
    let rank0 = &rounds[0];
    let (a, b) = rank0[0];
    let rate = |pick: fn(&(Measured, Measured)) -> f64| median(rank0.iter().map(pick).collect());
    let (ra, rb) = (rate(|m| m.0.steps_per_s), rate(|m| m.1.steps_per_s));
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    println!(
        "{:<26} {:>14} {:>14} {:>10}",
        "", "one pool", "pool per group", "ratio"
    );
    println!(
        "{:<26} {:>10.1} MiB {:>10.1} MiB {:>9.2}x",
        "device memory reserved",
        mib(a.reserved),
        mib(b.reserved),
        a.reserved as f64 / b.reserved as f64
    );
    println!(
        "{:<26} {:>14} {:>14}",
        "windows (segments)", a.windows, b.windows
    );
    println!(
        "{:<26} {:>14} {:>14}",
        "window registrations", a.registrations, b.registrations
    );
    println!(
        "{:<26} {:>10} GiB {:>10} GiB",
        "symmetric VA reserved", a.va_gib, b.va_gib
    );
    println!(
        "{:<26} {:>14.1} {:>14.1} {:>9.2}x",
        "steps/s (median)",
        ra,
        rb,
        ra / rb
    );
    Ok(())
}
