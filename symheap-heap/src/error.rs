//! The heap's error ([`HeapError`]): a call that can never work, or a request that does not fit
//! now ([`OutOfSpace`]).

use std::fmt;

use crate::Bytes;

/// What can go wrong in a heap call: two cases, as with offset-allocator's `None`, but saying
/// why.
///
/// Either way the heap is unchanged, except that [`Heap::op_hash`](crate::Heap::op_hash)
/// records the failed call.
///
/// Non-exhaustive, so that a case can be added without breaking callers.
///
/// # Examples
///
/// ```
/// use symheap_heap::{Heap, HeapError};
///
/// let mut heap = Heap::new(4096, 512)?;
/// match heap.alloc(8192, 0) {
///     Err(HeapError::OutOfSpace(oom)) => assert_eq!(oom.largest_free, 4096),
///     other => panic!("expected OutOfSpace, got {other:?}"),
/// }
/// assert!(matches!(heap.alloc(0, 0), Err(HeapError::InvalidArgument(_))));
/// # Ok::<(), HeapError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeapError {
    /// The caller passed something that can never work: a granularity that is not a power of
    /// two, a capacity that is not a non-zero multiple of it, size 0, an alignment that is
    /// neither 0 nor a power of two, an overflowing size, a block of another heap. The message
    /// names the call and the value.
    InvalidArgument(String),
    /// No free region can hold the request now. Carries what was asked and what was free.
    OutOfSpace(OutOfSpace),
}

/// What [`HeapError::OutOfSpace`] reports: the request and the heap's free space at the time,
/// enough for a caller to build its own report (a pool adds the setting to raise).
///
/// Non-exhaustive, so that a field can be added without breaking callers: read its fields;
/// only the heap builds one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutOfSpace {
    /// Bytes asked for (before rounding up to the granularity).
    pub requested: u64,
    /// Alignment asked for, after rounding up to the granularity.
    pub align: u64,
    /// Total bytes managed: the heap's capacity.
    pub capacity: u64,
    /// Free bytes at the time of the request.
    pub free: u64,
    /// The largest free region at the time of the request, in bytes.
    pub largest_free: u64,
}

impl fmt::Display for OutOfSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "out of space: asked for {} bytes (align {}), {} of {} bytes free, largest free \
             region {} bytes; raise the heap capacity (Heap::new) (now {} bytes, {})",
            self.requested,
            self.align,
            self.free,
            self.capacity,
            self.largest_free,
            self.capacity,
            Bytes(self.capacity)
        )
    }
}

impl fmt::Display for HeapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeapError::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            HeapError::OutOfSpace(oom) => oom.fmt(f),
        }
    }
}

impl std::error::Error for HeapError {}

impl HeapError {
    /// Shorthand for [`HeapError::InvalidArgument`].
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        HeapError::InvalidArgument(msg.into())
    }
}
