//! The emulator's locks and their declared order.
//!
//! Every mutex of the emulator is a [`RankedMutex`] with a [`Rank`] from the table below. A
//! thread may take a lock only while every lock it holds has a lower rank, so no two threads
//! can each hold a lock the other waits for. Debug builds check this on every acquisition
//! with a per-thread stack of the ranks held, and panic naming both locks, and so do the
//! emulator's unit tests in any profile (the README's `cargo test --release` included), so
//! every nesting they reach is checked; other release builds check nothing (a guard is a
//! `MutexGuard` and a zero-sized marker).
//!
//! A condition-variable wait ([`Condvar`]) gives the lock up and takes it back: the thread is
//! blocked meanwhile, so the rank stays on its stack, but the lock waited on must be the
//! highest it holds (taking it back under a higher one would break the order).
//!
//! The order, outermost first. A lock may be held while taking any lock below it; the last
//! column names the nestings the code has (those the unit tests reach are all checked).
//!
//! | rank | lock | held while taking |
//! |-----:|------|-------------------|
//! | 0 | the unit tests' global lock (tests only) | anything |
//! | 1 | `acl::init` the process's `aclInit` phase | nothing |
//! | 2 | `acl::graph` a model's state | events, latest records, captured events, active captures, streams, and what a recipe takes (messages, collective order, memory state, ...) while a replay is made |
//! | 3 | `hccl::comm` a communicator's heap | memory state |
//! | 4 | `hccl::comm` a communicator's windows | nothing |
//! | 5 | `hccl::comm` a communicator's messages | a stream's queue (a send or receive queued in its order) |
//! | 6 | `hccl::comm` a communicator's collective order | streams (registry), a stream's queue, stream clocks |
//! | 7 | `hccl::comm` a communicator's memory ranges | memory state |
//! | 8 | `hccl::window` a symmetric heap's slots | nothing |
//! | 9 | `hccl::window` the windows table | nothing |
//! | 10 | `hccl::names` sub-communicator names | nothing |
//! | 11 | `acl::graph::replay` a model's lane threads | nothing |
//! | 12 | `acl::graph::replay` a replay's signals | nothing |
//! | 13 | `acl::stream` a stream's worker | nothing |
//! | 14 | `acl::stream` a stream's queue | stream clocks (a synchronize records what it saw) |
//! | 15 | `acl::order` stream clocks | nothing |
//! | 16 | `acl::event` an event's latest record | nothing |
//! | 17 | `acl::event` a record's outcome | nothing |
//! | 18 | `acl::graph` captured events | nothing |
//! | 19 | `acl::graph` active captures | nothing |
//! | 20 | `acl::graph` models (registry) | nothing |
//! | 21 | `acl::stream` streams (registry) | nothing |
//! | 22 | `acl::event` events (registry) | nothing |
//! | 23 | `hccl::comm` communicators (registry) | nothing |
//! | 24 | `acl::memory` memory state | nothing |
//! | 25 | `acl::host` host allocations | nothing |
//! | 26 | `ipc::rendezvous` a rank's hub connection | nothing |
//! | 27 | `abi::inject` injected failures | nothing |
//! | 28 | `abi::inject` call counts | nothing |
//! | 29 | `ipc::hub` joins seen by tests (tests only) | nothing |
//! | 30 | `ipc::host_threads` a rank's host threads | a host thread's wait, where a stream waits |
//! | 31 | `ipc::host_threads` a host thread's wait | where a stream waits |
//! | 32 | `ipc::host_threads` where a stream's task waits | nothing |
//!
//! The registries (models, streams, events, communicators) are near the bottom: they are held
//! only to find or file a handle. Per-object locks of one kind share a rank, so a thread never
//! holds two of them (say, two streams' queues) at once.

use std::fmt;
use std::sync::{Mutex, MutexGuard, WaitTimeoutResult};
use std::time::Duration;

/// A lock's place in the order, and its name for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rank {
    order: u8,
    name: &'static str,
}

const fn rank(order: u8, name: &'static str) -> Rank {
    Rank { order, name }
}

/// The ranks, as in the module's table.
pub(crate) mod ranks {
    use super::{Rank, rank};

