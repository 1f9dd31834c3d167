//! Going on without lost ranks ([`SymPool::shrink`]): the survivors' pools keep their heaps,
//! their memory and every tensor where it was, and move to the survivors' communicator.
//!
//! Why it can work: every rank's heap is the same (the same offsets on every rank, by
//! construction), and a window can be torn down by each rank alone (HCCL deregisters without
//! an exchange: hicann/hcomm `DeregisterSymmetricMem` on A3). So after a loss each survivor
//! drains its streams (the work the loss cut short fails), deregisters its windows locally,
//! and registers the same memory in the new communicator at the same offsets. The survivors
//! then check that their heaps are still the same.
//!
//! What the loss cut short is marked: a block that queued work used since the pool's last
//! successful synchronisation holds unspecified contents (a collective may have written
//! part of it), and reading it on the host is refused until it is written again
//! ([`SymBlock::is_unspecified`](super::SymBlock::is_unspecified)).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{PoolShared, PoolState, SymPool};
use crate::heap::fold_words;
use crate::runtime::Comm;
use crate::{Error, Result};

/// What a shrink folds into the record of collectives it restarts (see
/// [`PoolState::rebase_op_hash`]).
const SHRINK_WORD: u64 = u64::from_le_bytes(*b"shrink\0\0");

/// What a [shrink](SymPool::shrink) did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ShrinkReport {
    /// The ranks of the communicator the pool was on.
    pub ranks_before: u32,
    /// The ranks of the survivors' communicator it is on now.
    pub ranks_after: u32,
    /// Windows registered in the survivors' communicator (one per segment).
    pub registrations: usize,
    /// Whether queued work was cut short by the loss: then the blocks it used hold
    /// unspecified contents until written again.
    pub interrupted_work: bool,
    /// How long the shrink took on this rank.
    pub elapsed: Duration,
}

