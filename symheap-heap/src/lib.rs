//! symheap's heap: a pure, deterministic offset allocator. TLSF for small blocks, an exact
//! best fit for large ones.
//!
//! [`Heap`] hands out `(offset, size)` ranges of an abstract region of `capacity` bytes (a
//! device window, a GPU buffer, a file). It never reads or writes that region: all metadata
//! lives in host memory, out of band. Every offset and size is a multiple of the heap's
//! *granularity* (a power of two). `alloc` and `free` are O(1) for small blocks (but for a walk
//! when the heap is nearly exhausted for that size); a large block (at least `capacity / 4096`)
//! costs a walk of one bin, of one to three blocks in practice (see [Complexity](#complexity)).
//!
//! The crate has no dependencies and no `unsafe` (`#![forbid(unsafe_code)]`); it knows nothing
//! of devices or of the rest of symheap. The `symheap` crate re-exports it as `symheap::heap`
//! and keeps one heap per registered window.
//!
//! # Example
//!
//! ```
//! use symheap_heap::Heap;
//!
//! let mut heap = Heap::new(1 << 20, 512)?; // 1 MiB in 512-byte granules
//! let a = heap.alloc(1000, 0)?; // 1024 bytes at offset 0
//! let b = heap.alloc(4096, 4096)?; // 4 KiB-aligned
//! assert_eq!((a.offset(), a.size()), (0, 1024));
//! assert_eq!(b.offset() % 4096, 0);
//! heap.free(a)?;
//! heap.free(b)?;
//! assert_eq!(heap.report().free_regions, 1);
//! # Ok::<(), symheap_heap::HeapError>(())
//! ```
//!
//! # For readers of offset-allocator
//!
//! The same shape as [offset-allocator](https://github.com/pcwalton/offset-allocator)'s
//! `Allocator`, in bytes (`u64`) rather than `u32` units, with an alignment, and errors that say
//! why:
//!
//! | offset-allocator | here |
//! |---|---|
//! | `Allocator::new(size)` | [`Heap::new(capacity, granularity)`](Heap::new) |
//! | `allocate(size) -> Option<Allocation>` | [`Heap::alloc(size, align)`](Heap::alloc) `-> Result<Block, HeapError>`; [`Heap::try_alloc`] gives `Ok(None)` where `alloc` is out of space |
//! | `Allocation` (`offset`, `metadata`) | [`Block`] ([`offset`](Block::offset), [`size`](Block::size), [`key`](Block::key)); neither `Copy` nor `Clone` |
//! | `allocation_size(allocation)` | [`Block::size`]: the request rounded up to the granularity |
//! | `free(allocation)` | [`Heap::free(block)`](Heap::free): takes the block by value; refuses one of another heap |
//! | `storage_report()` (`total_free_space`, `largest_free_region`) | [`Heap::report`] ([`HeapReport`]: `free`, `largest_free`, and more) |
//! | `storage_report_full()` | [`Heap::regions`]: every live block and free region in offset order |
//! | `Allocator::with_max_allocs(size, n)` | nothing to set: the metadata grows as needed |
//!
//! # Errors
//!
//! Every fallible call returns a [`HeapError`], of two cases:
//! [`InvalidArgument`](HeapError::InvalidArgument) for a call that can never work (its message
//! names the call and the value), and [`OutOfSpace`](HeapError::OutOfSpace) when no free region
//! holds the request now ([`OutOfSpace`] says what was asked, the free bytes and the largest
//! free region). Either way the heap is unchanged, except that [`Heap::op_hash`] records the
//! failed call. (`symheap` turns them into its own `Error::InvalidArgument` and
//! `Error::OutOfMemory`.) A heap never panics on bad input.
//!
//! # Determinism
//!
//! Every decision depends only on the sequence of calls made on the heap (their arguments and
//! order): never on addresses, hashing, time, thread timing or the heap's id. Heaps that see the
//! same calls hand out the same offsets, in any process or on any machine: this is what lets
//! the ranks of a job address each other's buffers by offset, and re-register a pool at the
//! same offsets. [`Heap::op_hash`] is a rolling hash of that sequence (including failed calls
//! and their outcomes) so ranks can check they agree with one 8-byte exchange; [`fold_words`]
//! folds several heaps' hashes (and a caller's own events) into one with the same mixer.
//!
//! # Algorithm
//!
//! Two-level segregated fit (TLSF) for small blocks, exact best fit for large ones. Free blocks
//! sit in bins indexed by a tiny float of their size in granules (first level
//! `floor(log2(size))`, second level the next 5 bits: 32 bins per power of two, and one exact
//! bin per size below 32 granules), each bin a doubly linked free list, with a two-level bitmap
//! of non-empty bins. Every block, free or live, is a 32-byte node in an arena (a vector with a list of vacant slots), linked to
//! its physical neighbours by node key; `free` merges with free neighbours at once, so no two
//! free regions ever touch.
//!
//! A bin is *ordered* when every size it holds is at least `capacity / 4096` (256 KiB in a
//! 1 GiB heap): its list is kept sorted by `(size, offset)`, so its head is its smallest block.
//! The other bins' lists are newest first.
//!
//! `alloc` rounds the request up to a multiple of the granularity. A **large** request, one
//! whose own bin is ordered, gets an **exact best fit**: the smallest free block that holds it,
//! the lowest of equal ones (the same choice as a best fit over an ordered set of every free
//! region): a walk of its own bin's sorted list past the blocks that are too small, else the
//! head of the next non-empty bin. (With an alignment above the granularity: the first block in
//! that order that holds the request at its alignment.) A **small** request takes the first of:
//!
//! 1. **Good fit.** If the bin at which the search below starts is empty, the head of the
//!    request's *own* bin (which that search skips), if it happens to fit. One look, no walk:
//!    it keeps large blocks whole when a close fit is at hand.
//! 2. **Fast path.** The head of the first non-empty bin whose *every* block is large enough: the
//!    request rounded up to the next bin boundary (with an alignment above the granularity, the
//!    request plus `align - granularity` of slack). It fits without a size check. (If that bin
//!    is ordered, its head is also its smallest block.)
//! 3. **Fallback.** If no such bin exists, a walk of the free lists of the bins the rounding
//!    skipped (the request's own bin, and with alignment slack the bins up to the rounded one),
//!    first fit in list order.
//!
//! Either way the heap never refuses a request that some free region can hold: an
//! [`HeapError::OutOfSpace`] means that no free region fits it (and a heap of `N` bytes serves an
//! `N`-byte request).
//!
//! The chosen block is split: the leading gap up to the aligned start (when the alignment exceeds
//! the granularity) becomes a free block, the block is trimmed to exactly the rounded request,
//! and the tail becomes a free block. Free blocks never touch, so neither needs merging.
//!
//! ## Why this split
//!
//! What a pool can sell is the fill it reaches before the first allocation fails, and that
//! failure is a *large* request finding no region: TLSF's rounding and newest-first order split
//! large regions that a best fit would have kept. The many small blocks decide the speed, and
//! barely the fill. So large blocks get the exact choice, and small ones keep TLSF's O(1)
//! paths: the fill is an exact best fit's within noise (seed by seed over 3000 seeds), at
//! offset-allocator's time per free + alloc pair. The measurements, the alternatives tried and
//! why none was kept are in the workspace's `benches/README.md`
//! (`cargo bench -p symheap-heap --bench heap`).
//!
//! # Complexity
//!
//! * [`Heap::free`]: O(1) for a small block: a key lookup, at most two merges, one list
//!   insertion. A block that ends up in an ordered bin (at least `capacity / 4096` after merging)
//!   and is not smaller than its bin's head is inserted after a walk of that bin: O(k) for its
//!   k free blocks, all of nearly the same size (within 1/32) and each at least
//!   `capacity / 4096`, so k is below 8192 in any heap and one to three in practice.
//! * [`Heap::alloc`]: O(1) for a small request on the good-fit and fast paths: a few masked bit
//!   scans and at most two node insertions into the arena (amortized O(1); it grows as needed,
//!   with no fixed block limit). The fallback runs only when every bin from the rounded request
//!   up is empty (the heap is nearly exhausted for that size); it costs O(k) for the k free
//!   blocks in the skipped bins (only the request's own bin when the alignment is at most the
//!   granularity). A large request walks its own bin (O(k) as above) and takes the head of the
//!   next non-empty one; the tail it leaves may be inserted by such a walk too.
//! * [`Heap::report`]: O(k) for the k free blocks in the highest non-empty bin; the other fields
//!   are kept up to date by `alloc` and `free`.
//!
//! # Rounding
//!
//! The granted size is the request rounded up to the granularity, never more, and `Block::size`
//! says so: internal fragmentation is below one granule per block. The bin search does round
//! the request up to the next bin boundary, by at most 1/32 (3.1 %) of its size (bins above 32
//! granules are `lower bound / 32` wide or less), but only to choose *where to look*; the block
//! found is trimmed to the request. The cost of that rounding is external fragmentation: the
//! fast path may split a larger block while a block of the request's own bin would have fit
//! (the good-fit look and the fallback recover some of those cases).
#![forbid(unsafe_code)]

