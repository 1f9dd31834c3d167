//! The TLSF mechanics behind [`Heap`]'s public methods: search, split, merge, free lists.
//! (The exact best fit of large requests, and the sorted lists it needs, are in
//! [`super::best_fit`].)
//!
//! Everything here works in granules and node keys. Invariants kept by every method:
//! * the physical chain covers `[0, capacity)` in offset order without gaps or overlaps;
//! * a node is in exactly one free list (its size's bin) iff it is free;
//! * the list of an ordered bin (`bin >= large_from`, see [`super::best_fit`]) is sorted by
//!   `(size, offset)`; the others are in no particular order (newest first, as it happens);
//! * no two free nodes are physical neighbours;
//! * `free_units` and `free_regions` are the sum of sizes and the number of nodes in the lists.

use super::node::{NIL, Node};
use super::size_class::{bin_at_least, bin_floor, bin_of};
use super::{Heap, Request};

/// Where `alloc` will carve its block.
#[derive(Debug, Clone, Copy)]
pub(super) struct Found {
    /// The free node.
    pub(super) key: u32,
    /// Its bin.
    pub(super) bin: usize,
    /// Granules to skip at its start for alignment.
    pub(super) pad: u64,
}

/// Node keys must stay below [`NIL`], and an `alloc` adds at most two nodes, so `find` refuses
/// (as out of memory) beyond this many nodes: about 4 billion blocks, 128 GiB of metadata.
pub(super) const MAX_NODES: usize = NIL as usize - 2;

/// `offset` rounded up to a multiple of `align` (a power of two), if that fits in a u64.
#[inline]
fn align_up(offset: u64, align: u64) -> Option<u64> {
    Some(offset.checked_add(align - 1)? & !(align - 1))
}

impl Heap {
    /// Finds a free node for `request`, or `None` if no free region can hold it. Changes
    /// nothing. See the module docs for the paths.
    #[inline]
    pub(super) fn find(&self, request: Request) -> Option<Found> {
        let Request { units, align_units } = request;
        if self.nodes.len() > MAX_NODES {
            return None;
        }
        let own = bin_of(units);
        if own >= self.large_from {
            return self.best_fit(request, own);
        }
        // The first bin whose every block holds `units` after any alignment pad: the request
        // (plus the alignment slack) rounded up to a bin boundary. `Heap::request` made sure
        // the sum does not overflow.
        let start = if align_units == 1 {
            own + usize::from(bin_floor(own) != units)
        } else {
            bin_at_least(units + (align_units - 1))
        };
        let above = self.bins.first_at_or_above(start);
        // 1. Good fit: when the search must go past `start`, the head of the request's own bin
        // (which the rounding skips) may fit more closely than anything above. The bins keep
        // each head's size, so a head that is too small costs no node access.
        if own < start && above != Some(start) {
            if let Some(key) = self.bins.head_if_may_fit(own, units) {
                if let Some(pad) = self.fit(&self.nodes[key as usize], units, align_units) {
                    return Some(Found { key, bin: own, pad });
                }
            }
        }
        // 2. Fast path: the head of the first non-empty bin at or above `start` fits.
        if let Some(bin) = above {
            let key = self.bins.head(bin);
            let pad = if align_units == 1 {
                0
            } else {
                // Cannot overflow: the block holds `align_units - 1 + units` past its offset.
                let offset = self.nodes[key as usize].offset;
                align_up(offset, align_units)? - offset
            };
            return Some(Found { key, bin, pad });
        }
        // 3. Fallback: the bins the rounding skipped may still hold a block that fits.
        let mut bin = own;
        while let Some(found) = self.bins.first_at_or_above(bin) {
            if found >= start {
                break;
            }
            let mut key = self.bins.head(found);
            while key != NIL {
                let node = &self.nodes[key as usize];
                if let Some(pad) = self.fit(node, units, align_units) {
                    return Some(Found {
                        key,
                        bin: found,
                        pad,
                    });
                }
                key = node.next_free;
            }
            bin = found + 1;
        }
        None
    }

    /// The leading pad that makes `node` hold `units` at a multiple of `align_units`, if any.
    #[inline]
    pub(super) fn fit(&self, node: &Node, units: u64, align_units: u64) -> Option<u64> {
        let pad = align_up(node.offset, align_units)? - node.offset;
        (pad < node.size && node.size - pad >= units).then_some(pad)
    }

