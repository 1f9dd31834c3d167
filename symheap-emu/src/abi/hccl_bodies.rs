//! The bodies of HCCL's C functions (`libhccl.so` / `libhcomm.so`). The exported functions
//! that run them are generated from the list in `symheap-sys` (see [`crate::abi::exports`]
//! and [`crate::abi::args`]).
//!
//! Null pointer arguments are `HCCL_E_PTR`; an unknown communicator or window handle is
//! `HCCL_E_PARA`. A body that reads or writes through the caller's pointers is an
//! `unsafe fn` whose `# Safety` is the C function's contract (host pointers are null or valid
//! for what the C function reads or writes through them); every other body is a safe
//! function. Device ranges and handles are validated, never trusted.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_void};

use crate::sys::{
    COMM_NAME_MAX_LENGTH, HcclComm, HcclCommConfig, HcclConfigValue, HcclDataType, HcclReduceOp,
    HcclRootInfo, HcclSendRecvType, aclrtStream,
};

use crate::abi::args;
use crate::abi::entry::{CollectiveCall, Sequence, collective, grouped, issue};
use crate::abi::group;
use crate::base::errors::{HcclRes, hccl_error_string, hccl_fail};
use crate::base::handle::{CommHandle, PhysicalHandle, StreamHandle, WindowHandle};
use crate::base::lock::lock;
use crate::hccl::cluster_info;
use crate::hccl::collective;
use crate::hccl::comm;
use crate::hccl::hcomm_mem;
use crate::hccl::job::{Request, Signature};
#[cfg(doc)]
use crate::hccl::memory_range;
use crate::hccl::sub_comm;
use crate::hccl::v_layout::{self, Blocks};
use crate::{hccl::p2p, hccl::registration};
use symheap_types::Collective::{
    self, AllGather, AllGatherV, AllReduce, AlltoAll, AlltoAllV, AlltoAllVC, Barrier, Broadcast,
    Reduce, ReduceScatter, ReduceScatterV, Scatter,
};

/// Fails with `HCCL_E_PTR` on a NULL pointer argument.
fn non_null<T>(ptr: *const T, what: &str) -> HcclRes {
    crate::base::errors::hccl_non_null(ptr as usize, what)
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

/// The body of a collective on a stream: `request` is checked and queued once the call's
/// sequence number is taken. Inside a group (every collective but `HcclBarrier`, as in HCCL)
/// the call is kept and issued by `HcclGroupEnd` ([`group`]).
fn queue(comm: HcclComm, stream: aclrtStream, request: Request) -> CollectiveCall {
    if request.sig.kind != Barrier && group::is_open() {
        let sig = request.sig;
        return grouped(move || {
            group::keep_collective(
                comm,
                group::Deferred {
                    name: format!("Hccl{:?}", sig.kind),
                    volume: Some(group::volume(sig.count, sig.dtype)),
                    stream: StreamHandle::from_c(stream),
                    issue: Box::new(move || issue(queue(comm, stream, request))),
                },
            )
        });
    }
    let comm = comm::lookup(CommHandle::from_c(comm));
    collective(comm, Sequence::Stream, move |c, seq| {
        collective::enqueue(c, seq, StreamHandle::from_c(stream), &request)
    })
}

/// A request with the fields most collectives share (no reduction, root 0, receive count and
/// type equal to the send ones).
fn request(
    kind: Collective,
    send: *const c_void,
    recv: *const c_void,
    count: u64,
    dtype: HcclDataType,
) -> Request {
    let op = HcclReduceOp::HCCL_REDUCE_SUM;
    Request {
        sig: Signature {
            kind,
            count,
            dtype,
            op,
            root: 0,
        },
        send: send as usize,
        recv: recv as usize,
        recv_count: count,
        recv_dtype: dtype,
        vectors: None,
    }
}

/// The body of a V collective: `make` builds the request once the communicator is known
/// (reading the caller's arrays, `rankSize` long; it gets `rankSize` and this rank), then it
/// is checked and queued as in [`queue`]. Inside a group the call is kept, and `make` reads
/// the arrays when `HcclGroupEnd` issues it (HCCL's group keeps the pointers too).
fn queue_vector(
    kind: Collective,
    comm: HcclComm,
    stream: aclrtStream,
    make: impl FnOnce(u32, u32) -> HcclRes<Request> + 'static,
) -> CollectiveCall {
    if group::is_open() {
        return grouped(move || {
            group::keep_collective(
                comm,
                group::Deferred {
                    name: format!("Hccl{kind:?}"),
                    volume: None,
                    stream: StreamHandle::from_c(stream),
                    issue: Box::new(move || issue(queue_vector(kind, comm, stream, make))),
                },
            )
        });
    }
    let comm = comm::lookup(CommHandle::from_c(comm));
    collective(comm, Sequence::Stream, move |c, seq| {
        let request = make(c.n, c.rank)?;
        collective::enqueue(c, seq, StreamHandle::from_c(stream), &request)
    })
}

/// `HcclGetRootInfo`: a fresh rendezvous identity for `HcclCommInitRootInfo*`.
///
/// # Safety
/// `HcclGetRootInfo`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclGetRootInfo(a: args::HcclGetRootInfo) -> HcclRes {
    non_null(a.rootInfo, "rootInfo")?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.rootInfo, comm::get_root_info()?, "rootInfo") }
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
    if group::is_open() {
        // Kept, and run by `HcclGroupEnd` on a thread of its own bound to this thread's
        // device, as HCCL's group runs an init job; the pointers are read then.
        let (root_info, comm) = (root_info as usize, comm as usize);
        let config = config.map(|p| p as usize);
        return group::keep_management("HcclCommInitRootInfo", move || {
            // SAFETY: the caller's contract for a call inside a group: the pointers stay
            // valid until `HcclGroupEnd` returns.
            unsafe {
                init(
                    n_ranks,
                    root_info as *const HcclRootInfo,
                    rank,
                    config.map(|p| p as *const HcclCommConfig),
                    comm as *mut HcclComm,
                )
            }
        });
    }
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
    unsafe { put(comm, handle.to_c(), "comm") }
}

