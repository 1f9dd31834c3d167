//! Symmetric windows, as on Atlas A3: each rank's heap reserves `stride * rankSize` of address
//! space, and a window maps every rank's physical memory at `heapBase + stride * r + slot` in
//! every rank's heap (the same memfd pages, mapped again), so peers' memory really is visible
//! at the same offset.
//!
//! This module holds the heap, the window (which maps its peers when made and unmaps them when
//! dropped) and the registry of live window handles. The collective calls that make, find and
//! remove windows are in [`crate::hccl::registration`]; the tests below run them through the C API.

use std::any::Any;
use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use crate::sys::HcclResult;

use crate::GRANULARITY;
use crate::acl::memory::{self, Physical};
use crate::base::counters::{self, Counter};
use crate::base::errors::{HcclRes, hccl_fail};
use crate::base::handle::{CommHandle, PhysicalHandle, WindowHandle};
use crate::base::lock::{RankedMutex, lock, ranks};
use crate::ipc::os;

/// One rank's symmetric heap on one communicator: `stride * n` bytes of reserved address
/// space, and the deterministic first-fit allocator of window slots inside one stride.
pub(crate) struct SymHeap {
    space: os::Space,
    /// Bytes per rank.
    pub(crate) stride: usize,
    /// The communicator handle it belongs to, the rank it belongs to, and the rank count.
    comm: CommHandle,
    rank: u32,
    n: u32,
    /// Allocated slots: offset -> size (granularity multiples).
    slots: RankedMutex<BTreeMap<usize, usize>>,
}

impl SymHeap {
    /// Reserves the heap of rank `rank` of communicator `comm`: `n` ranks of `stride` bytes.
    pub(crate) fn new(comm: CommHandle, rank: u32, n: u32, stride: usize) -> HcclRes<Self> {
        let len = stride * n as usize;
        let space = os::reserve(len.max(GRANULARITY), GRANULARITY).or_else(|e| {
            hccl_fail(
                HcclResult::HCCL_E_MEMORY,
                format!("cannot reserve the {len}-byte symmetric heap: {e}"),
            )
        })?;
        memory::add_heap_space(space.addr(), space.len());
        Ok(SymHeap {
            space,
            stride,
            comm,
            rank,
            n,
            slots: RankedMutex::new(ranks::HEAP_SLOTS, BTreeMap::new()),
        })
    }

    /// Where rank `rank`'s copy of byte `offset` of the window at `slot` is mapped.
    pub(crate) fn addr(&self, rank: u32, slot: usize, offset: usize) -> usize {
        self.space.addr() + self.stride * rank as usize + slot + offset
    }

    /// First fit: the lowest offset with `size` free bytes. Deterministic, so ranks making the
    /// same calls in the same order get the same slots.
    pub(crate) fn alloc(&self, size: usize) -> Option<usize> {
        let mut slots = lock(&self.slots);
        let mut cursor = 0;
        for (&off, &len) in slots.iter() {
            if off - cursor >= size {
                break;
            }
            cursor = off + len;
        }
        (self.stride - cursor >= size).then(|| {
            slots.insert(cursor, size);
            cursor
        })
    }

    /// Bytes of one stride in allocated slots.
    pub(crate) fn used(&self) -> usize {
        lock(&self.slots).values().sum()
    }

    /// Gives back the slot at `slot`.
    pub(crate) fn free(&self, slot: usize) {
        lock(&self.slots).remove(&slot);
    }
}

impl Drop for SymHeap {
    fn drop(&mut self) {
        memory::remove_heap_space(self.space.addr());
    }
}

/// What a window handle points to: the emulator's stand-in for HCCL's device copy of the
/// window descriptor. Opaque to callers; its address is the handle.
#[repr(C)]
#[allow(
    dead_code,
    reason = "never read on the host: it is what the opaque handle points at"
)]
struct WindowDesc {
    magic: u64,
    heap_base: u64,
    stride: u64,
    slot: u64,
    size: u64,
    user_base: u64,
    rank: u32,
    rank_size: u32,
}

const DESC_MAGIC: u64 = u64::from_le_bytes(*b"symwin\0\0");

/// One rank's registered window.
pub(crate) struct Window {
    desc: Box<WindowDesc>,
    heap: Arc<SymHeap>,
    /// Offset of the window in every rank's stride (identical on all ranks).
    pub(crate) slot: usize,
    /// The registration's collective host sequence number: identical on all ranks and never
    /// reused on the communicator, unlike `slot` (a later window may take a freed slot).
    pub(crate) id: u64,
    /// Bytes: the whole physical allocation.
    pub(crate) size: usize,
    /// Where the user mapped the allocation on this rank.
    pub(crate) user_base: usize,
    /// The `aclrtDrvMemHandle` of the allocation.
    pub(crate) phys: PhysicalHandle,
    /// Registrations of this allocation on this rank not yet deregistered. Each holds a
    /// handle reference to the allocation, as HCCL's retain does (hicann/hcomm
    /// `symmetric_memory.cc`: `GetMemoryInfo` retains, `DeregisterSymmetricMem` frees): one
    /// is given back per deregistration, the rest when the window goes.
    pub(crate) refs: AtomicU32,
    /// The peers' allocations this window maps that are allocations of this process (peers
    /// that are thread ranks): HCCL's imports, each keeping its allocation until the window
    /// goes.
    imports: Vec<PhysicalHandle>,
    /// Set when a peer is gone for good ([`Window::outlived_peers`]): the window's
    /// communicator is dead, and its peers' mappings are unmapped in the background.
    peers_gone: AtomicBool,
}

