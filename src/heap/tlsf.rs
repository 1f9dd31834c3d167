//! The TLSF mechanics behind [`Heap`]'s public methods: search, split, merge, free lists.
//!
//! Everything here works in granules and node keys. Invariants kept by every method:
//! * the physical chain covers `[0, capacity)` in offset order without gaps or overlaps;
//! * a node is in exactly one free list (its size's bin) iff it is free;
//! * no two free nodes are physical neighbours;
//! * `free_units` and `free_regions` are the sum of sizes and the number of nodes in the lists.

use super::node::{NIL, Node};
use super::size_class::{bin_at_least, bin_of};
use super::{Heap, Request};

/// Node keys must stay below [`NIL`]; an `alloc` adds at most two nodes.
pub(super) const MAX_NODES: usize = NIL as usize - 2;

/// `offset` rounded up to a multiple of `align` (a power of two), if that fits in a u64.
#[inline]
fn align_up(offset: u64, align: u64) -> Option<u64> {
    Some(offset.checked_add(align - 1)? & !(align - 1))
}

impl Heap {
    /// Finds a free node for `request`: `(node key, leading pad in granules)`, or `None` if no
    /// free region can hold it. Changes nothing. See the module docs for the two paths.
    pub(super) fn find(&self, request: Request) -> Option<(u32, u64)> {
        let Request { units, align_units } = request;
        if self.nodes.len() > MAX_NODES {
            return None;
        }
        // Fast path: every block at or above `start` holds `units` after any alignment pad.
        // `check_request` made sure this sum does not overflow.
        let start = bin_at_least(units + (align_units - 1));
        if let Some(bin) = self.bins.first_at_or_above(start) {
            let key = self.bins.head(bin);
            let pad = if align_units == 1 {
                0
            } else {
                let offset = self.nodes[key as usize].offset;
                align_up(offset, align_units)? - offset
            };
            return Some((key, pad));
        }
        // Fallback: the bins the rounding skipped may still hold a block that fits exactly.
        let mut bin = bin_of(units);
        while let Some(found) = self.bins.first_at_or_above(bin) {
            if found >= start {
                break;
            }
            let mut key = self.bins.head(found);
            while key != NIL {
                let node = &self.nodes[key as usize];
                if let Some(pad) = self.fit(node, units, align_units) {
                    return Some((key, pad));
                }
                key = node.next_free;
            }
            bin = found + 1;
        }
        None
    }

    /// The leading pad that makes `node` hold `units` at a multiple of `align_units`, if any.
    #[inline]
    fn fit(&self, node: &Node, units: u64, align_units: u64) -> Option<u64> {
        let pad = align_up(node.offset, align_units)? - node.offset;
        (pad < node.size && node.size - pad >= units).then_some(pad)
    }

    /// Turns free node `key` into a live block of `units` granules starting `pad` granules in:
    /// the pad and the tail become free nodes of their own.
    pub(super) fn carve(&mut self, key: u32, pad: u64, units: u64) {
        self.remove_free(key);
        if pad > 0 {
            let (offset, prev) = {
                let node = &self.nodes[key as usize];
                (node.offset, node.prev_phys)
            };
            let gap = self.new_node(offset, pad, prev, key);
            if prev != NIL {
                self.nodes[prev as usize].next_phys = gap;
            }
            let node = &mut self.nodes[key as usize];
            node.prev_phys = gap;
            node.offset += pad;
            node.size -= pad;
            // The gap's lower neighbour was not free (free nodes never touch), so no merge.
            self.insert_free(gap);
        }
        let (offset, size, next) = {
            let node = &self.nodes[key as usize];
            (node.offset, node.size, node.next_phys)
        };
        if size > units {
            let tail = self.new_node(offset + units, size - units, key, next);
            if next != NIL {
                self.nodes[next as usize].prev_phys = tail;
            }
            let node = &mut self.nodes[key as usize];
            node.next_phys = tail;
            node.size = units;
            self.insert_free(tail);
        }
        self.live_blocks += 1;
    }

