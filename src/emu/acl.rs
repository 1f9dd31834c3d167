//! The bodies of the ACL runtime's C functions (`libascendcl.so`). The exported functions that
//! run them are generated from the list in `sys` (see [`super::exports`]).
//!
//! Null out-pointers are `ACL_ERROR_RT_PARAM_INVALID`. Every body has the C function's contract
//! as its `# Safety`: host pointers are null or valid for what the C function reads or writes
//! through them; device ranges and handles are validated, never trusted.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_void};

use crate::sys::{
    aclrtDrvMemHandle, aclrtMemAttr, aclrtMemGranularityOptions, aclrtMemcpyKind,
    aclrtPhysicalMemProp, aclrtStream,
};

use super::GRANULARITY;
use super::errors::{AclResult, param, take_recent};
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
pub(super) unsafe fn aclInit(_config_path: *const c_char) -> AclResult {
    Ok(())
}

/// `aclFinalize`: succeeds; live objects stay usable.
pub(super) unsafe fn aclFinalize() -> AclResult {
    Ok(())
}

/// `aclrtSetDevice`: binds the calling thread to device `device_id` (0..64).
pub(super) unsafe fn aclrtSetDevice(device_id: i32) -> AclResult {
    device::set(device_id)
}

/// `aclrtGetDevice`: the calling thread's device; `ACL_ERROR_RT_CONTEXT_NULL` (107002) when
/// none is set.
pub(super) unsafe fn aclrtGetDevice(device_id: *mut i32) -> AclResult {
    non_null(device_id, "deviceId")?;
    let id = device::current()?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(device_id, id as i32, "deviceId") }
}

/// `aclrtResetDevice`: unbinds the calling thread if it is bound to `device_id`.
pub(super) unsafe fn aclrtResetDevice(device_id: i32) -> AclResult {
    device::reset(device_id)
}

/// `aclrtCreateStream`: a stream with its own thread; needs a current device.
pub(super) unsafe fn aclrtCreateStream(stream: *mut aclrtStream) -> AclResult {
    non_null(stream, "stream")?;
    let handle = stream::create()?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(stream, handle as aclrtStream, "stream") }
}

/// `aclrtDestroyStream`: runs the queued work, then stops the stream's thread.
pub(super) unsafe fn aclrtDestroyStream(stream: aclrtStream) -> AclResult {
    stream::destroy(stream as usize)
}

/// `aclrtSynchronizeStream`: waits for the queued work; returns and clears a task failure
/// (`ACL_ERROR_RT_INTERNAL_ERROR` for a failed collective, detail in `aclGetRecentErrMsg`).
pub(super) unsafe fn aclrtSynchronizeStream(stream: aclrtStream) -> AclResult {
    stream::synchronize(stream as usize)
}

/// `aclrtMemcpy`: a synchronous copy on the calling thread.
pub(super) unsafe fn aclrtMemcpy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
) -> AclResult {
    copy::memcpy(dst as usize, dest_max, src as usize, count, kind)
}

/// `aclrtMemcpyAsync`: a copy queued on `stream`.
pub(super) unsafe fn aclrtMemcpyAsync(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
    stream: aclrtStream,
) -> AclResult {
    copy::memcpy_async(
        dst as usize,
        dest_max,
        src as usize,
        count,
        kind,
        stream as usize,
    )
}

/// `aclrtMemset`: fills device memory with the byte `value`, on the calling thread.
pub(super) unsafe fn aclrtMemset(
    dev_ptr: *mut c_void,
    max_count: usize,
    value: i32,
    count: usize,
) -> AclResult {
    copy::memset(dev_ptr as usize, max_count, value, count)
}

/// `aclrtMemsetAsync`: a fill queued on `stream`.
pub(super) unsafe fn aclrtMemsetAsync(
    dev_ptr: *mut c_void,
    max_count: usize,
    value: i32,
    count: usize,
    stream: aclrtStream,
) -> AclResult {
    copy::memset_async(dev_ptr as usize, max_count, value, count, stream as usize)
}

