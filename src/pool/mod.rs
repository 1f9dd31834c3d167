//! [`SymPool`]: one communicator, its registered window(s), the heaps that carve them, and a
//! stream.
//!
//! # How reuse stays safe and symmetric
//! Reuse is stream-ordered by default. A freed block goes back to its heap at once, even while
//! queued work may still touch it: later work on the streams that used it runs after that work,
//! and a user on another stream first waits for them on an event the pool records (`Fences`, no
//! host wait). Host access to recycled memory waits for its streams. What decides the next
//! offsets is therefore program order, never timing, so every rank that makes the same calls
//! makes the same heap calls and gets the same offsets.
//!
//! A freed block waits in a pending list instead, released in the order the blocks were freed
//! by the next [`SymPool::synchronize`] (or by an allocation that does not fit), when
//! [`PoolConfig::deferred_reuse`] asks for the conservative rule, while a graph is being
//! captured (captured work could not wait for work outside it), and once the pool is poisoned.
//! Blocks a live graph uses stay reserved until the [`SymGraph`] drops. An allocation that does
//! not fit first releases the pending list (synchronising), then grows the pool by a new window
//! if `max_capacity` allows, and only then fails with [`Error::OutOfMemory`], identical on
//! every rank that made the same calls.
//!
//! If queued work fails (a collective times out, say), a peer may still be writing this rank's
//! memory, so nothing pending is released and the pool refuses further work with
//! [`Error::Poisoned`]: drop it and build a new one.
//!
//! Threads sharing a pool all learn of a failure: the pool's waits on one stream take turns,
//! each poisoning the pool on a failure before the next synchronizes (CANN reports a failure
//! to one synchronize only), and every host access checks the pool once its wait and its copy
//! are done, so no thread gets `Ok` for work that failed. A wait of the pool's stream outside
//! the pool (`Stream::synchronize` on [`SymPool::stream`]) may take a failure for itself:
//! the pool learns of failures through its own waits only.

mod alloc_desc;
mod block;
mod budget;
mod call_log;
mod config;
mod failure;
mod fences;
mod graph;
mod graph_hold;
mod groups;
mod paths;
mod private;
mod segment;
mod shrink;
mod sleep;
mod snapshot;
mod stats;
mod summary;
mod symmetry;
mod tags;

use std::sync::Weak;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use slab::Slab;

use crate::heap::{Block, fold_words};
use crate::raw::{DevicePtr, WindowCell, WindowHandle};
use crate::runtime::{Comm, Runtime, Stream, WeakStream};
use crate::{Error, Result};

pub use alloc_desc::AllocDesc;
pub(crate) use block::HostViewToken;
pub use block::SymBlock;
pub use config::PoolConfig;
pub use graph::SymGraph;
pub use shrink::ShrinkReport;
pub use sleep::{SleepPlan, SleepReport, WakeReport};
pub use snapshot::{Region, RegionState, Snapshot, WindowMap};
pub use stats::{CollectiveStats, CommStats, PoolStats, SleepStats, TagStats};

use graph_hold::GraphHold;
pub(crate) use groups::Target;
pub(crate) use paths::predict;
use private::PrivateRegion;
use segment::Segment;
use tags::{BlockInfo, POOL_TAG, Tags};

/// A memory pool over symmetric windows of one communicator. `Send + Sync`; internally locked.
///
/// Every rank must make the same pool calls in the same program order: allocations and frees
/// (drops), collectives, [`synchronize`](Self::synchronize) and
/// [`record_stream`](SymBlock::record_stream) (which decide when freed blocks are reused),
/// and the collective steps: creating, growing ([`reserve`](Self::reserve) or an allocation
/// that needs room), [`trim`](Self::trim), [`verify_symmetric`](Self::verify_symmetric), and
/// dropping the pool (its last handle or allocation), which deregisters its windows. Reading
/// and writing buffers from the host (`to_host`, `copy_from_host`) is rank-local.
/// [`verify_symmetric`](Self::verify_symmetric) catches a rank that strayed.
///
/// A pool dropped while its thread unwinds a panic, or once it is poisoned, takes no
/// collective step: its windows are left to the communicator's `HcclCommDestroy`, which
/// releases them locally (as hicann/hcomm's communicator does with the windows still
/// registered), so peers waiting for this rank in a collective find it gone at once instead
/// of waiting for the exec timeout.
///
/// # Methods by topic
/// | topic | methods |
/// |---|---|
/// | making and inspecting | [`new`](Self::new), [`comm`](Self::comm), [`runtime`](Self::runtime), [`stream`](Self::stream), [`config`](Self::config) |
/// | the life of a worker | [`sleep`](Self::sleep) (a [`SleepPlan`]), [`wake`](Self::wake), [`wake_on`](Self::wake_on) (a rebind), [`is_asleep`](Self::is_asleep) |
/// | memory | [`alloc`](Self::alloc), [`alloc_with`](Self::alloc_with) (an [`AllocDesc`]), [`allocator`](Self::allocator) (`allocator-api2`), [`window_get`](Self::window_get); typed owners: [`SymVec`](crate::SymVec), [`SymBox`](crate::SymBox) |
/// | collective steps of the pool | [`reserve`](Self::reserve), [`trim`](Self::trim), [`synchronize`](Self::synchronize), [`verify_symmetric`](Self::verify_symmetric) |
/// | collectives | [`all_reduce`](Self::all_reduce), [`all_reduce_in_place`](Self::all_reduce_in_place), [`all_gather`](Self::all_gather), [`reduce_scatter`](Self::reduce_scatter), [`all_to_all`](Self::all_to_all), [`broadcast`](Self::broadcast), [`reduce`](Self::reduce), [`all_gather_v`](Self::all_gather_v), [`reduce_scatter_v`](Self::reduce_scatter_v), [`all_to_all_v`](Self::all_to_all_v); the path each takes: [`path`](Self::path) |
/// | point to point and copies | [`send`](Self::send), [`recv`](Self::recv), [`copy`](Self::copy) |
/// | streams, groups and graphs | [`on`](Self::on) (a stream), [`attach`](Self::attach), [`on_group`](Self::on_group), [`group`](Self::group), [`attached`](Self::attached), [`capture`](Self::capture) (a [`SymGraph`]) |
/// | observability | [`stats`](Self::stats), [`reset_peak`](Self::reset_peak), [`memory_summary`](Self::memory_summary), [`snapshot`](Self::snapshot), [`op_hash`](Self::op_hash) |
///
/// # Examples
/// ```
/// use symheap::{PoolConfig, SymPool, SymVec, emu};
/// use symheap::ReduceOp;
///
/// let sums = emu::launch(2, |comm| {
///     let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
///     let mut v = SymVec::from_host(&pool, &[comm.rank() as f32 + 1.0; 4])?;
///     pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
///     assert_eq!(pool.stats().registrations, 1);
///     v.to_host()
/// })?;
/// assert_eq!(sums[0], [3.0; 4]);
/// # Ok::<(), symheap::Error>(())
/// ```
#[derive(Clone)]
pub struct SymPool {
    pub(crate) shared: Arc<PoolShared>,
    /// The attached group this handle's collectives run on ([`SymPool::on_group`]); `None`
    /// for the pool's own communicator.
    on: Option<groups::Attached>,
    /// The stream this handle's collectives and copies run on, and its allocations are used
    /// on first ([`SymPool::on`]); `None` for the pool's own stream.
    stream: Option<Stream>,
}

