//! The rendezvous hub of one root info: a thread of the process that called
//! `HcclGetRootInfo`, listening on an abstract Unix socket that the root info names. Every
//! rank, a thread of any process on the machine, connects to it, joins, and then meets its
//! peers through it: it collects each step's values (with any memfds) from every rank and
//! sends them all to each. It notices a rank whose connection closes (its process exited or
//! was killed) and tells the others at once.
//!
//! The creator need not stay inside any call, but its process must outlive the communicator:
//! when it goes, every rank's connection closes and every later exchange fails. Once all
//! ranks joined it refuses every new connection (a root info is used once), but keeps its
//! name bound so that no other process can take it, and it ends when the last rank has
//! disconnected.
//!
//! Who may join (the threat model is in the crate's docs, *Who can join a job*): only
//! processes of this user, by the kernel's word (`SO_PEERCRED`), or of the users named in
//! `SYMHEAP_EMU_PEER_UIDS`; only with the root info's key, compared in constant time; only as
//! a rank below the group's size that nobody holds. (Ranks check the hub the same way before
//! they send anything: [`crate::ipc::wire::Conn::connect`].) Connections that have not joined
//! are bounded in number and in time, and in the descriptors they may take: the hub keeps a
//! few descriptors in reserve for what a join needs (its staging memfd, the joiner's pidfd,
//! the roster, the board), drops connections that have not joined to keep that reserve and
//! to leave the process room near its limit, and answers a join it has no descriptors for by
//! saying so. A rank of another process is watched through a pidfd too, so that a `fork()`ed
//! child holding its socket open does not keep a dead rank alive.
//!
//! Until the group forms, the hub keeps its roster ([`crate::ipc::roster`]) and hands it to
//! every rank that joins, so a rank whose join times out names the ranks missing then, even
//! when the hub no longer answers.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::ipc::attendance::{Absent, Gone, Key, never_coming};
use crate::ipc::board::Board;
use crate::ipc::os;
use crate::ipc::roster::{self, Roster};
use crate::ipc::wire::{Conn, Listener, Reader, Writer, out_of_descriptors, poll_readable};

/// Client-to-hub message tags.
pub(crate) mod to_hub {
    /// `key, n, rank, place` and the rank's staging memfd: join. The place is a word the
    /// rank brings for every rank to learn (the hccl wing packs its node and SuperPoD in it).
    pub(crate) const HELLO: u8 = 1;
    /// `step key, payload` and any memfds: this rank's value for a step.
    pub(crate) const DEPOSIT: u8 = 2;
    /// `step key`: this rank gave up waiting for the step.
    pub(crate) const WITHDRAW: u8 = 3;
    /// `next collective sequence number`: the rank destroyed its communicator.
    pub(crate) const LEAVE: u8 = 4;
}

/// Hub-to-client message tags.
pub(crate) mod to_rank {
    /// Every rank joined: the host's pid, then `count, pids`, every rank's process id in rank
    /// order, then `count, places`, every rank's place word in rank order; every rank's
    /// staging memfd follows, in rank order, then the board's.
    pub(crate) const WELCOME: u8 = 10;
    /// `reason`: the join was refused.
    pub(crate) const REJECT: u8 = 11;
    /// The join was refused because the group has formed: its ranks all joined.
    pub(crate) const FORMED: u8 = 15;
    /// `step key`, then per rank `payload, memfd count`; the memfds follow in rank order.
    pub(crate) const COMPLETE: u8 = 12;
    /// `step key, why, count, ranks`: the step cannot complete, because these ranks will
    /// never deposit ([`LEFT`], [`DIED`]) or one deposited twice ([`DUPLICATE`]).
    pub(crate) const FAILED: u8 = 13;
    /// `step key, count, ranks`: the answer to a withdrawal, naming who had not deposited.
    pub(crate) const MISSING: u8 = 14;
    /// The join was accepted, and the group waits for other ranks: the roster's memfd
    /// ([`crate::ipc::roster`]) follows.
    pub(crate) const JOINED: u8 = 16;
    /// `reason`: the join was refused because the hub's process ran out of file descriptors.
    pub(crate) const EXHAUSTED: u8 = 17;
    /// Why: the ranks destroyed their communicator.
    pub(crate) const LEFT: u8 = 1;
    /// Why: the ranks' connections closed without a LEAVE (the process exited or was killed).
    pub(crate) const DIED: u8 = 2;
    /// Why: a rank deposited twice under the key.
    pub(crate) const DUPLICATE: u8 = 3;
}

