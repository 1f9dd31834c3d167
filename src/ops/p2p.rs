//! Point-to-point transfers on pooled memory: [`SymPool::send`] and [`SymPool::recv`].
//!
//! Only two ranks take part, so these are kept out of everything that compares all ranks:
//! they do not enter the op hash (a third rank, which makes no matching call, would otherwise
//! disagree with both and fail [`SymPool::verify_symmetric`]), and strict mode does not run
//! its check before them (the check is a collective of every rank, which the other ranks
//! would never join). What they still do like the collectives: check their arguments before
//! any C call, refuse to run on a poisoned pool, and mark the buffer as used on their stream,
//! so that its reuse and host access are ordered after the transfer.

use crate::buffer::{Buffer, BufferMut, Span};
use crate::runtime::Element;
use crate::{Collective, Error, Result, SymPool};

impl SymPool {
    /// Sends `data` to rank `peer` (`HcclSend`), which must post the matching
    /// [`recv`](Self::recv) of as many elements of the same type. Not counted in the
    /// [`op_hash`](Self::op_hash), and not preceded by strict mode's check: see the module
    /// notes in the crate's source, `src/ops/p2p.rs`. An empty `data` sends nothing (its peer's
    /// empty receive does the same).
    ///
    /// Rank pairs must order their calls so that they do not wait for each other in a cycle:
    /// below, rank 0 sends first and rank 1 receives first.
    ///
    /// # Examples
    /// ```
    /// use symheap::{PoolConfig, SymPool, SymVec, emu};
    ///
    /// let got = emu::launch(3, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
    ///     let mut v = SymVec::from_host(&pool, &[comm.rank() as u32 + 1; 4])?;
    ///     // Ranks 0 and 1 swap their buffers through a scratch one; rank 2 looks on.
    ///     let mut scratch = SymVec::<u32>::zeroed(&pool, 4)?;
    ///     match comm.rank() {
    ///         0 => {
    ///             pool.send(&v, 1)?;
    ///             pool.recv(&mut v, 1)?;
    ///         }
    ///         1 => {
    ///             pool.recv(&mut scratch, 0)?;
    ///             pool.send(&v, 0)?;
    ///             std::mem::swap(&mut v, &mut scratch);
    ///         }
    ///         _ => {}
    ///     }
    ///     pool.verify_symmetric()?; // the transfers are not part of it
    ///     v.to_host()
    /// })?;
    /// assert_eq!(got, [vec![2; 4], vec![1; 4], vec![3; 4]]);
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `peer` is not a rank, is this rank, or the buffer is from
    /// another pool; [`Error::Unsupported`] if the library lacks `HcclSend`; the library's
    /// error.
    pub fn send<T: Element>(&self, data: &impl Buffer<T>, peer: u32) -> Result<()> {
        let data = Span::read(data)?;
        self.check_peer("send", data.alloc(), peer)?;
        crate::raw::calls::require::HcclSend(self.shared.runtime())?;
        let (ptr, count) = (data.device_ptr(), data.len() as u64);
        self.shared.enqueue_pair(
            self.target(),
            Collective::Send,
            count,
            data,
            |comm, stream| {
                // SAFETY: a live pool block of `count` elements; the borrow keeps it alive,
                // and the pool defers its reuse until the stream has run.
                unsafe {
                    comm.raw()
                        .send(ptr, count, T::DATA_TYPE.into(), peer, stream)
                }
            },
        )
    }

    /// Receives rank `peer`'s matching [`send`](Self::send) into `data` (`HcclRecv`): as many
    /// elements as `data` holds. As for `send`, not counted in the op hash nor checked by
    /// strict mode.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `peer` is not a rank, is this rank, or the buffer is from
    /// another pool; [`Error::Unsupported`] if the library lacks `HcclRecv`; the library's
    /// error.
    pub fn recv<T: Element>(&self, data: &mut impl BufferMut<T>, peer: u32) -> Result<()> {
        let data = Span::write(data)?;
        self.check_peer("recv", data.alloc(), peer)?;
        crate::raw::calls::require::HcclRecv(self.shared.runtime())?;
        let (ptr, count) = (data.device_ptr(), data.len() as u64);
        self.shared.enqueue_pair(
            self.target(),
            Collective::Recv,
            count,
            data,
            |comm, stream| {
                // SAFETY: as for `send`; the `&mut` borrow excludes every other use.
                unsafe {
                    comm.raw()
                        .recv(ptr, count, T::DATA_TYPE.into(), peer, stream)
                }
            },
        )
    }

    /// The buffer is this pool's and `peer` another rank: a rank's transfer to itself would
    /// wait for a receive that it can only post after the send returns.
    fn check_peer(&self, what: &str, alloc: &crate::SymBlock, peer: u32) -> Result<()> {
        self.check_owned(what, &[alloc])?;
        self.check_rank(what, "peer", peer)?;
        if peer == self.target().comm.rank() {
            return Err(Error::invalid(format!(
                "{what}: peer {peer} is this rank; a transfer needs another rank"
            )));
        }
        Ok(())
    }
}
