//! The bodies of the ACL runtime's C functions (`libascendcl.so`). The exported functions that
//! run them are generated from the list in `symheap-sys` (see [`crate::abi::exports`] and
//! [`crate::abi::args`]).
//!
//! NULL pointer arguments (out-pointers, addresses, handles other than streams) are
//! `ACL_ERROR_INVALID_PARAM` (100000), as CANN's `ACL_REQUIRES_NOT_NULL` checks make them;
//! other bad values keep the runtime's codes (`ACL_ERROR_RT_PARAM_INVALID`, 107000, and
//! others). A body that reads or writes through the caller's pointers is an
//! `unsafe fn` whose `# Safety` is the C function's contract (host pointers are null or valid
//! for what the C function reads or writes through them); every other body is a safe
//! function. Device ranges and handles are validated, never trusted.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_void};

use crate::sys::aclrtMemGranularityOptions;

use crate::GRANULARITY;
use crate::abi::args;
use crate::acl::graph;
use crate::acl::profiling;
use crate::base::errors::{self, AclResult, param, take_recent};
use crate::base::handle::{EventHandle, ModelHandle, PhysicalHandle, StreamHandle};
use crate::{
    acl::copy, acl::device, acl::event, acl::host, acl::init, acl::memory, acl::node, acl::stream,
};

/// Writes `value` through the C out-pointer `out`, which must not be null.
///
/// # Safety
/// `out` is null or valid for writing one `T` (the C caller's contract).
unsafe fn put<T>(out: *mut T, value: T, what: &str) -> AclResult {
    non_null(out, what)?;
    // SAFETY: non-null, and valid for writes by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Fails with `ACL_ERROR_INVALID_PARAM` on a NULL pointer argument.
fn non_null<T>(ptr: *const T, what: &str) -> AclResult {
    errors::acl_non_null(ptr as usize, what)
}

/// `aclInit`: `ACL_ERROR_REPEAT_INITIALIZE` when already initialised, as CANN. The emulator
/// needs no initialisation: no other call depends on it.
pub(super) fn aclInit(_: args::aclInit) -> AclResult {
    // An unusable SYMHEAP_EMU_NODE or SYMHEAP_EMU_NODES_PER_SUPERPOD fails here, before the
    // first device is set, and changes nothing.
    node::check_environment()?;
    init::PROCESS.init()
}

/// `aclFinalize`: `ACL_ERROR_REPEAT_FINALIZE` when already finalised; live objects stay
/// usable.
pub(super) fn aclFinalize(_: args::aclFinalize) -> AclResult {
    init::PROCESS.finalize()
}

/// `aclrtSetDevice`: binds the calling thread to device `device_id` (`0..count`, see
/// `aclrtGetDeviceCount`).
pub(super) fn aclrtSetDevice(a: args::aclrtSetDevice) -> AclResult {
    device::set(a.deviceId)
}

/// `aclrtGetDevice`: the calling thread's device; `ACL_ERROR_RT_CONTEXT_NULL` (107002) when
/// none is set.
///
/// # Safety
/// `aclrtGetDevice`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtGetDevice(a: args::aclrtGetDevice) -> AclResult {
    non_null(a.deviceId, "deviceId")?;
    let id = device::current()?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.deviceId, id.id as i32, "deviceId") }
}

/// `aclrtResetDevice`: unbinds the calling thread if it is bound to `device_id`.
pub(super) fn aclrtResetDevice(a: args::aclrtResetDevice) -> AclResult {
    device::reset(a.deviceId)
}

/// `aclrtCreateStream`: a stream with its own thread; needs a current device.
///
/// # Safety
/// `aclrtCreateStream`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtCreateStream(a: args::aclrtCreateStream) -> AclResult {
    non_null(a.stream, "stream")?;
    let handle = stream::create()?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.stream, handle.to_c(), "stream") }
}

/// `aclrtDestroyStream`: runs the queued work, then stops the stream's thread.
pub(super) fn aclrtDestroyStream(a: args::aclrtDestroyStream) -> AclResult {
    stream::destroy(StreamHandle::from_c(a.stream))
}

