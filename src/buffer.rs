//! [`Buffer`] and [`BufferMut`]: what the pool's collectives, point-to-point calls and copies
//! take. This crate's own buffers implement them ([`SymVec`](crate::SymVec), its slices, the
//! views of a [`SymStorage`](crate::SymStorage)); so may a tensor library's own tensor and
//! view types, and then the pool runs them with the same checks, op hash, strict mode, path
//! record and stats as a `SymVec`.
//!
//! The traits are safe to implement: the pool trusts nothing they return. It asks each
//! buffer once for its block, first element and length ([`Span::read`], [`Span::write`]),
//! checks that the block is the pool's and that the elements lie inside it, and computes the
//! device address itself.

use crate::pool::SymBlock;
use crate::raw::DevicePtr;
use crate::runtime::Element;
use crate::{Error, Result};

/// Pooled device memory of `T`s that a collective may read: `len` elements from element
/// `start` of a pool block.
///
/// Implement it for a tensor or view type of your own to pass it to every pool collective,
/// [`send`](crate::SymPool::send) and [`copy`](crate::SymPool::copy), with no `unsafe`: the
/// pool checks what the methods return (the block is this pool's, and `start + len` elements
/// of `T` fit in it) and refuses the call with [`Error::InvalidArgument`] otherwise.
///
/// Only contiguous elements can be passed: a strided view is made contiguous (a
/// [`copy`](crate::SymPool::copy) into a scratch buffer) by the library first, as for any
/// collective library.
///
/// # Examples
/// A tensor over shared, untyped storage, as tensor libraries keep it:
/// ```
/// use std::sync::Arc;
/// use symheap::{Buffer, BufferMut, PoolConfig, ReduceOp, SymBlock, SymPool, SymStorage, emu};
///
/// /// A contiguous f32 tensor: `len` elements from element `start` of shared storage.
/// struct Tensor {
///     storage: Arc<SymStorage>,
///     start: usize,
///     len: usize,
/// }
///
/// impl Buffer<f32> for Tensor {
///     fn alloc(&self) -> &SymBlock {
///         self.storage.alloc()
///     }
///     fn start(&self) -> usize {
///         self.start
///     }
///     fn len(&self) -> usize {
///         self.len
///     }
/// }
/// // Collectives may write it: the library orders its own work (see `BufferMut`).
/// impl BufferMut<f32> for Tensor {}
///
/// let got = emu::launch(2, |comm| {
///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
///     let storage = Arc::new(SymStorage::from_host(&pool, &[1.0f32, 2.0, 3.0, 4.0])?);
///     // The second half, as a view over the same storage.
///     let mut half = Tensor { storage: storage.clone(), start: 2, len: 2 };
///     pool.all_reduce_in_place(&mut half, ReduceOp::Sum)?;
///     storage.to_host::<f32>()
/// })?;
/// assert_eq!(got[0], [1.0, 2.0, 6.0, 8.0]);
/// # Ok::<(), symheap::Error>(())
/// ```
pub trait Buffer<T: Element> {
    /// The pool block holding the elements.
    fn alloc(&self) -> &SymBlock;
    /// The first element's index, counted in `T`s from the block's start.
    fn start(&self) -> usize;
    /// How many elements.
    fn len(&self) -> usize;
    /// Whether it holds no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A [`Buffer`] a collective may also write.
///
/// This crate's exclusive buffers implement it (a `&mut` [`SymVec`](crate::SymVec), a
/// [`SymSliceMut`](crate::SymSliceMut)), and so do the views of a
/// [`SymStorage`](crate::SymStorage), which borrow it shared: a tensor library keeps storage
/// behind an `Arc`, with many views, and its collectives must write them.
///
/// # The contract for shared storage
/// A collective writing a buffer that other values also view is sound, and its result
/// defined, under these rules, which the pool enforces where it can and the library keeps
/// where it cannot:
/// - **Host views are excluded by the pool.** Work that writes a block is refused with
///   [`Error::InvalidArgument`] while a [`HostView`](crate::HostView) of that block lives;
///   a host view opened later waits for the queued work first. So no host reference ever
///   sees device memory change under it.
/// - **Device hazards are the library's**, as with any stream-ordered device API: the pool
///   runs a handle's work in program order on its stream, so work on one stream never races.
///   Work on different streams ([`SymPool::on`](crate::SymPool::on)) that writes
///   overlapping elements, or reads what another writes, must be ordered by the library
///   (an [`Event`](crate::Event)); otherwise the result is unspecified, as on the device.
pub trait BufferMut<T: Element>: Buffer<T> {}

/// A buffer as the pool uses it: what its methods returned, once, and checked.
#[derive(Clone, Copy)]
pub(crate) struct Span<'a> {
    block: &'a SymBlock,
    /// The first element's byte offset in the block.
    start_bytes: u64,
    /// The element count.
    len: usize,
    elem_bytes: u64,
    written: bool,
}

impl<'a> Span<'a> {
    /// A buffer the call reads.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if its elements do not lie inside its block.
    pub(crate) fn read<T: Element>(buffer: &'a (impl Buffer<T> + ?Sized)) -> Result<Self> {
        let (block, start, len) = (buffer.alloc(), buffer.start(), buffer.len());
        let elem_bytes = size_of::<T>() as u64;
        let bytes = |n: usize| (n as u64).checked_mul(elem_bytes);
        let end = bytes(start)
            .zip(bytes(len))
            .and_then(|(s, l)| s.checked_add(l));
        match end {
            Some(end) if end <= block.capacity() => Ok(Span {
                block,
                start_bytes: start as u64 * elem_bytes,
                len,
                elem_bytes,
                written: false,
            }),
            _ => Err(Error::invalid(format!(
                "a buffer of {len} elements of {:?} from element {start} does not fit in its \
                 block of {} bytes (at window offset {:#x})",
                T::DATA_TYPE,
                block.capacity(),
                block.offset()
            ))),
        }
    }

    /// A buffer the call writes.
    ///
    /// # Errors
    /// As for [`read`](Self::read).
    pub(crate) fn write<T: Element>(buffer: &'a (impl BufferMut<T> + ?Sized)) -> Result<Self> {
        Ok(Span {
            written: true,
            ..Span::read(buffer)?
        })
    }

    /// The pool block.
    pub(crate) fn alloc(&self) -> &'a SymBlock {
        self.block
    }

    /// The element count.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The first element's device address.
    pub(crate) fn device_ptr(&self) -> DevicePtr {
        self.block.device_ptr().byte_add(self.start_bytes)
    }

    /// Whether the call writes it.
    pub(crate) fn is_written(&self) -> bool {
        self.written
    }

    /// Where the buffer is, in terms equal on every rank, for the op hash: its block's
    /// location, then its first byte in the block and its length in bytes.
    pub(crate) fn location(&self) -> [u64; 4] {
        let [segment, offset] = self.block.location();
        [
            segment,
            offset,
            self.start_bytes,
            self.len as u64 * self.elem_bytes,
        ]
    }
}