pub(crate) struct PoolShared {
    /// The communicator: replaced by a rebind ([`SymPool::wake_on`]), read under the lock
    /// and cloned (a handle) by every user.
    comm: RwLock<Comm>,
    /// The runtime and device, which no rebind changes.
    rt: Runtime,
    device: u32,
    pub(crate) stream: Stream,
    pub(crate) config: PoolConfig,
    /// The device allocation granularity; segment sizes are multiples of it.
    device_granularity: u64,
    /// Bumped by every `synchronize`: work marked with an older epoch has finished.
    epoch: AtomicU64,
    /// Set when queued work failed: nothing may be reused any more, until a shrink goes on
    /// without the lost ranks. Kept outside `state` so that
    /// [`wait_or_poison`](Self::wait_or_poison) can set it whether or not its caller holds
    /// the state lock.
    failure: failure::Failure,
    /// Set while the pool sleeps ([`SymPool::sleep`]); read without the state lock by
    /// graph replays and host views.
    asleep: AtomicBool,
    /// Held (read) by host views being made and host copies while they check that the
    /// pool is awake and do their work; a sleep takes it (write) so that
    /// none is under way when the memory goes. Taken before the state lock.
    gate: RwLock<()>,
    /// Live host views ([`SymVec::host`](crate::SymVec::host)): a sleep waits for none.
    host_views: AtomicUsize,
    /// Streams other than the pool's that blocks were recorded on, for a sleep to wait for.
    recorded_streams: Mutex<Vec<WeakStream>>,
    /// The first epoch whose work may not have finished: work marked with an older one was
    /// waited for by a `synchronize` that succeeded.
    settled: AtomicU64,
    /// The epochs (first and last) whose queued work a lost rank cut short
    /// ([`SymPool::shrink`]): a block last used in one holds unspecified contents.
    /// `interrupted_any` spares the lock while there is none.
    interrupted: Mutex<Vec<(u64, u64)>>,
    interrupted_any: AtomicBool,
    state: Mutex<PoolState>,
}

pub(crate) struct PoolState {
    /// Segment keys are stable (a trimmed segment's key is reused deterministically).
    segments: Slab<Segment>,
    pending: Vec<Pending>,
    /// The `allocator-api2` adapter's memory, mapped on first use.
    private: Option<PrivateRegion>,
    /// The pool's own block for symmetry checks (`(ranks + 1) * 8` bytes).
    check_block: Option<PoolBlock>,
    allocated: u64,
    peak_allocated: u64,
    alloc_count: u64,
    free_count: u64,
    oom_count: u64,
    registrations: u64,
    /// Live blocks and bytes per tag.
    tags: Tags,
    /// A rolling hash of every collective called, in order (see [`PoolState::op_hash`]).
    collectives: u64,
    /// The allocation, free and out-of-memory counts when the op hash was last restarted
    /// (by a shrink): it counts from there.
    hashed_counts_from: [u64; 3],
    /// Collectives by communicator, kind and the path they took.
    paths: paths::PathCounts,
    /// The sub-communicators every segment is also registered in ([`SymPool::attach`]).
    groups: Vec<groups::Attached>,
    /// Which streams freed memory that their queued work may still use, for the next user on
    /// another stream to wait for.
    fences: fences::Fences,
    /// Streams other than the pool's own with collectives queued since the last synchronize:
    /// a collective step of the pool's own (growth, verify, attach) waits for them first,
    /// since HCCL runs one communicator's collectives in one order.
    collective_streams: Vec<Stream>,
    /// The graph being captured ([`SymPool::capture`]): the blocks allocated or used now are
    /// its.
    capturing: Option<Arc<GraphHold>>,
    /// Freed blocks that graphs still hold.
    held: Vec<Held>,
    /// The graphs captured so far (a sleep waits for their replays).
    graphs: Vec<Weak<GraphHold>>,
    /// Asleep or awake, and what a sleep kept.
    sleep: sleep::SleepState,
    /// The last pool calls of this rank, for a divergence's report.
    log: call_log::CallLog,
    /// The names of the pool's communicator and of each group, read at the first attach (a
    /// pool of one communicator needs none).
    names: Vec<String>,
}

