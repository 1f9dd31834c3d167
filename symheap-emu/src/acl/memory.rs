//! Device virtual memory: address reservations, physical allocations (memfds), mappings,
//! `aclrtMalloc` allocations, and the registry of every device-addressable range.
//!
//! Every range a device operation touches is looked up here first and *pinned* (an `Arc` of
//! the mapping or window that makes it addressable) for as long as queued work may touch it.
//! `aclrtUnmapMem` refuses a pinned mapping, so a bad pointer or an unmap racing a queued copy
//! is an error, never an access to unmapped or foreign host memory.

use std::any::Any;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use crate::sys::{
    ACL_ERROR_RT_INTERNAL_ERROR, ACL_ERROR_RT_INVALID_HANDLE, ACL_ERROR_RT_MEMORY_ALLOCATION,
    ACL_MEM_LOCATION_TYPE_DEVICE, aclrtPhysicalMemProp,
};

use crate::GRANULARITY;
use crate::acl::device::{self, Device};
use crate::base::counters::{self, Counter};
use crate::base::errors::{AclResult, Fail, acl_fail, invalid, param};
use crate::base::handle::PhysicalHandle;
use crate::base::lock::{RankedGuard, RankedMutex, lock, ranks};
use crate::ipc::os;

/// A physical allocation: a memfd of a granularity multiple.
#[derive(Debug)]
pub(crate) struct Physical {
    /// The `aclrtDrvMemHandle` value.
    pub(crate) handle: PhysicalHandle,
    fd: OwnedFd,
    /// Bytes.
    pub(crate) size: usize,
    /// The device it was allocated on.
    pub(crate) device: Device,
    /// The memfd's device and inode numbers: what names it in every descriptor of it, so a
    /// peer's mapping of it (received over a socket) can be traced back to it.
    id: (u64, u64),
}

impl Physical {
    /// The memfd, for mapping it elsewhere (the symmetric heaps of peers).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A user mapping made by `aclrtMapMem`.
#[derive(Debug)]
pub(crate) struct Mapping {
    /// First mapped address.
    pub(crate) base: usize,
    /// Mapped bytes.
    pub(crate) size: usize,
    /// Offset into the physical allocation.
    pub(crate) offset: usize,
    /// The physical allocation mapped.
    pub(crate) phys: Arc<Physical>,
}

/// Keeps a mapping or window alive and its memory addressable while work may touch it.
pub(crate) type Pin = Arc<dyn Any + Send + Sync>;

/// The pins of one operation, released when dropped.
#[derive(Default)]
pub(crate) struct Pins(Vec<Pin>);

impl Pins {
    /// Adds the pins of `other`.
    pub(crate) fn extend(&mut self, other: Pins) {
        self.0.extend(other.0);
    }

    /// Adds one pin.
    pub(crate) fn push(&mut self, pin: Pin) {
        self.0.push(pin);
    }
}

/// Device memory from `aclrtMalloc`: a physical allocation of whole granules of its own
/// (with a handle, for `aclrtMemRetainAllocationHandle`), mapped whole where the kernel chose
/// (outside every reservation). Unmapped when the last reference goes: the registry's until
/// `aclrtFree`, then the pins of work still queued on it.
#[derive(Debug)]
pub(crate) struct DeviceAlloc {
    space: os::Space,
    phys: Arc<Physical>,
    /// The device it was allocated on.
    device: Device,
    /// The bytes counted against the device's memory (CANN's rounding, not the mapping's).
    counted: u64,
}

/// What makes a device range addressable.
enum Owner {
    /// A user mapping; pinned by cloning the `Arc`.
    User(Arc<Mapping>),
    /// An `aclrtMalloc` allocation; pinned by cloning the `Arc`.
    Malloc(Arc<DeviceAlloc>),
    /// A peer mapping in a symmetric heap, owned by a window.
    Window(Weak<dyn Any + Send + Sync>),
}

struct Region {
    end: usize,
    owner: Owner,
}

struct Reservation {
    space: os::Space,
    mappings: usize,
}

/// A physical allocation and what references it. Its memory is released (the entry removed,
/// its bytes no longer counted, the memfd closed) when nothing does: no handle reference, no
/// user mapping, no window and no peer's import (CANN's rule: hicann/runtime
/// `docs/zh/api_ref/11-04_virtual_memory_management.md`, `aclrtFreePhysical` and
/// `aclrtMemRetainAllocationHandle`). `aclrtMalloc` memory goes with `aclrtFree` instead.
struct PhysEntry {
    phys: Arc<Physical>,
    /// Whether it is the memory of an `aclrtMalloc` allocation (freed with it, not with
    /// `aclrtFreePhysical`).
    malloc: bool,
    /// Handle references not yet given back with `aclrtFreePhysical`: the allocation's own
    /// (`aclrtMallocPhysical`; none for `aclrtMalloc` memory, whose own is `aclrtFree`'s) and
    /// one per `aclrtMemRetainAllocationHandle` (HCCL retains one per registration). The
    /// handle names the allocation only while this is above 0 (`aclrtMalloc` memory: while
    /// it lives).
    handles: u32,
    mappings: usize,
    /// Where the allocation is mapped for each live window registered over it (the window's
    /// user base): those mappings cannot be unmapped. Each is also the window's mapping of
    /// the allocation in this rank's own heap.
    windows: Vec<usize>,
    /// Mappings of it in the symmetric heaps of peers that are threads of this process
    /// (HCCL's imports: `aclrtMemImportFromShareableHandleV2` + `aclrtMapMem` in each peer).
    imports: u32,
}

impl PhysEntry {
    /// Whether nothing references the allocation any more, so its memory goes.
    fn unreferenced(&self) -> bool {
        !self.malloc
            && self.handles == 0
            && self.mappings == 0
            && self.windows.is_empty()
            && self.imports == 0
    }
}

struct State {
    /// User reservations by base address.
    reservations: BTreeMap<usize, Reservation>,
    /// Address space of symmetric heaps (base -> end): device addresses, not user reservations.
    heaps: BTreeMap<usize, usize>,
    physicals: BTreeMap<PhysicalHandle, PhysEntry>,
    /// Every mapped, device-addressable range by start address (never overlapping).
    regions: BTreeMap<usize, Region>,
    /// Live `aclrtMalloc` allocations by start address.
    mallocs: BTreeMap<usize, Arc<DeviceAlloc>>,
    /// Physical bytes allocated per device (devices with none left out, so a process whose
    /// threads play ranks of many nodes keeps an entry per device it uses).
    used: BTreeMap<Device, u64>,
    /// The sum of `used`: what this process's devices hold of the host's RAM.
    used_total: u64,
    /// Bytes of HCCL's own buffers per device: the communicators' ([`Charge`]).
    hccl: BTreeMap<Device, u64>,
}

static STATE: RankedMutex<State> = RankedMutex::new(
    ranks::MEMORY,
    State {
        reservations: BTreeMap::new(),
        heaps: BTreeMap::new(),
        physicals: BTreeMap::new(),
        regions: BTreeMap::new(),
        mallocs: BTreeMap::new(),
        used: BTreeMap::new(),
        used_total: 0,
        hccl: BTreeMap::new(),
    },
);

fn state() -> RankedGuard<'static, State> {
    lock(&STATE)
}

