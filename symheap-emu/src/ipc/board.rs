//! The board: a memfd that every rank of a communicator (and its rendezvous hub) maps, where
//! the ranks meet for the steps of collectives without a message through the host. Each rank
//! posts its value for a step into one of its two buffers and wakes the others (a futex on
//! the board, which works across processes); a rank has all values for a step once every
//! rank's buffer holds that step's key.
//!
//! A rank reuses a buffer only after every peer has read it, so a fast rank never overwrites a
//! value a slow one still needs. The host writes on the board which ranks are gone (left or
//! lost), so waiters fail at once; collective host calls, and anything carrying memfds, still
//! go through the host.
//!
//! The board also holds a mailbox pair for every ordered pair of ranks (sender, receiver), where
//! point-to-point transfers meet without any other rank ([`crate::hccl::p2p`]): each side writes only
//! its own [`Mailbox`], and wakes the other with [`Board::notify`].

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

use crate::ipc::os::{self, Space};

/// The largest value a rank posts (a collective's arrival is about 60 bytes).
pub(crate) const MAX_VALUE: usize = 232;
/// Buffers per rank.
const BUFFERS: usize = 2;
/// How often a waiter yields before it sleeps.
const SPINS: usize = 20;

/// The board's header: the word waiters sleep on (the futex, changed by every wake-up), and
/// how many ranks wait to reuse a buffer (so readers wake them only then).
#[repr(C)]
struct Header {
    generation: AtomicU32,
    reuse_waiters: AtomicU32,
    /// 2 once a rank found a deadlock and froze what it saw in every rank's progress record
    /// (1 while it writes): every rank then tells the same.
    deadlock: AtomicU32,
    _pad: u32,
}

/// Marks a buffer whose rank gave up on the step it held ([`Board::withdraw`]): the value is
/// gone, but the rank came.
const WITHDRAWN: u64 = 1 << 63;

/// One posted value.
#[repr(C)]
struct Buffer {
    /// The step's key plus one (0: empty), with [`WITHDRAWN`] set once its rank gave up.
    key: AtomicU64,
    /// How many peers have read the value.
    read_by: AtomicU32,
    len: AtomicU32,
    bytes: [u8; MAX_VALUE],
}

/// One side of a point-to-point pair's mailbox: written only by that side's rank, read by the
/// other (see [`crate::hccl::p2p`] for the protocol). All zero until first used.
#[repr(C, align(64))]
pub(crate) struct Mailbox {
    /// `k + 1` once this side posted its header for message `k` of the pair.
    pub(crate) header: AtomicU64,
    /// The header: elements.
    pub(crate) count: AtomicU64,
    /// The header: the `HcclDataType`.
    pub(crate) dtype: AtomicU64,
    /// The sender's header: bytes per staged chunk (its staging section is two chunks).
    pub(crate) chunk: AtomicU64,
    /// The sender's header: the window slot plus one of a buffer in a symmetric window (0:
    /// not in a window), the window's id ([`crate::hccl::window::Window::id`]: a slot may be reused)
    /// and the buffer's offset there.
    pub(crate) window_slot: AtomicU64,
    pub(crate) window_id: AtomicU64,
    pub(crate) window_offset: AtomicU64,
    /// Messages of the pair this side is finished with (done or given up).
    pub(crate) done: AtomicU64,
    /// `(k + 1) << 32 | n`: chunks of message `k` posted (sender) or acknowledged (receiver).
    pub(crate) progress: AtomicU64,
    /// The number of messages plus one this side took on the pair before its rank destroyed
    /// its communicator (0 while it has not): it takes part in no later message.
    pub(crate) limit: AtomicU64,
}

/// Which side of a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Sender,
    Receiver,
}

/// One process's mapping of a board of `n` ranks.
pub(crate) struct Board {
    space: Space,
    n: usize,
}

/// The most steps one rank's host threads can be told to wait at ([`Board::publish_waits`]):
/// a rank whose threads wait at more does not count as blocked.
pub(crate) const MAX_WAITS: usize = 8;

/// Marks a window exchange's step in a rank's waits (without it, a collective step).
pub(crate) const HOST_STEP: u64 = 1 << 63;