/// A heap block and the key of the segment whose heap made it: the one shape in which the
/// pool keeps and passes blocks around, so a block always goes back to its own heap.
pub(crate) struct PoolBlock {
    segment: usize,
    block: Block,
}

impl PoolBlock {
    /// The block's offset in its segment's window.
    fn offset(&self) -> u64 {
        self.block.offset()
    }

    /// The bytes granted.
    fn size(&self) -> u64 {
        self.block.size()
    }
}

/// A block and where it is.
pub(crate) struct Placed {
    block: PoolBlock,
    ptr: DevicePtr,
    window: Arc<WindowCell>,
}

/// A freed block that graphs still hold, and the streams other than the pool's that used it.
pub(crate) struct Held {
    pub(crate) block: PoolBlock,
    pub(crate) holds: Vec<Arc<GraphHold>>,
    pub(crate) streams: Vec<Stream>,
}

/// A freed block that queued work may still touch.
pub(crate) struct Pending {
    pub(crate) block: PoolBlock,
    pub(crate) streams: Vec<Stream>,
}

impl std::fmt::Debug for SymPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SymPool")
            .field("rank", &self.shared.comm().rank())
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl SymPool {
    /// Creates a pool on `comm`: reserves address space, allocates physical memory rounded up
    /// to the device granularity, maps it, registers it as one window, and runs one warm-up
    /// collective on it. Collective. On any failure everything done so far is undone.
    ///
    /// Call it on a thread bound to the communicator's device.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad configuration or a thread bound to another device;
    /// the runtime's error otherwise.
    pub fn new(comm: &Comm, config: PoolConfig) -> Result<SymPool> {
        // Spans group the events of a collective step (the registration's among them).
        let _span = tracing::info_span!("symheap.pool_create", rank = comm.rank()).entered();
        config.validate()?;
        let rt = comm.runtime();
        let current = rt.current_device()?;
        if current != comm.device() {
            return Err(Error::invalid(format!(
                "SymPool::new on a thread bound to device {current}, but the communicator is on device {}",
                comm.device()
            )));
        }
        let device_granularity = rt.granularity(comm.device())?;
        if !device_granularity.is_power_of_two() {
            return Err(Error::invalid(format!(
                "the runtime reports an allocation granularity of {device_granularity}"
            )));
        }
        let device_granularity = device_granularity.max(config.granularity_bytes());
        let stream = Stream::new(rt)?;
        let size = round_up(config.capacity_bytes(), device_granularity)?;
        let first = Segment::create(
            comm,
            &[],
            &stream,
            size,
            config.granularity_bytes(),
            device_granularity,
        )
        .map_err(|unmade| unmade.error)?;
        let mut state = PoolState {
            segments: Slab::new(),
            pending: Vec::new(),
            private: None,
            check_block: None,
            allocated: 0,
            peak_allocated: 0,
            // The pool's own block, allocated below, counts as `allocated` does.
            alloc_count: 1,
            free_count: 0,
            oom_count: 0,
            registrations: 1,
            tags: Tags::new(config.tag_budgets()),
            collectives: 0,
            hashed_counts_from: [0; 3],
            paths: paths::PathCounts::default(),
            groups: Vec::new(),
            fences: fences::Fences::default(),
            collective_streams: Vec::new(),
            capturing: None,
            held: Vec::new(),
            graphs: Vec::new(),
            sleep: sleep::SleepState::default(),
            log: call_log::CallLog::default(),
            names: vec![String::new()],
        };
        let segment = state.segments.insert(first);
        let check_bytes = (u64::from(comm.rank_count()) + 1) * 8;
        let block = state.segments[segment].heap.alloc(check_bytes, 0)?;
        state.allocated = block.size();
        state.peak_allocated = block.size();
        state.record(segment, &block, POOL_TAG);
        state.check_block = Some(PoolBlock { segment, block });
        let shared = Arc::new(PoolShared {
            comm: RwLock::new(comm.clone()),
            rt: rt.clone(),
            device: comm.device(),
            stream,
            config,
            device_granularity,
            epoch: AtomicU64::new(0),
            failure: failure::Failure::default(),
            asleep: AtomicBool::new(false),
            gate: RwLock::new(()),
            host_views: AtomicUsize::new(0),
            recorded_streams: Mutex::new(Vec::new()),
            settled: AtomicU64::new(0),
            interrupted: Mutex::new(Vec::new()),
            interrupted_any: AtomicBool::new(false),
            state: Mutex::new(state),
        });
        // The first window's warm-up. On failure the pool's `Drop` waits again before
        // unmapping: the warm-up may still be queued.
        shared.wait_or_poison([&shared.stream])?;
        tracing::info!(
            rank = comm.rank(),
            ranks = comm.rank_count(),
            bytes = size,
            max_bytes = shared.config.max_capacity_bytes(),
            "symheap: pool created"
        );
        Ok(SymPool {
            shared,
            on: None,
            stream: None,
        })
    }

    /// A handle on the pool `shared`, on its own communicator and stream.
    pub(crate) fn of(shared: &Arc<PoolShared>) -> SymPool {
        SymPool {
            shared: Arc::clone(shared),
            on: None,
            stream: None,
        }
    }

    /// A handle on the pool's communicator (a rebind, [`wake_on`](Self::wake_on), replaces
    /// it).
    pub fn comm(&self) -> Comm {
        self.shared.comm()
    }

    /// The runtime the pool's memory and streams belong to.
    pub fn runtime(&self) -> &Runtime {
        self.shared.runtime()
    }

    /// The stream this handle's collectives and copies run on: the pool's own, or the one
    /// of [`on`](Self::on).
    pub fn stream(&self) -> &Stream {
        self.target().stream
    }

    /// The configuration the pool was made with.
    pub fn config(&self) -> &PoolConfig {
        &self.shared.config
    }

    /// Allocates `size` bytes aligned to `align` (a power of two; values at or below the
    /// block granularity mean the granularity) from the pool's window(s).
    ///
    /// When nothing fits, releases the pending frees (synchronising the stream), then grows by
    /// a new window if the pool budget ([`PoolConfig::budget`]) allows (collective: every
    /// rank reaches it at the same call), then fails.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for size 0, a bad alignment, or an alignment above the device
    /// granularity; [`Error::OutOfMemory`] saying what was asked, what is free, the largest
    /// free region, the budget that refused it ([`OutOfMemory::over_budget`]: the pool's, or
    /// the tag's, see [`PoolConfig::tag_budget`]) and the setting to raise; the runtime's
    /// error if growing fails.
    ///
    /// [`OutOfMemory::over_budget`]: crate::OutOfMemory::over_budget
    #[doc(alias("caching_allocator_alloc", "malloc"))]
    pub fn alloc(&self, size: u64, align: u64) -> Result<SymBlock> {
        self.alloc_with(size, align, AllocDesc::default())
    }

    /// [`alloc`](Self::alloc), described by `desc` (its tag says what the memory is for:
    /// [`stats`](Self::stats), [`memory_summary`](Self::memory_summary) and
    /// [`snapshot`](Self::snapshot) account by it).
    ///
    /// # Errors
    /// As for [`alloc`](Self::alloc).
    pub fn alloc_with(&self, size: u64, align: u64, desc: AllocDesc) -> Result<SymBlock> {
        let tag = desc.tag;
        let home = self.target().stream;
        let (placed, hold) = {
            let mut state = self.shared.lock();
            let placed = self.shared.alloc_locked(&mut state, size, align, tag, home);
            (placed, state.capturing.clone())
        };
        match placed {
            Ok((placed, recycled)) => {
                let block = SymBlock::new(Arc::clone(&self.shared), placed, size);
                // Allocated during a capture: the graph's.
                if let Some(hold) = &hold {
                    block.hold_for(hold);
                }
                // Memory that queued work may still use: the first host access waits.
                if recycled {
                    block.mark_used_on(home);
                }
                Ok(block)
            }
            Err(Error::OutOfMemory(oom)) => {
                tracing::warn!(
                    rank = self.shared.comm().rank(),
                    tag,
                    "symheap: {oom}\n{}",
                    self.memory_summary()
                );
                Err(Error::OutOfMemory(oom))
            }
            Err(e) => Err(e),
        }
    }

    /// The window holding `[ptr, ptr + len)` and the offset of `ptr` in it, through
    /// `HcclCommSymWinGet`. For every live allocation this is exactly its own
    /// `(window(), offset())`; on a handle of an attached group ([`on_group`](Self::on_group))
    /// it is the group's window over the same memory, at the same offset.
    ///
    /// # Errors
    /// HCCL's `HCCL_E_NOT_FOUND` when the range is not inside one window (HCCL also says so on
    /// every one-rank communicator).
    pub fn window_get(&self, ptr: DevicePtr, len: u64) -> Result<(WindowHandle, u64)> {
        self.target().comm.window_get(ptr, len)
    }

    /// Waits for the pool's stream (and every stream recorded on a pending block), then
    /// releases the pending frees to the heap in the order they were freed. Every rank must
    /// call it at the same point of its program (it decides which offsets later allocations
    /// get).
    ///
    /// # Errors
    /// The first failure of queued work (the communicator's HCCL error where there is one);
    /// the pool is then poisoned and releases nothing. [`Error::Poisoned`] after that.
    pub fn synchronize(&self) -> Result<()> {
        let mut state = self.shared.lock();
        self.shared.flush_pending(&mut state)
    }

    /// Makes sure a `bytes`-byte allocation fits without growing later: adds a window now if no
    /// free region is large enough. Collective.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] if the pool budget ([`PoolConfig::budget`], alias
    /// `max_capacity`) does not allow it; the runtime's error.
    pub fn reserve(&self, bytes: u64) -> Result<()> {
        let mut state = self.shared.lock();
        self.shared.check_usable()?;
        self.shared.check_awake("reserve")?;
        if state.largest_free() >= bytes {
            return Ok(());
        }
        self.shared.grow(&mut state, bytes, 0).map(|_| ())
    }

    /// Releases every wholly free window except the first (collective; synchronises first).
    /// Returns the bytes released.
    ///
    /// # Errors
    /// The runtime's error from synchronising, or the first error from deregistering (every
    /// idle window is still tried, and one that fails to deregister is released when the
    /// communicator is destroyed).
    #[doc(alias("empty_cache"))]
    pub fn trim(&self) -> Result<u64> {
        let _span = tracing::info_span!("symheap.trim", rank = self.shared.comm().rank()).entered();
        let mut state = self.shared.lock();
        self.shared.check_awake("trim")?;
        self.shared.flush_pending(&mut state)?;
        let first = state.segments.iter().next().map(|(key, _)| key);
        let idle: Vec<usize> = state
            .segments
            .iter()
            .filter(|(key, seg)| Some(*key) != first && seg.heap.report().live_blocks == 0)
            .map(|(key, _)| key)
            .collect();
        let mut released = 0;
        let mut first_error = None;
        for key in idle {
            let segment = state.segments.remove(key);
            released += segment.size;
            if let Err(e) = segment.release() {
                first_error.get_or_insert(e);
            }
        }
        tracing::info!(
            rank = self.shared.comm().rank(),
            released,
            windows = state.segments.len(),
            "symheap: trimmed"
        );
        first_error.map_or(Ok(released), Err)
    }

    /// A snapshot of the pool's accounting.
    #[doc(alias(
        "memory_stats",
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved"
    ))]
    pub fn stats(&self) -> PoolStats {
        self.shared.lock().stats(&self.shared)
    }

    /// A hash of every allocation, free, growth, trim and collective so far (and of what is
    /// pending): equal on ranks that made the same calls. A collective enters with its kind,
    /// element count and type, reduction, and its buffers' windows and offsets.
    pub fn op_hash(&self) -> u64 {
        self.shared.lock().op_hash()
    }

    pub(crate) fn shared(&self) -> &Arc<PoolShared> {
        &self.shared
    }
}

