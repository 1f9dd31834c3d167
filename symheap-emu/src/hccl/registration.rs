//! `HcclCommSymWinRegister`, `HcclCommSymWinDeregister` and `HcclCommSymWinGet`: the calls
//! that make, remove and find the windows of [`crate::hccl::window`] on a communicator.
//!
//! Register and deregister are collective host calls: the ranks meet in a rendezvous, compare
//! what they were given, and fail identically when it differs. How such a call takes its
//! sequence number is [`crate::abi::entry`]'s business.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::sys::HcclResult;

use crate::GRANULARITY;
use crate::acl::memory::{self, Allocation, Physical};
use crate::base::counters::{self, Counter};
use crate::base::errors::{HcclRes, hccl_fail, para};
use crate::base::handle::{CommHandle, WindowHandle};
use crate::base::lock::lock;
use crate::hccl::comm::{self, Comm};
use crate::hccl::host_call::{exchange, exchange_raw, fail_of};
use crate::hccl::window::{SymHeap, Window, forget_window, remember_window, window_comm};
use crate::ipc::rendezvous::RvError;
use crate::ipc::wire::{Reader, Wire, Writer};

const REGISTER: &str = "HcclCommSymWinRegister";
const DEREGISTER: &str = "HcclCommSymWinDeregister";

/// A registration checked locally, before the ranks meet.
enum Prep {
    /// The allocation is already registered on this communicator: count it again.
    Existing(Arc<Window>),
    /// A new window in `slot` of the heap.
    New {
        heap: Arc<SymHeap>,
        slot: usize,
        phys: Arc<Physical>,
        user_base: usize,
    },
}

impl Prep {
    /// What this rank tells the others when registering `user_size` bytes.
    fn vote(&self, user_size: u64) -> HcclRes<RegVote> {
        let (slot, size, phys) = match self {
            Prep::Existing(w) => (w.slot, w.size, None),
            Prep::New { slot, phys, .. } => {
                let fd = phys.fd().try_clone_to_owned().or_else(|e| {
                    hccl_fail(
                        HcclResult::HCCL_E_SYSCALL,
                        format!("cannot share the allocation: {e}"),
                    )
                })?;
                (*slot, phys.size, Some(fd))
            }
        };
        Ok(RegVote {
            slot,
            user_size,
            size,
            new: phys.is_some(),
            phys,
        })
    }

    /// Gives back the slot of a new window that will not be made.
    fn undo(&self) {
        if let Prep::New { heap, slot, .. } = self {
            heap.free(*slot);
        }
    }
}

/// What each rank tells the others at registration.
struct RegVote {
    slot: usize,
    user_size: u64,
    size: usize,
    new: bool,
    /// The memfd of the physical allocation (new windows only), shared with every peer.
    phys: Option<OwnedFd>,
}

impl Wire for RegVote {
    const TAG: u8 = 20;
    fn put<'a>(&'a self, w: &mut Writer, fds: &mut Vec<BorrowedFd<'a>>) {
        w.u64(self.slot as u64)
            .u64(self.user_size)
            .u64(self.size as u64);
        w.u8(u8::from(self.new));
        fds.extend(self.phys.as_ref().map(AsFd::as_fd));
    }
    fn get(r: &mut Reader<'_>, fds: &mut dyn Iterator<Item = OwnedFd>) -> Option<Self> {
        let (slot, user_size, size, new) = (r.u64()?, r.u64()?, r.u64()?, r.u8()? != 0);
        Some(RegVote {
            slot: slot as usize,
            user_size,
            size: size as usize,
            new,
            phys: if new { Some(fds.next()?) } else { None },
        })
    }
}

impl RegVote {
    /// What every rank's vote must agree on.
    fn terms(&self) -> (usize, u64, usize, bool) {
        (self.slot, self.user_size, self.size, self.new)
    }
}

/// The local checks of `HcclCommSymWinRegister`, in the reference's order.
fn prepare(comm: &Comm, addr: usize, size: u64) -> HcclRes<Prep> {
    let (base, phys) = whole_allocation(addr, size)?;
    let existing = lock(&comm.windows)
        .iter()
        .find(|w| w.phys == phys.handle)
        .cloned();
    if let Some(w) = existing {
        if w.user_base != base {
            return para(format!(
                "this physical allocation is already registered at {:#x}, not {:#x}",
                w.user_base, base
            ));
        }
        return Ok(Prep::Existing(w));
    }
    let (heap, slot) = reserve_slot(comm, phys.size)?;
    Ok(Prep::New {
        heap,
        slot,
        phys,
        user_base: base,
    })
}

