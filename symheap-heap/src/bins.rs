//! The two-level bitmap over the bins and the head of each bin's free list.
//!
//! Bit `fl` of `fl_map` is set when any bin of first-level class `fl` is non-empty; bit `sl` of
//! `sl_maps[fl]` when bin `fl * SL_COUNT + sl` is. Finding the first non-empty bin at or above a
//! given one is two masked `trailing_zeros`: O(1), independent of how many blocks are free.

use super::node::NIL;
use super::size_class::{BIN_COUNT, FL_COUNT, SL_COUNT};

/// The head of one bin's free list, with its size so that `alloc` can ask "does the head of
/// this bin fit?" without touching the node (a likely cache miss when the answer is no).
#[derive(Debug, Clone, Copy)]
struct Head {
    key: u32,
    /// `min(size in granules, u32::MAX)`: a lower bound of the head's size, exact below
    /// `u32::MAX`.
    size: u32,
}

const EMPTY: Head = Head { key: NIL, size: 0 };

/// Free-list heads plus the bitmaps that say which of them are non-empty.
#[derive(Debug)]
pub(super) struct Bins {
    fl_map: u64,
    sl_maps: [u64; FL_COUNT],
    heads: Box<[Head; BIN_COUNT]>,
}

impl Bins {
    /// All bins empty.
    pub(super) fn new() -> Self {
        Bins {
            fl_map: 0,
            sl_maps: [0; FL_COUNT],
            heads: Box::new([EMPTY; BIN_COUNT]),
        }
    }

    /// The first node of `bin`'s free list, or [`NIL`].
    #[inline]
    pub(super) fn head(&self, bin: usize) -> u32 {
        self.heads[bin].key
    }

    /// The head of `bin`'s list if it may hold `units` granules: `None` means it surely does
    /// not (or the bin is empty); `Some` still needs checking against the node.
    #[inline]
    pub(super) fn head_if_may_fit(&self, bin: usize, units: u64) -> Option<u32> {
        let head = self.heads[bin];
        let may_fit = u64::from(head.size) >= units || head.size == u32::MAX;
        (head.key != NIL && may_fit).then_some(head.key)
    }

    /// Whether a block of `size` granules is smaller than the head of `bin`'s list, or the list
    /// is empty. `false` also when the cached head size cannot tell (both sizes at or above
    /// `u32::MAX`).
    #[inline]
    pub(super) fn is_below_head(&self, bin: usize, size: u64) -> bool {
        let head = self.heads[bin];
        head.key == NIL || size < u64::from(head.size)
    }

    /// Makes `node` (of `size` granules) the head of `bin`'s list, which held `old_head`
    /// ([`NIL`] if it was empty).
    #[inline]
    pub(super) fn push_head(&mut self, bin: usize, old_head: u32, node: u32, size: u64) {
        self.heads[bin] = Head {
            key: node,
            size: saturate(size),
        };
        if old_head == NIL {
            let (fl, sl) = (bin / SL_COUNT, bin % SL_COUNT);
            self.sl_maps[fl] |= 1 << sl;
            self.fl_map |= 1 << fl;
        }
    }

    /// Replaces the head of `bin`'s list after the old head left: `next`, of `next_size`
    /// granules, or [`NIL`].
    #[inline]
    pub(super) fn pop_head(&mut self, bin: usize, next: u32, next_size: u64) {
        self.heads[bin] = Head {
            key: next,
            size: saturate(next_size),
        };
        if next == NIL {
            let (fl, sl) = (bin / SL_COUNT, bin % SL_COUNT);
            self.sl_maps[fl] &= !(1 << sl);
            if self.sl_maps[fl] == 0 {
                self.fl_map &= !(1 << fl);
            }
        }
    }

    /// The first non-empty bin at or above `bin`, if any. `bin` may be `BIN_COUNT`.
    #[inline]
    pub(super) fn first_at_or_above(&self, bin: usize) -> Option<usize> {
        if bin >= BIN_COUNT {
            return None;
        }
        let (fl, sl) = (bin / SL_COUNT, bin % SL_COUNT);
        let in_class = self.sl_maps[fl] & (u64::MAX << sl);
        if in_class != 0 {
            return Some(fl * SL_COUNT + in_class.trailing_zeros() as usize);
        }
        // `fl + 1 <= FL_COUNT <= 64`; a shift by 64 would overflow, so mask in two steps.
        let above = self.fl_map & ((u64::MAX << fl) << 1);
        if above == 0 {
            return None;
        }
        let fl = above.trailing_zeros() as usize;
        Some(fl * SL_COUNT + self.sl_maps[fl].trailing_zeros() as usize)
    }

    /// The highest non-empty bin, if any.
    #[inline]
    pub(super) fn last(&self) -> Option<usize> {
        if self.fl_map == 0 {
            return None;
        }
        let fl = 63 - self.fl_map.leading_zeros() as usize;
        Some(fl * SL_COUNT + 63 - self.sl_maps[fl].leading_zeros() as usize)
    }
}

/// `size` clamped to a u32.
#[inline]
fn saturate(size: u64) -> u32 {
    u32::try_from(size).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty() {
        let bins = Bins::new();
        assert_eq!(bins.first_at_or_above(0), None);
        assert_eq!(bins.last(), None);
    }

    #[test]
    fn search_crosses_classes_and_skips_lower_bins() {
        let mut bins = Bins::new();
        for bin in [3, SL_COUNT + 5, 7 * SL_COUNT, BIN_COUNT - 1] {
            bins.push_head(bin, NIL, 1, 100);
        }
        bins.push_head(3, 1, 2, 3); // a second node: no bitmap change
        assert_eq!(bins.head(3), 2);
        assert_eq!(bins.head_if_may_fit(3, 3), Some(2));
        assert_eq!(bins.head_if_may_fit(3, 4), None);
        bins.pop_head(3, 1, 100);
        assert_eq!(bins.first_at_or_above(0), Some(3));
        bins.push_head(3, 1, 4, 1 << 40); // sizes beyond u32 may always fit
        assert_eq!(bins.head_if_may_fit(3, 1 << 41), Some(4));
        bins.pop_head(3, 1, 100);
        assert_eq!(bins.first_at_or_above(0), Some(3));
        assert_eq!(bins.first_at_or_above(3), Some(3));
        assert_eq!(bins.first_at_or_above(4), Some(SL_COUNT + 5));
        assert_eq!(bins.first_at_or_above(SL_COUNT + 6), Some(7 * SL_COUNT));
        assert_eq!(
            bins.first_at_or_above(7 * SL_COUNT + 1),
            Some(BIN_COUNT - 1)
        );
        assert_eq!(bins.first_at_or_above(BIN_COUNT), None);
        assert_eq!(bins.last(), Some(BIN_COUNT - 1));

        bins.pop_head(BIN_COUNT - 1, NIL, 0);
        assert_eq!(bins.first_at_or_above(7 * SL_COUNT + 1), None);
        assert_eq!(bins.last(), Some(7 * SL_COUNT));
        bins.pop_head(7 * SL_COUNT, NIL, 0);
        bins.pop_head(SL_COUNT + 5, NIL, 0);
        bins.pop_head(3, NIL, 0);
        assert_eq!(bins.first_at_or_above(0), None);
        assert_eq!(bins.fl_map, 0);
    }
}