impl PoolShared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, PoolState> {
        // A panic while holding the lock cannot leave the heaps inconsistent (each heap call
        // is all-or-nothing), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The communicator (a handle; a rebind replaces it).
    pub(crate) fn comm(&self) -> Comm {
        self.comm.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The runtime.
    pub(crate) fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// The device.
    pub(crate) fn device(&self) -> u32 {
        self.device
    }

    pub(crate) fn stream(&self) -> &Stream {
        &self.stream
    }

    pub(crate) fn current_epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Places a block in free space. When none fits, releases the pending frees
    /// (synchronising), then grows the pool by a window: collective steps, which every rank
    /// takes at the same call since every rank calls `alloc` in the same program order.
    fn alloc_locked(
        &self,
        state: &mut PoolState,
        size: u64,
        align: u64,
        tag: &'static str,
        home: &Stream,
    ) -> Result<(Placed, bool)> {
        self.check_usable()?;
        self.check_awake("allocation")?;
        if align > self.device_granularity {
            return Err(Error::invalid(format!(
                "alignment {align} exceeds the device allocation granularity {}",
                self.device_granularity
            )));
        }
        state.check_tag_budget(&self.config, size, align, tag)?;
        let mut found = state.try_alloc(size, align)?;
        if found.is_none() && !state.pending.is_empty() {
            self.flush_pending(state)?;
            found = state.try_alloc(size, align)?;
        }
        let block = match found {
            Some(found) => found,
            None if state.capturing.is_some() => {
                self.check_not_capturing(state, "growing the pool")?;
                unreachable!("a capture is in progress")
            }
            None => match self.grow(state, size, align) {
                Ok(segment) => PoolBlock {
                    segment,
                    block: state.segments[segment].heap.alloc(size, align)?,
                },
                Err(e) => {
                    if matches!(e, Error::OutOfMemory(_)) {
                        state.oom_count += 1;
                    }
                    return Err(e);
                }
            },
        };
        // Work of other streams on memory freed since the last synchronize runs before
        // `home`'s later work (an event each, no host wait).
        let recycled = state.fences.any();
        if let Err(e) = state.fences.order_before(home) {
            state.free_block(block)?;
            return Err(e);
        }
        state.allocated += block.size();
        state.peak_allocated = state.peak_allocated.max(state.allocated);
        state.alloc_count += 1;
        // Numbered as snapshots number it (the pool's own check block counts as the 0th).
        let n = state.alloc_count - 1;
        state.log.alloc(n, size, align, tag);
        state.record(block.segment, &block.block, tag);
        let placed = Placed {
            ptr: state.device_ptr(&block),
            window: Arc::clone(&state.segments[block.segment].handle),
            block,
        };
        Ok((placed, recycled))
    }

    /// Maps the adapter's private region unless it is mapped already. Local to this rank.
    pub(crate) fn ensure_private_region(&self) -> Result<()> {
        let mut state = self.lock();
        self.check_awake("SymPool::allocator")?;
        self.private_region(&mut state).map(drop)
    }

    /// The adapter's private region, mapped now if it is not (the first
    /// [`SymPool::allocator`] call maps it, and a sleep releases it).
    fn private_region<'s>(&self, state: &'s mut PoolState) -> Result<&'s mut PrivateRegion> {
        let private = match state.private.take() {
            Some(private) => private,
            None => {
                let size = round_up(
                    self.config.private_capacity_bytes(),
                    self.device_granularity,
                )?;
                PrivateRegion::create(
                    self.runtime(),
                    self.device(),
                    size,
                    self.config.granularity_bytes(),
                    self.device_granularity,
                )?
            }
        };
        Ok(state.private.insert(private))
    }

    /// A block of the private region for the `allocator-api2` adapter: its address and the
    /// bytes granted.
    pub(crate) fn alloc_host_block(&self, size: u64, align: u64) -> Result<(DevicePtr, u64)> {
        if align > self.device_granularity {
            return Err(Error::invalid(format!(
                "alignment {align} exceeds the device allocation granularity {}",
                self.device_granularity
            )));
        }
        let mut state = self.lock();
        self.check_awake("allocation by SymPool::allocator")?;
        self.private_region(&mut state)?.alloc(size, align)
    }

    /// Frees a block of the `allocator-api2` adapter by address, at once: no queued work of
    /// the pool uses the private region, and no peer sees it.
    pub(crate) fn free_host_block(&self, addr: u64) {
        let freed = match self.lock().private.as_mut() {
            Some(private) => private.free(addr),
            None => Err(Error::invalid(format!(
                "deallocate of {addr:#x}, but this pool's allocator never allocated"
            ))),
        };
        if let Err(e) = freed {
            self.runtime().record_drop_error(e);
        }
    }

    /// Adds a segment large enough for `size` bytes at `align`: the initial capacity if the
    /// growth limit allows, else just what is needed. Collective.
    fn grow(&self, state: &mut PoolState, size: u64, align: u64) -> Result<usize> {
        let _span = tracing::info_span!("symheap.grow", rank = self.comm().rank(), size).entered();
        let slack = align.saturating_sub(self.config.granularity_bytes());
        let needed = size
            .checked_add(slack)
            .ok_or_else(|| Error::invalid(format!("size {size} with alignment {align} overflows")))
            .and_then(|n| round_up(n, self.device_granularity))?;
        let room = self
            .config
            .max_capacity_bytes()
            .saturating_sub(state.reserved());
        let initial = round_up(self.config.capacity_bytes(), self.device_granularity)?;
        let preferred = needed.max(initial);
        let grow_by = if preferred <= room { preferred } else { needed };
        if grow_by > room {
            return Err(state.over_pool_budget(self, size, align, grow_by));
        }
        // The new window's warm-up waits for the pool's streams: see their earlier work's
        // failures here, where they poison the pool, not as a failure of the growth.
        self.quiesce(state)?;
        let groups: Vec<Comm> = state.groups.iter().map(|g| g.comm.clone()).collect();
        let segment = Segment::create(
            &self.comm(),
            &groups,
            &self.stream,
            grow_by,
            self.config.granularity_bytes(),
            self.device_granularity,
        )
        .map_err(|unmade| self.unmade(unmade))?;
        state.registrations += 1;
        for g in &mut state.groups {
            g.registrations += 1;
        }
        let key = state.segments.insert(segment);
        tracing::info!(
            rank = self.comm().rank(),
            bytes = grow_by,
            windows = state.segments.len(),
            "symheap: pool grew by a window"
        );
        // The warm-up, with the segment in the pool: if it fails, the poisoned pool keeps the
        // segment mapped until its `Drop` has waited again.
        self.wait_or_poison([&self.stream])?;
        Ok(key)
    }

    /// Waits for the pool's stream and every other stream with collectives of the pool
    /// queued, before a collective step of the pool's own.
    pub(crate) fn quiesce(&self, state: &mut PoolState) -> Result<()> {
        self.check_not_capturing(state, "a collective step of the pool's own")?;
        let streams = std::iter::once(&self.stream).chain(&state.collective_streams);
        self.wait_or_poison(streams)?;
        state.collective_streams.clear();
        Ok(())
    }

    /// Records that a collective was queued on `stream`.
    pub(crate) fn note_collective_stream(&self, state: &mut PoolState, stream: &Stream) {
        let known = state.collective_streams.iter().any(|s| s.same_as(stream));
        if !stream.same_as(&self.stream) && !known {
            state.collective_streams.push(stream.clone());
        }
    }

    /// Synchronises the pool's stream and every stream recorded on a pending block, then
    /// returns the pending blocks to their heaps in the order they were freed. On a failure of
    /// the queued work, poisons the pool and releases nothing.
    pub(crate) fn flush_pending(&self, state: &mut PoolState) -> Result<()> {
        self.check_usable()?;
        self.check_not_capturing(state, "synchronize")?;
        // Bumped before waiting: a block marked with the old epoch (even by a `record_stream`
        // that does not take the lock) had its work enqueued before this point, so the wait
        // below covers it.
        let settling = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        // Each stream once (several pending blocks may record the same one).
        let mut streams: Vec<&Stream> = vec![&self.stream];
        let pending = state.pending.iter().flat_map(|p| &p.streams);
        let others = state.fences.streams().chain(&state.collective_streams);
        for stream in pending.chain(others) {
            if !streams.iter().any(|s| s.same_as(stream)) {
                streams.push(stream);
            }
        }
        if let Err(e) = self.wait_or_poison(streams) {
            return Err(self.explain_refused_collective(state, e));
        }
        self.settled.store(settling, Ordering::Release);
        // Every stream that freed memory has run its work: nothing is left to order.
        state.fences.clear();
        state.collective_streams.clear();
        for pending in std::mem::take(&mut state.pending) {
            if let Err(e) = state.free_block(pending.block) {
                self.runtime().record_drop_error(e);
            }
        }
        Ok(())
    }

    /// Waits for the queued work on each of `streams` that may still touch the pool's memory
    /// (see [`wait_streams`](Self::wait_streams)), then checks that the pool is not
    /// poisoned: another thread's wait may have taken the failure of work this one waited
    /// for, and whatever the caller reads or releases next must not pass for the result of
    /// work that failed.
    ///
    /// # Errors
    /// The first failure of the work waited for; [`Error::Poisoned`] if it succeeded but the
    /// pool is poisoned.
    fn wait_or_poison<'s>(&self, streams: impl IntoIterator<Item = &'s Stream>) -> Result<()> {
        self.wait_streams(streams)?;
        self.check_usable()
    }

    /// Waits for the queued work on each of `streams`: the pool's own stream through the
    /// communicator (so a failed collective reports its HCCL error), any other stream
    /// directly. Every stream is waited for even after one has failed. A failure poisons the
    /// pool, since a peer may still be writing this rank's memory, before the next waiter of
    /// that stream may synchronize it ([`Stream::wait_turn`]): where the runtime reports a
    /// failure to one synchronize only (CANN), the others then find the pool poisoned.
    /// Returns the first failure.
    ///
    /// The one place the pool waits for queued work and poisons on failure; it needs no pool
    /// lock, so it serves callers with or without the state lock, and `Drop`.
    fn wait_streams<'s>(&self, streams: impl IntoIterator<Item = &'s Stream>) -> Result<()> {
        let mut result = Ok(());
        for stream in streams {
            let _turn = stream.wait_turn();
            let waited = if stream.same_as(&self.stream) {
                self.comm().synchronize(stream)
            } else {
                stream.synchronize()
            };
            if let Err(e) = &waited {
                self.poison(e);
            }
            result = result.and(waited);
        }
        result
    }

    /// Poisons the pool with `cause` (the first failure is the cause; a later one may be a
    /// consequence of it).
    fn poison(&self, cause: &Error) {
        let first = self.failure.set_first(|| cause.clone());
        if first {
            tracing::error!(rank = self.comm().rank(), error = %cause, "symheap: pool poisoned");
        }
    }

    /// The error of a collective step of the pool's own that failed; if the ranks may not
    /// all know it failed (its agreement broke off), the pool is poisoned first: its ranks
    /// are at different steps and can take no further collective step together.
    fn unmade(&self, unmade: segment::Unmade) -> Error {
        if !unmade.agreed {
            self.poison(&unmade.error);
        }
        unmade.error
    }

    /// [`Error::Poisoned`] once queued work has failed.
    pub(crate) fn check_usable(&self) -> Result<()> {
        match self.failure.get() {
            None => Ok(()),
            Some(cause) => Err(Error::Poisoned(cause)),
        }
    }

    /// Returns a freed block: to its heap at once (stream-ordered reuse, the default), or to
    /// the pending list until the next `synchronize` where the rule is deferred reuse, a
    /// capture is under way or the pool is poisoned (then for ever); to the graphs that hold
    /// it while any may run again. See the module docs.
    pub(crate) fn release(
        &self,
        block: PoolBlock,
        used_epoch: Option<u64>,
        streams: Vec<Stream>,
        mut holds: Vec<Arc<GraphHold>>,
    ) {
        let mut state = self.lock();
        state.allocated -= block.size();
        state.free_count += 1;
        let info = state.segments[block.segment].infos[block.block.key() as usize];
        state.log.free(info.seq);
        state.tags.remove(info.tag, block.size());
        // Graphs that may run again keep the memory.
        holds.retain(|g| !g.is_released());
        if !holds.is_empty() {
            state.held.push(Held {
                block,
                holds,
                streams,
            });
            return;
        }
        let on_pool_stream = used_epoch == Some(self.current_epoch());
        let in_flight = on_pool_stream || !streams.is_empty();
        // Once poisoned, a peer may still write it: never reused. With deferred reuse, kept
        // until the next synchronize while queued work may use it. During a capture too: the
        // captured work could not wait for work outside it.
        let deferred = self.config.is_deferred_reuse() || state.capturing.is_some();
        if self.failure.is_set() || (in_flight && deferred) {
            state.pending.push(Pending { block, streams });
            return;
        }
        // Stream-ordered: free now. Later work on the streams that used it runs after the
        // work queued so far; another stream's user waits for them first (`Fences`).
        if on_pool_stream {
            state.fences.freed_on(&self.stream);
        }
        for stream in &streams {
            state.fences.freed_on(stream);
        }
        if let Err(e) = state.free_block(block) {
            self.runtime().record_drop_error(e);
        }
    }
}

