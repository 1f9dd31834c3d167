//! HCCL's C entry points (`libhccl.so` / `libhcomm.so`), implemented by the emulator.
//!
//! Each one checks for an injected failure, then runs its body with panics caught (see
//! [`super::errors::entry`]). Null pointer arguments are `HCCL_E_PTR`; an unknown communicator
//! or window handle is `HCCL_E_PARA`.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_void};

use crate::sys::{
    HcclComm, HcclCommConfig, HcclCommSymWindow, HcclDataType, HcclReduceOp, HcclResult,
    HcclRootInfo, aclrtStream,
};

use super::collective::{self, Kind, Request};
use super::errors::{HcclRes, entry, entry_with, hccl_error_string, hccl_fail};
use super::{comm, window};

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

/// What an injected failure of a collective on `comm` does: consume its sequence number, as a
/// locally rejected call would, so peers' calls do not pair with this rank's next one.
fn consume_collective(comm: HcclComm) -> impl FnOnce() {
    move || {
        if let Ok(c) = comm::lookup(comm as usize) {
            c.next_collective_seq();
        }
    }
}

/// A request with the fields most collectives share (no reduction, root 0, receive count and
/// type equal to the send ones).
fn request(
    kind: Kind,
    send: usize,
    recv: usize,
    count: u64,
    dtype: HcclDataType,
    comm: HcclComm,
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
        comm: comm as usize,
        stream: stream as usize,
    }
}

/// `HcclGetRootInfo`: a fresh rendezvous identity for `HcclCommInitRootInfo*`.
///
/// # Safety
/// `root_info` is null or valid for writes.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclGetRootInfo(root_info: *mut HcclRootInfo) -> HcclResult {
    entry("HcclGetRootInfo", || {
        non_null(root_info, "rootInfo")?;
        // SAFETY: the caller's contract; checked non-null above.
        unsafe { put(root_info, comm::get_root_info(), "rootInfo") }
    })
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

/// `HcclCommInitRootInfo`: [`HcclCommInitRootInfoConfig`] with the default config.
///
/// # Safety
/// `root_info` is null or readable; `comm` is null or valid for writes.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclCommInitRootInfo(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    comm: *mut HcclComm,
) -> HcclResult {
    entry("HcclCommInitRootInfo", || {
        // SAFETY: forwarded caller's contract.
        unsafe { init(n_ranks, root_info, rank, None, comm) }
    })
}

/// `HcclCommInitRootInfoConfig`: joins as `rank` of `n_ranks` and blocks until every rank has
/// joined (or the exec timeout passes: `HCCL_E_TIMEOUT`). The calling thread needs a device
/// (`HCCL_E_RUNTIME` otherwise).
///
/// # Safety
/// `root_info` and `config` are null or readable (`config` for its stated size); `comm` is
/// null or valid for writes.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclCommInitRootInfoConfig(
    n_ranks: u32,
    root_info: *const HcclRootInfo,
    rank: u32,
    config: *const HcclCommConfig,
    comm: *mut HcclComm,
) -> HcclResult {
    entry("HcclCommInitRootInfoConfig", || {
        // SAFETY: forwarded caller's contract.
        unsafe { init(n_ranks, root_info, rank, Some(config), comm) }
    })
}

/// `HcclCommDestroy`: local; deregisters this rank's remaining windows without a rendezvous.
///
/// # Safety
/// None: the handle is looked up.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclCommDestroy(comm: HcclComm) -> HcclResult {
    entry("HcclCommDestroy", || comm::destroy(comm as usize))
}

/// `HcclGetRankSize`.
///
/// # Safety
/// `rank_size` is null or valid for writes.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclGetRankSize(comm: HcclComm, rank_size: *mut u32) -> HcclResult {
    entry("HcclGetRankSize", || {
        let c = comm::lookup(comm as usize)?;
        // SAFETY: the caller's contract; checked inside `put`.
        unsafe { put(rank_size, c.n, "rankSize") }
    })
}

/// `HcclGetRankId`.
///
/// # Safety
/// `rank` is null or valid for writes.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclGetRankId(comm: HcclComm, rank: *mut u32) -> HcclResult {
    entry("HcclGetRankId", || {
        let c = comm::lookup(comm as usize)?;
        // SAFETY: the caller's contract; checked inside `put`.
        unsafe { put(rank, c.rank, "rank") }
    })
}

/// `HcclGetErrorString`: a static string naming the code.
///
/// # Safety
/// None.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclGetErrorString(code: HcclResult) -> *const c_char {
    hccl_error_string(code).as_ptr()
}

/// `HcclGetCommAsyncError`: the first collective failure since the last call (read and
/// clear), `HCCL_SUCCESS` when there was none.
///
/// # Safety
/// `async_error` is null or valid for writes.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclGetCommAsyncError(
    comm: HcclComm,
    async_error: *mut HcclResult,
) -> HcclResult {
    entry("HcclGetCommAsyncError", || {
        non_null(async_error, "asyncError")?;
        let c = comm::lookup(comm as usize)?;
        // SAFETY: the caller's contract; checked non-null above.
        unsafe { put(async_error, c.take_async_error(), "asyncError") }
    })
}

