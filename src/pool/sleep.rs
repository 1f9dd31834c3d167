//! Sleep and wake: a pool hands all of its device memory back and takes it again, with every
//! block at its address.
//!
//! A sleep waits for the pool's work, copies the blocks of the tags its [`SleepPlan`] names
//! to page-locked host memory, deregisters every window in every communicator, unmaps and
//! frees every segment's physical memory, and keeps the address reservations and the whole
//! heap. A wake maps new physical memory at the same addresses, registers it again (the same
//! offsets, new handles) and copies the offloaded blocks back. This works for symmetric
//! windows because the heap is deterministic: every rank knows every block's offset without
//! asking, so nothing has to be exchanged to come back.
//!
//! Why deregister and free rather than unmap in place: `HcclCommSymWinRegister` keeps the
//! physical allocation and every peer imports and maps it (hicann/hcomm
//! `symmetric_memory.cc`, `RegisterInternal`), and `aclrtFreePhysical` does not release
//! memory that is still mapped (hicann/runtime `docs/zh/api_ref/11-04_virtual_memory_management.md`):
//! memory comes back only once its window is gone everywhere.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use super::graph_hold::GraphHold;
use super::{PoolShared, PoolState, SymPool, TagStats};
use crate::heap::fold_words;
use crate::raw::DevicePtr;
use crate::runtime::{Comm, PinnedHostBuffer, Stream};
use crate::{Error, Result};

/// What the op hash records for a sleep and a wake: words no collective kind uses.
const SLEEP_WORD: u64 = 0x51ee_9000;
const WAKE_WORD: u64 = 0x3a4e_0000;

/// What a [sleep](SymPool::sleep) keeps and releases. By default every block's contents are
/// discarded (they come back unspecified); [`offload`](Self::offload) keeps a tag's blocks in
/// page-locked host memory, restored on wake.
///
/// # Examples
/// ```
/// use symheap::SleepPlan;
///
/// // Keep the weights, drop the KV cache and activations; release HCCL's buffers too.
/// let plan = SleepPlan::new().offload("weights").offload("norms").release_communicators();
/// assert!(plan.offloads("weights") && !plan.offloads("kv-cache"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct SleepPlan {
    offload: Vec<String>,
    release_communicators: bool,
    zero_discarded: bool,
}

impl SleepPlan {
    /// A plan that discards every block's contents.
    pub fn new() -> Self {
        Self::default()
    }

    /// Copies the blocks tagged `tag` ([`AllocDesc`](crate::AllocDesc)) to page-locked host
    /// memory on sleep and back on wake. Call it once per tag to keep.
    pub fn offload(mut self, tag: impl Into<String>) -> Self {
        let tag = tag.into();
        if !self.offload.contains(&tag) {
            self.offload.push(tag);
        }
        self
    }

    /// Releases the communicators too, the pool's own and every attached group (a *deep*
    /// sleep): `HcclCommDestroy` now, whatever handles on them remain, so HCCL's own buffers
    /// come back as well. Wake with [`SymPool::wake_on`] and a new communicator of the same
    /// ranks, then attach new groups. Every sub-communicator of the pool's communicator that
    /// is not attached must be dropped before, since HCCL destroys sub-communicators first.
    pub fn release_communicators(mut self) -> Self {
        self.release_communicators = true;
        self
    }

    /// Zeroes the discarded blocks on wake (by default their contents are unspecified).
    pub fn zero_discarded(mut self) -> Self {
        self.zero_discarded = true;
        self
    }

    /// Whether blocks of `tag` are offloaded.
    pub fn offloads(&self, tag: &str) -> bool {
        self.offload.iter().any(|t| t == tag)
    }

    /// Whether the communicators are released.
    pub fn releases_communicators(&self) -> bool {
        self.release_communicators
    }

    /// What the op hash records of the plan: every rank must sleep with the same one.
    fn hash(&self) -> u64 {
        let tags = self.offload.iter().flat_map(|t| {
            let bytes = t.as_bytes().chunks(8).map(|c| {
                let mut word = [0u8; 8];
                word[..c.len()].copy_from_slice(c);
                u64::from_le_bytes(word)
            });
            std::iter::once(t.len() as u64).chain(bytes)
        });
        let flags = u64::from(self.release_communicators) | u64::from(self.zero_discarded) << 1;
        fold_words(std::iter::once(flags).chain(tags))
    }
}