impl Window {
    /// Makes the window over `phys` (mapped at `user_base` on this rank) in `slot` of `heap`,
    /// registered as collective host call `id`, and maps every rank's allocation (`peers`, in
    /// rank order) into this rank's heap. The window holds one handle reference to `phys` (its
    /// first registration's retain) and one import of each peer's allocation that lives in
    /// this process.
    pub(crate) fn create<'a>(
        heap: Arc<SymHeap>,
        slot: usize,
        id: u64,
        phys: &Physical,
        user_base: usize,
        peers: impl IntoIterator<Item = Option<BorrowedFd<'a>>>,
    ) -> HcclRes<Arc<Window>> {
        let size = phys.size;
        let peers: Vec<Option<BorrowedFd<'a>>> = peers.into_iter().collect();
        if !memory::retain_handle(phys.handle) {
            return hccl_fail(
                HcclResult::HCCL_E_PARA,
                format!("physical allocation {:#x} is gone", phys.handle),
            );
        }
        let imports = peers
            .iter()
            .enumerate()
            .filter(|&(r, _)| r as u32 != heap.rank)
            .filter_map(|(_, fd)| fd.and_then(memory::import))
            .collect();
        let desc = Box::new(WindowDesc {
            magic: DESC_MAGIC,
            heap_base: heap.addr(0, 0, 0) as u64,
            stride: heap.stride as u64,
            slot: slot as u64,
            size: size as u64,
            user_base: user_base as u64,
            rank: heap.rank,
            rank_size: heap.n,
        });
        memory::attach_window(phys.handle, user_base);
        counters::inc(Counter::Windows);
        // From here on, dropping the window undoes everything.
        let w = Arc::new(Window {
            desc,
            heap,
            slot,
            id,
            size,
            user_base,
            phys: phys.handle,
            refs: AtomicU32::new(1),
            imports,
            peers_gone: AtomicBool::new(false),
        });
        for (r, peer) in peers.into_iter().enumerate() {
            let Some(peer) = peer else {
                return hccl_fail(HcclResult::HCCL_E_INTERNAL, "a peer sent no memory handle");
            };
            let at = w.peer_addr(r as u32, 0);
            // SAFETY: [at, at + size) is this window's slot of rank r, inside this rank's heap
            // reservation; the slot was free, so nothing else maps or uses it.
            unsafe { os::map_fixed(at, size, peer, 0) }.or_else(|e| {
                hccl_fail(
                    HcclResult::HCCL_E_MEMORY,
                    format!("mapping rank {r}'s memory at {at:#x}: {e}"),
                )
            })?;
            let owner: Weak<dyn Any + Send + Sync> = Arc::downgrade(&w) as Weak<Window>;
            memory::add_window_region(at, size, owner);
        }
        Ok(w)
    }

    /// The `HcclCommSymWindow` value.
    pub(crate) fn handle(&self) -> WindowHandle {
        WindowHandle::from_raw((&raw const *self.desc) as usize)
    }

    /// Where rank `rank`'s byte `offset` of this window is visible in this rank's heap.
    pub(crate) fn peer_addr(&self, rank: u32, offset: usize) -> usize {
        self.heap.addr(rank, self.slot, offset)
    }

    /// Notes that a peer is gone for good (its process died, or it left): the window's
    /// communicator can never register again, so its slot need not be freed, and the peers'
    /// mappings are unmapped off the caller's path when the window goes. Unmapping the last
    /// mapping of a dead process's memory frees all of it (the kernel truncates its memfd:
    /// 150 ms for 1 GiB here), which would otherwise stall the survivor that happens to be last.
    pub(crate) fn outlived_peers(&self) {
        self.peers_gone.store(true, Ordering::Relaxed);
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        let mut unmapped = true;
        let mut later = Vec::new();
        let peers_gone = *self.peers_gone.get_mut();
        for r in 0..self.heap.n {
            let at = self.peer_addr(r, 0);
            memory::remove_window_region(at);
            if r != self.heap.rank && peers_gone {
                later.push(at);
                continue;
            }
            // SAFETY: the range is this window's slot of rank r inside the heap reservation;
            // no pin refers to the window any more (it is being dropped), so nothing accesses it.
            unmapped &= unsafe { os::unmap_to_reserved(at, self.size) }.is_ok();
        }
        if !later.is_empty() {
            unmap_in_background(Arc::clone(&self.heap), later, self.size);
        } else if unmapped {
            // A slot whose pages could not be unmapped is never handed out again.
            self.heap.free(self.slot);
        }
        memory::detach_window(self.phys, self.user_base);
        for &peer in &self.imports {
            memory::release_import(peer);
        }
        // The retains of the registrations left (one after a last deregistration; all of
        // them when the communicator is destroyed).
        for _ in 0..self.refs.load(Ordering::Relaxed) {
            memory::release_handle(self.phys);
        }
        counters::dec(Counter::Windows);
    }
}