/// How often a reader retries a rank's waits while its process rewrites them, before it takes
/// the rank as not blocked (a process killed while writing leaves the record half-written).
const WAITS_RETRIES: usize = 1000;

/// Where one rank is in its communicator's steps, for the deadlock check
/// ([`Board::deadlock`]). Keys are [`step_word`]s; 0 means none.
#[repr(C)]
pub(crate) struct Progress {
    /// A sequence lock over `blocked` and `waits`: odd while the rank's process rewrites them
    /// (only it writes them, one thread at a time).
    version: AtomicU64,
    /// How many of `waits` hold steps. Not 0 only while every host thread of the rank waits
    /// in this communicator: in a window exchange, or synchronizing a stream whose task waits
    /// at a collective step ([`crate::ipc::host_threads`]).
    blocked: AtomicU64,
    /// The steps the rank's host threads wait at, each once: step words, with [`HOST_STEP`]
    /// for a window exchange.
    waits: [AtomicU64; MAX_WAITS],
    /// The last window exchange this rank completed (the latest, when threads complete
    /// several).
    pub(crate) host_done: AtomicU64,
    /// The last collective step this rank completed (the latest, when streams complete
    /// several).
    pub(crate) coll_done: AtomicU64,
    /// How many collective sequence numbers this rank has taken (queued collectives).
    pub(crate) coll_entered: AtomicU64,
    /// `waits` as the rank that found a deadlock saw them (0 past the end).
    frozen: [AtomicU64; MAX_WAITS],
}

/// Where every host thread of one rank waits: `(rank, waits)`, the waits in the order
/// [`sorted`] gives.
type RankWaits = (usize, Vec<u64>);

/// `waits` in the order messages name them: window exchanges first, then collective steps,
/// each by step.
fn sorted(mut waits: Vec<u64>) -> Vec<u64> {
    waits.sort_by_key(|&w| (w & HOST_STEP == 0, w & !HOST_STEP));
    waits
}

/// A step as one word that orders like the steps: `(seq << 24 | step) + 1`.
pub(crate) fn step_word(seq: u64, step: u32) -> u64 {
    ((seq << 24) | u64::from(step)) + 1
}

// The layout: header, then one `gone` word per rank, then one `Progress` per rank, then
// `BUFFERS` buffers per rank, then (64-byte aligned) two mailboxes per ordered pair of ranks.
const GONE_AT: usize = size_of::<Header>();

fn progress_at(n: usize) -> usize {
    GONE_AT + n * 8
}

fn buffers_at(n: usize) -> usize {
    progress_at(n) + n * size_of::<Progress>()
}

/// Where the mailboxes of a board of `n` ranks start.
fn mailboxes_at(n: usize) -> usize {
    (buffers_at(n) + n * BUFFERS * size_of::<Buffer>()).next_multiple_of(64)
}

impl Board {
    /// The size of a board for `n` ranks (pages untouched by any rank cost nothing).
    pub(crate) fn size(n: usize) -> usize {
        mailboxes_at(n) + n * n * 2 * size_of::<Mailbox>()
    }

    /// Maps the board of `n` ranks in memfd `fd`.
    pub(crate) fn map(fd: BorrowedFd<'_>, n: usize) -> std::io::Result<Board> {
        let space = os::map_shared(fd, Board::size(n))?;
        Ok(Board { space, n })
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a `Header` (zeroed by the memfd, a valid value), is
        // aligned to a page and lives as long as `self`; its fields are atomics, so sharing
        // them with other threads and processes is sound.
        unsafe { &*(self.space.addr() as *const Header) }
    }

    /// Rank `rank`'s gone word: why it will not come again, as the host records it
    /// ([`Gone::word`](crate::ipc::attendance::Gone::word)).
    pub(crate) fn gone(&self, rank: usize) -> &AtomicU64 {
        assert!(rank < self.n);
        // SAFETY: in bounds (checked) and 8-byte aligned; an atomic shared as above.
        unsafe { &*((self.space.addr() + GONE_AT + rank * 8) as *const AtomicU64) }
    }