    /// Frees live node `key`, merging it with free physical neighbours.
    pub(super) fn release(&mut self, key: u32) {
        self.live_blocks -= 1;
        let mut key = key;
        let prev = self.nodes[key as usize].prev_phys;
        if prev != NIL && self.nodes[prev as usize].free {
            self.remove_free(prev);
            self.absorb_next(prev);
            key = prev;
        }
        let next = self.nodes[key as usize].next_phys;
        if next != NIL && self.nodes[next as usize].free {
            self.remove_free(next);
            self.absorb_next(key);
        }
        self.insert_free(key);
    }

    /// Merges `key`'s upper physical neighbour (out of any list) into `key` and drops its node.
    fn absorb_next(&mut self, key: u32) {
        let next = self.nodes[key as usize].next_phys;
        let gone = self.nodes.remove(next as usize);
        let node = &mut self.nodes[key as usize];
        node.size += gone.size;
        node.next_phys = gone.next_phys;
        if gone.next_phys != NIL {
            self.nodes[gone.next_phys as usize].prev_phys = key;
        }
    }

    /// Adds a node (not yet in any list) and returns its key.
    pub(super) fn new_node(
        &mut self,
        offset: u64,
        size: u64,
        prev_phys: u32,
        next_phys: u32,
    ) -> u32 {
        let key = self.nodes.insert(Node {
            offset,
            size,
            prev_phys,
            next_phys,
            prev_free: NIL,
            next_free: NIL,
            free: false,
        });
        // `find` refuses before the slab can reach NIL keys.
        debug_assert!(key < NIL as usize);
        key as u32
    }

    /// Pushes node `key` on the front of its bin's free list and marks it free.
    pub(super) fn insert_free(&mut self, key: u32) {
        let bin = bin_of(self.nodes[key as usize].size);
        let head = self.bins.head(bin);
        let node = &mut self.nodes[key as usize];
        node.free = true;
        node.prev_free = NIL;
        node.next_free = head;
        self.free_units += node.size;
        if head != NIL {
            self.nodes[head as usize].prev_free = key;
        }
        self.bins.set_head(bin, key);
        self.free_regions += 1;
    }

    /// Unlinks free node `key` from its bin's list and marks it live. Its size must not have
    /// changed since `insert_free`.
    pub(super) fn remove_free(&mut self, key: u32) {
        let node = &mut self.nodes[key as usize];
        let (prev, next, size) = (node.prev_free, node.next_free, node.size);
        node.free = false;
        self.free_units -= size;
        self.free_regions -= 1;
        if next != NIL {
            self.nodes[next as usize].prev_free = prev;
        }
        if prev != NIL {
            self.nodes[prev as usize].next_free = next;
        } else {
            self.bins.set_head(bin_of(size), next);
        }
    }

    /// Bytes in the largest free region: the biggest node of the highest non-empty bin.
    pub(super) fn largest_free(&self) -> u64 {
        let Some(bin) = self.bins.last() else {
            return 0;
        };
        let mut largest = 0;
        let mut key = self.bins.head(bin);
        while key != NIL {
            let node = &self.nodes[key as usize];
            largest = largest.max(node.size);
            key = node.next_free;
        }
        largest << self.shift
    }
}

#[cfg(test)]
mod tests {
    use super::super::size_class::SL_COUNT;
    use super::*;

    impl Heap {
        /// Walks the physical chain and the free lists and checks every invariant above.
        pub(crate) fn check_invariants(&self) {
            let (mut key, mut prev, mut end) = (self.first_node(), NIL, 0);
            let (mut free_units, mut free_regions, mut live, mut prev_free) = (0, 0, 0, false);
            while key != NIL {
                let node = &self.nodes[key as usize];
                assert_eq!(node.prev_phys, prev, "broken back link at {key}");
                assert_eq!(node.offset, end, "gap or overlap at {key}");
                assert!(node.size > 0);
                if node.free {
                    assert!(!prev_free, "free neighbours not merged at {key}");
                    free_units += node.size;
                    free_regions += 1;
                } else {
                    live += 1;
                }
                prev_free = node.free;
                end = node.offset + node.size;
                prev = key;
                key = node.next_phys;
            }
            assert_eq!(end << self.shift, self.capacity);
            assert_eq!(free_units, self.free_units);
            assert_eq!(free_regions, self.free_regions);
            assert_eq!(live, self.live_blocks);
            assert_eq!(self.nodes.len(), live + free_regions);
            let mut listed = 0;
            for bin in 0..super::super::size_class::BIN_COUNT {
                let (mut key, mut prev) = (self.bins.head(bin), NIL);
                assert_eq!(key != NIL, self.bins.first_at_or_above(bin) == Some(bin));
                while key != NIL {
                    let node = &self.nodes[key as usize];
                    assert!(node.free && bin_of(node.size) == bin && node.prev_free == prev);
                    listed += 1;
                    prev = key;
                    key = node.next_free;
                }
            }
            assert_eq!(listed, free_regions);
        }