mod arena;
mod best_fit;
mod bins;
mod block;
mod error;
mod node;
mod op_hash;
mod size_class;
mod tlsf;

pub use block::{Block, Bytes, HeapRegion, HeapReport, binary_units};
pub use error::{HeapError, OutOfSpace};
pub use op_hash::fold_words;

use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};

use arena::Arena;
use bins::Bins;
use node::{NIL, Node};
use op_hash::{Op, OpHash};

/// Source of process-unique heap ids. An id only tells a heap its own blocks from others'.
/// 32 bits keep [`Block`] at 24 bytes; ids are never reused (see [`next_heap_id`]).
static NEXT_HEAP_ID: AtomicU32 = AtomicU32::new(1);

/// A fresh heap id, or an error once `u32::MAX - 1` heaps have been created in this process:
/// the counter stops instead of wrapping, so two live heaps never share an id.
fn next_heap_id() -> Result<NonZeroU32, HeapError> {
    NEXT_HEAP_ID
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |id| id.checked_add(1))
        .ok()
        .and_then(NonZeroU32::new)
        .ok_or_else(|| {
            HeapError::invalid("Heap::new: this process has used up all 2^32 - 2 heap ids")
        })
}

/// A deterministic offset allocator over `capacity` bytes: TLSF for small blocks, exact best
/// fit for large ones. See the [crate docs](crate).
///
/// A heap is deliberately not `Clone`: a clone would share the id of the original, and a block
/// from one could then be freed into the other.
#[doc(alias = "Allocator")]
pub struct Heap {
    /// Process-unique; checked by `free`, never used to choose an offset or in a hash.
    id: NonZeroU32,
    granularity: u64,
    /// `log2(granularity)`: sizes and offsets are kept in granules internally.
    shift: u32,
    capacity: u64,
    /// Sum of the free nodes' sizes, in granules.
    free_units: u64,
    live_blocks: usize,
    /// Number of nodes in the free lists.
    free_regions: usize,
    nodes: Arena,
    bins: Bins,
    /// The first bin whose free list is kept sorted for exact best fit (see [`best_fit`]).
    large_from: usize,
    hash: OpHash,
}