    /// Turns the free node `find` found into a live block of `units` granules, `pad` granules
    /// into it: the pad and the tail become free nodes of their own (their neighbours outside
    /// are live, as free nodes never touch, so there is nothing to merge). Returns the block's
    /// node and offset.
    #[inline]
    pub(super) fn carve(&mut self, found: Found, units: u64) -> (u32, u64) {
        let Found { key, bin, pad } = found;
        self.unlink(key, Some(bin));
        let (offset, size, prev_phys, next_phys) = {
            let node = &self.nodes[key as usize];
            (node.offset, node.size, node.prev_phys(), node.next_phys)
        };
        if pad > 0 {
            let gap = self.new_node(Node::new(offset, pad, prev_phys, key));
            if prev_phys != NIL {
                self.nodes[prev_phys as usize].next_phys = gap;
            }
            self.insert_free(gap);
            self.nodes[key as usize].set_prev_phys(gap);
        }
        let rest = size - pad - units;
        if rest > 0 {
            let tail = self.new_node(Node::new(offset + pad + units, rest, key, next_phys));
            if next_phys != NIL {
                self.nodes[next_phys as usize].set_prev_phys(tail);
            }
            self.insert_free(tail);
            self.nodes[key as usize].next_phys = tail;
        }
        let node = &mut self.nodes[key as usize];
        node.offset = offset + pad;
        node.size = units;
        self.live_blocks += 1;
        (key, offset + pad)
    }

    /// Frees live node `key`, whose physical neighbours are `prev` and `next`, merging it with
    /// them where they are free.
    #[inline]
    pub(super) fn release(&mut self, key: u32, prev: u32, next: u32) {
        self.live_blocks -= 1;
        let mut key = key;
        if next != NIL && self.nodes[next as usize].is_free() {
            self.remove_free(next);
            self.absorb_next(key);
        }
        if prev != NIL && self.nodes[prev as usize].is_free() {
            self.remove_free(prev);
            self.absorb_next(prev);
            key = prev;
        }
        self.insert_free(key);
    }

    /// Merges `key`'s upper physical neighbour (in no list) into `key` and drops its node.
    #[inline(always)]
    fn absorb_next(&mut self, key: u32) {
        let next = self.nodes[key as usize].next_phys;
        let gone = self.nodes.remove(next);
        let node = &mut self.nodes[key as usize];
        node.size += gone.size;
        node.next_phys = gone.next_phys;
        if gone.next_phys != NIL {
            self.nodes[gone.next_phys as usize].set_prev_phys(key);
        }
    }

    /// Adds a node (live, in no list) and returns its key.
    #[inline]
    pub(super) fn new_node(&mut self, node: Node) -> u32 {
        // `find` refuses before the arena can reach NIL keys.
        let key = self.nodes.insert(node);
        debug_assert!(key < NIL);
        key
    }

    /// Puts node `key` in its bin's free list (which marks it free): on the front of an
    /// unordered bin, in order in an ordered one.
    #[inline(always)]
    pub(super) fn insert_free(&mut self, key: u32) {
        let size = self.nodes[key as usize].size;
        let bin = bin_of(size);
        self.free_units += size;
        self.free_regions += 1;
        let head = self.bins.head(bin);
        // An ordered bin's list stays sorted: the front is right only for a block smaller than
        // the head (or in an empty bin), which the cached head size tells without a node read.
        if bin >= self.large_from && !self.bins.is_below_head(bin, size) {
            self.insert_sorted(key, size, bin, head);
            return;
        }
        let node = &mut self.nodes[key as usize];
        node.set_prev_free(NIL);
        node.next_free = head;
        if head != NIL {
            self.nodes[head as usize].set_prev_free(key);
        }
        self.bins.push_head(bin, head, key, size);
    }

    /// Unlinks free node `key` from its bin's list and marks it live. Its size must not have
    /// changed since `insert_free`.
    #[inline(always)]
    pub(super) fn remove_free(&mut self, key: u32) {
        self.unlink(key, None);
    }

