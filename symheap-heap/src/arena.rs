//! Where the nodes live: a vector of 32-byte slots indexed by node key, with a list of vacant
//! slots for reuse.
//!
//! This is `slab::Slab` specialised to [`Node`]: a vacant slot is a node of size 0 (a real block
//! never is), chained to the next vacant one through `next_phys`. So a slot is exactly a node's
//! 32 bytes, and a lookup is a bounds check with no entry tag to test, which the hot paths do
//! a dozen times per `alloc` and `free`.

use std::ops::{Index, IndexMut};

use super::node::{NIL, Node};

/// The heap's nodes, by key.
#[derive(Debug, Default)]
pub(super) struct Arena {
    slots: Vec<Node>,
    /// The first vacant slot, or [`NIL`].
    vacant: u32,
    /// Occupied slots.
    len: usize,
}

impl Arena {
    /// No nodes.
    pub(super) fn new() -> Self {
        Arena {
            slots: Vec::new(),
            vacant: NIL,
            len: 0,
        }
    }

    /// Number of nodes.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Stores `node` and returns its key: the most recently vacated slot, or a new one.
    /// The caller keeps the number of nodes below [`NIL`] (see `tlsf::MAX_NODES`).
    #[inline]
    pub(super) fn insert(&mut self, node: Node) -> u32 {
        debug_assert!(node.size > 0);
        self.len += 1;
        if self.vacant != NIL {
            let key = self.vacant;
            let slot = &mut self.slots[key as usize];
            self.vacant = slot.next_phys;
            *slot = node;
            return key;
        }
        // `len <= MAX_NODES + 2 = NIL` nodes were never exceeded, so the key is below `NIL`.
        let key = self.slots.len() as u32;
        self.slots.push(node);
        key
    }

    /// Takes node `key` out, leaving its slot vacant.
    #[inline]
    pub(super) fn remove(&mut self, key: u32) -> Node {
        let slot = &mut self.slots[key as usize];
        debug_assert!(!slot.is_vacant());
        let node = std::mem::replace(slot, Node::vacant(self.vacant));
        self.vacant = key;
        self.len -= 1;
        node
    }

    /// Node `key`, if there is one.
    #[inline]
    pub(super) fn get(&self, key: u32) -> Option<&Node> {
        self.slots
            .get(key as usize)
            .filter(|node| !node.is_vacant())
    }

    /// The key of some node, if any (for the tests' walks).
    #[cfg(test)]
    pub(super) fn any_key(&self) -> Option<u32> {
        let key = self.slots.iter().position(|node| !node.is_vacant())?;
        Some(key as u32)
    }

    /// The key of the node at `offset` (in granules), if any: a scan, for rare walks.
    pub(super) fn key_at(&self, offset: u64) -> Option<u32> {
        let key = self
            .slots
            .iter()
            .position(|node| !node.is_vacant() && node.offset == offset)?;
        Some(key as u32)
    }
}

impl Index<usize> for Arena {
    type Output = Node;

    #[inline]
    fn index(&self, key: usize) -> &Node {
        &self.slots[key]
    }
}

impl IndexMut<usize> for Arena {
    #[inline]
    fn index_mut(&mut self, key: usize) -> &mut Node {
        &mut self.slots[key]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_newest_first() {
        let mut arena = Arena::new();
        let keys: Vec<u32> = (1..=3)
            .map(|size| arena.insert(Node::new(0, size, NIL, NIL)))
            .collect();
        assert_eq!(keys, [0, 1, 2]);
        assert_eq!(arena.remove(0).size, 1);
        assert_eq!(arena.remove(2).size, 3);
        assert_eq!(
            (arena.len(), arena.get(0).is_none(), arena.get(9).is_none()),
            (1, true, true)
        );
        assert_eq!(arena.insert(Node::new(0, 4, NIL, NIL)), 2);
        assert_eq!(arena.insert(Node::new(0, 5, NIL, NIL)), 0);
        assert_eq!(arena.insert(Node::new(0, 6, NIL, NIL)), 3);
        assert_eq!(arena[1].size, 2);
        assert_eq!(arena.get(0).map(|node| node.size), Some(5));
        assert_eq!(arena.len(), 4);
    }
}
