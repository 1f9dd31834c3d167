//! Counts of live emulator objects, and the check that nothing was left behind, so tests can
//! prove that everything was released.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};

/// The name prefix of stream threads (`/proc` shows the first 15 bytes of a thread's name).
pub(crate) const STREAM_THREAD_PREFIX: &str = "symheap-emu-stream";
/// The name of the memfds behind physical allocations (`/proc/self/fd` links show it).
pub(crate) const MEMFD_NAME: &CStr = c"symheap-emu-physical";

/// Live and cumulative object counts of the emulator (process-wide): a test hook.
///
/// After every handle has been destroyed or released, all the live counts are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Counters {
    /// Live address reservations (`aclrtReserveMemAddress` not yet released).
    pub reservations: u64,
    /// Live physical allocations (`aclrtMallocPhysical` not yet released: an allocation
    /// freed while still mapped, retained or registered lives until its last reference goes).
    pub physical_allocations: u64,
    /// Live user mappings (`aclrtMapMem` not yet unmapped); symmetric-heap mappings made by
    /// window registration are not counted here.
    pub mappings: u64,
    /// Live window handles (per rank; registering the same allocation again does not add one).
    pub windows: u64,
    /// Live streams (`aclrtCreateStream` not yet destroyed).
    pub streams: u64,
    /// Live communicator handles (per rank).
    pub comms: u64,
    /// Live events (`aclrtCreateEvent` not yet destroyed).
    pub events: u64,
    /// Live graphs (`aclmdlRI`: captured, or being captured, not yet destroyed).
    pub models: u64,
    /// Live device allocations (`aclrtMalloc` not yet freed).
    pub device_allocations: u64,
    /// Live host allocations (`aclrtMallocHost` not yet freed).
    pub host_allocations: u64,
    /// Successful `HcclCommSymWinRegister` calls since the process started, counting each
    /// rank's call (cumulative: never decreases).
    pub registrations: u64,
    /// Collectives that ran on the symmetric (zero-copy) path, counting each rank's
    /// (cumulative).
    pub symmetric_collectives: u64,
    /// Collectives that staged through the communicator's buffer, counting each rank's
    /// (cumulative).
    pub staged_collectives: u64,
    /// Point-to-point receives (`HcclRecv`, or a receive of `HcclBatchSendRecv`) that read
    /// the sender's buffer directly in a symmetric window (cumulative).
    pub direct_receives: u64,
    /// Point-to-point receives that copied through the sender's staging area (cumulative).
    pub staged_receives: u64,
}

impl Counters {
    /// The live counts only, with the cumulative ones zeroed: `Counters::default()` once
    /// everything has been released.
    pub fn live(self) -> Counters {
        Counters {
            registrations: 0,
            symmetric_collectives: 0,
            staged_collectives: 0,
            direct_receives: 0,
            staged_receives: 0,
            ..self
        }
    }
}

/// One of the counts in [`Counters`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Counter {
    Reservations,
    PhysicalAllocations,
    Mappings,
    Windows,
    Streams,
    Comms,
    Events,
    Models,
    DeviceAllocations,
    HostAllocations,
    Registrations,
    SymmetricCollectives,
    StagedCollectives,
    DirectReceives,
    StagedReceives,
}

static COUNTS: [AtomicU64; 15] = [const { AtomicU64::new(0) }; 15];

/// Adds one to `c`.
pub(crate) fn inc(c: Counter) {
    COUNTS[c as usize].fetch_add(1, Ordering::Relaxed);
}

/// Subtracts one from `c` (a live count).
pub(crate) fn dec(c: Counter) {
    COUNTS[c as usize].fetch_sub(1, Ordering::Relaxed);
}

/// A snapshot of the emulator's object counts (a test hook: tests use it to prove that
/// everything they made was released).
pub fn counters() -> Counters {
    let get = |c: Counter| COUNTS[c as usize].load(Ordering::Relaxed);
    Counters {
        reservations: get(Counter::Reservations),
        physical_allocations: get(Counter::PhysicalAllocations),
        mappings: get(Counter::Mappings),
        windows: get(Counter::Windows),
        streams: get(Counter::Streams),
        comms: get(Counter::Comms),
        events: get(Counter::Events),
        models: get(Counter::Models),
        device_allocations: get(Counter::DeviceAllocations),
        host_allocations: get(Counter::HostAllocations),
        registrations: get(Counter::Registrations),
        symmetric_collectives: get(Counter::SymmetricCollectives),
        staged_collectives: get(Counter::StagedCollectives),
        direct_receives: get(Counter::DirectReceives),
        staged_receives: get(Counter::StagedReceives),
    }
}

/// Checks that the emulator holds nothing (a test hook): every live count of [`counters`] is
/// zero, no stream thread runs and no memfd the emulator made is open in
/// this process. What is on its way out gets a second: a joined thread wakes its joiner a
/// moment before the kernel drops it from `/proc`, and the rendezvous hub closes what a
/// departed rank shared when it notices the departure.
///
/// # Errors
/// A description of what is left.
pub fn check_released() -> Result<(), String> {
    let mut left = what_is_left()?;
    for _ in 0..100 {
        if left.is_empty() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        left = what_is_left()?;
    }
    Err(format!("the emulator still holds {}", left.join(", ")))
}

/// What the emulator holds now, one description per kind.
fn what_is_left() -> Result<Vec<String>, String> {
    let name = &STREAM_THREAD_PREFIX.as_bytes()[..15];
    let threads = proc_entries("task", |t| std::fs::read(t.join("comm")).ok())?
        .iter()
        .filter(|comm| comm.starts_with(name))
        .count();
    let memfd = MEMFD_NAME.to_string_lossy();
    let memfds = proc_entries("fd", |fd| std::fs::read_link(fd).ok())?
        .iter()
        .filter(|target| target.to_string_lossy().contains(&*memfd))
        .count();
    let live = counters().live();
    let mut left = Vec::new();
    if live != Counters::default() {
        left.push(format!("live objects: {live:?}"));
    }
    if threads > 0 {
        left.push(format!("{threads} stream threads running"));
    }
    if memfds > 0 {
        left.push(format!("{memfds} memfds open"));
    }
    Ok(left)
}

/// `read` of every entry of `/proc/self/<dir>` that it can read.
fn proc_entries<T>(
    dir: &str,
    read: impl Fn(&std::path::Path) -> Option<T>,
) -> Result<Vec<T>, String> {
    let entries = std::fs::read_dir(format!("/proc/self/{dir}"))
        .map_err(|e| format!("cannot read /proc/self/{dir}: {e}"))?;
    Ok(entries.filter_map(|e| read(&e.ok()?.path())).collect())
}