/// A validated `alloc` request, in granules.
#[derive(Debug, Clone, Copy)]
struct Request {
    units: u64,
    align_units: u64,
}

impl Heap {
    /// Creates an empty heap of `capacity` bytes whose blocks are multiples of `granularity`.
    ///
    /// # Errors
    ///
    /// [`HeapError::InvalidArgument`] if `granularity` is not a power of two, or `capacity` is 0 or
    /// not a multiple of `granularity` (it is not rounded: the caller decides what to waste); also
    /// if this process has already created `u32::MAX - 1` heaps (heap ids are never reused).
    ///
    /// # Examples
    ///
    /// ```
    /// use symheap_heap::Heap;
    ///
    /// let heap = Heap::new(1 << 48, 2 << 20)?; // 256 TiB of 2 MiB granules
    /// assert_eq!(heap.report().largest_free, 1 << 48);
    /// assert!(Heap::new(1000, 512).is_err());
    /// # Ok::<(), symheap_heap::HeapError>(())
    /// ```
    pub fn new(capacity: u64, granularity: u64) -> Result<Heap, HeapError> {
        if !granularity.is_power_of_two() {
            return Err(HeapError::invalid(format!(
                "Heap::new: granularity {granularity} is not a power of two"
            )));
        }
        if capacity == 0 || capacity % granularity != 0 {
            return Err(HeapError::invalid(format!(
                "Heap::new: capacity {capacity} must be a non-zero multiple of the granularity \
                 {granularity}"
            )));
        }
        let shift = granularity.trailing_zeros();
        let mut heap = Heap {
            id: next_heap_id()?,
            granularity,
            shift,
            capacity,
            free_units: 0,
            live_blocks: 0,
            free_regions: 0,
            nodes: Arena::new(),
            bins: Bins::new(),
            large_from: best_fit::large_bins_from(capacity >> shift),
            hash: OpHash::new(capacity, granularity),
        };
        let whole = heap.new_node(Node::new(0, capacity >> shift, NIL, NIL));
        heap.insert_free(whole);
        Ok(heap)
    }

