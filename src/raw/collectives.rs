//! The collectives on raw device pointers: one method of [`RawComm`] per HCCL collective.
//! The typed, bounds-checked versions are the pool's (`SymPool::all_reduce`, ...).

use std::ffi::c_void;

use crate::ReduceOp;
use crate::runtime::{Comm, Stream};
use crate::runtime::{DevicePtr, calls};
use crate::sys::{HcclDataType, HcclReduceOp, HcclSendRecvItem};
use crate::{Error, Result};

/// The raw view of a [`Comm`] ([`Comm::raw`]): its collectives on raw device pointers, each
/// an `unsafe fn` whose contract is its C function's.
#[derive(Clone, Copy, Debug)]
pub struct RawComm<'a> {
    comm: &'a Comm,
}

impl<'a> RawComm<'a> {
    /// The raw view of `comm`.
    pub fn new(comm: &'a Comm) -> Self {
        RawComm { comm }
    }

    /// The communicator viewed.
    pub fn comm(&self) -> &'a Comm {
        self.comm
    }
}

impl Comm {
    /// The raw layer's view of this communicator: the collectives on raw device pointers
    /// ([`RawComm`], all `unsafe`). The pool's collectives are the typed, checked ones.
    pub fn raw(&self) -> RawComm<'_> {
        RawComm::new(self)
    }
}

