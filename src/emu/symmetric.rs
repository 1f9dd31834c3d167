//! The symmetric path: both buffers are inside registered windows at the same offsets on every
//! rank (checked at the collective's first rendezvous), so a rank reads its peers' data
//! directly through its own heap, at `heapBase + stride * peer + slot + offset`: zero copy.

use super::collective::{Ctx, Job, Kind, SymBuf, copy, part};
use super::errors::HcclRes;
use super::reduce::reduce;

/// Runs `job`, whose input is `input` and output `output` on every rank.
pub(crate) fn run(ctx: &mut Ctx<'_>, job: &Job, input: &SymBuf, output: &SymBuf) -> HcclRes {
    let (r, n) = (ctx.rank, ctx.n);
    let (es, c) = (job.es, job.count);
    // Where rank k's input is visible to this rank: its own through its own mapping.
    let src = |k: u32| if k == r { job.send } else { input.peer(k) };
    // SAFETY (every block below): the job's own buffers are checked, pinned device memory; a
    // peer's buffer is the same range of the peer's window (same slot, same offset, same
    // size on every rank), mapped in this rank's heap while the job holds the window; and
    // the phases are ordered by rendezvous steps so no bytes are written while read.
    match job.kind {
        Kind::AllReduce => {
            // Reduce-scatter phase: rank r reduces part r of every input into its output.
            let (lo, hi) = part(c, n, r);
            let srcs: Vec<usize> = (0..n).map(|k| src(k) + lo * es).collect();
            // SAFETY: see above; in place, part r of the output is read only by rank r.
            unsafe { reduce(job.dtype, job.op, job.recv + lo * es, &srcs, hi - lo) };
            ctx.barrier()?;
            // All-gather phase: copy every peer's finished part.
            for j in (0..n).filter(|&j| j != r) {
                let (lo, hi) = part(c, n, j);
                let from = output.peer(j) + lo * es;
                // SAFETY: see above; peers write only their own part j, finished before the
                // barrier, and read nothing this rank writes now.
                unsafe { copy(job.recv + lo * es, from, (hi - lo) * es) };
            }
        }
        Kind::AllGather => {
            for k in 0..n {
                // SAFETY: see above (the copy is skipped when in place).
                unsafe { copy(job.recv + k as usize * c * es, src(k), c * es) };
            }
        }
        Kind::ReduceScatter => {
            let srcs: Vec<usize> = (0..n).map(|k| src(k) + r as usize * c * es).collect();
            // SAFETY: see above.
            unsafe { reduce(job.dtype, job.op, job.recv, &srcs, c) };
        }
        Kind::AlltoAll => {
            for k in 0..n {
                let from = src(k) + r as usize * c * es;
                // SAFETY: see above.
                unsafe { copy(job.recv + k as usize * c * es, from, c * es) };
            }
        }
        // Never routed here (HCCL does not use windows for these).
        Kind::Broadcast | Kind::Barrier => {}
    }
    Ok(())
}