impl SymPool {
    /// Moves the pool to `survivors`, the communicator of the ranks that survived the loss of
    /// others (made by every survivor, for example with
    /// [`Survivors::shrink`](crate::Survivors::shrink)), keeping its heap, its memory and
    /// every live tensor where it was: same offsets, same contents, new window handles.
    /// Collective over `survivors`.
    ///
    /// Each rank first waits for every stream with pool work (the work the loss cut short
    /// fails: that failure is expected, and forgotten), deregisters its windows alone (the
    /// lost ranks take no part) and leaves the pool's attached groups (they held the lost
    /// ranks: split new ones from `survivors`, see [`ParallelGroups`](crate::ParallelGroups),
    /// and attach them). Then the survivors register every segment in `survivors` at the same
    /// offsets and check that their heaps are still the same (and that all of them sleep or
    /// none). The pool's graphs are destroyed
    /// (their captured collectives were on the old windows): capture them again; a replay of
    /// one says so. A poisoned pool is usable again afterwards, and its
    /// [`op_hash`](Self::op_hash) starts again from the survivors' common placement (their
    /// calls before the loss may differ where the loss cut some short).
    ///
    /// A pool that sleeps, or whose sleep or wake the loss interrupted (it is then asleep,
    /// and poisoned), shrinks too: it stays asleep, now on `survivors`, and its
    /// [`wake`](Self::wake) registers its segments there and restores what its sleep
    /// offloaded.
    ///
    /// Blocks that queued work used since the last `synchronize` that succeeded hold
    /// unspecified contents: reading them on the host is refused until they are written again
    /// ([`SymBlock::is_unspecified`](super::SymBlock::is_unspecified)).
    ///
    /// # Examples
    /// ```
    /// use symheap::{Comm, CommConfig, PoolConfig, ReduceOp, RootInfo, SymPool, SymVec, emu};
    ///
    /// // Rank 2 of 3 leaves; ranks 0 and 1 go on as a world of 2 (found through a directory
    /// // that only this user can write, as `symheap-run --elastic` provides).
    /// let dir = std::env::temp_dir().join(format!("shrink-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// std::fs::write(dir.join("lost-1"), "2\n")?;
    /// let sums = emu::launch(3, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
    ///     let mut v = SymVec::from_host(&pool, &[1.0f32; 4])?;
    ///     pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
    ///     pool.synchronize()?;
    ///     if comm.rank() == 2 {
    ///         return Ok(None); // leaves: its pool and communicator go
    ///     }
    ///     let mut survivors = symheap::Survivors::new(&dir, 3, comm.rank());
    ///     let world = survivors.shrink(comm.runtime(), &CommConfig::new())?;
    ///     pool.shrink(&world)?;
    ///     assert_eq!(v.to_host()?, vec![3.0; 4], "the tensor is where it was");
    ///     pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
    ///     Ok(Some(v.to_host()?))
    /// })?;
    /// assert_eq!(sums[0], Some(vec![6.0; 4]));
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `survivors` is not smaller than the pool's communicator
    /// or on another device, the pool is capturing, or host views of it are alive;
    /// [`Error::Asymmetric`] if the survivors' heaps differ (or some sleep and others not),
    /// and the runtime's error of a registration: both poison the pool (it is half moved).
    pub fn shrink(&self, survivors: &Comm) -> Result<ShrinkReport> {
        let start = Instant::now();
        let shared = self.shared();
        let old = shared.comm();
        let _span = tracing::info_span!("symheap.shrink", rank = survivors.rank()).entered();
        if survivors.rank_count() >= old.rank_count() {
            return Err(Error::invalid(format!(
                "shrink: the survivors' communicator has {} ranks, the pool's {}: it must be \
                 smaller",
                survivors.rank_count(),
                old.rank_count()
            )));
        }
        if survivors.device() != shared.device {
            return Err(Error::invalid(format!(
                "shrink: the survivors' communicator is on device {}, the pool on {}",
                survivors.device(),
                shared.device
            )));
        }
        // No host view or host copy is under way while the memory changes hands.
        let _gate = shared.gate.write().unwrap_or_else(|e| e.into_inner());
        let mut state = shared.lock();
        shared.check_not_capturing(&state, "shrink")?;
        let views = shared.host_views.load(Ordering::Acquire);
        if views > 0 {
            return Err(Error::invalid(format!(
                "shrink: {views} host view(s) of pooled memory are alive (SymVec::host): drop \
                 them first, the windows under them are about to be registered anew"
            )));
        }
        // Work marked with this epoch, or one since the last synchronisation that succeeded,
        // is what the loss may have cut short.
        let cut_short = shared.epoch.fetch_add(1, Ordering::AcqRel);
        let failed = shared.drain_after_loss(&mut state).is_err() || shared.failure.is_set();
        // Windows left to the old world's destroy (those of a registration the loss broke
        // off) may hold memory at a sleeping segment's addresses: they go now, whatever
        // happens next (a shrink that fails is repeated on another world).
        if let Err(e) = old.release_orphans_after_loss() {
            shared.runtime().record_drop_error(e);
        }
        // The groups held the lost ranks; each segment's windows in them go with its rebind.
        state.groups.clear();
        state.names.truncate(1);
        // Nothing queued is left: what was pending goes back to the heaps.
        for pending in std::mem::take(&mut state.pending) {
            if let Err(e) = state.free_block(pending.block) {
                shared.runtime().record_drop_error(e);
            }
        }
        *shared.comm.write().unwrap_or_else(|e| e.into_inner()) = survivors.clone();
        shared.failure.clear();
        if failed {
            shared.mark_interrupted(cut_short);
        }
        let keys: Vec<usize> = state.segments.iter().map(|(key, _)| key).collect();
        let asleep = state.sleep.is_asleep();
        // Which segments have memory: all of them awake, none asleep, unless a wake the loss
        // interrupted left some mapped (and registered in groups, which every rank must
        // deregister alike).
        let mapped: Vec<u64> = (keys.iter())
            .map(|&key| u64::from(state.segments[key].is_mapped()))
            .collect();
        // From here on the pool is half moved until every segment is rebound and the heaps
        // compared: any failure poisons it (its windows may be gone, its peers elsewhere).
        let moved = (|| {
            let mine = [state.placement_hash(), asleep.into()]
                .into_iter()
                .chain(mapped);
            let heaps = survivors.gather_words(fold_words(mine))?;
            let differing: Vec<usize> =
                (1..heaps.len()).filter(|&r| heaps[r] != heaps[0]).collect();
            if !differing.is_empty() {
                return Err(Error::Asymmetric(format!(
                    "shrink: the pools of survivors {differing:?} differ from survivor 0's: \
                     the ranks allocated or freed differently before or after the loss, so \
                     their tensors are not at the same offsets, or some sleep and others not \
                     (or a wake the loss interrupted mapped different segments)"
                )));
            }
            if asleep {
                shared.move_asleep(&mut state, &keys)?;
                return Ok(0);
            }
            for &key in &keys {
                state.segments[key]
                    .rebind(survivors, &shared.stream)
                    .map_err(|unmade| unmade.error)?;
            }
            state.registrations += keys.len() as u64;
            Ok(keys.len())
        })();
        let registrations = match moved {
            Ok(registrations) => registrations,
            Err(error) => {
                shared.poison(&error);
                return Err(error);
            }
        };
        // The survivors' histories before the loss may differ (a call the loss cut short on
        // some of them only); their placements are the same: the op hash starts from there.
        state.rebase_op_hash(survivors.rank_count());
        let report = ShrinkReport {
            ranks_before: old.rank_count(),
            ranks_after: survivors.rank_count(),
            registrations,
            interrupted_work: failed,
            elapsed: start.elapsed(),
        };
        tracing::info!(
            rank = survivors.rank(),
            before = report.ranks_before,
            after = report.ranks_after,
            "symheap: pool shrunk to the survivors"
        );
        Ok(report)
    }
}