    /// Allocates at least `size` bytes at an offset that is a multiple of `align`.
    ///
    /// The block's size is `size` rounded up to the granularity. `align` must be 0 or a power of
    /// two; 0 and any value at or below the granularity mean "the granularity" (every block is
    /// aligned to it anyway). O(1) except near exhaustion; see the [crate docs](crate).
    ///
    /// # Errors
    ///
    /// * [`HeapError::InvalidArgument`] if `size` is 0, `align` is neither 0 nor a power of two, or
    ///   `size` rounded up to the granularity plus the alignment slack (`align - granularity`)
    ///   overflows `u64`.
    /// * [`HeapError::OutOfSpace`] if no free region can hold the block; it reports the free bytes
    ///   and the largest free region. (Also, in theory, once the heap tracks about 4 billion
    ///   blocks and free regions: node keys are 32-bit.)
    ///
    /// Either way the heap is unchanged, except that [`Heap::op_hash`] records the failed call.
    ///
    /// # Examples
    ///
    /// ```
    /// use symheap_heap::{Heap, HeapError};
    ///
    /// let mut heap = Heap::new(8192, 512)?;
    /// let block = heap.alloc(8192, 0)?; // the whole heap
    /// assert!(matches!(heap.alloc(1, 0), Err(HeapError::OutOfSpace(_))));
    /// assert!(matches!(heap.alloc(512, 3), Err(HeapError::InvalidArgument(_))));
    /// heap.free(block)?;
    /// # Ok::<(), symheap_heap::HeapError>(())
    /// ```
    #[doc(alias = "allocate")]
    #[inline]
    pub fn alloc(&mut self, size: u64, align: u64) -> Result<Block, HeapError> {
        match self.try_alloc(size, align)? {
            Some(block) => Ok(block),
            None => Err(self.out_of_space(size, align)),
        }
    }

    /// [`alloc`](Self::alloc), with `Ok(None)` where `alloc` reports
    /// [`HeapError::OutOfSpace`]: for a caller that tries several heaps and reports its own
    /// error, this builds no report. The op hash records the same as for `alloc`.
    ///
    /// # Errors
    ///
    /// [`HeapError::InvalidArgument`] as for [`alloc`](Self::alloc).
    #[inline]
    pub fn try_alloc(&mut self, size: u64, align: u64) -> Result<Option<Block>, HeapError> {
        let Some(request) = self.request(size, align) else {
            return Err(self.refuse_alloc(size, align));
        };
        let Some(found) = self.find(request) else {
            self.hash.record(Op::AllocOutOfMemory, size, align, 0);
            return Ok(None);
        };
        let (node, offset) = self.carve(found, request.units);
        let offset = offset << self.shift;
        self.hash.record(Op::Alloc, size, align, offset);
        Ok(Some(Block {
            offset,
            size: request.units << self.shift,
            node,
            heap: self.id,
        }))
    }

