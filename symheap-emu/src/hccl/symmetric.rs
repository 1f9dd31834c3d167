//! The symmetric path: both buffers are inside registered windows at the same offsets on every
//! rank (checked at the collective's first rendezvous), so a rank reads (and, for AllReduce,
//! writes) its peers' buffers directly through its own heap, at
//! `heapBase + stride * peer + slot + offset`: zero copy.

use crate::base::primitives::{copy, part};
use crate::base::reduce::reduce;
use crate::hccl::job::{Job, SymBuf};
use crate::hccl::steps::Steps;
use symheap_types::Collective;

/// Runs `job`, whose input is `input` and output `output` on every rank, between the
/// collective's entry and exit rendezvous.
pub(crate) fn run(steps: &Steps<'_>, job: &Job, input: &SymBuf, output: &SymBuf) {
    let (r, n) = (steps.rank, steps.n);
    let (es, c) = (job.es, job.count);
    // Where rank k's input is visible to this rank: its own through its own mapping.
    let src = |k: u32| if k == r { job.send } else { input.peer(k) };
    // SAFETY (every block below): the job's own buffers are checked, pinned device memory; a
    // peer's buffer is the same range of the peer's window (same slot, same offset, same
    // size on every rank), mapped in this rank's heap while the job holds the window. The
    // entry rendezvous means every rank's earlier stream work is done, each rank writes only
    // bytes no other rank reads in this collective, and the exit rendezvous keeps every rank
    // here until all are done.
    match job.sig.kind {
        Collective::AllReduce => {
            // Rank r reduces part r of every input, once, and writes the result straight into
            // every rank's output: a reduce-scatter whose all-gather is a remote write, so no
            // rank reads a peer's result back. Part r of any buffer is touched by rank r only
            // (in place, each block is read in full before it is written).
            let (lo, hi) = part(c, n, r);
            let srcs: Vec<usize> = (0..n).map(|k| src(k) + lo * es).collect();
            let dst = |k: u32| if k == r { job.recv } else { output.peer(k) };
            let dsts: Vec<usize> = (0..n).map(|k| dst(k) + lo * es).collect();
            // SAFETY: see above.
            unsafe { reduce(job.dtype, job.op, &dsts, &srcs, hi - lo) };
        }
        Collective::AllGather => {
            for k in 0..n {
                // SAFETY: see above (the copy is skipped when in place).
                unsafe { copy(job.recv + k as usize * c * es, src(k), c * es) };
            }
        }
        Collective::ReduceScatter => {
            let srcs: Vec<usize> = (0..n).map(|k| src(k) + r as usize * c * es).collect();
            // SAFETY: see above.
            unsafe { reduce(job.dtype, job.op, &[job.recv], &srcs, c) };
        }
        Collective::AlltoAll => {
            for k in 0..n {
                let from = src(k) + r as usize * c * es;
                // SAFETY: see above.
                unsafe { copy(job.recv + k as usize * c * es, from, c * es) };
            }
        }
        // Never routed here: HCCL uses no windows for the rooted ones, Barrier and the V
        // collectives, and point-to-point calls never make a job.
        Collective::Broadcast
        | Collective::Barrier
        | Collective::Reduce
        | Collective::Scatter
        | Collective::AllGatherV
        | Collective::ReduceScatterV
        | Collective::AlltoAllV
        | Collective::AlltoAllVC
        | Collective::Send
        | Collective::Recv => {}
    }
}
