//! HCCL's "zero-copy" memory ranges (`HcclCommSetMemoryRange` & co.): the address ranges a
//! communicator was told about and the blocks activated in them.
//!
//! In HCCL, activated memory lets AllReduce & co. skip the HCCL buffer on A3. The emulator
//! records the ranges and checks every call as CANN documents, but collectives on activated
//! memory take the staged path as on any mapped memory (their results are the same), so
//! nothing here pins or maps memory: a record refers to the user's memory, never owns it.

use std::collections::BTreeMap;

use crate::sys::HcclResult;

use super::errors::{HcclRes, hccl_fail, para};
use super::memory;

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

/// Fails on a null pointer argument.
fn non_null(addr: usize, what: &str) -> HcclRes {
    if addr == 0 {
        return hccl_fail(HcclResult::HCCL_E_PTR, format!("{what} is NULL"));
    }
    Ok(())
}

impl Ranges {
    /// `HcclCommSetMemoryRange`: `[base, base + size)` inside one reservation, overlapping no
    /// range already set; `alignment` 0; `flags` 0 or 1 (torch_npu passes 1).
    pub(crate) fn set(&mut self, base: usize, size: usize, alignment: usize, flags: u64) -> HcclRes {
        non_null(base, "baseVirPtr")?;
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
        non_null(base, "baseVirPtr")?;
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
        handle: usize,
        flags: u64,
    ) -> HcclRes {
        non_null(ptr, "virPtr")?;
        non_null(handle, "handle")?;
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
            _ => return para(format!("{ptr:#x} is not the start of a mapping (aclrtMapMem)")),
        }
        if let Err(e) = memory::pin_range(ptr, size) {
            return para(e);
        }
        range.active.insert(ptr, Active { size });
        Ok(())
    }

    /// `HcclCommDeactivateCommMemory`: `ptr` must be an activated block's start.
    pub(crate) fn deactivate(&mut self, ptr: usize) -> HcclRes {
        non_null(ptr, "virPtr")?;
        let range = self.ranges.range_mut(..=ptr).next_back().map(|(_, r)| r);
        match range.and_then(|r| r.active.remove(&ptr)) {
            Some(_) => Ok(()),
            None => para(format!("{ptr:#x} is not the start of an activated block")),
        }
    }

    /// The activated block holding `[addr, addr + len)` whole, as `(start, size)`.
    #[cfg(test)]
    pub(crate) fn activated(&self, addr: usize, len: usize) -> Option<(usize, usize)> {
        let (_, r) = self.ranges.range(..=addr).next_back()?;
        let (&a, b) = r.active.range(..=addr).next_back()?;
        (addr + len <= a + b.size).then_some((a, b.size))
    }
}