impl PoolShared {
    /// The shrink of a sleeping pool: the wake registers its segments, now in the survivors'
    /// communicator. A segment that an interrupted wake had mapped again is released (its
    /// windows deregistered on this rank alone), so that all of them sleep; the wake restores
    /// what the sleep offloaded.
    fn move_asleep(&self, state: &mut PoolState, keys: &[usize]) -> Result<()> {
        for &key in keys {
            state.segments[key].unregister_if_mapped()?;
        }
        state.sleep.live_on_new_comm();
        Ok(())
    }

    /// Records that work queued from the last settled epoch up to `last` may have been cut
    /// short by a loss.
    fn mark_interrupted(&self, last: u64) {
        let first = self.settled.load(Ordering::Acquire).min(last);
        let mut epochs = self.interrupted.lock().unwrap_or_else(|e| e.into_inner());
        epochs.push((first, last));
        self.interrupted_any.store(true, Ordering::Release);
    }

    /// Whether work queued in `epoch` was cut short by a loss.
    pub(super) fn was_interrupted(&self, epoch: u64) -> bool {
        if !self.interrupted_any.load(Ordering::Acquire) {
            return false;
        }
        let epochs = self.interrupted.lock().unwrap_or_else(|e| e.into_inner());
        epochs
            .iter()
            .any(|&(first, last)| (first..=last).contains(&epoch))
    }

    /// Waits for every stream with pool work (the pool's, those with collectives or frees
    /// queued, those blocks were recorded on or held by pending frees, those graphs were
    /// replayed on) and destroys the live graphs' ACL graphs, whatever fails: after a loss,
    /// the failures are expected. The first failure, if any.
    fn drain_after_loss(&self, state: &mut PoolState) -> Result<()> {
        let (streams, graphs) = self.streams_with_pool_work(state);
        let waited = self.wait_streams(&streams);
        state.fences.clear();
        state.collective_streams.clear();
        // Every graph, whatever one of them says: none may replay on the old windows.
        let destroyed = graphs
            .iter()
            .map(|g| g.destroy_because("shrank"))
            .fold(Ok(()), Result::and);
        waited.and(destroyed)
    }
}

impl PoolState {
    /// Restarts the op hash from where the blocks lie now, in a world of `ranks` (see
    /// [`Heap::rebase_op_hash`](crate::heap::Heap::rebase_op_hash)): each heap's, the counts
    /// and the record of collectives.
    fn rebase_op_hash(&mut self, ranks: u32) {
        for (_, segment) in self.segments.iter_mut() {
            segment.heap.rebase_op_hash();
        }
        self.hashed_counts_from = [self.alloc_count, self.free_count, self.oom_count];
        self.collectives = fold_words([SHRINK_WORD, u64::from(ranks)]);
    }

    /// Where every block lies: each segment's key and size and its heap's regions (offset,
    /// size, live), folded. Equal on ranks whose tensors are at the same offsets, whatever
    /// calls led there.
    fn placement_hash(&self) -> u64 {
        let words = self.segments.iter().flat_map(|(key, segment)| {
            let regions = segment
                .heap
                .regions()
                .into_iter()
                .flat_map(|r| [r.offset, r.size, u64::from(r.live)]);
            [key as u64, segment.size].into_iter().chain(regions)
        });
        fold_words(words)
    }
}
