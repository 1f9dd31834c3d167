//! One rank's end of the rendezvous of its communicator's ranks, which may be threads of any
//! processes on the machine: every rank deposits a value (with any memfds) under a key with the
//! hub ([`crate::ipc::hub`]), and once all have, each gets every rank's value. A rank that waits
//! longer than its timeout withdraws and fails, so a missing peer is an error, never a hang; a
//! rank waiting for a peer that destroyed its communicator, or whose process died, fails at once
//! (the hub decides, so every waiting rank gets the same answer).
//!
//! Keys carry sequence numbers assigned in host program order, so the n-th collective (or
//! collective host call) of one rank meets the n-th of every other rank.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::base::lock::{Condvar, RankedMutex, lock, ranks};
use crate::base::patience::Patience;
use crate::ipc::attendance::{Absent, Gone, Key, never_coming};
use crate::ipc::blame;
use crate::ipc::board::{self, Board};
use crate::ipc::host_threads::{self, Watch};
use crate::ipc::hub::{self, to_hub, to_rank};
use crate::ipc::hub_watch::HubWatch;
use crate::ipc::os;
use crate::ipc::roster::Roster;
use crate::ipc::wire::{
    Conn, ConnectError, Message, Reader, Wire, Writer, out_of_descriptors, poll_readable,
};

/// Why a rendezvous failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RvError {
    /// These ranks did not arrive in time.
    Timeout { missing: Vec<u32> },
    /// These ranks destroyed their communicator without arriving: they never will.
    Gone { ranks: Vec<u32> },
    /// These ranks' processes exited or were killed (their connections closed).
    Lost { ranks: Vec<u32> },
    /// The process that called `HcclGetRootInfo`, which runs the rendezvous's hub, is gone.
    HubLost,
    /// Ranks deposited values of different kinds under one key (different operations).
    Mismatch,
    /// Every rank waits, at steps none of them can complete ([`Board::deadlock`]): who waits
    /// where.
    Deadlock(String),
    /// This rank already has a value under the key.
    Duplicate,
    /// This rank destroyed its communicator while the host thread waited (from another
    /// thread).
    Closed,
}

/// How long a step waits before it first checks for a deadlock, and then between checks.
const DEADLOCK_CHECK: Duration = Duration::from_millis(50);
/// How often a wait at the hub with no deadlock check wakes to see whether it should warn
/// that it has lasted ([`Patience`]): rarely, since every wake-up costs CPU, and a wait's
/// wake-ups grow with how long the slowest rank takes to arrive.
const PATIENCE_CHECK: Duration = Duration::from_secs(1);

/// What a rank is told when [`RvError::HubLost`] ends a step.
pub(crate) const HUB_LOST: &str = "the rendezvous is gone: the process that called \
     HcclGetRootInfo (which runs its hub) exited or was killed";

/// What the hub answered for a key.
enum Answer {
    Complete(Message),
    Failed(RvError),
    Missing(Vec<u32>),
}

/// The hub's answers that arrived for keys other than the reader's own.
#[derive(Default)]
struct State {
    answers: BTreeMap<Vec<u8>, Answer>,
    /// Set when the connection to the hub closed.
    host_lost: bool,
    /// Whether a waiting thread is reading the connection (the others wait for it to file
    /// their answers, or to hand the reading over).
    reading: bool,
}

/// This rank's connection to its communicator's hub. Threads that wait for an answer read
/// the connection themselves, one at a time, so no thread stands between the hub and them.
pub(crate) struct Rendezvous {
    n: usize,
    rank: usize,
    conn: Conn,
    /// Where collective steps meet (see [`crate::ipc::board`]).
    board: Arc<Board>,
    /// The ranks in the process that runs the rendezvous hub.
    host_ranks: Vec<u32>,
    /// Every rank's process id, in rank order, and the host's: whom a failure blames
    /// ([`crate::ipc::blame`]).
    pids: Vec<u32>,
    /// Every rank's place word (what it brought to its join), in rank order.
    places: Vec<u64>,
    host_pid: u32,
    /// Readable once the host's process ends, when it is another process: its sockets may
    /// outlive it in a `fork()`ed child.
    host_pidfd: Option<OwnedFd>,
    /// Wakes the waits on the board when the host's process ends.
    _hub_watch: Option<HubWatch>,
    /// Collective steps posted so far: picks the board buffer of the next one.
    posts: AtomicU64,
    /// Set by [`Rendezvous::leave`]: a host thread still waiting in an exchange gives up.
    closed: AtomicBool,
    /// Set by [`Rendezvous::vanish`]: this rank posts no further step, as if its process
    /// had been killed. `posting` counts the posts under way, so none outlives the vanishing.
    vanished: AtomicBool,
    posting: AtomicU64,
    state: RankedMutex<State>,
    cv: Condvar,
}

/// Why a join failed.
#[derive(Debug)]
pub(crate) enum JoinError {
    /// Nothing listens at the hub's name (`ECONNREFUSED`), or the listener took no connection
    /// within the timeout (`EAGAIN`), or the socket calls failed.
    Unreachable(std::io::Error),
    /// A process of a user this one does not admit listens at the hub's name: not the hub.
    /// Nothing was sent to it.
    Stranger { pid: u32, uid: u32 },
    /// The hub's process (`pid`) took the connection but never answered the join within the
    /// timeout (it is stopped or hung, or has no descriptor to take the join with): who else
    /// joined is unknown.
    NoAnswer { pid: u32 },
    /// This process, or the hub's, ran out of file descriptors for the join: why.
    OutOfDescriptors(String),
    /// The hub refused: the reason.
    Refused(String),
    /// The hub's group formed already: every rank has joined.
    Formed,
    /// The hub closed the connection without an answer (it was ending).
    Closed,
    /// Not every rank joined within the timeout; these had not.
    Timeout { missing: Vec<u32> },
    /// The caller's cancel flag was raised while waiting (another rank of the same
    /// `HcclCommInitAll` failed).
    Cancelled,
}