fn check_granular(what: &str, value: usize) -> AclResult {
    if value == 0 || !value.is_multiple_of(GRANULARITY) {
        return param(format!(
            "{what} {value} is not a non-zero multiple of the granularity ({GRANULARITY})"
        ));
    }
    Ok(())
}

impl State {
    /// The user reservation holding `[addr, addr + len)` whole.
    fn reservation_holding(&mut self, addr: usize, len: usize) -> Option<&mut Reservation> {
        let end = addr.checked_add(len)?;
        let (_, r) = self.reservations.range_mut(..=addr).next_back()?;
        (r.space.addr() + r.space.len() >= end).then_some(r)
    }

    /// The region containing `addr`.
    fn region_at(&self, addr: usize) -> Option<(usize, &Region)> {
        let (&start, r) = self.regions.range(..=addr).next_back()?;
        (r.end > addr).then_some((start, r))
    }

    /// The bytes of `device`'s memory in use: physical allocations and HCCL's buffers.
    fn device_used(&self, device: Device) -> u64 {
        self.used.get(&device).copied().unwrap_or(0) + self.hccl.get(&device).copied().unwrap_or(0)
    }

    /// Counts `bytes` more physical memory on `device`.
    fn add_used(&mut self, device: Device, bytes: u64) {
        *self.used.entry(device).or_default() += bytes;
        self.used_total += bytes;
    }

    /// Gives `bytes` of physical memory back to `device` (a device left with none has no
    /// entry).
    fn take_used(&mut self, device: Device, bytes: u64) {
        if let Some(used) = self.used.get_mut(&device) {
            *used -= bytes;
            if *used == 0 {
                self.used.remove(&device);
            }
        }
        self.used_total -= bytes;
    }

    /// Gives `bytes` of HCCL's buffers back to `device`.
    fn take_hccl(&mut self, device: Device, bytes: u64) {
        if let Some(held) = self.hccl.get_mut(&device) {
            *held -= bytes;
            if *held == 0 {
                self.hccl.remove(&device);
            }
        }
    }

    /// Fails unless `bytes` more fit `device`'s memory limit; `asked` says what asked.
    fn check_device(&self, device: Device, bytes: u64, asked: &str) -> AclResult {
        let limit = device::memory_limit();
        let used = self.device_used(device);
        if used.saturating_add(bytes) > limit {
            return acl_fail(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                format!(
                    "{device} out of memory: {asked}, {} of {limit} free \
                     (emu::set_device_memory_limit)",
                    limit.saturating_sub(used)
                ),
            );
        }
        Ok(())
    }

    /// Fails unless `size` more bytes fit `device`'s memory limit, and the host's RAM: all
    /// devices' memory together, and what the host has available now.
    fn check_limit(&self, device: Device, size: usize) -> AclResult {
        let size = size as u64;
        self.check_device(device, size, &format!("asked for {size} bytes"))?;
        let ram = device::host_ram();
        let all = self.used_total;
        let available = os::meminfo("MemAvailable").unwrap_or(ram);
        if all.saturating_add(size) > ram || size > available {
            return acl_fail(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                format!(
                    "{device}: asked for {size} bytes of emulated device memory, which is \
                     host RAM: the host has {ram} bytes, {available} available, and this \
                     process's devices hold {all}"
                ),
            );
        }
        Ok(())
    }

    /// The physical allocation `handle`, if `[addr, addr + size)` may map its bytes
    /// `[offset, offset + size)`: they exist, and the range lies inside one reservation and
    /// overlaps no mapping.
    fn mappable(
        &mut self,
        addr: usize,
        size: usize,
        offset: usize,
        handle: PhysicalHandle,
    ) -> AclResult<Arc<Physical>> {
        let Some(e) = self.live(handle) else {
            return acl_fail(
                ACL_ERROR_RT_INVALID_HANDLE,
                format!("{handle:#x} is not a live physical allocation"),
            );
        };
        let phys = e.phys.clone();
        if offset.checked_add(size).is_none_or(|end| end > phys.size) {
            return param(format!(
                "offset {offset} + size {size} exceeds the physical allocation ({} bytes)",
                phys.size
            ));
        }
        if self.reservation_holding(addr, size).is_none() {
            return param(format!(
                "[{addr:#x}, +{size:#x}) is not inside one reservation"
            ));
        }
        if let Some((&start, r)) = self.regions.range(..addr + size).next_back()
            && r.end > addr
        {
            return param(format!(
                "[{addr:#x}, +{size:#x}) overlaps the mapping at {start:#x}"
            ));
        }
        Ok(phys)
    }

    /// The entry of `handle` while the handle names it (see [`PhysEntry::handles`]).
    fn live(&self, handle: PhysicalHandle) -> Option<&PhysEntry> {
        self.physicals
            .get(&handle)
            .filter(|e| e.malloc || e.handles > 0)
    }

    /// Removes the entry of `handle` if nothing references it any more (its bytes stop
    /// counting): the entry, to be dropped (closing the memfd) once the lock is released.
    fn settle(&mut self, handle: PhysicalHandle) -> Option<PhysEntry> {
        if !self.physicals.get(&handle)?.unreferenced() {
            return None;
        }
        let e = self.physicals.remove(&handle)?;
        self.take_used(e.phys.device, e.phys.size as u64);
        Some(e)
    }

    /// Records a new user mapping, counted in its reservation and physical allocation.
    fn add_mapping(&mut self, mapping: Mapping) {
        let (addr, size, handle) = (mapping.base, mapping.size, mapping.phys.handle);
        self.regions.insert(
            addr,
            Region {
                end: addr + size,
                owner: Owner::User(Arc::new(mapping)),
            },
        );
        if let Some(r) = self.reservation_holding(addr, size) {
            r.mappings += 1;
        }
        if let Some(e) = self.physicals.get_mut(&handle) {
            e.mappings += 1;
        }
    }

    /// Pins every region of `[addr, addr + len)`, which must be wholly mapped (possibly by
    /// several adjacent mappings).
    fn pin(&self, addr: usize, len: usize, pins: &mut Pins) -> Result<(), String> {
        let end = addr
            .checked_add(len)
            .ok_or_else(|| format!("range at {addr:#x} of {len} bytes overflows"))?;
        let mut at = addr;
        loop {
            let Some((_, region)) = self.region_at(at) else {
                return Err(if at == addr {
                    format!("{addr:#x} is not in mapped device memory")
                } else {
                    format!(
                        "[{addr:#x}, {end:#x}) is not wholly in mapped device memory: \
                         nothing is mapped at {at:#x}"
                    )
                });
            };
            match &region.owner {
                Owner::User(m) => pins.push(m.clone()),
                Owner::Malloc(m) => pins.push(m.clone()),
                Owner::Window(w) => match w.upgrade() {
                    Some(w) => pins.push(w),
                    None => return Err(format!("{at:#x} belongs to a window being removed")),
                },
            }
            if region.end >= end {
                return Ok(());
            }
            at = region.end;
        }
    }
}

