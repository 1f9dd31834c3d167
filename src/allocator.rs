//! [`SymAllocator`]: the pool as an `allocator-api2` allocator, for Rust containers and tensor
//! libraries whose storage is host-addressable.

use std::alloc::Layout;
use std::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator};

use crate::pool::SymPool;
use crate::{Error, Result};

/// A `Clone` handle that allocates from a [`SymPool`], for
/// `allocator_api2::vec::Vec<T, SymAllocator>` and friends.
///
/// # Limits
/// - **Host-addressable device memory only.** The `Allocator` contract hands out pointers the
///   host dereferences, so [`SymPool::allocator`] returns [`Error::NotHostAddressable`] (and
///   maps nothing) unless [`Runtime::is_host_addressable`](crate::Runtime::is_host_addressable):
///   true for the built-in emulator ([`Runtime::emulated`](crate::Runtime::emulated),
///   `emu::launch`), false for every runtime that [`raw::load`](crate::raw::load) or
///   [`raw::load_from`](crate::raw::load_from) opens, real NPUs and the emulator's C library
///   alike. On an NPU there is no adapter.
/// - **Not for collectives.** Its memory is a rank-private region outside every symmetric
///   window (below), at offsets that differ between ranks, and blocks are freed at once on
///   `deallocate`, with no stream tracking. Don't pass it to HCCL or use it as a collective
///   buffer: take collective buffers from the pool itself, as [`SymVec`](crate::SymVec),
///   [`SymBox`](crate::SymBox) or [`SymPool::alloc`] blocks, whose offsets are symmetric and
///   whose reuse is stream-ordered.
///
/// Containers grow when their data says so, which may differ between ranks, so the adapter
/// allocates from a rank-private region of device memory outside every window
/// ([`PoolConfig::private_capacity`](crate::PoolConfig::private_capacity), an eighth of the
/// capacity by default), mapped by the first [`SymPool::allocator`] call on each rank. It
/// never takes a collective step, never changes the [op hash](SymPool::op_hash) and never
/// moves a [`SymVec`](crate::SymVec)'s offset. When the region is full, `allocate` fails
/// with `AllocError`, and logs why as a `tracing` warning (for an out-of-memory, with the
/// setting to raise, [`PoolConfig::private_capacity`](crate::PoolConfig::private_capacity),
/// and its value). Its allocations are plain pointers that a sleep could not take away: the
/// pool refuses to [sleep](SymPool::sleep) while any is live, releases the region when it
/// sleeps without, and maps it again at the next allocation after the wake (while the pool
/// sleeps, `allocate` fails).
///
/// # Examples
/// ```
/// use symheap::allocator_api2::vec::Vec;
/// use symheap::{PoolConfig, SymPool, emu};
///
/// emu::launch(1, |comm| {
///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
///     let mut v = Vec::new_in(pool.allocator()?);
///     v.extend_from_slice(&[1.0f32, 2.0, 3.0]);
///     assert_eq!(v.iter().sum::<f32>(), 6.0);
///     Ok(())
/// })?;
/// # Ok::<(), symheap::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct SymAllocator {
    pool: SymPool,
}

impl SymPool {
    /// An `allocator-api2` allocator over this pool's rank-private region, which the first
    /// call maps (a local step: ranks may call it at different points of their programs).
    ///
    /// Only where device memory is host-addressable: the built-in emulator, not a runtime
    /// from [`raw::load`](crate::raw::load) (real NPUs, or the emulator's C library). Its
    /// memory lies outside the symmetric windows and must not be used in collectives: use
    /// [`SymVec`](crate::SymVec) / [`SymPool::alloc`] for those. See [`SymAllocator`]'s
    /// *Limits*.
    ///
    /// # Errors
    /// [`Error::NotHostAddressable`], before anything is mapped, unless
    /// [`Runtime::is_host_addressable`](crate::Runtime::is_host_addressable); the runtime's
    /// error if mapping the region fails.
    pub fn allocator(&self) -> Result<SymAllocator> {
        if !self.shared().runtime().is_host_addressable() {
            return Err(Error::NotHostAddressable);
        }
        self.shared().ensure_private_region()?;
        Ok(SymAllocator { pool: self.clone() })
    }
}

// SAFETY: blocks are disjoint ranges of mapped, host-addressable memory that stay valid until
// `deallocate` (the allocator keeps the pool, and so the mapping, alive); clones share one
// pool, so memory from one clone can be freed through another.
unsafe impl Allocator for SymAllocator {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let shared = self.pool.shared();
        let (ptr, size) = shared
            .alloc_host_block(layout.size().max(1) as u64, layout.align() as u64)
            .map_err(|e| {
                // `AllocError` carries nothing: the reason (and the setting to raise, for an
                // out-of-memory) goes to the log.
                tracing::warn!(
                    size = layout.size(),
                    align = layout.align(),
                    "symheap: SymAllocator::allocate failed: {e}"
                );
                AllocError
            })?;
        let ptr = NonNull::new(ptr.as_raw().cast::<u8>()).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(ptr, size as usize))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _layout: Layout) {
        self.pool.shared().free_host_block(ptr.as_ptr() as u64);
    }
}
