//! What the heap hands out ([`Block`]) and what it reports ([`HeapReport`]).

use std::num::NonZeroU32;

/// A live allocation: a range of the heap, in bytes.
///
/// What offset-allocator calls an `Allocation`.
///
/// A `Block` is neither `Copy` nor `Clone`, and [`Heap::free`](crate::Heap::free) takes it by
/// value, so a double free cannot be written in safe code. It remembers which heap made it and
/// where its metadata lives, so freeing it is O(1) without a lookup.
///
/// Dropping a `Block` without freeing it leaks its range for the life of the heap (the heap
/// never touches the memory it manages, so nothing else happens).
///
/// A block cannot be cloned:
/// ```compile_fail,E0599
/// # use symheap_heap::Heap;
/// let mut heap = Heap::new(1 << 20, 512)?;
/// let block = heap.alloc(512, 0)?;
/// let copy = block.clone();
/// # Ok::<(), symheap_heap::HeapError>(())
/// ```
/// nor freed twice:
/// ```compile_fail,E0382
/// # use symheap_heap::Heap;
/// let mut heap = Heap::new(1 << 20, 512)?;
/// let block = heap.alloc(512, 0)?;
/// heap.free(block)?;
/// heap.free(block)?;
/// # Ok::<(), symheap_heap::HeapError>(())
/// ```
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a Block that is dropped instead of freed leaks its range of the heap"]
#[doc(alias = "Allocation")]
pub struct Block {
    pub(super) offset: u64,
    pub(super) size: u64,
    /// The key of the block's node in the heap's arena.
    pub(super) node: u32,
    /// The id of the heap that made it (process-unique; never used to choose an offset). Non-zero,
    /// so `Option<Block>` is no bigger than `Block` (24 bytes).
    pub(super) heap: NonZeroU32,
}

impl Block {
    /// The block's key: unique among the heap's live blocks, reused after a free, and dense
    /// (below the largest number of blocks and free regions the heap has held at once), so a
    /// caller can keep its own per-block data in a `Vec` indexed by it, as symheap's pool does.
    /// [`HeapRegion::key`] is the same key. O(1).
    ///
    /// ```
    /// use symheap_heap::Heap;
    ///
    /// let mut heap = Heap::new(1 << 20, 512)?;
    /// let (a, b) = (heap.alloc(512, 0)?, heap.alloc(512, 0)?);
    /// assert_ne!(a.key(), b.key());
    /// let key = b.key();
    /// let region = heap.regions().into_iter().find(|r| r.offset == b.offset()).unwrap();
    /// assert_eq!(region.key, key);
    /// heap.free(a)?;
    /// heap.free(b)?;
    /// # Ok::<(), symheap_heap::HeapError>(())
    /// ```
    #[inline]
    pub fn key(&self) -> u32 {
        self.node
    }

    /// Offset of the first byte from the start of the heap; a multiple of the granularity and of
    /// the alignment asked for.
    #[inline]
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes granted: the request rounded up to a multiple of the granularity.
    #[inline]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// One past the last byte: `offset() + size()`.
    #[inline]
    pub fn end(&self) -> u64 {
        self.offset + self.size
    }
}

/// A range of a heap, from [`Heap::regions`](crate::Heap::regions).
///
/// Non-exhaustive, so that a field can be added without breaking callers: read its fields;
/// only the heap builds one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeapRegion {
    /// Offset in bytes.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// A live block (else a free region).
    pub live: bool,
    /// The range's key: a live block's is its [`Block::key`]; a free region's is unique among
    /// the heap's ranges too, but says nothing beyond this snapshot.
    pub key: u32,
}

/// A snapshot of a heap's accounting, from [`Heap::report`](crate::Heap::report) (what
/// offset-allocator calls a `StorageReport`).
///
/// Byte counts are `u64`; counts of blocks and regions are `usize` (each one has metadata in
/// host memory, so they are bounded by it). `allocated + free == capacity` always holds.
///
/// Non-exhaustive, so that a field can be added without breaking callers: read its fields;
/// only the heap builds one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[doc(alias = "StorageReport")]
pub struct HeapReport {
    /// Total bytes managed.
    pub capacity: u64,
    /// Bytes in live blocks (sum of their [`Block::size`]).
    pub allocated: u64,
    /// Bytes not in live blocks: `capacity - allocated`.
    pub free: u64,
    /// Size in bytes of the largest free region (0 when full): the largest request with
    /// alignment at or below the granularity that can succeed right now.
    pub largest_free: u64,
    /// Number of live blocks.
    pub live_blocks: usize,
    /// Number of free regions. Free neighbours are always merged, so no two of them touch.
    pub free_regions: usize,
}

impl std::fmt::Display for HeapReport {
    /// One line: "`allocated` of `capacity` in `live_blocks` blocks; `free` free in
    /// `free_regions` regions, largest `largest_free`", sizes in binary units.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} in {} blocks; {} free in {} regions, largest {}",
            Bytes(self.allocated),
            Bytes(self.capacity),
            self.live_blocks,
            Bytes(self.free),
            self.free_regions,
            Bytes(self.largest_free)
        )
    }
}

/// A byte count that displays in binary units ("512 B", "1.50 KiB", "64.00 MiB", "2.00 GiB"),
/// with two decimals from 1 KiB on: how [`HeapReport`] and [`OutOfSpace`](crate::OutOfSpace)
/// print sizes (and symheap's pool, so that every size it prints reads the same way).
///
/// ```
/// use symheap_heap::Bytes;
///
/// assert_eq!(Bytes(1023).to_string(), "1023 B");
/// assert_eq!(Bytes(3 << 29).to_string(), "1.50 GiB");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub u64);

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match binary_units(self.0) {
            None => write!(f, "{} B", self.0),
            Some((value, unit)) => write!(f, "{value:.2} {unit}"),
        }
    }
}

/// `bytes` in the largest binary unit (KiB .. EiB) it reaches, or `None` below 1 KiB: the
/// scaling [`Bytes`] prints, for a caller that formats the value itself (symheap's heap map).
///
/// ```
/// use symheap_heap::binary_units;
///
/// assert_eq!(binary_units(512), None);
/// assert_eq!(binary_units(3 << 20), Some((3.0, "MiB")));
/// ```
pub fn binary_units(bytes: u64) -> Option<(f64, &'static str)> {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return None;
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    Some((value, UNITS[unit]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_in_binary_units() {
        let shown: Vec<String> = [0, 1023, 1536, 64 << 20, 3 << 30]
            .into_iter()
            .map(|n| Bytes(n).to_string())
            .collect();
        assert_eq!(
            shown,
            ["0 B", "1023 B", "1.50 KiB", "64.00 MiB", "3.00 GiB"]
        );
    }

    #[test]
    fn handles_stay_small() {
        // Users keep one per tensor: keep it three words, with a niche for `Option`.
        assert_eq!(size_of::<Block>(), 24);
        assert_eq!(size_of::<Option<Block>>(), 24);
    }
}
