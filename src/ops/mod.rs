//! Operations on pooled buffers, checked before any C call: the typed collectives (here and
//! in [`v_collectives`]), point-to-point transfers ([`p2p`]) and device copies ([`copy`]). They
//! sit above the pool and the typed owners, which know nothing of them; [`path`] says which
//! path a collective would take.
//!
//! Every collective enters the pool's op hash as a [`Call`]: what all ranks' calls must agree
//! on. The V collectives ([`v_collectives`]) fold their count and displacement arrays
//! in where every rank passes the same ones; point-to-point calls ([`p2p`]) do not
//! enter it at all, since only two ranks take part.

mod copy;
mod p2p;
mod path;
mod v_collectives;

pub use v_collectives::packed_displacements;

use crate::buffer::{Buffer, BufferMut, Span};
use crate::heap::fold_words;
use crate::pool::{PoolShared, PoolState, Target, predict};
use crate::runtime::{Comm, Element, Stream};
use crate::{Collective, CollectivePath, DataType, Error, ReduceOp, Result, SymBlock, SymPool};

/// What every rank's call of a collective must agree on, and so what the op hash records:
/// the kind, the element count and type, the reduction, further arguments (a root, the
/// arrays of a V collective that every rank passes alike), and where the buffers are.
pub(crate) struct Call<'a> {
    pub(crate) kind: Collective,
    /// The element count every rank passes alike; `None` where ranks' counts differ by design
    /// (AlltoAllV), so it is neither hashed nor a reason to skip the call.
    pub(crate) count: Option<u64>,
    /// The element type.
    pub(crate) dtype: DataType,
    pub(crate) op: Option<ReduceOp>,
    /// Further words every rank passes alike: a root, counts and displacements.
    pub(crate) args: &'a [u64],
    /// The buffers: their locations enter the hash, their blocks are marked used by the
    /// queued work, and those written must have no host view.
    pub(crate) spans: &'a [Span<'a>],
}

impl Call<'_> {
    /// The call folded into one word. The buffers enter as (window, offset) pairs in the
    /// pool's own numbering (segment key), which is the same on every rank.
    fn hash(&self) -> u64 {
        let op = self
            .op
            .map_or(0, |op| crate::sys::HcclReduceOp::from(op).0 as u64 + 1);
        let count = self.count.unwrap_or(u64::MAX);
        let dtype = crate::sys::HcclDataType::from(self.dtype).0 as u64;
        let head = [self.kind as u64, count, dtype, op];
        let args = [self.args.len() as u64]
            .into_iter()
            .chain(self.args.iter().copied());
        let buffers = self.spans.iter().flat_map(Span::location);
        fold_words(head.into_iter().chain(args).chain(buffers))
    }
}

impl SymPool {
    /// Element-wise reduction of `input` across ranks into `output` on every rank.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the lengths differ or a buffer is from another pool;
    /// [`Error::Asymmetric`] in strict mode when ranks' histories differ; the library's error.
    pub fn all_reduce<T: Element>(
        &self,
        input: &impl Buffer<T>,
        output: &mut impl BufferMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let (input, output) = (Span::read(input)?, Span::write(output)?);
        self.check_owned("all_reduce", &[input.alloc(), output.alloc()])?;
        check_len("all_reduce", "output", output.len(), input.len())?;
        let (send, recv, count) = (input.device_ptr(), output.device_ptr(), input.len() as u64);
        let call = Call {
            kind: Collective::AllReduce,
            count: Some(count),
            dtype: T::DATA_TYPE,
            op: Some(op),
            args: &[],
            spans: &[input, output],
        };
        self.shared.enqueue(self.target(), call, |comm, stream| {
            // SAFETY: both buffers are live pool blocks of `count` elements; the borrows keep
            // them alive, and the pool defers their reuse until the stream has run.
            unsafe {
                comm.raw()
                    .all_reduce(send, recv, count, T::DATA_TYPE.into(), op, stream)
            }
        })
    }

    /// Element-wise reduction of `data` across ranks, in place.
    ///
    /// # Errors
    /// As for [`all_reduce`](Self::all_reduce).
    pub fn all_reduce_in_place<T: Element>(
        &self,
        data: &mut impl BufferMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let data = Span::write(data)?;
        self.check_owned("all_reduce_in_place", &[data.alloc()])?;
        let (ptr, count) = (data.device_ptr(), data.len() as u64);
        let call = Call {
            kind: Collective::AllReduce,
            count: Some(count),
            dtype: T::DATA_TYPE,
            op: Some(op),
            args: &[],
            spans: &[data],
        };
        self.shared.enqueue(self.target(), call, |comm, stream| {
            // SAFETY: as for `all_reduce`; HCCL allows send == recv.
            unsafe {
                comm.raw()
                    .all_reduce(ptr, ptr, count, T::DATA_TYPE.into(), op, stream)
            }
        })
    }