/// `HcclCommInitRootInfo`: `HcclCommInitRootInfoConfig` with the default config.
///
/// # Safety
/// `HcclCommInitRootInfo`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclCommInitRootInfo(a: args::HcclCommInitRootInfo) -> HcclRes {
    // SAFETY: forwarded caller's contract.
    unsafe { init(a.nRanks, a.rootInfo, a.rank, None, a.comm) }
}

/// `HcclCommInitRootInfoConfig`: joins as `rank` of `n_ranks` and blocks until every rank has
/// joined (or the exec timeout passes: `HCCL_E_TIMEOUT`). The calling thread needs a device
/// (`HCCL_E_RUNTIME` otherwise).
///
/// # Safety
/// `HcclCommInitRootInfoConfig`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclCommInitRootInfoConfig(a: args::HcclCommInitRootInfoConfig) -> HcclRes {
    // SAFETY: forwarded caller's contract.
    unsafe { init(a.nRanks, a.rootInfo, a.rank, Some(a.config), a.comm) }
}

/// `HcclCommDestroy`: local; deregisters this rank's remaining windows without a rendezvous.
pub(super) fn HcclCommDestroy(a: args::HcclCommDestroy) -> HcclRes {
    let handle = CommHandle::from_c(a.comm);
    if group::is_open() {
        // Kept for `HcclGroupEnd`, as HCCL's group keeps a destroy job.
        comm::lookup(handle)?;
        return group::keep_management("HcclCommDestroy", move || comm::destroy(handle));
    }
    comm::destroy(handle)
}

/// `HcclGetRankSize`.
///
/// # Safety
/// `HcclGetRankSize`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclGetRankSize(a: args::HcclGetRankSize) -> HcclRes {
    let c = comm::lookup(CommHandle::from_c(a.comm))?;
    // SAFETY: the caller's contract; checked inside `put`.
    unsafe { put(a.rankSize, c.n, "rankSize") }
}

/// `HcclGetRankId`.
///
/// # Safety
/// `HcclGetRankId`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclGetRankId(a: args::HcclGetRankId) -> HcclRes {
    let c = comm::lookup(CommHandle::from_c(a.comm))?;
    // SAFETY: the caller's contract; checked inside `put`.
    unsafe { put(a.rank, c.rank, "rank") }
}

/// `HcclGetErrorString`: a static string describing the code, as libhccl's.
pub(super) fn HcclGetErrorString(a: args::HcclGetErrorString) -> *const c_char {
    hccl_error_string(a.code).as_ptr()
}

/// `HcclGetCommAsyncError`: the first collective failure since the last call (read and
/// clear), `HCCL_SUCCESS` when there was none.
///
/// # Safety
/// `HcclGetCommAsyncError`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclGetCommAsyncError(a: args::HcclGetCommAsyncError) -> HcclRes {
    non_null(a.asyncError, "asyncError")?;
    let c = comm::lookup(CommHandle::from_c(a.comm))?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.asyncError, c.take_async_error(), "asyncError") }
}

/// `HcclCommSymWinRegister`: collective; see the module docs of `emu` for the rules.
///
/// # Safety
/// `HcclCommSymWinRegister`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclCommSymWinRegister(a: args::HcclCommSymWinRegister) -> CollectiveCall {
    collective(
        comm::lookup(CommHandle::from_c(a.comm)),
        Sequence::Host,
        move |c, seq| {
            non_null(a.addr, "addr")?;
            non_null(a.winHandle, "winHandle")?;
            let h = registration::register(c, seq, a.addr as usize, a.size, a.flag)?;
            // SAFETY: the caller's contract; checked non-null above.
            unsafe { put(a.winHandle, h.to_c(), "winHandle") }
        },
    )
}

/// `HcclCommSymWinDeregister`: collective; never frees the user's memory.
pub(super) fn HcclCommSymWinDeregister(a: args::HcclCommSymWinDeregister) -> CollectiveCall {
    let handle = WindowHandle::from_c(a.winHandle);
    let owner = non_null(a.winHandle, "winHandle").and_then(|()| registration::owner(handle));
    collective(owner, Sequence::Host, move |c, seq| {
        registration::deregister(c, seq, handle)
    })
}