/// A step key as it travels: opaque bytes to the hub.
pub(crate) type StepKey = Vec<u8>;

struct Member {
    conn: Conn,
    /// Set by the rank's HELLO.
    rank: Option<u32>,
    /// The process at the other end, by `SO_PEERCRED`.
    pid: u32,
    /// Readable once that process ends, for a rank of another process.
    pidfd: Option<OwnedFd>,
    /// When the connection was accepted: one that has not joined within [`JOIN_WITHIN`] is
    /// dropped.
    accepted: Instant,
    staging: Option<OwnedFd>,
    /// The place word of the rank's HELLO.
    place: u64,
    left: bool,
    /// Why this connection may not join, told in answer to its first message: answered
    /// then, not at once, since closing a socket with its join unread would reset the
    /// connection and lose the answer.
    refused: Option<String>,
}

/// The most connections that have not joined yet from one process, and from all: the oldest
/// (of that process, else of all) goes to make room. A flood from one process thus never
/// pushes out another's rank that has connected but not yet sent its join.
const MAX_UNJOINED_PER_PROCESS: usize = 16;
const MAX_UNJOINED: usize = 256;
/// How long a connection may stay without joining: an honest rank sends its join right after
/// connecting.
const JOIN_WITHIN: Duration = Duration::from_secs(5);
/// The most ranks a group may claim (the board's size grows with it).
const MAX_RANKS: u32 = 4096;
/// The variable naming other users (comma-separated uids) whose processes may join.
const PEER_UIDS_ENV: &str = "SYMHEAP_EMU_PEER_UIDS";
/// Descriptors the hub keeps in reserve for a join: its staging memfd, the joiner's pidfd, and
/// the roster or the board, with one to spare.
const RESERVE: usize = 4;
/// How many descriptors below its limit the process must keep free for connections that have
/// not joined to stay: past that, each new one pushes an older one out. Room for the joins
/// of the ranks of this process (each receives every rank's staging memfd) and the rest of
/// the process's work.
const HEADROOM: u64 = 64;

/// The users whose processes may take part in a job: this one (the effective uid) and those
/// that [`PEER_UIDS_ENV`] names. The hub admits their ranks, and ranks admit a hub of theirs.
///
/// # Errors
/// `InvalidInput` naming a value of [`PEER_UIDS_ENV`] that is not a uid.
pub(crate) fn admitted_users() -> io::Result<Vec<u32>> {
    // SAFETY: geteuid has no preconditions.
    let mut users = vec![unsafe { libc::geteuid() }];
    if let Some(more) = std::env::var_os(PEER_UIDS_ENV) {
        for uid in more
            .to_string_lossy()
            .split(',')
            .filter(|u| !u.trim().is_empty())
        {
            users.push(uid.trim().parse().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{PEER_UIDS_ENV}: {uid:?} is not a uid"),
                )
            })?);
        }
    }
    Ok(users)
}

type Deposit = (Vec<u8>, Vec<OwnedFd>);

struct Hub {
    session: [u8; 16],
    listener: Listener,
    /// The users whose processes may connect: this one and [`PEER_UIDS_ENV`]'s.
    users: Vec<u32>,
    /// Descriptors held in reserve ([`RESERVE`]), given up just before the hub takes the
    /// descriptors a message may bring and a join needs, and taken again after.
    reserve: Vec<OwnedFd>,
    members: Vec<Member>,
    /// The rank count, fixed by the first HELLO.
    n: Option<u32>,
    formed: bool,
    /// Steps waiting for some ranks' deposits.
    steps: BTreeMap<StepKey, Vec<Option<Deposit>>>,
    /// The ranks that deposited under a step of `steps` and gave up on it: they came, so a
    /// timeout does not name them as missing.
    gave_up: BTreeMap<StepKey, Vec<u32>>,
    /// The board where the ranks meet for collective steps (once formed), and its memfd.
    board: Option<(Board, OwnedFd)>,
    /// Who has joined, while the group has not formed (made at the first join), and its memfd.
    roster: Option<(Roster, OwnedFd)>,
}