/// `aclrtGetMemInfo`: free and total physical memory of the current device (any attribute).
pub(super) unsafe fn aclrtGetMemInfo(
    _attr: aclrtMemAttr,
    free: *mut usize,
    total: *mut usize,
) -> AclResult {
    non_null(free, "free")?;
    non_null(total, "total")?;
    let (f, t) = memory::mem_info(device::current()?);
    let clamp = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    // SAFETY: the caller's contract; both checked non-null above.
    unsafe {
        put(free, clamp(f), "free")?;
        put(total, clamp(t), "total")
    }
}

/// `aclrtReserveMemAddress`: reserves device address space (host `mmap` PROT_NONE). `size`
/// must be a non-zero multiple of 2 MiB, `alignment` 0 or a power of two, `expectPtr` NULL,
/// `flags` 0 or 1.
pub(super) unsafe fn aclrtReserveMemAddress(
    vir_ptr: *mut *mut c_void,
    size: usize,
    alignment: usize,
    expect_ptr: *mut c_void,
    flags: u64,
) -> AclResult {
    non_null(vir_ptr, "virPtr")?;
    let addr = memory::reserve(size, alignment, expect_ptr as usize, flags)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(vir_ptr, addr as *mut c_void, "virPtr") }
}

/// `aclrtReleaseMemAddress`: releases a reservation that has no mappings left.
pub(super) unsafe fn aclrtReleaseMemAddress(vir_ptr: *mut c_void) -> AclResult {
    memory::release(vir_ptr as usize)
}

/// `aclrtMallocPhysical`: a memfd of `size` bytes on the device named by `prop`.
pub(super) unsafe fn aclrtMallocPhysical(
    handle: *mut aclrtDrvMemHandle,
    size: usize,
    prop: *const aclrtPhysicalMemProp,
    flags: u64,
) -> AclResult {
    non_null(handle, "handle")?;
    non_null(prop, "prop")?;
    // SAFETY: non-null, and points to a property struct by the caller's contract.
    let prop = unsafe { prop.read_unaligned() };
    let h = memory::malloc_physical(size, &prop, flags)?;
    // SAFETY: the caller's contract; checked non-null above.
    unsafe { put(handle, h as aclrtDrvMemHandle, "handle") }
}

/// `aclrtFreePhysical`: fails while the allocation is mapped or registered in a window.
pub(super) unsafe fn aclrtFreePhysical(handle: aclrtDrvMemHandle) -> AclResult {
    memory::free_physical(handle as usize)
}

/// `aclrtMapMem`: maps `[offset, offset + size)` of `handle` at `vir_ptr`, inside a
/// reservation and over nothing already mapped.
pub(super) unsafe fn aclrtMapMem(
    vir_ptr: *mut c_void,
    size: usize,
    offset: usize,
    handle: aclrtDrvMemHandle,
    flags: u64,
) -> AclResult {
    memory::map(vir_ptr as usize, size, offset, handle as usize, flags)
}

/// `aclrtUnmapMem`: `vir_ptr` must be the start of a mapping no queued work still uses.
pub(super) unsafe fn aclrtUnmapMem(vir_ptr: *mut c_void) -> AclResult {
    memory::unmap(vir_ptr as usize)
}

/// `aclrtMemGetAllocationGranularity`: 2 MiB for both options.
pub(super) unsafe fn aclrtMemGetAllocationGranularity(
    prop: *mut aclrtPhysicalMemProp,
    option: aclrtMemGranularityOptions,
    granularity: *mut usize,
) -> AclResult {
    non_null(prop, "prop")?;
    if !matches!(
        option,
        aclrtMemGranularityOptions::ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM
            | aclrtMemGranularityOptions::ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED
    ) {
        return param(format!("unknown granularity option {}", option.0));
    }
    // SAFETY: the caller's contract; checked inside `put`.
    unsafe { put(granularity, GRANULARITY, "granularity") }
}

/// `aclGetRecentErrMsg`: the calling thread's most recent error message (from any emulated
/// ACL or HCCL call, or copied from a failed stream task by `aclrtSynchronizeStream`), or
/// NULL when there is none. Reading clears it; the string stays valid until the next call on
/// the same thread.
pub(super) unsafe fn aclGetRecentErrMsg() -> *const c_char {
    take_recent()
}