/// `HcclCommSymWinGet`: the window holding `[ptr, ptr + size)` and the offset of `ptr`.
///
/// # Safety
/// `HcclCommSymWinGet`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclCommSymWinGet(a: args::HcclCommSymWinGet) -> HcclRes {
    non_null(a.comm, "comm")?;
    non_null(a.ptr, "ptr")?;
    non_null(a.winHandle, "winHandle")?;
    non_null(a.offset, "offset")?;
    let (h, off) = registration::get(CommHandle::from_c(a.comm), a.ptr as usize, a.size)?;
    // SAFETY: the caller's contract; both checked non-null above.
    unsafe {
        put(a.winHandle, h.to_c(), "winHandle")?;
        put(a.offset, off, "offset")
    }
}

/// `HcclBarrier`: a rendezvous of every rank's stream.
pub(super) fn HcclBarrier(a: args::HcclBarrier) -> CollectiveCall {
    let null = std::ptr::null();
    let req = request(Barrier, null, null, 0, HcclDataType::HCCL_DATA_TYPE_INT8);
    queue(a.comm, a.stream, req)
}

/// `HcclAllReduce`: `count` elements, reduced with `op` in rank order.
pub(super) fn HcclAllReduce(a: args::HcclAllReduce) -> CollectiveCall {
    let mut req = request(AllReduce, a.sendBuf, a.recvBuf, a.count, a.dataType);
    req.sig.op = a.op;
    queue(a.comm, a.stream, req)
}

/// `HcclAllGather`: `sendCount` elements per rank.
pub(super) fn HcclAllGather(a: args::HcclAllGather) -> CollectiveCall {
    let req = request(AllGather, a.sendBuf, a.recvBuf, a.sendCount, a.dataType);
    queue(a.comm, a.stream, req)
}

/// `HcclReduceScatter`: `recvCount` elements per rank.
pub(super) fn HcclReduceScatter(a: args::HcclReduceScatter) -> CollectiveCall {
    let mut req = request(ReduceScatter, a.sendBuf, a.recvBuf, a.recvCount, a.dataType);
    req.sig.op = a.op;
    queue(a.comm, a.stream, req)
}

/// `HcclAlltoAll`: `sendCount` elements to each peer. The emulator needs
/// `sendCount == recvCount` and `sendType == recvType` (`HCCL_E_PARA` otherwise).
pub(super) fn HcclAlltoAll(a: args::HcclAlltoAll) -> CollectiveCall {
    let mut req = request(AlltoAll, a.sendBuf, a.recvBuf, a.sendCount, a.sendType);
    (req.recv_count, req.recv_dtype) = (a.recvCount, a.recvType);
    queue(a.comm, a.stream, req)
}

/// `HcclBroadcast`: `count` elements from `root` to every rank (always the staged path).
pub(super) fn HcclBroadcast(a: args::HcclBroadcast) -> CollectiveCall {
    let mut req = request(Broadcast, a.buf, a.buf, a.count, a.dataType);
    req.sig.root = a.root;
    queue(a.comm, a.stream, req)
}

/// `HcclAllGatherV`: rank `i` contributes `recvCounts[i]` elements (its `sendCount`), which
/// land `recvDispls[i]` elements into every rank's `recvBuf`; both arrays, `rankSize` `u64`s
/// on the host, must be the same on every rank.
///
/// # Safety
/// `HcclAllGatherV`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclAllGatherV(a: args::HcclAllGatherV) -> CollectiveCall {
    queue_vector(AllGatherV, a.comm, a.stream, move |n, _| {
        // SAFETY: the caller's contract: each array is NULL or holds `rankSize` `u64`s, read
        // here, inside the call (or, for a call kept in a group, inside the `HcclGroupEnd`
        // that issues it, until which the contract keeps the arrays valid).
        let (counts, displs) = unsafe {
            (
                v_layout::read(a.recvCounts, n, "recvCounts")?,
                v_layout::read(a.recvDispls, n, "recvDispls")?,
            )
        };
        let mut req = request(AllGatherV, a.sendBuf, a.recvBuf, 0, a.dataType);
        req.vectors = Some(Blocks::all_gather_v(a.sendCount, &counts, &displs));
        Ok(req)
    })
}

/// `HcclReduceScatterV`: rank `j` receives the reduction of every rank's `sendCounts[j]`
/// elements at `sendDispls[j]`; `recvCount` must be `sendCounts[myRank]`, and both arrays the
/// same on every rank.
///
/// # Safety
/// `HcclReduceScatterV`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclReduceScatterV(a: args::HcclReduceScatterV) -> CollectiveCall {
    queue_vector(ReduceScatterV, a.comm, a.stream, move |n, _| {
        // SAFETY: as in `HcclAllGatherV`.
        let (counts, displs) = unsafe {
            (
                v_layout::read(a.sendCounts, n, "sendCounts")?,
                v_layout::read(a.sendDispls, n, "sendDispls")?,
            )
        };
        let mut req = request(ReduceScatterV, a.sendBuf, a.recvBuf, 0, a.dataType);
        req.sig.op = a.op;
        req.vectors = Some(Blocks::reduce_scatter_v(&counts, &displs, a.recvCount));
        Ok(req)
    })
}