/// Starts the hub of a new root info on abstract socket `name`.
///
/// # Errors
/// The socket or thread could not be made.
pub(crate) fn start(name: &str, session: [u8; 16]) -> io::Result<()> {
    let users = admitted_users()?;
    let listener = Listener::bind(name)?;
    let mut hub = Hub {
        session,
        listener,
        users,
        reserve: Vec::new(),
        members: Vec::new(),
        n: None,
        formed: false,
        steps: BTreeMap::new(),
        gave_up: BTreeMap::new(),
        board: None,
        roster: None,
    };
    hub.top_up_reserve();
    std::thread::Builder::new()
        .name("symheap-emu-hub".into())
        .spawn(move || hub.run())
        .map(drop)
}

/// Where a descriptor the hub polls comes from.
#[derive(Clone, Copy)]
enum Source {
    Conn(usize),
    Pidfd(usize),
    Listener,
}

impl Hub {
    fn run(mut self) {
        while !self.formed || !self.members.is_empty() {
            #[cfg(test)]
            tests_hook::while_frozen(&self.session);
            self.drop_stale_unjoined();
            let mut sources = Vec::new();
            let mut fds: Vec<BorrowedFd<'_>> = Vec::new();
            for (i, m) in self.members.iter().enumerate() {
                sources.push(Source::Conn(i));
                fds.push(m.conn.fd());
                if let Some(pidfd) = &m.pidfd {
                    sources.push(Source::Pidfd(i));
                    fds.push(pidfd.as_fd());
                }
            }
            sources.push(Source::Listener);
            fds.push(self.listener.fd());
            let ready = match poll_readable(&fds, self.poll_for()) {
                Ok(ready) => ready,
                Err(_) => return,
            };
            drop(fds);
            // From the last member down: removing one keeps the lower indices valid. Forming
            // the group reorders everything: poll again. A new connection is accepted last,
            // since making room for it may remove any member that has not joined.
            let conn_ready: Vec<usize> = ready
                .iter()
                .filter_map(|&k| match sources[k] {
                    Source::Conn(i) => Some(i),
                    _ => None,
                })
                .collect();
            let mut served = Vec::new();
            let mut accept = false;
            for &k in ready.iter().rev() {
                if self.reserve.len() < RESERVE && self.idle_unjoined().next().is_some() {
                    // Make room first (removing members, so not within this pass): what is
                    // left is read at the next poll.
                    accept = false;
                    break;
                }
                let was_formed = self.formed;
                match sources[k] {
                    Source::Listener => accept = true,
                    // A member whose process ended is lost once its connection holds
                    // nothing more to read (a last LEAVE, say).
                    Source::Pidfd(i) if !conn_ready.contains(&i) => {
                        served.push(i);
                        self.disconnect(i);
                    }
                    Source::Pidfd(_) => {}
                    Source::Conn(i) if !served.contains(&i) => {
                        served.push(i);
                        self.serve(i);
                    }
                    Source::Conn(_) => {}
                }
                if self.formed != was_formed {
                    accept = false;
                    break;
                }
            }
            self.keep_reserve();
            if accept {
                self.accept();
            }
        }
    }

    /// Takes descriptors for the reserve until it holds [`RESERVE`]; whether it does.
    fn top_up_reserve(&mut self) -> bool {
        while self.reserve.len() < RESERVE {
            // A copy of the listening socket: any descriptor holds a place.
            match self.listener.fd().try_clone_to_owned() {
                Ok(fd) => self.reserve.push(fd),
                Err(_) => return false,
            }
        }
        true
    }

