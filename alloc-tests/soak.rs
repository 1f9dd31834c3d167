//! The soak: 4 ranks run the same long random program of pool steps (allocations small and
//! large, frees, growth, trim, collectives, synchronisation, symmetry checks) and check every
//! collective's values. `soak_for_20_seconds` runs in the suite; `soak_a_million_steps` is
//! `#[ignore]`d (`cargo test --release -- --ignored soak_a_million_steps`, several minutes).

use std::time::{Duration, Instant};

use symheap::{Error, PoolConfig, ReduceOp, Result, SymPool, SymVec, emu};

use crate::harness::EmuSession;
use crate::support::rng::Rng;

const RANKS: u32 = 4;

/// How long a soak runs.
#[derive(Clone, Copy)]
enum Budget {
    Steps(u64),
    Time(Duration),
}

/// Every rank's own value for a buffer whose seed is `k`: whole numbers, so sums are exact.
fn value(rank: u32, k: u64) -> f32 {
    ((rank as u64 + 1) * (k % 1000 + 1)) as f32
}

/// One rank's soak: returns the steps taken. Every rank draws the same random sequence, so
/// all make the same pool calls; the values differ by rank.
fn soak_rank(pool: &SymPool, seed: u64, budget: Budget) -> Result<u64> {
    let rank = pool.comm().rank();
    let ranks = pool.comm().rank_count();
    let sum_of_ranks = (ranks * (ranks + 1) / 2) as f32;
    let mut rng = Rng::new(seed);
    let mut live: Vec<SymVec<f32>> = Vec::new();
    let mut stop = SymVec::<f32>::zeroed(pool, 1)?;
    let started = Instant::now();
    let mut steps = 0u64;
    loop {
        // Whether to stop is rank 0's decision, shared by a collective every 256 steps.
        if steps.is_multiple_of(256) {
            let done = match budget {
                Budget::Steps(n) => steps >= n,
                Budget::Time(t) => rank == 0 && started.elapsed() >= t,
            };
            stop.copy_from_host(&[if done { 1.0 } else { 0.0 }])?;
            pool.all_reduce_in_place(&mut stop, ReduceOp::Max)?;
            if stop.to_host()?[0] > 0.0 {
                break;
            }
        }
        steps += 1;
        match rng.below(100) {
            0..=34 if live.len() < 64 => {
                let len = rng.log_uniform(1, 1 << 16) as usize;
                match SymVec::<f32>::zeroed(pool, len) {
                    Ok(v) => live.push(v),
                    Err(Error::OutOfMemory(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            35..=36 => match SymVec::<f32>::zeroed(pool, 1 << 20) {
                // 4 MiB: more than a window holds, so the pool grows (or hits its limit).
                Ok(v) => live.push(v),
                Err(Error::OutOfMemory(_)) => {}
                Err(e) => return Err(e),
            },
            37..=69 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                live.swap_remove(i);
            }
            70..=84 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                let k = rng.next_u64();
                let v = &mut live[i];
                v.copy_from_host(&vec![value(rank, k); v.len()])?;
                pool.all_reduce_in_place(v, ReduceOp::Sum)?;
                let want = (k % 1000 + 1) as f32 * sum_of_ranks;
                check(v.to_host()?.iter().all(|&x| x == want), "AllReduce", steps)?;
            }
            85..=92 => {
                let len = rng.log_uniform(1, 1 << 12) as usize;
                let k = rng.next_u64();
                let input = SymVec::from_host(pool, &vec![value(rank, k); len])?;
                let mut output = SymVec::<f32>::zeroed(pool, len * ranks as usize)?;
                pool.all_gather(&input, &mut output)?;
                let gathered = output.to_host()?;
                let right = gathered
                    .chunks(len)
                    .enumerate()
                    .all(|(r, block)| block.iter().all(|&x| x == value(r as u32, k)));
                check(right, "AllGather", steps)?;
            }
            93..=95 => pool.synchronize()?,
            96..=97 => pool.verify_symmetric()?,
            98..=99 => {
                pool.trim()?;
            }
            _ => {}
        }
    }
    drop(live);
    pool.synchronize()?;
    pool.trim()?;
    pool.verify_symmetric()?;
    Ok(steps)
}

fn check(right: bool, what: &str, step: u64) -> Result<()> {
    if right {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what} gave wrong values at step {step}"
        )))
    }
}

fn soak(budget: Budget) -> u64 {
    let session = EmuSession::start();
    let steps = emu::launch(RANKS, |comm| {
        let config = PoolConfig::new(4 << 20).max_capacity(16 << 20);
        let pool = SymPool::new(comm, config)?;
        let steps = soak_rank(&pool, 0x50a4, budget)?;
        let stats = pool.stats();
        assert_eq!(stats.windows, 1, "trimmed back to the first window");
        assert_eq!(stats.pending_frees, 0);
        Ok((steps, stats.registrations))
    })
    .unwrap();
    session.assert_clean();
    let (taken, registrations) = steps[0];
    assert!(steps.iter().all(|&(s, _)| s == taken), "{steps:?}");
    println!("soak: {RANKS} ranks x {taken} steps, {registrations} registrations per rank");
    taken
}

#[test]
fn soak_for_20_seconds() {
    let taken = soak(Budget::Time(Duration::from_secs(20)));
    assert!(taken > 0);
}

#[test]
#[ignore = "several minutes: cargo test --release -- --ignored soak_a_million_steps"]
fn soak_a_million_steps() {
    soak(Budget::Steps(1_000_000));
}