/// The collectives enqueue work on `stream` and return; [`Comm::synchronize`] waits for it.
/// Each is its C function (named in its docs) on this communicator, under its call lock.
/// A communicator's collectives run in call order on any streams: one queued on another
/// stream than the collective before first makes its stream wait for that one (an event;
/// HCCL does not order them itself, and two at once would corrupt or hang each other). The
/// point-to-point calls are not ordered so: a send and a receive on two streams may be meant
/// to run at once.
///
/// The V collectives and the point-to-point calls (`all_gather_v`, `reduce_scatter_v`,
/// `all_to_all_v`, `reduce`, `scatter`, `send`, `recv`, `batch_send_recv`) are optional
/// entries of the table: a library without one gives [`Error::Unsupported`] naming it. Their
/// count and displacement arrays (elements of `dtype`, one per rank) are checked to have
/// [`Comm::rank_count`] entries, since the C functions read that many; everything else about
/// them (that each region fits its buffer, that peers agree) is the caller's contract here,
/// and checked by the typed versions on the pool.
///
/// The element type is the C value (`T::DATA_TYPE.into()` for an [`Element`](crate::Element)
/// `T`), as the C functions take it; the reduction is the vocabulary's [`ReduceOp`], which
/// names every reduction HCCL defines.
///
/// # Safety (all of them)
/// Every buffer must be device memory of this rank, large enough for the counts given
/// (`count` elements of `dtype`; AllGather's output and ReduceScatter's input are `rank_count()`
/// times larger, AlltoAll's are `rank_count()` blocks of the per-peer count; a V collective's
/// buffer holds every `displacement + count` region of its arrays), and must stay valid
/// and untouched by the host until the stream has been synchronised.
impl RawComm<'_> {
    /// Element-wise reduction of `count` elements across ranks, result on every rank
    /// (`HcclAllReduce`). `send == recv` is allowed.
    ///
    /// # Errors
    /// The library's error for arguments it checks at enqueue time.
    ///
    /// # Safety
    /// See the notes on this `impl` block.
    pub unsafe fn all_reduce(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: u64,
        dtype: HcclDataType,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        self.comm.collective_on(stream, |comm| {
            // SAFETY: the caller's contract; the communicator and stream are live.
            unsafe {
                calls::HcclAllReduce(
                    self.comm.runtime(),
                    send.as_raw(),
                    recv.as_raw(),
                    count,
                    dtype,
                    HcclReduceOp::from(op),
                    comm,
                    stream.as_raw(),
                )
            }
        })
    }

    /// Concatenates every rank's `send_count` elements, in rank order, on every rank
    /// (`HcclAllGather`).
    ///
    /// # Errors
    /// The library's error for arguments it checks at enqueue time.
    ///
    /// # Safety
    /// See the notes on this `impl` block.
    pub unsafe fn all_gather(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        send_count: u64,
        dtype: HcclDataType,
        stream: &Stream,
    ) -> Result<()> {
        self.comm.collective_on(stream, |comm| {
            // SAFETY: the caller's contract; the communicator and stream are live.
            unsafe {
                calls::HcclAllGather(
                    self.comm.runtime(),
                    send.as_raw(),
                    recv.as_raw(),
                    send_count,
                    dtype,
                    comm,
                    stream.as_raw(),
                )
            }
        })
    }

    /// Reduces `rank_count() * recv_count` elements across ranks and leaves block `rank()` of the
    /// result on each rank (`HcclReduceScatter`).
    ///
    /// # Errors
    /// The library's error for arguments it checks at enqueue time.
    ///
    /// # Safety
    /// See the notes on this `impl` block.
    pub unsafe fn reduce_scatter(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        recv_count: u64,
        dtype: HcclDataType,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        self.comm.collective_on(stream, |comm| {
            // SAFETY: the caller's contract; the communicator and stream are live.
            unsafe {
                calls::HcclReduceScatter(
                    self.comm.runtime(),
                    send.as_raw(),
                    recv.as_raw(),
                    recv_count,
                    dtype,
                    HcclReduceOp::from(op),
                    comm,
                    stream.as_raw(),
                )
            }
        })
    }

    /// Sends block `p` (of `count` elements) of this rank's input to rank `p`, and receives
    /// rank `p`'s block into block `p` of the output (`HcclAlltoAll`).
    ///
    /// # Errors
    /// The library's error for arguments it checks at enqueue time.
    ///
    /// # Safety
    /// See the notes on this `impl` block.
    pub unsafe fn all_to_all(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: u64,
        dtype: HcclDataType,
        stream: &Stream,
    ) -> Result<()> {
        self.comm.collective_on(stream, |comm| {
            // SAFETY: the caller's contract; the communicator and stream are live.
            unsafe {
                calls::HcclAlltoAll(
                    self.comm.runtime(),
                    send.as_raw(),
                    count,
                    dtype,
                    recv.as_raw(),
                    count,
                    dtype,
                    comm,
                    stream.as_raw(),
                )
            }
        })
    }

    /// Copies `count` elements from rank `root`'s buffer into every rank's (`HcclBroadcast`).
    ///
    /// # Errors
    /// The library's error for arguments it checks at enqueue time.
    ///
    /// # Safety
    /// See the notes on this `impl` block.
    pub unsafe fn broadcast(
        &self,
        buf: DevicePtr,
        count: u64,
        dtype: HcclDataType,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        self.comm.collective_on(stream, |comm| {
            // SAFETY: the caller's contract; the communicator and stream are live.
            unsafe {
                calls::HcclBroadcast(
                    self.comm.runtime(),
                    buf.as_raw(),
                    count,
                    dtype,
                    root,
                    comm,
                    stream.as_raw(),
                )
            }
        })
    }

    /// Gathers every rank's `send_count` elements into `recv`: rank `p`'s land at element
    /// `recv_displs[p]`, `recv_counts[p]` of them (`HcclAllGatherV`). `recv_counts[rank()]`
    /// must equal `send_count`, and both arrays must be the same on every rank.
    ///
    /// # Errors
    /// [`Error::Unsupported`] if the library lacks the call; [`Error::InvalidArgument`] if an
    /// array does not have `rank_count()` entries; the library's error for arguments it checks.
    ///
    /// # Safety
    /// See the notes on this `impl` block.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn all_gather_v(
        &self,
        send: DevicePtr,
        send_count: u64,
        recv: DevicePtr,
        recv_counts: &[u64],
        recv_displs: &[u64],
        dtype: HcclDataType,
        stream: &Stream,
    ) -> Result<()> {
        calls::require::HcclAllGatherV(self.comm.runtime())?;
        self.check_per_rank(
            calls::name::HcclAllGatherV,
            &[("recvCounts", recv_counts), ("recvDispls", recv_displs)],
        )?;
        self.comm.collective_on(stream, |comm| {
            // SAFETY: the caller's contract; both arrays hold rank_count() u64s, read during the call.
            unsafe {
                calls::HcclAllGatherV(
                    self.comm.runtime(),
                    send.as_raw(),
                    send_count,
                    recv.as_raw(),
                    host_array(recv_counts),
                    host_array(recv_displs),
                    dtype,
                    comm,
                    stream.as_raw(),
                )
            }
        })
    }

    /// Reduces every rank's `send` across ranks, where rank `p`'s block is `send_counts[p]`
    /// elements at element `send_displs[p]`, and leaves block `rank()` of the result in
    /// `recv`, `recv_count` (= `send_counts[rank()]`) elements (`HcclReduceScatterV`). Both
    /// arrays must be the same on every rank.
    ///
    /// # Errors
    /// As for [`all_gather_v`](Self::all_gather_v).
    ///
    /// # Safety
    /// See the notes on this `impl` block.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce_scatter_v(
        &self,
        send: DevicePtr,
        send_counts: &[u64],
        send_displs: &[u64],
        recv: DevicePtr,
        recv_count: u64,
        dtype: HcclDataType,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<()> {
        calls::require::HcclReduceScatterV(self.comm.runtime())?;
        self.check_per_rank(
            calls::name::HcclReduceScatterV,
            &[("sendCounts", send_counts), ("sendDispls", send_displs)],
        )?;
        self.comm.collective_on(stream, |comm| {
            // SAFETY: the caller's contract; both arrays hold rank_count() u64s, read during the call.
            unsafe {
                calls::HcclReduceScatterV(
                    self.comm.runtime(),
                    send.as_raw(),
                    host_array(send_counts),
                    host_array(send_displs),
                    recv.as_raw(),
                    recv_count,
                    dtype,
                    HcclReduceOp::from(op),
                    comm,
                    stream.as_raw(),
                )
            }
        })
    }

    /// Sends `send_counts[p]` elements at element `send_displs[p]` of `send` to rank `p`, and
    /// receives rank `p`'s into `recv_counts[p]` elements at element `recv_displs[p]` of `recv`
    /// (`HcclAlltoAllV`, the same element type on both sides). `recv_counts[p]` must equal
    /// rank `p`'s `send_counts[rank()]`.
    ///
    /// # Errors
    /// As for [`all_gather_v`](Self::all_gather_v).
    ///
    /// # Safety
    /// See the notes on this `impl` block.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn all_to_all_v(
        &self,
        send: DevicePtr,
        send_counts: &[u64],
        send_displs: &[u64],
        recv: DevicePtr,
        recv_counts: &[u64],
        recv_displs: &[u64],
        dtype: HcclDataType,
        stream: &Stream,
    ) -> Result<()> {
        calls::require::HcclAlltoAllV(self.comm.runtime())?;
        self.check_per_rank(
            calls::name::HcclAlltoAllV,
            &[
                ("sendCounts", send_counts),
                ("sdispls", send_displs),
                ("recvCounts", recv_counts),
                ("rdispls", recv_displs),
            ],
        )?;
        self.comm.collective_on(stream, |comm| {
            // SAFETY: the caller's contract; the four arrays hold rank_count() u64s, read during the
            // call.
            unsafe {
                calls::HcclAlltoAllV(
                    self.comm.runtime(),
                    send.as_raw(),
                    host_array(send_counts),
                    host_array(send_displs),
                    dtype,
                    recv.as_raw(),
                    host_array(recv_counts),
                    host_array(recv_displs),
                    dtype,
                    comm,
                    stream.as_raw(),
                )
            }
        })
    }

    /// Element-wise reduction of `count` elements across ranks, result in rank `root`'s
    /// `recv` only (`HcclReduce`).
    ///
    /// # Errors
    /// [`Error::Unsupported`] if the library lacks the call; the library's error for arguments
    /// it checks.
    ///
    /// # Safety
    /// See the notes on this `impl` block.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: u64,
        dtype: HcclDataType,
        op: ReduceOp,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        self.comm.collective_on(stream, |comm| {
            // SAFETY: the caller's contract; the communicator and stream are live.
            unsafe {
                calls::HcclReduce(
                    self.comm.runtime(),
                    send.as_raw(),
                    recv.as_raw(),
                    count,
                    dtype,
                    HcclReduceOp::from(op),
                    root,
                    comm,
                    stream.as_raw(),
                )
            }
        })
    }

    /// Block `p` (of `recv_count` elements) of rank `root`'s `send` lands in rank `p`'s
    /// `recv` (`HcclScatter`). Only the root's `send` is read; other ranks may pass
    /// `DevicePtr::from_raw(std::ptr::null_mut())`.
    ///
    /// # Errors
    /// As for [`reduce`](Self::reduce).
    ///
    /// # Safety
    /// See the notes on this `impl` block; the root's `send` holds `rank_count()` blocks.
    pub unsafe fn scatter(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        recv_count: u64,
        dtype: HcclDataType,
        root: u32,
        stream: &Stream,
    ) -> Result<()> {
        self.comm.collective_on(stream, |comm| {
            // SAFETY: the caller's contract; the communicator and stream are live.
            unsafe {
                calls::HcclScatter(
                    self.comm.runtime(),
                    send.as_raw(),
                    recv.as_raw(),
                    recv_count,
                    dtype,
                    root,
                    comm,
                    stream.as_raw(),
                )
            }
        })
    }

    /// Sends `count` elements of `buf` to rank `peer`, which must post the matching
    /// [`recv`](Self::recv) (`HcclSend`). Only the two ranks take part.
    ///
    /// # Errors
    /// As for [`reduce`](Self::reduce).
    ///
    /// # Safety
    /// See the notes on this `impl` block.
    pub unsafe fn send(
        &self,
        buf: DevicePtr,
        count: u64,
        dtype: HcclDataType,
        peer: u32,
        stream: &Stream,
    ) -> Result<()> {
        self.comm.serialised(|comm| {
            // SAFETY: the caller's contract; the communicator and stream are live.
            unsafe {
                calls::HcclSend(
                    self.comm.runtime(),
                    buf.as_raw(),
                    count,
                    dtype,
                    peer,
                    comm,
                    stream.as_raw(),
                )
            }
        })
    }

    /// Receives `count` elements from rank `peer` into `buf` (`HcclRecv`), the pair of its
    /// [`send`](Self::send).
    ///
    /// # Errors
    /// As for [`reduce`](Self::reduce).
    ///
    /// # Safety
    /// See the notes on this `impl` block.
    pub unsafe fn recv(
        &self,
        buf: DevicePtr,
        count: u64,
        dtype: HcclDataType,
        peer: u32,
        stream: &Stream,
    ) -> Result<()> {
        self.comm.serialised(|comm| {
            // SAFETY: the caller's contract; the communicator and stream are live.
            unsafe {
                calls::HcclRecv(
                    self.comm.runtime(),
                    buf.as_raw(),
                    count,
                    dtype,
                    peer,
                    comm,
                    stream.as_raw(),
                )
            }
        })
    }

    /// Posts every send and receive of `items` at once (`HcclBatchSendRecv`): they do not
    /// wait for each other on this rank, so a ring exchange cannot deadlock. Each peer must
    /// post the matching items.
    ///
    /// # Errors
    /// [`Error::Unsupported`] if the library lacks the call; [`Error::InvalidArgument`] for
    /// more than `u32::MAX` items; the library's error for arguments it checks.
    ///
    /// # Safety
    /// See the notes on this `impl` block: each item's `buf` holds its `count` elements.
    pub unsafe fn batch_send_recv(
        &self,
        items: &[HcclSendRecvItem],
        stream: &Stream,
    ) -> Result<()> {
        calls::require::HcclBatchSendRecv(self.comm.runtime())?;
        let count = u32::try_from(items.len()).map_err(|_| {
            Error::invalid(format!(
                "{}: {} items do not fit a u32",
                calls::name::HcclBatchSendRecv,
                items.len()
            ))
        })?;
        // The C prototype takes a mutable pointer but only reads the items: pass a copy, so
        // the caller's slice is never written through.
        let mut copy = items.to_vec();
        self.comm.serialised(|comm| {
            // SAFETY: the caller's contract; `copy` holds `count` items and lives across the
            // call.
            unsafe {
                calls::HcclBatchSendRecv(
                    self.comm.runtime(),
                    copy.as_mut_ptr(),
                    count,
                    comm,
                    stream.as_raw(),
                )
            }
        })
    }

    /// [`Error::InvalidArgument`] unless every named array has one entry per rank: the C
    /// functions read exactly `rank_count()` of them.
    fn check_per_rank(&self, call: &str, arrays: &[(&str, &[u64])]) -> Result<()> {
        let ranks = self.comm.rank_count() as usize;
        for (name, array) in arrays {
            if array.len() != ranks {
                return Err(Error::invalid(format!(
                    "{call}: {name} has {} entries, expected one per rank ({ranks})",
                    array.len()
                )));
            }
        }
        Ok(())
    }
}

/// A host array of `u64` as the `const void *` the V collectives take.
fn host_array(values: &[u64]) -> *const c_void {
    values.as_ptr().cast()
}
