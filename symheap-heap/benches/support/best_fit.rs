//! The textbook baseline: exact best fit over ordered sets, with coalescing. O(log n) per call.

use std::collections::{BTreeMap, BTreeSet};

/// Free regions indexed twice: by `(size, offset)` for best fit (smallest, then lowest), and by
/// offset to find the neighbours to merge with. Units are whatever the caller uses.
pub struct BestFit {
    by_size: BTreeSet<(u64, u64)>,
    by_offset: BTreeMap<u64, u64>,
    free: u64,
}

impl BestFit {
    /// One free region of `capacity` units.
    pub fn new(capacity: u64) -> Self {
        let mut this = BestFit {
            by_size: BTreeSet::new(),
            by_offset: BTreeMap::new(),
            free: 0,
        };
        this.insert(0, capacity);
        this
    }

    fn insert(&mut self, offset: u64, size: u64) {
        self.by_size.insert((size, offset));
        self.by_offset.insert(offset, size);
        self.free += size;
    }

    fn remove(&mut self, offset: u64, size: u64) {
        self.by_size.remove(&(size, offset));
        self.by_offset.remove(&offset);
        self.free -= size;
    }

    /// The offset of `size` units carved from the smallest region that holds them.
    pub fn alloc(&mut self, size: u64) -> Option<u64> {
        let &(region, offset) = self.by_size.range((size, 0)..).next()?;
        self.remove(offset, region);
        if region > size {
            self.insert(offset + size, region - size);
        }
        Some(offset)
    }

    /// Returns `[offset, offset + size)`, merged with free neighbours.
    pub fn free(&mut self, mut offset: u64, mut size: u64) {
        if let Some((&below, &below_size)) = self.by_offset.range(..offset).next_back() {
            if below + below_size == offset {
                self.remove(below, below_size);
                offset = below;
                size += below_size;
            }
        }
        if let Some(&above_size) = self.by_offset.get(&(offset + size)) {
            self.remove(offset + size, above_size);
            size += above_size;
        }
        self.insert(offset, size);
    }

    /// Units in free regions.
    pub fn free_units(&self) -> u64 {
        self.free
    }

    /// The largest free region.
    pub fn largest_free(&self) -> u64 {
        self.by_size.last().map_or(0, |&(size, _)| size)
    }
}