    /// `acl::init`: the process's `aclInit` / `aclFinalize` phase.
    pub(crate) const INIT: Rank = rank(1, "acl::init process phase");
    /// `acl::graph`: a model's state.
    pub(crate) const MODEL: Rank = rank(2, "acl::graph model state");
    /// `hccl::comm`: a communicator's symmetric heap.
    pub(crate) const COMM_HEAP: Rank = rank(3, "hccl::comm heap");
    /// `hccl::comm`: a communicator's windows.
    pub(crate) const COMM_WINDOWS: Rank = rank(4, "hccl::comm windows");
    /// `hccl::comm`: a communicator's point-to-point message counts.
    pub(crate) const COMM_MESSAGES: Rank = rank(5, "hccl::comm messages");
    /// `hccl::comm`: where a communicator's last eager collective was queued.
    pub(crate) const COMM_ORDER: Rank = rank(6, "hccl::comm collective order");
    /// `hccl::comm`: a communicator's memory ranges.
    pub(crate) const COMM_RANGES: Rank = rank(7, "hccl::comm ranges");
    /// `hccl::window`: a symmetric heap's slots.
    pub(crate) const HEAP_SLOTS: Rank = rank(8, "hccl::window heap slots");
    /// `hccl::window`: every window's communicator.
    pub(crate) const WINDOWS: Rank = rank(9, "hccl::window windows table");
    /// `hccl::names`: the live sub-communicator names.
    pub(crate) const NAMES: Rank = rank(10, "hccl::names sub-communicator names");
    /// `acl::graph::replay`: a model's lane threads.
    pub(crate) const LANES: Rank = rank(11, "acl::graph::replay lane threads");
    /// `acl::graph::replay`: a replay's signals.
    pub(crate) const SIGNALS: Rank = rank(12, "acl::graph::replay signals");
    /// `acl::stream`: a stream's worker thread.
    pub(crate) const STREAM_WORKER: Rank = rank(13, "acl::stream worker");
    /// `acl::stream`: a stream's task queue.
    pub(crate) const STREAM_QUEUE: Rank = rank(14, "acl::stream queue");
    /// `acl::order`: the streams' and events' clocks.
    pub(crate) const STREAM_ORDER: Rank = rank(15, "acl::order stream clocks");
    /// `acl::event`: an event's latest record.
    pub(crate) const EVENT_LAST: Rank = rank(16, "acl::event latest record");
    /// `acl::event`: a record's outcome.
    pub(crate) const RECORD: Rank = rank(17, "acl::event record outcome");
    /// `acl::graph`: the events recorded in captures in progress.
    pub(crate) const CAPTURED_EVENTS: Rank = rank(18, "acl::graph captured events");
    /// `acl::graph`: the captures in progress per device.
    pub(crate) const ACTIVE_CAPTURES: Rank = rank(19, "acl::graph active captures");
    /// `acl::graph`: the models registry.
    pub(crate) const MODELS: Rank = rank(20, "acl::graph models");
    /// `acl::stream`: the streams registry.
    pub(crate) const STREAMS: Rank = rank(21, "acl::stream streams");
    /// `acl::event`: the events registry.
    pub(crate) const EVENTS: Rank = rank(22, "acl::event events");
    /// `hccl::comm`: the communicators registry.
    pub(crate) const COMMS: Rank = rank(23, "hccl::comm communicators");
    /// `acl::memory`: reservations, physical memory, mappings and allocations.
    pub(crate) const MEMORY: Rank = rank(24, "acl::memory state");
    /// `acl::host`: the `aclrtMallocHost` allocations.
    pub(crate) const HOST: Rank = rank(25, "acl::host allocations");
    /// `ipc::rendezvous`: a rank's connection to its hub.
    pub(crate) const RENDEZVOUS: Rank = rank(26, "ipc::rendezvous connection");
    /// `abi::inject`: the injected failures.
    pub(crate) const INJECTED: Rank = rank(27, "abi::inject injected failures");
    /// `abi::inject`: the call counts.
    pub(crate) const CALL_COUNTS: Rank = rank(28, "abi::inject call counts");
    /// `ipc::host_threads`: the host threads of a rank (a communicator and those split from it).
    pub(crate) const HOST_THREADS: Rank = rank(30, "ipc::host_threads a rank's host threads");
    /// `ipc::host_threads`: where one host thread waits.
    pub(crate) const HOST_WAIT: Rank = rank(31, "ipc::host_threads a host thread's wait");
    /// `ipc::host_threads`: where a stream's task waits.
    pub(crate) const STREAM_AT: Rank = rank(32, "ipc::host_threads where a stream waits");

    /// The unit tests' lock on process-global state, held for a whole test.
    #[cfg(test)]
    pub(crate) const TESTS: Rank = rank(0, "the unit tests' global lock");
    /// `ipc::hub`: the joins each hub received, as unit tests see them.
    #[cfg(test)]
    pub(crate) const HELLOS: Rank = rank(29, "ipc::hub joins seen by tests");
}

/// A mutex with a rank. Poisoning is ignored: every critical section leaves its data
/// consistent before doing anything that can panic, so a panic elsewhere never leaves
/// half-updated state.
pub(crate) struct RankedMutex<T> {
    rank: Rank,
    inner: Mutex<T>,
}