/// How often a join waiting for the other ranks looks at its cancel flag, if it has one. A
/// join without one sleeps in `poll` until the hub answers: a wait that woke on a timer would
/// cost CPU in proportion to how long the slowest rank takes to arrive.
const CANCEL_POLL: Duration = Duration::from_millis(20);
/// How long a join waits before it connects again when the hub closed its connection without
/// an answer (a hub short of descriptors drops connections that have not joined).
const REJOIN: Duration = Duration::from_millis(2);

/// `now + timeout`, or a day from now if that cannot be represented.
pub(crate) fn deadline(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(Duration::from_secs(86_400)))
        .unwrap_or(now)
}

impl Rendezvous {
    /// Joins the hub on abstract socket `name` as `rank` of `n`, handing it this rank's
    /// `staging` memfd and its `place` (a word every rank learns: [`Rendezvous::places`]),
    /// and waits up to `timeout` for every rank, or until `cancel` (if any) is raised: then every
    /// rank's staging memfd, in rank order.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn join(
        name: &str,
        session: &[u8],
        n: u32,
        rank: u32,
        place: u64,
        staging: BorrowedFd<'_>,
        timeout: Duration,
        cancel: Option<&AtomicBool>,
    ) -> Result<(Rendezvous, Vec<OwnedFd>), JoinError> {
        let admitted = hub::admitted_users().map_err(|e| JoinError::Refused(e.to_string()))?;
        let until = deadline(timeout);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let conn = Conn::connect(name, &admitted, left).map_err(|e| match e {
                ConnectError::Io(e) => JoinError::Unreachable(e),
                ConnectError::Stranger { pid, uid } => JoinError::Stranger { pid, uid },
            })?;
            let mut hello = Writer::default();
            hello
                .u8(to_hub::HELLO)
                .blob(session)
                .u32(n)
                .u32(rank)
                .u64(place);
            let sent = conn.send(&hello.bytes, &[staging]);
            let welcome = match sent {
                Ok(()) => await_group(&conn, n, rank, until, cancel)?,
                // The hub accepted and closed at once (it was ending, or made room).
                Err(e)
                    if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) =>
                {
                    None
                }
                Err(e) => {
                    return Err(JoinError::Refused(format!(
                        "cannot reach the rendezvous: {e}"
                    )));
                }
            };
            match welcome {
                Some(welcome) => return Rendezvous::welcomed(conn, welcome, n, rank),
                None if Instant::now() + REJOIN < until => std::thread::sleep(REJOIN),
                None => return Err(JoinError::Closed),
            }
        }
    }

    /// The rendezvous of `rank` of `n` on `conn`, from the hub's `welcome`: every rank's
    /// staging memfd, in rank order.
    fn welcomed(
        conn: Conn,
        welcome: Message,
        n: u32,
        rank: u32,
    ) -> Result<(Rendezvous, Vec<OwnedFd>), JoinError> {
        let mut r = Reader::new(&welcome.bytes);
        let _welcome = r.u8();
        let host_pid = r.u32().unwrap_or(0);
        let pids = ranks(&mut r);
        let count = r.u32().unwrap_or(0);
        let places: Vec<u64> = (0..count).map_while(|_| r.u64()).collect();
        if pids.len() != n as usize || places.len() != n as usize {
            return Err(JoinError::Refused("a malformed answer to a join".into()));
        }
        // The ranks that live in the process running the rendezvous hub: lost with it.
        let host_ranks = (0..n).filter(|&k| pids[k as usize] == host_pid).collect();
        let mut fds = welcome.fds;
        let board = fds.pop().map(|fd| Board::map(fd.as_fd(), n as usize));
        let Some(Ok(board)) = board else {
            return Err(JoinError::Refused("cannot map the rendezvous board".into()));
        };
        let board = Arc::new(board);
        let host_pidfd = match host_pid == std::process::id() {
            true => None,
            false => os::pidfd(host_pid).map_err(|e| match out_of_descriptors(&e) {
                true => JoinError::OutOfDescriptors(short_of_descriptors(
                    "to watch the rendezvous hub's process",
                )),
                false => {
                    JoinError::Refused(format!("cannot watch the rendezvous hub's process: {e}"))
                }
            })?,
        };
        let hub_watch =
            (host_pidfd.as_ref()).and_then(|fd| HubWatch::start(fd.as_fd(), Arc::clone(&board)));
        let rv = Rendezvous {
            n: n as usize,
            rank: rank as usize,
            conn,
            board,
            host_ranks,
            pids,
            places,
            host_pid,
            host_pidfd,
            _hub_watch: hub_watch,
            posts: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            vanished: AtomicBool::new(false),
            posting: AtomicU64::new(0),
            state: RankedMutex::new(ranks::RENDEZVOUS, State::default()),
            cv: Condvar::new(),
        };
        Ok((rv, fds))
    }

    /// Makes this rank vanish as a killed process would (a test's stand-in, for ranks as
    /// threads): it posts no further step (a post under way finishes first, as a process's
    /// last store does before it dies; one still waiting for a peer to read this rank's
    /// previous post gives up, as a killed process's would), and its connection to the hub
    /// closes without a LEAVE, so the hub records it lost and its peers' steps fail at once.
    pub(crate) fn vanish(&self) {
        self.vanished.store(true, Ordering::SeqCst);
        // A post waiting for a peer to read this rank's previous one gives up.
        self.board.notify();
        while self.posting.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        self.closed.store(true, Ordering::Release);
        self.conn.shutdown();
    }

    /// Records that this rank destroyed its communicator after taking collective sequence
    /// numbers below `next_collective`: peers waiting for it on any later key fail at once.
    pub(crate) fn leave(&self, next_collective: u64) {
        self.closed.store(true, Ordering::Release);
        let mut w = Writer::default();
        w.u8(to_hub::LEAVE).u64(next_collective);
        let _ = self.conn.send(&w.bytes, &[]);
    }

    /// [`exchange_watched`](Self::exchange_watched) with nobody the deadlock check knows of.
    #[cfg(test)]
    pub(crate) fn exchange<T: Wire>(
        &self,
        key: Key,
        value: &T,
        timeout: Duration,
    ) -> Result<Vec<T>, RvError> {
        self.exchange_watched(key, value, timeout, &Watch::NONE)
    }

    /// Deposits `value` under `key` and waits up to `timeout` for every rank; then returns all
    /// ranks' values, in rank order.
    ///
    /// `watch` names the rank's host threads, the communicator and, for a collective step,
    /// where its stream's task waits: the wait is published for the deadlock check
    /// ([`crate::ipc::host_threads`]). A window exchange's caller is a host thread itself, and
    /// a deadlock that every rank's waits make ([`Board::deadlock`]) fails it at once instead
    /// of at the timeout.
    pub(crate) fn exchange_watched<T: Wire>(
        &self,
        key: Key,
        value: &T,
        timeout: Duration,
        watch: &Watch<'_>,
    ) -> Result<Vec<T>, RvError> {
        // A deadlock declared on this communicator's board ends it: every later step fails
        // at once, before depositing anything (a deposit could complete the exchange the
        // rank that found the deadlock has just given up on).
        if let Some(who) = self.board.declared_deadlock() {
            let failure = RvError::Deadlock(who);
            self.blame(&failure);
            return Err(failure);
        }
        let mut payload = Writer::default();
        let mut fds = Vec::new();
        payload.u8(T::TAG);
        value.put(&mut payload, &mut fds);
        let deadline = deadline(timeout);
        if let (Key::Collective { seq, step }, true) = (key, fds.is_empty())
            && payload.bytes.len() <= board::MAX_VALUE
            && step < 1 << 24
        {
            let payloads = self
                .meet_on_board(
                    key,
                    (seq << 24) | u64::from(step),
                    &payload.bytes,
                    deadline,
                    watch,
                )
                .inspect_err(|e| self.blame(e))?;
            return payloads
                .iter()
                .map(|p| decode(p, &mut std::iter::empty()))
                .collect();
        }
        let step = key;
        let word = match key {
            Key::Host { seq, step } | Key::Collective { seq, step } => board::step_word(seq, step),
        };
        let progress = self.board.progress(self.rank);
        let host_key = matches!(key, Key::Host { .. });
        let key = key.encode();
        let mut message = Writer::default();
        message.u8(to_hub::DEPOSIT).blob(&key).blob(&payload.bytes);
        // This host thread waits in the exchange until this is dropped.
        let waiting = host_key.then(|| host_threads::exchanging(watch.comm, word));
        if self.conn.send(&message.bytes, &fds).is_err() {
            drop(waiting);
            return Err(self.host_lost());
        }
        let mut patience = Patience::new();
        let mut deadlock = None;
        let mut waited = || {
            patience.check(|| {
                format!(
                    "in {step} on rank {} for the other ranks (the rendezvous hub names those \
                     missing when the exec timeout ends the wait)",
                    self.rank
                )
            });
            if host_key && self.closed.load(Ordering::Acquire) {
                return true;
            }
            if host_key {
                watch.publish(&self.board, self.rank);
                deadlock = self.board.deadlock();
            }
            deadlock.is_some()
        };
        let every = match host_key {
            true => DEADLOCK_CHECK,
            false => PATIENCE_CHECK,
        };
        let answer = match self.wait(&key, deadline, every, &mut waited) {
            Some(answer) => answer,
            None => self.withdraw(&key),
        };
        if host_key {
            // A deadlock another rank declared while this one waited is the cause of any
            // failure since (a peer that failed on it may have left before this rank looked).
            deadlock = deadlock.or_else(|| self.board.declared_deadlock());
        }
        let closed = host_key && self.closed.load(Ordering::Acquire);
        let result = match (answer, deadlock) {
            (Answer::Complete(m), _) => self.values(m),
            (_, None) if closed => Err(RvError::Closed),
            // The cause, not what came of it: a peer that failed on the deadlock this rank
            // found may have left before the hub answered the withdrawal.
            (_, Some(who)) => Err(RvError::Deadlock(who)),
            (Answer::Failed(e), None) => Err(e),
            (Answer::Missing(missing), None) => Err(RvError::Timeout { missing }),
        };
        if host_key {
            if result.is_ok() {
                progress.host_done.fetch_max(word, Ordering::AcqRel);
            }
            // This thread can act again: no longer blocked, as the check must learn now.
            drop(waiting);
            watch.publish(&self.board, self.rank);
        }
        result.inspect_err(|e| self.blame(e))
    }

    /// Tells the launcher (if any) whom `failure` blames ([`crate::ipc::blame`]).
    pub(crate) fn blame(&self, failure: &RvError) {
        let (ranks, why) = match failure {
            RvError::Timeout { missing } => (missing.clone(), "never came"),
            RvError::Gone { ranks } => (ranks.clone(), "destroyed its communicator"),
            RvError::Lost { ranks } => (ranks.clone(), "exited"),
            RvError::Deadlock(_) => (
                self.board.deadlock_odd_ones_out(),
                "odd one out in a deadlock",
            ),
            RvError::HubLost => return blame::blame(&[self.host_pid], "host lost"),
            RvError::Mismatch | RvError::Duplicate | RvError::Closed => return,
        };
        let mut pids: Vec<u32> = ranks
            .iter()
            .filter_map(|&r| self.pids.get(r as usize).copied())
            .collect();
        pids.dedup();
        blame::blame(&pids, why);
    }

    /// Every rank's place word, in rank order (what each brought to its join).
    pub(crate) fn places(&self) -> &[u64] {
        &self.places
    }

    /// The board the ranks share (collective steps, point-to-point mailboxes).
    pub(crate) fn board(&self) -> &Board {
        &self.board
    }

    /// Why rank `peer` will never act again, if it will not: its process died (as the host
    /// recorded), or it lived in the host's process, which is gone. A rank that destroyed its
    /// communicator is not reported here (its queued work still runs).
    pub(crate) fn lost(&self, peer: usize) -> Option<RvError> {
        let word = self.board.gone(peer).load(Ordering::Acquire);
        if Gone::from_word(word) == Some(Gone::Died) {
            return Some(RvError::Lost {
                ranks: vec![peer as u32],
            });
        }
        let in_host = self.host_ranks.contains(&(peer as u32));
        (in_host && self.host_gone()).then(|| self.host_lost())
    }

    /// Whether the rendezvous hub is gone: its connection closed, or its process ended.
    fn host_gone(&self) -> bool {
        let ended = self.host_pidfd.as_ref().is_some_and(|fd| {
            poll_readable(&[fd.as_fd()], Duration::ZERO).is_ok_and(|r| !r.is_empty())
        });
        ended || self.conn.is_closed()
    }

    /// The failure of every step once the rendezvous hub is gone: the ranks in its process
    /// are lost with it.
    fn host_lost(&self) -> RvError {
        match self.host_ranks.is_empty() {
            true => RvError::HubLost,
            false => RvError::Lost {
                ranks: self.host_ranks.clone(),
            },
        }
    }

    /// A collective step (`key`, numbered `step` on the board) met on the board: every rank's
    /// payload, in rank order.
    fn meet_on_board(
        &self,
        key: Key,
        step: u64,
        payload: &[u8],
        deadline: Instant,
        watch: &Watch<'_>,
    ) -> Result<Vec<Vec<u8>>, RvError> {
        let buffer = (self.posts.fetch_add(1, Ordering::Relaxed) % 2) as usize;
        let board = &self.board;
        self.posting.fetch_add(1, Ordering::SeqCst);
        // A vanished rank posts nothing: `post` gives up at once, or once woken.
        let vanished = || self.vanished.load(Ordering::SeqCst);
        let posted = board.post(self.rank, buffer, step, payload, deadline, vanished);
        self.posting.fetch_sub(1, Ordering::SeqCst);
        if !posted && vanished() {
            return Err(RvError::Lost {
                ranks: vec![self.rank as u32],
            });
        }
        if !posted {
            // A buffer still unread by a peer: a peer missed an earlier step.
            return Err(RvError::Timeout {
                missing: Vec::new(),
            });
        }
        let mut failure = None;
        let mut patience = Patience::new();
        let progress = board.progress(self.rank);
        let word = step + 1;
        // Where the stream's task waits: a host thread synchronizing the stream waits here
        // too. The rank's waits are published for the deadlock check once the step has
        // waited a while, and then now and then. (The check itself runs in window exchanges:
        // a deadlock needs a rank in one, since a rank that queued a collective comes to it.)
        if let Some(at) = watch.stream {
            at.set(watch.comm, word);
        }
        let mut next_check = Instant::now() + DEADLOCK_CHECK;
        let everyone = board.wait_until(
            || {
                let missing: Vec<usize> = (0..self.n).filter(|&r| !board.has(r, step)).collect();
                if missing.is_empty() {
                    return true;
                }
                patience.check(|| format!("in {key} on rank {} for ranks {missing:?}", self.rank));
                // A deadlock a rank in a window exchange found names who waits where: told
                // first, on every rank alike. Read after the ranks that are gone: the rank
                // that found it may have left since, and its leaving must not hide it.
                let gone = self.never_coming(key, &missing);
                failure = board.declared_deadlock().map(RvError::Deadlock).or(gone);
                if Instant::now() >= next_check {
                    next_check = Instant::now() + DEADLOCK_CHECK;
                    watch.publish(board, self.rank);
                }
                failure.is_some()
            },
            deadline,
        );
        if let Some(at) = watch.stream {
            at.set(0, 0);
        }
        let values: Option<Vec<Vec<u8>>> = match (everyone, &failure) {
            (true, None) => (0..self.n)
                .map(|r| board.take(r, step, self.rank))
                .collect(),
            _ => None,
        };
        if let Some(values) = values {
            // Completed: a record that still names the step is harmless (it misses nobody).
            progress.coll_done.fetch_max(word, Ordering::AcqRel);
            return Ok(values);
        }
        // Failed: the host threads synchronizing the stream are about to wake.
        watch.publish(board, self.rank);
        // The ranks that never came; if every rank came, those that gave up before us.
        let others_where = |absent: &dyn Fn(usize) -> bool| -> Vec<u32> {
            (0..self.n)
                .filter(|&r| r != self.rank && absent(r))
                .map(|r| r as u32)
                .collect()
        };
        let mut missing = others_where(&|r| !board.came(r, step));
        if missing.is_empty() {
            missing = others_where(&|r| !board.has(r, step));
        }
        board.withdraw(self.rank, step);
        Err(failure.unwrap_or(RvError::Timeout { missing }))
    }

    /// Why a step `key` cannot complete, if some of the `missing` ranks will never come (as
    /// the host recorded on the board) or the host is gone.
    fn never_coming(&self, key: Key, missing: &[usize]) -> Option<RvError> {
        let gone = missing.iter().map(|&r| {
            let word = self.board.gone(r).load(Ordering::Acquire);
            (r as u32, Gone::from_word(word))
        });
        match never_coming(key, gone) {
            Some(Absent::Died(ranks)) => Some(RvError::Lost { ranks }),
            Some(Absent::Left(ranks)) => Some(RvError::Gone { ranks }),
            None => self.host_gone().then(|| self.host_lost()),
        }
    }

    /// The hub's answer for `key`, or `None` at `deadline` (or an error when the host is
    /// gone). While no other thread does, this one reads the connection, filing the answers
    /// for other keys.
    /// `waited` runs at least every `every`; its `true` ends the wait as the deadline would.
    fn wait(
        &self,
        key: &[u8],
        deadline: Instant,
        every: Duration,
        waited: &mut dyn FnMut() -> bool,
    ) -> Option<Answer> {
        let mut st = lock(&self.state);
        loop {
            if let Some(answer) = st.answers.remove(key) {
                return Some(answer);
            }
            if st.host_lost {
                return Some(Answer::Failed(self.host_lost()));
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            if waited() {
                return None;
            }
            // Sliced, so that `waited` runs now and then.
            let slice = (deadline - now).min(every);
            if st.reading {
                st = self.cv.wait_timeout(st, slice).0;
                continue;
            }
            st.reading = true;
            drop(st);
            let read = self.read_one(slice);
            st = lock(&self.state);
            st.reading = false;
            match read {
                Some(Some((k, answer))) => {
                    st.answers.insert(k, answer);
                }
                Some(None) => st.host_lost = true,
                None => {}
            }
            // Another waiter may find its answer, or take over the reading.
            self.cv.notify_all();
        }
    }

    /// One answer from the hub, waiting at most `timeout`: `None` when none came,
    /// `Some(None)` when the connection closed.
    fn read_one(&self, timeout: Duration) -> Option<Option<(Vec<u8>, Answer)>> {
        let mut fds = vec![self.conn.fd()];
        fds.extend(self.host_pidfd.as_ref().map(AsFd::as_fd));
        let ready = poll_readable(&fds, timeout).unwrap_or_default();
        if !ready.contains(&0) {
            // Answers the host sent before its process ended are read first (it sends them
            // before its own ranks', which may end the process); after them, the end of the
            // process is the end of the host, though a fork()ed child may hold its socket.
            return ready.contains(&1).then_some(None);
        }
        let message = match self.conn.recv() {
            Ok(Some(m)) => m,
            _ => return Some(None),
        };
        let mut r = Reader::new(&message.bytes);
        let tag = r.u8();
        let key = r.blob().map(<[u8]>::to_vec).unwrap_or_default();
        let answer = match tag {
            Some(to_rank::COMPLETE) => Answer::Complete(message),
            Some(to_rank::FAILED) => Answer::Failed(failure(&mut r)),
            Some(to_rank::MISSING) => Answer::Missing(ranks(&mut r)),
            _ => Answer::Failed(RvError::Mismatch),
        };
        Some(Some((key, answer)))
    }

    /// Gives up on `key`: the hub removes this rank's deposit and names who was missing,
    /// unless the step completed or failed meanwhile.
    fn withdraw(&self, key: &[u8]) -> Answer {
        let mut w = Writer::default();
        w.u8(to_hub::WITHDRAW).blob(key);
        if self.conn.send(&w.bytes, &[]).is_err() {
            return Answer::Failed(self.host_lost());
        }
        // The hub answers at once; this bound only matters if it hangs.
        let patience = deadline(Duration::from_secs(10));
        self.wait(key, patience, PATIENCE_CHECK, &mut || false)
            .unwrap_or_else(|| Answer::Failed(self.host_lost()))
    }

    /// Every rank's value from a completed step.
    fn values<T: Wire>(&self, m: Message) -> Result<Vec<T>, RvError> {
        let mut r = Reader::new(&m.bytes);
        let mut fds = m.fds.into_iter();
        let _tag_and_key = (r.u8(), r.blob());
        let mut values = Vec::with_capacity(self.n);
        for _ in 0..self.n {
            let (Some(payload), Some(count)) = (r.blob(), r.u32()) else {
                return Err(RvError::Mismatch);
            };
            let mut mine = fds
                .by_ref()
                .take(count as usize)
                .collect::<Vec<_>>()
                .into_iter();
            values.push(decode(payload, &mut mine)?);
        }
        Ok(values)
    }
}