/// `HcclAlltoAllV`: each rank sends `sendCounts[j]` elements at `sdispls[j]` to rank `j` and
/// receives `recvCounts[k]` elements at `rdispls[k]` from rank `k`; what `k` sends `j` must be
/// what `j` expects from `k`. The emulator needs `sendType == recvType`.
///
/// # Safety
/// `HcclAlltoAllV`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclAlltoAllV(a: args::HcclAlltoAllV) -> CollectiveCall {
    queue_vector(AlltoAllV, a.comm, a.stream, move |n, _| {
        // SAFETY: as in `HcclAllGatherV`.
        let arrays = unsafe {
            [
                v_layout::read(a.sendCounts, n, "sendCounts")?,
                v_layout::read(a.sdispls, n, "sdispls")?,
                v_layout::read(a.recvCounts, n, "recvCounts")?,
                v_layout::read(a.rdispls, n, "rdispls")?,
            ]
        };
        let [sc, sd, rc, rd] = &arrays;
        let mut req = request(AlltoAllV, a.sendBuf, a.recvBuf, 0, a.sendType);
        req.recv_dtype = a.recvType;
        req.vectors = Some(Blocks::alltoall_v(sc, sd, rc, rd));
        Ok(req)
    })
}

/// `HcclAlltoAllVC`: AlltoAllV whose counts are one `rankSize × rankSize` matrix of `uint64_t`
/// that every rank passes (`sendCountMatrix[s * rankSize + d]` elements from rank `s` to rank
/// `d`); each rank's blocks are packed in rank order in `sendBuf` and in `recvBuf` (hicann/hcomm
/// `docs/*/api_ref/.../HcclAlltoAllVC.md`). The emulator needs `sendType == recvType`.
///
/// # Safety
/// `HcclAlltoAllVC`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclAlltoAllVC(a: args::HcclAlltoAllVC) -> CollectiveCall {
    queue_vector(AlltoAllVC, a.comm, a.stream, move |n, rank| {
        // SAFETY: as in `HcclAllGatherV`: the caller promises `n * n` counts.
        let matrix = unsafe { v_layout::read(a.sendCountMatrix, n * n, "sendCountMatrix")? };
        let mut req = request(AlltoAllVC, a.sendBuf, a.recvBuf, 0, a.sendType);
        req.recv_dtype = a.recvType;
        req.vectors = Some(Blocks::alltoall_vc(&matrix, n as usize, rank as usize));
        Ok(req)
    })
}

/// `HcclReduce`: `count` elements reduced with `op` in rank order into `root`'s `recvBuf`
/// (always the staged path); other ranks' `recvBuf` is not used and may be NULL.
pub(super) fn HcclReduce(a: args::HcclReduce) -> CollectiveCall {
    let mut req = request(Reduce, a.sendBuf, a.recvBuf, a.count, a.dataType);
    (req.sig.op, req.sig.root) = (a.op, a.root);
    queue(a.comm, a.stream, req)
}

/// `HcclScatter`: block `j` of `root`'s `sendBuf` (`recvCount` elements each) to rank `j`
/// (always the staged path); other ranks' `sendBuf` is not used and may be NULL.
pub(super) fn HcclScatter(a: args::HcclScatter) -> CollectiveCall {
    let mut req = request(Scatter, a.sendBuf, a.recvBuf, a.recvCount, a.dataType);
    req.sig.root = a.root;
    queue(a.comm, a.stream, req)
}

/// `HcclCommInitAll`: `ndev` communicators of one group in this process, rank i on device
/// `devices[i]` (distinct valid ids), made from threads of their own; the calling thread's
/// device binding is unchanged.
///
/// # Safety
/// `HcclCommInitAll`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclCommInitAll(a: args::HcclCommInitAll) -> HcclRes {
    non_null(a.devices, "devices")?;
    non_null(a.comms, "comms")?;
    // SAFETY: non-null; the caller promises `ndev` device ids.
    let devices = unsafe { std::slice::from_raw_parts(a.devices, a.ndev as usize) }.to_vec();
    let handles = comm::init_all(&devices)?;
    for (i, h) in handles.into_iter().enumerate() {
        // SAFETY: non-null; the caller promises room for `ndev` handles.
        unsafe { a.comms.add(i).write(h.to_c()) };
    }
    Ok(())
}

/// `HcclGetCommName`: the config's `hcclCommName` if one was given, otherwise a name made
/// from the root info (the same on every rank), NUL-terminated in at most
/// `COMM_NAME_MAX_LENGTH` bytes.
///
/// # Safety
/// `HcclGetCommName`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclGetCommName(a: args::HcclGetCommName) -> HcclRes {
    let c = comm::lookup(CommHandle::from_c(a.comm))?;
    non_null(a.commName, "commName")?;
    let name = c.name.as_slice();
    let len = name.len().min(COMM_NAME_MAX_LENGTH - 1);
    // SAFETY: non-null; the caller promises `COMM_NAME_MAX_LENGTH` writable bytes, and
    // `len + 1` is at most that.
    unsafe {
        std::ptr::copy_nonoverlapping(name.as_ptr(), a.commName.cast::<u8>(), len);
        a.commName.add(len).write(0);
    }
    Ok(())
}