    /// [`Heap::remove_free`], given the node's bin if the caller knows it (saves recomputing
    /// it when the node is the head of its list).
    #[inline(always)]
    fn unlink(&mut self, key: u32, bin: Option<usize>) {
        let node = &mut self.nodes[key as usize];
        let (prev, next, size) = (node.prev_free(), node.next_free, node.size);
        node.set_live();
        let mut next_size = 0;
        if next != NIL {
            let next_node = &mut self.nodes[next as usize];
            next_node.set_prev_free(prev);
            next_size = next_node.size;
        }
        if prev != NIL {
            self.nodes[prev as usize].next_free = next;
        } else {
            let bin = bin.unwrap_or_else(|| bin_of(size));
            self.bins.pop_head(bin, next, next_size);
        }
        self.free_units -= size;
        self.free_regions -= 1;
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

/// The integration tests' PRNG, for the randomized unit test below.
#[cfg(test)]
#[path = "../tests/support/rng.rs"]
mod test_rng;

#[cfg(test)]
mod tests {
    use super::super::size_class::SL_COUNT;
    use super::*;
    use test_rng as rng;

    impl Heap {
        /// Walks the physical chain and the free lists and checks every invariant above.
        pub(crate) fn check_invariants(&self) {
            let (mut key, mut prev, mut end) = (self.first_node(), NIL, 0);
            let (mut free_units, mut free_regions, mut live, mut prev_free) = (0, 0, 0, false);
            while key != NIL {
                let node = &self.nodes[key as usize];
                assert_eq!(node.prev_phys(), prev, "broken back link at {key}");
                assert_eq!(node.offset, end, "gap or overlap at {key}");
                assert!(node.size > 0);
                if node.is_free() {
                    assert!(!prev_free, "free neighbours not merged at {key}");
                    free_units += node.size;
                    free_regions += 1;
                } else {
                    live += 1;
                }
                prev_free = node.is_free();
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
                if key != NIL {
                    let size = self.nodes[key as usize].size;
                    assert_eq!(self.bins.head_if_may_fit(bin, size), Some(key));
                    if size < u64::from(u32::MAX) {
                        assert_eq!(self.bins.head_if_may_fit(bin, size + 1), None);
                    }
                }
                while key != NIL {
                    let node = &self.nodes[key as usize];
                    assert!(node.is_free() && bin_of(node.size) == bin && node.prev_free() == prev);
                    if bin >= self.large_from && prev != NIL {
                        let before = &self.nodes[prev as usize];
                        assert!((before.size, before.offset) < (node.size, node.offset));
                    }
                    listed += 1;
                    prev = key;
                    key = node.next_free;
                }
            }
            assert_eq!(listed, free_regions);
        }

        fn first_node(&self) -> u32 {
            let mut key = self.nodes.any_key().expect("a heap always has a node");
            while self.nodes[key as usize].prev_phys() != NIL {
                key = self.nodes[key as usize].prev_phys();
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

    #[test]
    fn random_calls_keep_every_invariant() {
        // The integration tests check the public view against a model; this checks the
        // internals (links, lists, bitmaps, cached head sizes) after every call.
        // 3000 granules: every bin is ordered (exact best fit); 2^16: only those of 16 granules
        // and up.
        for (seed, granularity, units) in [
            (1, 512u64, 3000),
            (2, 1, 3000),
            (3, 4096, 3000),
            (4, 512, 1 << 16),
        ] {
            let mut rng = rng::Rng::new(seed);
            let capacity = units * granularity;
            let mut heap = Heap::new(capacity, granularity).unwrap();
            let mut blocks = Vec::new();
            // Under Miri, a hundred times slower, fewer steps and fewer (costly) checks: it
            // looks for undefined behaviour in the calls, which the checks do not add to.
            let (steps, check_every) = if cfg!(miri) { (300, 100) } else { (4000, 1) };
            for step in 0..steps {
                if blocks.is_empty() || rng.chance(if step % 800 < 400 { 0.7 } else { 0.3 }) {
                    let size = rng.log_uniform(1, capacity / 16);
                    let align = if rng.chance(0.2) {
                        1 << rng.below(16)
                    } else {
                        0
                    };
                    if let Ok(block) = heap.alloc(size, align) {
                        blocks.push(block);
                    }
                } else {
                    let block = blocks.swap_remove(rng.below(blocks.len() as u64) as usize);
                    heap.free(block).unwrap();
                }
                if step % check_every == 0 {
                    heap.check_invariants();
                }
            }
        }
    }
}
