//! The rank-private region behind the `allocator-api2` adapter: device memory outside every
//! window, carved by its own heap.
//!
//! Containers grow as their data says, which differs between ranks. Were their blocks taken
//! from the symmetric heaps, a rank whose container grew more would shift every later
//! [`SymVec`](crate::SymVec) offset and break the next collective. Here they never touch the
//! symmetric heaps, the op hash or any collective step: the region is mapped on the first
//! [`SymPool::allocator`](super::SymPool::allocator) call of each rank, by that rank alone.

use std::collections::HashMap;

use crate::heap::{Block, Heap, HeapError};
use crate::raw::{DevicePtr, Mapping};
use crate::runtime::Runtime;
use crate::{Error, OutOfMemory, Result};

/// What an out-of-memory error of the adapter tells the caller to raise.
const PRIVATE_SETTING: &str = "PoolConfig::private_capacity";

pub(super) struct PrivateRegion {
    heap: Heap,
    /// Live blocks by address, so `deallocate` finds its block without a scan.
    blocks: HashMap<u64, Block>,
    /// Dropped after the blocks' owners are gone: the pool drops it with its state.
    mapping: Mapping,
}

impl PrivateRegion {
    /// Maps `size` bytes (a multiple of the device granularity) on `device` at `alignment`,
    /// carved in blocks of `granularity`. Local to the calling rank.
    pub(super) fn create(
        rt: &Runtime,
        device: u32,
        size: u64,
        granularity: u64,
        alignment: u64,
    ) -> Result<PrivateRegion> {
        let heap = Heap::new(size, granularity)?;
        let mapping = Mapping::allocate_aligned(rt, size, alignment, device)?;
        Ok(PrivateRegion {
            heap,
            blocks: HashMap::new(),
            mapping,
        })
    }

    /// A block of `size` bytes at `align`: its address and the bytes granted.
    pub(super) fn alloc(&mut self, size: u64, align: u64) -> Result<(DevicePtr, u64)> {
        let block = self.heap.alloc(size, align).map_err(|e| match e {
            HeapError::OutOfSpace(oom) => Error::OutOfMemory(OutOfMemory {
                setting: PRIVATE_SETTING,
                ..oom.into()
            }),
            other => other.into(),
        })?;
        let ptr = self.mapping.ptr().byte_add(block.offset());
        let granted = block.size();
        self.blocks.insert(ptr.addr(), block);
        Ok((ptr, granted))
    }

    /// Frees the block at `addr`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if no live block of this region starts there.
    pub(super) fn free(&mut self, addr: u64) -> Result<()> {
        match self.blocks.remove(&addr) {
            Some(block) => Ok(self.heap.free(block)?),
            None => Err(Error::invalid(format!(
                "deallocate of {addr:#x}, which this pool's allocator did not allocate"
            ))),
        }
    }

    /// Bytes in live blocks.
    pub(super) fn allocated(&self) -> u64 {
        let report = self.heap.report();
        report.capacity - report.free
    }

    /// The region's size.
    pub(super) fn size(&self) -> u64 {
        self.mapping.size()
    }
}
