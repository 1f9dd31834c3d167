//! Views of part of a [`SymVec`]: [`SymSlice`] and [`SymSliceMut`], which the pool's
//! collectives and copies take like whole buffers (a gradient bucket, a slice of an
//! activation), through the [`Buffer`] and [`BufferMut`] traits.

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use crate::buffer::{Buffer, BufferMut};
use crate::pool::SymBlock;
use crate::runtime::Element;
use crate::storage::read_elements;
use crate::{Error, Result, SymVec};

impl<T: Element> Buffer<T> for SymVec<T> {
    fn alloc(&self) -> &SymBlock {
        SymVec::alloc(self)
    }
    fn start(&self) -> usize {
        0
    }
    fn len(&self) -> usize {
        SymVec::len(self)
    }
}

impl<T: Element> BufferMut<T> for SymVec<T> {}

/// A shared view of elements `start..start + len` of a [`SymVec`] ([`SymVec::slice`]), for
/// collectives that read it.
#[derive(Debug, Clone, Copy)]
pub struct SymSlice<'a, T: Element> {
    vec: &'a SymVec<T>,
    start: usize,
    len: usize,
}

/// An exclusive view of elements `start..start + len` of a [`SymVec`]
/// ([`SymVec::slice_mut`], [`SymVec::split_at_mut`]), for collectives that write it.
#[derive(Debug)]
pub struct SymSliceMut<'a, T: Element> {
    block: &'a SymBlock,
    start: usize,
    len: usize,
    /// Borrows the vector mutably: no other view of these elements exists meanwhile.
    _vec: PhantomData<&'a mut SymVec<T>>,
}

impl<T: Element> Buffer<T> for SymSlice<'_, T> {
    fn alloc(&self) -> &SymBlock {
        self.vec.alloc()
    }
    fn start(&self) -> usize {
        self.start
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl<T: Element> Buffer<T> for SymSliceMut<'_, T> {
    fn alloc(&self) -> &SymBlock {
        self.block
    }
    fn start(&self) -> usize {
        self.start
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl<T: Element> BufferMut<T> for SymSliceMut<'_, T> {}

/// `range` of a buffer of `len` elements as `(start, len)`, checked.
fn bounds(range: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e - s)),
        _ => Err(Error::invalid(format!(
            "slice: range {:?}..{:?} is not within the {len} elements",
            range.start_bound(),
            range.end_bound()
        ))),
    }
}

impl<T: Element> SymVec<T> {
    /// A shared view of elements `range` (as for `[T]`), for collectives that read them.
    ///
    /// # Examples
    /// ```
    /// use symheap::{PoolConfig, ReduceOp, SymPool, SymVec, emu};
    ///
    /// let got = emu::launch(2, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
    ///     let grads = SymVec::from_host(&pool, &[1.0f32, 2.0, 3.0, 4.0])?;
    ///     let mut bucket = SymVec::<f32>::zeroed(&pool, 2)?;
    ///     // Reduce the second half only, as a gradient bucket.
    ///     pool.all_reduce(&grads.slice(2..)?, &mut bucket, ReduceOp::Sum)?;
    ///     bucket.to_host()
    /// })?;
    /// assert_eq!(got[0], [6.0, 8.0]);
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `range` is not within the vector.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<SymSlice<'_, T>> {
        let (start, len) = bounds(range, self.len())?;
        Ok(SymSlice {
            vec: self,
            start,
            len,
        })
    }

    /// An exclusive view of elements `range`, for collectives that write them.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `range` is not within the vector.
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<SymSliceMut<'_, T>> {
        let (start, len) = bounds(range, self.len())?;
        Ok(SymSliceMut {
            block: self.alloc(),
            start,
            len,
            _vec: PhantomData,
        })
    }

    /// Two exclusive views, of elements `..mid` and `mid..`: disjoint, so a collective may
    /// write one while another reads or writes the other.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `mid` is past the end.
    pub fn split_at_mut(&mut self, mid: usize) -> Result<(SymSliceMut<'_, T>, SymSliceMut<'_, T>)> {
        if mid > self.len() {
            return Err(Error::invalid(format!(
                "split_at_mut: {mid} is past the {} elements",
                self.len()
            )));
        }
        let block = self.alloc();
        let view = |start, len| SymSliceMut {
            block,
            start,
            len,
            _vec: PhantomData,
        };
        Ok((view(0, mid), view(mid, self.len() - mid)))
    }
}

impl<T: Element> SymSlice<'_, T> {
    /// How many elements it views.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it views no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The viewed elements, after waiting for queued work on the buffer.
    ///
    /// # Errors
    /// As for [`SymVec::to_host`].
    pub fn to_host(&self) -> Result<Vec<T>> {
        read_elements(self.alloc(), self.start, self.len)
    }
}

impl<T: Element> SymSliceMut<'_, T> {
    /// How many elements it views.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it views no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The viewed elements, after waiting for queued work on the buffer.
    ///
    /// # Errors
    /// As for [`SymVec::to_host`].
    pub fn to_host(&self) -> Result<Vec<T>> {
        read_elements(self.block, self.start, self.len)
    }
}