/// `aclrtReserveMemAddress`.
pub(crate) fn reserve(
    size: usize,
    alignment: usize,
    expect: usize,
    flags: u64,
) -> AclResult<usize> {
    check_granular("size", size)?;
    if alignment != 0 && !alignment.is_power_of_two() {
        return param(format!("alignment {alignment} is not 0 or a power of two"));
    }
    if expect != 0 {
        return param("expectPtr must be NULL: the emulator chooses the address");
    }
    if flags > 1 {
        return param(format!("flags {flags} is not 0 or 1"));
    }
    let space = os::reserve(size, alignment.max(GRANULARITY)).or_else(|e| {
        acl_fail(
            ACL_ERROR_RT_MEMORY_ALLOCATION,
            format!("cannot reserve {size} bytes of address space: {e}"),
        )
    })?;
    let addr = space.addr();
    state()
        .reservations
        .insert(addr, Reservation { space, mappings: 0 });
    counters::inc(Counter::Reservations);
    Ok(addr)
}

/// `aclrtReleaseMemAddress`.
pub(crate) fn release(addr: usize) -> AclResult {
    let mut st = state();
    let Some(r) = st.reservations.get(&addr) else {
        return param(format!("{addr:#x} is not the start of a reservation"));
    };
    if r.mappings > 0 {
        return param(format!(
            "reservation at {addr:#x} still has {} mapping(s): unmap them first",
            r.mappings
        ));
    }
    let r = st.reservations.remove(&addr);
    drop(st);
    drop(r);
    counters::dec(Counter::Reservations);
    Ok(())
}

/// `aclrtMallocPhysical`.
pub(crate) fn malloc_physical(
    size: usize,
    prop: &aclrtPhysicalMemProp,
    flags: u64,
) -> AclResult<PhysicalHandle> {
    check_granular("size", size)?;
    if flags != 0 {
        return param(format!("flags {flags} is not 0"));
    }
    let device = location_device(prop)?;
    let mut st = state();
    st.check_limit(device, size)?;
    let (fd, id) = os::memfd(size)
        .and_then(|fd| os::file_id(fd.as_fd()).map(|id| (fd, id)))
        .or_else(|e| {
            acl_fail(
                ACL_ERROR_RT_MEMORY_ALLOCATION,
                format!("memfd of {size} bytes: {e}"),
            )
        })?;
    let handle = PhysicalHandle::fresh();
    let phys = Arc::new(Physical {
        handle,
        fd,
        size,
        device,
        id,
    });
    st.physicals.insert(
        handle,
        PhysEntry {
            phys,
            malloc: false,
            handles: 1,
            mappings: 0,
            windows: Vec::new(),
            imports: 0,
        },
    );
    st.add_used(device, size as u64);
    counters::inc(Counter::PhysicalAllocations);
    Ok(handle)
}

/// The device whose memory `prop` asks for (its location must be a device).
fn location_device(prop: &aclrtPhysicalMemProp) -> AclResult<Device> {
    if prop.location.r#type != ACL_MEM_LOCATION_TYPE_DEVICE {
        return param(format!(
            "location type {} is not ACL_MEM_LOCATION_TYPE_DEVICE",
            prop.location.r#type
        ));
    }
    let device = i32::try_from(prop.location.id)
        .map_err(|_| ())
        .and_then(|id| device::check_id(id).map_err(|_| ()));
    device.or_else(|()| {
        param(format!(
            "location id {} is not a device (0..{})",
            prop.location.id,
            device::count()
        ))
    })
}

/// `aclrtFreePhysical`: gives back one handle reference (the allocation's own, or one
/// retain). It never fails for memory still mapped or registered: the memory is released when
/// its last reference goes (see [`PhysEntry`]), and only then stops counting against the
/// device. A retained handle of `aclrtMalloc` memory is given back the same way; that memory's
/// own reference is `aclrtFree`'s.
pub(crate) fn free_physical(handle: PhysicalHandle) -> AclResult {
    let mut st = state();
    let Some(e) = st
        .physicals
        .get_mut(&handle)
        .filter(|e| e.malloc || e.handles > 0)
    else {
        return acl_fail(
            ACL_ERROR_RT_INVALID_HANDLE,
            format!("{handle:#x} is not a live physical allocation"),
        );
    };
    if e.malloc && e.handles == 0 {
        return param(format!(
            "{handle:#x} is the handle of aclrtMalloc memory: free that with aclrtFree"
        ));
    }
    e.handles -= 1;
    release_if_unreferenced(st, handle);
    Ok(())
}

/// Releases the allocation `handle` if nothing references it any more: its memory goes (the
/// memfd is closed once the last mapping's reference to it is dropped too) and the live count
/// drops. Takes the lock's guard so the entry is dropped after the lock is released.
fn release_if_unreferenced(mut st: RankedGuard<'static, State>, handle: PhysicalHandle) {
    let gone = st.settle(handle);
    drop(st);
    if let Some(e) = gone {
        drop(e);
        counters::dec(Counter::PhysicalAllocations);
    }
}

/// `aclrtMemRetainAllocationHandle`: the physical allocation mapped at `addr` (any address of
/// a user mapping or of `aclrtMalloc` memory), with one more handle reference, which
/// `aclrtFreePhysical` gives back.
pub(crate) fn retain(addr: usize) -> AclResult<PhysicalHandle> {
    // An allocation freed between the two looks is not there, as if freed before.
    match allocation_at(addr).map(|a| a.phys().handle) {
        Some(handle) if retain_handle(handle) => Ok(handle),
        _ => param(format!("{addr:#x} is not in device memory of this process")),
    }
}

/// One more handle reference to the allocation `handle` (HCCL's retain at registration, by
/// the handle it found): false if it is gone.
pub(crate) fn retain_handle(handle: PhysicalHandle) -> bool {
    let mut st = state();
    let Some(e) = st.physicals.get_mut(&handle) else {
        return false;
    };
    e.handles += 1;
    true
}

/// Gives back a reference taken with [`retain_handle`] (HCCL's `aclrtFreePhysical` at
/// deregistration).
pub(crate) fn release_handle(handle: PhysicalHandle) {
    let mut st = state();
    if let Some(e) = st.physicals.get_mut(&handle) {
        e.handles = e.handles.saturating_sub(1);
    }
    release_if_unreferenced(st, handle);
}

/// Records a peer's mapping of the memfd `fd` in this process (a window's import): when it
/// is a physical allocation of this process (the peer is a thread rank), it stays allocated
/// and counted until [`release_import`]. Its handle, if so.
pub(crate) fn import(fd: BorrowedFd<'_>) -> Option<PhysicalHandle> {
    let id = os::file_id(fd).ok()?;
    let mut st = state();
    let e = st.physicals.values_mut().find(|e| e.phys.id == id)?;
    e.imports += 1;
    Some(e.phys.handle)
}

/// Undoes [`import`].
pub(crate) fn release_import(handle: PhysicalHandle) {
    let mut st = state();
    if let Some(e) = st.physicals.get_mut(&handle) {
        e.imports = e.imports.saturating_sub(1);
    }
    release_if_unreferenced(st, handle);
}

/// `aclrtMapMem`.
pub(crate) fn map(
    addr: usize,
    size: usize,
    offset: usize,
    handle: PhysicalHandle,
    flags: u64,
) -> AclResult {
    check_map_args(addr, size, offset, flags)?;
    let mut st = state();
    let phys = st.mappable(addr, size, offset, handle)?;
    // SAFETY: the range lies inside a live user reservation and no mapping overlaps it
    // (checked under the lock, which is still held), so nothing else uses these addresses.
    unsafe { os::map_fixed(addr, size, phys.fd(), offset) }.or_else(|e| {
        acl_fail(
            ACL_ERROR_RT_INTERNAL_ERROR,
            format!("mmap at {addr:#x}: {e}"),
        )
    })?;
    st.add_mapping(Mapping {
        base: addr,
        size,
        offset,
        phys,
    });
    counters::inc(Counter::Mappings);
    Ok(())
}