        fn first_node(&self) -> u32 {
            let (key, _) = self.nodes.iter().next().expect("a heap always has a node");
            let mut key = key as u32;
            while self.nodes[key as usize].prev_phys != NIL {
                key = self.nodes[key as usize].prev_phys;
            }
            key
        }
    }

    #[test]
    fn split_and_merge_both_sides() {
        let mut heap = Heap::new(64 * 512, 512).unwrap();
        let blocks: Vec<_> = (0..4).map(|_| heap.alloc(512, 0).unwrap()).collect();
        heap.check_invariants();
        let offsets: Vec<_> = blocks.iter().map(|b| b.offset()).collect();
        assert_eq!(offsets, [0, 512, 1024, 1536]);
        let mut blocks = blocks.into_iter();
        let (a, b, c, d) = (
            blocks.next().unwrap(),
            blocks.next().unwrap(),
            blocks.next().unwrap(),
            blocks.next().unwrap(),
        );
        heap.free(a).unwrap();
        heap.free(c).unwrap();
        heap.check_invariants();
        assert_eq!(heap.report().free_regions, 3);
        heap.free(b).unwrap(); // merges with a below and c above
        heap.check_invariants();
        assert_eq!(heap.report().free_regions, 2);
        heap.free(d).unwrap();
        heap.check_invariants();
        assert_eq!(heap.report().free_regions, 1);
        assert_eq!(heap.nodes.len(), 1);
    }

    #[test]
    fn aligned_alloc_splits_a_leading_gap() {
        let mut heap = Heap::new(1 << 20, 512).unwrap();
        let small = heap.alloc(512, 0).unwrap();
        let aligned = heap.alloc(4096, 64 << 10).unwrap();
        heap.check_invariants();
        assert_eq!(aligned.offset(), 64 << 10);
        let report = heap.report();
        assert_eq!(report.free_regions, 2); // the gap below and the tail above
        // The gap is reused by the next small request.
        let reuse = heap.alloc(1024, 0).unwrap();
        assert!(reuse.end() <= aligned.offset());
        for block in [small, aligned, reuse] {
            heap.free(block).unwrap();
            heap.check_invariants();
        }
        assert_eq!(heap.report().free_regions, 1);
    }

    #[test]
    fn fallback_finds_a_block_the_rounded_search_skips() {
        // Sizes above SL_COUNT granules share bins; make the only free block one whose bin is
        // the request's own bin, and not at its lower bound.
        let units = 4 * SL_COUNT as u64 + 3; // bins here are 4 granules wide
        let mut heap = Heap::new((units + 1) * 512, 512).unwrap();
        let pin = heap.alloc(512, 0).unwrap();
        assert_eq!(heap.report().largest_free, units * 512);
        let block = heap.alloc(units * 512, 0).unwrap();
        assert_eq!(block.offset(), 512);
        heap.check_invariants();
        heap.free(pin).unwrap();
        heap.free(block).unwrap();
        heap.check_invariants();
    }

    #[test]
    fn freeing_everything_leaves_one_node() {
        let mut heap = Heap::new(1 << 20, 512).unwrap();
        let blocks: Vec<_> = (0..100)
            .map(|i| heap.alloc(512 * (i % 7 + 1), 0).unwrap())
            .collect();
        for block in blocks.into_iter().rev() {
            heap.free(block).unwrap();
        }
        heap.check_invariants();
        assert_eq!(heap.nodes.len(), 1);
    }
}