/// The allocation holding `[addr, addr + size)`, found as HCCL finds it
/// (`aclrtMemGetAddressRange`, then `aclrtMemRetainAllocationHandle` on its base; hicann/hcomm
/// `symmetric_memory.cc`, `GetMemoryInfo`): its first address and physical allocation. A
/// window covers the whole allocation, so its size must be a granularity multiple (HCCL's
/// check), and a user mapping must map all of its physical allocation at one address (the
/// emulator's need: it maps that allocation into every peer's heap).
fn whole_allocation(addr: usize, size: u64) -> HcclRes<(usize, Arc<Physical>)> {
    let Some(alloc) = memory::allocation_at(addr) else {
        return para(format!(
            "addr {addr:#x} is not in device memory from aclrtMalloc or from \
             aclrtReserveMemAddress + aclrtMallocPhysical + aclrtMapMem"
        ));
    };
    let (base, len) = alloc.range();
    let end = (base + len) as u64;
    if (addr as u64).checked_add(size).is_none_or(|e| e > end) {
        return para(format!(
            "[{addr:#x}, +{size}) runs past the end of its allocation at {end:#x}"
        ));
    }
    if len % GRANULARITY != 0 {
        return para(format!(
            "the allocation at {base:#x} is {len} bytes, not a multiple of the {GRANULARITY}-byte \
             granularity (a window covers the whole allocation)"
        ));
    }
    if let Allocation::Mapped(m) = &alloc
        && (m.offset != 0 || m.size != m.phys.size)
    {
        return para(format!(
            "the mapping at {:#x} covers bytes [{}, {}) of a {}-byte physical allocation; a \
                 window covers the whole allocation, so map all of it at one address",
            m.base,
            m.offset,
            m.offset + m.size,
            m.phys.size
        ));
    }
    Ok((base, alloc.phys().clone()))
}

/// A free slot of `size` bytes in `comm`'s heap (reserved on first use).
fn reserve_slot(comm: &Comm, size: usize) -> HcclRes<(Arc<SymHeap>, usize)> {
    if size > comm.stride {
        return hccl_fail(
            HcclResult::HCCL_E_MEMORY,
            format!(
                "a {size}-byte window does not fit the per-rank stride of {} bytes \
                 (raise hcclSymWinMaxMemSizePerRank)",
                comm.stride
            ),
        );
    }
    let heap = comm.heap()?;
    let Some(slot) = heap.alloc(size) else {
        return hccl_fail(
            HcclResult::HCCL_E_MEMORY,
            format!(
                "no room for a {size}-byte window: {} of the {}-byte per-rank stride in use \
                 (raise hcclSymWinMaxMemSizePerRank)",
                heap.used(),
                comm.stride
            ),
        );
    };
    Ok((heap, slot))
}

/// `HcclCommSymWinRegister` (after the null checks) as the `seq`-th collective host call of
/// `comm`. Collective.
pub(crate) fn register(
    comm: &Comm,
    seq: u64,
    addr: usize,
    size: u64,
    flag: u32,
) -> HcclRes<WindowHandle> {
    if size == 0 {
        return para("size is 0");
    }
    if flag != 1 {
        return para(format!("flag is {flag}, must be 1"));
    }
    // HCCL has no symmetric memory on a communicator whose ranks span SuperPoDs (windows
    // need HCCS, which ends at the SuperPoD): `HcclCommunicator::RegisterWindow` refuses
    // before anything else (hicann/hcomm `hccl_communicator_host.cc`). Every rank sees the
    // same topology, so every rank fails alike, without a rendezvous.
    if comm.topology.spans_superpods() {
        return hccl_fail(
            HcclResult::HCCL_E_NOT_SUPPORT,
            format!(
                "the communicator's ranks are in {} SuperPoDs: HCCL supports symmetric windows \
                 only within one SuperPoD (its collectives stage through the HCCL buffer)",
                comm.topology.superpod_count()
            ),
        );
    }
    let prep = prepare(comm, addr, size)?;
    let votes = prep
        .vote(size)
        .and_then(|mine| vote(comm, seq, mine))
        .inspect_err(|_| prep.undo())?;
    let window = match prep {
        Prep::Existing(w) => {
            // Each registration retains the allocation, as HCCL's `GetMemoryInfo` does.
            if !memory::retain_handle(w.phys) {
                return para(format!("physical allocation {:#x} is gone", w.phys));
            }
            w.refs.fetch_add(1, Ordering::Relaxed);
            w
        }
        Prep::New {
            heap,
            slot,
            phys,
            user_base,
        } => {
            let peers = votes.iter().map(|v| v.phys.as_ref().map(AsFd::as_fd));
            let w = Window::create(heap, slot, seq, &phys, user_base, peers);
            publish(comm, seq, w)?
        }
    };
    counters::inc(Counter::Registrations);
    Ok(window.handle())
}