/// The checks of `aclrtMapMem`'s arguments on their own: no flags, a granular size, an
/// aligned address and offset.
fn check_map_args(addr: usize, size: usize, offset: usize, flags: u64) -> AclResult {
    if flags != 0 {
        return param(format!("flags {flags} is not 0"));
    }
    check_granular("size", size)?;
    if !addr.is_multiple_of(GRANULARITY) {
        return param(format!(
            "virPtr {addr:#x} is not aligned to the granularity"
        ));
    }
    if !offset.is_multiple_of(GRANULARITY) {
        return param(format!(
            "offset {offset} is not a multiple of the granularity"
        ));
    }
    Ok(())
}

/// `aclrtUnmapMem`.
pub(crate) fn unmap(addr: usize) -> AclResult {
    let mut st = state();
    let mapping = match st.regions.get(&addr) {
        Some(Region {
            owner: Owner::User(m),
            ..
        }) => m.clone(),
        _ => return param(format!("{addr:#x} is not the start of a mapping")),
    };
    let registered = st
        .physicals
        .get(&mapping.phys.handle)
        .is_some_and(|e| e.windows.contains(&addr));
    if registered {
        return param(format!(
            "mapping at {addr:#x} is registered in a live symmetric window: deregister the \
             window first"
        ));
    }
    // One reference is the registry's, one is ours: anything more is queued work.
    if Arc::strong_count(&mapping) > 2 {
        return param(format!(
            "mapping at {addr:#x} is in use by queued stream work or a copy in progress: \
             synchronize the stream first"
        ));
    }
    // SAFETY: the range is a user mapping inside a live reservation and nothing pins it, so
    // no operation is reading or writing it.
    unsafe { os::unmap_to_reserved(addr, mapping.size) }.or_else(|e| {
        acl_fail(
            ACL_ERROR_RT_INTERNAL_ERROR,
            format!("mmap at {addr:#x}: {e}"),
        )
    })?;
    st.regions.remove(&addr);
    if let Some(r) = st.reservation_holding(addr, mapping.size) {
        r.mappings -= 1;
    }
    if let Some(e) = st.physicals.get_mut(&mapping.phys.handle) {
        e.mappings -= 1;
    }
    // A freed allocation's memory goes with its last mapping.
    release_if_unreferenced(st, mapping.phys.handle);
    counters::dec(Counter::Mappings);
    Ok(())
}

/// `aclrtGetMemInfo` for `device`: `(free, total)` bytes.
pub(crate) fn mem_info(device: Device) -> (u64, u64) {
    let limit = device::memory_limit();
    let st = state();
    let used = st.device_used(device);
    (limit.saturating_sub(used), limit)
}

/// Bytes of a device's memory that HCCL holds for a communicator while it lives (its CCL
/// buffers): counted against the device's memory (in `aclrtGetMemInfo` and its limit), given
/// back by [`Charge::release`] or when dropped.
#[derive(Debug)]
pub(crate) struct Charge {
    device: Device,
    bytes: u64,
    live: AtomicBool,
}

/// Takes `size` bytes of `device`'s memory for HCCL's buffers, counted as `aclrtMalloc`
/// counts them (HCCL allocates them with `aclrtMallocWithCfg`): `ACL_ERROR_RT_MEMORY_ALLOCATION`
/// if they do not fit the device's memory. (Not held against the host's RAM as allocations
/// are: the emulator's buffers are memfd pages touched only as the staged path uses them.)
pub(crate) fn charge(device: Device, size: usize) -> AclResult<Charge> {
    let Some(bytes) = malloc_counted(size) else {
        return invalid(format!("size {size} is too large"));
    };
    let bytes = bytes as u64;
    let mut st = state();
    st.check_device(device, bytes, &format!("HCCL's buffers need {bytes} bytes"))?;
    *st.hccl.entry(device).or_default() += bytes;
    Ok(Charge {
        device,
        bytes,
        live: AtomicBool::new(true),
    })
}

impl Charge {
    /// The device the bytes are taken from.
    pub(crate) fn device(&self) -> Device {
        self.device
    }