/// `aclrtSynchronizeStream`: waits for the queued work; returns and clears a task failure
/// (`ACL_ERROR_RT_INTERNAL_ERROR` for a failed collective, detail in `aclGetRecentErrMsg`).
pub(super) fn aclrtSynchronizeStream(a: args::aclrtSynchronizeStream) -> AclResult {
    stream::synchronize(StreamHandle::from_c(a.stream))
}

/// `aclrtSynchronizeStreamWithTimeout`: [`aclrtSynchronizeStream`], for at most `timeout`
/// ms (-1: no limit).
pub(super) fn aclrtSynchronizeStreamWithTimeout(
    a: args::aclrtSynchronizeStreamWithTimeout,
) -> AclResult {
    let limit = stream::sync_timeout(a.timeout)?;
    stream::synchronize_within(StreamHandle::from_c(a.stream), limit)
}

/// `aclrtStreamQuery`: whether the stream has run everything queued on it.
///
/// # Safety
/// `aclrtStreamQuery`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtStreamQuery(a: args::aclrtStreamQuery) -> AclResult {
    non_null(a.status, "status")?;
    let status = match stream::query(StreamHandle::from_c(a.stream))? {
        true => crate::sys::aclrtStreamStatus::ACL_STREAM_STATUS_COMPLETE,
        false => crate::sys::aclrtStreamStatus::ACL_STREAM_STATUS_NOT_READY,
    };
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.status, status, "status") }
}

/// `aclrtSynchronizeDevice`: waits for every stream of the current device.
pub(super) fn aclrtSynchronizeDevice(_: args::aclrtSynchronizeDevice) -> AclResult {
    stream::synchronize_device(None)
}

/// `aclrtSynchronizeDeviceWithTimeout`: [`aclrtSynchronizeDevice`], for at most `timeout` ms
/// (-1: no limit).
pub(super) fn aclrtSynchronizeDeviceWithTimeout(
    a: args::aclrtSynchronizeDeviceWithTimeout,
) -> AclResult {
    stream::synchronize_device(stream::sync_timeout(a.timeout)?)
}

/// `aclrtMemcpy`: a synchronous copy on the calling thread.
///
/// # Safety
/// `aclrtMemcpy`'s contract: host memory at `dst` / `src` is valid for `count` bytes.
pub(super) unsafe fn aclrtMemcpy(a: args::aclrtMemcpy) -> AclResult {
    // SAFETY: the C caller's contract is `copy::memcpy`'s.
    unsafe { copy::memcpy(a.dst, a.destMax, a.src, a.count, a.kind) }
}

/// `aclrtMemcpyAsync`: a copy queued on `stream`.
///
/// # Safety
/// `aclrtMemcpyAsync`'s contract: host memory at `dst` / `src` is valid for `count` bytes
/// until the copy has run.
pub(super) unsafe fn aclrtMemcpyAsync(a: args::aclrtMemcpyAsync) -> AclResult {
    // SAFETY: the C caller's contract is `copy::memcpy_async`'s.
    unsafe {
        copy::memcpy_async(
            a.dst,
            a.destMax,
            a.src,
            a.count,
            a.kind,
            StreamHandle::from_c(a.stream),
        )
    }
}

/// `aclrtMemset`: fills device memory with the byte `value`, on the calling thread.
pub(super) fn aclrtMemset(a: args::aclrtMemset) -> AclResult {
    copy::memset(a.devPtr as usize, a.maxCount, a.value, a.count)
}

/// `aclrtMemsetAsync`: a fill queued on `stream`.
pub(super) fn aclrtMemsetAsync(a: args::aclrtMemsetAsync) -> AclResult {
    copy::memset_async(
        a.devPtr as usize,
        a.maxCount,
        a.value,
        a.count,
        StreamHandle::from_c(a.stream),
    )
}

