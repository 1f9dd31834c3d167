//! [`SymStorage`]: untyped pooled bytes, a tensor library's storage, and [`StorageView`], a
//! typed view of part of it that the pool's collectives read and write.

use crate::buffer::{Buffer, BufferMut, Span};
use crate::host_view::{HostView, HostViewMut};
use crate::pool::{AllocDesc, SymBlock, SymPool};
use crate::raw::{DevicePtr, WindowHandle};
use crate::runtime::{Element, Stream};
use crate::{Error, Result};

/// Untyped device memory in a [`SymPool`]'s window: the storage under a tensor library's
/// tensors, which see it as elements of any type the collectives support.
///
/// Keep it behind an `Arc` and give each tensor a [`StorageView`] (or your own type
/// implementing [`Buffer`] and [`BufferMut`]): collectives write views of shared storage,
/// under the contract written on [`BufferMut`]. A view reinterprets the bytes as `T`, which
/// is sound for every [`Element`]: plain numbers, any bit pattern valid. It must start at a
/// multiple of `T`'s size, so every element is aligned.
///
/// Allocating storage is a pool allocation: every rank makes the same calls, in the same
/// order (see [`SymPool`]). Returned to the pool on drop.
///
/// # Examples
/// One storage, seen as bytes and as `f32`s:
/// ```
/// use symheap::{PoolConfig, ReduceOp, SymPool, SymStorage, emu};
///
/// let got = emu::launch(2, |comm| {
///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
///     let mut storage = SymStorage::uninit(&pool, 16)?;
///     storage.copy_from_host(0, &[1.0f32, 2.0, 3.0, 4.0])?;
///     // Elements 1 and 2, reduced across ranks in place.
///     pool.all_reduce_in_place(&mut storage.view::<f32>(1, 2)?, ReduceOp::Sum)?;
///     storage.to_host::<f32>()
/// })?;
/// assert_eq!(got[1], [1.0, 4.0, 6.0, 4.0]);
/// # Ok::<(), symheap::Error>(())
/// ```
#[derive(Debug)]
pub struct SymStorage {
    alloc: SymBlock,
    bytes: usize,
    /// What it was allocated with: a [`resize`](Self::resize) keeps it.
    desc: AllocDesc,
}

impl SymStorage {
    /// `bytes` bytes whose contents are unspecified (what the memory last held): for a
    /// tensor that is written before it is read, such as a collective's output. No fill is
    /// queued, so this costs an allocation alone.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] and the pool's other allocation errors.
    #[doc(alias("empty", "malloc"))]
    pub fn uninit(pool: &SymPool, bytes: usize) -> Result<Self> {
        SymStorage::uninit_with(pool, bytes, AllocDesc::default())
    }

    /// [`uninit`](Self::uninit), described by `desc` (a tag, see [`AllocDesc`]).
    ///
    /// # Errors
    /// As for [`uninit`](Self::uninit).
    pub fn uninit_with(pool: &SymPool, bytes: usize, desc: AllocDesc) -> Result<Self> {
        let alloc = pool.alloc_with(bytes.max(1) as u64, 0, desc)?;
        Ok(SymStorage { alloc, bytes, desc })
    }

    /// `bytes` zeroed bytes, zeroed in stream order as [`SymVec::zeroed`](crate::SymVec::zeroed)
    /// says.
    ///
    /// # Errors
    /// As for [`uninit`](Self::uninit); the runtime's error.
    pub fn zeroed(pool: &SymPool, bytes: usize) -> Result<Self> {
        SymStorage::zeroed_with(pool, bytes, AllocDesc::default())
    }

    /// [`zeroed`](Self::zeroed), described by `desc` (a tag, see [`AllocDesc`]).
    ///
    /// # Errors
    /// As for [`zeroed`](Self::zeroed).
    pub fn zeroed_with(pool: &SymPool, bytes: usize, desc: AllocDesc) -> Result<Self> {
        let alloc = zeroed_block(pool, bytes, 1, desc)?;
        Ok(SymStorage { alloc, bytes, desc })
    }

    /// A copy of `data`'s bytes.
    ///
    /// # Errors
    /// As for [`zeroed`](Self::zeroed).
    pub fn from_host<T: Element>(pool: &SymPool, data: &[T]) -> Result<Self> {
        SymStorage::from_host_with(pool, data, AllocDesc::default())
    }

    /// [`from_host`](Self::from_host), described by `desc` (a tag, see [`AllocDesc`]).
    ///
    /// # Errors
    /// As for [`zeroed`](Self::zeroed).
    pub fn from_host_with<T: Element>(pool: &SymPool, data: &[T], desc: AllocDesc) -> Result<Self> {
        let bytes = T::slice_as_bytes(data);
        let alloc = block_from_host(pool, bytes, align_of::<T>(), desc)?;
        Ok(SymStorage {
            alloc,
            bytes: bytes.len(),
            desc,
        })
    }

