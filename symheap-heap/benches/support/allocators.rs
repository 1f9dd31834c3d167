//! One interface over the three allocators so every workload runs them identically.
//!
//! All workloads use sizes that are multiples of [`UNIT`] bytes, so no allocator pays for
//! rounding and they can be compared byte for byte.

use super::best_fit::BestFit;
use symheap_heap::{Block, Heap};

/// 512 bytes: symheap's granularity, offset-allocator's unit, best fit's unit.
pub const UNIT: u64 = 512;

/// What a workload needs from an allocator. Sizes and offsets are in bytes.
pub trait Allocator {
    /// What `alloc` returns and `free` takes back.
    type Handle;
    /// The name printed in tables and criterion ids.
    const NAME: &'static str;
    /// An empty allocator over `capacity` bytes.
    fn with_capacity(capacity: u64) -> Self;
    /// A block of `bytes` (a multiple of [`UNIT`]), or `None` when it does not fit.
    fn alloc(&mut self, bytes: u64) -> Option<Self::Handle>;
    /// Gives a block back.
    fn free(&mut self, handle: Self::Handle);
    /// Where a block starts.
    fn offset(&self, handle: &Self::Handle) -> u64;
    /// Free bytes and the largest free region, in bytes.
    fn free_and_largest(&self) -> (u64, u64);
}

impl Allocator for Heap {
    type Handle = Block;
    const NAME: &'static str = "symheap";
    fn with_capacity(capacity: u64) -> Self {
        Heap::new(capacity, UNIT).expect("valid heap")
    }
    #[inline]
    fn alloc(&mut self, bytes: u64) -> Option<Block> {
        Heap::alloc(self, bytes, 0).ok()
    }
    #[inline]
    fn free(&mut self, handle: Block) {
        Heap::free(self, handle).expect("own block");
    }
    fn offset(&self, handle: &Block) -> u64 {
        handle.offset()
    }
    fn free_and_largest(&self) -> (u64, u64) {
        let report = self.report();
        (report.free, report.largest_free)
    }
}

impl Allocator for offset_allocator::Allocator {
    type Handle = offset_allocator::Allocation;
    const NAME: &'static str = "offset-allocator";
    fn with_capacity(capacity: u64) -> Self {
        offset_allocator::Allocator::new(u32::try_from(capacity / UNIT).expect("fits in u32"))
    }
    #[inline]
    fn alloc(&mut self, bytes: u64) -> Option<Self::Handle> {
        self.allocate((bytes / UNIT) as u32)
    }
    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        offset_allocator::Allocator::free(self, handle);
    }
    fn offset(&self, handle: &Self::Handle) -> u64 {
        u64::from(handle.offset) * UNIT
    }
    fn free_and_largest(&self) -> (u64, u64) {
        let report = self.storage_report();
        (
            u64::from(report.total_free_space) * UNIT,
            u64::from(report.largest_free_region) * UNIT,
        )
    }
}

impl Allocator for BestFit {
    /// `(offset, size)` in units.
    type Handle = (u64, u64);
    const NAME: &'static str = "btree-best-fit";
    fn with_capacity(capacity: u64) -> Self {
        BestFit::new(capacity / UNIT)
    }
    #[inline]
    fn alloc(&mut self, bytes: u64) -> Option<(u64, u64)> {
        let units = bytes / UNIT;
        BestFit::alloc(self, units).map(|offset| (offset, units))
    }
    #[inline]
    fn free(&mut self, (offset, units): (u64, u64)) {
        BestFit::free(self, offset, units);
    }
    fn offset(&self, handle: &(u64, u64)) -> u64 {
        handle.0 * UNIT
    }
    fn free_and_largest(&self) -> (u64, u64) {
        (self.free_units() * UNIT, self.largest_free() * UNIT)
    }
}