/// `aclrtLaunchHostFunc`: `fn(args)` on the stream's thread when the stream reaches it.
///
/// # Safety
/// `aclrtLaunchHostFunc`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtLaunchHostFunc(a: args::aclrtLaunchHostFunc) -> AclResult {
    // SAFETY: the caller's contract for a host function.
    unsafe {
        crate::acl::host_func::launch_host_func(
            StreamHandle::from_c(a.stream),
            a.fn_,
            a.args as usize,
        )
    }
}

/// `aclrtCreateEventExWithFlag`: an event with flags (`ACL_EVENT_SYNC` makes it usable in
/// captures).
///
/// # Safety
/// `aclrtCreateEventExWithFlag`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtCreateEventExWithFlag(a: args::aclrtCreateEventExWithFlag) -> AclResult {
    non_null(a.event, "event")?;
    let handle = crate::acl::event::create_ex(a.flag)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.event, handle.to_c(), "event") }
}

/// `aclmdlRICaptureBegin`: the stream's later work is captured, not run.
pub(super) fn aclmdlRICaptureBegin(a: args::aclmdlRICaptureBegin) -> AclResult {
    graph::begin(StreamHandle::from_c(a.stream), a.mode)
}

/// `aclmdlRICaptureGetInfo`: whether the stream captures, and into which model.
///
/// # Safety
/// `aclmdlRICaptureGetInfo`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclmdlRICaptureGetInfo(a: args::aclmdlRICaptureGetInfo) -> AclResult {
    if a.status.is_null() && a.modelRI.is_null() {
        return crate::base::errors::invalid("status and modelRI are both NULL");
    }
    let (status, model) = graph::info(StreamHandle::from_c(a.stream))?;
    // SAFETY: the caller's contract: each non-NULL pointer is writable.
    unsafe {
        if !a.status.is_null() {
            a.status.write(status);
        }
        if !a.modelRI.is_null() {
            a.modelRI.write(model.to_c());
        }
    }
    Ok(())
}

/// `aclmdlRICaptureEnd`: the capture's model, or why it failed (`*modelRI` is then NULL).
///
/// # Safety
/// `aclmdlRICaptureEnd`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclmdlRICaptureEnd(a: args::aclmdlRICaptureEnd) -> AclResult {
    if a.stream.is_null() {
        return crate::base::errors::invalid("stream is NULL");
    }
    if a.modelRI.is_null() {
        return crate::base::errors::param("modelRI is NULL");
    }
    let ended = graph::end(StreamHandle::from_c(a.stream));
    // SAFETY: non-null; the caller's contract.
    unsafe {
        a.modelRI
            .write(ended.as_ref().map_or(ModelHandle::NULL, |m| *m).to_c())
    };
    ended.map(drop)
}

/// `aclmdlRICaptureThreadExchangeMode`: swaps this thread's capture mode with `*mode`.
///
/// # Safety
/// `aclmdlRICaptureThreadExchangeMode`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclmdlRICaptureThreadExchangeMode(
    a: args::aclmdlRICaptureThreadExchangeMode,
) -> AclResult {
    non_null(a.mode, "mode")?;
    // SAFETY: non-null; the caller's contract.
    let old = graph::exchange_mode(unsafe { a.mode.read() })?;
    // SAFETY: as above.
    unsafe { put(a.mode, old, "mode") }
}

/// `aclmdlRIExecuteAsync`: one replay of the graph on the stream.
pub(super) fn aclmdlRIExecuteAsync(a: args::aclmdlRIExecuteAsync) -> AclResult {
    graph::execute(
        ModelHandle::from_c(a.modelRI),
        StreamHandle::from_c(a.stream),
    )
}

/// `aclmdlRIDestroy`: once no replay runs (it waits up to 10 s for them).
pub(super) fn aclmdlRIDestroy(a: args::aclmdlRIDestroy) -> AclResult {
    graph::destroy(ModelHandle::from_c(a.modelRI))
}

