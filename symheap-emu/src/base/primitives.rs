//! What the staged and symmetric algorithms are built from, besides [`crate::base::reduce`]: a byte
//! copy between device ranges and the split of a buffer among the ranks.

/// Copies `len` bytes (overlap allowed; nothing to do when `dst == src`).
///
/// # Safety
/// Both ranges are valid for `len` bytes (a checked job's device ranges are), and no other
/// thread writes them during the copy.
pub(crate) unsafe fn copy(dst: usize, src: usize, len: usize) {
    if len > 0 && dst != src {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
    }
}

/// `[lo, hi)`: part `j` of `len` elements split as evenly as possible in `n` parts.
pub(crate) fn part(len: usize, n: u32, j: u32) -> (usize, usize) {
    let n = n as usize;
    let j = j as usize;
    (len * j / n, len * (j + 1) / n)
}