    /// Gives the bytes back to the device (once; later calls do nothing).
    pub(crate) fn release(&self) {
        if self.live.swap(false, Ordering::AcqRel) {
            state().take_hccl(self.device, self.bytes);
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.release();
    }
}

/// Whether `addr` is in device address space (a user reservation or a symmetric heap),
/// mapped or not. Copies treat such a pointer as device memory and validate it.
pub(crate) fn is_device_address(addr: usize) -> bool {
    let st = state();
    let inside = |m: &BTreeMap<usize, usize>| {
        m.range(..=addr)
            .next_back()
            .is_some_and(|(_, &end)| end > addr)
    };
    let in_reservation = st
        .reservations
        .range(..=addr)
        .next_back()
        .is_some_and(|(_, r)| r.space.addr() + r.space.len() > addr);
    let in_malloc = st
        .mallocs
        .range(..=addr)
        .next_back()
        .is_some_and(|(_, m)| m.space.addr() + m.space.len() > addr);
    in_reservation || in_malloc || inside(&st.heaps)
}

/// The bytes `aclrtMalloc(size)` takes from a device, as CANN counts them on Atlas A2 / A3:
/// `size` rounded up to a multiple of 32, plus 32 bytes of padding.
fn malloc_counted(size: usize) -> Option<usize> {
    size.checked_add(32)?.checked_next_multiple_of(32)
}

/// `aclrtMalloc` on `device`: `size` (non-zero) bytes of device memory, counted against the
/// device's memory as CANN counts them ([`malloc_counted`]), backed by whole granules. Its
/// addressable range is exactly `size` bytes from the returned address, which is page-aligned
/// (a mapping where the kernel chooses; CANN documents 64-byte alignment), not
/// necessarily granule-aligned.
pub(crate) fn malloc(device: Device, size: usize) -> AclResult<usize> {
    if size == 0 {
        return invalid("size is 0");
    }
    let (Some(counted), Some(len)) = (
        malloc_counted(size),
        size.checked_next_multiple_of(GRANULARITY),
    ) else {
        return invalid(format!("size {size} is too large"));
    };
    let mut st = state();
    st.check_limit(device, counted)?;
    let fail = |e: std::io::Error| Fail {
        code: ACL_ERROR_RT_MEMORY_ALLOCATION,
        msg: format!("device memory of {size} bytes: {e}"),
    };
    let fd = os::memfd(len).map_err(fail)?;
    let id = os::file_id(fd.as_fd()).map_err(fail)?;
    let space = os::map_shared(fd.as_fd(), len).map_err(fail)?;
    let base = space.addr();
    let phys = Arc::new(Physical {
        handle: PhysicalHandle::fresh(),
        fd,
        size: len,
        device,
        id,
    });
    st.physicals.insert(
        phys.handle,
        PhysEntry {
            phys: phys.clone(),
            malloc: true,
            handles: 0,
            mappings: 0,
            windows: Vec::new(),
            imports: 0,
        },
    );
    let alloc = Arc::new(DeviceAlloc {
        space,
        phys,
        device,
        counted: counted as u64,
    });
    st.regions.insert(
        base,
        Region {
            end: base + size,
            owner: Owner::Malloc(alloc.clone()),
        },
    );
    st.mallocs.insert(base, alloc);
    st.add_used(device, counted as u64);
    counters::inc(Counter::DeviceAllocations);
    Ok(base)
}

/// `aclrtFree`: `addr` must be the start of a live `aclrtMalloc` allocation. Like CANN's, it
/// does not wait for queued work: the memory stops being device memory for later calls and
/// its bytes stop counting at once, while work already queued on it keeps it mapped (pinned)
/// until that work is done, so it never touches unmapped memory.
pub(crate) fn free(addr: usize) -> AclResult {
    let mut st = state();
    let Some(alloc) = st.mallocs.get(&addr).cloned() else {
        return param(format!(
            "{addr:#x} is not the start of a live aclrtMalloc allocation"
        ));
    };
    let windows = st
        .physicals
        .get(&alloc.phys.handle)
        .map_or(0, |e| e.windows.len());
    if windows > 0 {
        return param(format!(
            "the aclrtMalloc memory at {addr:#x} is registered in {windows} symmetric \
             window(s): deregister first"
        ));
    }
    st.mallocs.remove(&addr);
    st.physicals.remove(&alloc.phys.handle);
    st.regions.remove(&addr);
    st.take_used(alloc.device, alloc.counted);
    drop(st);
    // Unmapped here unless queued work still pins it (then when that work is dropped).
    drop(alloc);
    counters::dec(Counter::DeviceAllocations);
    Ok(())
}

/// Whether `[addr, addr + len)` lies inside one user reservation (`aclrtReserveMemAddress`).
pub(crate) fn in_one_reservation(addr: usize, len: usize) -> bool {
    state().reservation_holding(addr, len).is_some()
}

/// Pins `[addr, addr + len)`, which must be wholly inside mapped device memory.
pub(crate) fn pin_range(addr: usize, len: usize) -> Result<Pins, String> {
    let mut pins = Pins::default();
    let verdict = state().pin(addr, len, &mut pins);
    // The lock is released before a failed attempt drops its pins: dropping the last
    // reference to a window takes the lock again.
    verdict.map(|()| pins)
}

/// Checks that `[addr, addr + len)` is wholly inside mapped device memory, as [`pin_range`]
/// does, but keeps nothing pinned: for records that refer to memory without holding it. The
/// error says what is not mapped.
pub(crate) fn check_mapped(addr: usize, len: usize) -> Result<(), String> {
    // The pins are dropped here, after `pin_range` released the lock.
    pin_range(addr, len).map(drop)
}

/// The device allocation behind an address, as `aclrtMemGetAddressRange` and
/// `aclrtMemRetainAllocationHandle` see it.
#[derive(Debug, Clone)]
pub(crate) enum Allocation {
    /// A user mapping of (part of) a physical allocation (`aclrtMapMem`).
    Mapped(Arc<Mapping>),
    /// `aclrtMalloc` memory: `size` bytes from `base`, over whole granules of `phys`.
    Malloc {
        base: usize,
        size: usize,
        phys: Arc<Physical>,
    },
}

impl Allocation {
    /// The first address and the size: the mapping's, or the allocation as asked for.
    pub(crate) fn range(&self) -> (usize, usize) {
        match self {
            Allocation::Mapped(m) => (m.base, m.size),
            Allocation::Malloc { base, size, .. } => (*base, *size),
        }
    }

    /// The physical allocation behind it.
    pub(crate) fn phys(&self) -> &Arc<Physical> {
        match self {
            Allocation::Mapped(m) => &m.phys,
            Allocation::Malloc { phys, .. } => phys,
        }
    }
}

/// The allocation containing `addr`: a user mapping or `aclrtMalloc` memory (not host
/// memory, nor a peer's memory in a symmetric heap).
pub(crate) fn allocation_at(addr: usize) -> Option<Allocation> {
    let st = state();
    let (base, region) = st.region_at(addr)?;
    match &region.owner {
        Owner::User(m) => Some(Allocation::Mapped(m.clone())),
        Owner::Malloc(alloc) => Some(Allocation::Malloc {
            base,
            size: region.end - base,
            phys: alloc.phys.clone(),
        }),
        Owner::Window(_) => None,
    }
}

/// The user mapping containing `addr`.
pub(crate) fn mapping_at(addr: usize) -> Option<Arc<Mapping>> {
    match state().region_at(addr) {
        Some((
            _,
            Region {
                owner: Owner::User(m),
                ..
            },
        )) => Some(m.clone()),
        _ => None,
    }
}

/// Records a symmetric heap's address space as device address space.
pub(crate) fn add_heap_space(base: usize, len: usize) {
    state().heaps.insert(base, base + len);
}

/// Forgets a symmetric heap's address space.
pub(crate) fn remove_heap_space(base: usize) {
    state().heaps.remove(&base);
}

/// Records a peer mapping inside a symmetric heap, owned by a window.
pub(crate) fn add_window_region(base: usize, len: usize, owner: Weak<dyn Any + Send + Sync>) {
    state().regions.insert(
        base,
        Region {
            end: base + len,
            owner: Owner::Window(owner),
        },
    );
}

/// Forgets a region recorded with [`add_window_region`].
pub(crate) fn remove_window_region(base: usize) {
    let mut st = state();
    if let Some(Region {
        owner: Owner::Window(_),
        ..
    }) = st.regions.get(&base)
    {
        st.regions.remove(&base);
    }
}

/// Records a live window over physical allocation `handle`, mapped at `base`: blocks
/// unmapping that mapping, and keeps the allocation (the window's mapping of it in its own
/// rank's heap) until [`detach_window`].
pub(crate) fn attach_window(handle: PhysicalHandle, base: usize) {
    if let Some(e) = state().physicals.get_mut(&handle) {
        e.windows.push(base);
    }
}

/// Undoes [`attach_window`].
pub(crate) fn detach_window(handle: PhysicalHandle, base: usize) {
    let mut st = state();
    if let Some(e) = st.physicals.get_mut(&handle)
        && let Some(i) = e.windows.iter().position(|&b| b == base)
    {
        e.windows.swap_remove(i);
    }
    release_if_unreferenced(st, handle);
}

#[cfg(test)]
mod tests {
    use std::ffi::c_void;
    use std::ptr::null_mut;

    use crate::sys::*;
    use crate::testutil::{DevBuf, acl, assert_clean, ok, recent};
    use crate::{
        GRANULARITY as G, acl::device::set_device_memory_limit, test_lock, testing::counters,
    };

    const PARAM: aclError = ACL_ERROR_RT_PARAM_INVALID;
    const NULL: aclError = ACL_ERROR_INVALID_PARAM;

    fn reserve(size: usize, align: usize) -> (aclError, *mut c_void) {
        let mut p = null_mut();
        // SAFETY: valid out-pointer.
        let code = unsafe { (acl().aclrtReserveMemAddress)(&mut p, size, align, null_mut(), 1) };
        (code, p)
    }

    fn malloc(size: usize, prop: &aclrtPhysicalMemProp) -> (aclError, aclrtDrvMemHandle) {
        let mut h = null_mut();
        // SAFETY: valid out-pointer and property.
        let code = unsafe { (acl().aclrtMallocPhysical)(&mut h, size, prop, 0) };
        (code, h)
    }

