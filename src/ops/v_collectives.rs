//! The V collectives on pooled memory (AlltoAllV, AllGatherV, ReduceScatterV): every
//! rank's part has its own count and displacement, all checked before any C call.
//!
//! # Buffers are as long on every rank
//! The pool needs the same allocations on every rank, so a rank's part of a V collective
//! is a region of a buffer allocated alike everywhere (sized for the largest part), never a
//! buffer of its own length: `all_gather_v` sends the first `recv_counts[rank]` elements of
//! its input, `reduce_scatter_v` writes the first `send_counts[rank]` elements of its output,
//! and `all_to_all_v`'s regions lie anywhere in theirs. Each buffer must hold its regions;
//! elements outside them are neither sent nor written.
//!
//! # What the op hash records
//! - `all_gather_v` and `reduce_scatter_v`: HCCL requires the count and displacement arrays
//!   to be the same on every rank, so both are folded into the hash, and strict mode refuses a
//!   call whose arrays differ from rank 0's before it runs.
//! - `all_to_all_v`: each rank's arrays differ by design (rank `r`'s send counts are row `r`
//!   of the exchange matrix, its receive counts column `r`), so neither is folded; the hash
//!   records the kind, element type and buffers, which every rank passes alike. That rank
//!   `p`'s `recv_counts[r]` equals rank `r`'s `send_counts[p]` cannot be seen by one rank
//!   alone: only the pair on the diagonal (what a rank sends itself) is checked here. On CANN
//!   a mismatched pair of peers is undefined (wrong data, or a timeout); the emulator fails
//!   it on every rank with `HCCL_E_PARA`, which poisons the pools, as any failed collective
//!   does. Strict mode could compare the whole matrix with an exchange of
//!   the arrays; it does not, to keep one check (an AllGather of one word) per collective.

use super::Call;
use crate::buffer::{Buffer, BufferMut, Span};
use crate::runtime::Element;
use crate::{Collective, Error, Result, SymPool};

/// The displacements that pack regions of `counts` elements one after another from element
/// 0: the exclusive prefix sums, as most callers of the V collectives lay them out. The
/// sums saturate at `usize::MAX`; the collectives then refuse such a region as overflowing.
///
/// # Examples
/// ```
/// assert_eq!(symheap::packed_displacements(&[2, 0, 3]), [0, 2, 2]);
/// ```
pub fn packed_displacements(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0usize, |next, &count| {
            let start = *next;
            *next = next.saturating_add(count);
            Some(start)
        })
        .collect()
}

/// [`Error::InvalidArgument`] unless a buffer of `len` elements holds this rank's part,
/// `array[rank]` elements.
fn check_holds(
    what: &str,
    name: &str,
    len: usize,
    array: &str,
    rank: usize,
    count: usize,
) -> Result<()> {
    if len >= count {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "{what}: {name} has {len} elements, fewer than this rank's {array}[{rank}] = {count}"
    )))
}

/// One side of a V collective: per rank a count and a displacement, in elements of a
/// buffer of `len` elements.
struct Regions<'a> {
    /// The side, as the error messages name it: "send" or "receive".
    side: &'static str,
    counts: &'a [usize],
    displs: &'a [usize],
    len: usize,
}

impl Regions<'_> {
    /// Checks one entry per rank and every region inside the buffer; with `disjoint`, also
    /// that no two non-empty regions overlap (they are written). Returns the arrays as the
    /// `u64`s the C functions take.
    fn check(&self, what: &str, ranks: usize, disjoint: bool) -> Result<(Vec<u64>, Vec<u64>)> {
        let side = self.side;
        for (name, array) in [("counts", self.counts), ("displacements", self.displs)] {
            if array.len() != ranks {
                return Err(Error::invalid(format!(
                    "{what}: {side} {name} has {} entries, expected one per rank ({ranks})",
                    array.len()
                )));
            }
        }
        let mut regions = Vec::with_capacity(ranks);
        for (rank, (&count, &displ)) in self.counts.iter().zip(self.displs).enumerate() {
            let end = displ.checked_add(count).ok_or_else(|| {
                Error::invalid(format!(
                    "{what}: {side} region of rank {rank} (displacement {displ} + count {count}) overflows"
                ))
            })?;
            if end > self.len {
                return Err(Error::invalid(format!(
                    "{what}: {side} region of rank {rank} is elements {displ}..{end}, past the \
                     {} elements of the buffer",
                    self.len
                )));
            }
            if count > 0 {
                regions.push((displ, end, rank));
            }
        }
        if disjoint {
            regions.sort_unstable();
            for pair in regions.windows(2) {
                let ((s0, e0, r0), (s1, e1, r1)) = (pair[0], pair[1]);
                if s1 < e0 {
                    return Err(Error::invalid(format!(
                        "{what}: {side} regions of ranks {r0} ({s0}..{e0}) and {r1} ({s1}..{e1}) overlap"
                    )));
                }
            }
        }
        let wide = |a: &[usize]| a.iter().map(|&v| v as u64).collect();
        Ok((wide(self.counts), wide(self.displs)))
    }
}

