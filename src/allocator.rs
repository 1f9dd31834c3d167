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
/// Offered only where device memory is host-addressable (the emulator), because the
/// `Allocator` contract hands out pointers the host dereferences. Blocks come from the same
/// windows as [`SymVec`](crate::SymVec)s and are freed at once on `deallocate` (no stream
/// tracking: don't use them in collectives).
///
/// Containers grow when their data says so, which may differ between ranks, so the adapter
/// never takes a collective step: it only uses free space in the existing windows (no growth,
/// no release of pending frees). Size the pool, or call [`SymPool::reserve`], for what
/// containers will need; when nothing fits, `allocate` fails with `AllocError`.
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
    /// An `allocator-api2` allocator over this pool.
    ///
    /// # Errors
    /// [`Error::NotHostAddressable`] where device memory cannot be dereferenced by the host.
    pub fn allocator(&self) -> Result<SymAllocator> {
        if !self.comm().runtime().is_host_addressable() {
            return Err(Error::NotHostAddressable);
        }
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
            .map_err(|_| AllocError)?;
        let ptr = NonNull::new(ptr.as_raw().cast::<u8>()).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(ptr, size as usize))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _layout: Layout) {
        self.pool.shared().free_host_block(ptr.as_ptr() as u64);
    }
}