/// `aclrtGetMemInfo`: free and total physical memory of the current device (any attribute).
///
/// # Safety
/// `aclrtGetMemInfo`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtGetMemInfo(a: args::aclrtGetMemInfo) -> AclResult {
    non_null(a.free, "free")?;
    non_null(a.total, "total")?;
    let (f, t) = memory::mem_info(device::current()?);
    let clamp = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    // SAFETY: the caller's contract; both checked non-null above.
    unsafe {
        put(a.free, clamp(f), "free")?;
        put(a.total, clamp(t), "total")
    }
}

/// `aclrtReserveMemAddress`: reserves device address space (host `mmap` PROT_NONE). `size`
/// must be a non-zero multiple of 2 MiB, `alignment` 0 or a power of two, `expectPtr` NULL,
/// `flags` 0 or 1.
///
/// # Safety
/// `aclrtReserveMemAddress`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtReserveMemAddress(a: args::aclrtReserveMemAddress) -> AclResult {
    non_null(a.virPtr, "virPtr")?;
    let addr = memory::reserve(a.size, a.alignment, a.expectPtr as usize, a.flags)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.virPtr, addr as *mut c_void, "virPtr") }
}

/// `aclrtReleaseMemAddress`: releases a reservation that has no mappings left.
pub(super) fn aclrtReleaseMemAddress(a: args::aclrtReleaseMemAddress) -> AclResult {
    non_null(a.virPtr, "virPtr")?;
    memory::release(a.virPtr as usize)
}

/// `aclrtMallocPhysical`: a memfd of `size` bytes on the device named by `prop`.
///
/// # Safety
/// `aclrtMallocPhysical`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtMallocPhysical(a: args::aclrtMallocPhysical) -> AclResult {
    non_null(a.handle, "handle")?;
    non_null(a.prop, "prop")?;
    // SAFETY: non-null, and points to a property struct by the caller's contract.
    let prop = unsafe { a.prop.read_unaligned() };
    let h = memory::malloc_physical(a.size, &prop, a.flags)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.handle, h.to_c(), "handle") }
}

/// `aclrtFreePhysical`: fails while the allocation is mapped or registered in a window.
pub(super) fn aclrtFreePhysical(a: args::aclrtFreePhysical) -> AclResult {
    non_null(a.handle, "handle")?;
    memory::free_physical(PhysicalHandle::from_c(a.handle))
}

/// `aclrtMapMem`: maps `[offset, offset + size)` of `handle` at `vir_ptr`, inside a
/// reservation and over nothing already mapped.
pub(super) fn aclrtMapMem(a: args::aclrtMapMem) -> AclResult {
    non_null(a.virPtr, "virPtr")?;
    non_null(a.handle, "handle")?;
    memory::map(
        a.virPtr as usize,
        a.size,
        a.offset,
        PhysicalHandle::from_c(a.handle),
        a.flags,
    )
}

/// `aclrtUnmapMem`: `vir_ptr` must be the start of a mapping no queued work still uses.
pub(super) fn aclrtUnmapMem(a: args::aclrtUnmapMem) -> AclResult {
    non_null(a.virPtr, "virPtr")?;
    memory::unmap(a.virPtr as usize)
}

/// `aclrtMemGetAllocationGranularity`: 2 MiB for both options.
///
/// # Safety
/// `aclrtMemGetAllocationGranularity`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtMemGetAllocationGranularity(
    a: args::aclrtMemGetAllocationGranularity,
) -> AclResult {
    non_null(a.prop, "prop")?;
    if !matches!(
        a.option,
        aclrtMemGranularityOptions::ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM
            | aclrtMemGranularityOptions::ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED
    ) {
        return param(format!("unknown granularity option {}", a.option.0));
    }
    // SAFETY: the caller's contract; checked inside `put`.
    unsafe { put(a.granularity, GRANULARITY, "granularity") }
}

/// `aclGetRecentErrMsg`: the calling thread's most recent error message (from any emulated
/// ACL or HCCL call, or copied from a failed stream task by `aclrtSynchronizeStream`), or
/// NULL when there is none. Reading clears it; the string stays valid until the next call on
/// the same thread.
pub(super) fn aclGetRecentErrMsg(_: args::aclGetRecentErrMsg) -> *const c_char {
    take_recent()
}