/// What a [sleep](SymPool::sleep) did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SleepReport {
    /// Device memory released: every segment's bytes (and the allocator adapter's region).
    pub released_bytes: u64,
    /// Bytes copied to host memory, and in how many blocks.
    pub offloaded_bytes: u64,
    /// Blocks copied to host memory.
    pub offloaded_blocks: usize,
    /// Bytes in live blocks whose contents were discarded.
    pub discarded_bytes: u64,
    /// Windows deregistered, in every communicator.
    pub windows_deregistered: usize,
    /// Communicators destroyed (a deep sleep): the pool's own and its attached groups.
    pub communicators_released: usize,
    /// How long the sleep took on this rank.
    pub elapsed: Duration,
}

/// What a [wake](SymPool::wake) did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct WakeReport {
    /// Device memory mapped again.
    pub mapped_bytes: u64,
    /// Bytes copied back from host memory.
    pub restored_bytes: u64,
    /// Windows registered, in every communicator.
    pub registrations: usize,
    /// How long the wake took on this rank.
    pub elapsed: Duration,
}

/// A pool's sleep state in [`PoolStats`](super::PoolStats).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct SleepStats {
    /// Whether the pool is asleep.
    pub asleep: bool,
    /// Host bytes holding offloaded blocks (0 while awake).
    pub offloaded_bytes: u64,
    /// Sleeps so far.
    pub sleeps: u64,
    /// When the last sleep and wake happened (wall-clock time on this rank).
    pub last_sleep: Option<SystemTime>,
    /// See `last_sleep`.
    pub last_wake: Option<SystemTime>,
}

/// A pool's sleep state, as [`PoolStats`](super::PoolStats) reports it.
#[derive(Default)]
pub(crate) struct SleepState {
    /// While asleep: what the sleep kept.
    asleep: Option<Asleep>,
    /// The plan of the last sleep (the tags' memory classes).
    pub(crate) plan: SleepPlan,
    pub(crate) last_sleep: Option<SystemTime>,
    pub(crate) last_wake: Option<SystemTime>,
    pub(crate) sleeps: u64,
}

/// What a sleep keeps (its plan is [`SleepState::plan`]).
struct Asleep {
    offloaded: Vec<Offloaded>,
    /// Whether the communicators were released (only `wake_on` can wake it).
    released: bool,
}

/// A block's contents, kept on the host while the pool sleeps.
struct Offloaded {
    segment: usize,
    offset: u64,
    data: PinnedHostBuffer,
}

impl SleepState {
    /// What [`PoolStats::sleep`](super::PoolStats::sleep) reports.
    pub(crate) fn stats(&self) -> SleepStats {
        SleepStats {
            asleep: self.is_asleep(),
            offloaded_bytes: self.offloaded_bytes(),
            sleeps: self.sleeps,
            last_sleep: self.last_sleep,
            last_wake: self.last_wake,
        }
    }

    /// `tags` with their bytes in memory classes: resident (on the device now), offloadable
    /// and discardable (by the plan of the current or last sleep).
    pub(crate) fn classify(&self, mut tags: Vec<TagStats>) -> Vec<TagStats> {
        for t in &mut tags {
            t.resident_bytes = if self.is_asleep() { 0 } else { t.bytes };
            t.offloadable_bytes = if self.plan.offloads(&t.tag) {
                t.bytes
            } else {
                0
            };
            t.discardable_bytes = t.bytes - t.offloadable_bytes;
        }
        tags
    }

    /// Whether the pool is asleep.
    pub(crate) fn is_asleep(&self) -> bool {
        self.asleep.is_some()
    }

    /// The sleeping pool was moved to a live communicator (a wake on a new world, or a
    /// shrink): whatever its sleep released, a plain wake can wake it there.
    pub(crate) fn live_on_new_comm(&mut self) {
        if let Some(asleep) = self.asleep.as_mut() {
            asleep.released = false;
        }
    }

    /// Host bytes holding offloaded blocks.
    pub(crate) fn offloaded_bytes(&self) -> u64 {
        self.asleep.as_ref().map_or(0, |a| held_bytes(&a.offloaded))
    }
}

