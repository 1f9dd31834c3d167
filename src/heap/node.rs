//! Out-of-band block metadata: one node per block, free or live.

/// "No node": the end of a free list or of the physical chain.
pub(super) const NIL: u32 = u32::MAX;

/// One block of the heap, in granules.
///
/// Nodes live in a `slab::Slab` and refer to each other by key. Two doubly linked lists run
/// through them: the physical chain (`prev_phys`/`next_phys`, in offset order, covering the whole
/// heap without gaps) used to coalesce neighbours in O(1), and, for free nodes only, the free list
/// of their bin (`prev_free`/`next_free`).
#[derive(Debug, Clone)]
pub(super) struct Node {
    /// Start, in granules from the heap's start.
    pub(super) offset: u64,
    /// Length in granules; never zero.
    pub(super) size: u64,
    /// The block just below in memory, or [`NIL`] for the first block.
    pub(super) prev_phys: u32,
    /// The block just above in memory, or [`NIL`] for the last block.
    pub(super) next_phys: u32,
    /// Previous node in this bin's free list (free nodes only).
    pub(super) prev_free: u32,
    /// Next node in this bin's free list (free nodes only).
    pub(super) next_free: u32,
    /// Whether the block is free (in a bin) rather than handed out.
    pub(super) free: bool,
}
