//! An emulator of the CANN C ABI (`libhccl.so` + `libascendcl.so`) over host memory, with
//! threads as ranks.
//!
//! It implements the same C functions and fills the same [`AclApi`] table as the real
//! libraries, so everything above [`crate::sys`] runs unchanged against it.
//!
//! # Model
//! - **Devices**: `aclrtSetDevice` binds the calling thread to a device id in `0..64`.
//! - **Device memory** is host memory managed like device virtual memory: a reservation is
//!   `mmap` PROT_NONE address space, physical memory a `memfd` of a multiple of
//!   [`GRANULARITY`], and `aclrtMapMem` maps one into the other with `MAP_FIXED`. Every
//!   device-addressable range is registered, and copies validate device-side ranges against
//!   the registry: a bad pointer is an error, never an access to arbitrary host memory.
//! - **Streams** are threads with a FIFO queue: async calls enqueue and return, and
//!   `aclrtSynchronizeStream` waits, so a host read before synchronizing can see stale data.
//!
//! # Choices where the reference is silent
//! - `aclInit` called again succeeds (no `ACL_ERROR_REPEAT_INITIALIZE`).
//! - `aclrtGetDevice`, `aclrtCreateStream` and `aclrtGetMemInfo` on a thread without a device:
//!   `ACL_ERROR_RT_CONTEXT_NULL` (107002). A device id outside `0..64`:
//!   `ACL_ERROR_RT_INVALID_DEVICEID` (107001). `aclrtResetDevice` unbinds the thread.
//! - Null pointer arguments of ACL calls: `ACL_ERROR_RT_PARAM_INVALID` (107000). There is no
//!   default stream: a NULL stream is 107000; an unknown stream or physical handle is
//!   `ACL_ERROR_RT_INVALID_HANDLE` (107017); an address that is not the start of a
//!   reservation or mapping is 107000.
//! - `aclrtReserveMemAddress` rejects a non-NULL `expectPtr` (107000) and flags other than
//!   0 or 1; reservations are aligned to at least the granularity.
//! - `aclrtMallocPhysical` needs `location.type == ACL_MEM_LOCATION_TYPE_DEVICE` and a device
//!   id in range (107000), `flags == 0`; beyond [`set_device_memory_limit`] it fails with
//!   `ACL_ERROR_RT_MEMORY_ALLOCATION` (207001). `memAttr` is not checked.
//! - `aclrtMapMem` needs a granularity-aligned address and offset; `aclrtUnmapMem` of a
//!   mapping that queued stream work still uses fails with 107000 (synchronize first).
//! - `aclrtFreePhysical` fails with 107000 while the allocation is mapped or registered in a
//!   symmetric window; `aclrtReleaseMemAddress` fails with 107000 while it has mappings.
//! - `aclrtMemcpy` kinds are checked against which side is device address space (inside a
//!   reservation or a symmetric heap); `ACL_MEMCPY_DEFAULT` infers them. A count of 0 is a
//!   no-op.
//! - `aclGetRecentErrMsg` returns the calling thread's last failure message of any emulated
//!   call (ACL or HCCL), read-and-clear, or NULL.
//! - `aclrtDestroyStream` runs what is queued, joins the thread and discards a pending
//!   failure.

mod acl;
mod collective;
mod comm;
mod copy;
mod counters;
mod device;
mod errors;
mod hccl;
mod inject;
mod memory;
mod os;
mod reduce;
mod registry;
mod rendezvous;
mod staged;
mod stream;
mod symmetric;
#[cfg(test)]
mod testutil;
mod window;

pub use counters::{Counters, counters};
pub use device::set_device_memory_limit;
pub use inject::{clear_injected_failures, inject_failure};

use crate::sys::{AclApi, HcclApi};

/// The allocation granularity of device memory (2 MiB), for both granularity options.
pub const GRANULARITY: usize = 2 << 20;

/// The HCCL table, filled with the emulator's functions (every optional entry `Some`).
pub fn hccl_api() -> HcclApi {
    HcclApi {
        HcclGetRootInfo: hccl::HcclGetRootInfo,
        HcclCommInitRootInfo: hccl::HcclCommInitRootInfo,
        HcclCommInitRootInfoConfig: hccl::HcclCommInitRootInfoConfig,
        HcclCommDestroy: hccl::HcclCommDestroy,
        HcclGetRankSize: hccl::HcclGetRankSize,
        HcclGetRankId: hccl::HcclGetRankId,
        HcclBarrier: hccl::HcclBarrier,
        HcclGetErrorString: hccl::HcclGetErrorString,
        HcclAllReduce: hccl::HcclAllReduce,
        HcclAllGather: hccl::HcclAllGather,
        HcclReduceScatter: hccl::HcclReduceScatter,
        HcclAlltoAll: hccl::HcclAlltoAll,
        HcclBroadcast: hccl::HcclBroadcast,
        HcclGetCommAsyncError: Some(hccl::HcclGetCommAsyncError),
        HcclCommSymWinRegister: Some(hccl::HcclCommSymWinRegister),
        HcclCommSymWinDeregister: Some(hccl::HcclCommSymWinDeregister),
        HcclCommSymWinGet: Some(hccl::HcclCommSymWinGet),
    }
}

/// The ACL runtime table, filled with the emulator's functions (every optional entry `Some`).
pub fn acl_api() -> AclApi {
    AclApi {
        aclInit: acl::aclInit,
        aclFinalize: acl::aclFinalize,
        aclrtSetDevice: acl::aclrtSetDevice,
        aclrtGetDevice: acl::aclrtGetDevice,
        aclrtResetDevice: acl::aclrtResetDevice,
        aclrtCreateStream: acl::aclrtCreateStream,
        aclrtDestroyStream: acl::aclrtDestroyStream,
        aclrtSynchronizeStream: acl::aclrtSynchronizeStream,
        aclrtMemcpy: acl::aclrtMemcpy,
        aclrtMemcpyAsync: acl::aclrtMemcpyAsync,
        aclrtMemset: acl::aclrtMemset,
        aclrtMemsetAsync: acl::aclrtMemsetAsync,
        aclrtGetMemInfo: acl::aclrtGetMemInfo,
        aclrtReserveMemAddress: acl::aclrtReserveMemAddress,
        aclrtReleaseMemAddress: acl::aclrtReleaseMemAddress,
        aclrtMallocPhysical: acl::aclrtMallocPhysical,
        aclrtFreePhysical: acl::aclrtFreePhysical,
        aclrtMapMem: acl::aclrtMapMem,
        aclrtUnmapMem: acl::aclrtUnmapMem,
        aclrtMemGetAllocationGranularity: acl::aclrtMemGetAllocationGranularity,
        aclGetRecentErrMsg: Some(acl::aclGetRecentErrMsg),
    }
}

/// Serialises the unit tests that depend on process-global emulator state (counters,
/// injected failures).
#[cfg(test)]
pub(crate) fn test_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    registry::lock(&LOCK)
}