/// A held [`RankedMutex`].
pub(crate) struct RankedGuard<'a, T> {
    // Declared first, so that the lock is released before the rank leaves the stack.
    guard: MutexGuard<'a, T>,
    _held: Held,
}

impl<T> RankedMutex<T> {
    /// A mutex of `rank` holding `value` (usable in a `static`).
    pub(crate) const fn new(rank: Rank, value: T) -> Self {
        Self {
            rank,
            inner: Mutex::new(value),
        }
    }

    /// Takes the lock (in debug builds, after checking the order).
    pub(crate) fn lock(&self) -> RankedGuard<'_, T> {
        let held = Held::take(self.rank);
        RankedGuard {
            guard: self.inner.lock().unwrap_or_else(|e| e.into_inner()),
            _held: held,
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for RankedMutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RankedMutex")
            .field("rank", &self.rank.name)
            .field("inner", &self.inner)
            .finish()
    }
}

/// Takes `m` (the emulator's one way to lock).
pub(crate) fn lock<T>(m: &RankedMutex<T>) -> RankedGuard<'_, T> {
    m.lock()
}

impl<T> std::ops::Deref for RankedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for RankedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// A condition variable for [`RankedGuard`]s; poisoning is ignored as by [`RankedMutex`].
#[derive(Default)]
pub(crate) struct Condvar(std::sync::Condvar);

impl Condvar {
    /// A new condition variable.
    pub(crate) const fn new() -> Self {
        Self(std::sync::Condvar::new())
    }

    /// Wakes every waiter.
    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }

    /// Wakes one waiter.
    pub(crate) fn notify_one(&self) {
        self.0.notify_one();
    }

    /// Waits for a notification, giving the lock up meanwhile.
    pub(crate) fn wait<'a, T>(&self, guard: RankedGuard<'a, T>) -> RankedGuard<'a, T> {
        let RankedGuard { guard, _held } = guard;
        _held.check_wait();
        let guard = self.0.wait(guard).unwrap_or_else(|e| e.into_inner());
        RankedGuard { guard, _held }
    }

    /// Waits for a notification or `timeout`, giving the lock up meanwhile.
    pub(crate) fn wait_timeout<'a, T>(
        &self,
        guard: RankedGuard<'a, T>,
        timeout: Duration,
    ) -> (RankedGuard<'a, T>, WaitTimeoutResult) {
        let RankedGuard { guard, _held } = guard;
        _held.check_wait();
        let (guard, result) = self
            .0
            .wait_timeout(guard, timeout)
            .unwrap_or_else(|e| e.into_inner());
        (RankedGuard { guard, _held }, result)
    }

    /// Waits while `condition` holds, at most `timeout`, giving the lock up meanwhile.
    pub(crate) fn wait_timeout_while<'a, T>(
        &self,
        guard: RankedGuard<'a, T>,
        timeout: Duration,
        condition: impl FnMut(&mut T) -> bool,
    ) -> (RankedGuard<'a, T>, WaitTimeoutResult) {
        let RankedGuard { guard, _held } = guard;
        _held.check_wait();
        let (guard, result) = self
            .0
            .wait_timeout_while(guard, timeout, condition)
            .unwrap_or_else(|e| e.into_inner());
        (RankedGuard { guard, _held }, result)
    }
}

use checked::Held;

/// The bookkeeping of debug builds and of the unit tests: the ranks this thread holds, in the order taken (so
/// ascending), and the checks.
#[cfg(any(debug_assertions, test))]
mod checked {
    use std::cell::RefCell;

    use super::Rank;

    thread_local! {
        static HELD: RefCell<Vec<Rank>> = const { RefCell::new(Vec::new()) };
    }

    /// One rank on this thread's stack, popped when dropped.
    pub(crate) struct Held(Rank);

    impl Held {
        /// Pushes `rank`, panicking if a lock of the same or a higher rank is held.
        /// A lock taken while the thread's locals are torn down (a C caller's thread-local
        /// destructor calling the emulator) has no stack left: it is taken unchecked, since a
        /// panic there would abort the process.
        pub(crate) fn take(rank: Rank) -> Held {
            let violated = HELD
                .try_with(|held| {
                    let mut held = held.borrow_mut();
                    let top = held.last().copied().filter(|top| top.order >= rank.order);
                    if top.is_none() {
                        held.push(rank);
                    }
                    top
                })
                .ok()
                .flatten();
            if let Some(top) = violated {
                panic!(
                    "lock order violated: taking `{}` (rank {}) while holding `{}` (rank {})",
                    rank.name, rank.order, top.name, top.order
                );
            }
            Held(rank)
        }

