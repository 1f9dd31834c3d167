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
    let per = chunk_len(job, steps.n, cap)?;
    let mine = staging[steps.rank as usize];
    let mut start = 0;
    while start < job.count {
        let len = per.min(job.count - start);
        if start > 0 {
            steps.barrier()?;
        }
        let chunk = Chunk {
            job,
            staging,
            mine,
            start,
            len,
        };
        match job.sig.kind {
            Kind::AllReduce => chunk.all_reduce(steps)?,
            Kind::AllGather => chunk.all_gather(steps)?,
            Kind::ReduceScatter | Kind::AlltoAll => chunk.to_every_peer(steps)?,
            Kind::Broadcast => chunk.broadcast(steps)?,
            Kind::Barrier => {}
        }
        start += len;
    }
    Ok(())
}

/// Elements of one rank's (or one peer's) share that fit `cap`-byte staging buffers per chunk.
fn chunk_len(job: &Job, n: u32, cap: usize) -> HcclRes<usize> {
    let per = match job.sig.kind {
        Kind::ReduceScatter | Kind::AlltoAll => cap / (job.es * n as usize),
        _ => cap / job.es,
    };
    if per == 0 && job.sig.kind != Kind::Barrier {
        return hccl_fail(
            HcclResult::HCCL_E_MEMORY,
            format!("a {cap}-byte staging buffer cannot hold one element per rank"),
        );
    }
    Ok(per)
}

/// Elements `[start, start + len)` of a job's buffer (or of each rank's share of it), moved
/// through the staging buffers.
///
/// Every copy and reduction of a chunk is sound for the same reasons: the job's buffers are
/// checked, pinned device memory (see [`Job`]); the staging buffers are large enough for a
/// chunk ([`chunk_len`]) and kept mapped by this task (it holds every rank's buffer); the
/// barriers order every write before the reads of it, and no two ranks write the same bytes
/// in one phase.
#[derive(Clone, Copy)]
struct Chunk<'a> {
    job: &'a Job,
    /// Every rank's staging buffer, in rank order.
    staging: &'a [usize],
    /// This rank's staging buffer.
    mine: usize,
    start: usize,
    len: usize,
}

impl Chunk<'_> {
    /// Where this chunk of block `j` of the input is (block 0 of a one-block input).
    fn input(&self, j: usize) -> usize {
        self.job.send + (j * self.job.count + self.start) * self.job.es
    }

    /// Where this chunk of block `j` of the output is (block 0 of a one-block output).
    fn output(&self, j: usize) -> usize {
        self.job.recv + (j * self.job.count + self.start) * self.job.es
    }

    /// Bytes of this chunk of one block.
    fn bytes(&self) -> usize {
        self.len * self.job.es
    }

    /// Every rank stages its input; rank r reduces part r of every staging buffer into its
    /// own, in place; then every rank copies each part out of the rank that reduced it.
    fn all_reduce(self, steps: &mut Steps<'_>) -> HcclRes {
        let (job, es, n) = (self.job, self.job.es, steps.n);
        // SAFETY: see `Chunk`.
        unsafe { copy(self.mine, self.input(0), self.bytes()) };
        steps.barrier()?;
        let (lo, hi) = part(self.len, n, steps.rank);
        let srcs: Vec<usize> = self.staging.iter().map(|s| s + lo * es).collect();
        // SAFETY: see `Chunk`; only rank r writes part r of its staging buffer.
        unsafe { reduce(job.dtype, job.op, &[self.mine + lo * es], &srcs, hi - lo) };
        steps.barrier()?;
        for (j, &s) in (0..n).zip(self.staging) {
            let (lo, hi) = part(self.len, n, j);
            // SAFETY: see `Chunk`.
            unsafe { copy(self.output(0) + lo * es, s + lo * es, (hi - lo) * es) };
        }
        Ok(())
    }

    /// Every rank stages its input, then copies every rank's into its block of the output.
    fn all_gather(self, steps: &mut Steps<'_>) -> HcclRes {
        // SAFETY: see `Chunk`.
        unsafe { copy(self.mine, self.input(0), self.bytes()) };
        steps.barrier()?;
        for (j, &s) in self.staging.iter().enumerate() {
            // SAFETY: see `Chunk`.
            unsafe { copy(self.output(j), s, self.bytes()) };
        }
        Ok(())
    }

    /// ReduceScatter and AlltoAll: every rank stages this chunk of its block for each peer in
    /// that peer's section, then reduces (ReduceScatter) or gathers (AlltoAll) its own section
    /// of every staging buffer.
    fn to_every_peer(self, steps: &mut Steps<'_>) -> HcclRes {
        let (job, bytes) = (self.job, self.bytes());
        for j in 0..steps.n as usize {
            // SAFETY: see `Chunk`; section j fits (`n * bytes <= cap`).
            unsafe { copy(self.mine + j * bytes, self.input(j), bytes) };
        }
        steps.barrier()?;
        let section = steps.rank as usize * bytes;
        if job.sig.kind == Kind::ReduceScatter {
            let srcs: Vec<usize> = self.staging.iter().map(|s| s + section).collect();
            // SAFETY: see `Chunk`.
            unsafe { reduce(job.dtype, job.op, &[self.output(0)], &srcs, self.len) };
        } else {
            for (j, &s) in self.staging.iter().enumerate() {
                // SAFETY: see `Chunk`.
                unsafe { copy(self.output(j), s + section, bytes) };
            }
        }
        Ok(())
    }

    /// The root stages its input; every other rank copies it out of the root's buffer.
    fn broadcast(self, steps: &mut Steps<'_>) -> HcclRes {
        let root = self.job.sig.root;
        if steps.rank == root {
            // SAFETY: see `Chunk`.
            unsafe { copy(self.staging[root as usize], self.input(0), self.bytes()) };
        }
        steps.barrier()?;
        if steps.rank != root {
            // SAFETY: see `Chunk`.
            unsafe { copy(self.output(0), self.staging[root as usize], self.bytes()) };
        }
        Ok(())
    }
}
