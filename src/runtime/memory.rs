//! Device virtual memory: address reservations, physical allocations and the mappings between
//! them (`aclrtReserveMemAddress`, `aclrtMallocPhysical`, `aclrtMapMem`).

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::Runtime;
use super::calls;
use crate::sys::{aclrtDrvMemHandle, aclrtPhysicalMemProp};
use crate::{Error, Result};

/// An address in device memory. `Copy`, and meaningless to dereference on the host unless the
/// runtime is host-addressable.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DevicePtr(usize);

impl DevicePtr {
    /// Wraps a raw device address.
    pub fn from_raw(ptr: *mut c_void) -> Self {
        DevicePtr(ptr as usize)
    }

    /// The raw pointer, as the C API takes it.
    pub fn as_raw(self) -> *mut c_void {
        self.0 as *mut c_void
    }

    /// The address as an integer.
    pub fn addr(self) -> u64 {
        self.0 as u64
    }

    /// This pointer plus `bytes`.
    ///
    /// # Panics
    /// If the result overflows the address space (no valid allocation is that large).
    pub fn byte_add(self, bytes: u64) -> Self {
        let bytes = usize::try_from(bytes).expect("offset exceeds the address space");
        DevicePtr(self.0.checked_add(bytes).expect("device pointer overflow"))
    }
}

impl std::fmt::Debug for DevicePtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DevicePtr({:#x})", self.0)
    }
}

fn to_usize(bytes: u64, what: &str) -> Result<usize> {
    usize::try_from(bytes).map_err(|_| Error::invalid(format!("{what} {bytes} exceeds usize")))
}

/// A reserved range of device virtual address space (`aclrtReserveMemAddress`); released on drop.
#[derive(Debug)]
pub struct VirtualRange {
    rt: Runtime,
    ptr: DevicePtr,
    size: u64,
    /// Set once released (only on success: a failed [`Mapping::release`] leaves the range to
    /// `Drop`, which tries once more).
    released: AtomicBool,
}

impl VirtualRange {
    /// Reserves `size` bytes of device address space (a multiple of the granularity).
    ///
    /// # Errors
    /// The runtime's error, e.g. for a size that is not a multiple of the granularity.
    pub fn reserve(rt: &Runtime, size: u64) -> Result<Self> {
        VirtualRange::reserve_aligned(rt, size, 0)
    }

    /// [`VirtualRange::reserve`] at an address aligned to `alignment` (0 for the runtime's
    /// default, the granularity; otherwise a power of two).
    ///
    /// # Errors
    /// As [`VirtualRange::reserve`]; the runtime's error for a bad alignment.
    pub fn reserve_aligned(rt: &Runtime, size: u64, alignment: u64) -> Result<Self> {
        let len = to_usize(size, "reservation size")?;
        let alignment = to_usize(alignment, "reservation alignment")?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer and a null hint asks for no particular address;
        // flag 1 asks for huge pages as the HCCL documentation does.
        unsafe {
            calls::aclrtReserveMemAddress(rt, &mut ptr, len, alignment, std::ptr::null_mut(), 1)
        }?;
        Ok(VirtualRange {
            rt: rt.clone(),
            ptr: DevicePtr::from_raw(ptr),
            size,
            released: AtomicBool::new(false),
        })
    }

    /// The start of the range.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl VirtualRange {
    /// Releases the range (`aclrtReleaseMemAddress`) unless already done.
    pub(crate) fn release(&self) -> Result<()> {
        if self.released.load(Ordering::Acquire) {
            return Ok(());
        }
        // SAFETY: `ptr` came from aclrtReserveMemAddress and is not released yet (the flag),
        // and every mapping inside it holds an `Arc` to this range, so none is left.
        unsafe { calls::aclrtReleaseMemAddress(&self.rt, self.ptr.as_raw()) }?;
        self.released.store(true, Ordering::Release);
        Ok(())
    }
}

impl Drop for VirtualRange {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            self.rt.record_drop_error(e);
        }
    }
}

/// A physical device memory allocation (`aclrtMallocPhysical`); freed on drop.
#[derive(Debug)]
pub struct PhysicalMemory {
    rt: Runtime,
    handle: aclrtDrvMemHandle,
    size: u64,
    device: u32,
    /// Set once freed (only on success, as for [`VirtualRange`]).
    freed: AtomicBool,
}

// SAFETY: the handle is an opaque token that the runtime accepts from any thread.
unsafe impl Send for PhysicalMemory {}
// SAFETY: no method mutates through `&self`; the handle is only passed to thread-safe C calls.
unsafe impl Sync for PhysicalMemory {}

impl PhysicalMemory {
    /// Allocates `size` bytes (a multiple of the granularity) of pinned huge-page HBM on
    /// `device`.
    ///
    /// # Errors
    /// The runtime's error: a size that is not a multiple of the granularity, out of memory.
    pub fn allocate(rt: &Runtime, size: u64, device: u32) -> Result<Self> {
        let len = to_usize(size, "physical allocation size")?;
        let prop = aclrtPhysicalMemProp::device_huge(device);
        let mut handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer and property struct; flags 0 as documented.
        unsafe { calls::aclrtMallocPhysical(rt, &mut handle, len, &prop, 0) }?;
        Ok(PhysicalMemory {
            rt: rt.clone(),
            handle,
            size,
            device,
            freed: AtomicBool::new(false),
        })
    }

