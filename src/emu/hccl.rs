//! The bodies of HCCL's C functions (`libhccl.so` / `libhcomm.so`). The exported functions
//! that run them are generated from the list in `sys` (see [`super::exports`]).
//!
//! Null pointer arguments are `HCCL_E_PTR`; an unknown communicator or window handle is
//! `HCCL_E_PARA`. Every body has the C function's contract as its `# Safety`: pointer
//! arguments are null or valid for what the C function reads or writes through them; device
//! ranges and handles are validated, never trusted.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use crate::sys::{
    HcclComm, HcclCommConfig, HcclCommSymWindow, HcclDataType, HcclReduceOp, HcclResult,
    HcclRootInfo, aclrtStream,
};

use super::collective;
use super::comm::{self, Comm};
use super::entry::{CollectiveCall, Sequence, collective};
use super::errors::{HcclRes, hccl_error_string, hccl_fail};
use super::job::{Kind, Request};
use super::sym_window;

/// Fails on a null pointer argument.
fn non_null<T>(ptr: *const T, what: &str) -> HcclRes {
    if ptr.is_null() {
        return hccl_fail(HcclResult::HCCL_E_PTR, format!("{what} is NULL"));
    }
    Ok(())
}

/// Writes `value` through the C out-pointer `out`.
///
/// # Safety
/// `out` is null or valid for writing one `T` (the C caller's contract).
unsafe fn put<T>(out: *mut T, value: T, what: &str) -> HcclRes {
    non_null(out, what)?;
    // SAFETY: non-null, and valid for writes by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// The body of a collective on a stream: `request` is queued once the call's sequence number
/// is taken.
fn stream_collective(
    comm: HcclComm,
    request: Request,
) -> CollectiveCall<impl FnOnce(&Arc<Comm>, u64) -> HcclRes> {
    collective(
        comm::lookup(comm as usize),
        Sequence::Stream,
        move |c, seq| collective::enqueue(c, seq, &request),
    )
}

/// A request with the fields most collectives share (no reduction, root 0, receive count and
/// type equal to the send ones).
fn request(
    kind: Kind,
    send: usize,
    recv: usize,
    count: u64,
    dtype: HcclDataType,
    stream: aclrtStream,
) -> Request {
    Request {
        kind,
        send,
        recv,
        count,
        dtype,
        recv_count: count,
        recv_dtype: dtype,
        op: HcclReduceOp::HCCL_REDUCE_SUM,
        root: 0,
        stream: stream as usize,
    }
}

/// `HcclGetRootInfo`: a fresh rendezvous identity for `HcclCommInitRootInfo*`.
pub(super) unsafe fn HcclGetRootInfo(root_info: *mut HcclRootInfo) -> HcclRes {
    non_null(root_info, "rootInfo")?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(root_info, comm::get_root_info(), "rootInfo") }
}

/// The shared body of both init calls.
///
/// # Safety
/// Non-null pointers are valid as in `HcclCommInitRootInfoConfig`.
unsafe fn init(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    config: Option<*const HcclCommConfig>,
    comm: *mut HcclComm,
) -> HcclRes {
    non_null(root_info, "rootInfo")?;
    non_null(comm, "comm")?;
    let config = match config {
        Some(ptr) => {
            non_null(ptr, "config")?;
            // SAFETY: non-null; the caller promises a config struct of its stated size.
            unsafe { comm::read_config(ptr) }?
        }
        None => HcclCommConfig::init(),
    };
    // SAFETY: non-null; the caller promises a root info blob.
    let root = unsafe { root_info.read_unaligned() };
    let handle = comm::init(n_ranks, &root, rank, &config)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(comm, handle as HcclComm, "comm") }
}

/// `HcclCommInitRootInfo`: `HcclCommInitRootInfoConfig` with the default config.
pub(super) unsafe fn HcclCommInitRootInfo(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    comm: *mut HcclComm,
) -> HcclRes {
    // SAFETY: forwarded caller's contract.
    unsafe { init(n_ranks, root_info, rank, None, comm) }
}