impl SymPool {
    /// Sends `send_counts[p]` elements at element `send_displs[p]` of `input` to rank `p`, and
    /// receives rank `p`'s into `recv_counts[p]` elements at element `recv_displs[p]` of
    /// `output` (`HcclAlltoAllV`): the dispatch and combine of mixture-of-experts layers.
    /// `recv_counts[p]` must equal rank `p`'s `send_counts[rank]`; a usual way to get them is
    /// an [`all_to_all`](Self::all_to_all) of the send counts first. Send regions may
    /// overlap; receive regions may not. Elements of `output` outside every receive region
    /// are not written by the emulator (CANN does not say). Every rank must make the call, with counts of zero where it
    /// exchanges nothing.
    ///
    /// # Examples
    /// Rank `r` sends `p + 1` copies of its number to rank `p`; the buffers are as long on
    /// every rank (the pool needs the same allocations everywhere), sized for the most a rank
    /// sends or receives:
    /// ```
    /// use symheap::{PoolConfig, SymPool, SymVec, emu, packed_displacements};
    ///
    /// let got = emu::launch(2, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
    ///     let (r, n) = (comm.rank() as usize, comm.rank_count() as usize);
    ///     let send_counts: Vec<usize> = (0..n).map(|p| p + 1).collect();
    ///     let recv_counts = vec![r + 1; n];
    ///     let input = SymVec::from_host(&pool, &[r as i32; 4])?;
    ///     let mut output = SymVec::from_host(&pool, &[-1; 4])?;
    ///     pool.all_to_all_v(
    ///         &input,
    ///         &send_counts,
    ///         &packed_displacements(&send_counts),
    ///         &mut output,
    ///         &recv_counts,
    ///         &packed_displacements(&recv_counts),
    ///     )?;
    ///     output.to_host()
    /// })?;
    /// assert_eq!(got, [vec![0, 1, -1, -1], vec![0, 0, 1, 1]]);
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], before anything is recorded or enqueued, if an array does
    /// not have one entry per rank, a region ends past its buffer (or its end overflows), two
    /// receive regions overlap, `send_counts[rank] != recv_counts[rank]`, or a buffer is from
    /// another pool; [`Error::Unsupported`] if the library lacks `HcclAlltoAllV`;
    /// [`Error::Asymmetric`] in strict mode when ranks' histories differ; the library's error.
    pub fn all_to_all_v<T: Element>(
        &self,
        input: &impl Buffer<T>,
        send_counts: &[usize],
        send_displs: &[usize],
        output: &mut impl BufferMut<T>,
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        const WHAT: &str = "all_to_all_v";
        let (input, output) = (Span::read(input)?, Span::write(output)?);
        self.check_owned(WHAT, &[input.alloc(), output.alloc()])?;
        let ranks = self.ranks();
        let send = Regions {
            side: "send",
            counts: send_counts,
            displs: send_displs,
            len: input.len(),
        };
        let (sc, sd) = send.check(WHAT, ranks, false)?;
        let recv = Regions {
            side: "receive",
            counts: recv_counts,
            displs: recv_displs,
            len: output.len(),
        };
        let (rc, rd) = recv.check(WHAT, ranks, true)?;
        let me = self.target().comm.rank() as usize;
        if send_counts[me] != recv_counts[me] {
            return Err(Error::invalid(format!(
                "{WHAT}: rank {me} sends itself {} elements but receives {} from itself",
                send_counts[me], recv_counts[me]
            )));
        }
        crate::raw::calls::require::HcclAlltoAllV(self.shared.runtime())?;
        let (sendp, recvp) = (input.device_ptr(), output.device_ptr());
        let call = Call {
            kind: Collective::AlltoAllV,
            count: None,
            dtype: T::DATA_TYPE,
            op: None,
            args: &[],
            spans: &[input, output],
        };
        self.shared.enqueue(self.target(), call, |comm, stream| {
            // SAFETY: every region lies inside its pool block (checked above); the borrows
            // keep both alive, and the pool defers their reuse until the stream has run.
            unsafe {
                comm.raw().all_to_all_v(
                    sendp,
                    &sc,
                    &sd,
                    recvp,
                    &rc,
                    &rd,
                    T::DATA_TYPE.into(),
                    stream,
                )
            }
        })
    }

    /// Gathers every rank's part into `output`: rank `p`'s first `recv_counts[p]` elements of
    /// `input` land at element `recv_displs[p]` (`HcclAllGatherV`). Every rank passes the same
    /// arrays, and `input` holds at least `recv_counts[rank]` elements (buffers are allocated
    /// alike on every rank: see the module notes in `src/ops/v_collectives.rs`). Regions may not
    /// overlap; the emulator leaves elements of `output` outside them as they were (CANN does
    /// not say).
    ///
    /// # Examples
    /// Rank `r` contributes `r + 1` elements, from an input as long on every rank:
    /// ```
    /// use symheap::{PoolConfig, SymPool, SymVec, emu, packed_displacements};
    ///
    /// let got = emu::launch(3, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
    ///     let r = comm.rank() as usize;
    ///     let counts = [1, 2, 3];
    ///     let input = SymVec::from_host(&pool, &[r as u8; 3])?;
    ///     let mut output = SymVec::zeroed(&pool, 6)?;
    ///     pool.all_gather_v(&input, &mut output, &counts, &packed_displacements(&counts))?;
    ///     output.to_host()
    /// })?;
    /// assert!(got.iter().all(|v| v == &[0, 1, 1, 2, 2, 2]));
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], before anything is recorded or enqueued, if an array does
    /// not have one entry per rank, a region ends past `output` (or its end overflows), two
    /// regions overlap, `input` is shorter than `recv_counts[rank]`, or a buffer is from
    /// another pool;
    /// [`Error::Unsupported`] if the library lacks `HcclAllGatherV`; [`Error::Asymmetric`] in
    /// strict mode when ranks' histories (these arrays included) differ; the library's error.
    pub fn all_gather_v<T: Element>(
        &self,
        input: &impl Buffer<T>,
        output: &mut impl BufferMut<T>,
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        const WHAT: &str = "all_gather_v";
        let (input, output) = (Span::read(input)?, Span::write(output)?);
        self.check_owned(WHAT, &[input.alloc(), output.alloc()])?;
        let recv = Regions {
            side: "receive",
            counts: recv_counts,
            displs: recv_displs,
            len: output.len(),
        };
        let (rc, rd) = recv.check(WHAT, self.ranks(), true)?;
        let me = self.target().comm.rank() as usize;
        check_holds(
            WHAT,
            "input",
            input.len(),
            "recv_counts",
            me,
            recv_counts[me],
        )?;
        crate::raw::calls::require::HcclAllGatherV(self.shared.runtime())?;
        let args: Vec<u64> = rc.iter().chain(&rd).copied().collect();
        let (sendp, recvp, count) = (input.device_ptr(), output.device_ptr(), rc[me]);
        let call = Call {
            kind: Collective::AllGatherV,
            count: Some(rc.iter().sum()),
            dtype: T::DATA_TYPE,
            op: None,
            args: &args,
            spans: &[input, output],
        };
        self.shared.enqueue(self.target(), call, |comm, stream| {
            // SAFETY: as for `all_to_all_v`; the input holds `count` elements.
            unsafe {
                comm.raw()
                    .all_gather_v(sendp, count, recvp, &rc, &rd, T::DATA_TYPE.into(), stream)
            }
        })
    }

    /// Reduces every rank's `input` across ranks and leaves rank `r`'s block of the result,
    /// `send_counts[r]` elements at element `send_displs[r]` of the inputs, in the first
    /// `send_counts[r]` elements of rank `r`'s `output` (`HcclReduceScatterV`). Every rank
    /// passes the same arrays, and `output` holds at least `send_counts[rank]` elements
    /// (buffers are allocated alike on every rank: see the module notes in
    /// `src/ops/v_collectives.rs`); the emulator leaves the rest of it as it was (CANN does not say).
    /// Blocks may overlap (they are only
    /// read).
    ///
    /// # Examples
    /// Rank `r` gets `r + 1` sums, in an output as long on every rank:
    /// ```
    /// use symheap::{PoolConfig, ReduceOp, SymPool, SymVec, emu, packed_displacements};
    ///
    /// let got = emu::launch(2, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
    ///     let counts = [1, 2];
    ///     let input = SymVec::from_host(&pool, &[1.0f32, 2.0, 3.0])?;
    ///     let mut output = SymVec::zeroed(&pool, 2)?;
    ///     let displs = packed_displacements(&counts);
    ///     pool.reduce_scatter_v(&input, &counts, &displs, &mut output, ReduceOp::Sum)?;
    ///     output.to_host()
    /// })?;
    /// assert_eq!(got, [vec![2.0, 0.0], vec![4.0, 6.0]]);
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], before anything is recorded or enqueued, if an array does
    /// not have one entry per rank, a block ends past `input` (or its end overflows),
    /// `output` is shorter than `send_counts[rank]`, or a buffer is from another pool;
    /// [`Error::Unsupported`] if the library lacks `HcclReduceScatterV`; [`Error::Asymmetric`]
    /// in strict mode when ranks' histories (these arrays included) differ; the library's
    /// error.
    pub fn reduce_scatter_v<T: Element>(
        &self,
        input: &impl Buffer<T>,
        send_counts: &[usize],
        send_displs: &[usize],
        output: &mut impl BufferMut<T>,
        op: crate::ReduceOp,
    ) -> Result<()> {
        const WHAT: &str = "reduce_scatter_v";
        let (input, output) = (Span::read(input)?, Span::write(output)?);
        self.check_owned(WHAT, &[input.alloc(), output.alloc()])?;
        let send = Regions {
            side: "send",
            counts: send_counts,
            displs: send_displs,
            len: input.len(),
        };
        let (sc, sd) = send.check(WHAT, self.ranks(), false)?;
        let me = self.target().comm.rank() as usize;
        check_holds(
            WHAT,
            "output",
            output.len(),
            "send_counts",
            me,
            send_counts[me],
        )?;
        crate::raw::calls::require::HcclReduceScatterV(self.shared.runtime())?;
        let args: Vec<u64> = sc.iter().chain(&sd).copied().collect();
        let (sendp, recvp, count) = (input.device_ptr(), output.device_ptr(), sc[me]);
        let call = Call {
            kind: Collective::ReduceScatterV,
            count: Some(sc.iter().sum()),
            dtype: T::DATA_TYPE,
            op: Some(op),
            args: &args,
            spans: &[input, output],
        };
        self.shared.enqueue(self.target(), call, |comm, stream| {
            // SAFETY: as for `all_to_all_v`; the output holds `count` elements.
            unsafe {
                comm.raw().reduce_scatter_v(
                    sendp,
                    &sc,
                    &sd,
                    recvp,
                    count,
                    T::DATA_TYPE.into(),
                    op,
                    stream,
                )
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regions<'a>(counts: &'a [usize], displs: &'a [usize], len: usize) -> Regions<'a> {
        Regions {
            side: "receive",
            counts,
            displs,
            len,
        }
    }

    #[test]
    fn packed_displacements_are_exclusive_prefix_sums() {
        assert_eq!(packed_displacements(&[]), Vec::<usize>::new());
        assert_eq!(packed_displacements(&[3, 0, 2, 5]), [0, 3, 3, 5]);
    }

    #[test]
    fn regions_inside_and_apart_pass_and_widen() {
        // An empty region may start at the buffer's end.
        let got = regions(&[2, 0, 3], &[3, 5, 0], 5)
            .check("t", 3, true)
            .unwrap();
        assert_eq!(got, (vec![2, 0, 3], vec![3, 5, 0]));
    }

    /// Counts, displacements, buffer length, and what the error says.
    type Case = (&'static [usize], &'static [usize], usize, &'static str);

    #[test]
    fn each_bad_layout_names_its_fault() {
        let cases: [Case; 7] = [
            (&[1, 1], &[0, 1, 2], 4, "counts has 2 entries"),
            (&[1, 1, 1], &[0, 1], 4, "displacements has 2 entries"),
            (
                &[1, 2, 1],
                &[0, 1, 3],
                3,
                "rank 2 is elements 3..4, past the 3",
            ),
            (
                &[1, 0, 1],
                &[0, 6, 3],
                4,
                "rank 1 is elements 6..6, past the 4",
            ),
            (&[1, 2, 1], &[0, usize::MAX, 3], 9, "overflows"),
            (
                &[2, 2, 1],
                &[0, 1, 3],
                9,
                "ranks 0 (0..2) and 1 (1..3) overlap",
            ),
            (
                &[2, 0, 2],
                &[3, 2, 2],
                9,
                "ranks 2 (2..4) and 0 (3..5) overlap",
            ),
        ];
        for (counts, displs, len, want) in cases {
            let err = regions(counts, displs, len)
                .check("t", 3, true)
                .unwrap_err();
            assert!(
                matches!(&err, Error::InvalidArgument(m) if m.contains(want)),
                "{err}"
            );
        }
        // The same overlap is fine where regions are only read, and an empty region may sit
        // anywhere inside the buffer.
        regions(&[2, 2, 1], &[0, 1, 3], 9)
            .check("t", 3, false)
            .unwrap();
        regions(&[2, 0, 2], &[0, 1, 2], 4)
            .check("t", 3, true)
            .unwrap();
    }
}