    /// Concatenates every rank's `input` in rank order into `output`, whose length must be
    /// `ranks * input.len()`.
    ///
    /// # Errors
    /// As for [`all_reduce`](Self::all_reduce).
    pub fn all_gather<T: Element>(
        &self,
        input: &impl Buffer<T>,
        output: &mut impl BufferMut<T>,
    ) -> Result<()> {
        let (input, output) = (Span::read(input)?, Span::write(output)?);
        self.check_owned("all_gather", &[input.alloc(), output.alloc()])?;
        let ranks = self.ranks();
        let want = ranks * input.len();
        let from = format!("{ranks} ranks x the input's {}", input.len());
        check_len_from("all_gather", "output", output.len(), want, &from)?;
        let (send, recv, count) = (input.device_ptr(), output.device_ptr(), input.len() as u64);
        let call = Call {
            kind: Collective::AllGather,
            count: Some(count),
            dtype: T::DATA_TYPE,
            op: None,
            args: &[],
            spans: &[input, output],
        };
        self.shared.enqueue(self.target(), call, |comm, stream| {
            // SAFETY: as for `all_reduce`; the output holds ranks * count elements.
            unsafe {
                comm.raw()
                    .all_gather(send, recv, count, T::DATA_TYPE.into(), stream)
            }
        })
    }

    /// Reduces `input` (a length that divides by the ranks) across ranks and leaves block
    /// `rank` of the result in `output`, whose length must be `input.len() / ranks`.
    ///
    /// # Errors
    /// As for [`all_reduce`](Self::all_reduce).
    pub fn reduce_scatter<T: Element>(
        &self,
        input: &impl Buffer<T>,
        output: &mut impl BufferMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let (input, output) = (Span::read(input)?, Span::write(output)?);
        self.check_owned("reduce_scatter", &[input.alloc(), output.alloc()])?;
        // The input sets the output's length: a wrong output is the output's fault.
        let ranks = self.ranks();
        check_divides("reduce_scatter", input.len(), ranks)?;
        let from = format!("the input's {} over {ranks} ranks", input.len());
        check_len_from(
            "reduce_scatter",
            "output",
            output.len(),
            input.len() / ranks,
            &from,
        )?;
        let (send, recv, count) = (input.device_ptr(), output.device_ptr(), output.len() as u64);
        let call = Call {
            kind: Collective::ReduceScatter,
            count: Some(count),
            dtype: T::DATA_TYPE,
            op: Some(op),
            args: &[],
            spans: &[input, output],
        };
        self.shared.enqueue(self.target(), call, |comm, stream| {
            // SAFETY: as for `all_reduce`; the input holds ranks * count elements.
            unsafe {
                comm.raw()
                    .reduce_scatter(send, recv, count, T::DATA_TYPE.into(), op, stream)
            }
        })
    }

    /// Sends block `p` of `input` to rank `p` and receives rank `p`'s block into block `p` of
    /// `output`. Both have the same length, divisible by the number of ranks.
    ///
    /// # Errors
    /// As for [`all_reduce`](Self::all_reduce).
    pub fn all_to_all<T: Element>(
        &self,
        input: &impl Buffer<T>,
        output: &mut impl BufferMut<T>,
    ) -> Result<()> {
        let (input, output) = (Span::read(input)?, Span::write(output)?);
        self.check_owned("all_to_all", &[input.alloc(), output.alloc()])?;
        check_divides("all_to_all", input.len(), self.ranks())?;
        check_len_from(
            "all_to_all",
            "output",
            output.len(),
            input.len(),
            "the input's",
        )?;
        let (send, recv) = (input.device_ptr(), output.device_ptr());
        let count = (input.len() / self.ranks()) as u64;
        let call = Call {
            kind: Collective::AlltoAll,
            count: Some(count),
            dtype: T::DATA_TYPE,
            op: None,
            args: &[],
            spans: &[input, output],
        };
        self.shared.enqueue(self.target(), call, |comm, stream| {
            // SAFETY: as for `all_reduce`; both hold ranks blocks of `count` elements.
            unsafe {
                comm.raw()
                    .all_to_all(send, recv, count, T::DATA_TYPE.into(), stream)
            }
        })
    }

