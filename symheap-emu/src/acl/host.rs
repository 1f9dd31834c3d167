//! Host memory from `aclrtMallocHost` ("page-locked" on a real machine: ordinary host memory
//! here), registered so that `aclrtFreeHost` can tell it from foreign pointers, `aclrtMemset`
//! can fill it, and queued copies can pin it.

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::sys::ACL_ERROR_RT_MEMORY_ALLOCATION;

use crate::acl::memory::Pin;
use crate::base::counters::{self, Counter};
use crate::base::errors::{AclResult, acl_fail, invalid, param};
use crate::base::lock::{RankedMutex, lock, ranks};

/// The alignment of `aclrtMallocHost` memory (CANN documents 64 bytes).
pub(crate) const HOST_ALIGN: usize = 64;

/// One `aclrtMallocHost` allocation; freed when the last reference goes (the registry's until
/// `aclrtFreeHost`, then the pins of work still queued on it).
#[derive(Debug)]
struct HostAlloc {
    addr: usize,
    layout: Layout,
}

impl Drop for HostAlloc {
    fn drop(&mut self) {
        // SAFETY: `addr` was returned by `alloc_zeroed` with this layout and is freed only
        // here, once, when nothing refers to the allocation any more.
        unsafe { std::alloc::dealloc(self.addr as *mut u8, self.layout) };
    }
}

/// Live allocations by address.
static HOST: RankedMutex<BTreeMap<usize, Arc<HostAlloc>>> =
    RankedMutex::new(ranks::HOST, BTreeMap::new());

/// `aclrtMallocHost`: `size` (non-zero) bytes of 64-byte aligned host memory. The emulator
/// zeroes it (CANN does not initialise it). Size 0, or one too large for a [`Layout`] (about
/// `isize::MAX`), is `ACL_ERROR_INVALID_PARAM` (100000); an allocation the host cannot make
/// `ACL_ERROR_RT_MEMORY_ALLOCATION` (207001).
pub(crate) fn malloc(size: usize) -> AclResult<usize> {
    if size == 0 {
        return invalid("size is 0");
    }
    let Ok(layout) = Layout::from_size_align(size, HOST_ALIGN) else {
        return invalid(format!("size {size} is too large"));
    };
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return acl_fail(
            ACL_ERROR_RT_MEMORY_ALLOCATION,
            format!("cannot allocate {size} bytes of host memory"),
        );
    }
    let addr = ptr as usize;
    lock(&HOST).insert(addr, Arc::new(HostAlloc { addr, layout }));
    counters::inc(Counter::HostAllocations);
    Ok(addr)
}

/// `aclrtFreeHost`: `addr` must be the start of a live `aclrtMallocHost` allocation (NULL is
/// the caller's check). Work still queued on it keeps it until done.
pub(crate) fn free(addr: usize) -> AclResult {
    let Some(alloc) = lock(&HOST).remove(&addr) else {
        return param(format!(
            "{addr:#x} is not the start of a live aclrtMallocHost allocation"
        ));
    };
    drop(alloc);
    counters::dec(Counter::HostAllocations);
    Ok(())
}

/// Pins `[addr, addr + len)` if `addr` is inside an `aclrtMallocHost` allocation: `None` for
/// other host memory (trusted, as in C), an error if the range runs past the allocation.
pub(crate) fn pin(addr: usize, len: usize) -> Option<Result<Pin, String>> {
    let map = lock(&HOST);
    let (&start, alloc) = map.range(..=addr).next_back()?;
    let end = start + alloc.layout.size();
    if addr >= end {
        return None;
    }
    if addr.checked_add(len).is_none_or(|e| e > end) {
        return Some(Err(format!(
            "[{addr:#x}, +{len}) runs past the end of the aclrtMallocHost allocation at \
             {start:#x} ({} bytes)",
            alloc.layout.size()
        )));
    }
    let pin: Pin = alloc.clone();
    Some(Ok(pin))
}

#[cfg(test)]
mod tests {
    use std::ffi::c_void;
    use std::ptr::null_mut;

    use crate::sys::*;
    use crate::testutil::{DevBuf, acl, assert_clean, ok, recent};
    use crate::{GRANULARITY as G, test_lock, testing::counters};

    fn malloc_host(size: usize) -> (aclError, *mut c_void) {
        let mut p = null_mut();
        // SAFETY: a valid out-pointer.
        let code = unsafe { acl().aclrtMallocHost.unwrap()(&mut p, size) };
        (code, p)
    }

    #[test]
    fn host_allocations_are_aligned_registered_and_freed_once() {
        let _g = test_lock();
        let a = acl();
        assert_eq!(malloc_host(0).0, ACL_ERROR_INVALID_PARAM);
        assert_eq!(malloc_host(usize::MAX).0, ACL_ERROR_INVALID_PARAM);
        // SAFETY: the emulator checks every argument.
        unsafe {
            assert_eq!(
                a.aclrtMallocHost.unwrap()(null_mut(), 64),
                ACL_ERROR_INVALID_PARAM
            );
            assert_eq!(
                a.aclrtFreeHost.unwrap()(null_mut()),
                ACL_ERROR_INVALID_PARAM
            );
        }
        let (code, p) = malloc_host(100);
        ok(code);
        assert_eq!(p as usize % 64, 0);
        assert_eq!(counters().host_allocations, 1);
        let mut foreign = [0u8; 8];
        // SAFETY: as above; `p` is a live allocation of 100 bytes.
        unsafe {
            assert_eq!(
                a.aclrtFreeHost.unwrap()(foreign.as_mut_ptr().cast()),
                ACL_ERROR_RT_PARAM_INVALID
            );
            assert!(recent().contains("aclrtMallocHost"));
            assert_eq!(
                a.aclrtFreeHost.unwrap()(p.wrapping_byte_add(8)),
                ACL_ERROR_RT_PARAM_INVALID,
                "not the start"
            );
            ok(a.aclrtFreeHost.unwrap()(p));
            assert_eq!(
                a.aclrtFreeHost.unwrap()(p),
                ACL_ERROR_RT_PARAM_INVALID,
                "double free"
            );
        }
        assert_clean();
    }

    #[test]
    fn host_allocations_are_host_memory_to_copies_and_memset() {
        let _g = test_lock();
        let a = acl();
        let buf = DevBuf::new(0, G);
        let (code, h) = malloc_host(256);
        ok(code);
        // SAFETY: `h` is a live 256-byte allocation; device sides are validated.
        unsafe {
            ok((a.aclrtMemset)(h, 256, 0x5A, 256));
            assert_eq!(
                (a.aclrtMemset)(h, 512, 0, 512),
                ACL_ERROR_RT_PARAM_INVALID,
                "past the allocation"
            );
            assert_eq!(
                (a.aclrtMemcpy)(
                    buf.ptr,
                    G,
                    h,
                    256,
                    aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_DEVICE
                ),
                ACL_ERROR_RT_PARAM_INVALID,
                "host memory is not device memory"
            );
            ok((a.aclrtMemcpy)(
                buf.ptr,
                G,
                h,
                256,
                aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE,
            ));
            assert_eq!(
                (a.aclrtMemcpy)(
                    h.wrapping_byte_add(128),
                    256,
                    buf.ptr,
                    256,
                    aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST
                ),
                ACL_ERROR_RT_PARAM_INVALID,
                "runs past the host allocation"
            );
            ok(a.aclrtFreeHost.unwrap()(h));
        }
        assert_eq!(buf.read::<u8>(0, 256), vec![0x5A; 256]);
        buf.free();
        assert_clean();
    }
}
