//! The collectives, on raw device pointers. The typed, checked versions live on the pool.

use super::{Comm, DevicePtr, Stream};
use crate::Result;
use crate::sys::{HcclDataType, HcclReduceOp};

/// The reduction of AllReduce and ReduceScatter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Element-wise sum.
    Sum,
    /// Element-wise product.
    Prod,
    /// Element-wise maximum.
    Max,
    /// Element-wise minimum.
    Min,
}

impl ReduceOp {
    /// The C value.
    pub fn to_raw(self) -> HcclReduceOp {
        match self {
            ReduceOp::Sum => HcclReduceOp::HCCL_REDUCE_SUM,
            ReduceOp::Prod => HcclReduceOp::HCCL_REDUCE_PROD,
            ReduceOp::Max => HcclReduceOp::HCCL_REDUCE_MAX,
            ReduceOp::Min => HcclReduceOp::HCCL_REDUCE_MIN,
        }
    }
}

/// The collectives enqueue work on `stream` and return; [`Comm::synchronize`] waits for it.
///
/// # Safety (all of them)
/// Every buffer must be device memory of this rank, large enough for the counts given
/// (`count` elements of `dtype`; AllGather's output and ReduceScatter's input are `size()`
/// times larger, AlltoAll's are `size()` blocks of the per-peer count), and must stay valid
/// and untouched by the host until the stream has been synchronised.
impl Comm {
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
        self.hccl_call("HcclAllReduce", |hccl, comm| {
            // SAFETY: the caller's contract; the communicator and stream are live.
            unsafe {
                (hccl.HcclAllReduce)(
                    send.as_raw(),
                    recv.as_raw(),
                    count,
                    dtype,
                    op.to_raw(),
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
        self.hccl_call("HcclAllGather", |hccl, comm| {
            // SAFETY: the caller's contract; the communicator and stream are live.
            unsafe {
                (hccl.HcclAllGather)(
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

    /// Reduces `size() * recv_count` elements across ranks and leaves block `rank()` of the
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
        self.hccl_call("HcclReduceScatter", |hccl, comm| {
            // SAFETY: the caller's contract; the communicator and stream are live.
            unsafe {
                (hccl.HcclReduceScatter)(
                    send.as_raw(),
                    recv.as_raw(),
                    recv_count,
                    dtype,
                    op.to_raw(),
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
        self.hccl_call("HcclAlltoAll", |hccl, comm| {
            // SAFETY: the caller's contract; the communicator and stream are live.
            unsafe {
                (hccl.HcclAlltoAll)(
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
        self.hccl_call("HcclBroadcast", |hccl, comm| {
            // SAFETY: the caller's contract; the communicator and stream are live.
            unsafe { (hccl.HcclBroadcast)(buf.as_raw(), count, dtype, root, comm, stream.as_raw()) }
        })
    }
}