/// `aclrtGetDeviceCount`: the emulator's device count (16, or `SYMHEAP_EMU_DEVICE_COUNT`).
///
/// # Safety
/// `aclrtGetDeviceCount`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtGetDeviceCount(a: args::aclrtGetDeviceCount) -> AclResult {
    // SAFETY: the caller's contract; checked inside `put`.
    unsafe { put(a.count, device::count(), "count") }
}

/// `aclrtGetSocName`: an Atlas A3 name, `"Ascend910_9391"` (a static string), whatever the
/// device.
pub(super) fn aclrtGetSocName(_: args::aclrtGetSocName) -> *const c_char {
    c"Ascend910_9391".as_ptr()
}

/// `aclrtSetDeviceSatMode`: the current device's overflow mode (only recorded: the emulator's
/// reductions give IEEE results in both modes); `SATURATION` (0) or `INFNAN` (1), anything
/// else `ACL_ERROR_RT_PARAM_INVALID`.
pub(super) fn aclrtSetDeviceSatMode(a: args::aclrtSetDeviceSatMode) -> AclResult {
    device::set_sat_mode(a.mode)
}

/// `aclrtGetDeviceSatMode`: the current device's overflow mode (`INFNAN` by default).
///
/// # Safety
/// `aclrtGetDeviceSatMode`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtGetDeviceSatMode(a: args::aclrtGetDeviceSatMode) -> AclResult {
    non_null(a.mode, "mode")?;
    let mode = device::sat_mode(device::current()?);
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.mode, mode, "mode") }
}

/// `aclrtSetStreamFailureMode`: `ACL_CONTINUE_ON_FAILURE` (0) or `ACL_STOP_ON_FAILURE` (1,
/// for the stream's whole device context; a NULL stream names the current device's).
pub(super) fn aclrtSetStreamFailureMode(a: args::aclrtSetStreamFailureMode) -> AclResult {
    stream::set_failure_mode(StreamHandle::from_c(a.stream), a.mode)
}

/// `aclrtMalloc`: `size` bytes of device memory on the current device, outside every
/// reservation. Every policy value is accepted (CANN treats unknown ones as the default).
///
/// # Safety
/// `aclrtMalloc`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtMalloc(a: args::aclrtMalloc) -> AclResult {
    non_null(a.devPtr, "devPtr")?;
    let addr = memory::malloc(device::current()?, a.size)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.devPtr, addr as *mut c_void, "devPtr") }
}

/// `aclrtFree`: frees an `aclrtMalloc` allocation without waiting for queued work.
pub(super) fn aclrtFree(a: args::aclrtFree) -> AclResult {
    non_null(a.devPtr, "devPtr")?;
    memory::free(a.devPtr as usize)
}

/// `aclrtMemGetAddressRange`: the allocation holding `ptr`, as its first address and size: a
/// user mapping (`aclrtMapMem`'s range) or `aclrtMalloc` memory (the size asked for). Host
/// memory, or a peer's memory in a symmetric heap, is not an allocation of this process.
///
/// # Safety
/// `aclrtMemGetAddressRange`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtMemGetAddressRange(a: args::aclrtMemGetAddressRange) -> AclResult {
    non_null(a.ptr, "ptr")?;
    non_null(a.pbase, "pbase")?;
    non_null(a.psize, "psize")?;
    let Some(alloc) = memory::allocation_at(a.ptr as usize) else {
        return param(format!(
            "{:#x} is not in device memory of this process (aclrtMalloc, or \
             aclrtReserveMemAddress + aclrtMallocPhysical + aclrtMapMem)",
            a.ptr as usize
        ));
    };
    let (base, size) = alloc.range();
    // SAFETY: the caller's contract; both checked non-null above.
    unsafe {
        put(a.pbase, base as *mut c_void, "pbase")?;
        put(a.psize, size, "psize")
    }
}