    /// Returns `block` to the heap, merging it with free neighbours. O(1).
    ///
    /// # Errors
    ///
    /// [`HeapError::InvalidArgument`] if `block` was allocated by another heap. This heap is then
    /// unchanged (except for [`Heap::op_hash`]), and the block is dropped: its range stays
    /// allocated in the heap it came from.
    ///
    /// # Examples
    ///
    /// ```
    /// use symheap_heap::Heap;
    ///
    /// let (mut a, mut b) = (Heap::new(4096, 512)?, Heap::new(4096, 512)?);
    /// let block = a.alloc(512, 0)?;
    /// assert!(b.free(block).is_err()); // not b's block: b is unchanged
    /// let block = a.alloc(512, 0)?;
    /// a.free(block)?;
    /// # Ok::<(), symheap_heap::HeapError>(())
    /// ```
    #[inline]
    pub fn free(&mut self, block: Block) -> Result<(), HeapError> {
        let Some((prev, next)) = self.live_neighbours(&block) else {
            return Err(self.refuse_free(&block));
        };
        self.release(block.node, prev, next);
        self.hash.record(Op::Free, block.offset, block.size, 0);
        Ok(())
    }

    /// Every range of the heap in offset order, live blocks and free regions, covering
    /// `0..capacity`. O(n) in the number of ranges: for snapshots, not for hot paths.
    #[doc(alias = "storage_report_full")]
    pub fn regions(&self) -> Vec<HeapRegion> {
        let mut regions = Vec::with_capacity(self.live_blocks + self.free_regions);
        let mut key = self.nodes.key_at(0).unwrap_or(NIL);
        while key != NIL {
            let node = &self.nodes[key as usize];
            regions.push(HeapRegion {
                offset: node.offset << self.shift,
                size: node.size << self.shift,
                live: !node.is_free(),
                key,
            });
            key = node.next_phys;
        }
        regions
    }

    /// A snapshot of the heap's accounting. O(1) plus a walk of the highest non-empty bin.
    #[doc(alias = "storage_report")]
    pub fn report(&self) -> HeapReport {
        let free = self.free_units << self.shift;
        HeapReport {
            capacity: self.capacity,
            allocated: self.capacity - free,
            free,
            largest_free: self.largest_free(),
            live_blocks: self.live_blocks,
            free_regions: self.free_regions,
        }
    }

    /// A rolling hash of every call made on this heap so far, successful or not: its kind,
    /// arguments and outcome (the offset, for a successful `alloc`), starting from `Heap::new`'s
    /// capacity and granularity.
    ///
    /// Two heaps that saw the same calls in the same order have the same hash, in any process or
    /// machine; it does not depend on heap ids or addresses. Ranks compare it to check that they
    /// agree.
    ///
    /// # Examples
    ///
    /// ```
    /// use symheap_heap::Heap;
    ///
    /// let (mut a, mut b) = (Heap::new(1 << 20, 512)?, Heap::new(1 << 20, 512)?);
    /// assert_eq!(a.op_hash(), b.op_hash());
    /// let _kept = a.alloc(4096, 0)?;
    /// assert_ne!(a.op_hash(), b.op_hash());
    /// let _kept_too = b.alloc(4096, 0)?;
    /// assert_eq!(a.op_hash(), b.op_hash());
    /// # Ok::<(), symheap_heap::HeapError>(())
    /// ```
    pub fn op_hash(&self) -> u64 {
        self.hash.value()
    }

