//! Size classes: the mapping from a block size (in granules) to a TLSF bin.
//!
//! A bin index is a tiny floating-point number: the first level is `floor(log2(size))` and the
//! second level is the next [`SL_BITS`] bits of the size below the leading one, so every
//! power-of-two range `[2^e, 2^(e+1))` is split into [`SL_COUNT`] equal sub-ranges. Sizes below
//! `SL_COUNT` granules get one exact bin each. The mapping is monotonic and gap-free, so "the
//! first non-empty bin at or above `b`" is a bitmap search (see [`super::bins`]).
//!
//! The relative width of a bin is at most `1 / SL_COUNT` of its lower bound: with
//! `SL_BITS = 5` a bin `[lo, hi)` has `hi - lo <= lo / 32` (about 3.1 %).

/// Bits of the size below its leading one that select the second-level bin.
pub(super) const SL_BITS: u32 = 5;
/// Second-level subdivisions per power of two.
pub(super) const SL_COUNT: usize = 1 << SL_BITS;
/// First-level classes: one linear class for sizes below `SL_COUNT`, then one per exponent
/// `SL_BITS..=63`.
pub(super) const FL_COUNT: usize = 64 - SL_BITS as usize + 1;
/// Total number of bins.
pub(super) const BIN_COUNT: usize = FL_COUNT * SL_COUNT;

// The first-level bitmap is one u64, the second-level ones are u64 each.
const _: () = assert!(FL_COUNT <= 64 && SL_COUNT <= 64);

/// The bin holding free blocks of `units` granules (`units >= 1`).
#[inline]
pub(super) fn bin_of(units: u64) -> usize {
    debug_assert!(units >= 1);
    // Branch-free: below `SL_COUNT` the exponent is clamped to `SL_BITS`, so the shift is 0 and
    // the bin is `units` itself; above, `units >> shift` is `SL_COUNT + mantissa`, which
    // supplies the `+ 1` of the first level.
    let exp = 63 - (units | SL_COUNT as u64).leading_zeros();
    let shift = exp - SL_BITS;
    ((shift as usize) << SL_BITS) + (units >> shift) as usize
}

/// The smallest size (in granules) that maps to `bin`.
#[inline]
pub(super) fn bin_floor(bin: usize) -> u64 {
    debug_assert!(bin < BIN_COUNT);
    let (fl, sl) = (bin / SL_COUNT, bin % SL_COUNT);
    if fl == 0 {
        return sl as u64;
    }
    let exp = fl as u32 + SL_BITS - 1;
    ((SL_COUNT + sl) as u64) << (exp - SL_BITS)
}

/// The first bin whose every block holds at least `units` granules; `BIN_COUNT` if there is none.
///
/// This is the "round up to the next bin" of TLSF: any block found at or above it fits without
/// looking at its size, which is what makes the search O(1).
#[inline]
pub(super) fn bin_at_least(units: u64) -> usize {
    let bin = bin_of(units);
    if bin_floor(bin) == units {
        bin
    } else {
        bin + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_sizes_have_exact_bins() {
        for units in 1..(2 * SL_COUNT as u64) {
            assert_eq!(bin_floor(bin_of(units)), units);
            assert_eq!(bin_at_least(units), bin_of(units));
        }
    }

    #[test]
    fn mapping_is_monotonic_and_gap_free() {
        let mut prev = bin_of(1);
        let end = if cfg!(miri) { 5_000 } else { 100_000u64 };
        for units in 2..end {
            let bin = bin_of(units);
            assert!(bin == prev || bin == prev + 1, "gap at {units}");
            prev = bin;
        }
    }

    #[test]
    fn floor_is_the_smallest_member() {
        for bin in 1..BIN_COUNT {
            let lo = bin_floor(bin);
            assert_eq!(bin_of(lo), bin);
            if lo > 1 {
                assert_eq!(bin_of(lo - 1), bin - 1);
            }
        }
    }

    #[test]
    fn extremes() {
        assert_eq!(bin_of(u64::MAX), BIN_COUNT - 1);
        assert_eq!(bin_at_least(u64::MAX), BIN_COUNT);
        assert_eq!(bin_at_least(1 << 63), BIN_COUNT - SL_COUNT);
    }

    #[test]
    fn bin_width_is_bounded() {
        for bin in SL_COUNT..BIN_COUNT - 1 {
            let (lo, hi) = (bin_floor(bin), bin_floor(bin + 1));
            assert!(hi - lo <= lo / SL_COUNT as u64, "bin {bin}: [{lo}, {hi})");
        }
    }

    #[test]
    fn rounded_up_bins_only_hold_fitting_blocks() {
        for units in [
            1u64,
            31,
            32,
            33,
            63,
            64,
            65,
            1000,
            4097,
            1 << 40,
            (1 << 40) + 1,
        ] {
            let bin = bin_at_least(units);
            assert!(bin_floor(bin) >= units);
            assert!(bin_floor(bin - 1) < units || bin == bin_of(units));
        }
    }
}