    /// Copies rank `root`'s `data` into every rank's `data` (`HcclBroadcast`). Every rank
    /// passes the same root and length.
    ///
    /// # Examples
    /// ```
    /// use symheap::{PoolConfig, SymPool, SymVec, emu};
    ///
    /// let got = emu::launch(3, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
    ///     let mut v = SymVec::from_host(&pool, &[comm.rank() as i32 * 10; 4])?;
    ///     pool.broadcast(&mut v, 2)?;
    ///     v.to_host()
    /// })?;
    /// assert!(got.iter().all(|v| v == &[20; 4]));
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `root` is not a rank or the buffer is from another pool;
    /// [`Error::Asymmetric`] in strict mode when ranks' histories differ; the library's error.
    pub fn broadcast<T: Element>(&self, data: &mut impl BufferMut<T>, root: u32) -> Result<()> {
        let data = Span::write(data)?;
        self.check_owned("broadcast", &[data.alloc()])?;
        self.check_rank("broadcast", "root", root)?;
        let (ptr, count) = (data.device_ptr(), data.len() as u64);
        let call = Call {
            kind: Collective::Broadcast,
            count: Some(count),
            dtype: T::DATA_TYPE,
            op: None,
            args: &[u64::from(root)],
            spans: &[data],
        };
        self.shared.enqueue(self.target(), call, |comm, stream| {
            // SAFETY: as for `all_reduce`; one buffer of `count` elements.
            unsafe {
                comm.raw()
                    .broadcast(ptr, count, T::DATA_TYPE.into(), root, stream)
            }
        })
    }

    /// Element-wise reduction of `input` across ranks into rank `root`'s `output`
    /// (`HcclReduce`); other ranks' `output` is not specified by CANN (the emulator leaves it
    /// as it was). Every rank passes the same
    /// lengths, reduction and root.
    ///
    /// # Examples
    /// ```
    /// use symheap::{PoolConfig, ReduceOp, SymPool, SymVec, emu};
    ///
    /// let got = emu::launch(2, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
    ///     let input = SymVec::from_host(&pool, &[comm.rank() as f32 + 1.0; 3])?;
    ///     let mut output = SymVec::zeroed(&pool, 3)?;
    ///     pool.reduce(&input, &mut output, ReduceOp::Sum, 0)?;
    ///     output.to_host()
    /// })?;
    /// assert_eq!(got, [vec![3.0; 3], vec![0.0; 3]]);
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the lengths differ, `root` is not a rank or a buffer is
    /// from another pool; [`Error::Unsupported`] if the library lacks `HcclReduce`;
    /// [`Error::Asymmetric`] in strict mode when ranks' histories differ; the library's error.
    pub fn reduce<T: Element>(
        &self,
        input: &impl Buffer<T>,
        output: &mut impl BufferMut<T>,
        op: ReduceOp,
        root: u32,
    ) -> Result<()> {
        let (input, output) = (Span::read(input)?, Span::write(output)?);
        self.check_owned("reduce", &[input.alloc(), output.alloc()])?;
        check_len("reduce", "output", output.len(), input.len())?;
        self.check_rank("reduce", "root", root)?;
        crate::raw::calls::require::HcclReduce(self.shared.runtime())?;
        let (send, recv, count) = (input.device_ptr(), output.device_ptr(), input.len() as u64);
        let call = Call {
            kind: Collective::Reduce,
            count: Some(count),
            dtype: T::DATA_TYPE,
            op: Some(op),
            args: &[u64::from(root)],
            spans: &[input, output],
        };
        self.shared.enqueue(self.target(), call, |comm, stream| {
            // SAFETY: as for `all_reduce`.
            unsafe {
                comm.raw()
                    .reduce(send, recv, count, T::DATA_TYPE.into(), op, root, stream)
            }
        })
    }

    /// The size of the communicator this handle's collectives run on.
    pub(crate) fn ranks(&self) -> usize {
        self.target().comm.rank_count() as usize
    }

    /// [`Error::InvalidArgument`] unless `rank` is a rank of the communicator.
    pub(crate) fn check_rank(&self, what: &str, name: &str, rank: u32) -> Result<()> {
        if (rank as usize) < self.ranks() {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "{what}: {name} {rank} is not a rank (there are {})",
                self.ranks()
            )))
        }
    }

    pub(crate) fn check_owned(&self, what: &str, allocs: &[&SymBlock]) -> Result<()> {
        if allocs.iter().all(|a| a.belongs_to(&self.shared)) {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "{what}: a buffer belongs to another pool"
            )))
        }
    }
}

