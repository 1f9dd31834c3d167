//! [`SymBlock`]: one block of a pool, with its window and offset.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::graph_hold::GraphHold;
use super::{Placed, PoolBlock, PoolShared};
use crate::raw::{DevicePtr, WindowCell, WindowHandle};
use crate::runtime::Stream;

/// Marks an allocation no queued work has used.
const NEVER_USED: u64 = u64::MAX;

/// A block of device memory from a [`SymPool`](super::SymPool); returned to the pool on drop.
///
/// `(window(), offset())` is what `HcclCommSymWinGet` returns for it, and the same on every
/// rank that made the same calls.
pub struct SymBlock {
    pool: Arc<PoolShared>,
    /// `None` only during `drop`.
    block: Option<PoolBlock>,
    ptr: DevicePtr,
    /// Its segment's window in the pool's communicator (a wake replaces the handle).
    window: Arc<WindowCell>,
    len: u64,
    /// The pool epoch in which queued work last used this memory, or `NEVER_USED`.
    used_epoch: AtomicU64,
    /// Streams other than the pool's that may use this memory ([`record_stream`](Self::record_stream)).
    streams: Mutex<Vec<Stream>>,
    /// Graphs whose captured work uses this memory ([`SymPool::capture`](super::SymPool::capture)).
    holds: Mutex<Vec<Arc<GraphHold>>>,
    /// Live host views of this memory: work that writes it is refused meanwhile.
    host_views: Arc<AtomicUsize>,
}