/// `aclrtMemRetainAllocationHandle`: the physical allocation behind `virPtr` (any address of
/// a user mapping or of `aclrtMalloc` memory), with one more handle reference: each retain
/// needs its own `aclrtFreePhysical` (hicann/runtime
/// `docs/zh/api_ref/11-04_virtual_memory_management.md`). HCCL retains one per window
/// registration and gives it back at deregistration (hicann/hcomm `symmetric_memory.cc`).
///
/// # Safety
/// `aclrtMemRetainAllocationHandle`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtMemRetainAllocationHandle(
    a: args::aclrtMemRetainAllocationHandle,
) -> AclResult {
    non_null(a.virPtr, "virPtr")?;
    non_null(a.handle, "handle")?;
    let handle = memory::retain(a.virPtr as usize)?;
    // SAFETY: the caller's contract; checked non-null above (so this write cannot fail and
    // leave the retain without its handle).
    unsafe { put(a.handle, handle.to_c(), "handle") }
}

/// `aclrtMallocHost`: `size` bytes of 64-byte aligned host memory.
///
/// # Safety
/// `aclrtMallocHost`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtMallocHost(a: args::aclrtMallocHost) -> AclResult {
    non_null(a.hostPtr, "hostPtr")?;
    let addr = host::malloc(a.size)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.hostPtr, addr as *mut c_void, "hostPtr") }
}

/// `aclrtFreeHost`: frees an `aclrtMallocHost` allocation.
pub(super) fn aclrtFreeHost(a: args::aclrtFreeHost) -> AclResult {
    non_null(a.hostPtr, "hostPtr")?;
    host::free(a.hostPtr as usize)
}

/// `aclrtCreateEvent`: an event on the current device.
///
/// # Safety
/// `aclrtCreateEvent`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtCreateEvent(a: args::aclrtCreateEvent) -> AclResult {
    non_null(a.event, "event")?;
    let handle = event::create()?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.event, handle.to_c(), "event") }
}

/// `aclrtRecordEvent`: a record queued on `stream`.
pub(super) fn aclrtRecordEvent(a: args::aclrtRecordEvent) -> AclResult {
    event::record(EventHandle::from_c(a.event), StreamHandle::from_c(a.stream))
}

/// `aclrtSynchronizeEvent`: waits for the event's latest record.
pub(super) fn aclrtSynchronizeEvent(a: args::aclrtSynchronizeEvent) -> AclResult {
    event::synchronize(EventHandle::from_c(a.event))
}

/// `aclrtStreamWaitEvent`: `stream` waits for the event's latest record (bounded).
pub(super) fn aclrtStreamWaitEvent(a: args::aclrtStreamWaitEvent) -> AclResult {
    event::stream_wait(StreamHandle::from_c(a.stream), EventHandle::from_c(a.event))
}

/// `aclrtQueryEventStatus`: whether the event's latest record ran.
///
/// # Safety
/// `aclrtQueryEventStatus`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtQueryEventStatus(a: args::aclrtQueryEventStatus) -> AclResult {
    non_null(a.event, "event")?;
    non_null(a.status, "status")?;
    let status = event::query(EventHandle::from_c(a.event))?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.status, status, "status") }
}

/// `aclrtEventElapsedTime`: milliseconds between two events' records.
///
/// # Safety
/// `aclrtEventElapsedTime`'s contract: its pointer arguments are null or valid for what it reads or
/// writes through them.
pub(super) unsafe fn aclrtEventElapsedTime(a: args::aclrtEventElapsedTime) -> AclResult {
    non_null(a.ms, "ms")?;
    non_null(a.startEvent, "startEvent")?;
    non_null(a.endEvent, "endEvent")?;
    let ms = event::elapsed_ms(
        EventHandle::from_c(a.startEvent),
        EventHandle::from_c(a.endEvent),
    )?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.ms, ms, "ms") }
}

/// `aclrtDestroyEvent`: forgets the event at once, also while its record is pending.
pub(super) fn aclrtDestroyEvent(a: args::aclrtDestroyEvent) -> AclResult {
    event::destroy(EventHandle::from_c(a.event))
}

// Events with flags, and the profiling API of `libmsprofiler.so`
// (`acl/acl_prof.h`), which collects nothing (see `acl::profiling`).