/// The first step of a registration: every rank's vote, or `HCCL_E_INTERNAL` on every rank
/// when they differ.
fn vote(comm: &Comm, seq: u64, mine: RegVote) -> HcclRes<Vec<RegVote>> {
    let terms = mine.terms();
    let votes = exchange(comm, seq, 0, mine, REGISTER)?;
    if votes.iter().all(|v| v.terms() == terms) {
        return Ok(votes);
    }
    let desc: Vec<String> = votes
        .iter()
        .enumerate()
        .map(|(r, v)| {
            format!(
                "rank {r}: size {} (allocation {} bytes), slot {:#x}{}",
                v.user_size,
                v.size,
                v.slot,
                if v.new { "" } else { ", already registered" }
            )
        })
        .collect();
    hccl_fail(
        HcclResult::HCCL_E_INTERNAL,
        format!("ranks registered different windows: {}", desc.join("; ")),
    )
}

/// The last step of registering a new window (`made`, with every peer mapped or not): the
/// ranks tell each other whether they mapped every peer, so nobody uses the window before
/// all have; then the window is this communicator's.
fn publish(comm: &Comm, seq: u64, made: HcclRes<Arc<Window>>) -> HcclRes<Arc<Window>> {
    let mapped = made.as_ref().map(drop).map_err(|f| f.msg.clone());
    let all = exchange(comm, seq, 1, mapped, REGISTER)?;
    if let Some((r, Err(msg))) = all.iter().enumerate().find(|(_, m)| m.is_err()) {
        return hccl_fail(
            HcclResult::HCCL_E_INTERNAL,
            format!("rank {r} could not map the window: {msg}"),
        );
    }
    let w = made?;
    lock(&comm.windows).push(w.clone());
    remember_window(&w);
    Ok(w)
}

/// What each rank tells the others at deregistration.
#[derive(Clone, Copy)]
struct DeregVote {
    slot: usize,
    last: bool,
    in_use: bool,
}

impl Wire for DeregVote {
    const TAG: u8 = 21;
    fn put<'a>(&'a self, w: &mut Writer, _: &mut Vec<BorrowedFd<'a>>) {
        w.u64(self.slot as u64)
            .u8(u8::from(self.last))
            .u8(u8::from(self.in_use));
    }
    fn get(r: &mut Reader<'_>, _: &mut dyn Iterator<Item = OwnedFd>) -> Option<Self> {
        let (slot, last, in_use) = (r.u64()?, r.u8()? != 0, r.u8()? != 0);
        Some(DeregVote {
            slot: slot as usize,
            last,
            in_use,
        })
    }
}

/// The live communicator window `handle` belongs to (`HCCL_E_PARA` for a handle that is not a
/// live window).
pub(crate) fn owner(handle: WindowHandle) -> HcclRes<Arc<Comm>> {
    let Some(comm) = window_comm(handle) else {
        return para(format!("{handle:#x} is not a live window"));
    };
    comm::lookup(comm)
}

/// `HcclCommSymWinDeregister` of window `handle` of `comm`, with the call's sequence number.
/// Collective; never frees user memory.
pub(crate) fn deregister(comm: &Comm, seq: u64, handle: WindowHandle) -> HcclRes {
    let Some(w) = lock(&comm.windows)
        .iter()
        .find(|w| w.handle() == handle)
        .cloned()
    else {
        return para(format!("{handle:#x} is not a live window"));
    };
    let last = w.refs.load(Ordering::Relaxed) == 1;
    // References: the communicator's list, `w`, and one per piece of queued work.
    let in_use = last && Arc::strong_count(&w) > 2;
    let mine = DeregVote {
        slot: w.slot,
        last,
        in_use,
    };
    // HCCL deregisters without an exchange (hicann/hcomm `DeregisterSymmetricMem` on A3);
    // the emulator's vote only checks that the ranks deregister the same window. When the
    // vote fails because a peer will never come (its process died, it destroyed its
    // communicator, or the hub is gone), the window is torn down locally, as HCCL's would be:
    // the survivors of a lost rank release their windows without waiting for it. Any other
    // failure (a deadlock, a timeout, different calls) stays the call's.
    let votes = match exchange_raw(comm, seq, 0, mine) {
        Ok(votes) => votes,
        Err(RvError::Gone { .. } | RvError::Lost { .. } | RvError::HubLost) => {
            w.outlived_peers();
            (0..comm.n)
                .map(|r| DeregVote {
                    in_use: r == comm.rank && mine.in_use,
                    ..mine
                })
                .collect()
        }
        Err(e) => return Err(fail_of(e, comm, DEREGISTER)),
    };
    if votes.iter().any(|v| (v.slot, v.last) != (w.slot, last)) {
        return hccl_fail(
            HcclResult::HCCL_E_INTERNAL,
            "ranks deregistered different windows",
        );
    }
    let busy: Vec<usize> = (0..votes.len()).filter(|&r| votes[r].in_use).collect();
    if !busy.is_empty() {
        return hccl_fail(
            HcclResult::HCCL_E_AGAIN,
            format!(
                "the window is still used by queued stream work on ranks {busy:?}: \
                 synchronize the streams, then deregister again"
            ),
        );
    }
    if last {
        lock(&comm.windows).retain(|x| x.handle() != handle);
        forget_window(&w);
    } else {
        // HCCL frees this registration's retain (`DeregisterSymmetricMem`, refCount above 1).
        w.refs.fetch_sub(1, Ordering::Relaxed);
        memory::release_handle(w.phys);
    }
    // With `last`, this is the final reference: the window unmaps itself here.
    drop(w);
    Ok(())
}