/// `HcclCommInitRootInfoConfig`: joins as `rank` of `n_ranks` and blocks until every rank has
/// joined (or the exec timeout passes: `HCCL_E_TIMEOUT`). The calling thread needs a device
/// (`HCCL_E_RUNTIME` otherwise).
pub(super) unsafe fn HcclCommInitRootInfoConfig(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    config: *const HcclCommConfig,
    comm: *mut HcclComm,
) -> HcclRes {
    // SAFETY: forwarded caller's contract.
    unsafe { init(n_ranks, root_info, rank, Some(config), comm) }
}

/// `HcclCommDestroy`: local; deregisters this rank's remaining windows without a rendezvous.
pub(super) unsafe fn HcclCommDestroy(comm: HcclComm) -> HcclRes {
    comm::destroy(comm as usize)
}

/// `HcclGetRankSize`.
pub(super) unsafe fn HcclGetRankSize(comm: HcclComm, rank_size: *mut u32) -> HcclRes {
    let c = comm::lookup(comm as usize)?;
    // SAFETY: the caller's contract; checked inside `put`.
    unsafe { put(rank_size, c.n, "rankSize") }
}

/// `HcclGetRankId`.
pub(super) unsafe fn HcclGetRankId(comm: HcclComm, rank: *mut u32) -> HcclRes {
    let c = comm::lookup(comm as usize)?;
    // SAFETY: the caller's contract; checked inside `put`.
    unsafe { put(rank, c.rank, "rank") }
}

/// `HcclGetErrorString`: a static string describing the code, as libhccl's.
pub(super) unsafe fn HcclGetErrorString(code: HcclResult) -> *const c_char {
    hccl_error_string(code).as_ptr()
}

/// `HcclGetCommAsyncError`: the first collective failure since the last call (read and
/// clear), `HCCL_SUCCESS` when there was none.
pub(super) unsafe fn HcclGetCommAsyncError(
    comm: HcclComm,
    async_error: *mut HcclResult,
) -> HcclRes {
    non_null(async_error, "asyncError")?;
    let c = comm::lookup(comm as usize)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(async_error, c.take_async_error(), "asyncError") }
}

/// `HcclCommSymWinRegister`: collective; see the module docs of `emu` for the rules.
pub(super) unsafe fn HcclCommSymWinRegister(
    comm: HcclComm,
    addr: *mut c_void,
    size: u64,
    win_handle: *mut HcclCommSymWindow,
    flag: u32,
) -> CollectiveCall<impl FnOnce(&Arc<Comm>, u64) -> HcclRes> {
    collective(
        comm::lookup(comm as usize),
        Sequence::Host,
        move |c, seq| {
            non_null(addr, "addr")?;
            non_null(win_handle, "winHandle")?;
            let h = sym_window::register(c, seq, addr as usize, size, flag)?;
            // SAFETY: the caller's contract; checked non-null above.
            unsafe { put(win_handle, h as HcclCommSymWindow, "winHandle") }
        },
    )
}

/// `HcclCommSymWinDeregister`: collective; never frees the user's memory.
pub(super) unsafe fn HcclCommSymWinDeregister(
    win_handle: HcclCommSymWindow,
) -> CollectiveCall<impl FnOnce(&Arc<Comm>, u64) -> HcclRes> {
    let handle = win_handle as usize;
    let owner = non_null(win_handle, "winHandle").and_then(|()| sym_window::owner(handle));
    collective(owner, Sequence::Host, move |c, seq| {
        sym_window::deregister(c, seq, handle)
    })
}