/// `HcclCreateSubCommConfig`: splits a sub-communicator of `rankNum` ranks off the global
/// communicator `*comm`, rank `i` of it being global rank `rankIds[i]`; only its members meet
/// (see [`sub_comm`]). A rank outside passes `rankIds = NULL` and `subCommId = 0xFFFFFFFF`,
/// and gets `HCCL_SUCCESS` with `*subComm` untouched.
///
/// # Safety
/// `HcclCreateSubCommConfig`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclCreateSubCommConfig(a: args::HcclCreateSubCommConfig) -> HcclRes {
    let member = sub_comm::check_call(
        !a.subComm.is_null(),
        a.rankIds.is_null(),
        a.subCommId,
        a.rankNum,
        a.subCommRankId,
    )?;
    if !member {
        return Ok(());
    }
    non_null(a.config, "config")?;
    non_null(a.comm, "comm")?;
    // SAFETY: non-null; the caller promises a readable `HcclComm`.
    let global = comm::lookup(CommHandle::from_c(unsafe { a.comm.read() }))?;
    if a.rankNum > global.n {
        return crate::base::errors::para(format!(
            "rankNum {} exceeds the global communicator's {} ranks",
            a.rankNum, global.n
        ));
    }
    // SAFETY: non-null; the caller promises `rankNum` ids (at most the global size, checked).
    let rank_ids = unsafe { std::slice::from_raw_parts(a.rankIds, a.rankNum as usize) }.to_vec();
    // SAFETY: non-null; the caller promises a config struct of its stated size.
    let config = unsafe { comm::read_config(a.config) }?;
    let request = sub_comm::Request {
        rank_ids,
        sub_comm_id: a.subCommId,
        sub_rank: a.subCommRankId,
        config,
    };
    let handle = sub_comm::create(&global, &request)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.subComm, handle.to_c(), "subComm") }
}

/// `HcclSend`: sends `count` elements to `destRank`; the task completes once that rank's
/// matching `HcclRecv` has received everything (see [`p2p`]).
pub(super) fn HcclSend(a: args::HcclSend) -> HcclRes {
    let item = p2p::Item {
        kind: HcclSendRecvType::HCCL_SEND,
        buf: a.sendBuf as usize,
        count: a.count,
        dtype: a.dataType,
        peer: a.destRank,
    };
    send_recv(a.comm, a.stream, item, "HcclSend")
}

/// `HcclRecv`: receives `count` elements from `srcRank`'s matching `HcclSend`.
pub(super) fn HcclRecv(a: args::HcclRecv) -> HcclRes {
    let item = p2p::Item {
        kind: HcclSendRecvType::HCCL_RECV,
        buf: a.recvBuf as usize,
        count: a.count,
        dtype: a.dataType,
        peer: a.srcRank,
    };
    send_recv(a.comm, a.stream, item, "HcclRecv")
}

/// `HcclSend` / `HcclRecv` (`name`) of `item`: queued now, or kept until `HcclGroupEnd`
/// inside a group ([`group`]).
fn send_recv(comm: HcclComm, stream: aclrtStream, item: p2p::Item, name: &'static str) -> HcclRes {
    let (comm, stream) = (CommHandle::from_c(comm), StreamHandle::from_c(stream));
    match group::is_open() {
        true => group::keep_send_recv(comm, stream, item),
        false => p2p::call(comm, stream, &[item], name),
    }
}

/// The most items one `HcclBatchSendRecv` takes: far more than any batch needs (a few per
/// peer), and few enough that copying them costs little. A larger count is a caller's
/// mistake (such as `UINT32_MAX` for "all"), refused before anything is read or allocated.
const MAX_BATCH_ITEMS: u32 = 1 << 20;

/// `HcclBatchSendRecv`: every item progresses at once on the stream; items of one pair run
/// in order. `itemNum` 0 does nothing.
///
/// # Safety
/// `HcclBatchSendRecv`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcclBatchSendRecv(a: args::HcclBatchSendRecv) -> HcclRes {
    if group::is_open() {
        return group::refuse_batch();
    }
    non_null(a.sendRecvInfo, "sendRecvInfo")?;
    if a.itemNum > MAX_BATCH_ITEMS {
        return hccl_fail(
            crate::sys::HcclResult::HCCL_E_PARA,
            format!(
                "itemNum {} is above the {MAX_BATCH_ITEMS} items a batch may hold",
                a.itemNum
            ),
        );
    }
    // SAFETY: non-null; the caller promises `itemNum` items.
    let raw = unsafe { std::slice::from_raw_parts(a.sendRecvInfo, a.itemNum as usize) };
    let items: Vec<p2p::Item> = raw
        .iter()
        .map(|it| p2p::Item {
            kind: it.sendRecvType,
            buf: it.buf as usize,
            count: it.count,
            dtype: it.dataType,
            peer: it.remoteRank,
        })
        .collect();
    p2p::call(
        CommHandle::from_c(a.comm),
        StreamHandle::from_c(a.stream),
        &items,
        "HcclBatchSendRecv",
    )
}