    #[test]
    fn reserve_rules() {
        let _g = test_lock();
        let a = acl();
        assert_eq!(reserve(0, 0).0, PARAM);
        assert_eq!(reserve(G + 4096, 0).0, PARAM);
        assert_eq!(reserve(G, 3).0, PARAM);
        let mut p = null_mut();
        // SAFETY: the emulator validates every argument; out-pointers are valid or null.
        unsafe {
            assert_eq!(
                (a.aclrtReserveMemAddress)(null_mut(), G, 0, null_mut(), 0),
                NULL
            );
            let hint = 0x1000_0000 as *mut c_void;
            assert_eq!((a.aclrtReserveMemAddress)(&mut p, G, 0, hint, 0), PARAM);
            assert_eq!(
                (a.aclrtReserveMemAddress)(&mut p, G, 0, null_mut(), 2),
                PARAM
            );
        }
        let (code, p) = reserve(4 * G, 1 << 30);
        ok(code);
        assert_eq!(p as usize % (1 << 30), 0);
        assert_eq!(counters().reservations, 1);
        // SAFETY: as above.
        unsafe {
            assert_eq!((a.aclrtReleaseMemAddress)(p.wrapping_byte_add(G)), PARAM);
            ok((a.aclrtReleaseMemAddress)(p));
            assert_eq!((a.aclrtReleaseMemAddress)(p), PARAM);
        }
        assert_clean();
    }

    #[test]
    fn physical_rules_and_limit() {
        let _g = test_lock();
        let a = acl();
        let good = aclrtPhysicalMemProp::device_huge(3);
        assert_eq!(malloc(0, &good).0, PARAM);
        assert_eq!(malloc(G / 2, &good).0, PARAM);
        let mut host = good;
        host.location.r#type = ACL_MEM_LOCATION_TYPE_HOST;
        assert_eq!(malloc(G, &host).0, PARAM);
        assert_eq!(malloc(G, &aclrtPhysicalMemProp::device_huge(64)).0, PARAM);
        let mut h = null_mut();
        // SAFETY: the emulator validates every argument.
        unsafe {
            assert_eq!((a.aclrtMallocPhysical)(null_mut(), G, &good, 0), NULL);
            assert_eq!(
                (a.aclrtMallocPhysical)(&mut h, G, std::ptr::null(), 0),
                NULL
            );
            assert_eq!((a.aclrtMallocPhysical)(&mut h, G, &good, 1), PARAM);
            assert_eq!((a.aclrtFreePhysical)(null_mut()), NULL);
            assert_eq!(
                (a.aclrtFreePhysical)(0x1234 as aclrtDrvMemHandle),
                ACL_ERROR_RT_INVALID_HANDLE
            );
        }

        set_device_memory_limit(3 * G as u64);
        let (code, first) = malloc(2 * G, &good);
        ok(code);
        assert_eq!(malloc(2 * G, &good).0, ACL_ERROR_RT_MEMORY_ALLOCATION);
        // Other devices have their own memory.
        let (code, other) = malloc(2 * G, &aclrtPhysicalMemProp::device_huge(4));
        ok(code);
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers; the device is set on this thread first.
        unsafe {
            ok((a.aclrtSetDevice)(3));
            ok((a.aclrtGetMemInfo)(
                aclrtMemAttr::ACL_HBM_MEM,
                &mut free,
                &mut total,
            ));
            assert_eq!((total, free), (3 * G, G));
            assert_eq!(
                (a.aclrtGetMemInfo)(aclrtMemAttr::ACL_HBM_MEM, null_mut(), &mut total),
                NULL
            );
            ok((a.aclrtResetDevice)(3));
            ok((a.aclrtFreePhysical)(first));
            ok((a.aclrtFreePhysical)(other));
            assert_eq!((a.aclrtFreePhysical)(first), ACL_ERROR_RT_INVALID_HANDLE);
        }
        set_device_memory_limit(0);
        assert_clean();
    }

    #[test]
    fn device_memory_never_exceeds_the_hosts_ram() {
        let _g = test_lock();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let ram = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
            .unwrap()
            * 1024;
        let device = aclrtPhysicalMemProp::device_huge(0);
        let mut total = 0usize;
        // SAFETY: valid out-pointers; the device is set on this thread first.
        unsafe {
            ok((acl().aclrtSetDevice)(0));
            ok((acl().aclrtGetMemInfo)(
                aclrtMemAttr::ACL_HBM_MEM,
                &mut 0,
                &mut total,
            ));
            ok((acl().aclrtResetDevice)(0));
        }
        assert!(
            total as u64 <= ram,
            "a device of {total} bytes on {ram} bytes of RAM"
        );
        // Past the RAM, an allocation fails: on any device, and however high the limit.
        let beyond = (ram as usize).next_multiple_of(G) + G;
        assert_eq!(malloc(beyond, &device).0, ACL_ERROR_RT_MEMORY_ALLOCATION);
        set_device_memory_limit(u64::MAX);
        assert_eq!(malloc(beyond, &device).0, ACL_ERROR_RT_MEMORY_ALLOCATION);
        // All devices' memory together is held to the RAM too.
        let half = (ram as usize / 2).next_multiple_of(G) + G;
        let (code, first) = malloc(half, &device);
        ok(code);
        let other = aclrtPhysicalMemProp::device_huge(1);
        assert_eq!(malloc(half, &other).0, ACL_ERROR_RT_MEMORY_ALLOCATION);
        let msg = recent();
        assert!(msg.contains("RAM"), "{msg}");
        // SAFETY: a live handle.
        ok(unsafe { (acl().aclrtFreePhysical)(first) });
        assert_clean();
    }

    #[test]
    fn map_rules() {
        let _g = test_lock();
        let a = acl();
        let (code, va) = reserve(4 * G, 0);
        ok(code);
        let (code, ph) = malloc(2 * G, &aclrtPhysicalMemProp::device_huge(0));
        ok(code);
        let at = |off: usize| va.wrapping_byte_add(off);
        // SAFETY: the emulator validates every argument.
        unsafe {
            let map = a.aclrtMapMem;
            assert_eq!(
                map(at(0), 2 * G, 0, 0x99 as aclrtDrvMemHandle, 0),
                ACL_ERROR_RT_INVALID_HANDLE
            );
            assert_eq!(map(at(0), 0, 0, ph, 0), PARAM);
            assert_eq!(map(at(0), G + 1, 0, ph, 0), PARAM);
            assert_eq!(map(at(4096), G, 0, ph, 0), PARAM, "unaligned");
            assert_eq!(map(at(0), G, 4096, ph, 0), PARAM, "unaligned offset");
            assert_eq!(map(at(0), 2 * G, G, ph, 0), PARAM, "past the allocation");
            assert_eq!(map(at(0), 2 * G, 0, ph, 1), PARAM, "flags");
            assert_eq!(
                map(at(3 * G), 2 * G, 0, ph, 0),
                PARAM,
                "past the reservation"
            );
            assert_eq!(map(null_mut(), 2 * G, 0, ph, 0), NULL);
            assert_eq!(map(at(0), 2 * G, 0, null_mut(), 0), NULL);
            assert_eq!((a.aclrtUnmapMem)(null_mut()), NULL);
            assert_eq!((a.aclrtReleaseMemAddress)(null_mut()), NULL);
            let outside = 0x7000_0000_0000usize as *mut c_void;
            assert_eq!(map(outside, 2 * G, 0, ph, 0), PARAM, "not reserved");

            ok(map(at(G), 2 * G, 0, ph, 0));
            assert_eq!(map(at(G), 2 * G, 0, ph, 0), PARAM, "double map");
            assert_eq!(map(at(0), 2 * G, 0, ph, 0), PARAM, "overlap below");
            assert_eq!(map(at(2 * G), G, 0, ph, 0), PARAM, "overlap inside");
            // The same physical memory mapped twice, at different addresses, is allowed.
            ok(map(at(3 * G), G, G, ph, 0));
            assert_eq!(counters().mappings, 2);

            assert_eq!(
                (a.aclrtReleaseMemAddress)(va),
                PARAM,
                "release while mapped"
            );
            assert_eq!((a.aclrtUnmapMem)(at(2 * G)), PARAM, "not a mapping start");
            assert_eq!((a.aclrtUnmapMem)(at(0)), PARAM, "not mapped");
            ok((a.aclrtUnmapMem)(at(G)));
            assert_eq!((a.aclrtUnmapMem)(at(G)), PARAM, "double unmap");
            ok((a.aclrtUnmapMem)(at(3 * G)));
            ok((a.aclrtFreePhysical)(ph));
            ok((a.aclrtReleaseMemAddress)(va));
        }
        assert_clean();
    }