        /// Panics unless this lock is the highest this thread holds: a waiter takes it back
        /// on waking, which under a higher one would break the order.
        pub(crate) fn check_wait(&self) {
            // No stack (the thread's locals are torn down): nothing to check.
            let top = HELD
                .try_with(|held| held.borrow().last().copied())
                .ok()
                .flatten();
            if let Some(top) = top.filter(|top| *top != self.0) {
                panic!(
                    "lock order violated: waiting on `{}` (rank {}) while holding `{}` (rank {})",
                    self.0.name, self.0.order, top.name, top.order
                );
            }
        }
    }

    impl Drop for Held {
        fn drop(&mut self) {
            // Guards may be dropped in any order: remove this one's entry, the latest of it.
            // `try_with`: a guard dropped while the thread's locals are torn down has no
            // stack left to update.
            let _ = HELD.try_with(|held| {
                let mut held = held.borrow_mut();
                if let Some(at) = held.iter().rposition(|r| *r == self.0) {
                    held.remove(at);
                }
            });
        }
    }
}

/// The release builds' marker: nothing to record, nothing to check.
#[cfg(not(any(debug_assertions, test)))]
mod checked {
    use super::Rank;

    /// Zero-sized: a release build keeps no stack.
    pub(crate) struct Held;

    impl Held {
        #[inline(always)]
        pub(crate) fn take(_rank: Rank) -> Held {
            Held
        }

        #[inline(always)]
        pub(crate) fn check_wait(&self) {}
    }
}

#[cfg(test)]
mod tests {
    use super::{Condvar, RankedMutex, ranks};
    use std::time::Duration;

    #[test]
    fn locks_taken_in_rank_order_pass_and_release_in_any_order() {
        let (outer, inner) = (
            RankedMutex::new(ranks::MODEL, 0),
            RankedMutex::new(ranks::STREAMS, 0),
        );
        let a = outer.lock();
        let b = inner.lock();
        drop(a);
        drop(b);
        // Released entirely: the inner one alone, then both again, pass.
        drop(inner.lock());
        let _a = outer.lock();
        let _b = inner.lock();
    }

    #[test]
    #[should_panic(
        expected = "taking `acl::graph model state` (rank 2) while holding `acl::stream streams` (rank 21)"
    )]
    fn a_lock_taken_under_a_higher_rank_panics() {
        let (outer, inner) = (
            RankedMutex::new(ranks::MODEL, 0),
            RankedMutex::new(ranks::STREAMS, 0),
        );
        let _b = inner.lock();
        let _a = outer.lock();
    }

    #[test]
    #[should_panic(
        expected = "taking `acl::stream queue` (rank 14) while holding `acl::stream queue`"
    )]
    fn two_locks_of_one_rank_panic() {
        let (a, b) = (
            RankedMutex::new(ranks::STREAM_QUEUE, 0),
            RankedMutex::new(ranks::STREAM_QUEUE, 0),
        );
        let _a = a.lock();
        let _b = b.lock();
    }

    #[test]
    fn a_lock_taken_while_the_threads_locals_are_torn_down_works() {
        // A C caller's thread-local destructor may call the emulator after the stack of held
        // ranks is gone; the lock must still work (unchecked), not panic (which would abort).
        struct Late;
        impl Drop for Late {
            fn drop(&mut self) {
                static M: RankedMutex<u32> = RankedMutex::new(ranks::MODEL, 0);
                *M.lock() += 1;
                let (_g, _) = Condvar::new().wait_timeout(M.lock(), Duration::from_millis(1));
            }
        }
        thread_local! { static LATE: Late = const { Late }; }
        std::thread::spawn(|| {
            LATE.with(|_| {});
            // Registered after LATE, so the stack of held ranks is torn down first.
            drop(RankedMutex::new(ranks::STREAMS, ()).lock());
        })
        .join()
        .expect("the late lock did not panic");
    }

    #[test]
    fn a_condvar_wait_keeps_the_rank_and_the_order_after_it() {
        let (m, cv) = (RankedMutex::new(ranks::MODEL, false), Condvar::new());
        let g = m.lock();
        let (g, timed_out) = cv.wait_timeout(g, Duration::from_millis(1));
        assert!(timed_out.timed_out());
        // Still held after the wait: a higher rank is taken under it; once released, a lower one.
        let inner = RankedMutex::new(ranks::STREAMS, ());
        drop(inner.lock());
        drop(g);
        let outer = RankedMutex::new(ranks::INIT, ());
        drop(outer.lock());
    }

    #[test]
    #[should_panic(expected = "waiting on `acl::graph model state` (rank 2) while holding")]
    fn a_wait_under_a_higher_lock_panics() {
        let (m, cv) = (RankedMutex::new(ranks::MODEL, ()), Condvar::new());
        let g = m.lock();
        let inner = RankedMutex::new(ranks::STREAMS, ());
        let _i = inner.lock();
        let _ = cv.wait_timeout(g, Duration::from_millis(1));
    }
}