/// `HcommMemAlloc` (libhcomm; its `HcommResult` is an `int32_t` of HCCL's codes): mapped
/// device memory for windows (see [`hcomm_mem`]).
///
/// # Safety
/// `HcommMemAlloc`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn HcommMemAlloc(a: args::HcommMemAlloc) -> HcclRes {
    if a.ptr.is_null() {
        // The documented code for a NULL `ptr`, unlike HCCL's usual HCCL_E_PTR.
        return crate::base::errors::para("ptr is NULL");
    }
    let addr = hcomm_mem::alloc(a.size)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.ptr, addr as *mut c_void, "ptr") }
}

/// `HcommMemFree`: frees `HcommMemAlloc` memory; NULL does nothing.
pub(super) fn HcommMemFree(a: args::HcommMemFree) -> HcclRes {
    hcomm_mem::free(a.ptr as usize)
}

/// `HcclCommSetMemoryRange`: records `[baseVirPtr, +size)`, a reserved range, on the
/// communicator (see [`memory_range`]).
pub(super) fn HcclCommSetMemoryRange(a: args::HcclCommSetMemoryRange) -> HcclRes {
    let c = comm::lookup(CommHandle::from_c(a.comm))?;
    let mut ranges = lock(&c.ranges);
    ranges.set(a.baseVirPtr as usize, a.size, a.alignment, a.flags)
}

/// `HcclCommUnsetMemoryRange`: forgets a range without activated blocks.
pub(super) fn HcclCommUnsetMemoryRange(a: args::HcclCommUnsetMemoryRange) -> HcclRes {
    let c = comm::lookup(CommHandle::from_c(a.comm))?;
    lock(&c.ranges).unset(a.baseVirPtr as usize)
}

/// `HcclCommActivateCommMemory`: records a mapped block inside a range.
pub(super) fn HcclCommActivateCommMemory(a: args::HcclCommActivateCommMemory) -> HcclRes {
    let c = comm::lookup(CommHandle::from_c(a.comm))?;
    let mut ranges = lock(&c.ranges);
    ranges.activate(
        a.virPtr as usize,
        a.size,
        a.offset,
        PhysicalHandle::from_c(a.handle),
        a.flags,
    )
}

/// `HcclCommDeactivateCommMemory`: forgets an activated block.
pub(super) fn HcclCommDeactivateCommMemory(a: args::HcclCommDeactivateCommMemory) -> HcclRes {
    let c = comm::lookup(CommHandle::from_c(a.comm))?;
    lock(&c.ranges).deactivate(a.virPtr as usize)
}

/// The bytes of the NUL-terminated string at `ptr` before its NUL, reading at most `max`
/// bytes, and whether its NUL was among them (when not, the `max` bytes read).
///
/// # Safety
/// `ptr` is non-null and its bytes are readable up to its first NUL or its `max`th byte,
/// whichever comes first (a C string's contract).
unsafe fn c_string(ptr: *const c_char, max: usize) -> (Vec<u8>, bool) {
    let mut bytes = Vec::new();
    while bytes.len() < max {
        // SAFETY: the caller's contract; the loop reads no byte past the first NUL.
        let byte = unsafe { ptr.add(bytes.len()).read() } as u8;
        if byte == 0 {
            return (bytes, true);
        }
        bytes.push(byte);
    }
    (bytes, false)
}

// Grouped calls, communicators by name, the process-wide configuration, and peers' addresses
// in a window.

/// `HcclGroupStart`: opens a group on the calling thread (or nests one more level); see
/// [`group`].
pub(super) fn HcclGroupStart(_: args::HcclGroupStart) -> HcclRes {
    group::start()
}

/// `HcclGroupEnd`: closes a level; the outermost issues what the group kept and returns its
/// first failure. Without a group, `HCCL_E_NOT_SUPPORT`.
pub(super) fn HcclGroupEnd(_: args::HcclGroupEnd) -> HcclRes {
    group::end()
}

/// `HcclGroupStatusGet`: whether the calling thread is inside a group.
///
/// # Safety
/// `HcclGroupStatusGet`'s contract: its pointer argument is null or valid for writing a `bool`.
pub(super) unsafe fn HcclGroupStatusGet(a: args::HcclGroupStatusGet) -> HcclRes {
    // SAFETY: the caller's contract.
    unsafe { put(a.isGroupEnabled, group::is_open(), "isGroupEnabled") }
}