impl Drop for Rendezvous {
    fn drop(&mut self) {
        // The hub sees this rank leave at once (with or without a LEAVE before).
        self.conn.shutdown();
    }
}

/// A value read from `payload` (its tag first), with the memfds it carried.
fn decode<T: Wire>(payload: &[u8], fds: &mut dyn Iterator<Item = OwnedFd>) -> Result<T, RvError> {
    let mut p = Reader::new(payload);
    if p.u8() != Some(T::TAG) {
        return Err(RvError::Mismatch);
    }
    T::get(&mut p, fds).ok_or(RvError::Mismatch)
}

/// After `rank` of `n` sent its join on `conn`: the hub's welcome once every rank has joined,
/// or `None` if the hub closed the connection before any answer (it may have dropped it to
/// make room: join again). Waits until `until`, or until `cancel` (if any) is raised; a timeout names
/// the ranks the roster says are missing, read without asking the hub (which may not
/// answer).
fn await_group(
    conn: &Conn,
    n: u32,
    rank: u32,
    until: Instant,
    cancel: Option<&AtomicBool>,
) -> Result<Option<Message>, JoinError> {
    let mut roster: Option<Roster> = None;
    loop {
        if cancel.is_some_and(|c| c.load(Ordering::Acquire)) {
            // Closing the connection (when `conn` drops) frees this rank's place.
            return Err(JoinError::Cancelled);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(match &roster {
                Some(roster) => JoinError::Timeout {
                    missing: roster.missing(rank),
                },
                None => JoinError::NoAnswer {
                    pid: conn.peer().map_or(0, |(pid, _)| pid),
                },
            });
        }
        let slice = match cancel {
            Some(_) => left.min(CANCEL_POLL),
            None => left,
        };
        match poll_readable(&[conn.fd()], slice) {
            Ok(ready) if ready.is_empty() => continue,
            Ok(_) => {}
            Err(e) => {
                return Err(JoinError::Refused(format!(
                    "cannot wait for the rendezvous: {e}"
                )));
            }
        }
        let message = match conn.recv() {
            Ok(Some(m)) => m,
            Ok(None) if roster.is_none() => return Ok(None),
            Ok(None) => return Err(JoinError::Closed),
            Err(e) if out_of_descriptors(&e) => {
                return Err(JoinError::OutOfDescriptors(short_of_descriptors(
                    "to receive the memory the rendezvous shares",
                )));
            }
            Err(_) => return Err(JoinError::Closed),
        };
        let mut r = Reader::new(&message.bytes);
        match r.u8() {
            Some(to_rank::JOINED) if message.fds.len() == 1 => {
                let mapped = Roster::map(message.fds[0].as_fd(), n as usize);
                roster = Some(mapped.map_err(|e| {
                    JoinError::Refused(format!("cannot map the rendezvous's roster: {e}"))
                })?);
            }
            Some(to_rank::WELCOME) if message.fds.len() == n as usize + 1 => {
                return Ok(Some(message));
            }
            Some(to_rank::FORMED) => return Err(JoinError::Formed),
            Some(tag @ (to_rank::REJECT | to_rank::EXHAUSTED)) => {
                let why = String::from_utf8_lossy(r.blob().unwrap_or_default()).into_owned();
                return Err(match tag {
                    to_rank::EXHAUSTED => JoinError::OutOfDescriptors(why),
                    _ => JoinError::Refused(why),
                });
            }
            _ => return Err(JoinError::Refused("a malformed answer to a join".into())),
        }
    }
}