impl PoolState {
    /// The accounting of the pool `pool`, as [`SymPool::stats`] reports it.
    fn stats(&self, pool: &PoolShared) -> PoolStats {
        let comm = &pool.comm();
        let collectives = self.paths.stats();
        let free = self.free();
        let largest_free = self.largest_free();
        PoolStats {
            allocated: self.allocated,
            reserved: self.reserved(),
            budget: pool.config.budget_bytes(),
            peak_allocated: self.peak_allocated,
            alloc_count: self.alloc_count,
            free_count: self.free_count,
            oom_count: self.oom_count,
            largest_free,
            fragmentation: if free == 0 {
                0.0
            } else {
                1.0 - largest_free as f64 / free as f64
            },
            windows: self.segments.len(),
            registrations: self.registrations
                + self.groups.iter().map(|g| g.registrations).sum::<u64>(),
            pending_frees: self.pending.len(),
            tags: self.sleep.classify(self.tags.stats()),
            communicators: self.communicators(comm, &collectives),
            sleep: self.sleep.stats(),
            collectives,
            private_allocated: self.private.as_ref().map_or(0, PrivateRegion::allocated),
            private_reserved: self.private.as_ref().map_or(0, PrivateRegion::size),
        }
    }

    /// The pool's communicator, then each attached group, with their registrations and paths.
    fn communicators(&self, own: &Comm, paths: &[stats::CollectiveStats]) -> Vec<stats::CommStats> {
        let own = (own, self.registrations);
        let groups = self.groups.iter().map(|g| (&g.comm, g.registrations));
        std::iter::once(own)
            .chain(groups)
            .zip(&self.names)
            .enumerate()
            .map(|(i, ((comm, registrations), name))| {
                let on = |symmetric: bool| {
                    let mine = paths.iter().filter(|c| c.comm == i);
                    mine.filter(|c| (c.path == crate::CollectivePath::Symmetric) == symmetric)
                        .map(|c| c.count)
                        .sum()
                };
                stats::CommStats {
                    name: name.clone(),
                    rank: comm.rank(),
                    ranks: comm.rank_count(),
                    windows: self.segments.len(),
                    registrations,
                    symmetric: on(true),
                    staged: on(false),
                    hccl_buffer_bytes: comm.config().buffer_bytes(),
                }
            })
            .collect()
    }

