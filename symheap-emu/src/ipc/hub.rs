//! The rendezvous host of one root info: a thread of the process that called
//! `HcclGetRootInfo`, listening on an abstract Unix socket that the root info names. Every
//! rank, a thread of any process on the machine, connects to it, joins, and then meets its
//! peers through it: it collects each step's values (with any memfds) from every rank and
//! sends them all to each. It notices a rank whose connection closes (its process exited or
//! was killed) and tells the others at once.
//!
//! The creator need not stay inside any call, but its process must outlive the communicator:
//! when it goes, every rank's connection closes and every later exchange fails. The hub stops
//! listening once all ranks joined (a root info is used once) and ends when the last rank
//! has disconnected.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::ipc::attendance::{Absent, Gone, Key, never_coming};
use crate::ipc::board::Board;
use crate::ipc::os;
use crate::ipc::wire::{Conn, Listener, Reader, Writer, poll_readable};

/// Client-to-hub message tags.
pub(crate) mod to_hub {
    /// `key, n, rank, pid` and the rank's staging memfd: join.
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
    /// order; every rank's staging memfd follows, in rank order, then the board's.
    pub(crate) const WELCOME: u8 = 10;
    /// `reason`: the join was refused.
    pub(crate) const REJECT: u8 = 11;
    /// `step key`, then per rank `payload, memfd count`; the memfds follow in rank order.
    pub(crate) const COMPLETE: u8 = 12;
    /// `step key, why, count, ranks`: the step cannot complete, because these ranks will
    /// never deposit ([`LEFT`], [`DIED`]) or one deposited twice ([`DUPLICATE`]).
    pub(crate) const FAILED: u8 = 13;
    /// `step key, count, ranks`: the answer to a withdrawal, naming who had not deposited.
    pub(crate) const MISSING: u8 = 14;
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
    /// Set by the rank's HELLO, with its process id.
    rank: Option<u32>,
    pid: u32,
    staging: Option<OwnedFd>,
    left: bool,
}

type Deposit = (Vec<u8>, Vec<OwnedFd>);

struct Hub {
    session: [u8; 16],
    listener: Option<Listener>,
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
}

/// Starts the hub of a new root info on abstract socket `name`.
///
/// # Errors
/// The socket or thread could not be made.
pub(crate) fn start(name: &str, session: [u8; 16]) -> io::Result<()> {
    let listener = Listener::bind(name)?;
    let hub = Hub {
        session,
        listener: Some(listener),
        members: Vec::new(),
        n: None,
        formed: false,
        steps: BTreeMap::new(),
        gave_up: BTreeMap::new(),
        board: None,
    };
    std::thread::Builder::new()
        .name("symheap-emu-hub".into())
        .spawn(move || hub.run())
        .map(drop)
}

impl Hub {
    fn run(mut self) {
        while self.listener.is_some() || !self.members.is_empty() {
            let mut fds: Vec<BorrowedFd<'_>> = self.members.iter().map(|m| m.conn.fd()).collect();
            if let Some(l) = &self.listener {
                fds.push(l.fd());
            }
            let ready = match poll_readable(&fds, Duration::from_secs(1)) {
                Ok(ready) => ready,
                Err(_) => return,
            };
            let members = self.members.len();
            drop(fds);
            // From the last index down: removing a member keeps the lower indices valid, and
            // an accepted one goes last. Forming the group reorders everything: poll again.
            for &i in ready.iter().rev() {
                if i == members {
                    if let Some(Ok(conn)) = self.listener.as_ref().map(Listener::accept) {
                        self.members.push(Member {
                            conn,
                            rank: None,
                            pid: 0,
                            staging: None,
                            left: false,
                        });
                    }
                    continue;
                }
                let was_formed = self.formed;
                self.serve(i);
                if self.formed != was_formed {
                    break;
                }
            }
        }
    }

    /// Handles one message of member `i`, or its disconnection.
    fn serve(&mut self, i: usize) {
        let message = match self.members[i].conn.recv() {
            Ok(Some(m)) => m,
            _ => return self.disconnect(i),
        };
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
        let _ = self.members[i].conn.send(&w.bytes, &[]);
        self.members.remove(i);
    }

    fn hello(&mut self, i: usize, r: &mut Reader<'_>, mut fds: Vec<OwnedFd>) {
        #[cfg(test)]
        tests_hook::hello(&self.session);
        let (Some(session), Some(n), Some(rank), Some(pid)) = (r.blob(), r.u32(), r.u32(), r.u32())
        else {
            return self.reject(i, "malformed join");
        };
        if session != self.session {
            return self.reject(i, "rootInfo does not match this rendezvous");
        }
        if self.formed {
            return self.reject(
                i,
                "rootInfo was already used by a communicator whose ranks all joined",
            );
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
        self.n = Some(n);
        self.members[i].rank = Some(rank);
        self.members[i].pid = pid;
        self.members[i].staging = Some(staging);
        if self.members.iter().filter(|m| m.rank.is_some()).count() == n as usize {
            self.form(n);
        }
    }

    /// Every rank joined: order members by rank, stop listening, make the board, welcome
    /// everyone with every rank's staging memfd and the board's.
    fn form(&mut self, n: u32) {
        self.formed = true;
        self.listener = None;
        // Connections that never said HELLO have no place in the group.
        self.members.retain(|m| m.rank.is_some());
        self.members.sort_by_key(|m| m.rank);
        self.steps.clear();
        self.gave_up.clear();
        let board = os::memfd(Board::size(n as usize))
            .and_then(|fd| Ok((Board::map(fd.as_fd(), n as usize)?, fd)));
        let Ok(board) = board else {
            // Without a board the group cannot meet: close every connection, so each rank's
            // join fails instead of waiting.
            self.members.clear();
            return;
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
        let (local, remote): (Vec<&Member>, Vec<&Member>) =
            self.members.iter().partition(|m| m.pid == here);
        remote.into_iter().chain(local)
    }

    fn withdraw(&mut self, i: usize, r: &mut Reader<'_>) {
        let (Some(rank), Some(key)) = (self.members[i].rank, r.blob()) else {
            return self.disconnect(i);
        };
        let mut w = Writer::default();
        w.u8(to_rank::MISSING).blob(key);
        if !self.formed {
            // A rank that gives up joining: who has not joined yet.
            let n = self.n.unwrap_or(0);
            let missing: Vec<u32> = (0..n)
                .filter(|&k| !self.members.iter().any(|m| m.rank == Some(k)))
                .collect();
            w.u32(missing.len() as u32);
            for k in missing {
                w.u32(k);
            }
            let _ = self.members[i].conn.send(&w.bytes, &[]);
            return;
        }
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

/// What unit tests can see of a hub: how many joins it has received.
#[cfg(test)]
pub(crate) mod tests_hook {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    static HELLOS: Mutex<BTreeMap<[u8; 16], usize>> = Mutex::new(BTreeMap::new());

    pub(super) fn hello(session: &[u8; 16]) {
        *crate::base::registry::lock(&HELLOS)
            .entry(*session)
            .or_default() += 1;
    }

    /// Joins received by the hub of `session`, accepted or not.
    pub(crate) fn hellos(session: &[u8; 16]) -> usize {
        crate::base::registry::lock(&HELLOS)
            .get(session)
            .copied()
            .unwrap_or(0)
    }
}