/// Why a join failed when this process had no file descriptors `for_what`.
fn short_of_descriptors(for_what: &str) -> String {
    format!(
        "this process (pid {}) ran out of file descriptors {for_what}: raise its limit \
         (ulimit -n) or have it hold fewer",
        std::process::id()
    )
}

/// A `count, ranks` list.
fn ranks(r: &mut Reader<'_>) -> Vec<u32> {
    let n = r.u32().unwrap_or(0);
    (0..n).filter_map(|_| r.u32()).collect()
}

/// The failure a FAILED answer describes.
fn failure(r: &mut Reader<'_>) -> RvError {
    match r.u8() {
        Some(to_rank::LEFT) => RvError::Gone { ranks: ranks(r) },
        Some(to_rank::DIED) => RvError::Lost { ranks: ranks(r) },
        _ => RvError::Duplicate,
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd, AsRawFd};

    use super::*;
    use crate::ipc::wire::Listener;
    use crate::{ipc::hub, ipc::os};

    const LONG: Duration = Duration::from_secs(60);

    /// A fresh hub: its socket name and session key.
    fn hub() -> (String, [u8; 16]) {
        let session = os::random_bytes().unwrap();
        let name = format!(
            "symheap-rv-test-{:x}",
            u64::from_le_bytes(session[..8].try_into().unwrap())
        );
        hub::start(&name, session).unwrap();
        (name, session)
    }

    /// The place word rank `rank` brings to a join in these tests.
    fn place_of(rank: u32) -> u64 {
        (u64::from(rank) << 32) | u64::from(rank * 3 + 1)
    }

    #[test]
    fn every_rank_learns_every_place_in_rank_order() {
        let ranks = group(3);
        let expected: Vec<u64> = (0..3).map(place_of).collect();
        for rv in &ranks {
            assert_eq!(rv.places(), expected);
        }
    }

    /// `n` ranks joined to a fresh hub, each from its own thread.
    fn group(n: u32) -> Vec<Rendezvous> {
        let (name, session) = hub();
        join_all(&name, session, n)
    }

    /// `n` ranks joined to the hub `name`, each from its own thread.
    fn join_all(name: &str, session: [u8; 16], n: u32) -> Vec<Rendezvous> {
        let mut ranks: Vec<(u32, Rendezvous)> = std::thread::scope(|s| {
            let joins: Vec<_> = (0..n)
                .map(|rank| {
                    s.spawn(move || {
                        let staging = os::memfd(4096).unwrap();
                        let joined = Rendezvous::join(
                            name,
                            &session,
                            n,
                            rank,
                            place_of(rank),
                            staging.as_fd(),
                            LONG,
                            None,
                        );
                        (rank, joined.ok().unwrap().0)
                    })
                })
                .collect();
            joins.into_iter().map(|j| j.join().unwrap()).collect()
        });
        ranks.sort_by_key(|(rank, _)| *rank);
        ranks.into_iter().map(|(_, rv)| rv).collect()
    }

    /// Every rank exchanges under `key` at once: each rank's result.
    fn all<T: Wire + Send + Sync>(
        rvs: &[Rendezvous],
        key: Key,
        value: impl Fn(usize) -> T + Sync,
    ) -> Vec<Result<Vec<T>, RvError>> {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..rvs.len())
                .map(|r| {
                    let (rvs, value) = (rvs, &value);
                    s.spawn(move || rvs[r].exchange(key, &value(r), LONG))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn every_rank_gets_every_value_in_rank_order() {
        let rvs = group(3);
        let key = Key::Collective { seq: 0, step: 0 };
        for got in all(&rvs, key, |r| r as u64 * 10) {
            assert_eq!(got, Ok(vec![0, 10, 20]));
        }
    }

    #[test]
    fn missing_ranks_time_out_and_mismatched_kinds_are_reported() {
        let rvs = group(2);
        let key = Key::Host { seq: 1, step: 0 };
        let err = rvs[0].exchange(key, &1u64, Duration::from_millis(20));
        assert_eq!(err, Err(RvError::Timeout { missing: vec![1] }));
        // The withdrawn value is gone: the next meeting under the key starts afresh.
        let results = std::thread::scope(|s| {
            let a = s.spawn(|| rvs[0].exchange(key, &1u64, LONG).map(drop));
            let b = s.spawn(|| rvs[1].exchange(key, &(), LONG).map(drop));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert_eq!(results, (Err(RvError::Mismatch), Err(RvError::Mismatch)));
    }

    #[test]
    fn a_rank_that_left_fails_its_waiters_at_once() {
        let rvs = group(2);
        let start = Instant::now();
        let host = Key::Host { seq: 0, step: 0 };
        let waited = std::thread::scope(|s| {
            let w = s.spawn(|| rvs[0].exchange(host, &(), LONG));
            // Rank 1 leaves while rank 0 waits (or before it arrives: same outcome).
            std::thread::sleep(Duration::from_millis(20));
            rvs[1].leave(1);
            w.join().unwrap()
        });
        assert_eq!(waited, Err(RvError::Gone { ranks: vec![1] }));
        // Later keys fail on arrival: host calls always, collectives from the rank's next
        // sequence number on.
        let later = Key::Host { seq: 5, step: 0 };
        assert_eq!(
            rvs[0].exchange(later, &(), LONG),
            Err(RvError::Gone { ranks: vec![1] })
        );
        let next = Key::Collective { seq: 1, step: 0 };
        assert_eq!(
            rvs[0].exchange(next, &(), LONG),
            Err(RvError::Gone { ranks: vec![1] })
        );
        assert!(start.elapsed() < Duration::from_secs(10));
        // A collective the rank queued before leaving still meets its peers.
        let queued = Key::Collective { seq: 0, step: 3 };
        for got in all(&rvs, queued, |r| 7 + r as u64) {
            assert_eq!(got, Ok(vec![7, 8]));
        }
    }

    #[test]
    fn a_rank_whose_connection_closes_is_lost_to_its_waiters_at_once() {
        let mut rvs = group(3);
        let doomed = rvs.pop().unwrap();
        let key = Key::Collective { seq: 0, step: 0 };
        let start = Instant::now();
        let waited = std::thread::scope(|s| {
            let w = s.spawn(|| rvs[0].exchange(key, &(), LONG));
            std::thread::sleep(Duration::from_millis(20));
            // Rank 2 goes as a killed process would: its connection closes, no LEAVE.
            drop(doomed);
            w.join().unwrap()
        });
        assert_eq!(waited, Err(RvError::Lost { ranks: vec![2] }));
        let later = Key::Host { seq: 0, step: 0 };
        assert_eq!(
            rvs[1].exchange(later, &(), LONG),
            Err(RvError::Lost { ranks: vec![2] })
        );
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
    }

    /// Once a rank declared a deadlock on the board, the communicator is done for: a later
    /// step fails at once on every rank, even one every rank comes to. (A later step that
    /// completed let the finder's own exchange complete with its peers' next one: the ranks
    /// that failed on the deadlock and then deregistered their windows met the finder's
    /// deregistration, which returned success, seen once in `fail_fast`.)
    #[test]
    fn after_a_declared_deadlock_every_later_step_fails_at_once() {
        let rvs = group(2);
        let board = rvs[0].board();
        board.publish_waits(0, &[board::step_word(0, 0) | board::HOST_STEP]);
        board.publish_waits(1, &[board::step_word(0, 0)]);
        let said = board
            .deadlock()
            .expect("rank 0 in an exchange, rank 1 in a collective");
        let start = Instant::now();
        for key in [
            Key::Host { seq: 1, step: 0 },
            Key::Collective { seq: 1, step: 0 },
        ] {
            for got in all(&rvs, key, |r| r as u64) {
                assert_eq!(got, Err(RvError::Deadlock(said.clone())), "{key}");
            }
        }
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    /// A raw join as `rank` of `n` with `session`: the hub's answer's tag and reason.
    fn raw_join(name: &str, session: &[u8], n: u32, rank: u32) -> (u8, String) {
        let conn = Conn::connect(name, &hub::admitted_users().unwrap(), LONG).unwrap();
        let staging = os::memfd(4096).unwrap();
        let mut hello = Writer::default();
        hello
            .u8(to_hub::HELLO)
            .blob(session)
            .u32(n)
            .u32(rank)
            .u64(0);
        conn.send(&hello.bytes, &[staging.as_fd()]).unwrap();
        let answer = conn.recv().unwrap().unwrap();
        let mut r = Reader::new(&answer.bytes);
        let tag = r.u8().unwrap();
        let why = String::from_utf8_lossy(r.blob().unwrap_or_default()).into_owned();
        (tag, why)
    }

    /// A join as rank 7 of 2 is refused (it made the hub thread panic, failing the job), and
    /// the real ranks still form their group; so is a group of no ranks.
    #[test]
    fn a_join_as_a_rank_outside_the_group_is_refused() {
        // Memfds live here for seconds: not while a test checks that none are left.
        let _guard = crate::test_lock();
        let (name, session) = hub();
        let (tag, why) = raw_join(&name, &session, 2, 7);
        assert_eq!(
            (tag, why.as_str()),
            (to_rank::REJECT, "rank 7 is not below nRanks 2")
        );
        let (tag, why) = raw_join(&name, &session, 0, 0);
        assert_eq!(tag, to_rank::REJECT, "{why}");
        let rvs = join_all(&name, session, 2);
        let key = Key::Collective { seq: 0, step: 0 };
        for got in all(&rvs, key, |r| r as u64) {
            assert_eq!(got, Ok(vec![0, 1]));
        }
    }

    /// Hundreds of connections that never join, some sending garbage, do not keep the ranks
    /// out; once the group formed, the hub keeps its name (nobody else can bind it) and
    /// refuses every new join; a connection that never joins is closed in seconds.
    #[test]
    fn connections_that_never_join_are_bounded_and_the_name_stays_taken() {
        // Memfds live here for seconds: not while a test checks that none are left.
        let _guard = crate::test_lock();
        let (name, session) = hub();
        let me = hub::admitted_users().unwrap();
        let idle: Vec<Conn> = (0..300)
            .map(|_| Conn::connect(&name, &me, LONG).unwrap())
            .collect();
        for conn in idle.iter().step_by(3) {
            let _ = conn.send(b"\x01garbage", &[]);
        }
        let started = Instant::now();
        let rvs = join_all(&name, session, 3);
        assert_eq!(rvs.len(), 3);
        assert!(
            Listener::bind(&name).is_err(),
            "the hub's name was free to take"
        );
        let (tag, why) = raw_join(&name, &session, 3, 0);
        assert_eq!(tag, to_rank::FORMED, "{why}");
        // Every idle connection is gone within the join limit, dropped for room or for time.
        let until = Instant::now() + Duration::from_secs(20);
        while !idle.iter().all(Conn::is_closed) {
            assert!(Instant::now() < until, "idle connections stay open");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(started.elapsed() < Duration::from_secs(20));
        drop(rvs);
        // Before any group forms: closed for time alone.
        let (name, _) = hub();
        let lone = Conn::connect(&name, &me, LONG).unwrap();
        let until = Instant::now() + Duration::from_secs(15);
        while !lone.is_closed() {
            assert!(Instant::now() < until, "an idle connection stays open");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The board and the staging buffers a rank maps come from other processes: a memfd that
    /// is not sealed against shrinking, or is smaller than the protocol says, is refused
    /// instead of mapped (a peer truncating it would kill the mapper with SIGBUS).
    #[test]
    fn shared_memory_that_could_shrink_or_is_short_is_refused() {
        // Memfds live here for seconds: not while a test checks that none are left.
        let _guard = crate::test_lock();
        // SAFETY: a NUL-terminated name; no flags beyond close-on-exec.
        let raw = unsafe { libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: a fresh descriptor that nothing else owns.
        let unsealed = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        // SAFETY: ftruncate on that descriptor.
        assert_eq!(unsafe { libc::ftruncate(raw, 1 << 20) }, 0);
        let err = os::map_shared(unsealed.as_fd(), 4096).err().unwrap();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
        let empty = os::memfd(0).unwrap();
        let err = Board::map(empty.as_fd(), 4).err().unwrap();
        assert!(err.to_string().contains("0 bytes"), "{err}");
        let sealed = os::memfd(4096).unwrap();
        // SAFETY: ftruncate on a memfd this test owns: shrinking is what the seal forbids.
        assert_ne!(unsafe { libc::ftruncate(sealed.as_raw_fd(), 0) }, 0);
        assert!(os::map_shared(sealed.as_fd(), 4096).is_ok());
    }

    /// A fresh abstract socket name for a test.
    fn fresh_name(what: &str) -> String {
        let id = os::random_bytes().unwrap();
        let id = u64::from_le_bytes(id[..8].try_into().unwrap());
        format!("symheap-rv-test-{what}-{id:x}")
    }

    /// Joins `name` as `rank` of `n` from a thread of its own, waiting at most `timeout`:
    /// the outcome and how long it took, or `None` if the join still waits `watchdog` later.
    fn join_watched(
        name: &str,
        session: [u8; 16],
        n: u32,
        rank: u32,
        timeout: Duration,
        watchdog: Duration,
    ) -> Option<(Result<(), JoinError>, Duration)> {
        let (done, ended) = std::sync::mpsc::channel();
        let name = name.to_owned();
        let started = Instant::now();
        std::thread::spawn(move || {
            let staging = os::memfd(4096).unwrap();
            let joined =
                Rendezvous::join(&name, &session, n, rank, 0, staging.as_fd(), timeout, None);
            let _ = done.send((joined.map(drop), started.elapsed()));
        });
        ended.recv_timeout(watchdog).ok()
    }

    /// A hub that takes connections but never answers (its process stopped, or a process
    /// that only listens holds its name): the join ends by its timeout. It blocked for ever
    /// in a receive without a deadline.
    #[test]
    fn a_join_to_a_hub_that_never_answers_ends_by_its_timeout() {
        let name = fresh_name("silent");
        let _silent = Listener::bind(&name).unwrap();
        let timeout = Duration::from_millis(300);
        let Some((joined, took)) = join_watched(&name, [7; 16], 2, 0, timeout, LONG / 6) else {
            panic!("the join still waits, 10 s after its 300 ms timeout");
        };
        assert!(
            matches!(joined, Err(JoinError::NoAnswer { pid }) if pid == std::process::id()),
            "{joined:?}"
        );
        assert!(took < timeout + Duration::from_millis(900), "{took:?}");
    }

    /// Rank 1 of 3 joins and waits; rank 0 joins, times out and leaves; rank 2 never comes.
    /// Both timeouts name rank 2 alone: rank 1's named rank 0 too, which came and gave up.
    #[test]
    fn a_join_timeout_names_only_the_ranks_that_never_came() {
        let (name, session) = hub();
        let first = std::thread::scope(|s| {
            let patient =
                s.spawn(|| join_watched(&name, session, 3, 1, Duration::from_secs(3), LONG));
            let until = Instant::now() + LONG / 6;
            while hub::tests_hook::hellos(&session) < 1 {
                assert!(Instant::now() < until, "rank 1 never reached the hub");
                std::thread::sleep(Duration::from_millis(5));
            }
            let hasty = join_watched(&name, session, 3, 0, Duration::from_millis(100), LONG);
            let hasty = hasty.expect("rank 0's join ended").0;
            assert!(
                matches!(&hasty, Err(JoinError::Timeout { missing }) if missing == &[2]),
                "{hasty:?}"
            );
            patient.join().unwrap().expect("rank 1's join ended").0
        });
        assert!(
            matches!(&first, Err(JoinError::Timeout { missing }) if missing == &[2]),
            "{first:?}"
        );
    }

    /// Rank 0 of 3 joins, then the hub freezes (as a stopped process does) before rank 1
    /// comes: rank 0's join ends by its timeout and names ranks 1 and 2, read from the
    /// roster the hub handed it, without an answer from the hub.
    #[test]
    fn a_join_whose_hub_stops_after_answering_names_the_missing_ranks_by_its_timeout() {
        let (name, session) = hub();
        let timeout = Duration::from_millis(400);
        let ended = std::thread::scope(|s| {
            let waiting = s.spawn(|| join_watched(&name, session, 3, 0, timeout, LONG / 6));
            let until = Instant::now() + LONG / 6;
            while hub::tests_hook::hellos(&session) < 1 {
                assert!(Instant::now() < until, "rank 0 never reached the hub");
                std::thread::sleep(Duration::from_millis(1));
            }
            hub::tests_hook::freeze(&session, true);
            waiting.join().unwrap()
        });
        hub::tests_hook::freeze(&session, false);
        let Some((joined, took)) = ended else {
            panic!("the join still waits, 10 s after its timeout");
        };
        assert!(
            matches!(&joined, Err(JoinError::Timeout { missing }) if missing == &[1, 2]),
            "{joined:?}"
        );
        assert!(took < timeout + Duration::from_millis(900), "{took:?}");
    }

    #[test]
    fn deadlines_never_overflow() {
        let far = deadline(Duration::MAX);
        assert!(far > Instant::now());
    }
}