/// `HcclCommSymWinRegister`: collective; see the reference for the rules.
///
/// # Safety
/// `win_handle` is null or valid for writes; `addr` is validated.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclCommSymWinRegister(
    comm: HcclComm,
    addr: *mut c_void,
    size: u64,
    win_handle: *mut HcclCommSymWindow,
    flag: u32,
) -> HcclResult {
    let consume = move || {
        if let Ok(c) = comm::lookup(comm as usize) {
            c.next_host_seq();
        }
    };
    entry_with("HcclCommSymWinRegister", consume, || {
        non_null(comm, "comm")?;
        let c = comm::lookup(comm as usize)?;
        // Taken before the other checks: a call on a live communicator that is rejected
        // locally still consumes its number, so this rank's next call does not pair with the
        // peers' current one.
        let seq = c.next_host_seq();
        non_null(addr, "addr")?;
        non_null(win_handle, "winHandle")?;
        let h = window::register(&c, seq, addr as usize, size, flag)?;
        // SAFETY: the caller's contract; checked non-null above.
        unsafe { put(win_handle, h as HcclCommSymWindow, "winHandle") }
    })
}

/// `HcclCommSymWinDeregister`: collective; never frees the user's memory.
///
/// # Safety
/// None: the handle is looked up.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclCommSymWinDeregister(win_handle: HcclCommSymWindow) -> HcclResult {
    let consume = move || window::consume_deregister_seq(win_handle as usize);
    entry_with("HcclCommSymWinDeregister", consume, || {
        non_null(win_handle, "winHandle")?;
        window::deregister(win_handle as usize)
    })
}

/// `HcclCommSymWinGet`: the window holding `[ptr, ptr + size)` and the offset of `ptr`.
///
/// # Safety
/// `win_handle` and `offset` are null or valid for writes.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclCommSymWinGet(
    comm: HcclComm,
    ptr: *mut c_void,
    size: usize,
    win_handle: *mut HcclCommSymWindow,
    offset: *mut usize,
) -> HcclResult {
    entry("HcclCommSymWinGet", || {
        non_null(comm, "comm")?;
        non_null(ptr, "ptr")?;
        non_null(win_handle, "winHandle")?;
        non_null(offset, "offset")?;
        let (h, off) = window::get(comm as usize, ptr as usize, size)?;
        // SAFETY: the caller's contract; both checked non-null above.
        unsafe {
            put(win_handle, h as HcclCommSymWindow, "winHandle")?;
            put(offset, off, "offset")
        }
    })
}

/// `HcclBarrier`: a rendezvous of every rank's stream.
///
/// # Safety
/// None: handles are looked up.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclBarrier(comm: HcclComm, stream: aclrtStream) -> HcclResult {
    entry_with("HcclBarrier", consume_collective(comm), || {
        collective::enqueue(request(
            Kind::Barrier,
            0,
            0,
            0,
            HcclDataType::HCCL_DATA_TYPE_INT8,
            comm,
            stream,
        ))
    })
}

/// `HcclAllReduce`: `count` elements, reduced with `op` in rank order.
///
/// # Safety
/// None: device ranges and handles are validated.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclAllReduce(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    op: HcclReduceOp,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry_with("HcclAllReduce", consume_collective(comm), || {
        collective::enqueue(Request {
            op,
            ..request(
                Kind::AllReduce,
                send_buf as usize,
                recv_buf as usize,
                count,
                data_type,
                comm,
                stream,
            )
        })
    })
}

/// `HcclAllGather`: `send_count` elements per rank.
///
/// # Safety
/// None: device ranges and handles are validated.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclAllGather(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    send_count: u64,
    data_type: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry_with("HcclAllGather", consume_collective(comm), || {
        collective::enqueue(request(
            Kind::AllGather,
            send_buf as usize,
            recv_buf as usize,
            send_count,
            data_type,
            comm,
            stream,
        ))
    })
}

/// `HcclReduceScatter`: `recv_count` elements per rank.
///
/// # Safety
/// None: device ranges and handles are validated.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclReduceScatter(
    send_buf: *mut c_void,
    recv_buf: *mut c_void,
    recv_count: u64,
    data_type: HcclDataType,
    op: HcclReduceOp,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry_with("HcclReduceScatter", consume_collective(comm), || {
        collective::enqueue(Request {
            op,
            ..request(
                Kind::ReduceScatter,
                send_buf as usize,
                recv_buf as usize,
                recv_count,
                data_type,
                comm,
                stream,
            )
        })
    })
}

/// `HcclAlltoAll`: `send_count` elements to each peer. The emulator needs
/// `send_count == recv_count` and `send_type == recv_type` (`HCCL_E_PARA` otherwise).
///
/// # Safety
/// None: device ranges and handles are validated.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclAlltoAll(
    send_buf: *const c_void,
    send_count: u64,
    send_type: HcclDataType,
    recv_buf: *const c_void,
    recv_count: u64,
    recv_type: HcclDataType,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry_with("HcclAlltoAll", consume_collective(comm), || {
        collective::enqueue(Request {
            recv_count,
            recv_dtype: recv_type,
            ..request(
                Kind::AlltoAll,
                send_buf as usize,
                recv_buf as usize,
                send_count,
                send_type,
                comm,
                stream,
            )
        })
    })
}

/// `HcclBroadcast`: `count` elements from `root` to every rank (always the staged path).
///
/// # Safety
/// None: device ranges and handles are validated.
#[cfg_attr(feature = "emulator-c-exports", unsafe(no_mangle))]
pub unsafe extern "C" fn HcclBroadcast(
    buf: *mut c_void,
    count: u64,
    data_type: HcclDataType,
    root: u32,
    comm: HcclComm,
    stream: aclrtStream,
) -> HcclResult {
    entry_with("HcclBroadcast", consume_collective(comm), || {
        collective::enqueue(Request {
            root,
            ..request(
                Kind::Broadcast,
                buf as usize,
                buf as usize,
                count,
                data_type,
                comm,
                stream,
            )
        })
    })
}
