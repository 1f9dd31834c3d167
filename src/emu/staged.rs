//! The staged path, for buffers outside symmetric windows: as HCCL does with its HCCL
//! buffer, each rank copies its input into its own staging buffer, and peers read only the
//! staging buffers, chunk by chunk when the data exceeds them. The extra copy is real.
//!
//! Every phase boundary is a rendezvous step, so no rank overwrites a staging buffer a peer
//! still reads. Each chunk begins with a barrier (except the first: the collective's first
//! rendezvous serves) and the collective's exit barrier ends the last.

use crate::sys::HcclResult;

use super::errors::{HcclRes, hccl_fail};
use super::job::{Job, Kind};
use super::primitives::{copy, part};
use super::reduce::reduce;
use super::steps::Steps;

/// Runs `job` through the staging buffers `staging[r]` (one per rank) of `cap` bytes each.
pub(crate) fn run(steps: &mut Steps<'_>, job: &Job, staging: &[usize], cap: usize) -> HcclRes {
    let (r, n) = (steps.rank, steps.n);
    let es = job.es;
    // Elements of one rank's (or one peer's) share that fit a staging buffer per chunk.
    let per = match job.kind {
        Kind::ReduceScatter | Kind::AlltoAll => cap / (es * n as usize),
        _ => cap / es,
    };
    if per == 0 && job.kind != Kind::Barrier {
        return hccl_fail(
            HcclResult::HCCL_E_MEMORY,
            format!("a {cap}-byte staging buffer cannot hold one element per rank"),
        );
    }
    let mine = staging[r as usize];
    let c = job.count;
    let mut o = 0;
    while o < c {
        let l = per.min(c - o);
        if o > 0 {
            steps.barrier()?;
        }
        // SAFETY (every block below): the job's buffers are checked, pinned device memory (see
        // `Job`); the staging buffers are `cap` bytes or more each and kept mapped by this
        // task (it holds every rank's buffer); the barriers order every write before the
        // reads of it, and no two ranks write the same bytes in one phase.
        match job.kind {
            Kind::AllReduce => {
                // SAFETY: see above; `l * es <= cap`.
                unsafe { copy(mine, job.send + o * es, l * es) };
                steps.barrier()?;
                // Rank r reduces part r of every staging buffer into its own, in place.
                let (lo, hi) = part(l, n, r);
                let srcs: Vec<usize> = staging.iter().map(|s| s + lo * es).collect();
                // SAFETY: see above; only rank r writes part r of its staging buffer.
                unsafe { reduce(job.dtype, job.op, &[mine + lo * es], &srcs, hi - lo) };
                steps.barrier()?;
                for (j, &s) in (0..n).zip(staging) {
                    let (lo, hi) = part(l, n, j);
                    // SAFETY: see above.
                    unsafe { copy(job.recv + (o + lo) * es, s + lo * es, (hi - lo) * es) };
                }
            }
            Kind::AllGather => {
                // SAFETY: see above.
                unsafe { copy(mine, job.send + o * es, l * es) };
                steps.barrier()?;
                for (j, &s) in staging.iter().enumerate() {
                    // SAFETY: see above.
                    unsafe { copy(job.recv + (j * c + o) * es, s, l * es) };
                }
            }
            Kind::ReduceScatter | Kind::AlltoAll => {
                for j in 0..n as usize {
                    // SAFETY: see above; section j of `l` elements fits (`n * l * es <= cap`).
                    unsafe { copy(mine + j * l * es, job.send + (j * c + o) * es, l * es) };
                }
                steps.barrier()?;
                let section = r as usize * l * es;
                if job.kind == Kind::ReduceScatter {
                    let srcs: Vec<usize> = staging.iter().map(|s| s + section).collect();
                    // SAFETY: see above.
                    unsafe { reduce(job.dtype, job.op, &[job.recv + o * es], &srcs, l) };
                } else {
                    for (j, &s) in staging.iter().enumerate() {
                        // SAFETY: see above.
                        unsafe { copy(job.recv + (j * c + o) * es, s + section, l * es) };
                    }
                }
            }
            Kind::Broadcast => {
                let root = staging[job.root as usize];
                if r == job.root {
                    // SAFETY: see above.
                    unsafe { copy(root, job.send + o * es, l * es) };
                }
                steps.barrier()?;
                if r != job.root {
                    // SAFETY: see above.
                    unsafe { copy(job.recv + o * es, root, l * es) };
                }
            }
            Kind::Barrier => {}
        }
        o += l;
    }
    Ok(())
}
