//! The rolling hash of a heap's call sequence, so ranks can compare histories cheaply.
//!
//! It mixes only call kinds, arguments and outcomes (never heap ids, addresses or node keys), with
//! fixed constants, so it is the same on every machine, process and run. It is a checksum, not a
//! cryptographic hash: equal histories always hash equal, different ones differ with
//! overwhelming probability.

/// What a recorded call was and how it ended.
#[derive(Debug, Clone, Copy)]
#[repr(u64)]
pub(super) enum Op {
    /// `Heap::new` (seeds the hash with capacity and granularity).
    New = 1,
    /// A successful `alloc` (recorded with its offset).
    Alloc = 2,
    /// An `alloc` that ran out of memory.
    AllocOutOfMemory = 3,
    /// An `alloc` rejected as invalid.
    AllocInvalid = 4,
    /// A successful `free` (recorded with the block's offset and size).
    Free = 5,
    /// A `free` rejected as invalid (a block of another heap).
    FreeInvalid = 6,
    /// A word folded in by [`fold_words`] (not a heap call).
    Word = 7,
    /// A region of the placement a `rebase_op_hash` restarted from.
    Rebased = 8,
}

/// The running state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OpHash(u64);

// Odd 64-bit constants with well-spread bits (from wyhash).
const K: [u64; 5] = [
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
    0x8ebc_6af0_9c88_c6e3,
    0x5899_65cc_7537_4cc3,
    0x1d8e_4e27_c47d_124f,
];

/// 64x64 -> 128-bit multiply, folded: a strong, cheap mixer.
#[inline]
fn fold_mul(a: u64, b: u64) -> u64 {
    let wide = u128::from(a) * u128::from(b);
    (wide as u64) ^ ((wide >> 64) as u64)
}

impl OpHash {
    /// The hash of a heap that has seen only its construction.
    pub(super) fn new(capacity: u64, granularity: u64) -> Self {
        let mut hash = OpHash(K[4]);
        hash.record(Op::New, capacity, granularity, 0);
        hash
    }

    /// Folds one call into the hash with one wyhash-style multiply-fold of two words: the state
    /// with `a` and `c` (spread by an odd multiplier, a bijection, so that structured
    /// differences in `a` and `c` cannot cancel), and `b` with a constant per kind of call. The
    /// hot path records a call per `alloc` and `free`, so this is kept to two multiplies.
    #[inline]
    pub(super) fn record(&mut self, op: Op, a: u64, b: u64, c: u64) {
        let left = self.0 ^ a ^ c.wrapping_mul(K[2]);
        let right = b ^ K[1].wrapping_mul(op as u64) ^ K[3];
        self.0 = fold_mul(left ^ K[0], right);
    }

    /// The current value.
    pub(super) fn value(self) -> u64 {
        self.0
    }
}

/// Folds `words` into one checksum with the mixer of [`Heap::op_hash`](crate::Heap::op_hash):
/// for a caller that combines several heaps' hashes with its own events into one value that
/// ranks compare (symheap's pool folds its windows' heaps, its pending frees and its
/// collectives).
///
/// Like the op hash it depends only on the words and their order, the same in every process,
/// build and machine; it is a checksum, not a cryptographic hash. O(n) in the words.
///
/// ```
/// use symheap_heap::{Heap, fold_words};
///
/// let (a, b) = (Heap::new(1 << 20, 512)?, Heap::new(1 << 21, 512)?);
/// let both = fold_words([a.op_hash(), b.op_hash()]);
/// assert_eq!(both, fold_words([a.op_hash(), b.op_hash()]));
/// assert_ne!(both, fold_words([b.op_hash(), a.op_hash()]));
/// # Ok::<(), symheap_heap::HeapError>(())
/// ```
pub fn fold_words(words: impl IntoIterator<Item = u64>) -> u64 {
    let mut hash = OpHash(K[4]);
    for word in words {
        hash.record(Op::Word, word, 0, 0);
    }
    hash.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_arguments_matter() {
        let base = OpHash::new(1 << 20, 512);
        let mut a = base;
        a.record(Op::Alloc, 512, 512, 0);
        a.record(Op::Alloc, 1024, 512, 512);
        let mut b = base;
        b.record(Op::Alloc, 1024, 512, 512);
        b.record(Op::Alloc, 512, 512, 0);
        let mut c = base;
        c.record(Op::AllocOutOfMemory, 512, 512, 0);
        c.record(Op::Alloc, 1024, 512, 512);
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_ne!(OpHash::new(1 << 20, 512), OpHash::new(1 << 21, 512));
    }

    #[test]
    fn value_is_pinned() {
        // The hash must be identical on every machine, build and run: pin one value (computed
        // independently from the definition above).
        let mut hash = OpHash::new(1 << 30, 512);
        hash.record(Op::Alloc, 1000, 0, 0);
        hash.record(Op::Free, 0, 1024, 0);
        assert_eq!(hash.value(), 0x1f6e_ed4a_cbe6_9dd4);
    }
}