    /// Each `aclrtMemRetainAllocationHandle` is a handle reference of its own that needs its
    /// own `aclrtFreePhysical`; freeing memory that is still mapped succeeds, and the memory
    /// goes (and stops counting in `aclrtGetMemInfo`) with its last mapping.
    #[test]
    fn retains_and_mappings_keep_an_allocation_until_the_last_goes() {
        let _g = test_lock();
        let a = acl();
        // SAFETY: plain device binding.
        unsafe { ok((a.aclrtSetDevice)(5)) };
        let before = free_bytes();
        let (code, va) = reserve(6 * G, 0);
        ok(code);
        let (code, ph) = malloc(2 * G, &aclrtPhysicalMemProp::device_huge(5));
        ok(code);
        assert_eq!(before - free_bytes(), 2 * G);
        let at = |off: usize| va.wrapping_byte_add(off);
        let retain = a.aclrtMemRetainAllocationHandle.unwrap();
        let data = [7u8; 64];
        let mut back = [0u8; 64];
        // SAFETY: the emulator validates every argument; host buffers are valid for 64 bytes.
        unsafe {
            // The same allocation mapped twice.
            ok((a.aclrtMapMem)(at(0), 2 * G, 0, ph, 0));
            ok((a.aclrtMapMem)(at(2 * G), 2 * G, 0, ph, 0));
            let (mut h1, mut h2) = (null_mut(), null_mut());
            ok(retain(at(4096), &mut h1));
            ok(retain(at(2 * G), &mut h2));
            assert_eq!((h1, h2), (ph, ph));
            assert_eq!(retain(at(4 * G), &mut h1), PARAM, "not mapped");
            // Three references: the allocation's own and two retains.
            ok((a.aclrtFreePhysical)(ph));
            ok((a.aclrtFreePhysical)(ph));
            ok((a.aclrtMapMem)(at(4 * G), 2 * G, 0, ph, 0));
            ok((a.aclrtUnmapMem)(at(4 * G)));
            ok((a.aclrtFreePhysical)(ph));
            // No handle reference is left: the handle names nothing any more ...
            assert_eq!((a.aclrtFreePhysical)(ph), ACL_ERROR_RT_INVALID_HANDLE);
            assert_eq!(
                (a.aclrtMapMem)(at(4 * G), 2 * G, 0, ph, 0),
                ACL_ERROR_RT_INVALID_HANDLE
            );
            // ... but the memory stays, counted, while it is mapped.
            assert_eq!(counters().physical_allocations, 1);
            assert_eq!(before - free_bytes(), 2 * G);
            let kind = aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE;
            ok((a.aclrtMemcpy)(at(G), 64, data.as_ptr().cast(), 64, kind));
            ok((a.aclrtUnmapMem)(at(0)));
            assert_eq!(before - free_bytes(), 2 * G, "one mapping is left");
            let kind = aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST;
            ok((a.aclrtMemcpy)(
                back.as_mut_ptr().cast(),
                64,
                at(3 * G),
                64,
                kind,
            ));
            assert_eq!(back, data);
            // The last unmap releases it.
            ok((a.aclrtUnmapMem)(at(2 * G)));
            assert_eq!(free_bytes(), before);
            assert_eq!(counters().physical_allocations, 0);
            ok((a.aclrtReleaseMemAddress)(va));
            ok((a.aclrtResetDevice)(5));
        }
        assert_clean();
    }

    #[test]
    fn granularity() {
        let _g = test_lock();
        let mut prop = aclrtPhysicalMemProp::device_huge(0);
        let mut g = 0usize;
        let get = acl().aclrtMemGetAllocationGranularity;
        // SAFETY: valid pointers, or null where the emulator must refuse.
        unsafe {
            for opt in [0, 1] {
                ok(get(&mut prop, aclrtMemGranularityOptions(opt), &mut g));
                assert_eq!(g, G);
            }
            assert_eq!(get(&mut prop, aclrtMemGranularityOptions(2), &mut g), PARAM);
            assert_eq!(get(null_mut(), aclrtMemGranularityOptions(0), &mut g), NULL);
            assert_eq!(
                get(&mut prop, aclrtMemGranularityOptions(0), null_mut()),
                NULL
            );
        }
    }

    #[test]
    fn mapped_memory_is_the_physical_memory() {
        let _g = test_lock();
        let buf = DevBuf::new(0, 2 * G);
        buf.write(G - 4, &[1u32, 2, 3]);
        assert_eq!(buf.read::<u32>(G - 4, 3), vec![1, 2, 3]);
        // A second mapping of the same allocation sees the same bytes.
        let (code, va) = reserve(G, 0);
        ok(code);
        // SAFETY: validated by the emulator; the mapping is then read through aclrtMemcpy.
        unsafe { ok((acl().aclrtMapMem)(va, G, G, buf.phys, 0)) };
        let mut out = [0u32; 2];
        // SAFETY: `out` is valid for 8 bytes.
        unsafe {
            ok((acl().aclrtMemcpy)(
                out.as_mut_ptr().cast(),
                8,
                va,
                8,
                aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
            ));
            ok((acl().aclrtUnmapMem)(va));
            ok((acl().aclrtReleaseMemAddress)(va));
        }
        assert_eq!(out, [2, 3]);
        buf.free();
        assert_clean();
    }

    /// `aclrtMalloc` through the table (an optional entry the emulator fills).
    fn dmalloc(size: usize, policy: i32) -> (aclError, *mut c_void) {
        let mut p = null_mut();
        // SAFETY: a valid out-pointer.
        let code =
            unsafe { acl().aclrtMalloc.unwrap()(&mut p, size, aclrtMemMallocPolicy(policy)) };
        (code, p)
    }

    fn dfree(p: *mut c_void) -> aclError {
        // SAFETY: the emulator validates the pointer.
        unsafe { acl().aclrtFree.unwrap()(p) }
    }

    fn free_bytes() -> usize {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        ok(unsafe { (acl().aclrtGetMemInfo)(aclrtMemAttr::ACL_HBM_MEM, &mut free, &mut total) });
        free
    }