/// `aclrtCreateEventWithFlag`: an event with flags, reusable without a reset.
///
/// # Safety
/// `aclrtCreateEventWithFlag`'s contract: its pointer arguments are null or valid for what it
/// reads or writes through them.
pub(super) unsafe fn aclrtCreateEventWithFlag(a: args::aclrtCreateEventWithFlag) -> AclResult {
    non_null(a.event, "event")?;
    let handle = event::create_with_flag(a.flag)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.event, handle.to_c(), "event") }
}

/// `aclrtResetEvent`: a task on `stream` that returns the event to never recorded.
pub(super) fn aclrtResetEvent(a: args::aclrtResetEvent) -> AclResult {
    event::reset(EventHandle::from_c(a.event), StreamHandle::from_c(a.stream))
}

/// `aclprofInit`: profiling initialized (nothing is written to the path).
///
/// # Safety
/// `aclprofInit`'s contract: `profilerResultPath` is null or valid for reading `length` bytes.
pub(super) unsafe fn aclprofInit(a: args::aclprofInit) -> AclResult {
    // SAFETY: the caller's contract.
    unsafe { profiling::init(a.profilerResultPath.cast(), a.length) }
}

/// `aclprofFinalize`: profiling off.
pub(super) fn aclprofFinalize(_: args::aclprofFinalize) -> AclResult {
    profiling::finalize()
}

/// `aclprofCreateConfig`: a configuration handle, or NULL (with the reason as the recent error
/// message) for a configuration msprofiler refuses.
///
/// # Safety
/// `aclprofCreateConfig`'s contract: `deviceIdList` is null or valid for reading `deviceNums`
/// ids.
pub(super) unsafe fn aclprofCreateConfig(a: args::aclprofCreateConfig) -> AclResult<*mut c_void> {
    let n = a.deviceNums as usize;
    let devices = if n == 0 {
        &[][..]
    } else {
        non_null(a.deviceIdList, "deviceIdList")?;
        if n > profiling::MAX_DEVICE_IDS {
            return errors::invalid(format!(
                "deviceNums {n} is more than {}",
                profiling::MAX_DEVICE_IDS
            ));
        }
        // SAFETY: the caller's contract: `deviceNums` readable ids; checked non-null above.
        unsafe { std::slice::from_raw_parts(a.deviceIdList, n) }
    };
    let handle = profiling::create_config(devices, !a.aicoreEvents.is_null(), a.dataTypeConfig)?;
    Ok(handle as *mut c_void)
}

/// `aclprofDestroyConfig`: forgets a configuration.
pub(super) fn aclprofDestroyConfig(a: args::aclprofDestroyConfig) -> AclResult {
    profiling::destroy_config(a.profilerConfig as usize)
}

/// `aclprofStart`: a profiling run (collecting nothing).
pub(super) fn aclprofStart(a: args::aclprofStart) -> AclResult {
    profiling::start(a.profilerConfig as usize)
}

/// `aclprofStop`: ends the profiling run.
pub(super) fn aclprofStop(a: args::aclprofStop) -> AclResult {
    profiling::stop(a.profilerConfig as usize)
}

/// `aclprofSetConfig`: a known setting with its value (without effect).
///
/// # Safety
/// `aclprofSetConfig`'s contract: `config` is null or a string of `configLength` bytes and
/// its NUL.
pub(super) unsafe fn aclprofSetConfig(a: args::aclprofSetConfig) -> AclResult {
    let value = (!a.config.is_null()).then(|| {
        let bound = a.configLength.saturating_add(1);
        // SAFETY: the caller's contract: the string's bytes up to its NUL are readable; the
        // loop stops at the first NUL, or after `configLength + 1` bytes (which a string of
        // the stated length ends within).
        let nul = (0..bound).find(|&i| unsafe { a.config.add(i).read() } == 0);
        nul.map_or(profiling::ConfigLength::Longer, profiling::ConfigLength::Is)
    });
    profiling::set_config(a.configType, value, a.configLength)
}