/// Unmaps the `len`-byte ranges at `addrs` of `heap` on a thread of their own; the thread
/// keeps the heap's reservation, so nothing else is mapped there before it is done. If no
/// thread can be started, the ranges go with the reservation, when the heap's communicator
/// is destroyed.
fn unmap_in_background(heap: Arc<SymHeap>, addrs: Vec<usize>, len: usize) {
    let unmap = move || {
        for at in addrs {
            // SAFETY: each range is a dropped window's slot of a peer inside `heap`'s
            // reservation, which this closure keeps alive; nothing accesses it any more.
            let _ = unsafe { os::unmap_to_reserved(at, len) };
        }
        drop(heap);
    };
    let _ = std::thread::Builder::new()
        .name("symheap-unmap".into())
        .spawn(unmap);
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("comm", &format_args!("{:#x}", self.heap.comm))
            .field("slot", &self.slot)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// Live window handles -> their communicator handle.
static WINDOWS: RankedMutex<BTreeMap<WindowHandle, CommHandle>> =
    RankedMutex::new(ranks::WINDOWS, BTreeMap::new());

/// Records the handle of `w`, which then names it (until [`forget_window`]).
pub(crate) fn remember_window(w: &Window) {
    lock(&WINDOWS).insert(w.handle(), w.heap.comm);
}

/// Forgets the handle of `w` (the window itself goes when its last reference does).
pub(crate) fn forget_window(w: &Window) {
    lock(&WINDOWS).remove(&w.handle());
}

/// The communicator handle of the live window `handle`.
pub(crate) fn window_comm(handle: WindowHandle) -> Option<CommHandle> {
    lock(&WINDOWS).get(&handle).copied()
}

#[cfg(test)]
mod tests {
    use std::ffi::c_void;
    use std::ptr::null_mut;
    use std::sync::Barrier;
    use std::time::{Duration, Instant};

    use super::WindowDesc;
    use crate::sys::*;
    use crate::testutil::{
        DevBuf, Rank, acl, assert_clean, deregister, free_here, free_on, hccl, hok, ok, recent,
        register, run_ranks, test_config,
    };
    use crate::{GRANULARITY as G, test_lock, testing::counters};

    const PARA: HcclResult = HcclResult::HCCL_E_PARA;
    const PTR: HcclResult = HcclResult::HCCL_E_PTR;

    fn reg(r: &Rank, addr: *mut c_void, size: u64, flag: u32) -> (HcclResult, HcclCommSymWindow) {
        let mut win = null_mut();
        // SAFETY: the emulator validates everything but the out-pointer, which is valid.
        let code =
            unsafe { (hccl().HcclCommSymWinRegister.unwrap())(r.comm, addr, size, &mut win, flag) };
        (code, win)
    }

    fn get(
        r: &Rank,
        ptr: *mut c_void,
        size: usize,
    ) -> Result<(HcclCommSymWindow, usize), HcclResult> {
        let (mut win, mut off) = (null_mut(), 0);
        // SAFETY: valid out-pointers.
        let code =
            unsafe { (hccl().HcclCommSymWinGet.unwrap())(r.comm, ptr, size, &mut win, &mut off) };
        if code == HcclResult::HCCL_SUCCESS {
            Ok((win, off))
        } else {
            Err(code)
        }
    }

    /// Where rank `peer`'s byte `offset` of `win` is mapped in the calling rank's heap.
    fn heap_addr(win: HcclCommSymWindow, peer: u32, offset: usize) -> *mut c_void {
        // SAFETY: a live window handle points to its descriptor (an emulator detail the tests
        // may rely on).
        let d = unsafe { &*(win as *const WindowDesc) };
        (d.heap_base + d.stride * peer as u64 + d.slot + offset as u64) as *mut c_void
    }

    #[test]
    fn register_checks_locally_in_the_reference_order() {
        let _g = test_lock();
        let mut cfg = test_config();
        cfg.hcclSymWinMaxMemSizePerRank = 1;
        run_ranks(2, &cfg, |r| {
            let reg_fn = hccl().HcclCommSymWinRegister.unwrap();
            let buf = DevBuf::new(r.rank, 2 * G);
            let mut win = null_mut();
            let mut host = [0u8; 64];
            // SAFETY: the emulator validates every argument.
            unsafe {
                assert_eq!(reg_fn(null_mut(), buf.ptr, 64, &mut win, 1), PTR);
                assert_eq!(reg_fn(r.comm, null_mut(), 64, &mut win, 1), PTR);
                assert_eq!(reg_fn(r.comm, buf.ptr, 64, null_mut(), 1), PTR);
                assert_eq!(reg_fn(0x55 as HcclComm, buf.ptr, 64, &mut win, 1), PARA);
            }
            assert_eq!(reg(r, buf.ptr, 0, 1).0, PARA);
            assert_eq!(reg(r, buf.ptr, 64, 0).0, PARA);
            assert_eq!(reg(r, host.as_mut_ptr().cast(), 64, 1).0, PARA);
            assert!(recent().contains("not in device memory"), "{}", recent());
            assert_eq!(
                reg(r, buf.at(G), G as u64 + 1, 1).0,
                PARA,
                "past the mapping"
            );

            // Reserved but unmapped address space, then only part of an allocation mapped.
            let a = acl();
            let (mut va, mut ph) = (null_mut(), null_mut());
            let prop = aclrtPhysicalMemProp::device_huge(r.rank);
            // SAFETY: valid out-pointers; everything is released below.
            unsafe {
                ok((a.aclrtReserveMemAddress)(&mut va, 2 * G, 0, null_mut(), 0));
                ok((a.aclrtMallocPhysical)(&mut ph, 2 * G, &prop, 0));
            }
            assert_eq!(reg(r, va, 64, 1).0, PARA);
            // SAFETY: handles from above.
            unsafe { ok((a.aclrtMapMem)(va, G, 0, ph, 0)) };
            assert_eq!(reg(r, va, 64, 1).0, PARA);
            assert!(recent().contains("whole allocation"));
            // SAFETY: handles from above.
            unsafe {
                ok((a.aclrtUnmapMem)(va));
                ok((a.aclrtFreePhysical)(ph));
                ok((a.aclrtReleaseMemAddress)(va));
            }

            // A window larger than the 1 GiB stride.
            let big = DevBuf::new(r.rank, 1024 * G / 2 + G);
            assert_eq!(reg(r, big.ptr, 64, 1).0, HcclResult::HCCL_E_MEMORY);
            big.free();

            // The heap fills up: 2 x 510 MiB fit in 1 GiB, a third does not.
            let parts: Vec<DevBuf> = (0..3).map(|_| DevBuf::new(r.rank, 255 * G)).collect();
            let w0 = register(r, &parts[0]);
            let w1 = register(r, &parts[1]);
            assert_eq!(reg(r, parts[2].ptr, 64, 1).0, HcclResult::HCCL_E_MEMORY);
            assert!(recent().contains("hcclSymWinMaxMemSizePerRank"));
            // Freeing the first slot makes room again (first fit reuses it).
            deregister(w0);
            let w2 = register(r, &parts[2]);
            // SAFETY: live window handles point to their descriptors.
            unsafe { assert_eq!((*(w2 as *const WindowDesc)).slot, 0) };
            deregister(w1);
            deregister(w2);
            parts.into_iter().for_each(DevBuf::free);

            // After all those failures the ranks are still in step.
            let w = register(r, &buf);
            deregister(w);
            buf.free();
        });
        assert_clean();
    }

    #[test]
    fn peers_see_each_other_through_the_heap() {
        let _g = test_lock();
        for n in [2u32, 3] {
            let before = counters().registrations;
            let barrier = Barrier::new(n as usize);
            run_ranks(n, &test_config(), |r| {
                let small = DevBuf::new(r.rank, G);
                let buf = DevBuf::new(r.rank, 4 * G);
                let w_small = register(r, &small);
                // Registering with a smaller size still covers the whole allocation.
                let (code, win) = reg(r, buf.at(G), 64, 1);
                hok(code);
                assert_eq!(counters().windows, 2 * n as u64);
                // SAFETY: live window handles point to their descriptors.
                let (d_small, d) = unsafe {
                    (
                        &*(w_small as *const WindowDesc),
                        &*(win as *const WindowDesc),
                    )
                };
                assert_eq!((d_small.slot, d.slot, d.size), (0, G as u64, 4 * G as u64));

                // Each rank writes its own memory; every rank reads every peer's through its heap.
                buf.write(3 * G, &[r.rank * 100, r.rank * 100 + 1]);
                barrier.wait();
                for peer in 0..n {
                    let mut got = [0u32; 2];
                    // SAFETY: `got` is valid for 8 bytes; the heap address is validated.
                    ok(unsafe {
                        (acl().aclrtMemcpy)(
                            got.as_mut_ptr().cast(),
                            8,
                            heap_addr(win, peer, 3 * G),
                            8,
                            aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
                        )
                    });
                    assert_eq!(got, [peer * 100, peer * 100 + 1]);
                }
                barrier.wait();

                // Get: offsets from the window base; ranges must lie wholly inside a window.
                assert_eq!(get(r, buf.at(5000), 100), Ok((win, 5000)));
                assert_eq!(get(r, buf.ptr, 4 * G), Ok((win, 0)));
                assert_eq!(get(r, small.at(G - 1), 1), Ok((w_small, G - 1)));
                assert_eq!(
                    get(r, buf.at(4 * G - 10), 11),
                    Err(HcclResult::HCCL_E_NOT_FOUND)
                );
                assert_eq!(get(r, buf.at(0), 0), Err(PARA));
                let mut host = 0u64;
                assert_eq!(
                    get(r, (&raw mut host).cast(), 8),
                    Err(HcclResult::HCCL_E_NOT_FOUND)
                );
                let (mut w, mut o) = (null_mut(), 0);
                let get_fn = hccl().HcclCommSymWinGet.unwrap();
                // SAFETY: the emulator validates every argument.
                unsafe {
                    assert_eq!(get_fn(null_mut(), buf.ptr, 8, &mut w, &mut o), PTR);
                    assert_eq!(get_fn(r.comm, null_mut(), 8, &mut w, &mut o), PTR);
                    assert_eq!(get_fn(r.comm, buf.ptr, 8, null_mut(), &mut o), PTR);
                    assert_eq!(get_fn(r.comm, buf.ptr, 8, &mut w, null_mut()), PTR);
                }

                // The same allocation again: the same handle, counted twice.
                let (code, again) = reg(r, buf.ptr, 4 * G as u64, 1);
                hok(code);
                assert_eq!(again, win);
                assert_eq!(counters().windows, 2 * n as u64);
                // A retain while registered is a reference of its own, given back by
                // aclrtFreePhysical.
                let mut h = null_mut();
                // SAFETY: a valid out-pointer; the handle is given back at once.
                unsafe {
                    ok((acl().aclrtMemRetainAllocationHandle.unwrap())(
                        buf.ptr, &mut h,
                    ));
                    assert_eq!(h, buf.phys);
                    ok((acl().aclrtFreePhysical)(h));
                }
                deregister(again);
                assert_eq!(get(r, buf.ptr, 8), Ok((win, 0)), "still registered once");
                deregister(win);
                deregister(w_small);
                let dereg = hccl().HcclCommSymWinDeregister.unwrap();
                // SAFETY: the emulator validates the handle.
                unsafe {
                    assert_eq!(dereg(win), PARA);
                    assert_eq!(dereg(null_mut()), PTR);
                }
                assert_eq!(get(r, buf.ptr, 8), Err(HcclResult::HCCL_E_NOT_FOUND));
                // Deregistering never frees the user's memory.
                assert_eq!(
                    buf.read::<u32>(3 * G, 2),
                    vec![r.rank * 100, r.rank * 100 + 1]
                );
                small.free();
                buf.free();
            });
            assert_eq!(counters().registrations - before, 3 * n as u64);
            assert_clean();
        }
    }

    #[test]
    fn mismatched_sizes_fail_on_every_rank_and_change_nothing() {
        let _g = test_lock();
        let codes = run_ranks(3, &test_config(), |r| {
            let buf = DevBuf::new(r.rank, if r.rank == 1 { 4 * G } else { 2 * G });
            let (code, _) = reg(r, buf.ptr, 2 * G as u64, 1);
            let msg = recent();
            // Nothing was registered, and the slot was given back.
            let fixed = DevBuf::new(r.rank, 2 * G);
            let w = register(r, &fixed);
            // SAFETY: live window handles point to their descriptors.
            assert_eq!(unsafe { (*(w as *const WindowDesc)).slot }, 0);
            deregister(w);
            fixed.free();
            buf.free();
            (code, msg)
        });
        for (code, msg) in codes {
            assert_eq!(code, HcclResult::HCCL_E_INTERNAL);
            assert!(msg.contains("rank 1: size"), "{msg}");
        }
        assert_clean();
    }

    #[test]
    fn a_rank_that_never_registers_makes_the_others_time_out() {
        let _g = test_lock();
        let mut cfg = test_config();
        cfg.hcclExecTimeOut = 1;
        // Rank 1 stays alive (its communicator too) until rank 0 has given up.
        let done = Barrier::new(2);
        let codes = run_ranks(2, &cfg, |r| {
            if r.rank == 1 {
                done.wait();
                return HcclResult::HCCL_SUCCESS;
            }
            let buf = DevBuf::new(r.rank, G);
            let (code, _) = reg(r, buf.ptr, G as u64, 1);
            assert!(recent().contains("waited 1.0 s for ranks [1]"));
            assert_eq!(counters().windows, 0);
            buf.free();
            done.wait();
            code
        });
        assert_eq!(codes[0], HcclResult::HCCL_E_TCP_TRANSFER);
        assert_clean();
    }

    #[test]
    fn a_rank_that_destroyed_its_communicator_fails_its_peers_at_once() {
        let _g = test_lock();
        // The default exec timeout is far longer than this test may take.
        let mut cfg = test_config();
        cfg.hcclExecTimeOut = 120;
        let start = Instant::now();
        let codes = run_ranks(2, &cfg, |r| {
            if r.rank == 1 {
                return Vec::new();
            }
            let buf = DevBuf::new(r.rank, G);
            // Waits until rank 1 is gone, then fails; later calls fail on arrival.
            let first = reg(r, buf.ptr, G as u64, 1).0;
            assert!(recent().contains("destroyed their communicator"));
            let second = reg(r, buf.ptr, G as u64, 1).0;
            buf.free();
            vec![first, second]
        });
        assert_eq!(codes[0], [HcclResult::HCCL_E_TCP_TRANSFER; 2]);
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );
        assert_clean();
    }

    #[test]
    fn a_locally_rejected_register_consumes_its_sequence_number() {
        let _g = test_lock();
        let mut cfg = test_config();
        cfg.hcclExecTimeOut = 1;
        let first_done = Barrier::new(2);
        let codes = run_ranks(2, &cfg, |r| {
            let buf = DevBuf::new(r.rank, G);
            // Rank 0's call is rejected locally (size 0); rank 1's valid call must not pair
            // with rank 0's next one: it times out.
            let size = if r.rank == 0 { 0 } else { G as u64 };
            let first = reg(r, buf.ptr, size, 1).0;
            first_done.wait();
            // Then both make the same call, and they are still in step.
            let (second, win) = reg(r, buf.ptr, G as u64, 1);
            if second == HcclResult::HCCL_SUCCESS {
                deregister(win);
            }
            buf.free();
            (first, second)
        });
        assert_eq!(codes[0], (PARA, HcclResult::HCCL_SUCCESS));
        assert_eq!(
            codes[1],
            (HcclResult::HCCL_E_TCP_TRANSFER, HcclResult::HCCL_SUCCESS)
        );
        assert_clean();
    }

    /// `aclrtMalloc` memory is an allocation HCCL can register when its size is a
    /// granularity multiple (`aclrtMemGetAddressRange` and `aclrtMemRetainAllocationHandle`
    /// find it, as HCCL's `GetMemoryInfo` does); collectives on it take the symmetric path,
    /// and it cannot be freed while registered. Its handle is not one `aclrtFreePhysical`
    /// takes.
    #[test]
    fn aclrt_malloc_memory_of_whole_granules_is_a_window() {
        let _g = test_lock();
        let before = counters().symmetric_collectives;
        run_ranks(2, &test_config(), |r| {
            let (a, h) = (acl(), hccl());
            let mut p = null_mut();
            // SAFETY: valid out-pointer.
            ok(unsafe {
                (a.aclrtMalloc.unwrap())(
                    &mut p,
                    2 * G,
                    aclrtMemMallocPolicy::ACL_MEM_MALLOC_HUGE_FIRST,
                )
            });
            let (mut base, mut size, mut handle) = (null_mut(), 0usize, null_mut());
            // SAFETY: valid out-pointers; the emulator validates the address.
            unsafe {
                let range = a.aclrtMemGetAddressRange.unwrap();
                ok(range(p.wrapping_byte_add(12345), &mut base, &mut size));
                ok((a.aclrtMemRetainAllocationHandle.unwrap())(
                    p.wrapping_byte_add(7),
                    &mut handle,
                ));
                assert_eq!((base, size), (p, 2 * G));
                // The retain is given back with aclrtFreePhysical; the memory itself is not.
                ok((a.aclrtFreePhysical)(handle));
                assert_eq!((a.aclrtFreePhysical)(handle), ACL_ERROR_RT_PARAM_INVALID);
                assert!(
                    recent().contains("free that with aclrtFree"),
                    "{}",
                    recent()
                );
            }
            let (code, win) = reg(r, p.wrapping_byte_add(4096), 1024, 1);
            hok(code);
            assert_eq!(get(r, p.wrapping_byte_add(4096), 64), Ok((win, 4096)));
            let values = [1.0f32 + r.rank as f32; 256];
            // SAFETY: host and device ranges of 1 KiB; the emulator validates the device side.
            unsafe {
                ok((a.aclrtMemcpy)(
                    p,
                    1024,
                    values.as_ptr().cast(),
                    1024,
                    crate::sys::aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE,
                ));
                hok((h.HcclAllReduce)(
                    p,
                    p.wrapping_byte_add(G),
                    256,
                    HcclDataType::HCCL_DATA_TYPE_FP32,
                    HcclReduceOp::HCCL_REDUCE_SUM,
                    r.comm,
                    r.stream,
                ));
            }
            ok(r.sync());
            let mut got = [0f32; 256];
            // SAFETY: as above.
            ok(unsafe {
                (a.aclrtMemcpy)(
                    got.as_mut_ptr().cast(),
                    1024,
                    p.wrapping_byte_add(G),
                    1024,
                    crate::sys::aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
                )
            });
            assert!(got.iter().all(|&x| x == 3.0), "{:?}", &got[..4]);
            // SAFETY: a live aclrtMalloc allocation.
            let freed = unsafe { (a.aclrtFree.unwrap())(p) };
            assert_eq!(freed, ACL_ERROR_RT_PARAM_INVALID);
            assert!(recent().contains("deregister first"), "{}", recent());
            deregister(win);
            // SAFETY: as above, now unregistered.
            ok(unsafe { (a.aclrtFree.unwrap())(p) });
            // Not whole granules: refused as HCCL refuses it.
            let mut q = null_mut();
            // SAFETY: valid out-pointer.
            ok(unsafe {
                (a.aclrtMalloc.unwrap())(
                    &mut q,
                    G + 4096,
                    aclrtMemMallocPolicy::ACL_MEM_MALLOC_HUGE_FIRST,
                )
            });
            assert_eq!(reg(r, q, 64, 1).0, PARA);
            assert!(recent().contains("not a multiple of the"), "{}", recent());
            // SAFETY: a live aclrtMalloc allocation.
            ok(unsafe { (a.aclrtFree.unwrap())(q) });
        });
        assert_eq!(counters().symmetric_collectives - before, 2);
        assert_clean();
    }

    #[test]
    fn a_registered_mapping_cannot_be_unmapped_until_deregistered() {
        let _g = test_lock();
        run_ranks(2, &test_config(), |r| {
            let a = acl();
            let buf = DevBuf::new(r.rank, G);
            let win = register(r, &buf);
            // Registered twice: it stays locked until the last deregistration.
            let win2 = register(r, &buf);
            // SAFETY: the emulator validates the address.
            let code = unsafe { (a.aclrtUnmapMem)(buf.ptr) };
            assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID);
            assert!(recent().contains("deregister the window first"));
            deregister(win2);
            // SAFETY: as above.
            let code = unsafe { (a.aclrtUnmapMem)(buf.ptr) };
            assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID);
            // Nothing changed: the window still finds the memory.
            assert_eq!(get(r, buf.ptr, 8), Ok((win, 0)));
            deregister(win);
            buf.free();
        });
        assert_clean();
    }

    #[test]
    fn one_rank_windows_register_but_are_never_found() {
        let _g = test_lock();
        run_ranks(1, &test_config(), |r| {
            let buf = DevBuf::new(0, G);
            let win = register(r, &buf);
            assert_eq!(get(r, buf.ptr, 8), Err(HcclResult::HCCL_E_NOT_FOUND));
            assert!(recent().contains("one-rank"));
            deregister(win);
            buf.free();
        });
        assert_clean();
    }

    /// The inode of the file (a memfd) mapped at `addr`, from `/proc/self/maps`.
    fn inode_mapped_at(addr: usize) -> u64 {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let (lo, hi) = f[0].split_once('-')?;
                let (lo, hi) = (
                    usize::from_str_radix(lo, 16).ok()?,
                    usize::from_str_radix(hi, 16).ok()?,
                );
                (lo <= addr && addr < hi).then(|| f[4].parse().unwrap())
            })
            .expect("mapped")
    }

    /// How many descriptors and mappings of the file with inode `ino` this process holds.
    fn held(ino: u64) -> (usize, usize) {
        use std::os::unix::fs::MetadataExt;
        let fds = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
            .filter(|m| m.ino() == ino)
            .count();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let name = crate::base::counters::MEMFD_NAME.to_str().unwrap();
        let mapped = maps
            .lines()
            .filter(|l| l.contains(name) && l.split_whitespace().nth(4) == Some(&*ino.to_string()))
            .count();
        (fds, mapped)
    }

    /// HCCL retains the allocation at each registration and frees the retain at each
    /// deregistration: registering, deregistering, unmapping and freeing gives back every
    /// byte, in the documented order and when the allocation is freed while still registered
    /// (the free is deferred: the memory counts until its last mapping goes).
    #[test]
    fn register_deregister_unmap_free_returns_every_byte() {
        let _g = test_lock();
        let barrier = Barrier::new(2);
        run_ranks(2, &test_config(), |r| {
            let a = acl();
            let before = free_here();
            let buf = DevBuf::new(r.rank, 2 * G);
            let win = register(r, &buf);
            let again = register(r, &buf);
            // SAFETY: handles from above; each call gives back or drops one reference.
            unsafe {
                ok((a.aclrtFreePhysical)(buf.phys));
                assert_eq!(before - free_here(), 2 * G, "registered and mapped");
                deregister(again);
                deregister(win);
                barrier.wait();
                assert_eq!(before - free_here(), 2 * G, "still mapped");
                assert_eq!(
                    (a.aclrtFreePhysical)(buf.phys),
                    ACL_ERROR_RT_INVALID_HANDLE,
                    "every handle reference was given back"
                );
                ok((a.aclrtUnmapMem)(buf.ptr));
                assert_eq!(free_here(), before);
                ok((a.aclrtReleaseMemAddress)(buf.ptr));
            }
            // The documented order: deregister, unmap, free.
            let buf = DevBuf::new(r.rank, G);
            let win = register(r, &buf);
            assert_eq!(before - free_here(), G);
            deregister(win);
            // The peer's window imports this allocation until the peer's deregistration
            // (which may still be running) drops it.
            barrier.wait();
            buf.free();
            assert_eq!(free_here(), before);
        });
        assert_clean();
    }

    /// A window maps (HCCL: imports) every peer's allocation until it goes: an allocation
    /// whose owner deregistered it (here by destroying its communicator), unmapped and freed
    /// it still counts on the owner's device while a peer's window maps it, and goes with
    /// that window, memfd and all.
    #[test]
    fn a_peers_window_keeps_an_allocation_until_it_goes() {
        let _g = test_lock();
        let (a, h) = (acl(), hccl());
        let mut root = HcclRootInfo::default();
        // SAFETY: valid out-pointer.
        hok(unsafe { (h.HcclGetRootInfo)(&mut root) });
        let config = test_config();
        let before = [free_on(0), free_on(1)];
        let step = Barrier::new(2);
        std::thread::scope(|s| {
            for rank in 0..2u32 {
                let (root, config, step, before) = (&root, &config, &step, &before);
                s.spawn(move || {
                    let mut comm = null_mut();
                    // SAFETY: valid pointers.
                    unsafe {
                        ok((a.aclrtSetDevice)(rank as i32));
                        hok((h.HcclCommInitRootInfoConfig)(
                            2, root, rank, config, &mut comm,
                        ));
                    }
                    let r = Rank {
                        rank,
                        n: 2,
                        comm,
                        stream: null_mut(),
                    };
                    let buf = DevBuf::new(rank, G);
                    register(&r, &buf);
                    step.wait();
                    if rank == 0 {
                        // SAFETY: the live communicator and the buffer's handles, each
                        // released once.
                        unsafe {
                            hok((h.HcclCommDestroy)(comm));
                            ok((a.aclrtUnmapMem)(buf.ptr));
                            ok((a.aclrtFreePhysical)(buf.phys));
                            ok((a.aclrtReleaseMemAddress)(buf.ptr));
                        }
                        assert_eq!(before[0] - free_here(), G, "rank 1's window maps it");
                        step.wait();
                        step.wait();
                        assert_eq!(free_here(), before[0]);
                    } else {
                        step.wait();
                        // SAFETY: the live communicator; its window goes with it.
                        hok(unsafe { (h.HcclCommDestroy)(comm) });
                        buf.free();
                        step.wait();
                    }
                    // SAFETY: the device bound above.
                    ok(unsafe { (a.aclrtResetDevice)(rank as i32) });
                });
            }
        });
        assert_eq!([free_on(0), free_on(1)], before);
        assert_clean();
    }

    /// The pool's sleep and wake, many times over: the address reservation is kept, and
    /// each cycle allocates physical memory, maps it at the same address, registers it,
    /// deregisters, unmaps and frees it. Once freed, no descriptor or mapping of the
    /// allocation's memfd is left in the process (its pages go back to the OS), and every
    /// cycle ends where the first began: the same free device memory and live objects.
    #[test]
    fn sleep_and_wake_at_the_same_address_leave_nothing_behind() {
        let _g = test_lock();
        let barrier = Barrier::new(2);
        run_ranks(2, &test_config(), |r| {
            let a = acl();
            let prop = aclrtPhysicalMemProp::device_huge(r.rank);
            let mut va = null_mut();
            // SAFETY: a valid out-pointer; released below.
            ok(unsafe { (a.aclrtReserveMemAddress)(&mut va, 2 * G, 0, null_mut(), 0) });
            let before = free_here();
            barrier.wait();
            let start = counters().live();
            barrier.wait();
            for cycle in 0..16u32 {
                let mut phys = null_mut();
                // SAFETY: valid pointers; everything made here is released in the cycle.
                unsafe {
                    ok((a.aclrtMallocPhysical)(&mut phys, 2 * G, &prop, 0));
                    ok((a.aclrtMapMem)(va, 2 * G, 0, phys, 0));
                }
                let ino = inode_mapped_at(va as usize);
                let buf = DevBuf {
                    ptr: va,
                    size: 2 * G,
                    phys,
                };
                let win = register(r, &buf);
                buf.write(G, &[cycle, r.rank]);
                assert_eq!(before - free_here(), 2 * G);
                barrier.wait();
                // One descriptor (the allocation's); mapped by the user, in this rank's heap
                // and in the peer's.
                let (fds, maps) = held(ino);
                assert_eq!(fds, 1, "cycle {cycle}");
                assert!(maps >= 3, "cycle {cycle}: {maps} mappings");
                deregister(win);
                // SAFETY: the mapping and handle made above.
                unsafe {
                    ok((a.aclrtUnmapMem)(va));
                    ok((a.aclrtFreePhysical)(phys));
                }
                barrier.wait();
                assert_eq!(held(ino), (0, 0), "cycle {cycle}");
                assert_eq!(free_here(), before, "cycle {cycle}");
                assert_eq!(counters().live(), start, "cycle {cycle}");
                barrier.wait();
            }
            // SAFETY: the reservation made above, with nothing mapped.
            ok(unsafe { (a.aclrtReleaseMemAddress)(va) });
        });
        assert_clean();
    }

    #[test]
    fn destroying_the_communicator_deregisters_what_is_left() {
        let _g = test_lock();
        let bufs = run_ranks(2, &test_config(), |r| {
            let buf = DevBuf::new(r.rank, G);
            let win = register(r, &buf);
            (buf, win as usize)
        });
        assert_eq!(counters().windows, 0);
        for (buf, win) in bufs {
            let dereg = hccl().HcclCommSymWinDeregister.unwrap();
            // SAFETY: a stale handle is looked up, not dereferenced.
            assert_eq!(unsafe { dereg(win as HcclCommSymWindow) }, PARA);
            buf.free();
        }
        assert_clean();
    }
}
