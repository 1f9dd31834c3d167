//! [`SymVec`]: a typed array in pooled device memory.

use std::marker::PhantomData;

use crate::host_view::{HostView, HostViewMut};
use crate::pool::{AllocDesc, SymBlock, SymPool};
use crate::raw::{DevicePtr, WindowHandle};
use crate::runtime::{Element, Stream};
use crate::storage::{SymStorage, block_from_host, read_elements, zeroed_block};
use crate::{Error, Result};

/// A fixed-length array of `T` in a [`SymPool`]'s window: a tensor's storage, ready for the
/// pool's collectives. Returned to the pool on drop.
///
/// Device memory is not host memory: reading and writing go through
/// [`to_host`](Self::to_host) and [`copy_from_host`](Self::copy_from_host), which wait for
/// queued work on the buffer first. Direct host views ([`host`](Self::host),
/// [`host_mut`](Self::host_mut)) exist only where the runtime says device memory is
/// host-addressable (the emulator).
///
/// # Examples
/// ```
/// use symheap::{PoolConfig, SymPool, SymVec, emu};
///
/// emu::launch(1, |comm| {
///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
///     let mut v = SymVec::<i32>::zeroed(&pool, 3)?;
///     v.copy_from_host(&[1, 2, 3])?;
///     assert_eq!(v.to_host()?, [1, 2, 3]);
///     Ok(())
/// })?;
/// # Ok::<(), symheap::Error>(())
/// ```
pub struct SymVec<T: Element> {
    alloc: SymBlock,
    len: usize,
    _elements: PhantomData<T>,
}

impl<T: Element> std::fmt::Debug for SymVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SymVec")
            .field("len", &self.len)
            .field("alloc", &self.alloc)
            .finish()
    }
}

impl<T: Element> SymVec<T> {
    /// `len` zeroed elements. A zero-length vector still holds one granule, so it has a
    /// window and offset like any other.
    ///
    /// Memory that queued work may still use is zeroed in stream order on the handle's stream
    /// (the pool's own, or the one [`SymPool::on`] binds), so the pool's collectives and
    /// copies on any stream, and host access, see the zeros. Work the pool does not enqueue
    /// (a host function, a kernel of your own) on another stream must be ordered after that
    /// stream: allocate on the stream that uses the vector first (`pool.on(&stream)`).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] and the pool's other allocation errors; the runtime's error.
    #[doc(alias("zeros", "zeros_like"))]
    pub fn zeroed(pool: &SymPool, len: usize) -> Result<Self> {
        SymVec::zeroed_with(pool, len, AllocDesc::default())
    }