    #[test]
    fn malloc_rules_and_accounting() {
        let _g = test_lock();
        let a = acl();
        assert_eq!(dmalloc(64, 0).0, ACL_ERROR_RT_CONTEXT_NULL, "no device");
        // SAFETY: plain device binding; the emulator validates every pointer below.
        unsafe { ok((a.aclrtSetDevice)(12)) };
        // SAFETY: as above.
        unsafe {
            assert_eq!(
                a.aclrtMalloc.unwrap()(null_mut(), 64, aclrtMemMallocPolicy(0)),
                NULL
            );
        }
        assert_eq!(dmalloc(0, 0).0, NULL);
        assert_eq!(dmalloc(usize::MAX, 0).0, NULL);
        assert!(recent().contains("too large"));
        let before = free_bytes();
        let (code, p) = dmalloc(100, 0);
        ok(code);
        assert_eq!(p as usize % 64, 0);
        assert_eq!(counters().device_allocations, 1);
        // 100 bytes count as 128 + 32, as CANN rounds and pads on A2 / A3.
        assert_eq!(before - free_bytes(), 160);
        // Every policy value is accepted, flags and unknown values too.
        let (code, q) = dmalloc(G + 1, 0x1000 | 1);
        ok(code);
        let (code, r) = dmalloc(8, 99);
        ok(code);

        let data: Vec<u8> = (0..100).collect();
        let mut back = [0u8; 100];
        let (h, hb) = (
            data.as_ptr().cast::<c_void>(),
            back.as_mut_ptr().cast::<c_void>(),
        );
        // SAFETY: host buffers are valid for 100 bytes; device sides are validated.
        unsafe {
            let cp = a.aclrtMemcpy;
            let kind = |k| aclrtMemcpyKind(k);
            assert_eq!(cp(p, 101, h, 101, kind(1)), PARAM, "past the allocation");
            assert_eq!(
                cp(p, 100, h, 100, kind(0)),
                PARAM,
                "device memory, not host"
            );
            ok(cp(p, 100, h, 100, kind(1)));
            ok(cp(q.wrapping_byte_add(G - 99), 100, p, 100, kind(3)));
            ok(cp(hb, 100, q.wrapping_byte_add(G - 99), 100, kind(4)));
            assert_eq!(back.as_slice(), data.as_slice());
            ok((a.aclrtMemset)(p, 100, 0xEE, 100));
            assert_eq!(
                (a.aclrtMemset)(p, 200, 0, 101),
                PARAM,
                "past the allocation"
            );
            assert_eq!((a.aclrtMemset)(p, 4, 0, 8), PARAM, "count > maxCount");
            ok(cp(hb, 100, p, 100, kind(2)));
            assert_eq!(back, [0xEE; 100]);
            // Not a mapping of the VMM calls.
            assert_eq!((a.aclrtUnmapMem)(p), PARAM);
            assert_eq!((a.aclrtReleaseMemAddress)(p), PARAM);
        }
        assert_eq!(dfree(null_mut()), NULL);
        assert_eq!(dfree(p.wrapping_byte_add(64)), PARAM, "not the start");
        assert_eq!(dfree(back.as_mut_ptr().cast()), PARAM, "host memory");
        ok(dfree(p));
        assert_eq!(dfree(p), PARAM, "double free");
        // Freed memory is no longer device memory.
        // SAFETY: as above.
        let code =
            unsafe { (a.aclrtMemcpy)(p, 100, h, 100, aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE) };
        assert_eq!(code, PARAM);
        ok(dfree(q));
        ok(dfree(r));
        assert_eq!(free_bytes(), before);

        // Counted against the device's limit, with CANN's padding.
        set_device_memory_limit(4096);
        assert_eq!(dmalloc(4096, 0).0, ACL_ERROR_RT_MEMORY_ALLOCATION);
        let (code, p) = dmalloc(4064, 0);
        ok(code);
        assert_eq!(free_bytes(), 0);
        assert_eq!(dmalloc(1, 0).0, ACL_ERROR_RT_MEMORY_ALLOCATION);
        ok(dfree(p));
        set_device_memory_limit(0);
        // SAFETY: plain device binding.
        unsafe { ok((a.aclrtResetDevice)(12)) };
        assert_clean();
    }

    #[test]
    fn free_does_not_wait_for_queued_work_which_still_runs_safely() {
        let _g = test_lock();
        let a = acl();
        let mut s = null_mut();
        let out = crate::testutil::PinnedBuf::new(&[0u8; 64]);
        // SAFETY: valid out-pointers; `out` outlives the synchronize.
        unsafe {
            ok((a.aclrtSetDevice)(12));
            ok((a.aclrtCreateStream)(&mut s));
            let before = free_bytes();
            let (code, p) = dmalloc(64, 0);
            ok(code);
            let open = crate::testutil::gate(s);
            ok((a.aclrtMemsetAsync)(p, 64, 0x42, 64, s));
            ok((a.aclrtMemcpyAsync)(
                out.ptr(),
                64,
                p,
                64,
                aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
                s,
            ));
            // Freed at once, while the work is queued: the bytes stop counting now.
            ok(dfree(p));
            assert_eq!(free_bytes(), before);
            assert_eq!(counters().device_allocations, 0);
            drop(open);
            ok((a.aclrtSynchronizeStream)(s));
            ok((a.aclrtDestroyStream)(s));
            ok((a.aclrtResetDevice)(12));
        }
        // The queued work ran on memory that stayed mapped until it was done.
        assert_eq!(out.get(), [0x42; 64]);
        drop(out);
        assert_clean();
    }

    #[test]
    fn staged_collectives_accept_malloc_memory() {
        use crate::testutil::{hccl, hok, run_ranks, test_config};
        let _g = test_lock();
        run_ranks(2, &test_config(), |r| {
            let a = acl();
            let (code, send) = dmalloc(16, 0);
            ok(code);
            let (code, recv) = dmalloc(16, 0);
            ok(code);
            let mine = [r.rank as f32 + 1.0; 4];
            let mut sum = [0f32; 4];
            // SAFETY: host buffers valid for 16 bytes; device buffers validated.
            unsafe {
                ok((a.aclrtMemcpy)(
                    send,
                    16,
                    mine.as_ptr().cast(),
                    16,
                    aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE,
                ));
                hok((hccl().HcclAllReduce)(
                    send,
                    recv,
                    4,
                    HcclDataType::HCCL_DATA_TYPE_FP32,
                    HcclReduceOp::HCCL_REDUCE_SUM,
                    r.comm,
                    r.stream,
                ));
                // A range past the allocation is refused when called.
                assert_eq!(
                    (hccl().HcclAllReduce)(
                        send,
                        recv,
                        5,
                        HcclDataType::HCCL_DATA_TYPE_FP32,
                        HcclReduceOp::HCCL_REDUCE_SUM,
                        r.comm,
                        r.stream,
                    ),
                    HcclResult::HCCL_E_PARA
                );
                ok(r.sync());
                ok((a.aclrtMemcpy)(
                    sum.as_mut_ptr().cast(),
                    16,
                    recv,
                    16,
                    aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
                ));
            }
            ok(dfree(send));
            ok(dfree(recv));
            sum
        })
        .iter()
        .for_each(|sum| assert_eq!(*sum, [3.0; 4]));
        assert_clean();
    }
}