    /// Counts a new block under `tag` and remembers its tag and allocation number (the
    /// allocations before it: 0 for the pool's own block, 1 for the first asked for), once
    /// `alloc_count` counts it.
    fn record(&mut self, segment: usize, block: &Block, tag: &'static str) {
        let info = BlockInfo {
            tag: self.tags.add(tag, block.size()),
            seq: self.alloc_count - 1,
        };
        tags::record(&mut self.segments[segment].infos, block.key(), info);
    }

    /// First fit over segments in key order; `None` when no segment has room.
    fn try_alloc(&mut self, size: u64, align: u64) -> Result<Option<PoolBlock>> {
        for (key, segment) in self.segments.iter_mut() {
            if let Some(block) = segment.heap.try_alloc(size, align)? {
                return Ok(Some(PoolBlock {
                    segment: key,
                    block,
                }));
            }
        }
        Ok(None)
    }

    /// Returns a block to its segment's heap.
    fn free_block(&mut self, block: PoolBlock) -> Result<()> {
        Ok(self.segments[block.segment].heap.free(block.block)?)
    }

    /// The device address of a block.
    fn device_ptr(&self, block: &PoolBlock) -> DevicePtr {
        self.segments[block.segment].base.byte_add(block.offset())
    }

    fn largest_free(&self) -> u64 {
        self.segments
            .iter()
            .map(|(_, s)| s.heap.report().largest_free)
            .max()
            .unwrap_or(0)
    }

