//! Out-of-band block metadata: one node per block, free or live, 32 bytes each.

/// "No node": the end of a free list or of the physical chain. Node keys stay below it.
pub(super) const NIL: u32 = u32::MAX - 1;

/// The `prev_free` of a live node: live nodes are in no list, so the field says "not free".
const LIVE: u32 = u32::MAX;

/// One block of the heap, in granules.
///
/// Nodes live in an [`Arena`](super::arena::Arena) and refer to each other by key. Two doubly linked lists run
/// through them: the physical chain (`prev_phys`/`next_phys`, in offset order, covering the whole
/// heap without gaps) used to coalesce neighbours in O(1), and, for free nodes only, the free list
/// of their bin (`prev_free`/`next_free`).
#[derive(Debug, Clone)]
pub(super) struct Node {
    /// Start, in granules from the heap's start.
    pub(super) offset: u64,
    /// Length in granules; never zero (zero marks a vacant arena slot).
    pub(super) size: u64,
    /// The block just below in memory, or [`NIL`] for the first block.
    prev_phys: u32,
    /// The block just above in memory, or [`NIL`] for the last block.
    pub(super) next_phys: u32,
    /// Previous node in this bin's free list ([`NIL`] at the head), or [`LIVE`].
    prev_free: u32,
    /// Next node in this bin's free list (free nodes only).
    pub(super) next_free: u32,
}

const _: () = assert!(size_of::<Node>() == 32);

impl Node {
    /// A live node (in no free list).
    #[inline]
    pub(super) fn new(offset: u64, size: u64, prev_phys: u32, next_phys: u32) -> Self {
        Node {
            offset,
            size,
            prev_phys,
            next_phys,
            prev_free: LIVE,
            next_free: NIL,
        }
    }

    /// A vacant arena slot, chained to the vacant slot `next` ([`NIL`] for none).
    #[inline]
    pub(super) fn vacant(next: u32) -> Self {
        Node {
            offset: 0,
            size: 0,
            prev_phys: NIL,
            next_phys: next,
            prev_free: LIVE,
            next_free: NIL,
        }
    }

    /// Whether this is a vacant arena slot rather than a block.
    #[inline]
    pub(super) fn is_vacant(&self) -> bool {
        self.size == 0
    }

    /// Whether the block is free (in a bin's list) rather than handed out.
    #[inline]
    pub(super) fn is_free(&self) -> bool {
        self.prev_free != LIVE
    }

    /// The block just below in memory, or [`NIL`].
    #[inline]
    pub(super) fn prev_phys(&self) -> u32 {
        self.prev_phys
    }

    /// Sets the block just below in memory ([`NIL`] for none).
    #[inline]
    pub(super) fn set_prev_phys(&mut self, key: u32) {
        self.prev_phys = key;
    }

    /// Previous node in the free list ([`NIL`] at the head). Only meaningful for free nodes.
    #[inline]
    pub(super) fn prev_free(&self) -> u32 {
        debug_assert!(self.is_free());
        self.prev_free
    }

    /// Marks the node free, with `prev` before it in its list ([`NIL`] at the head).
    #[inline]
    pub(super) fn set_prev_free(&mut self, prev: u32) {
        debug_assert!(prev != LIVE);
        self.prev_free = prev;
    }

    /// Marks the node live (out of every list).
    #[inline]
    pub(super) fn set_live(&mut self) {
        self.prev_free = LIVE;
        self.next_free = NIL;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_free_and_vacant() {
        let mut node = Node::new(0, 1, NIL, NIL);
        assert!(!node.is_free() && !node.is_vacant());
        node.set_prev_free(NIL);
        assert!(node.is_free());
        node.set_live();
        assert!(!node.is_free());
        assert!(Node::vacant(NIL).is_vacant());
    }
}