/// `HcclCommSymWinGet` (after the null checks): the window holding `[ptr, ptr + size)` and
/// the offset of `ptr` in it.
pub(crate) fn get(comm: CommHandle, ptr: usize, size: usize) -> HcclRes<(WindowHandle, usize)> {
    if size == 0 {
        return para("size is 0");
    }
    let comm = comm::lookup(comm)?;
    match comm.find_window(ptr, size) {
        Some((w, offset)) => Ok((w.handle(), offset)),
        None if comm.n == 1 => hccl_fail(
            HcclResult::HCCL_E_NOT_FOUND,
            "a one-rank communicator has no symmetric windows to find",
        ),
        None => hccl_fail(
            HcclResult::HCCL_E_NOT_FOUND,
            format!("[{ptr:#x}, +{size}) is not wholly inside one registered window"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::ptr::null_mut;
    use std::time::{Duration, Instant};

    use crate::sys::{HcclComm, HcclResult, HcclRootInfo};
    use crate::testutil::{DevBuf, acl, hccl, hok, ok, recent, test_config};

    /// A thread blocked registering a window (its peer never registers) is woken by another
    /// thread's `HcclCommDestroy` of the same communicator, and fails saying so.
    #[test]
    fn destroying_the_communicator_wakes_a_registration_waiting_in_it() {
        let _guard = crate::test_lock();
        let (a, h) = (acl(), hccl());
        let mut root = HcclRootInfo::default();
        // SAFETY: valid out-pointer.
        hok(unsafe { (h.HcclGetRootInfo)(&mut root) });
        let config = test_config();
        let comms: Vec<usize> = std::thread::scope(|s| {
            let joins: Vec<_> = (0..2u32)
                .map(|rank| {
                    let (root, config) = (&root, &config);
                    s.spawn(move || {
                        let mut comm: HcclComm = null_mut();
                        // SAFETY: valid pointers.
                        unsafe {
                            ok((a.aclrtSetDevice)(rank as i32));
                            hok((h.HcclCommInitRootInfoConfig)(
                                2, root, rank, config, &mut comm,
                            ));
                        }
                        comm as usize
                    })
                })
                .collect();
            joins.into_iter().map(|j| j.join().unwrap()).collect()
        });
        // SAFETY: on this thread, for the buffer below.
        ok(unsafe { (a.aclrtSetDevice)(0) });
        let buf = DevBuf::new(0, crate::GRANULARITY);
        let ptr = buf.ptr as usize;
        let started = Instant::now();
        let (code, said) = std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let reg = hccl().HcclCommSymWinRegister.expect("filled");
                let mut win = null_mut();
                // SAFETY: a live communicator (until destroyed), mapped memory, valid out-pointer.
                let code = unsafe {
                    reg(
                        comms[0] as HcclComm,
                        ptr as *mut _,
                        buf.size as u64,
                        &mut win,
                        1,
                    )
                };
                (code, recent())
            });
            std::thread::sleep(Duration::from_millis(200));
            // SAFETY: rank 0's live communicator.
            hok(unsafe { (h.HcclCommDestroy)(comms[0] as HcclComm) });
            waiter.join().unwrap()
        });
        assert_eq!(code, HcclResult::HCCL_E_PARA, "{said}");
        assert!(said.contains("destroyed the communicator"), "{said}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        // SAFETY: rank 1's live communicator; the device set above.
        unsafe {
            hok((h.HcclCommDestroy)(comms[1] as HcclComm));
        }
        buf.free();
        // SAFETY: devices set above (on other threads: resetting from here is allowed).
        unsafe {
            ok((a.aclrtResetDevice)(0));
        }
    }
}