    fn free(&self) -> u64 {
        self.segments
            .iter()
            .map(|(_, s)| s.heap.report().free)
            .sum()
    }

    fn reserved(&self) -> u64 {
        self.segments.iter().map(|(_, s)| s.size).sum()
    }

    /// Every segment's heap hash, what is pending, the pool's own counts and its record of
    /// collectives, folded with the heap's fixed mixer (the same in every process and build).
    fn op_hash(&self) -> u64 {
        let segments = self
            .segments
            .iter()
            .flat_map(|(key, s)| [key as u64, s.size, s.heap.op_hash()]);
        let pending = self
            .pending
            .iter()
            .flat_map(|p| [p.block.segment as u64, p.block.offset(), p.block.size()]);
        let [allocs, frees, ooms] = self.hashed_counts_from;
        let counts = [
            self.alloc_count - allocs,
            self.free_count - frees,
            self.oom_count - ooms,
            self.collectives,
        ];
        fold_words(segments.chain(pending).chain(counts))
    }

    /// The graph being captured, if any: what the work queued now is held by.
    pub(crate) fn capture_hold(&self) -> Option<&Arc<GraphHold>> {
        self.capturing.as_ref()
    }

    /// Logs a user's collective of `kind` on `count` elements (`None`: per-rank counts) for a
    /// divergence's report.
    pub(crate) fn log_collective(&mut self, kind: crate::Collective, count: Option<u64>) {
        self.log.collective(kind, count);
    }

