//! The staged path, for buffers outside symmetric windows: as HCCL does with its HCCL
//! buffer, each rank copies its input into its own staging buffer, and peers read only the
//! staging buffers, chunk by chunk when the data exceeds them. The extra copy is real.
//!
//! Every phase boundary is a rendezvous step, so no rank overwrites a staging buffer a peer
//! still reads. Each chunk begins with a barrier (except the first: the collective's first
//! rendezvous serves) and the collective's exit barrier ends the last.

use crate::sys::HcclResult;

use crate::base::errors::{HcclRes, hccl_fail};
use crate::base::primitives::{copy, part};
use crate::base::reduce::reduce;
use crate::hccl::job::Job;
use crate::hccl::steps::Steps;
use crate::hccl::v_layout::{Blocks, Table};
use symheap_types::Collective;

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
            Collective::AllReduce | Collective::Reduce => chunk.all_reduce(steps)?,
            Collective::AllGather => chunk.all_gather(steps)?,
            Collective::ReduceScatter | Collective::AlltoAll => chunk.to_every_peer(steps)?,
            Collective::Broadcast => chunk.broadcast(steps)?,
            Collective::Scatter => chunk.scatter(steps)?,
            // Barrier moves nothing; the V collectives go through `run_vector`, and
            // point-to-point calls never make a job.
            Collective::Barrier
            | Collective::AllGatherV
            | Collective::ReduceScatterV
            | Collective::AlltoAllV
            | Collective::AlltoAllVC
            | Collective::Send
            | Collective::Recv => {}
        }
        start += len;
    }
    Ok(())
}

/// Elements of one rank's (or one peer's) share that fit `cap`-byte staging buffers per chunk.
fn chunk_len(job: &Job, n: u32, cap: usize) -> HcclRes<usize> {
    let per = match job.sig.kind {
        Collective::ReduceScatter | Collective::AlltoAll | Collective::Scatter => {
            cap / (job.es * n as usize)
        }
        _ => cap / job.es,
    };
    if per == 0 && job.sig.kind != Collective::Barrier {
        return too_small(cap);
    }
    Ok(per)
}

/// The failure of a staging buffer too small for one element per rank.
fn too_small<T>(cap: usize) -> HcclRes<T> {
    hccl_fail(
        HcclResult::HCCL_E_MEMORY,
        format!("a {cap}-byte staging buffer cannot hold one element per rank"),
    )
}

/// Runs V collective `job` (this rank's `blocks`, every rank's `table`) through the staging
/// buffers `staging[r]` of `cap` bytes each, in rounds: in round `c`, every rank stages
/// elements `[c * per, (c + 1) * per)` of its block for each rank `j` in section `j` of its
/// staging buffer (AllGatherV's one block once, in section 0), and after a barrier every rank
/// copies (or, for ReduceScatterV, reduces) its section of every staging buffer into its
/// blocks. The number of rounds comes from the table, so it is the same on every rank however
/// unequal the counts; a rank with nothing in a round still meets its peers.
pub(crate) fn run_vector(
    steps: &mut Steps<'_>,
    job: &Job,
    blocks: &Blocks,
    table: &Table,
    staging: &[usize],
    cap: usize,
) -> HcclRes {
    let (r, n, es) = (steps.rank, steps.n, job.es);
    let shared = job.sig.kind == Collective::AllGatherV;
    let sections = if shared { 1 } else { n as usize };
    let per = cap / (es * sections);
    if per == 0 {
        return too_small(cap);
    }
    let mine = staging[r as usize];
    // Where section `j` of a staging buffer starts, and where this rank's own section is.
    let section = |j: usize| j * per * es;
    let own = if shared { 0 } else { section(r as usize) };
    let rounds = table.max_count().div_ceil(per);
    for round in 0..rounds {
        let start = round * per;
        if round > 0 {
            steps.barrier()?;
        }
        // SAFETY (every copy and reduction below): as for `Chunk`: the job's blocks are
        // checked, pinned device memory (every block a table entry names for this rank is one
        // of its own blocks, or a peer's it checked); a piece is at most `per` elements, so a
        // section fits its staging buffer; the barriers order every staging write before the
        // reads of it, and each rank writes only its own staging buffer and blocks.
        // Empty pieces are skipped before any address is made: an empty block's displacement
        // may be anything that does not overflow on its own.
        for j in 0..sections {
            let b = table.block(r, if shared { r } else { j as u32 });
            let len = b.piece(start, per);
            if len == 0 {
                continue;
            }
            let src = job.send + (b.displ as usize + start) * es;
            // SAFETY: see above.
            unsafe { copy(mine + section(j), src, len * es) };
        }
        steps.barrier()?;
        if job.sig.kind == Collective::ReduceScatterV {
            let len = blocks.recv[r as usize].piece(start, per);
            if len > 0 {
                let srcs: Vec<usize> = staging.iter().map(|s| s + own).collect();
                let dst = job.recv + start * es;
                // SAFETY: see above.
                unsafe { reduce(job.dtype, job.op, &[dst], &srcs, len) };
            }
            continue;
        }
        for (k, &s) in (0..n).zip(staging) {
            let len = table.block(k, r).piece(start, per);
            if len == 0 {
                continue;
            }
            let dst = job.recv + (blocks.recv[k as usize].displ as usize + start) * es;
            // SAFETY: see above.
            unsafe { copy(dst, s + own, len * es) };
        }
    }
    Ok(())
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
    /// own, in place; then every rank (Reduce: the root only) copies each part out of the
    /// rank that reduced it.
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
        if job.sig.kind == Collective::Reduce && steps.rank != job.sig.root {
            return Ok(());
        }
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
        if job.sig.kind == Collective::ReduceScatter {
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

    /// The root stages this chunk of every rank's block in that rank's section; every rank
    /// copies its section out of the root's buffer.
    fn scatter(self, steps: &mut Steps<'_>) -> HcclRes {
        let (root, bytes) = (self.job.sig.root, self.bytes());
        if steps.rank == root {
            for j in 0..steps.n as usize {
                // SAFETY: see `Chunk`; section j fits (`n * bytes <= cap`).
                unsafe { copy(self.mine + j * bytes, self.input(j), bytes) };
            }
        }
        steps.barrier()?;
        let section = self.staging[root as usize] + steps.rank as usize * bytes;
        // SAFETY: see `Chunk`.
        unsafe { copy(self.output(0), section, bytes) };
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