/// [`check_len`], saying where `want` comes from (`from`, e.g. "the input's 8 over 2 ranks").
fn check_len_from(what: &str, name: &str, got: usize, want: usize, from: &str) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{what}: {name} has {got} elements, expected {want} ({from})"
        )))
    }
}

/// [`Error::InvalidArgument`] blaming the input unless its `len` divides by the `ranks`.
fn check_divides(what: &str, len: usize, ranks: usize) -> Result<()> {
    if len.is_multiple_of(ranks) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{what}: input has {len} elements, not a multiple of the {ranks} ranks"
        )))
    }
}

fn check_len(what: &str, name: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{what}: {name} has {got} elements, expected {want}"
        )))
    }
}

impl PoolShared {
    /// Records `call` in the op hash, runs the strict symmetry check (which so compares this
    /// very call too), then `enqueue` on the pool's stream with the state lock held, and
    /// marks the buffers as used by queued work. Holding the lock orders this against
    /// `synchronize`, so a buffer's mark always refers to work the next synchronise waits for.
    /// A zero-element collective is skipped on every rank alike (but recorded).
    pub(crate) fn enqueue(
        &self,
        target: Target<'_>,
        call: Call<'_>,
        enqueue: impl FnOnce(&Comm, &Stream) -> Result<()>,
    ) -> Result<()> {
        let mut state = self.lock();
        self.check_usable()?;
        self.check_awake("a collective")?;
        // A collective on an attached group also records which one.
        let hash = match target.index {
            0 => call.hash(),
            group => fold_words([call.hash(), group as u64]),
        };
        state.record_collective(hash);
        state.log_collective(call.kind, call.count);
        if self.config.is_strict_symmetry() {
            self.verify_locked(&mut state)?;
        }
        if call.count == Some(0) {
            return Ok(());
        }
        // Every pooled buffer lies in one of the pool's windows (the caller checked that
        // each belongs to this pool).
        let path = predict(&target.comm, call.kind, true);
        if state.record_path(target.index, call.kind, path)
            && let CollectivePath::Staged(why) = path
        {
            tracing::warn!(
                rank = self.comm().rank(),
                group = target.index,
                kind = call.kind.c_name(),
                "symheap: a collective on pooled memory stages through the HCCL buffer: {} \
                 (warned once per reason; PoolStats::collectives counts them all)",
                why.describe()
            );
        }
        self.run_locked(
            &mut state, target, call.kind, call.count, call.spans, enqueue,
        )
    }

    /// A point-to-point call: like [`enqueue`](Self::enqueue) but neither recorded in the op
    /// hash nor preceded by the strict check, both of which involve every rank while only
    /// two take part (see [`SymPool::send`]). Skipped when empty: its peer's matching call
    /// has the same count.
    pub(crate) fn enqueue_pair(
        &self,
        target: Target<'_>,
        kind: Collective,
        count: u64,
        buffer: Span<'_>,
        enqueue: impl FnOnce(&Comm, &Stream) -> Result<()>,
    ) -> Result<()> {
        let mut state = self.lock();
        self.check_usable()?;
        self.check_awake("a point-to-point call")?;
        if count == 0 {
            return Ok(());
        }
        self.run_locked(&mut state, target, kind, Some(count), &[buffer], enqueue)
    }

    /// Enqueues with the state lock held (`state` proves it) and marks the buffers used. A
    /// buffer it writes must have no host view: one opened later waits for this work, and
    /// taking both under the lock orders them.
    fn run_locked(
        &self,
        state: &mut PoolState,
        target: Target<'_>,
        kind: Collective,
        count: Option<u64>,
        spans: &[Span<'_>],
        enqueue: impl FnOnce(&Comm, &Stream) -> Result<()>,
    ) -> Result<()> {
        tracing::debug!(
            rank = self.comm().rank(),
            ?kind,
            count,
            "symheap: collective"
        );
        self.check_in_capture(state, target.stream, kind.c_name())?;
        for span in spans.iter().filter(|s| s.is_written()) {
            span.alloc().check_no_host_view(kind.c_name())?;
        }
        enqueue(&target.comm, target.stream)?;
        self.note_collective_stream(state, target.stream);
        for alloc in spans.iter().map(Span::alloc) {
            alloc.mark_used_on(target.stream);
            if let Some(hold) = state.capture_hold() {
                alloc.hold_for(hold);
            }
        }
        Ok(())
    }
}
