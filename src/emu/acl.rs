//! The bodies of the ACL runtime's C functions (`libascendcl.so`). The exported functions that
//! run them are generated from the list in `sys` (see [`super::exports`]).
//!
//! Null out-pointers are `ACL_ERROR_RT_PARAM_INVALID`. Every body has the C function's contract
//! as its `# Safety`: host pointers are null or valid for what the C function reads or writes
//! through them; device ranges and handles are validated, never trusted.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_void};

use crate::sys::{aclrtDrvMemHandle, aclrtMemGranularityOptions, aclrtStream};

use super::GRANULARITY;
use super::errors::{AclResult, param, take_recent};
use super::exports as args;
use super::{copy, device, memory, stream};

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

/// Fails on a null pointer argument.
fn non_null<T>(ptr: *const T, what: &str) -> AclResult {
    if ptr.is_null() {
        return param(format!("{what} is NULL"));
    }
    Ok(())
}

/// `aclInit`: always succeeds, also when called again (the emulator needs no initialisation;
/// it does not return `ACL_ERROR_REPEAT_INITIALIZE`).
pub(super) unsafe fn aclInit(_: args::aclInit) -> AclResult {
    Ok(())
}

/// `aclFinalize`: succeeds; live objects stay usable.
pub(super) unsafe fn aclFinalize(_: args::aclFinalize) -> AclResult {
    Ok(())
}

/// `aclrtSetDevice`: binds the calling thread to device `device_id` (0..64).
pub(super) unsafe fn aclrtSetDevice(a: args::aclrtSetDevice) -> AclResult {
    device::set(a.deviceId)
}

/// `aclrtGetDevice`: the calling thread's device; `ACL_ERROR_RT_CONTEXT_NULL` (107002) when
/// none is set.
pub(super) unsafe fn aclrtGetDevice(a: args::aclrtGetDevice) -> AclResult {
    non_null(a.deviceId, "deviceId")?;
    let id = device::current()?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.deviceId, id as i32, "deviceId") }
}

/// `aclrtResetDevice`: unbinds the calling thread if it is bound to `device_id`.
pub(super) unsafe fn aclrtResetDevice(a: args::aclrtResetDevice) -> AclResult {
    device::reset(a.deviceId)
}

/// `aclrtCreateStream`: a stream with its own thread; needs a current device.
pub(super) unsafe fn aclrtCreateStream(a: args::aclrtCreateStream) -> AclResult {
    non_null(a.stream, "stream")?;
    let handle = stream::create()?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.stream, handle as aclrtStream, "stream") }
}

/// `aclrtDestroyStream`: runs the queued work, then stops the stream's thread.
pub(super) unsafe fn aclrtDestroyStream(a: args::aclrtDestroyStream) -> AclResult {
    stream::destroy(a.stream as usize)
}

/// `aclrtSynchronizeStream`: waits for the queued work; returns and clears a task failure
/// (`ACL_ERROR_RT_INTERNAL_ERROR` for a failed collective, detail in `aclGetRecentErrMsg`).
pub(super) unsafe fn aclrtSynchronizeStream(a: args::aclrtSynchronizeStream) -> AclResult {
    stream::synchronize(a.stream as usize)
}

/// `aclrtMemcpy`: a synchronous copy on the calling thread.
pub(super) unsafe fn aclrtMemcpy(a: args::aclrtMemcpy) -> AclResult {
    copy::memcpy(a.dst as usize, a.destMax, a.src as usize, a.count, a.kind)
}

/// `aclrtMemcpyAsync`: a copy queued on `stream`.
pub(super) unsafe fn aclrtMemcpyAsync(a: args::aclrtMemcpyAsync) -> AclResult {
    copy::memcpy_async(
        a.dst as usize,
        a.destMax,
        a.src as usize,
        a.count,
        a.kind,
        a.stream as usize,
    )
}

/// `aclrtMemset`: fills device memory with the byte `value`, on the calling thread.
pub(super) unsafe fn aclrtMemset(a: args::aclrtMemset) -> AclResult {
    copy::memset(a.devPtr as usize, a.maxCount, a.value, a.count)
}

/// `aclrtMemsetAsync`: a fill queued on `stream`.
pub(super) unsafe fn aclrtMemsetAsync(a: args::aclrtMemsetAsync) -> AclResult {
    copy::memset_async(
        a.devPtr as usize,
        a.maxCount,
        a.value,
        a.count,
        a.stream as usize,
    )
}

/// `aclrtGetMemInfo`: free and total physical memory of the current device (any attribute).
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
pub(super) unsafe fn aclrtReserveMemAddress(a: args::aclrtReserveMemAddress) -> AclResult {
    non_null(a.virPtr, "virPtr")?;
    let addr = memory::reserve(a.size, a.alignment, a.expectPtr as usize, a.flags)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.virPtr, addr as *mut c_void, "virPtr") }
}

/// `aclrtReleaseMemAddress`: releases a reservation that has no mappings left.
pub(super) unsafe fn aclrtReleaseMemAddress(a: args::aclrtReleaseMemAddress) -> AclResult {
    memory::release(a.virPtr as usize)
}