    /// Rank `rank`'s progress record.
    pub(crate) fn progress(&self, rank: usize) -> &Progress {
        assert!(rank < self.n);
        let at = progress_at(self.n) + rank * size_of::<Progress>();
        // SAFETY: in bounds (checked) and 8-byte aligned (header and gone words are multiples
        // of 8); its fields are atomics, shared as the header's.
        unsafe { &*((self.space.addr() + at) as *const Progress) }
    }

    /// A deadlock this rank can see: no rank is gone, every host thread of every rank is
    /// blocked (in a window exchange, or synchronizing a stream that waits at a collective
    /// step, as each rank published: [`Board::publish_waits`]), and no step any of them waits
    /// at can complete: none has been completed by a rank, and each misses a rank that is not
    /// there and has not even queued it. Then nobody can act: the ranks would wait for the
    /// exec timeout. Returns who waits where.
    ///
    /// Read waits first, then completions: a rank seen waiting at a step it has since left
    /// has completed it by then, which makes this answer no.
    pub(crate) fn deadlock(&self) -> Option<String> {
        if let Some(said) = self.declared_deadlock() {
            return Some(said);
        }
        let waits = self.find_deadlock()?;
        let header = self.header();
        if header
            .deadlock
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            for (r, at) in &waits {
                let frozen = &self.progress(*r).frozen;
                for (i, slot) in frozen.iter().enumerate() {
                    slot.store(at.get(i).copied().unwrap_or(0), Ordering::Relaxed);
                }
            }
            header.deadlock.store(2, Ordering::Release);
            self.notify();
        }
        self.declared_deadlock()
            .or_else(|| Some(describe_deadlock(&waits)))
    }

    /// The deadlock a rank found on this board, as it saw it, once one has.
    pub(crate) fn declared_deadlock(&self) -> Option<String> {
        self.frozen_waits().map(|waits| describe_deadlock(&waits))
    }

    /// The ranks at the step fewest ranks wait at in the deadlock declared on this board, if one
    /// step is that ([`crate::ipc::blame::odd_ones_out`]).
    pub(crate) fn deadlock_odd_ones_out(&self) -> Vec<u32> {
        let waits = self.frozen_waits().unwrap_or_default();
        let at: Vec<(usize, [u64; MAX_WAITS])> = waits
            .iter()
            .map(|(r, w)| {
                let mut all = [0; MAX_WAITS];
                all[..w.len()].copy_from_slice(w);
                (*r, all)
            })
            .collect();
        crate::ipc::blame::odd_ones_out(&at)
    }

    /// Where every rank waited in the deadlock declared on this board, once one is.
    fn frozen_waits(&self) -> Option<Vec<RankWaits>> {
        if self.header().deadlock.load(Ordering::Acquire) != 2 {
            return None;
        }
        let waits = (0..self.n)
            .map(|r| {
                let frozen = &self.progress(r).frozen;
                let at = frozen
                    .iter()
                    .map(|w| w.load(Ordering::Relaxed))
                    .take_while(|&w| w != 0)
                    .collect();
                (r, at)
            })
            .filter(|(_, at): &RankWaits| !at.is_empty())
            .collect();
        Some(waits)
    }

    /// Records where rank `rank`'s host threads wait: `waits` (step words, with [`HOST_STEP`]
    /// for window exchanges), each once, when every one of them waits in this communicator;
    /// none (empty) when one of them can act. More than [`MAX_WAITS`] count as none. Only
    /// the rank's process calls this, one thread at a time
    /// ([`crate::ipc::host_threads::HostThreads::publish`]).
    pub(crate) fn publish_waits(&self, rank: usize, waits: &[u64]) {
        let p = self.progress(rank);
        let waits = if waits.len() > MAX_WAITS { &[] } else { waits };
        let version = p.version.load(Ordering::Relaxed);
        p.version.store(version.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for (i, slot) in p.waits.iter().enumerate() {
            slot.store(waits.get(i).copied().unwrap_or(0), Ordering::Relaxed);
        }
        p.blocked.store(waits.len() as u64, Ordering::Relaxed);
        p.version.store(version.wrapping_add(2), Ordering::Release);
    }

    /// Where rank `rank`'s host threads wait, as its process last published, in [`sorted`]
    /// order: empty unless every one of them waits in this communicator.
    fn waits(&self, rank: usize) -> Vec<u64> {
        let p = self.progress(rank);
        for _ in 0..WAITS_RETRIES {
            let before = p.version.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let count = (p.blocked.load(Ordering::Relaxed) as usize).min(MAX_WAITS);
            let waits: Vec<u64> = p.waits[..count]
                .iter()
                .map(|w| w.load(Ordering::Relaxed))
                .collect();
            fence(Ordering::Acquire);
            if p.version.load(Ordering::Relaxed) == before {
                return sorted(waits);
            }
        }
        Vec::new()
    }

    /// Where every rank waits when they make a deadlock.
    fn find_deadlock(&self) -> Option<Vec<RankWaits>> {
        // A rank that is gone (its process died, or it destroyed its communicator) makes the
        // host fail every step that waits for it, with the cause: that answer, not a
        // deadlock among the ranks left, is what the waiters get.
        if (0..self.n).any(|r| self.gone(r).load(Ordering::Acquire) != 0) {
            return None;
        }
        let waits: Vec<RankWaits> = (0..self.n).map(|r| (r, self.waits(r))).collect();
        if self.n < 2 || waits.iter().any(|(_, at)| at.is_empty()) {
            return None;
        }
        let done = |r: usize| {
            let p = self.progress(r);
            let done = (
                p.host_done.load(Ordering::Acquire),
                p.coll_done.load(Ordering::Acquire),
            );
            (done, p.coll_entered.load(Ordering::Acquire))
        };
        let state: Vec<_> = (0..self.n).map(done).collect();
        // Whether the step a thread waits at (`wait`, as published) cannot complete: O(n)
        // each, so it is asked once per distinct step (a few), not once per thread: every
        // waiting rank runs this check every slice, and O(n^2) each was O(n^3) per slice over
        // a job, more than 2 cores could give at 384 ranks.
        let step_blocked = |wait: u64| {
            let host = wait & HOST_STEP != 0;
            let key = wait & !HOST_STEP;
            let completed = state
                .iter()
                .any(|&((h, c), _)| if host { h >= key } else { c >= key });
            let seq = (key - 1) >> 24;
            let someone_missing = waits
                .iter()
                .zip(&state)
                .any(|((_, at), &(_, entered))| !at.contains(&wait) && (host || entered <= seq));
            !completed && someone_missing
        };
        let mut blocked_at: Vec<(u64, bool)> = Vec::new();
        let mut blocked = |wait: u64| {
            if let Some(&(_, known)) = blocked_at.iter().find(|&&(w, _)| w == wait) {
                return known;
            }
            let answer = step_blocked(wait);
            blocked_at.push((wait, answer));
            answer
        };
        let stuck = waits.iter().all(|(_, at)| at.iter().all(|&w| blocked(w)));
        stuck.then_some(waits)
    }

    fn buffer(&self, rank: usize, i: usize) -> &Buffer {
        assert!(rank < self.n && i < BUFFERS);
        let at = buffers_at(self.n) + (rank * BUFFERS + i) * size_of::<Buffer>();
        // SAFETY: in bounds and 8-byte aligned (the header, gone words and buffers are
        // multiples of 8); `bytes` is only accessed through raw copies, see `post` / `read`.
        unsafe { &*((self.space.addr() + at) as *const Buffer) }
    }

    /// The `side` mailbox of the pair sending from rank `from` to rank `to`.
    pub(crate) fn mailbox(&self, from: usize, to: usize, side: Side) -> &Mailbox {
        assert!(from < self.n && to < self.n);
        let i = (from * self.n + to) * 2 + usize::from(side == Side::Receiver);
        let at = mailboxes_at(self.n) + i * size_of::<Mailbox>();
        // SAFETY: in bounds (checked) and 64-byte aligned (the mapping is page aligned,
        // `mailboxes_at` a multiple of 64); its fields are atomics, shared as the header's.
        unsafe { &*((self.space.addr() + at) as *const Mailbox) }
    }

    /// Records that rank `rank` destroyed its communicator after taking `sent[d]` messages to
    /// each rank `d` and `received[s]` from each rank `s`: peers waiting for a later message
    /// of a pair fail at once.
    pub(crate) fn leave_pairs(&self, rank: usize, sent: &[u64], received: &[u64]) {
        for (peer, &k) in sent.iter().enumerate().take(self.n) {
            let m = self.mailbox(rank, peer, Side::Sender);
            m.limit.store(k.saturating_add(1), Ordering::Release);
        }
        for (peer, &k) in received.iter().enumerate().take(self.n) {
            let m = self.mailbox(peer, rank, Side::Receiver);
            m.limit.store(k.saturating_add(1), Ordering::Release);
        }
        self.notify();
    }

    /// Wakes every waiter after a change.
    pub(crate) fn notify(&self) {
        let generation = &self.header().generation;
        generation.fetch_add(1, Ordering::Release);
        os::futex_wake(generation);
    }

    /// Posts `value` as rank `rank`'s value for step `key` into buffer `i`, once every peer
    /// has read what it held (at most until `deadline`, or until `abandoned` says to give up
    /// after a [`notify`](Self::notify): `false` then).
    pub(crate) fn post(
        &self,
        rank: usize,
        i: usize,
        key: u64,
        value: &[u8],
        deadline: Instant,
        abandoned: impl Fn() -> bool,
    ) -> bool {
        assert!(value.len() <= MAX_VALUE);
        let b = self.buffer(rank, i);
        let peers = self.n as u32 - 1;
        let reusable = || {
            let held = b.key.load(Ordering::Acquire);
            held == 0 || held & WITHDRAWN != 0 || b.read_by.load(Ordering::Acquire) >= peers
        };
        if !self.wait_until(|| reusable() || abandoned(), deadline) || abandoned() {
            return false;
        }
        b.key.store(0, Ordering::Relaxed);
        b.read_by.store(0, Ordering::Relaxed);
        b.len.store(value.len() as u32, Ordering::Relaxed);
        // SAFETY: `bytes` has room for `value` (asserted); no peer reads this buffer now: its
        // key is 0 until the store below, and readers check the key before and after copying.
        unsafe {
            std::ptr::copy_nonoverlapping(value.as_ptr(), b.bytes.as_ptr() as *mut u8, value.len())
        };
        b.key.store(key + 1, Ordering::Release);
        // Only the last rank to post a step wakes the others (they cannot finish before). Of
        // two ranks posting at once, at least one sees the other's post after the fence.
        fence(Ordering::SeqCst);
        if (0..self.n).all(|r| self.has(r, key)) {
            self.notify();
        }
        true
    }

    /// The buffer of rank `rank` that holds step `key`, if it posted it.
    fn holding(&self, rank: usize, key: u64) -> Option<&Buffer> {
        (0..BUFFERS)
            .map(|i| self.buffer(rank, i))
            .find(|b| b.key.load(Ordering::Acquire) == key + 1)
    }

    /// Whether rank `rank` has posted step `key`.
    pub(crate) fn has(&self, rank: usize, key: u64) -> bool {
        self.holding(rank, key).is_some()
    }

    /// Whether rank `rank` came to step `key`: posted it, even if it gave up on it since. A
    /// timeout names only the ranks that never came, the same on every rank.
    pub(crate) fn came(&self, rank: usize, key: u64) -> bool {
        (0..BUFFERS).any(|i| {
            let held = self.buffer(rank, i).key.load(Ordering::Acquire);
            held & !WITHDRAWN == key + 1
        })
    }

    /// Rank `rank`'s value for step `key`, if posted, marked read by rank `me` (call once per
    /// step and rank).
    pub(crate) fn take(&self, rank: usize, key: u64, me: usize) -> Option<Vec<u8>> {
        let b = self.holding(rank, key)?;
        let len = (b.len.load(Ordering::Relaxed) as usize).min(MAX_VALUE);
        let mut out = vec![0u8; len];
        // SAFETY: the key was published with Release after the bytes were written, and the
        // buffer is not rewritten before every peer, this rank included, marked it read.
        unsafe { std::ptr::copy_nonoverlapping(b.bytes.as_ptr(), out.as_mut_ptr(), len) };
        if rank != me {
            b.read_by.fetch_add(1, Ordering::SeqCst);
            if self.header().reuse_waiters.load(Ordering::SeqCst) > 0 {
                self.notify();
            }
        }
        Some(out)
    }

    /// Marks rank `rank`'s buffer holding step `key` withdrawn (a rank that gave up on the
    /// step), so no late peer takes the value, while [`Board::came`] still sees it came.
    pub(crate) fn withdraw(&self, rank: usize, key: u64) {
        for i in 0..BUFFERS {
            let b = self.buffer(rank, i);
            let _ = b.key.compare_exchange(
                key + 1,
                (key + 1) | WITHDRAWN,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// Waits until `ready` holds (checked after every change to the board), at most until
    /// `deadline`: whether it held.
    pub(crate) fn wait_until(&self, mut ready: impl FnMut() -> bool, deadline: Instant) -> bool {
        let generation = &self.header().generation;
        // Peers usually post within microseconds: yield the core to them a few times before
        // sleeping (with more ranks than cores, a sleep and wake-up cost far more).
        for _ in 0..SPINS {
            if ready() {
                return true;
            }
            std::thread::yield_now();
        }
        loop {
            let seen = generation.load(Ordering::Acquire);
            if ready() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            // Sliced, so a caller that also watches something off the board (the host's
            // connection) gets to look now and then.
            os::futex_wait(
                generation,
                seen,
                (deadline - now).min(Duration::from_millis(100)),
            );
            if ready() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
    }
}

/// Who waits where, from where every rank's host threads wait.
fn describe_deadlock(waits: &[RankWaits]) -> String {
    let at = |wait: u64| {
        let key = wait & !HOST_STEP;
        let (seq, step) = ((key - 1) >> 24, ((key - 1) & 0xff_ffff) as u32);
        if wait & HOST_STEP != 0 {
            format!("window exchange #{seq} (step {step})")
        } else {
            format!("collective #{seq} (step {step})")
        }
    };
    let each: Vec<String> = waits
        .iter()
        .map(|(r, waits)| {
            let places: Vec<String> = waits.iter().map(|&w| at(w)).collect();
            format!("rank {r} in {}", places.join(" and in "))
        })
        .collect();
    format!(
        "deadlock: every rank waits, at different steps: {}",
        each.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::sync::atomic::Ordering;

    use super::{Board, HOST_STEP, MAX_WAITS, step_word};
    use crate::ipc::os;

    fn board(n: usize) -> Board {
        let fd = os::memfd(Board::size(n)).unwrap();
        Board::map(fd.as_fd(), n).unwrap()
    }

    fn exchange(seq: u64) -> u64 {
        step_word(seq, 0) | HOST_STEP
    }

    fn collective(seq: u64) -> u64 {
        step_word(seq, 0)
    }

    /// Ranks 0 and 1 synchronize a stream waiting at collective #6; rank 2 waits in window
    /// exchange #3 and has queued collectives 0..6 only.
    fn the_issues_deadlock() -> Board {
        let b = board(3);
        for r in [0, 1] {
            b.publish_waits(r, &[collective(6)]);
            b.progress(r).coll_entered.store(7, Ordering::Release);
            b.progress(r)
                .host_done
                .store(step_word(2, 1), Ordering::Release);
        }
        b.publish_waits(2, &[exchange(3)]);
        b.progress(2).coll_entered.store(6, Ordering::Release);
        b
    }

    #[test]
    fn a_deadlock_is_seen_named_and_told_alike_afterwards() {
        let b = the_issues_deadlock();
        assert_eq!(b.declared_deadlock(), None);
        let said = b.deadlock().expect("a deadlock");
        assert!(
            said.contains("rank 0 in collective #6 (step 0)")
                && said.contains("rank 2 in window exchange #3 (step 0)"),
            "{said}"
        );
        // Once found, every rank tells what the finder saw, whatever the ranks do next.
        b.publish_waits(2, &[]);
        assert_eq!(b.declared_deadlock().as_deref(), Some(said.as_str()));
        assert_eq!(b.deadlock().as_deref(), Some(said.as_str()));
        assert_eq!(b.deadlock_odd_ones_out(), vec![2]);
    }

    /// Rank 2's process died while ranks 0 and 1 wait at different window exchanges (rank 1
    /// went on after the host failed its first one): the host fails rank 0's exchange with
    /// the cause, so no deadlock is declared over it (seen in a loop of the killed-rank test).
    #[test]
    fn ranks_waiting_for_a_gone_rank_are_no_deadlock() {
        use crate::ipc::attendance::Gone;
        let b = board(3);
        b.publish_waits(0, &[exchange(0)]);
        b.publish_waits(1, &[exchange(1)]);
        b.publish_waits(2, &[exchange(0)]);
        assert!(b.find_deadlock().is_some(), "all three live: a deadlock");
        b.gone(2)
            .store(Gone::word(Some(Gone::Died)), Ordering::Release);
        assert_eq!(b.deadlock(), None);
    }

    #[test]
    fn what_can_still_move_is_no_deadlock() {
        // Rank 2 has queued collective #6: its stream will come to it.
        let b = the_issues_deadlock();
        b.progress(2).coll_entered.store(7, Ordering::Release);
        assert_eq!(b.deadlock(), None);
        // Rank 0 completed the exchange rank 2 waits in: rank 2 is about to wake.
        let b = the_issues_deadlock();
        b.progress(0)
            .host_done
            .store(step_word(3, 0), Ordering::Release);
        assert_eq!(b.deadlock(), None);
        // A host thread of rank 1 is free: it may still come to the exchange.
        let b = the_issues_deadlock();
        b.publish_waits(1, &[]);
        assert_eq!(b.deadlock(), None);
        // Every rank in the same exchange: it completes.
        let b = board(2);
        for r in [0, 1] {
            b.publish_waits(r, &[exchange(3)]);
        }
        assert_eq!(b.deadlock(), None);
        // With a rank gone, its waiters fail on that, the cause, and not as a deadlock.
        let b = the_issues_deadlock();
        b.gone(1).store(1, Ordering::Release);
        assert_eq!(b.deadlock(), None);
    }

    /// Ranks with several host threads: each rank names every step one of its threads waits
    /// at, and a deadlock needs every one of those steps stuck.
    #[test]
    fn every_wait_of_a_multi_threaded_rank_counts() {
        // Rank 2 queued #6 too, and its second thread synchronizes it: #6 misses nobody, so
        // it completes.
        let b = the_issues_deadlock();
        b.publish_waits(2, &[exchange(3), collective(6)]);
        b.progress(2).coll_entered.store(7, Ordering::Release);
        assert_eq!(b.deadlock(), None);
        // Rank 2's second thread instead synchronizes collective #5, which rank 0 and 1
        // completed: it is about to wake.
        let b = the_issues_deadlock();
        b.publish_waits(2, &[exchange(3), collective(5)]);
        for r in [0, 1] {
            b.progress(r)
                .coll_done
                .store(step_word(5, 0), Ordering::Release);
        }
        assert_eq!(b.deadlock(), None);
        // Rank 0's second thread waits in exchange #3 as rank 2 does (rank 1 never comes):
        // every thread is stuck, and the message names both of rank 0's steps.
        let b = the_issues_deadlock();
        b.publish_waits(0, &[collective(6), exchange(3)]);
        let said = b.deadlock().expect("a deadlock");
        assert!(
            said.contains(
                "rank 0 in window exchange #3 (step 0) and in collective #6 (step 0), \
                 rank 1 in collective #6 (step 0), rank 2 in window exchange #3 (step 0)"
            ),
            "{said}"
        );
        // Three groups, one rank each: nobody stands out.
        assert!(b.deadlock_odd_ones_out().is_empty());
    }

    /// A rank whose threads wait at more steps than its record holds does not count as
    /// blocked; what a record says is read whole.
    #[test]
    fn a_record_holds_at_most_max_waits_and_is_read_whole() {
        let b = board(2);
        let many: Vec<u64> = (0..=MAX_WAITS as u64).map(exchange).collect();
        b.publish_waits(0, &many);
        assert!(b.waits(0).is_empty());
        b.publish_waits(0, &many[..MAX_WAITS]);
        assert_eq!(b.waits(0), many[..MAX_WAITS]);
        // A record left half-written (its process was killed while writing) reads as none.
        b.progress(0).version.fetch_add(1, Ordering::AcqRel);
        assert!(b.waits(0).is_empty());
    }
}
