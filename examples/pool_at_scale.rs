//! A pool program for jobs of many nodes: each rank builds a `SymPool`, allocates vectors of
//! several sizes and element types, runs AllReduce and AllGather on them, checks every result
//! against the host's reference, and checks that every rank placed every vector at the same
//! offset (a digest of the offsets, gathered from all ranks, must be one value).
//!
//! ```sh
//! cargo build --release --example pool_at_scale
//! cargo build --release -p symheap-tools --bin symheap-run
//! target/release/symheap-run --nnodes 4 --nproc-per-node 16 target/release/examples/pool_at_scale
//! target/release/symheap-run --nnodes 24 --nproc-per-node 16 target/release/examples/pool_at_scale --light
//! ```
//!
//! `--light` runs only what a job of 384 ranks on a laptop can afford: join, one small pool,
//! one AllReduce of a few elements checked, leave. Rank 0 prints one line at the end:
//! `ok: N ranks on K nodes, offsets identical (digest D)` (the digest is the FNV-1a hash of
//! every vector's offset and length); any wrong value or differing offset makes the
//! rank that saw it exit with an error naming it, which fails the job.

use symheap::{Comm, CommConfig, Element, PoolConfig, ReduceOp, Result, Runtime, SymPool, SymVec};

/// FNV-1a over 64-bit words.
fn digest(words: impl IntoIterator<Item = u64>) -> u64 {
    words.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, w| {
        (h ^ w).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A failure of this rank, as the error the program exits with.
fn wrong(what: String) -> symheap::Error {
    symheap::Error::InvalidArgument(what)
}

/// Rank `rank`'s element `i` of a vector: small integers, exact in every element type used.
fn value(rank: u32, i: usize) -> i64 {
    (rank as i64 % 7) + (i as i64 % 5)
}

/// AllReduce (sum) of `len` elements of `T` on the pool, checked against the host's sum.
fn all_reduce_checked<T: Element + PartialEq + std::fmt::Debug>(
    pool: &SymPool,
    comm: &Comm,
    len: usize,
    from_i64: impl Fn(i64) -> T,
) -> Result<SymVec<T>> {
    let rank = comm.rank();
    let ranks = comm.rank_count();
    let mine: Vec<T> = (0..len).map(|i| from_i64(value(rank, i))).collect();
    let input = SymVec::from_host(pool, &mine)?;
    let mut output = SymVec::<T>::zeroed(pool, len)?;
    pool.all_reduce(&input, &mut output, ReduceOp::Sum)?;
    let got = output.to_host()?;
    for (i, got) in got.iter().enumerate() {
        let want = from_i64((0..ranks).map(|r| value(r, i)).sum());
        if *got != want {
            return Err(wrong(format!(
                "rank {rank}: AllReduce of {len} x {}: element {i} is {got:?}, not {want:?}",
                std::any::type_name::<T>()
            )));
        }
    }
    Ok(output)
}

/// AllGather of `len` `i32` per rank, checked: rank `r`'s part comes `r`-th.
fn all_gather_checked(pool: &SymPool, comm: &Comm, len: usize) -> Result<SymVec<i32>> {
    let (rank, ranks) = (comm.rank(), comm.rank_count());
    let part = |r: u32| (0..len).map(move |i| r as i32 * 1000 + i as i32);
    let input = SymVec::from_host(pool, &part(rank).collect::<Vec<_>>())?;
    let mut output = SymVec::<i32>::zeroed(pool, len * ranks as usize)?;
    pool.all_gather(&input, &mut output)?;
    let want: Vec<i32> = (0..ranks).flat_map(part).collect();
    if output.to_host()? != want {
        return Err(wrong(format!(
            "rank {rank}: AllGather of {len} x i32 differs from the ranks' parts"
        )));
    }
    Ok(output)
}

fn run(light: bool) -> Result<()> {
    let rt = Runtime::emulated()?;
    // A 384-rank job on 2 cores: give slow peers time.
    let config = CommConfig::new().exec_timeout_secs(300);
    let comm = Comm::from_env(&rt, config)?;
    let capacity = if light { 2 << 20 } else { 4 << 20 };
    let pool = SymPool::new(&comm, PoolConfig::new(capacity).max_capacity(capacity))?;
    let mut offsets = Vec::new();
    let mut keep = |offset: u64, len: usize| offsets.extend([offset, len as u64]);
    if light {
        let v = all_reduce_checked(&pool, &comm, 16, |x| x as i32)?;
        keep(v.offset(), v.len());
    } else {
        let a = all_reduce_checked(&pool, &comm, 1000, |x| x as f32)?;
        keep(a.offset(), a.len());
        let b = all_reduce_checked(&pool, &comm, 100_000, |x| x as i32)?;
        keep(b.offset(), b.len());
        drop(a);
        // Placed in the hole `a` left (or not): either way the same on every rank.
        let c = all_reduce_checked(&pool, &comm, 3000, |x| x)?;
        keep(c.offset(), c.len());
        let d = all_gather_checked(&pool, &comm, 512)?;
        keep(d.offset(), d.len());
        pool.verify_symmetric()?;
    }
    // Every rank's digest, gathered: one value, or the ranks placed something differently.
    let mine = digest(offsets);
    let input = SymVec::from_host(&pool, &[mine])?;
    let mut all = SymVec::<u64>::zeroed(&pool, comm.rank_count() as usize)?;
    pool.all_gather(&input, &mut all)?;
    let all = all.to_host()?;
    if let Some(other) = all.iter().position(|&d| d != mine) {
        return Err(wrong(format!(
            "rank {}: offsets differ: mine hash to {mine:x}, rank {other}'s to {:x}",
            comm.rank(),
            all[other]
        )));
    }
    if comm.rank() == 0 {
        let nodes = std::env::var("GROUP_WORLD_SIZE").unwrap_or_else(|_| "1".into());
        println!(
            "ok: {} ranks on {nodes} nodes, offsets identical (digest {mine:016x})",
            comm.rank_count()
        );
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let light = std::env::args().skip(1).any(|a| a == "--light");
    match run(light) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pool_at_scale: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
