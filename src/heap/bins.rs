//! The two-level bitmap over the bins and the head of each bin's free list.
//!
//! Bit `fl` of `fl_map` is set when any bin of first-level class `fl` is non-empty; bit `sl` of
//! `sl_maps[fl]` when bin `fl * SL_COUNT + sl` is. Finding the first non-empty bin at or above a
//! given one is two masked `trailing_zeros`: O(1), independent of how many blocks are free.

use super::node::NIL;
use super::size_class::{BIN_COUNT, FL_COUNT, SL_COUNT};

/// Free-list heads plus the bitmaps that say which of them are non-empty.
#[derive(Debug)]
pub(super) struct Bins {
    fl_map: u64,
    sl_maps: [u64; FL_COUNT],
    heads: Box<[u32; BIN_COUNT]>,
}

impl Bins {
    /// All bins empty.
    pub(super) fn new() -> Self {
        Bins {
            fl_map: 0,
            sl_maps: [0; FL_COUNT],
            heads: Box::new([NIL; BIN_COUNT]),
        }
    }

    /// The first node of `bin`'s free list, or [`NIL`].
    #[inline]
    pub(super) fn head(&self, bin: usize) -> u32 {
        self.heads[bin]
    }

    /// Replaces the head of `bin`'s list and keeps the bitmaps in step with it.
    #[inline]
    pub(super) fn set_head(&mut self, bin: usize, node: u32) {
        self.heads[bin] = node;
        let (fl, sl) = (bin / SL_COUNT, bin % SL_COUNT);
        if node == NIL {
            self.sl_maps[fl] &= !(1 << sl);
            if self.sl_maps[fl] == 0 {
                self.fl_map &= !(1 << fl);
            }
        } else {
            self.sl_maps[fl] |= 1 << sl;
            self.fl_map |= 1 << fl;
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
            bins.set_head(bin, 1);
        }
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

        bins.set_head(BIN_COUNT - 1, NIL);
        assert_eq!(bins.first_at_or_above(7 * SL_COUNT + 1), None);
        assert_eq!(bins.last(), Some(7 * SL_COUNT));
        bins.set_head(7 * SL_COUNT, NIL);
        bins.set_head(SL_COUNT + 5, NIL);
        bins.set_head(3, NIL);
        assert_eq!(bins.first_at_or_above(0), None);
        assert_eq!(bins.fl_map, 0);
    }
}