/// `aclrtMallocPhysical`: a memfd of `size` bytes on the device named by `prop`.
pub(super) unsafe fn aclrtMallocPhysical(a: args::aclrtMallocPhysical) -> AclResult {
    non_null(a.handle, "handle")?;
    non_null(a.prop, "prop")?;
    // SAFETY: non-null, and points to a property struct by the caller's contract.
    let prop = unsafe { a.prop.read_unaligned() };
    let h = memory::malloc_physical(a.size, &prop, a.flags)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(a.handle, h as aclrtDrvMemHandle, "handle") }
}

/// `aclrtFreePhysical`: fails while the allocation is mapped or registered in a window.
pub(super) unsafe fn aclrtFreePhysical(a: args::aclrtFreePhysical) -> AclResult {
    memory::free_physical(a.handle as usize)
}

/// `aclrtMapMem`: maps `[offset, offset + size)` of `handle` at `vir_ptr`, inside a
/// reservation and over nothing already mapped.
pub(super) unsafe fn aclrtMapMem(a: args::aclrtMapMem) -> AclResult {
    memory::map(
        a.virPtr as usize,
        a.size,
        a.offset,
        a.handle as usize,
        a.flags,
    )
}

/// `aclrtUnmapMem`: `vir_ptr` must be the start of a mapping no queued work still uses.
pub(super) unsafe fn aclrtUnmapMem(a: args::aclrtUnmapMem) -> AclResult {
    memory::unmap(a.virPtr as usize)
}

/// `aclrtMemGetAllocationGranularity`: 2 MiB for both options.
pub(super) unsafe fn aclrtMemGetAllocationGranularity(
    a: args::aclrtMemGetAllocationGranularity,
) -> AclResult {
    non_null(a.prop, "prop")?;
    if !matches!(
        a.option,
        aclrtMemGranularityOptions::ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM
            | aclrtMemGranularityOptions::ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED
    ) {
        return param(format!("unknown a.granularity a.option {}", a.option.0));
    }
    // SAFETY: the caller's contract; checked inside `put`.
    unsafe { put(a.granularity, GRANULARITY, "granularity") }
}

/// `aclGetRecentErrMsg`: the calling thread's most recent error message (from any emulated
/// ACL or HCCL call, or copied from a failed stream task by `aclrtSynchronizeStream`), or
/// NULL when there is none. Reading clears it; the string stays valid until the next call on
/// the same thread.
pub(super) unsafe fn aclGetRecentErrMsg(_: args::aclGetRecentErrMsg) -> *const c_char {
    take_recent()
}

// TODO(issue 9): stubs until the bodies land.

/// `aclrtGetDeviceCount`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtGetDeviceCount(_: args::aclrtGetDeviceCount) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtGetDeviceCount is not emulated yet",
    )
}

/// `aclrtSetDeviceSatMode`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtSetDeviceSatMode(_: args::aclrtSetDeviceSatMode) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtSetDeviceSatMode is not emulated yet",
    )
}

/// `aclrtGetDeviceSatMode`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtGetDeviceSatMode(_: args::aclrtGetDeviceSatMode) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtGetDeviceSatMode is not emulated yet",
    )
}

/// `aclrtSetStreamFailureMode`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtSetStreamFailureMode(_: args::aclrtSetStreamFailureMode) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtSetStreamFailureMode is not emulated yet",
    )
}

/// `aclrtMalloc`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtMalloc(_: args::aclrtMalloc) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtMalloc is not emulated yet",
    )
}

/// `aclrtFree`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtFree(_: args::aclrtFree) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtFree is not emulated yet",
    )
}

/// `aclrtMallocHost`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtMallocHost(_: args::aclrtMallocHost) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtMallocHost is not emulated yet",
    )
}

/// `aclrtFreeHost`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtFreeHost(_: args::aclrtFreeHost) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtFreeHost is not emulated yet",
    )
}

/// `aclrtCreateEvent`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtCreateEvent(_: args::aclrtCreateEvent) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtCreateEvent is not emulated yet",
    )
}

/// `aclrtRecordEvent`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtRecordEvent(_: args::aclrtRecordEvent) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtRecordEvent is not emulated yet",
    )
}

/// `aclrtSynchronizeEvent`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtSynchronizeEvent(_: args::aclrtSynchronizeEvent) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtSynchronizeEvent is not emulated yet",
    )
}

/// `aclrtStreamWaitEvent`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtStreamWaitEvent(_: args::aclrtStreamWaitEvent) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtStreamWaitEvent is not emulated yet",
    )
}

/// `aclrtQueryEventStatus`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtQueryEventStatus(_: args::aclrtQueryEventStatus) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtQueryEventStatus is not emulated yet",
    )
}

/// `aclrtEventElapsedTime`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtEventElapsedTime(_: args::aclrtEventElapsedTime) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtEventElapsedTime is not emulated yet",
    )
}

/// `aclrtDestroyEvent`: not emulated yet (`ACL_ERROR_RT_FEATURE_NOT_SUPPORT`).
pub(super) unsafe fn aclrtDestroyEvent(_: args::aclrtDestroyEvent) -> AclResult {
    super::errors::acl_fail(
        crate::sys::ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
        "aclrtDestroyEvent is not emulated yet",
    )
}

/// `aclrtGetSocName`: not emulated yet (NULL).
pub(super) unsafe fn aclrtGetSocName(_: args::aclrtGetSocName) -> *const c_char {
    std::ptr::null()
}
