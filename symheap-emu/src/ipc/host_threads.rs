//! A rank's host threads and where each one waits, for the deadlock check
//! ([`Board::deadlock`]).
//!
//! A rank can still act while any one of its host threads is not blocked: a thread that is on
//! its way to a window registration will get there. So a rank counts as blocked in a
//! communicator only when *every* one of its host threads waits in that communicator, in a
//! window exchange or in `aclrtSynchronizeStream` of a stream whose task waits at one of its
//! collective steps, and the check is told all the steps they wait at.
//!
//! A rank's host threads are the threads that made one of its communicators (a global one and
//! the sub-communicators split from it share one [`HostThreads`]) or called an HCCL function
//! naming one, from that call until they end. The emulator cannot see a thread before it makes
//! such a call. Each thread's wait is its own ([`Waiting`]); where a stream's task waits is the
//! stream's ([`StreamAt`]). A rank's process gathers them into the rank's record on the board
//! ([`HostThreads::publish`]); threads of other processes read it there.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use crate::base::lock::{RankedMutex, lock, ranks};
use crate::ipc::board::{Board, HOST_STEP};

/// Where a stream's task waits now: at step `word` ([`crate::ipc::board::step_word`]) of the
/// communicator `comm` (its handle's value), or nowhere (`word` 0). Written by the thread that
/// runs the stream's task, read by the deadlock check for the host threads synchronizing the
/// stream.
pub(crate) struct StreamAt(RankedMutex<(u64, u64)>);

impl StreamAt {
    /// Nowhere.
    pub(crate) fn new() -> StreamAt {
        StreamAt(RankedMutex::new(ranks::STREAM_AT, (0, 0)))
    }

    /// The stream's task waits at step `word` of communicator `comm` (0: nowhere).
    pub(crate) fn set(&self, comm: u64, word: u64) {
        *lock(&self.0) = (comm, word);
    }

    fn get(&self) -> (u64, u64) {
        *lock(&self.0)
    }
}

/// Where one thread waits.
#[derive(Clone, Default)]
enum Wait {
    /// Not in a wait the check knows: the thread can act.
    #[default]
    Free,
    /// In step `word` of a window exchange of communicator `comm`.
    Exchange { comm: u64, word: u64 },
    /// In `aclrtSynchronizeStream` (without a timeout) of the stream whose task waits where
    /// this says.
    Sync(Arc<StreamAt>),
}

/// One thread, as the check sees it.
struct Slot {
    /// Cleared when the thread ends.
    alive: AtomicBool,
    wait: RankedMutex<Wait>,
}

/// The calling thread's slot, and the [`HostThreads`] it is counted in (to enlist it once).
/// Dropped when the thread ends, which ends its slot.
struct Me {
    slot: Arc<Slot>,
    enlisted: RefCell<Vec<Weak<HostThreads>>>,
}

impl Drop for Me {
    fn drop(&mut self) {
        self.slot.alive.store(false, Ordering::Release);
    }
}

thread_local! {
    static ME: Me = Me {
        slot: Arc::new(Slot {
            alive: AtomicBool::new(true),
            wait: RankedMutex::new(ranks::HOST_WAIT, Wait::Free),
        }),
        enlisted: RefCell::new(Vec::new()),
    };
}

/// The calling thread's slot; `None` once the thread's locals are gone (it is ending).
fn my_slot() -> Option<Arc<Slot>> {
    ME.try_with(|me| me.slot.clone()).ok()
}

/// The host threads of one rank: of its global communicator and every communicator split from
/// it, in this process.
pub(crate) struct HostThreads {
    members: RankedMutex<Vec<Arc<Slot>>>,
}

impl HostThreads {
    /// None yet.
    pub(crate) fn new() -> Arc<HostThreads> {
        Arc::new(HostThreads {
            members: RankedMutex::new(ranks::HOST_THREADS, Vec::new()),
        })
    }

    /// Counts the calling thread among these host threads, from now until it ends (once: a
    /// thread already counted costs a look at its own list).
    pub(crate) fn enlist(self: &Arc<Self>) {
        let _ = ME.try_with(|me| {
            let mut enlisted = me.enlisted.borrow_mut();
            // A `Weak` keeps its allocation, so no other `HostThreads` can sit at the address
            // of one it still points to.
            if enlisted
                .iter()
                .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(self)))
            {
                return;
            }
            enlisted.retain(|w| w.strong_count() > 0);
            enlisted.push(Arc::downgrade(self));
            lock(&self.members).push(me.slot.clone());
        });
    }

    /// Writes into this rank's record on `board` (as rank `rank` of communicator `comm`) where
    /// its host threads wait, when every one of them waits in `comm`; clears the record when
    /// one does not (or when there are none, or they wait at more steps than a record holds).
    ///
    /// Every change of the record goes through here, under the lock of the members: a thread
    /// that leaves a wait and then publishes cannot be overwritten by a publisher that saw it
    /// still waiting.
    pub(crate) fn publish(&self, board: &Board, rank: usize, comm: u64) {
        let mut members = lock(&self.members);
        members.retain(|m| m.alive.load(Ordering::Acquire));
        let waits = where_all_wait(&members, comm).unwrap_or_default();
        board.publish_waits(rank, &waits);
    }
}