    /// [`zeroed`](Self::zeroed), described by `desc` (a tag, see [`AllocDesc`]).
    ///
    /// # Errors
    /// As for [`zeroed`](Self::zeroed).
    pub fn zeroed_with(pool: &SymPool, len: usize, desc: AllocDesc) -> Result<Self> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::invalid(format!("SymVec of {len} elements overflows")))?;
        let alloc = zeroed_block(pool, bytes, align_of::<T>(), desc)?;
        Ok(SymVec {
            alloc,
            len,
            _elements: PhantomData,
        })
    }

    /// A copy of `data` in device memory.
    ///
    /// # Errors
    /// As for [`zeroed`](Self::zeroed).
    pub fn from_host(pool: &SymPool, data: &[T]) -> Result<Self> {
        SymVec::from_host_with(pool, data, AllocDesc::default())
    }

    /// [`from_host`](Self::from_host), described by `desc` (a tag, see [`AllocDesc`]).
    ///
    /// # Errors
    /// As for [`zeroed`](Self::zeroed).
    pub fn from_host_with(pool: &SymPool, data: &[T], desc: AllocDesc) -> Result<Self> {
        let alloc = block_from_host(pool, T::slice_as_bytes(data), align_of::<T>(), desc)?;
        Ok(SymVec {
            alloc,
            len: data.len(),
            _elements: PhantomData,
        })
    }

    /// Overwrites the contents with `data`, after waiting for queued work on this buffer.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the lengths differ; the runtime's error.
    pub fn copy_from_host(&mut self, data: &[T]) -> Result<()> {
        if data.len() != self.len {
            return Err(Error::invalid(format!(
                "copy_from_host: {} elements into a SymVec of {}",
                data.len(),
                self.len
            )));
        }
        let rt = self.alloc.pool().runtime();
        self.alloc.access_idle(|| {
            // SAFETY: the block is this vector's, at least `len` elements long, and idle.
            unsafe {
                rt.raw()
                    .copy_to_device(self.device_ptr(), T::slice_as_bytes(data))
            }
        })?;
        self.alloc.mark_written();
        Ok(())
    }

    /// The contents, after waiting for queued work on this buffer (so the result of a
    /// collective into it is visible).
    ///
    /// # Errors
    /// The runtime's error, including a failure of the queued work;
    /// [`Error::Poisoned`](crate::Error::Poisoned) if the pool is poisoned, also when another
    /// thread's wait found the failure (the data may be the failed work's).
    pub fn to_host(&self) -> Result<Vec<T>> {
        read_elements(&self.alloc, 0, self.len)
    }

    /// A host view of the contents, after waiting for queued work. Only where device memory is
    /// host-addressable (the emulator).
    ///
    /// The view borrows the vector, so it cannot outlive it:
    /// ```compile_fail,E0597
    /// # use symheap::{PoolConfig, SymPool, SymVec, emu};
    /// emu::launch(1, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
    ///     let view = {
    ///         let v = SymVec::from_host(&pool, &[1.0f32; 4])?;
    ///         v.host()?
    ///     }; // `v` is dropped here while the view still borrows it
    ///     Ok(view[0])
    /// })?;
    /// # Ok::<(), symheap::Error>(())
    /// ```
    /// and cannot be held across a collective that writes the vector (which takes it `&mut`):
    /// ```compile_fail,E0502
    /// # use symheap::{PoolConfig, ReduceOp, SymPool, SymVec, emu};
    /// emu::launch(1, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
    ///     let mut v = SymVec::from_host(&pool, &[1.0f32; 4])?;
    ///     let view = v.host()?;
    ///     pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?; // the view still borrows `v`
    ///     Ok(view[0])
    /// })?;
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// While the view lives, its pool refuses to [sleep](SymPool::sleep).
    ///
    /// # Errors
    /// [`Error::NotHostAddressable`] on real devices; [`Error::Asleep`]; the runtime's error.
    pub fn host(&self) -> Result<HostView<'_, T>> {
        HostView::open(&self.alloc, 0, self.len)
    }

    /// A mutable host view of the contents, after waiting for queued work. Only where device
    /// memory is host-addressable (the emulator).
    ///
    /// # Errors
    /// [`Error::NotHostAddressable`] on real devices; [`Error::Asleep`]; the runtime's error.
    pub fn host_mut(&mut self) -> Result<HostViewMut<'_, T>> {
        HostViewMut::open(&self.alloc, 0, self.len)
    }

    /// Whether the contents are unspecified: work a lost rank cut short used this vector
    /// ([`SymPool::shrink`]), and nothing has written all of it since. `to_host` and host
    /// views are refused meanwhile; [`copy_from_host`](Self::copy_from_host) writes it anew.
    pub fn is_unspecified(&self) -> bool {
        self.alloc.is_unspecified()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The window holding the data.
    pub fn window(&self) -> WindowHandle {
        self.alloc.window()
    }

    /// The data's offset in its window.
    pub fn offset(&self) -> u64 {
        self.alloc.offset()
    }

    /// The data's device address.
    pub fn device_ptr(&self) -> DevicePtr {
        self.alloc.device_ptr()
    }

    /// Declares that work on another stream uses this buffer; see
    /// [`SymBlock::record_stream`].
    pub fn record_stream(&self, stream: &Stream) {
        self.alloc.record_stream(stream);
    }

    /// The underlying allocation.
    pub fn alloc(&self) -> &SymBlock {
        &self.alloc
    }
}

/// The vector's elements as untyped storage (its block, no copy), for a tensor library or a
/// [DLPack](crate::dlpack) export. The storage is untagged: a later
/// [`resize`](SymStorage::resize) allocates without the vector's tag.
///
/// # Examples
/// ```
/// use symheap::{PoolConfig, SymPool, SymStorage, SymVec, emu};
///
/// emu::launch(1, |comm| {
///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
///     let storage = SymStorage::from(SymVec::from_host(&pool, &[1u16, 2, 3])?);
///     assert_eq!(storage.len(), 6);
///     assert_eq!(storage.to_host::<u16>()?, [1, 2, 3]);
///     Ok(())
/// })?;
/// # Ok::<(), symheap::Error>(())
/// ```
impl<T: Element> From<SymVec<T>> for SymStorage {
    fn from(vec: SymVec<T>) -> SymStorage {
        SymStorage::from_block(vec.alloc, vec.len * size_of::<T>())
    }
}
