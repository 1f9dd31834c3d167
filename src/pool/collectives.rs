//! Typed collectives on pooled memory, checked before any C call.

use super::{PoolShared, SymAlloc, SymPool};
use crate::heap::fold_words;
use crate::runtime::{Comm, Element, ReduceOp, Stream};
use crate::sys::HcclDataType;
use crate::{Error, Result, SymVec};

/// The collectives of the pool, as they enter its op hash.
#[derive(Clone, Copy, Debug)]
enum Kind {
    AllReduce = 1,
    AllGather,
    ReduceScatter,
    AllToAll,
}

/// What every rank's call of a collective must agree on, and so what the op hash records:
/// the kind, the element count and type, the reduction, and where the buffers are.
struct Call<'a> {
    kind: Kind,
    count: u64,
    dtype: HcclDataType,
    op: Option<ReduceOp>,
    buffers: &'a [&'a SymAlloc],
}

impl Call<'_> {
    /// The call folded into one word. The buffers enter as (window, offset) pairs in the
    /// pool's own numbering (segment key), which is the same on every rank.
    fn hash(&self) -> u64 {
        let op = self.op.map_or(0, |op| op.to_raw().0 as u64 + 1);
        let head = [self.kind as u64, self.count, self.dtype.0 as u64, op];
        let buffers = self.buffers.iter().flat_map(|a| a.placement());
        fold_words(head.into_iter().chain(buffers))
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
        input: &SymVec<T>,
        output: &mut SymVec<T>,
        op: ReduceOp,
    ) -> Result<()> {
        self.check_owned("all_reduce", &[input.alloc(), output.alloc()])?;
        check_len("all_reduce", "output", output.len(), input.len())?;
        let (send, recv, count) = (input.device_ptr(), output.device_ptr(), input.len() as u64);
        let call = Call {
            kind: Kind::AllReduce,
            count,
            dtype: T::DATA_TYPE,
            op: Some(op),
            buffers: &[input.alloc(), output.alloc()],
        };
        self.shared.enqueue(call, |comm, stream| {
            // SAFETY: both buffers are live pool blocks of `count` elements; the borrows keep
            // them alive, and the pool defers their reuse until the stream has run.
            unsafe { comm.all_reduce(send, recv, count, T::DATA_TYPE, op, stream) }
        })
    }

    /// Element-wise reduction of `data` across ranks, in place.
    ///
    /// # Errors
    /// As for [`all_reduce`](Self::all_reduce).
    pub fn all_reduce_in_place<T: Element>(
        &self,
        data: &mut SymVec<T>,
        op: ReduceOp,
    ) -> Result<()> {
        self.check_owned("all_reduce_in_place", &[data.alloc()])?;
        let (ptr, count) = (data.device_ptr(), data.len() as u64);
        let call = Call {
            kind: Kind::AllReduce,
            count,
            dtype: T::DATA_TYPE,
            op: Some(op),
            buffers: &[data.alloc()],
        };
        self.shared.enqueue(call, |comm, stream| {
            // SAFETY: as for `all_reduce`; HCCL allows send == recv.
            unsafe { comm.all_reduce(ptr, ptr, count, T::DATA_TYPE, op, stream) }
        })
    }

    /// Concatenates every rank's `input` in rank order into `output`, whose length must be
    /// `ranks * input.len()`.
    ///
    /// # Errors
    /// As for [`all_reduce`](Self::all_reduce).
    pub fn all_gather<T: Element>(&self, input: &SymVec<T>, output: &mut SymVec<T>) -> Result<()> {
        self.check_owned("all_gather", &[input.alloc(), output.alloc()])?;
        check_len(
            "all_gather",
            "output",
            output.len(),
            self.ranks() * input.len(),
        )?;
        let (send, recv, count) = (input.device_ptr(), output.device_ptr(), input.len() as u64);
        let call = Call {
            kind: Kind::AllGather,
            count,
            dtype: T::DATA_TYPE,
            op: None,
            buffers: &[input.alloc(), output.alloc()],
        };
        self.shared.enqueue(call, |comm, stream| {
            // SAFETY: as for `all_reduce`; the output holds ranks * count elements.
            unsafe { comm.all_gather(send, recv, count, T::DATA_TYPE, stream) }
        })
    }

    /// Reduces `input` (length `ranks * output.len()`) across ranks and leaves block `rank` of
    /// the result in `output`.
    ///
    /// # Errors
    /// As for [`all_reduce`](Self::all_reduce).
    pub fn reduce_scatter<T: Element>(
        &self,
        input: &SymVec<T>,
        output: &mut SymVec<T>,
        op: ReduceOp,
    ) -> Result<()> {
        self.check_owned("reduce_scatter", &[input.alloc(), output.alloc()])?;
        check_len(
            "reduce_scatter",
            "input",
            input.len(),
            self.ranks() * output.len(),
        )?;
        let (send, recv, count) = (input.device_ptr(), output.device_ptr(), output.len() as u64);
        let call = Call {
            kind: Kind::ReduceScatter,
            count,
            dtype: T::DATA_TYPE,
            op: Some(op),
            buffers: &[input.alloc(), output.alloc()],
        };
        self.shared.enqueue(call, |comm, stream| {
            // SAFETY: as for `all_reduce`; the input holds ranks * count elements.
            unsafe { comm.reduce_scatter(send, recv, count, T::DATA_TYPE, op, stream) }
        })
    }

    /// Sends block `p` of `input` to rank `p` and receives rank `p`'s block into block `p` of
    /// `output`. Both have the same length, divisible by the number of ranks.
    ///
    /// # Errors
    /// As for [`all_reduce`](Self::all_reduce).
    pub fn all_to_all<T: Element>(&self, input: &SymVec<T>, output: &mut SymVec<T>) -> Result<()> {
        self.check_owned("all_to_all", &[input.alloc(), output.alloc()])?;
        check_len("all_to_all", "output", output.len(), input.len())?;
        if input.len() % self.ranks() != 0 {
            return Err(Error::invalid(format!(
                "all_to_all: length {} is not divisible by the {} ranks",
                input.len(),
                self.ranks()
            )));
        }
        let (send, recv) = (input.device_ptr(), output.device_ptr());
        let count = (input.len() / self.ranks()) as u64;
        let call = Call {
            kind: Kind::AllToAll,
            count,
            dtype: T::DATA_TYPE,
            op: None,
            buffers: &[input.alloc(), output.alloc()],
        };
        self.shared.enqueue(call, |comm, stream| {
            // SAFETY: as for `all_reduce`; both hold ranks blocks of `count` elements.
            unsafe { comm.all_to_all(send, recv, count, T::DATA_TYPE, stream) }
        })
    }

    fn ranks(&self) -> usize {
        self.shared.comm().size() as usize
    }

    fn check_owned(&self, what: &str, allocs: &[&SymAlloc]) -> Result<()> {
        if allocs.iter().all(|a| a.belongs_to(&self.shared)) {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "{what}: a buffer belongs to another pool"
            )))
        }
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
    fn enqueue(
        &self,
        call: Call<'_>,
        enqueue: impl FnOnce(&Comm, &Stream) -> Result<()>,
    ) -> Result<()> {
        let mut state = self.lock();
        self.check_usable()?;
        state.record_collective(call.hash());
        if self.config.is_strict_symmetry() {
            self.verify_locked(&mut state)?;
        }
        if call.count == 0 {
            return Ok(());
        }
        tracing::debug!(
            rank = self.comm.rank(),
            kind = ?call.kind,
            count = call.count,
            "symheap: collective"
        );
        enqueue(&self.comm, &self.stream)?;
        for alloc in call.buffers {
            alloc.mark_used();
        }
        Ok(())
    }
}