    /// The first `bytes` bytes of `alloc` (a [`SymVec`](crate::SymVec)'s block, untyped),
    /// untagged.
    pub(crate) fn from_block(alloc: SymBlock, bytes: usize) -> Self {
        let desc = AllocDesc::default();
        SymStorage { alloc, bytes, desc }
    }

    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// A view of `len` elements of `T` from element `start` (counted in `T`s, so at byte
    /// `start * size_of::<T>()`), which collectives read and write.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the elements are not within the storage.
    pub fn view<T: Element>(&self, start: usize, len: usize) -> Result<StorageView<'_, T>> {
        let es = size_of::<T>();
        let end = start.checked_add(len).and_then(|end| end.checked_mul(es));
        match end {
            Some(end) if end <= self.bytes => Ok(StorageView {
                storage: self,
                start,
                len,
                _elements: std::marker::PhantomData,
            }),
            _ => Err(Error::invalid(format!(
                "view of {len} elements of {:?} from element {start}: the storage holds {} bytes",
                T::DATA_TYPE,
                self.bytes
            ))),
        }
    }

    /// The whole storage as `T`s.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless its size is a multiple of `T`'s.
    pub fn view_all<T: Element>(&self) -> Result<StorageView<'_, T>> {
        self.view(0, self.elements::<T>("view_all")?)
    }

    /// How many whole `T`s the storage holds, refusing a remainder.
    fn elements<T: Element>(&self, what: &str) -> Result<usize> {
        let es = size_of::<T>();
        if self.bytes.is_multiple_of(es) {
            Ok(self.bytes / es)
        } else {
            Err(Error::invalid(format!(
                "{what}: {} bytes are not a whole number of {:?} elements",
                self.bytes,
                T::DATA_TYPE
            )))
        }
    }

    /// The contents as `T`s, after waiting for queued work on the storage.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless the size is a multiple of `T`'s; as for
    /// [`SymVec::to_host`](crate::SymVec::to_host).
    pub fn to_host<T: Element>(&self) -> Result<Vec<T>> {
        self.view_all::<T>()?.to_host()
    }

    /// Writes `data` at element `start` (counted in `T`s), after waiting for queued work on
    /// the storage. Takes the storage `&mut`, so no view of it lives meanwhile; fill shared
    /// storage before sharing it, or through a device [`copy`](crate::SymPool::copy).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the elements are not within the storage; the runtime's
    /// error.
    pub fn copy_from_host<T: Element>(&mut self, start: usize, data: &[T]) -> Result<()> {
        let ptr = Span::read(&self.view::<T>(start, data.len())?)?.device_ptr();
        let rt = self.alloc.pool().runtime();
        self.alloc.access_idle(|| {
            // SAFETY: `[ptr, +data)` lies in the storage's block (the view checked it), which
            // is idle; `&mut self` excludes every host view.
            unsafe { rt.raw().copy_to_device(ptr, T::slice_as_bytes(data)) }
        })?;
        if start == 0 && size_of_val(data) as u64 >= self.alloc.len() {
            self.alloc.mark_written();
        }
        Ok(())
    }

    /// A host view of the contents as `T`s, after waiting for queued work. Only where device
    /// memory is host-addressable (the emulator). While it lives, work that writes the
    /// storage is refused and the pool does not sleep.
    ///
    /// # Errors
    /// [`Error::NotHostAddressable`] on real devices; [`Error::InvalidArgument`] unless the
    /// size is a multiple of `T`'s; [`Error::Asleep`]; the runtime's error.
    pub fn host<T: Element>(&self) -> Result<HostView<'_, T>> {
        HostView::open(&self.alloc, 0, self.elements::<T>("host")?)
    }

    /// A mutable host view of the contents as `T`s; as for [`host`](Self::host).
    ///
    /// # Errors
    /// As for [`host`](Self::host).
    pub fn host_mut<T: Element>(&mut self) -> Result<HostViewMut<'_, T>> {
        let len = self.elements::<T>("host_mut")?;
        HostViewMut::open(&self.alloc, 0, len)
    }

    /// The window holding the bytes.
    pub fn window(&self) -> WindowHandle {
        self.alloc.window()
    }

    /// The bytes' offset in their window.
    pub fn offset(&self) -> u64 {
        self.alloc.offset()
    }

    /// The first byte's device address.
    pub fn device_ptr(&self) -> DevicePtr {
        self.alloc.device_ptr()
    }

    /// Declares that work on another stream uses this storage; see
    /// [`SymBlock::record_stream`].
    pub fn record_stream(&self, stream: &Stream) {
        self.alloc.record_stream(stream);
    }

    /// The underlying allocation.
    pub fn alloc(&self) -> &SymBlock {
        &self.alloc
    }

    /// What it was allocated with (its tag).
    pub(crate) fn desc(&self) -> AllocDesc {
        self.desc
    }
}

