//! HCCL's "zero-copy" memory ranges (`HcclCommSetMemoryRange` & co.): the address ranges a
//! communicator was told about and the blocks activated in them.
//!
//! In HCCL, activated memory lets AllReduce & co. skip the HCCL buffer on A3. The emulator
//! records the ranges and checks every call as CANN documents, but collectives on activated
//! memory take the staged path as on any mapped memory (their results are the same), so
//! nothing here pins or maps memory: a record refers to the user's memory, never owns it.

use std::collections::BTreeMap;

use crate::acl::memory;
use crate::base::errors::{HcclRes, hccl_non_null, para};
use crate::base::handle::PhysicalHandle;

/// An activated block.
struct Active {
    size: usize,
}

/// A range set with `HcclCommSetMemoryRange`.
struct Range {
    size: usize,
    /// Activated blocks by start address (never overlapping).
    active: BTreeMap<usize, Active>,
}

/// One communicator's ranges by base address (never overlapping).
#[derive(Default)]
pub(crate) struct Ranges {
    ranges: BTreeMap<usize, Range>,
}

/// Whether `[a, a + alen)` and `[b, b + blen)` overlap.
fn overlap(a: usize, alen: usize, b: usize, blen: usize) -> bool {
    a < b.saturating_add(blen) && b < a.saturating_add(alen)
}

impl Ranges {
    /// `HcclCommSetMemoryRange`: `[base, base + size)` inside one reservation, overlapping no
    /// range already set; `alignment` 0; `flags` 0 or 1 (torch_npu passes 1).
    pub(crate) fn set(
        &mut self,
        base: usize,
        size: usize,
        alignment: usize,
        flags: u64,
    ) -> HcclRes {
        hccl_non_null(base, "baseVirPtr")?;
        if size == 0 {
            return para("size is 0");
        }
        if alignment != 0 {
            return para(format!("alignment {alignment} is not 0 (reserved)"));
        }
        if flags > 1 {
            return para(format!("flags {flags} is not 0 or 1"));
        }
        if base.checked_add(size).is_none() || !memory::in_one_reservation(base, size) {
            return para(format!(
                "[{base:#x}, +{size:#x}) is not inside one reservation made with \
                 aclrtReserveMemAddress"
            ));
        }
        if let Some((&b, r)) = self
            .ranges
            .iter()
            .find(|&(&b, r)| overlap(base, size, b, r.size))
        {
            return para(format!(
                "[{base:#x}, +{size:#x}) overlaps the range [{b:#x}, +{:#x}) already set",
                r.size
            ));
        }
        let active = BTreeMap::new();
        self.ranges.insert(base, Range { size, active });
        Ok(())
    }

    /// `HcclCommUnsetMemoryRange`: `base` must be a range's base, with nothing activated.
    pub(crate) fn unset(&mut self, base: usize) -> HcclRes {
        hccl_non_null(base, "baseVirPtr")?;
        let Some(r) = self.ranges.get(&base) else {
            return para(format!("{base:#x} is not the base of a memory range set"));
        };
        if !r.active.is_empty() {
            return para(format!(
                "the range at {base:#x} still has {} activated block(s): deactivate them first",
                r.active.len()
            ));
        }
        self.ranges.remove(&base);
        Ok(())
    }

    /// `HcclCommActivateCommMemory`: `[ptr, ptr + size)` inside a range, overlapping no
    /// activated block, wholly mapped, with the allocation `handle` mapped at `ptr`; `offset`
    /// and `flags` 0.
    pub(crate) fn activate(
        &mut self,
        ptr: usize,
        size: usize,
        offset: usize,
        handle: PhysicalHandle,
        flags: u64,
    ) -> HcclRes {
        hccl_non_null(ptr, "virPtr")?;
        hccl_non_null(handle.raw(), "handle")?;
        if size == 0 {
            return para("size is 0");
        }
        if offset != 0 {
            return para(format!("offset {offset} is not 0"));
        }
        if flags != 0 {
            return para(format!("flags {flags} is not 0"));
        }
        let Some(end) = ptr.checked_add(size) else {
            return para(format!("[{ptr:#x}, +{size:#x}) overflows"));
        };
        let found = self.ranges.range_mut(..=ptr).next_back();
        let Some((&base, range)) = found.filter(|(b, r)| ptr < **b + r.size) else {
            return para(format!("{ptr:#x} is not inside a memory range set"));
        };
        if end > base + range.size {
            return para(format!(
                "[{ptr:#x}, +{size:#x}) extends past the range [{base:#x}, +{:#x})",
                range.size
            ));
        }
        if let Some((&a, b)) = range
            .active
            .iter()
            .find(|&(&a, b)| overlap(ptr, size, a, b.size))
        {
            return para(format!(
                "[{ptr:#x}, +{size:#x}) overlaps the activated block [{a:#x}, +{:#x})",
                b.size
            ));
        }
        match memory::mapping_at(ptr) {
            Some(m) if m.base == ptr && m.phys.handle == handle => {}
            Some(m) if m.base == ptr => {
                return para(format!(
                    "handle {handle:#x} is not the physical allocation mapped at {ptr:#x} \
                     ({:#x} is)",
                    m.phys.handle
                ));
            }
            _ => {
                return para(format!(
                    "{ptr:#x} is not the start of a mapping (aclrtMapMem)"
                ));
            }
        }
        // The record pins nothing (see the module's notes): only a check.
        if let Err(e) = memory::check_mapped(ptr, size) {
            return para(e);
        }
        range.active.insert(ptr, Active { size });
        Ok(())
    }