    /// Tops the reserve up, dropping idle connections that have not joined when the process
    /// has no descriptors left for it.
    fn keep_reserve(&mut self) {
        while !self.top_up_reserve() && self.make_room() {}
    }

    /// The indices of the connections that have not joined and have sent nothing: those that
    /// may go to make room (a rank sends its join as soon as it connects, so one with a
    /// message waiting is served instead).
    fn idle_unjoined(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.members.len())
            .filter(|&i| self.members[i].rank.is_none() && !self.members[i].conn.is_readable())
    }

    /// Drops one idle connection that has not joined, to free its descriptor: the oldest of
    /// the process that holds the most such connections (a flood, rather than a rank on its
    /// way). Whether there was one.
    fn make_room(&mut self) -> bool {
        let idle: Vec<usize> = self.idle_unjoined().collect();
        let mut per_process: BTreeMap<u32, usize> = BTreeMap::new();
        for &i in &idle {
            *per_process.entry(self.members[i].pid).or_default() += 1;
        }
        let Some((&pid, _)) = per_process.iter().max_by_key(|&(_, &count)| count) else {
            return false;
        };
        let oldest = idle.into_iter().find(|&i| self.members[i].pid == pid);
        oldest.map(|i| self.members.remove(i)).is_some()
    }

    /// How long to poll: until the oldest connection that has not joined is due, at most a
    /// second.
    fn poll_for(&self) -> Duration {
        let now = Instant::now();
        self.members
            .iter()
            .filter(|m| m.rank.is_none())
            .map(|m| (m.accepted + JOIN_WITHIN).saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::from_secs(1))
            .clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// Drops connections that have not joined within [`JOIN_WITHIN`].
    fn drop_stale_unjoined(&mut self) {
        let now = Instant::now();
        self.members
            .retain(|m| m.rank.is_some() || now.duration_since(m.accepted) < JOIN_WITHIN);
    }

    /// Accepts one connection, as a member that has yet to join (the oldest such of its
    /// process making room when there are [`MAX_UNJOINED_PER_PROCESS`], else the oldest of
    /// all when there are [`MAX_UNJOINED`]); one from a process of a user not admitted is
    /// refused at its first message.
    fn accept(&mut self) {
        let conn = match self.listener.accept() {
            Ok(conn) => conn,
            Err(e) => return self.accept_failed(&e),
        };
        let (pid, refused) = match conn.peer() {
            Ok((pid, uid)) if self.users.contains(&uid) => (pid, None),
            Ok((pid, uid)) => (
                pid,
                Some(format!(
                    "uid {uid} may not join a job of uid {} (the host may admit it with \
                     {PEER_UIDS_ENV})",
                    self.users[0]
                )),
            ),
            Err(e) => (0, Some(format!("cannot tell who connected: {e}"))),
        };
        // (Once the group has formed, a join is refused when it comes, in `hello`.)
        let unjoined: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].rank.is_none())
            .collect();
        let of_this_process: Vec<usize> = unjoined
            .iter()
            .copied()
            .filter(|&i| self.members[i].pid == pid)
            .collect();
        if of_this_process.len() >= MAX_UNJOINED_PER_PROCESS {
            self.members.remove(of_this_process[0]);
        } else if unjoined.len() >= MAX_UNJOINED {
            self.members.remove(unjoined[0]);
        } else if near_descriptor_limit(conn.fd()) {
            self.make_room();
        }
        self.members.push(Member {
            conn,
            rank: None,
            pid,
            pidfd: None,
            accepted: Instant::now(),
            staging: None,
            place: 0,
            left: false,
            refused,
        });
    }

    /// `accept` failed. Out of descriptors (the listener stays readable, and polling it again
    /// would spin): drop an idle connection that has not joined, making room for the next
    /// accept; with joins waiting to be read, read them first (at the next poll); with none,
    /// accept the pending connection on the reserve (it may be a rank, which the rest of the
    /// reserve serves, or is told that the hub is out of descriptors). With no reserve left
    /// either, or anything else: a short pause.
    fn accept_failed(&mut self, e: &io::Error) {
        if !out_of_descriptors(e) {
            std::thread::sleep(Duration::from_millis(10));
            return;
        }
        if self.make_room() || self.members.iter().any(|m| m.rank.is_none()) {
            return;
        }
        if self.reserve.is_empty() {
            std::thread::sleep(Duration::from_millis(10));
            return;
        }
        self.reserve.clear();
        self.accept();
    }

    /// Handles one message of member `i`, or its disconnection, with the reserve's
    /// descriptors free for it: the message may carry descriptors, and a join needs more.
    fn serve(&mut self, i: usize) {
        self.reserve.clear();
        self.serve_message(i);
        self.top_up_reserve();
    }

    fn serve_message(&mut self, i: usize) {
        let message = match self.members[i].conn.recv() {
            Ok(Some(m)) => m,
            // A join whose staging memfd could not be received: say why, instead of closing.
            Err(e) if out_of_descriptors(&e) && self.members[i].rank.is_none() => {
                return self.exhausted(i, "to receive this rank's join");
            }
            _ => return self.disconnect(i),
        };
        if let Some(why) = self.members[i].refused.take() {
            return self.reject(i, &why);
        }
        let mut r = Reader::new(&message.bytes);
        let fds = message.fds;
        match r.u8() {
            Some(to_hub::HELLO) => self.hello(i, &mut r, fds),
            Some(to_hub::DEPOSIT) => self.deposit(i, &mut r, fds),
            Some(to_hub::WITHDRAW) => self.withdraw(i, &mut r),
            Some(to_hub::LEAVE) => {
                self.members[i].left = true;
                let next_collective = r.u64().unwrap_or(0);
                if let Some(rank) = self.members[i].rank {
                    self.mark_gone(rank, Gone::Left { next_collective });
                }
            }
            _ => self.disconnect(i),
        }
    }

    fn reject(&mut self, i: usize, reason: &str) {
        let mut w = Writer::default();
        w.u8(to_rank::REJECT).blob(reason.as_bytes());
        self.dismiss(i, &w);
    }

    /// Refuses the join of member `i`: this process had no file descriptors `for_what`.
    fn exhausted(&mut self, i: usize, for_what: &str) {
        let mut w = Writer::default();
        w.u8(to_rank::EXHAUSTED)
            .blob(exhausted_reason(for_what).as_bytes());
        self.dismiss(i, &w);
    }

    /// Answers connection `i` with `answer` (after reading its join) and drops it.
    fn dismiss(&mut self, i: usize, answer: &Writer) {
        let _ = self.members[i].conn.send(&answer.bytes, &[]);
        self.members.remove(i);
    }

    fn hello(&mut self, i: usize, r: &mut Reader<'_>, mut fds: Vec<OwnedFd>) {
        #[cfg(test)]
        tests_hook::hello(&self.session);
        let (Some(session), Some(n), Some(rank), Some(place)) =
            (r.blob(), r.u32(), r.u32(), r.u64())
        else {
            return self.reject(i, "malformed join");
        };
        if !same_secret(session, &self.session) {
            return self.reject(i, "rootInfo does not match this rendezvous");
        }
        if !(1..=MAX_RANKS).contains(&n) {
            return self.reject(i, &format!("nRanks {n} is not in 1..={MAX_RANKS}"));
        }
        if rank >= n {
            return self.reject(i, &format!("rank {rank} is not below nRanks {n}"));
        }
        if self.formed {
            let mut w = Writer::default();
            w.u8(to_rank::FORMED);
            return self.dismiss(i, &w);
        }
        if let Some(have) = self.n.filter(|&have| have != n) {
            return self.reject(
                i,
                &format!("nRanks {n} differs from the {have} of other ranks"),
            );
        }
        if self.members.iter().any(|m| m.rank == Some(rank)) {
            return self.reject(i, &format!("rank {rank} has already joined this rootInfo"));
        }
        let (Some(staging), true) = (fds.pop(), fds.is_empty()) else {
            return self.reject(i, "a join carries exactly one staging buffer");
        };
        let pid = self.members[i].pid;
        let pidfd = match pid == std::process::id() {
            true => None,
            false => match os::pidfd(pid) {
                Ok(fd) => fd,
                Err(e) if out_of_descriptors(&e) => {
                    return self.exhausted(i, "to watch the joining process");
                }
                Err(e) => return self.reject(i, &format!("cannot watch the joining process: {e}")),
            },
        };
        let forms = self.members.iter().filter(|m| m.rank.is_some()).count() + 1 == n as usize;
        if !forms && self.roster.is_none() {
            match Roster::create(n as usize) {
                Ok(made) => self.roster = Some(made),
                Err(e) if out_of_descriptors(&e) => return self.exhausted(i, "for the roster"),
                Err(e) => return self.reject(i, &format!("cannot make the roster: {e}")),
            }
        }
        self.n = Some(n);
        self.members[i].rank = Some(rank);
        self.members[i].pidfd = pidfd;
        self.members[i].staging = Some(staging);
        self.members[i].place = place;
        if forms {
            return self.form(n);
        }
        if let Some((roster, fd)) = &self.roster {
            roster.set(rank, roster::JOINED);
            let mut w = Writer::default();
            w.u8(to_rank::JOINED);
            // A rank that cannot take it finds out itself ([`Rendezvous::join`]).
            let _ = self.members[i].conn.send(&w.bytes, &[fd.as_fd()]);
        }
    }

    /// Every rank joined: order members by rank, stop listening, make the board, welcome
    /// everyone with every rank's staging memfd and the board's.
    fn form(&mut self, n: u32) {
        self.formed = true;
        // Connections that never said HELLO have no place in the group.
        self.members.retain(|m| m.rank.is_some());
        self.members.sort_by_key(|m| m.rank);
        self.steps.clear();
        self.gave_up.clear();
        self.roster = None;
        let board = os::memfd(Board::size(n as usize))
            .and_then(|fd| Ok((Board::map(fd.as_fd(), n as usize)?, fd)));
        let board = match board {
            Ok(board) => board,
            Err(e) => {
                // Without a board the group cannot meet: every rank's join fails, saying why.
                let mut w = Writer::default();
                match out_of_descriptors(&e) {
                    true => w
                        .u8(to_rank::EXHAUSTED)
                        .blob(exhausted_reason("for the board").as_bytes()),
                    false => w
                        .u8(to_rank::REJECT)
                        .blob(format!("cannot make the board: {e}").as_bytes()),
                };
                for m in &self.members {
                    let _ = m.conn.send(&w.bytes, &[]);
                }
                self.members.clear();
                return;
            }
        };
        let mut fds: Vec<BorrowedFd<'_>> = self
            .members
            .iter()
            .filter_map(|m| m.staging.as_ref().map(AsFd::as_fd))
            .collect();
        fds.push(board.1.as_fd());
        let mut w = Writer::default();
        w.u8(to_rank::WELCOME)
            .u32(std::process::id())
            .u32(self.members.len() as u32);
        for m in &self.members {
            w.u32(m.pid);
        }
        w.u32(self.members.len() as u32);
        for m in &self.members {
            w.u64(m.place);
        }
        for m in self.remote_first() {
            let _ = m.conn.send(&w.bytes, &fds);
        }
        drop(fds);
        self.board = Some(board);
        for m in &mut self.members {
            m.staging = None;
        }
    }

    fn deposit(&mut self, i: usize, r: &mut Reader<'_>, fds: Vec<OwnedFd>) {
        let (Some(rank), true, Some(n)) = (self.members[i].rank, self.formed, self.n) else {
            return self.disconnect(i);
        };
        let (Some(key), Some(payload)) = (r.blob(), r.blob()) else {
            return self.disconnect(i);
        };
        let key = key.to_vec();
        let slot = self
            .steps
            .entry(key.clone())
            .or_insert_with(|| (0..n).map(|_| None).collect());
        if slot[rank as usize].is_some() {
            return self.fail(&key, to_rank::DUPLICATE, &[rank]);
        }
        slot[rank as usize] = Some((payload.to_vec(), fds));
        if slot.iter().all(Option::is_some) {
            let slot = self.steps.remove(&key).unwrap_or_default();
            return self.complete(&key, slot);
        }
        self.fail_if_hopeless(&key);
    }

    /// Fails step `key` if a rank that has not deposited never will.
    fn fail_if_hopeless(&mut self, key: &[u8]) {
        let (Some(slot), Some((board, _)), Some(step)) =
            (self.steps.get(key), &self.board, Key::decode(key))
        else {
            return;
        };
        let missing = (0..slot.len()).filter(|&k| slot[k].is_none()).map(|k| {
            let word = board.gone(k).load(Ordering::Acquire);
            (k as u32, Gone::from_word(word))
        });
        match never_coming(step, missing) {
            Some(Absent::Died(ranks)) => self.fail(key, to_rank::DIED, &ranks),
            Some(Absent::Left(ranks)) => self.fail(key, to_rank::LEFT, &ranks),
            None => {}
        }
    }

    /// Ends step `key`: every rank that deposited under it (or `ranks`, for a duplicate) is
    /// told why it cannot complete.
    fn fail(&mut self, key: &[u8], why: u8, ranks: &[u32]) {
        let depositors: Vec<u32> = match (why, self.steps.get(key)) {
            (to_rank::DUPLICATE, _) => ranks.to_vec(),
            (_, Some(slot)) => (0..slot.len() as u32)
                .filter(|&k| slot[k as usize].is_some())
                .collect(),
            (_, None) => Vec::new(),
        };
        if why != to_rank::DUPLICATE {
            self.steps.remove(key);
            self.gave_up.remove(key);
        }
        let mut w = Writer::default();
        w.u8(to_rank::FAILED)
            .blob(key)
            .u8(why)
            .u32(ranks.len() as u32);
        for &k in ranks {
            w.u32(k);
        }
        for m in self
            .remote_first()
            .filter(|m| m.rank.is_some_and(|k| depositors.contains(&k)))
        {
            let _ = m.conn.send(&w.bytes, &[]);
        }
    }

    fn complete(&self, key: &[u8], slot: Vec<Option<Deposit>>) {
        let mut w = Writer::default();
        w.u8(to_rank::COMPLETE).blob(key);
        let mut fds: Vec<BorrowedFd<'_>> = Vec::new();
        for (payload, rank_fds) in slot.iter().flatten() {
            w.blob(payload).u32(rank_fds.len() as u32);
            fds.extend(rank_fds.iter().map(AsFd::as_fd));
        }
        for m in self.remote_first() {
            let _ = m.conn.send(&w.bytes, &fds);
        }
    }

    /// The members, those in other processes first: once a rank of this process has its
    /// answer it may end the process, and the hub with it, so it gets its answer last.
    fn remote_first(&self) -> impl Iterator<Item = &Member> {
        let here = std::process::id();
        let (local, remote): (Vec<&Member>, Vec<&Member>) = self
            .members
            .iter()
            .filter(|m| m.rank.is_some())
            .partition(|m| m.pid == here);
        remote.into_iter().chain(local)
    }

    fn withdraw(&mut self, i: usize, r: &mut Reader<'_>) {
        let (Some(rank), Some(key)) = (self.members[i].rank, r.blob()) else {
            return self.disconnect(i);
        };
        if !self.formed {
            // Steps begin once the group forms. (A rank that gives up joining reads the
            // roster and closes its connection.)
            return;
        }
        let mut w = Writer::default();
        w.u8(to_rank::MISSING).blob(key);
        match self.steps.get_mut(key) {
            Some(slot) => {
                slot[rank as usize] = None;
                let gave_up = self.gave_up.entry(key.to_vec()).or_default();
                // The ranks that never came; if every rank came, those that gave up before.
                let others = (0..slot.len() as u32).filter(|&k| k != rank);
                let never_came: Vec<u32> = others
                    .clone()
                    .filter(|&k| slot[k as usize].is_none() && !gave_up.contains(&k))
                    .collect();
                let missing = match never_came.is_empty() {
                    true => others.filter(|k| gave_up.contains(k)).collect(),
                    false => never_came,
                };
                gave_up.push(rank);
                w.u32(missing.len() as u32);
                for k in missing {
                    w.u32(k);
                }
                if slot.iter().all(Option::is_none) {
                    self.steps.remove(key);
                    self.gave_up.remove(key);
                }
            }
            // Completed already: the rank has the values in its queue.
            None => {
                w.u32(0);
            }
        }
        let _ = self.members[i].conn.send(&w.bytes, &[]);
    }

    /// Member `i`'s connection closed (or misbehaved): before the group formed its place is
    /// free again; after, the steps that now cannot complete fail at once.
    fn disconnect(&mut self, i: usize) {
        let m = self.members.remove(i);
        if let (true, Some(rank), false) = (self.formed, m.rank, m.left) {
            self.mark_gone(rank, Gone::Died);
        }
        if let (false, Some(rank), Some((roster, _))) = (self.formed, m.rank, &self.roster) {
            roster.set(rank, roster::GAVE_UP);
        }
    }

    /// Records why `rank` will not come again and fails every step that waits for it in vain.
    fn mark_gone(&mut self, rank: u32, why: Gone) {
        if let Some((board, _)) = &self.board {
            board
                .gone(rank as usize)
                .store(Gone::word(Some(why)), Ordering::Release);
            board.notify();
        }
        let keys: Vec<StepKey> = self.steps.keys().cloned().collect();
        for key in keys {
            self.fail_if_hopeless(&key);
        }
    }
}