/// `len` elements of `T` from element `start` of a [`SymStorage`]: what the pool's
/// collectives, point-to-point calls and copies take ([`Buffer`], [`BufferMut`]). Borrows
/// the storage shared, so many views of one storage live together; collectives write them
/// under the contract on [`BufferMut`].
#[derive(Debug)]
pub struct StorageView<'a, T: Element> {
    storage: &'a SymStorage,
    start: usize,
    len: usize,
    _elements: std::marker::PhantomData<T>,
}

impl<T: Element> Clone for StorageView<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Element> Copy for StorageView<'_, T> {}

impl<T: Element> StorageView<'_, T> {
    /// How many elements it views.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it views no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first element's index in the storage, counted in `T`s.
    pub fn start(&self) -> usize {
        self.start
    }

    /// The viewed elements, after waiting for queued work on the storage.
    ///
    /// # Errors
    /// As for [`SymVec::to_host`](crate::SymVec::to_host).
    pub fn to_host(&self) -> Result<Vec<T>> {
        read_elements(&self.storage.alloc, self.start, self.len)
    }
}

impl<T: Element> Buffer<T> for StorageView<'_, T> {
    fn alloc(&self) -> &SymBlock {
        &self.storage.alloc
    }
    fn start(&self) -> usize {
        self.start
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl<T: Element> BufferMut<T> for StorageView<'_, T> {}

/// A block of `bytes` (at least one granule) at `align`, zeroed: in stream order if queued
/// work may still use the memory, else at once. What [`SymStorage::zeroed`] and
/// [`SymVec::zeroed`](crate::SymVec::zeroed) allocate.
pub(crate) fn zeroed_block(
    pool: &SymPool,
    bytes: usize,
    align: usize,
    desc: AllocDesc,
) -> Result<SymBlock> {
    let alloc = pool.alloc_with(bytes.max(1) as u64, align as u64, desc)?;
    // A block allocated during a capture is the graph's from the start.
    if alloc.may_be_in_use() || alloc.is_held() {
        // Reused memory that queued work may still use: zeroed in stream order, after it
        // (during a capture, on the capture's stream handle: in the graph, so each replay
        // zeroes it again).
        let stream = pool.target().stream;
        // SAFETY: the block is the caller's, at least `bytes` long; host access waits for
        // the stream, on which it is marked used.
        unsafe { stream.raw().memset_async(alloc.device_ptr(), 0, bytes)? };
        alloc.mark_used_on(stream);
    } else {
        // SAFETY: the block is the caller's, idle and at least `bytes` long.
        unsafe { pool.runtime().raw().memset(alloc.device_ptr(), 0, bytes)? };
    }
    Ok(alloc)
}

/// A block holding a copy of `data` (at least one granule) at `align`, written once queued
/// work that may still use the memory is done.
pub(crate) fn block_from_host(
    pool: &SymPool,
    data: &[u8],
    align: usize,
    desc: AllocDesc,
) -> Result<SymBlock> {
    let alloc = pool.alloc_with(data.len().max(1) as u64, align as u64, desc)?;
    // Reused memory may still be used by queued work: wait for it first.
    alloc.access_idle(|| {
        // SAFETY: the block is the caller's, idle and at least `data.len()` long.
        unsafe {
            pool.runtime()
                .raw()
                .copy_to_device(alloc.device_ptr(), data)
        }
    })?;
    Ok(alloc)
}

/// `len` elements from element `start` of `block` (which the caller checked lie inside it),
/// once no queued work uses the block.
pub(crate) fn read_elements<T: Element>(
    block: &SymBlock,
    start: usize,
    len: usize,
) -> Result<Vec<T>> {
    block.check_specified()?;
    let ptr = block.device_ptr().byte_add((start * size_of::<T>()) as u64);
    let rt = block.pool().runtime();
    block.access_idle(|| {
        let mut out = Vec::with_capacity(len);
        let spare = &mut out.spare_capacity_mut()[..len];
        // SAFETY: `MaybeUninit<T>` has `T`'s layout; the bytes are written before being
        // read.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(spare.as_mut_ptr().cast::<u8>(), size_of_val(spare))
        };
        // SAFETY: `[ptr, +len elements)` lies in the block, which is idle; `bytes` is exactly
        // `len` elements.
        unsafe { rt.raw().copy_to_host(bytes, ptr)? };
        // SAFETY: every element was just written, and any bit pattern is a valid `T` (the
        // `Element` contract).
        unsafe { out.set_len(len) };
        Ok(out)
    })
}