    /// Restarts [`Heap::op_hash`] from where the blocks lie now (each region's offset, size
    /// and whether it is live, from `Heap::new`'s capacity and granularity), forgetting the
    /// calls that led there: heaps with the same placement hash alike from here on, and
    /// again compare their calls. For ranks whose histories differ in ways that left the
    /// same placement, such as a collective that a lost peer cut short on some ranks and not
    /// on others.
    ///
    /// # Examples
    ///
    /// ```
    /// use symheap_heap::Heap;
    ///
    /// let (mut a, mut b) = (Heap::new(1 << 20, 512)?, Heap::new(1 << 20, 512)?);
    /// let kept = (a.alloc(4096, 0)?, b.alloc(4096, 0)?);
    /// let tried = b.alloc(8192, 0)?; // one more call on `b` only, undone
    /// b.free(tried)?;
    /// assert_ne!(a.op_hash(), b.op_hash());
    /// a.rebase_op_hash();
    /// b.rebase_op_hash();
    /// assert_eq!(a.op_hash(), b.op_hash());
    /// # drop(kept);
    /// # Ok::<(), symheap_heap::HeapError>(())
    /// ```
    pub fn rebase_op_hash(&mut self) {
        let mut hash = OpHash::new(self.capacity, self.granularity);
        for region in self.regions() {
            hash.record(
                Op::Rebased,
                region.offset,
                region.size,
                u64::from(region.live),
            );
        }
        self.hash = hash;
    }

    /// Total bytes managed, as given to [`Heap::new`].
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The granularity, as given to [`Heap::new`]: every offset and size is a multiple of it.
    pub fn granularity(&self) -> u64 {
        self.granularity
    }

    /// `alloc`'s arguments in granules, or `None` if they are invalid (see [`Heap::alloc`]).
    #[inline]
    fn request(&self, size: u64, align: u64) -> Option<Request> {
        // `align & (align - 1)` is zero for powers of two and for 0 ("no requirement").
        if size == 0 || align & align.wrapping_sub(1) != 0 {
            return None;
        }
        let align = align.max(self.granularity);
        let units = ((size - 1) >> self.shift) + 1;
        // The fast path searches for `size + align - granularity` bytes: it must fit in a u64.
        units
            .checked_mul(self.granularity)?
            .checked_add(align - self.granularity)?;
        Some(Request {
            units,
            align_units: align >> self.shift,
        })
    }

    /// Records an `alloc` that [`Heap::request`] refused and says why.
    #[cold]
    #[inline(never)]
    fn refuse_alloc(&mut self, size: u64, align: u64) -> HeapError {
        self.hash.record(Op::AllocInvalid, size, align, 0);
        let granularity = self.granularity;
        HeapError::invalid(if size == 0 {
            "Heap::alloc: size must be at least 1 byte".to_owned()
        } else if align != 0 && !align.is_power_of_two() {
            format!("Heap::alloc: alignment {align} is neither 0 nor a power of two")
        } else {
            format!(
                "Heap::alloc: size {size} rounded up to the granularity {granularity} plus \
                 alignment slack {} overflows u64",
                align.max(granularity) - granularity
            )
        })
    }

    /// Reports what there was for an `alloc` of a valid request that found no room.
    #[cold]
    #[inline(never)]
    fn out_of_space(&self, size: u64, align: u64) -> HeapError {
        let align_units = self.request(size, align).map_or(0, |r| r.align_units);
        HeapError::OutOfSpace(OutOfSpace {
            requested: size,
            align: align_units << self.shift,
            capacity: self.capacity,
            free: self.free_units << self.shift,
            largest_free: self.largest_free(),
        })
    }

    /// The physical neighbours of `block`'s node, if `block` is a live block of this heap.
    ///
    /// A block cannot be forged or duplicated, so once the heap id matches the node checks only
    /// guard against a bug in the heap; they are cheap, and turn one into an error instead of a
    /// corrupted heap.
    #[inline]
    fn live_neighbours(&self, block: &Block) -> Option<(u32, u32)> {
        if block.heap != self.id {
            return None;
        }
        let node = self.nodes.get(block.node)?;
        let matches = !node.is_free()
            && node.offset << self.shift == block.offset
            && node.size << self.shift == block.size;
        matches.then(|| (node.prev_phys(), node.next_phys))
    }