    /// Folds a collective call into the record of collectives.
    pub(crate) fn record_collective(&mut self, call: u64) {
        self.collectives = fold_words([self.collectives, call]);
    }

    /// Counts a `kind` collective on `path`; `true` for the first that staged for its reason.
    pub(crate) fn record_path(
        &mut self,
        comm: usize,
        kind: crate::Collective,
        path: crate::CollectivePath,
    ) -> bool {
        self.paths.record(comm, kind, path)
    }
}

impl Drop for PoolShared {
    fn drop(&mut self) {
        // Queued work may still use the memory about to be unmapped: wait for it first, even
        // on a poisoned pool, and record every failure (one wait per stream, so each failure
        // is recorded on its own).
        let mut state = self.lock();
        let streams = state.pending.iter().flat_map(|p| &p.streams);
        let others = state.fences.streams().chain(&state.collective_streams);
        let streams: Vec<Stream> = streams.chain(others).cloned().collect();
        for stream in std::iter::once(&self.stream).chain(&streams) {
            if let Err(e) = self.wait_streams([stream]) {
                self.runtime().record_drop_error(e);
            }
        }
        // Deregistering is a collective step. A rank that unwinds a panic, or whose queued
        // work failed, cannot count on its peers to take it with it: they may be waiting in
        // a collective it will never join, and would wait for the exec timeout (and it for
        // them). Its windows are left to the communicator's destroy, which releases them
        // locally; its peers then find it gone at once.
        if std::thread::panicking() || self.failure.is_set() {
            let segments: Vec<Segment> = state.segments.drain().collect();
            tracing::warn!(
                rank = self.comm().rank(),
                windows = segments.len(),
                cause = if std::thread::panicking() {
                    "panicking"
                } else {
                    "poisoned"
                },
                "symheap: pool dropped without deregistering its windows collectively; \
                 they are released when the communicator is destroyed"
            );
            for segment in segments {
                segment.leave_to_destroy();
            }
        }
    }
}

fn round_up(bytes: u64, granularity: u64) -> Result<u64> {
    bytes
        .max(1)
        .checked_next_multiple_of(granularity)
        .ok_or_else(|| {
            Error::invalid(format!(
                "{bytes} bytes overflow when rounded to {granularity}"
            ))
        })
}