impl SymPool {
    /// Hands the pool's device memory back, keeping every block where it is: waits for every
    /// stream with pool work, copies the blocks of the tags `plan` offloads to page-locked
    /// host memory, deregisters every window in every attached communicator, unmaps and frees
    /// every segment's physical memory (and the allocator adapter's region, if it has no live
    /// allocation), and keeps the address reservations and the whole heap. With
    /// [`SleepPlan::release_communicators`] it destroys the communicators too.
    ///
    /// Collective over the pool's communicator, with the same plan on every rank; the op
    /// hash records it. Every [`SymVec`](crate::SymVec), [`SymBox`](crate::SymBox),
    /// [`SymBlock`](super::SymBlock) and device pointer stays valid as a value, with its
    /// offset. While asleep, everything that needs the memory (allocation, collectives,
    /// copies, host access and views, growth, attach, capture, graph replays) fails at once
    /// with [`Error::Asleep`]; dropping owners works, and [`synchronize`](Self::synchronize).
    ///
    /// # Examples
    /// ```
    /// use symheap::{AllocDesc, PoolConfig, SleepPlan, SymPool, SymVec, emu};
    ///
    /// emu::launch(2, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
    ///     let weights = SymVec::from_host_with(&pool, &[1.5f32; 64], AllocDesc::tagged("weights"))?;
    ///     let offset = weights.offset();
    ///     pool.sleep(&SleepPlan::new().offload("weights"))?;
    ///     assert!(pool.is_asleep() && weights.to_host().is_err());
    ///     pool.wake()?;
    ///     assert_eq!((weights.offset(), weights.to_host()?), (offset, vec![1.5; 64]));
    ///     assert_eq!(pool.window_get(weights.device_ptr(), 256)?, (weights.window(), offset));
    ///     Ok(())
    /// })?;
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// On every rank alike, with nothing changed: [`Error::InvalidArgument`] when the pool is
    /// asleep already, captures a graph, has live host views ([`SymVec::host`](crate::SymVec::host)),
    /// or live allocations of its [`allocator`](Self::allocator); the error of a rank whose
    /// queued work failed or whose offload failed ([`Error::Asymmetric`] on the others). If
    /// deregistering or freeing fails, the pool is asleep and poisoned with the cause.
    pub fn sleep(&self, plan: &SleepPlan) -> Result<SleepReport> {
        let start = Instant::now();
        let shared = self.shared();
        let _span = tracing::info_span!("symheap.sleep", rank = shared.comm().rank()).entered();
        // No host view or copy is under way while the memory goes (see `PoolShared::gate`).
        let _gate = shared.gate.write().unwrap_or_else(|e| e.into_inner());
        let mut state = shared.lock();
        let comm = shared.comm();
        comm.agree("sleep", shared.check_can_sleep(&state))?;
        let ready = shared
            .quiesce_all(&mut state)
            .and_then(|()| offload(shared, &state, plan));
        let what = "sleep (its work done and its blocks offloaded)";
        let offloaded = comm.agree(what, ready)?;
        // From here on the pool is asleep, whatever fails: nothing may touch its memory.
        shared.asleep.store(true, Ordering::Release);
        let mut report = SleepReport {
            released_bytes: 0,
            offloaded_bytes: held_bytes(&offloaded),
            offloaded_blocks: offloaded.len(),
            discarded_bytes: 0,
            windows_deregistered: 0,
            communicators_released: 0,
            elapsed: Duration::ZERO,
        };
        report.discarded_bytes = state.allocated - report.offloaded_bytes.min(state.allocated);
        let mut first_error = None;
        let per_segment = 1 + state.groups.len();
        for (_, segment) in state.segments.iter_mut() {
            report.released_bytes += segment.size;
            report.windows_deregistered += per_segment;
            if let Err(e) = segment.unregister() {
                first_error.get_or_insert(e);
            }
        }
        if let Some(private) = state.private.take() {
            report.released_bytes += private.size();
        }
        // A peer's window maps this rank's memory until the peer deregisters it too: once
        // every rank is past its deregistrations, every rank's memory is back.
        let released = first_error.take().map_or(Ok(()), Err);
        let what = "sleep (deregister and free every segment)";
        if let Err(e) = comm.agree(what, released) {
            first_error = Some(e);
        }
        // The agreements' scratch granule too (made again by the wake's first agreement).
        for c in state.groups.iter().map(|g| &g.comm).chain([&comm]) {
            c.release_agreement_scratch();
        }
        if plan.release_communicators && first_error.is_none() {
            // Sub-communicators first, as HCCL destroys them.
            let groups = std::mem::take(&mut state.groups);
            state.names.truncate(1);
            for comm in groups.iter().rev().map(|g| &g.comm).chain([&comm]) {
                match comm.release() {
                    Ok(()) => report.communicators_released += 1,
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        state.record_collective(fold_words([SLEEP_WORD, plan.hash()]));
        state.sleep.asleep = Some(Asleep {
            offloaded,
            released: report.communicators_released > 0,
        });
        state.sleep.plan = plan.clone();
        state.sleep.last_sleep = Some(SystemTime::now());
        state.sleep.sleeps += 1;
        if let Some(e) = first_error {
            shared.poison(&e);
            return Err(e);
        }
        report.elapsed = start.elapsed();
        tracing::info!(
            rank = comm.rank(),
            released = report.released_bytes,
            offloaded = report.offloaded_bytes,
            deep = plan.release_communicators,
            "symheap: pool asleep"
        );
        Ok(report)
    }

    /// Takes the device memory back after a [sleep](Self::sleep): maps new physical memory at
    /// the same addresses, registers every segment again in the pool's communicator and its
    /// attached groups (the same offsets, new handles: [`SymVec::window`](crate::SymVec::window)
    /// and [`window_get`](Self::window_get) agree with `HcclCommSymWinGet` again), and copies
    /// the offloaded blocks back. Discarded blocks come back with unspecified contents
    /// (zeroed with [`SleepPlan::zero_discarded`]). Graphs captured before the sleep refuse to
    /// replay: recapture them. Collective; the op hash records it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the pool is awake, or its sleep released the
    /// communicators (use [`wake_on`](Self::wake_on)); as for [`wake_on`](Self::wake_on).
    pub fn wake(&self) -> Result<WakeReport> {
        let comm = self.shared().comm();
        self.wake_on(&comm)
    }

    /// Wakes the pool on `comm`: a *rebind* of its segments, at the same offsets, to a
    /// communicator of the same ranks (the same rank count, this rank the same rank, the same
    /// device), such as a new world made through the usual bootstrap after a deep sleep
    /// ([`SleepPlan::release_communicators`]). On another communicator than the pool's, the
    /// attached groups are detached: split new ones from `comm` and [`attach`](Self::attach)
    /// them. Otherwise as [`wake`](Self::wake).
    ///
    /// # Examples
    /// ```
    /// use symheap::{AllocDesc, Comm, CommConfig, PoolConfig, SleepPlan, SymPool, SymVec, emu};
    ///
    /// emu::launch(2, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
    ///     let w = SymVec::from_host_with(&pool, &[7u32; 16], AllocDesc::tagged("weights"))?;
    ///     // The next world's bootstrap, handed round while this one lives.
    ///     let root = comm.fresh_root_info()?;
    ///     pool.sleep(&SleepPlan::new().offload("weights").release_communicators())?;
    ///     assert!(comm.is_released());
    ///     let world = Comm::init(comm.runtime(), 2, &root, comm.rank(), &CommConfig::new())?;
    ///     pool.wake_on(&world)?;
    ///     assert_eq!(w.to_host()?, vec![7; 16]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// On every rank alike, the pool still asleep: [`Error::InvalidArgument`] when it is
    /// awake, or `comm` is not of the same ranks; the runtime's error mapping or registering
    /// (what was mapped is released again). [`Error::Poisoned`] if the pool is poisoned, or
    /// becomes so when a step fails on some ranks only, or restoring fails (the cause named).
    pub fn wake_on(&self, comm: &Comm) -> Result<WakeReport> {
        let start = Instant::now();
        let shared = self.shared();
        let _span = tracing::info_span!("symheap.wake", rank = comm.rank()).entered();
        let mut state = shared.lock();
        let local = shared
            .check_usable()
            .and_then(|()| shared.check_can_wake(&state, comm));
        comm.agree(
            "wake (every rank asleep, on a communicator of the same ranks)",
            local,
        )?;
        let rebind = !comm.same_as(&shared.comm());
        if rebind {
            state.groups.clear();
            state.names.truncate(1);
            // The pool's communicator is live again, whether or not this wake succeeds.
            state.sleep.live_on_new_comm();
            *shared.comm.write().unwrap_or_else(|e| e.into_inner()) = comm.clone();
        }
        let groups: Vec<Comm> = state.groups.iter().map(|g| g.comm.clone()).collect();
        let mut report = WakeReport {
            mapped_bytes: 0,
            restored_bytes: 0,
            registrations: 0,
            elapsed: Duration::ZERO,
        };
        let keys: Vec<usize> = state.segments.iter().map(|(key, _)| key).collect();
        for (i, &key) in keys.iter().enumerate() {
            let remapped = state.segments[key].remap(comm, &groups, &shared.stream);
            if let Err(unmade) = remapped {
                let error = shared.unmade(unmade);
                if shared.check_usable().is_ok() {
                    // Agreed: every rank releases what it mapped again, and stays asleep.
                    for &done in &keys[..i] {
                        if let Err(e) = state.segments[done].unregister() {
                            shared.poison(&e);
                        }
                    }
                }
                return Err(error);
            }
            report.mapped_bytes += state.segments[key].size;
            report.registrations += 1 + groups.len();
        }
        state.registrations += keys.len() as u64;
        for g in &mut state.groups {
            g.registrations += keys.len() as u64;
        }
        // The warm-ups write the segments' first bytes: they run before any restore.
        shared.wait_or_poison([&shared.stream])?;
        let asleep = state.sleep.asleep.take().expect("checked asleep");
        let restored = restore(shared, &state, &asleep.offloaded);
        state.record_collective(WAKE_WORD);
        state.sleep.last_wake = Some(SystemTime::now());
        shared.asleep.store(false, Ordering::Release);
        match restored {
            Ok(bytes) => report.restored_bytes = bytes,
            Err(e) => {
                shared.poison(&e);
                return Err(e);
            }
        }
        report.elapsed = start.elapsed();
        tracing::info!(
            rank = comm.rank(),
            mapped = report.mapped_bytes,
            restored = report.restored_bytes,
            "symheap: pool awake"
        );
        Ok(report)
    }

    /// Whether the pool is asleep ([`sleep`](Self::sleep)).
    pub fn is_asleep(&self) -> bool {
        self.shared().asleep.load(Ordering::Acquire)
    }
}

impl PoolShared {
    /// [`Error::Asleep`] for `what` while the pool sleeps.
    pub(crate) fn check_awake(&self, what: &str) -> Result<()> {
        if self.asleep.load(Ordering::Acquire) {
            return Err(Error::Asleep(what.to_owned()));
        }
        Ok(())
    }

    /// Why this rank cannot sleep now, if it cannot.
    fn check_can_sleep(&self, state: &PoolState) -> Result<()> {
        self.check_usable()?;
        if state.sleep.is_asleep() {
            return Err(Error::invalid("sleep: the pool is asleep already"));
        }
        self.check_not_capturing(state, "sleep")?;
        let views = self.host_views.load(Ordering::Acquire);
        if views > 0 {
            return Err(Error::invalid(format!(
                "sleep: {views} host view(s) of pooled memory are alive (SymVec::host): drop \
                 them first, their memory is about to go"
            )));
        }
        let private = state.private.as_ref().map_or(0, |p| p.allocated());
        if private > 0 {
            return Err(Error::invalid(format!(
                "sleep: the pool's allocator (SymPool::allocator) has {private} bytes in live \
                 allocations, whose memory the pool cannot take away: free them first"
            )));
        }
        Ok(())
    }

    /// Why this rank cannot wake on `comm`, if it cannot.
    fn check_can_wake(&self, state: &PoolState, comm: &Comm) -> Result<()> {
        let Some(asleep) = &state.sleep.asleep else {
            return Err(Error::invalid("wake: the pool is awake"));
        };
        let own = self.comm();
        if asleep.released && comm.same_as(&own) {
            return Err(Error::invalid(
                "wake: the sleep released the pool's communicator: wake_on a new one of the \
                 same ranks",
            ));
        }
        if comm.is_released() {
            return Err(Error::invalid("wake: this communicator was released"));
        }
        let (want, got) = (
            (own.rank_count(), own.rank(), self.device),
            (comm.rank_count(), comm.rank(), comm.device()),
        );
        if want != got {
            return Err(Error::invalid(format!(
                "wake: the pool was rank {} of {} on device {}, the communicator is rank {} \
                 of {} on device {}",
                want.1, want.0, want.2, got.1, got.0, got.2
            )));
        }
        Ok(())
    }

    /// Waits for every stream with pool work: the pool's, those with collectives or frees
    /// queued, those blocks were recorded on, and those graphs were replayed on; releases
    /// the pending frees; and destroys the live graphs' ACL graphs.
    fn quiesce_all(&self, state: &mut PoolState) -> Result<()> {
        self.flush_pending(state)?;
        let (streams, graphs) = self.streams_with_pool_work(state);
        self.wait_or_poison(&streams)?;
        // Their captured collectives were set up on the windows about to go.
        graphs.iter().try_for_each(|g| g.destroy_because("slept"))
    }

    /// Every stream that may hold queued pool work, each once: the pool's, those of pending
    /// frees, fences and collectives, those blocks were recorded on, and those the live
    /// graphs were replayed on; and the live graphs.
    pub(super) fn streams_with_pool_work(
        &self,
        state: &mut PoolState,
    ) -> (Vec<Stream>, Vec<Arc<GraphHold>>) {
        let recorded = self
            .recorded_streams
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut found: Vec<Stream> = recorded.iter().filter_map(|s| s.upgrade()).collect();
        drop(recorded);
        found.extend(state.pending.iter().flat_map(|p| p.streams.iter().cloned()));
        found.extend(state.fences.streams().cloned());
        found.extend(state.collective_streams.iter().cloned());
        state.graphs.retain(|g| g.strong_count() > 0);
        let graphs: Vec<_> = state.graphs.iter().filter_map(|g| g.upgrade()).collect();
        for graph in &graphs {
            found.extend(graph.replay_streams());
        }
        let mut streams: Vec<Stream> = vec![self.stream.clone()];
        for stream in found {
            if !streams.iter().any(|s| s.same_as(&stream)) {
                streams.push(stream);
            }
        }
        (streams, graphs)
    }

    /// Notes that pool work may be queued on `stream`, for a sleep to wait for.
    pub(crate) fn note_stream(&self, stream: &Stream) {
        let mut recorded = self
            .recorded_streams
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Forgets destroyed streams on the way.
        let mut known = false;
        recorded.retain(|s| match s.upgrade() {
            Some(live) => {
                known |= live.same_as(stream);
                true
            }
            None => false,
        });
        if !known {
            recorded.push(stream.downgrade());
        }
    }
}

/// The host bytes that `offloaded` holds.
fn held_bytes(offloaded: &[Offloaded]) -> u64 {
    offloaded
        .iter()
        .map(|o| o.data.as_slice().len() as u64)
        .sum()
}

/// A live block of the pool, and whether `plan` offloads it.
struct LiveBlock {
    segment: usize,
    offset: u64,
    ptr: DevicePtr,
    len: usize,
    offloaded: bool,
}

/// Every live block of the pool, in segment and offset order.
fn live_blocks(state: &PoolState, plan: &SleepPlan) -> Result<Vec<LiveBlock>> {
    let mut blocks = Vec::new();
    for (key, segment) in state.segments.iter() {
        for region in segment.heap.regions().into_iter().filter(|r| r.live) {
            let tag = state.tags.name(segment.infos[region.key as usize].tag);
            blocks.push(LiveBlock {
                segment: key,
                offset: region.offset,
                ptr: segment.base.byte_add(region.offset),
                len: usize::try_from(region.size)
                    .map_err(|_| Error::invalid("a block larger than the address space"))?,
                offloaded: plan.offloads(tag),
            });
        }
    }
    Ok(blocks)
}

/// Copies the live blocks of the tags `plan` offloads to page-locked host memory.
fn offload(shared: &PoolShared, state: &PoolState, plan: &SleepPlan) -> Result<Vec<Offloaded>> {
    let raw = shared.runtime().raw();
    let mut offloaded = Vec::new();
    for block in live_blocks(state, plan)?
        .into_iter()
        .filter(|b| b.offloaded)
    {
        let mut data = PinnedHostBuffer::new(shared.runtime(), block.len)?;
        // SAFETY: a live block of the pool's mapped memory; every stream with pool work was
        // waited for and the state lock keeps new work out.
        unsafe { raw.copy_to_host(data.as_mut_slice(), block.ptr)? };
        offloaded.push(Offloaded {
            segment: block.segment,
            offset: block.offset,
            data,
        });
    }
    Ok(offloaded)
}

/// Copies the `offloaded` blocks back (and zeroes the discarded ones if the sleep's plan
/// says so); returns the bytes restored.
fn restore(shared: &PoolShared, state: &PoolState, offloaded: &[Offloaded]) -> Result<u64> {
    let raw = shared.runtime().raw();
    for o in offloaded {
        let base = state.segments[o.segment].base;
        // SAFETY: the block's memory is mapped again and idle (the warm-ups were waited for),
        // and the state lock keeps new work out.
        unsafe { raw.copy_to_device(base.byte_add(o.offset), o.data.as_slice())? };
    }
    let plan = &state.sleep.plan;
    if plan.zero_discarded {
        for block in live_blocks(state, plan)?
            .into_iter()
            .filter(|b| !b.offloaded)
        {
            // SAFETY: as above.
            unsafe { raw.memset(block.ptr, 0, block.len)? };
        }
    }
    Ok(held_bytes(offloaded))
}