/// Whether the descriptor `fd`, just made, leaves the process fewer than [`HEADROOM`] below
/// its limit. Descriptors are numbered from the lowest free one, so every number below it is
/// taken: what is free lies above it (or in holes above it, which this does not count).
fn near_descriptor_limit(fd: BorrowedFd<'_>) -> bool {
    use std::os::fd::AsRawFd;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return false;
    }
    (fd.as_raw_fd() as u64).saturating_add(HEADROOM) >= lim.rlim_cur
}

/// Why a join is refused when this process has no file descriptors `for_what`.
fn exhausted_reason(for_what: &str) -> String {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct given.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    let limit = match known {
        true => format!(" (its limit is {})", lim.rlim_cur),
        false => String::new(),
    };
    format!(
        "the rendezvous hub's process (pid {}) ran out of file descriptors{limit} {for_what}: \
         raise its limit (ulimit -n) or have it hold fewer",
        std::process::id()
    )
}

/// Whether `a` and `b` are equal, in a time that depends on their lengths only.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    let differ = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    a.len() == b.len() && std::hint::black_box(differ) == 0
}

/// What unit tests can see of a hub: how many joins it has received.
#[cfg(test)]
pub(crate) mod tests_hook {
    use std::collections::BTreeMap;

    use crate::base::lock::{RankedMutex, lock, ranks};

    /// Per hub (by session key): the joins it received, and whether it is frozen.
    static HELLOS: RankedMutex<BTreeMap<[u8; 16], (usize, bool)>> =
        RankedMutex::new(ranks::HELLOS, BTreeMap::new());

    pub(super) fn hello(session: &[u8; 16]) {
        lock(&HELLOS).entry(*session).or_default().0 += 1;
    }

    /// Joins received by the hub of `session`, accepted or not.
    pub(crate) fn hellos(session: &[u8; 16]) -> usize {
        lock(&HELLOS).get(session).map_or(0, |h| h.0)
    }

    /// Freezes the hub of `session` (or thaws it): it reads and answers nothing, as when its
    /// process is stopped.
    pub(crate) fn freeze(session: &[u8; 16], frozen: bool) {
        lock(&HELLOS).entry(*session).or_default().1 = frozen;
    }

    /// Returns once the hub of `session` is not frozen.
    pub(super) fn while_frozen(session: &[u8; 16]) {
        while lock(&HELLOS).get(session).is_some_and(|h| h.1) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
