//! `HcommMemAlloc` / `HcommMemFree` (libhcomm, which libhccl loads): device memory for
//! symmetric windows in one call, composed of the ACL calls it is documented to make
//! (hicann/hcomm `docs/zh/api_ref/comm_mgr_c/HcommMemAlloc.md`, `HcommMemFree.md`):
//! `aclrtReserveMemAddress` + `aclrtMallocPhysical` (`ACL_HBM_MEM_HUGE`, pinned, on the
//! current device) + `aclrtMapMem`, the size rounded up to the granularity, undone in order
//! when a step fails; and back: `aclrtMemRetainAllocationHandle`, `aclrtUnmapMem`,
//! `aclrtFreePhysical`, `aclrtReleaseMemAddress`. (Without the retain: CANN's `MemFree`
//! retains and frees once, which under the runtime's documented reference counting would
//! leave `aclrtMallocPhysical`'s reference and never free the memory; the emulator frees it,
//! as `HcommMemFree.md` says.)

use crate::GRANULARITY;
use crate::acl::{device, memory};
use crate::base::errors::{Fail, HcclRes, hccl_fail, para};
use crate::sys::{HcclResult, aclError, aclrtPhysicalMemProp};

/// A failed ACL step, as `HCCL_E_RUNTIME` (the documented code) with its message.
fn runtime<T>(step: &str, e: Fail<aclError>) -> HcclRes<T> {
    hccl_fail(
        HcclResult::HCCL_E_RUNTIME,
        format!("{step} failed: {}", e.msg),
    )
}

/// `HcommMemAlloc`: `size` bytes (rounded up to the granularity) of mapped device memory on
/// the current device; its address.
pub(crate) fn alloc(size: usize) -> HcclRes<usize> {
    if size == 0 {
        return para("size is 0");
    }
    let Some(len) = size.checked_next_multiple_of(GRANULARITY) else {
        return para(format!("size {size} is too large"));
    };
    let device = device::current().or_else(|e| runtime("aclrtGetDevice", e))?;
    let addr = memory::reserve(len, 0, 0, 0).or_else(|e| runtime("aclrtReserveMemAddress", e))?;
    let prop = aclrtPhysicalMemProp::device_huge(device.id);
    let handle = match memory::malloc_physical(len, &prop, 0) {
        Ok(handle) => handle,
        Err(e) => {
            let _ = memory::release(addr);
            return runtime("aclrtMallocPhysical", e);
        }
    };
    if let Err(e) = memory::map(addr, len, 0, handle, 0) {
        let _ = memory::free_physical(handle);
        let _ = memory::release(addr);
        return runtime("aclrtMapMem", e);
    }
    Ok(addr)
}

/// `HcommMemFree`: frees what [`alloc`] returned at `addr` (NULL: nothing).
pub(crate) fn free(addr: usize) -> HcclRes {
    if addr == 0 {
        return Ok(());
    }
    let owned = memory::mapping_at(addr).filter(|m| m.base == addr && m.offset == 0);
    let Some(m) = owned else {
        return hccl_fail(
            HcclResult::HCCL_E_RUNTIME,
            format!("{addr:#x} is not an address HcommMemAlloc returned"),
        );
    };
    let handle = m.phys.handle;
    drop(m);
    memory::unmap(addr).or_else(|e| runtime("aclrtUnmapMem", e))?;
    memory::free_physical(handle).or_else(|e| runtime("aclrtFreePhysical", e))?;
    memory::release(addr).or_else(|e| runtime("aclrtReleaseMemAddress", e))
}

#[cfg(test)]
mod tests {
    use std::ptr::null_mut;

    use crate::sys::*;
    use crate::testutil::{acl, assert_clean, hccl, hok, ok, recent, run_ranks, test_config};
    use crate::{GRANULARITY as G, test_lock, testing::counters};

    /// The documented example: memory from `HcommMemAlloc` registered as a window, an
    /// AllGather on it (symmetric), deregistered and freed.
    #[test]
    fn hcomm_memory_is_a_window_as_documented() {
        let _g = test_lock();
        let before = counters().symmetric_collectives;
        run_ranks(2, &test_config(), |r| {
            let (a, h) = (acl(), hccl());
            let (send_bytes, recv_bytes) = (1024usize, 2 * 1024usize);
            let mut dev = null_mut();
            // SAFETY: valid out-pointers; the emulator validates the rest.
            unsafe {
                hok((h.HcommMemAlloc.unwrap())(
                    &mut dev,
                    send_bytes + recv_bytes,
                ));
                let (mut base, mut size) = (null_mut(), 0usize);
                ok((a.aclrtMemGetAddressRange.unwrap())(
                    dev, &mut base, &mut size,
                ));
                assert_eq!((base, size), (dev, G), "rounded up to the granularity");
                let mut win = null_mut();
                let reg = h.HcclCommSymWinRegister.unwrap();
                hok(reg(
                    r.comm,
                    dev,
                    (send_bytes + recv_bytes) as u64,
                    &mut win,
                    1,
                ));
                let mine = [r.rank as u8 + 1; 1024];
                ok((a.aclrtMemcpy)(
                    dev,
                    1024,
                    mine.as_ptr().cast(),
                    1024,
                    aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE,
                ));
                let recv = dev.wrapping_byte_add(send_bytes);
                hok((h.HcclAllGather)(
                    dev,
                    recv,
                    send_bytes as u64,
                    HcclDataType::HCCL_DATA_TYPE_INT8,
                    r.comm,
                    r.stream,
                ));
                ok(r.sync());
                let mut got = vec![0u8; recv_bytes];
                ok((a.aclrtMemcpy)(
                    got.as_mut_ptr().cast(),
                    recv_bytes,
                    recv,
                    recv_bytes,
                    aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
                ));
                assert!(got[..1024].iter().all(|&b| b == 1) && got[1024..].iter().all(|&b| b == 2));
                hok((h.HcclCommSymWinDeregister.unwrap())(win));
                hok((h.HcommMemFree.unwrap())(dev));
            }
        });
        assert_eq!(counters().symmetric_collectives - before, 2);
        assert_clean();
    }

    #[test]
    fn hcomm_memory_arguments_are_checked_as_documented() {
        let _g = test_lock();
        let h = hccl();
        let (alloc, free) = (h.HcommMemAlloc.unwrap(), h.HcommMemFree.unwrap());
        // SAFETY: the device is set for this thread; the emulator validates the rest.
        unsafe {
            ok((acl().aclrtSetDevice)(0));
            let mut p = null_mut();
            assert_eq!(alloc(null_mut(), 64), HcclResult::HCCL_E_PARA);
            assert_eq!(alloc(&mut p, 0), HcclResult::HCCL_E_PARA);
            hok(free(null_mut()));
            let mut host = [0u8; 8];
            assert_eq!(free(host.as_mut_ptr().cast()), HcclResult::HCCL_E_RUNTIME);
            assert!(
                recent().contains("not an address HcommMemAlloc returned"),
                "{}",
                recent()
            );
            hok(alloc(&mut p, 1));
            assert_eq!(free(p.wrapping_byte_add(4096)), HcclResult::HCCL_E_RUNTIME);
            hok(free(p));
            ok((acl().aclrtResetDevice)(0));
        }
        assert_clean();
    }
}