    /// `HcclCommDeactivateCommMemory`: `ptr` must be an activated block's start.
    pub(crate) fn deactivate(&mut self, ptr: usize) -> HcclRes {
        hccl_non_null(ptr, "virPtr")?;
        let range = self.ranges.range_mut(..=ptr).next_back().map(|(_, r)| r);
        match range.and_then(|r| r.active.remove(&ptr)) {
            Some(_) => Ok(()),
            None => para(format!("{ptr:#x} is not the start of an activated block")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::c_void;
    use std::ptr::null_mut;

    use crate::sys::*;
    use crate::testutil::{
        DevBuf, acl, assert_clean, hccl, hok, ok, recent, run_ranks, test_config,
    };
    use crate::{GRANULARITY as G, test_lock};

    const PARA: HcclResult = HcclResult::HCCL_E_PARA;
    const PTR: HcclResult = HcclResult::HCCL_E_PTR;

    /// A reservation of `size` bytes on this thread's device.
    fn reserve(size: usize) -> *mut c_void {
        let mut p = null_mut();
        // SAFETY: valid out-pointer.
        ok(unsafe { (acl().aclrtReserveMemAddress)(&mut p, size, 0, null_mut(), 1) });
        p
    }

    /// `size` bytes of physical memory on `device`.
    fn physical(device: u32, size: usize) -> aclrtDrvMemHandle {
        let mut h = null_mut();
        let prop = aclrtPhysicalMemProp::device_huge(device);
        // SAFETY: valid out-pointer and property.
        ok(unsafe { (acl().aclrtMallocPhysical)(&mut h, size, &prop, 0) });
        h
    }

    #[test]
    fn memory_range_calls_check_their_arguments_and_sequence() {
        let _g = test_lock();
        let h = hccl();
        let (set, unset) = (
            h.HcclCommSetMemoryRange.unwrap(),
            h.HcclCommUnsetMemoryRange.unwrap(),
        );
        let (activate, deactivate) = (
            h.HcclCommActivateCommMemory.unwrap(),
            h.HcclCommDeactivateCommMemory.unwrap(),
        );
        run_ranks(1, &test_config(), |r| {
            let a = acl();
            let c = r.comm;
            let base = reserve(3 * G);
            let at = |off: usize| base.wrapping_byte_add(off);
            let (mine, other) = (physical(0, G), physical(0, G));
            let mut host = [0u8; 64];
            let host_ptr = host.as_mut_ptr().cast::<c_void>();
            // SAFETY: the emulator validates every argument.
            unsafe {
                ok((a.aclrtMapMem)(at(G), G, 0, mine, 0));
                // Set.
                assert_eq!(set(null_mut(), base, 3 * G, 0, 0), PTR);
                assert_eq!(set(0x77 as HcclComm, base, 3 * G, 0, 0), PARA);
                assert_eq!(set(c, null_mut(), 3 * G, 0, 0), PTR);
                assert_eq!(set(c, base, 0, 0, 0), PARA);
                assert_eq!(set(c, base, 3 * G, G, 0), PARA);
                assert!(recent().contains("alignment"));
                assert_eq!(set(c, base, 3 * G, 0, 2), PARA);
                assert_eq!(set(c, host_ptr, 64, 0, 0), PARA);
                assert!(recent().contains("aclrtReserveMemAddress"));
                assert_eq!(set(c, base, 4 * G, 0, 0), PARA);
                // torch_npu passes flags 1.
                hok(set(c, base, 3 * G, 0, 1));
                assert_eq!(set(c, base, 3 * G, 0, 0), PARA);
                assert_eq!(set(c, at(G), G, 0, 0), PARA);
                assert!(recent().contains("overlaps"));
                // Activate.
                assert_eq!(activate(c, null_mut(), G, 0, mine, 0), PTR);
                assert_eq!(activate(c, at(G), G, 0, null_mut(), 0), PTR);
                assert_eq!(activate(c, at(G), 0, 0, mine, 0), PARA);
                assert_eq!(activate(c, at(G), G, G, mine, 0), PARA);
                assert_eq!(activate(c, at(G), G, 0, mine, 1), PARA);
                assert_eq!(activate(c, base, G, 0, mine, 0), PARA);
                assert!(recent().contains("not the start of a mapping"));
                assert_eq!(activate(c, at(G), G, 0, other, 0), PARA);
                assert!(recent().contains("is not the physical allocation"));
                assert_eq!(activate(c, at(G), 2 * G, 0, mine, 0), PARA);
                assert_eq!(activate(c, at(G), 3 * G, 0, mine, 0), PARA);
                assert!(recent().contains("extends past"));
                assert_eq!(activate(c, host_ptr, 64, 0, mine, 0), PARA);
                hok(activate(c, at(G), G, 0, mine, 0));
                assert_eq!(activate(c, at(G), G, 0, mine, 0), PARA);
                assert!(recent().contains("overlaps the activated block"));
                // Unset while activated, or not a base.
                assert_eq!(unset(c, base), PARA);
                assert!(recent().contains("deactivate them first"));
                assert_eq!(unset(c, null_mut()), PTR);
                assert_eq!(unset(c, at(G)), PARA);
                // Deactivate.
                assert_eq!(deactivate(c, null_mut()), PTR);
                assert_eq!(deactivate(c, base), PARA);
                assert_eq!(deactivate(c, at(G + 4096)), PARA);
                hok(deactivate(c, at(G)));
                assert_eq!(deactivate(c, at(G)), PARA);
                hok(unset(c, base));
                assert_eq!(unset(c, base), PARA);
                // A comm destroyed with ranges and activations set forgets them: the memory
                // stays the user's.
                hok(set(c, base, 3 * G, 0, 0));
                hok(activate(c, at(G), G, 0, mine, 0));
                ok((a.aclrtUnmapMem)(at(G)));
                ok((a.aclrtFreePhysical)(mine));
                ok((a.aclrtFreePhysical)(other));
                ok((a.aclrtReleaseMemAddress)(base));
            }
        });
        assert_clean();
    }

    #[test]
    fn ranges_are_per_communicator() {
        let _g = test_lock();
        let h = hccl();
        let set = h.HcclCommSetMemoryRange.unwrap();
        let unset = h.HcclCommUnsetMemoryRange.unwrap();
        let root = crate::hccl::comm::get_root_info().unwrap();
        run_ranks(1, &test_config(), |r| {
            let base = reserve(G);
            let mut other = null_mut();
            // SAFETY: valid pointers; handles released below.
            unsafe {
                hok((h.HcclCommInitRootInfo)(1, &root, 0, &mut other));
                hok(set(r.comm, base, G, 0, 0));
                // The same range on another communicator of the process.
                hok(set(other, base, G, 0, 0));
                hok(unset(r.comm, base));
                hok(unset(other, base));
                hok((h.HcclCommDestroy)(other));
                ok((acl().aclrtReleaseMemAddress)(base));
            }
        });
        assert_clean();
    }

    #[test]
    fn all_reduce_runs_on_activated_memory() {
        let _g = test_lock();
        let h = hccl();
        let count = 100_000;
        run_ranks(2, &test_config(), |r| {
            let a = acl();
            let base = reserve(2 * G);
            let phys = physical(r.rank, 2 * G);
            // SAFETY: the emulator validates every argument.
            unsafe {
                ok((a.aclrtMapMem)(base, 2 * G, 0, phys, 0));
                hok((h.HcclCommSetMemoryRange.unwrap())(
                    r.comm,
                    base,
                    2 * G,
                    0,
                    0,
                ));
                hok((h.HcclCommActivateCommMemory.unwrap())(
                    r.comm,
                    base,
                    2 * G,
                    0,
                    phys,
                    0,
                ));
            }
            let buf = DevBuf {
                ptr: base,
                size: 2 * G,
                phys,
            };
            let input: Vec<i32> = (0..count as i32).map(|i| i * (r.rank as i32 + 1)).collect();
            buf.write(0, &input);
            // SAFETY: activated device memory, live handles.
            hok(unsafe {
                (h.HcclAllReduce)(
                    base,
                    buf.at(G),
                    count as u64,
                    HcclDataType::HCCL_DATA_TYPE_INT32,
                    HcclReduceOp::HCCL_REDUCE_SUM,
                    r.comm,
                    r.stream,
                )
            });
            assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
            let got = buf.read::<i32>(G, count);
            for (i, &v) in got.iter().enumerate() {
                assert_eq!(v, 3 * i as i32, "element {i}");
            }
            // SAFETY: as above.
            unsafe {
                hok((h.HcclCommDeactivateCommMemory.unwrap())(r.comm, base));
                hok((h.HcclCommUnsetMemoryRange.unwrap())(r.comm, base));
            }
            buf.free();
        });
        assert_clean();
    }
}
