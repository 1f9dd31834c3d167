//! Exact best fit for large blocks: the free lists of the *ordered* bins are kept sorted.
//!
//! A bin is ordered when every size it can hold is at least the heap's large-block threshold
//! (`capacity >> LARGE_SHIFT`, see [`large_bins_from`]). Its free list is sorted by
//! `(size, offset)`, so its head is its smallest block (the lowest of equal ones), and a request
//! whose own bin is ordered gets the smallest free block that holds it, lowest offset first:
//! exactly the choice of a best fit over an ordered set of all free regions.
//!
//! Keeping a list sorted costs a walk on insertion, but only over free blocks of the same bin
//! (sizes within 1/32 of each other) that are all at least `capacity >> LARGE_SHIFT`: there are
//! fewer than `2^(LARGE_SHIFT + 1)` of those in any heap, and in practice one to three. Small
//! blocks, the many, keep the unsorted O(1) lists of [`super::tlsf`].

use super::node::NIL;
use super::size_class::bin_at_least;
use super::tlsf::Found;
use super::{Heap, Request};

/// Blocks of at least `capacity >> LARGE_SHIFT` are placed by exact best fit.
///
/// Chosen on the fill benchmarks (`benches/README.md`, seeds 1000..1300): of `capacity / 64`,
/// `/ 256`, `/ 1024`, `/ 4096` and `/ 16384`, only `/ 4096` was at or above the exact best fit's
/// mean and minimum fill on every workload; the others were within noise on the means but below
/// on some minimum. A lower threshold also sorts more lists, which costs time in `free`.
pub(super) const LARGE_SHIFT: u32 = 12;

/// The first ordered bin of a heap of `capacity_units` granules: the first bin whose every
/// block is at least `capacity_units >> LARGE_SHIFT` granules (and at least one granule).
pub(super) fn large_bins_from(capacity_units: u64) -> usize {
    bin_at_least((capacity_units >> LARGE_SHIFT).max(1))
}

impl Heap {
    /// The free block an exact best fit takes for `request`, whose own bin `own` is ordered: the
    /// first block, in `(size, offset)` order, that holds the request at its alignment. `None`
    /// if no free block does.
    ///
    /// Bins are visited in size order and each list in its sorted order, so the first fit found
    /// is the best. In the request's own bin that is a walk past the blocks that are too small;
    /// in the bins above, every block is large enough and (without alignment) the head fits.
    #[inline]
    pub(super) fn best_fit(&self, request: Request, own: usize) -> Option<Found> {
        let Request { units, align_units } = request;
        if align_units == 1 {
            // Without alignment a size comparison decides, and any head above the own bin fits.
            let mut key = self.bins.head(own);
            while key != NIL {
                let node = &self.nodes[key as usize];
                if node.size >= units {
                    return Some(Found {
                        key,
                        bin: own,
                        pad: 0,
                    });
                }
                key = node.next_free;
            }
            let bin = self.bins.first_at_or_above(own + 1)?;
            let key = self.bins.head(bin);
            return Some(Found { key, bin, pad: 0 });
        }
        let mut bin = own;
        loop {
            let mut key = self.bins.head(bin);
            while key != NIL {
                let node = &self.nodes[key as usize];
                if let Some(pad) = self.fit(node, units, align_units) {
                    return Some(Found { key, bin, pad });
                }
                key = node.next_free;
            }
            bin = self.bins.first_at_or_above(bin + 1)?;
        }
    }

    /// Links free node `key`, of `size` granules, into the sorted list of ordered bin `bin`,
    /// whose head is `head`, before the first block that is larger (or as large and higher).
    /// [`Heap::insert_free`] handles the common cases (an empty bin, a block smaller than the
    /// head) without coming here.
    #[cold]
    #[inline(never)]
    pub(super) fn insert_sorted(&mut self, key: u32, size: u64, bin: usize, head: u32) {
        let offset = self.nodes[key as usize].offset;
        let (mut prev, mut next) = (NIL, head);
        while next != NIL {
            let node = &self.nodes[next as usize];
            if (node.size, node.offset) > (size, offset) {
                break;
            }
            prev = next;
            next = node.next_free;
        }
        let node = &mut self.nodes[key as usize];
        node.set_prev_free(prev);
        node.next_free = next;
        if next != NIL {
            self.nodes[next as usize].set_prev_free(key);
        }
        if prev == NIL {
            self.bins.push_head(bin, head, key, size);
        } else {
            self.nodes[prev as usize].next_free = key;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::size_class::bin_floor;
    use super::*;

    #[test]
    fn threshold_bins_hold_only_large_blocks() {
        for capacity_units in [1u64, 31, 4096, 5000, 1 << 21, (1 << 40) + 7, u64::MAX] {
            let bin = large_bins_from(capacity_units);
            let threshold = (capacity_units >> LARGE_SHIFT).max(1);
            assert!(bin_floor(bin) >= threshold);
            assert!(bin == 1 || bin_floor(bin - 1) < threshold);
        }
    }

    #[test]
    fn large_requests_take_the_smallest_fitting_block_lowest_first() {
        // 4096 granules: every block is "large"; leave free blocks of 6, 5, 5 and 7 granules
        // (in that order of address) between live ones, and a big tail.
        let mut heap = Heap::new(4096 * 512, 512).unwrap();
        let sizes = [6u64, 1, 5, 1, 5, 1, 7, 1];
        let blocks: Vec<_> = sizes
            .iter()
            .map(|&units| heap.alloc(units * 512, 0).unwrap())
            .collect();
        let offsets: Vec<u64> = blocks.iter().map(|b| b.offset() / 512).collect();
        let mut keep = Vec::new();
        for (block, units) in blocks.into_iter().zip(sizes) {
            if units == 1 {
                keep.push(block);
            } else {
                heap.free(block).unwrap();
            }
        }
        heap.check_invariants();
        // 5 granules: the lower of the two 5s; then the other; then the 6; then the 7.
        let expect = [offsets[2], offsets[4], offsets[0], offsets[6]];
        for (units, offset) in [5u64, 5, 5, 5].into_iter().zip(expect) {
            let block = heap.alloc(units * 512, 0).unwrap();
            assert_eq!(block.offset() / 512, offset);
            keep.push(block);
            heap.check_invariants();
        }
        for block in keep {
            heap.free(block).unwrap();
        }
        heap.check_invariants();
    }
}