    /// The size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The device it lives on.
    pub fn device(&self) -> u32 {
        self.device
    }
}

impl PhysicalMemory {
    /// Frees the memory (`aclrtFreePhysical`) unless already done.
    fn free(&self) -> Result<()> {
        if self.freed.load(Ordering::Acquire) {
            return Ok(());
        }
        // SAFETY: the handle came from aclrtMallocPhysical and is not freed yet (the flag),
        // and every mapping of it holds an `Arc` to this value, so none is left.
        unsafe { calls::aclrtFreePhysical(&self.rt, self.handle) }?;
        self.freed.store(true, Ordering::Release);
        Ok(())
    }
}

impl Drop for PhysicalMemory {
    fn drop(&mut self) {
        if let Err(e) = self.free() {
            self.rt.record_drop_error(e);
        }
    }
}

/// Physical memory mapped into a reserved range (`aclrtMapMem`); unmapped on drop, before the
/// range and the memory it keeps alive are released.
#[derive(Debug)]
pub struct Mapping {
    ptr: DevicePtr,
    range: Arc<VirtualRange>,
    physical: Arc<PhysicalMemory>,
    /// Set once unmapped; unlike the range's and the memory's flags, only on success, so that
    /// `Drop` tries again after a failed [`Mapping::release`].
    unmapped: AtomicBool,
}

impl Mapping {
    /// Maps all of `physical` at `offset` bytes into `range`.
    ///
    /// # Errors
    /// The runtime's error: the offset is unaligned, the memory does not fit in the range, or
    /// the place is already mapped.
    pub fn new(
        range: &Arc<VirtualRange>,
        offset: u64,
        physical: &Arc<PhysicalMemory>,
    ) -> Result<Self> {
        let rt = &range.rt;
        let end = offset.checked_add(physical.size);
        if end.is_none_or(|end| end > range.size) {
            return Err(Error::invalid(format!(
                "mapping {} bytes at offset {offset} overruns a {}-byte range",
                physical.size, range.size
            )));
        }
        let ptr = range.ptr.byte_add(offset);
        let len = to_usize(physical.size, "mapping size")?;
        // SAFETY: `ptr..ptr+len` lies inside the reservation (checked above) and the handle is
        // live; the runtime rejects a place that is already mapped.
        unsafe { calls::aclrtMapMem(rt, ptr.as_raw(), len, 0, physical.handle, 0) }?;
        Ok(Mapping {
            ptr,
            range: Arc::clone(range),
            physical: Arc::clone(physical),
            unmapped: AtomicBool::new(false),
        })
    }

    /// Reserves `size` bytes of address space, allocates as much physical memory on `device`
    /// and maps it there: device memory ready to use or register, released in the right order
    /// on drop. `size` is a multiple of the granularity.
    ///
    /// # Errors
    /// The runtime's error from any of the three steps; what was done is undone.
    pub fn allocate(rt: &Runtime, size: u64, device: u32) -> Result<Self> {
        Mapping::allocate_aligned(rt, size, 0, device)
    }

    /// [`Mapping::allocate`] at an address aligned to `alignment` (0 for the granularity,
    /// otherwise a power of two), as [`VirtualRange::reserve_aligned`].
    ///
    /// # Errors
    /// As [`Mapping::allocate`].
    pub fn allocate_aligned(rt: &Runtime, size: u64, alignment: u64, device: u32) -> Result<Self> {
        let range = Arc::new(VirtualRange::reserve_aligned(rt, size, alignment)?);
        let physical = Arc::new(PhysicalMemory::allocate(rt, size, device)?);
        Mapping::new(&range, 0, &physical)
    }

    /// Where the memory is mapped.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The mapped size in bytes.
    pub fn size(&self) -> u64 {
        self.physical.size
    }

    /// The physical memory behind the mapping.
    pub fn physical(&self) -> &Arc<PhysicalMemory> {
        &self.physical
    }

    /// The reserved range the memory is mapped into.
    pub fn range(&self) -> &Arc<VirtualRange> {
        &self.range
    }
}

impl Mapping {
    /// Unmaps now, then releases the range and frees the physical memory where this mapping
    /// held the last handle on them, reporting the first error instead of recording it as
    /// `Drop` would.
    ///
    /// # Errors
    /// The first error of the runtime. Each step that failed is tried once more when its
    /// handle drops (right away, or for a failed unmap when the mapping drops), and a second
    /// failure is recorded as a drop error.
    pub fn release(self) -> Result<()> {
        self.unmap()?;
        let (range, physical) = (Arc::clone(&self.range), Arc::clone(&self.physical));
        drop(self);
        let released = Arc::into_inner(range).map_or(Ok(()), |r| r.release());
        let freed = Arc::into_inner(physical).map_or(Ok(()), |p| p.free());
        released.and(freed)
    }

    /// Unmaps (`aclrtUnmapMem`) unless already done.
    pub(crate) fn unmap(&self) -> Result<()> {
        if self.unmapped.load(Ordering::Acquire) {
            return Ok(());
        }
        let rt = &self.range.rt;
        // SAFETY: `ptr` is the start of a mapping made by `new` and not yet unmapped (the
        // flag is set only after a successful unmap).
        unsafe { calls::aclrtUnmapMem(rt, self.ptr.as_raw()) }?;
        self.unmapped.store(true, Ordering::Release);
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Err(e) = self.unmap() {
            self.range.rt.record_drop_error(e);
        }
    }
}