/// The steps every one of `members` waits at in communicator `comm` (step words, with
/// [`HOST_STEP`] for window exchanges), or `None` when one of them can act (or there are none).
fn where_all_wait(members: &[Arc<Slot>], comm: u64) -> Option<Vec<u64>> {
    let mut waits = Vec::new();
    for member in members {
        let wait = lock(&member.wait).clone();
        let word = match wait {
            Wait::Exchange { comm: c, word } if c == comm => word | HOST_STEP,
            Wait::Sync(at) => match at.get() {
                (c, word) if c == comm && word != 0 => word,
                _ => return None,
            },
            Wait::Exchange { .. } | Wait::Free => return None,
        };
        if !waits.contains(&word) {
            waits.push(word);
        }
    }
    (!waits.is_empty()).then_some(waits)
}

/// Marks the calling thread as waiting until dropped (then it can act again).
pub(crate) struct Waiting(Option<Arc<Slot>>);

impl Waiting {
    fn mark(wait: Wait) -> Waiting {
        let slot = my_slot();
        if let Some(slot) = &slot {
            *lock(&slot.wait) = wait;
        }
        Waiting(slot)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(slot) = &self.0 {
            *lock(&slot.wait) = Wait::Free;
        }
    }
}

/// The calling thread waits in step `word` of a window exchange of communicator `comm`.
pub(crate) fn exchanging(comm: u64, word: u64) -> Waiting {
    Waiting::mark(Wait::Exchange { comm, word })
}

/// The calling thread waits in `aclrtSynchronizeStream` for the stream whose task waits where
/// `at` says. (A wait with a timeout is not one: the thread comes back by itself.)
pub(crate) fn synchronizing(at: &Arc<StreamAt>) -> Waiting {
    Waiting::mark(Wait::Sync(at.clone()))
}

/// Who waits in a rendezvous step, for the deadlock check: the waiting rank's host threads (none
/// in tests of the rendezvous alone), the communicator the step belongs to (its handle's value)
/// and, for a collective step, where its stream's task waits.
#[derive(Clone, Copy)]
pub(crate) struct Watch<'a> {
    pub(crate) threads: Option<&'a HostThreads>,
    pub(crate) comm: u64,
    pub(crate) stream: Option<&'a StreamAt>,
}

impl Watch<'_> {
    /// Nobody the check knows of.
    #[cfg(test)]
    pub(crate) const NONE: Watch<'static> = Watch {
        threads: None,
        comm: 0,
        stream: None,
    };

    /// [`HostThreads::publish`] for this watch's rank and communicator, if it knows the rank's
    /// host threads.
    pub(crate) fn publish(&self, board: &Board, rank: usize) {
        if let Some(threads) = self.threads {
            threads.publish(board, rank, self.comm);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{HostThreads, StreamAt, exchanging, synchronizing, where_all_wait};
    use crate::base::lock::lock;
    use crate::ipc::board::{HOST_STEP, step_word};

    fn members(threads: &HostThreads) -> Vec<Arc<super::Slot>> {
        lock(&threads.members).clone()
    }

    /// Two host threads: the rank is blocked only while both wait in the communicator, and a
    /// thread that ended no longer counts.
    #[test]
    fn a_rank_is_blocked_only_while_every_host_thread_waits_in_the_communicator() {
        let threads = HostThreads::new();
        let (comm, other) = (7, 8);
        let at = Arc::new(StreamAt::new());
        let exchange = step_word(3, 0);
        let collective = step_word(5, 1);
        std::thread::scope(|s| {
            let (go, went) = std::sync::mpsc::channel::<()>();
            let (enlisted, ready) = std::sync::mpsc::channel::<()>();
            let free_threads = &threads;
            let free = s.spawn(move || {
                free_threads.enlist();
                enlisted.send(()).unwrap();
                went.recv().unwrap();
            });
            ready.recv().unwrap();
            threads.enlist();
            threads.enlist();
            assert_eq!(members(&threads).len(), 2, "each thread counts once");
            let waiting = exchanging(comm, exchange);
            assert_eq!(
                where_all_wait(&members(&threads), comm),
                None,
                "one is free"
            );
            go.send(()).unwrap();
            free.join().unwrap();
            // The free thread ended: this one alone is the rank's host thread.
            let alive: Vec<_> = members(&threads)
                .into_iter()
                .filter(|m| m.alive.load(std::sync::atomic::Ordering::Acquire))
                .collect();
            assert_eq!(
                where_all_wait(&alive, comm),
                Some(vec![exchange | HOST_STEP])
            );
            assert_eq!(where_all_wait(&alive, other), None, "waits elsewhere");
            drop(waiting);
            assert_eq!(where_all_wait(&alive, comm), None, "left the exchange");
            // Synchronizing a stream counts as waiting where the stream's task waits.
            let syncing = synchronizing(&at);
            assert_eq!(
                where_all_wait(&alive, comm),
                None,
                "the stream waits nowhere"
            );
            at.set(comm, collective);
            assert_eq!(where_all_wait(&alive, comm), Some(vec![collective]));
            at.set(other, collective);
            assert_eq!(
                where_all_wait(&alive, comm),
                None,
                "another communicator's step"
            );
            drop(syncing);
        });
    }
}