impl std::fmt::Debug for SymBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SymBlock")
            .field("window", &self.window.get())
            .field("offset", &self.offset())
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl SymBlock {
    pub(super) fn new(pool: Arc<PoolShared>, placed: Placed, len: u64) -> Self {
        SymBlock {
            pool,
            block: Some(placed.block),
            ptr: placed.ptr,
            window: placed.window,
            len,
            used_epoch: AtomicU64::new(NEVER_USED),
            streams: Mutex::new(Vec::new()),
            holds: Mutex::new(Vec::new()),
            host_views: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn block(&self) -> &PoolBlock {
        self.block.as_ref().expect("a live SymBlock has its block")
    }

    /// The window holding the block: after a [wake](super::SymPool::wake), the new
    /// registration's.
    pub fn window(&self) -> WindowHandle {
        self.window.get()
    }

    /// The block's offset in its window.
    pub fn offset(&self) -> u64 {
        self.block().offset()
    }

    /// Where the block is, in terms equal on every rank: its segment's key and its offset.
    pub(crate) fn location(&self) -> [u64; 2] {
        let block = self.block();
        [block.segment as u64, block.offset()]
    }

    /// The bytes asked for.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether zero bytes were asked for (never: the pool rejects size 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes granted (the request rounded up to the pool's granularity).
    pub fn capacity(&self) -> u64 {
        self.block().size()
    }

    /// The block's device address.
    pub fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Declares that work on `stream` uses this memory, so that when it is freed it is not
    /// reused before [`SymPool::synchronize`](super::SymPool::synchronize) has waited for that
    /// stream. Like PyTorch's `record_stream`, but released in program order: call it at the
    /// same point on every rank. Work the pool enqueues itself is tracked without it; for the
    /// pool's own stream this marks the memory as used until the next `synchronize`.
    pub fn record_stream(&self, stream: &Stream) {
        if stream.same_as(self.pool.stream()) {
            self.mark_used_on(stream);
            return;
        }
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        if !streams.iter().any(|s| s.same_as(stream)) {
            streams.push(stream.clone());
            self.pool.note_stream(stream);
        }
    }

    /// Whether the contents are unspecified: queued work that used this memory was cut short
    /// by a lost rank ([`SymPool::shrink`](super::SymPool::shrink)) and no work or host copy
    /// has written all of it since. Reading it on the host is refused meanwhile. (New queued
    /// work that uses it counts as writing it: a collective that reads it reads what is there.)
    pub fn is_unspecified(&self) -> bool {
        self.pool
            .was_interrupted(self.used_epoch.load(Ordering::Acquire))
    }

    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if the contents are
    /// unspecified ([`is_unspecified`](Self::is_unspecified)): before a host read.
    pub(crate) fn check_specified(&self) -> crate::Result<()> {
        if !self.is_unspecified() {
            return Ok(());
        }
        Err(crate::Error::invalid(format!(
            "the buffer at offset {} of window {:?} was in use by work a lost rank cut short: \
             its contents are unspecified until written again",
            self.offset(),
            self.window.get()
        )))
    }

    /// Records that a host copy wrote all of the memory: its contents are specified again.
    pub(crate) fn mark_written(&self) {
        if self.is_unspecified() {
            self.used_epoch.store(NEVER_USED, Ordering::Release);
        }
    }

    /// Records that work just enqueued on `stream` uses this memory.
    pub(crate) fn mark_used_on(&self, stream: &Stream) {
        if stream.same_as(self.pool.stream()) {
            self.used_epoch
                .store(self.pool.current_epoch(), Ordering::Release);
        } else {
            self.record_stream(stream);
        }
    }

    /// Marks the memory as the captured graph `hold`'s: it is not reused while the graph
    /// lives.
    pub(crate) fn hold_for(&self, hold: &Arc<GraphHold>) {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        if !holds.iter().any(|h| Arc::ptr_eq(h, hold)) {
            holds.push(hold.clone());
        }
    }

    /// Whether a live graph's replays write or read this memory.
    pub(crate) fn is_held(&self) -> bool {
        let holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        holds.iter().any(|h| !h.is_released())
    }

    /// Whether queued work may still use this memory (it was used, or handed out again
    /// while work that used it before may not have run, since the last synchronize).
    pub(crate) fn may_be_in_use(&self) -> bool {
        let streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        self.used_epoch.load(Ordering::Acquire) == self.pool.current_epoch() || !streams.is_empty()
    }

    /// Waits until no queued work uses this memory (the pool's stream and recorded streams).
    /// A failure of that work poisons the pool: a peer may still be writing this memory.
    /// [`Error::Poisoned`](crate::Error::Poisoned) if the pool is poisoned, before or after
    /// the wait (another thread's wait may have found the failure).
    pub(crate) fn wait_idle(&self) -> crate::Result<()> {
        // Taking the state lock waits out a `synchronize` in progress: it bumps the epoch
        // before it waits, so the epoch read below may skip the pool's stream only once that
        // wait is over (and has poisoned the pool if it failed).
        let state = self.pool.lock();
        self.pool.check_usable()?;
        self.pool.check_awake("host access to pooled memory")?;
        // The captured streams cannot be waited for: refused, not a failure of the work.
        self.pool
            .check_not_capturing(&state, "host access to pooled memory")?;
        drop(state);
        let used = self.used_epoch.load(Ordering::Acquire) == self.pool.current_epoch();
        // `record_stream` never records the pool's own stream, so no stream is waited twice.
        let streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        let pool_stream = used.then_some(self.pool.stream());
        // And the streams graphs that use it were replayed on.
        let holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        let replays: Vec<Stream> = holds.iter().flat_map(|h| h.replay_streams()).collect();
        drop(holds);
        let all = pool_stream
            .into_iter()
            .chain(streams.iter())
            .chain(&replays);
        self.pool.wait_or_poison(all)
    }

    /// Runs the host access `access` (a copy in or out) once no queued work uses this memory
    /// ([`wait_idle`](Self::wait_idle)), and fails if the pool is poisoned after it: a
    /// failure that another thread's wait found while `access` ran means the data may be the
    /// failed work's (unreduced, half written), which must not pass for its result.
    ///
    /// # Errors
    /// [`wait_idle`](Self::wait_idle)'s, `access`'s, or [`Error::Poisoned`](crate::Error::Poisoned).
    pub(crate) fn access_idle<T>(
        &self,
        access: impl FnOnce() -> crate::Result<T>,
    ) -> crate::Result<T> {
        // Held through the access: a sleep waits for it (see `PoolShared::gate`).
        let _gate = self.pool.gate.read().unwrap_or_else(|e| e.into_inner());
        self.wait_idle()?;
        let value = access()?;
        self.pool.check_usable()?;
        Ok(value)
    }

    /// Waits as [`wait_idle`](Self::wait_idle) does and counts a host view of the memory
    /// until the returned token drops: a sleep refuses while any is alive.
    ///
    /// The view is counted on the block before the wait, under the state lock: work that
    /// writes the block and was queued before is waited for, and work queued after is
    /// refused ([`check_no_host_view`](Self::check_no_host_view), under the same lock).
    pub(crate) fn open_host_view(&self) -> crate::Result<HostViewToken> {
        let _gate = self.pool.gate.read().unwrap_or_else(|e| e.into_inner());
        let token = {
            let _state = self.pool.lock();
            self.pool.host_views.fetch_add(1, Ordering::AcqRel);
            self.host_views.fetch_add(1, Ordering::AcqRel);
            HostViewToken {
                pool: Arc::clone(&self.pool),
                block: Arc::clone(&self.host_views),
            }
        };
        self.wait_idle()?;
        Ok(token)
    }

    /// Refuses work that writes this memory while a host view of it lives (the view would
    /// see the memory change under a Rust reference). Called with the state lock held.
    pub(crate) fn check_no_host_view(&self, what: &str) -> crate::Result<()> {
        match self.host_views.load(Ordering::Acquire) {
            0 => Ok(()),
            n => Err(crate::Error::invalid(format!(
                "{what} would write memory (window offset {:#x}) that {n} live host view(s) \
                 read: drop the HostView first",
                self.offset()
            ))),
        }
    }

    /// Whether this allocation belongs to `pool`.
    pub(crate) fn belongs_to(&self, pool: &Arc<PoolShared>) -> bool {
        Arc::ptr_eq(&self.pool, pool)
    }

    pub(crate) fn pool(&self) -> &Arc<PoolShared> {
        &self.pool
    }
}

/// A live host view of pooled memory, counted by its pool and its block until dropped.
pub(crate) struct HostViewToken {
    pool: Arc<PoolShared>,
    block: Arc<AtomicUsize>,
}

impl Drop for HostViewToken {
    fn drop(&mut self) {
        self.block.fetch_sub(1, Ordering::AcqRel);
        self.pool.host_views.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for SymBlock {
    fn drop(&mut self) {
        let Some(block) = self.block.take() else {
            return;
        };
        let used = *self.used_epoch.get_mut();
        let streams = std::mem::take(self.streams.get_mut().unwrap_or_else(|e| e.into_inner()));
        let used = (used != NEVER_USED).then_some(used);
        let holds = std::mem::take(self.holds.get_mut().unwrap_or_else(|e| e.into_inner()));
        self.pool.release(block, used, streams, holds);
    }
}