    /// Records a `free` that was refused and says why.
    #[cold]
    #[inline(never)]
    fn refuse_free(&mut self, block: &Block) -> HeapError {
        self.hash
            .record(Op::FreeInvalid, block.offset, block.size, 0);
        let why = if block.heap != self.id {
            "belongs to another heap"
        } else {
            "is not live in this heap"
        };
        HeapError::invalid(format!(
            "Heap::free: the block at offset {} ({} bytes) {why}",
            block.offset, block.size
        ))
    }
}

impl fmt::Debug for Heap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Heap")
            .field("granularity", &self.granularity)
            .field("report", &self.report())
            .field("op_hash", &format_args!("{:#018x}", self.op_hash()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_capacity_request_succeeds() {
        // Capacities that are and are not bin lower bounds.
        for units in [1u64, 31, 32, 33, 100, 1000, 4097, (1 << 20) + 1] {
            let mut heap = Heap::new(units * 512, 512).unwrap();
            let block = heap.alloc(units * 512, 0).unwrap();
            assert_eq!((block.offset(), block.size()), (0, units * 512));
            assert!(heap.alloc(1, 0).is_err());
            heap.free(block).unwrap();
            heap.check_invariants();
        }
    }

    #[test]
    fn huge_capacities() {
        for (capacity, granularity) in [(1u64 << 48, 1u64 << 21), (1 << 56, 1 << 30), (u64::MAX, 1)]
        {
            let mut heap = Heap::new(capacity, granularity).unwrap();
            let big = heap.alloc(capacity - granularity, 0).unwrap();
            let last = heap.alloc(granularity, 0).unwrap();
            assert_eq!(last.offset(), capacity - granularity);
            assert_eq!(heap.report().free, 0);
            heap.free(big).unwrap();
            let aligned = heap.alloc(granularity, 1 << 40).unwrap();
            assert_eq!(aligned.offset(), 0);
            heap.free(last).unwrap();
            heap.free(aligned).unwrap();
            heap.check_invariants();
            assert_eq!(heap.report().largest_free, capacity);
        }
    }

    #[test]
    fn alignment_zero_and_small_mean_granularity() {
        let mut heap = Heap::new(1 << 20, 4096).unwrap();
        let a = heap.alloc(1, 0).unwrap();
        let b = heap.alloc(1, 1).unwrap();
        let c = heap.alloc(1, 2048).unwrap();
        assert_eq!([a.offset(), b.offset(), c.offset()], [0, 4096, 8192]);
        assert_eq!(a.size(), 4096);
        for block in [a, b, c] {
            heap.free(block).unwrap();
        }
    }

    #[test]
    fn heap_ids_differ_and_do_not_touch_the_hash() {
        let (a, b) = (Heap::new(4096, 512).unwrap(), Heap::new(4096, 512).unwrap());
        assert_ne!(a.id, b.id);
        assert_eq!(a.op_hash(), b.op_hash());
    }

    #[test]
    fn failed_calls_change_only_the_hash() {
        let mut heap = Heap::new(4096, 512).unwrap();
        let keep = heap.alloc(1024, 0).unwrap();
        let (report, hash) = (heap.report(), heap.op_hash());
        assert!(heap.alloc(0, 0).is_err());
        assert!(heap.alloc(8192, 0).is_err());
        assert!(heap.alloc(512, 12).is_err());
        assert_eq!(heap.report(), report);
        assert_ne!(heap.op_hash(), hash);
        heap.check_invariants();
        heap.free(keep).unwrap();
    }

    #[test]
    fn debug_is_a_summary() {
        let heap = Heap::new(4096, 512).unwrap();
        let text = format!("{heap:?}");
        assert!(text.contains("largest_free: 4096"), "{text}");
    }
}