/// `HcclCommGetHandleWithName`: the communicator `HcclGetCommName` names `commName`, on the
/// calling thread's device (see [`comm::with_name`]); none is `HCCL_E_PARA`.
///
/// # Safety
/// `HcclCommGetHandleWithName`'s contract: `commName` is null or a NUL-terminated string (read
/// up to its NUL, at most `COMM_NAME_MAX_LENGTH` bytes), `comm` null or valid for writing.
pub(super) unsafe fn HcclCommGetHandleWithName(a: args::HcclCommGetHandleWithName) -> HcclRes {
    non_null(a.commName, "commName")?;
    non_null(a.comm, "comm")?;
    // SAFETY: the caller's contract: a NUL-terminated string.
    let (name, terminated) = unsafe { c_string(a.commName, COMM_NAME_MAX_LENGTH) };
    if !terminated {
        return crate::base::errors::para(format!(
            "commName has no NUL in its first {COMM_NAME_MAX_LENGTH} bytes: a communicator's \
             name is at most {} bytes",
            COMM_NAME_MAX_LENGTH - 1
        ));
    }
    let device = crate::acl::device::current().ok();
    let Some(found) = comm::with_name(&name, device) else {
        let on = device.map_or_else(|| "in this process".to_owned(), |d| format!("on {d}"));
        return crate::base::errors::para(format!(
            "no live communicator {on} is named {:?}",
            String::from_utf8_lossy(&name)
        ));
    };
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.comm, found.to_c(), "comm") }
}

/// `HcclSetConfig`: sets a process-wide setting (`HCCL_DETERMINISTIC`; see
/// [`crate::hccl::config`]).
pub(super) fn HcclSetConfig(a: args::HcclSetConfig) -> HcclRes {
    crate::hccl::config::set(a.config, a.configValue.value)
}

/// `HcclGetConfig`: reads a process-wide setting; a config HCCL does not answer leaves
/// `configValue` as it was.
///
/// # Safety
/// `HcclGetConfig`'s contract: `configValue` is null or valid for writing.
pub(super) unsafe fn HcclGetConfig(a: args::HcclGetConfig) -> HcclRes {
    non_null(a.configValue, "configValue")?;
    match crate::hccl::config::get(a.config) {
        // SAFETY: the caller's contract; checked non-null above.
        Some(value) => unsafe { put(a.configValue, HcclConfigValue { value }, "configValue") },
        None => Ok(()),
    }
}

/// `HcclSymWinGetPeerPointer`: where `peerRank`'s byte `offset` of the window is in this
/// rank's heap; device-side, so only from a host function on a stream (see
/// [`crate::hccl::peer_pointer`]).
///
/// # Safety
/// `HcclSymWinGetPeerPointer`'s contract: `ptr` is null or valid for writing.
pub(super) unsafe fn HcclSymWinGetPeerPointer(a: args::HcclSymWinGetPeerPointer) -> HcclRes {
    non_null(a.winHandle, "winHandle")?;
    non_null(a.ptr, "ptr")?;
    let addr = crate::hccl::peer_pointer::peer_pointer(
        WindowHandle::from_c(a.winHandle),
        a.offset,
        a.peerRank,
    )?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.ptr, addr as *mut c_void, "ptr") }
}

// Rank tables.

/// The shared body of both rank-table init calls, in CANN's order: the device, then
/// `clusterInfo`, `comm` and `config` non-NULL (`HCCL_E_PTR`).
///
/// # Safety
/// Non-null pointers are valid as in `HcclCommInitClusterInfoConfig`: `cluster_info` a
/// NUL-terminated string, `config` a config struct of its stated size, `comm` writable.
unsafe fn init_cluster_info(
    cluster_info: *const c_char,
    rank: u32,
    config: Option<*const HcclCommConfig>,
    comm: *mut HcclComm,
) -> HcclRes {
    if let Err(e) = crate::acl::device::current() {
        return hccl_fail(crate::sys::HcclResult::HCCL_E_RUNTIME, e.msg);
    }
    non_null(cluster_info, "clusterInfo")?;
    non_null(comm, "comm")?;
    let config = match config {
        Some(ptr) => {
            non_null(ptr, "config")?;
            // SAFETY: non-null; the caller promises a config struct of its stated size.
            unsafe { comm::read_config(ptr) }?
        }
        None => HcclCommConfig::init(),
    };
    // The path up to its NUL, read no further than `cluster_info::PATH_MAX_BYTES` bytes: a
    // longer string is read only as far as it is refused.
    // SAFETY: the caller's contract: a NUL-terminated string.
    let (path, _) = unsafe { c_string(cluster_info, cluster_info::PATH_MAX_BYTES) };
    let handle = cluster_info::init(&path, rank, &config)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(comm, handle.to_c(), "comm") }
}

/// `HcclCommInitClusterInfo`: joins the communicator of every rank of the rank-table file
/// `clusterInfo`, as rank `rank`, with the default config.
///
/// # Safety
/// As [`init_cluster_info`].
pub(super) unsafe fn HcclCommInitClusterInfo(a: args::HcclCommInitClusterInfo) -> HcclRes {
    // SAFETY: the caller's contract.
    unsafe { init_cluster_info(a.clusterInfo, a.rank, None, a.comm) }
}

/// `HcclCommInitClusterInfoConfig`: [`HcclCommInitClusterInfo`] with a config.
///
/// # Safety
/// As [`init_cluster_info`].
pub(super) unsafe fn HcclCommInitClusterInfoConfig(
    a: args::HcclCommInitClusterInfoConfig,
) -> HcclRes {
    // SAFETY: the caller's contract.
    unsafe { init_cluster_info(a.clusterInfo, a.rank, Some(a.config.cast_const()), a.comm) }
}

// What CANN's HCCL test tool calls.