/// `HcclCommSymWinGet`: the window holding `[ptr, ptr + size)` and the offset of `ptr`.
pub(super) unsafe fn HcclCommSymWinGet(
    comm: HcclComm,
    ptr: *mut c_void,
    size: usize,
    win_handle: *mut HcclCommSymWindow,
    offset: *mut usize,
) -> HcclRes {
    non_null(comm, "comm")?;
    non_null(ptr, "ptr")?;
    non_null(win_handle, "winHandle")?;
    non_null(offset, "offset")?;
    let (h, off) = sym_window::get(comm as usize, ptr as usize, size)?;
    // SAFETY: the caller's contract; both checked non-null above.
    unsafe {
        put(win_handle, h as HcclCommSymWindow, "winHandle")?;
        put(offset, off, "offset")
    }
}

/// `HcclBarrier`: a rendezvous of every rank's stream.
pub(super) unsafe fn HcclBarrier(
    comm: HcclComm,
    stream: aclrtStream,
) -> CollectiveCall<impl FnOnce(&Arc<Comm>, u64) -> HcclRes> {
    let dtype = HcclDataType::HCCL_DATA_TYPE_INT8;
    stream_collective(comm, request(Kind::Barrier, 0, 0, 0, dtype, stream))
}

/// `HcclAllReduce`: `count` elements, reduced with `op` in rank order.
pub(super) unsafe fn HcclAllReduce(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    op: HcclReduceOp,
    comm: HcclComm,
    stream: aclrtStream,
) -> CollectiveCall<impl FnOnce(&Arc<Comm>, u64) -> HcclRes> {
    let (send, recv) = (send_buf as usize, recv_buf as usize);
    let req = request(Kind::AllReduce, send, recv, count, data_type, stream);
    stream_collective(comm, Request { op, ..req })
}

/// `HcclAllGather`: `send_count` elements per rank.
pub(super) unsafe fn HcclAllGather(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    send_count: u64,
    data_type: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> CollectiveCall<impl FnOnce(&Arc<Comm>, u64) -> HcclRes> {
    let (send, recv) = (send_buf as usize, recv_buf as usize);
    let req = request(Kind::AllGather, send, recv, send_count, data_type, stream);
    stream_collective(comm, req)
}

/// `HcclReduceScatter`: `recv_count` elements per rank.
pub(super) unsafe fn HcclReduceScatter(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    recv_count: u64,
    data_type: HcclDataType,
    op: HcclReduceOp,
    comm: HcclComm,
    stream: aclrtStream,
) -> CollectiveCall<impl FnOnce(&Arc<Comm>, u64) -> HcclRes> {
    let (send, recv) = (send_buf as usize, recv_buf as usize);
    let req = request(
        Kind::ReduceScatter,
        send,
        recv,
        recv_count,
        data_type,
        stream,
    );
    stream_collective(comm, Request { op, ..req })
}

/// `HcclAlltoAll`: `send_count` elements to each peer. The emulator needs
/// `send_count == recv_count` and `send_type == recv_type` (`HCCL_E_PARA` otherwise).
#[allow(clippy::too_many_arguments)] // the C prototype
pub(super) unsafe fn HcclAlltoAll(
    send_buf: *const c_void,
    send_count: u64,
    send_type: HcclDataType,
    recv_buf: *const c_void,
    recv_count: u64,
    recv_type: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> CollectiveCall<impl FnOnce(&Arc<Comm>, u64) -> HcclRes> {
    let (send, recv) = (send_buf as usize, recv_buf as usize);
    let req = request(Kind::AlltoAll, send, recv, send_count, send_type, stream);
    stream_collective(
        comm,
        Request {
            recv_count,
            recv_dtype: recv_type,
            ..req
        },
    )
}

/// `HcclBroadcast`: `count` elements from `root` to every rank (always the staged path).
pub(super) unsafe fn HcclBroadcast(
    buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    root: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> CollectiveCall<impl FnOnce(&Arc<Comm>, u64) -> HcclRes> {
    let buf = buf as usize;
    let req = request(Kind::Broadcast, buf, buf, count, data_type, stream);
    stream_collective(comm, Request { root, ..req })
}