/// `HcclGetCommConfigCapability`: `HCCL_COMM_CONFIG_RESERVED` (12), as hcomm's op_base.cc
/// answers: every `HcclCommConfig` field before it is accepted at init.
pub(super) fn HcclGetCommConfigCapability(_: args::HcclGetCommConfigCapability) -> u32 {
    HCCL_COMM_CONFIG_RESERVED
}

/// `HCCL_COMM_CONFIG_RESERVED`: the last value of `HcclCommConfigCapability`.
const HCCL_COMM_CONFIG_RESERVED: u32 = 12;

// Topology: the rank graph, as HCCL builds it for an Atlas A3 (layer 0 the rank's node,
// 1 its SuperPoD when there are several nodes, 2 every rank when there are several
// SuperPoDs: `crate::hccl::topology`). The lists returned live in the communicator, as
// HCCL's do ("managed by the library, the caller must not free them"), until it is destroyed.

/// The layer `net_layer` of `c`'s rank graph, or `HCCL_E_PARA` (hicann/hcomm
/// `rank_graph.cc`, `RankGraphV1::GetInstSizeByNetLayer` & co.).
fn layer(c: &comm::Comm, net_layer: u32) -> HcclRes<&crate::hccl::topology::Layer> {
    let layers = &c.topology.layers;
    layers.get(net_layer as usize).map_or_else(
        || {
            crate::base::errors::para(format!(
                "netLayer {net_layer} is not a layer of this communicator (its layers are \
                 0..{})",
                layers.len()
            ))
        },
        Ok,
    )
}

/// `HcclRankGraphGetLayers`: the layer numbers of the communicator's rank graph.
///
/// # Safety
/// `HcclRankGraphGetLayers`'s contract: its pointer arguments are null or valid for what it
/// writes through them.
pub(super) unsafe fn HcclRankGraphGetLayers(a: args::HcclRankGraphGetLayers) -> HcclRes {
    let c = comm::lookup(CommHandle::from_c(a.comm))?;
    non_null(a.netLayers, "netLayers")?;
    non_null(a.netLayerNum, "netLayerNum")?;
    let ids = &c.topology.layer_ids;
    // SAFETY: the caller's contract; both checked non-null above. The list lives as long as
    // the communicator (HCCL's contract for it).
    unsafe {
        put(a.netLayers, ids.as_ptr().cast_mut(), "netLayers")?;
        put(a.netLayerNum, ids.len() as u32, "netLayerNum")
    }
}

/// `HcclRankGraphGetRankSizeByLayer`: how many ranks the calling rank's instance of the
/// layer has (its node, its SuperPoD, or every rank).
///
/// # Safety
/// `HcclRankGraphGetRankSizeByLayer`'s contract: its pointer argument is null or valid for
/// writing.
pub(super) unsafe fn HcclRankGraphGetRankSizeByLayer(
    a: args::HcclRankGraphGetRankSizeByLayer,
) -> HcclRes {
    let c = comm::lookup(CommHandle::from_c(a.comm))?;
    non_null(a.rankNum, "rankNum")?;
    let size = layer(&c, a.netLayer)?.ranks.len() as u32;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.rankNum, size, "rankNum") }
}

/// `HcclRankGraphGetRanksByLayer`: the ranks of the calling rank's instance of the layer.
///
/// # Safety
/// `HcclRankGraphGetRanksByLayer`'s contract: its pointer arguments are null or valid for
/// what it writes through them.
pub(super) unsafe fn HcclRankGraphGetRanksByLayer(
    a: args::HcclRankGraphGetRanksByLayer,
) -> HcclRes {
    let c = comm::lookup(CommHandle::from_c(a.comm))?;
    non_null(a.ranks, "ranks")?;
    non_null(a.rankNum, "rankNum")?;
    let ranks = &layer(&c, a.netLayer)?.ranks;
    // SAFETY: the caller's contract; both checked non-null above. The list lives as long as
    // the communicator.
    unsafe {
        put(a.ranks, ranks.as_ptr().cast_mut(), "ranks")?;
        put(a.rankNum, ranks.len() as u32, "rankNum")
    }
}

/// `HcclRankGraphGetInstSizeListByLayer`: the rank count of every instance of the layer (each
/// node, each SuperPoD, or all ranks), in the order of their indices.
///
/// # Safety
/// `HcclRankGraphGetInstSizeListByLayer`'s contract: its pointer arguments are null or valid
/// for what it writes through them.
pub(super) unsafe fn HcclRankGraphGetInstSizeListByLayer(
    a: args::HcclRankGraphGetInstSizeListByLayer,
) -> HcclRes {
    let c = comm::lookup(CommHandle::from_c(a.comm))?;
    non_null(a.instSizeList, "instSizeList")?;
    non_null(a.listSize, "listSize")?;
    let sizes = &layer(&c, a.netLayer)?.instance_sizes;
    // SAFETY: the caller's contract; both checked non-null above. The list lives as long as
    // the communicator.
    unsafe {
        put(a.instSizeList, sizes.as_ptr().cast_mut(), "instSizeList")?;
        put(a.listSize, sizes.len() as u32, "listSize")
    }
}
