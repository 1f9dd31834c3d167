//! Point-to-point transfers: `HcclSend`, `HcclRecv` and `HcclBatchSendRecv`.
//!
//! Only the two ranks of a pair take part, so a transfer takes no collective sequence number:
//! the k-th send from rank s to rank d meets the k-th receive at d from s, numbered per ordered
//! pair in host order when the call is queued ([`crate::hccl::comm::Messages`]). The two
//! ranks meet in the pair's mailboxes on the board ([`crate::ipc::board::Mailbox`]), each writing
//! only its own side and waking the other through the board's futex:
//!
//! 1. Each side waits until both sides are finished with the pair's earlier messages (so the
//!    other's header is no longer read), then posts its header for message k (count, type;
//!    the sender adds its chunk size and where its buffer is if it lies in a symmetric
//!    window), and reads the other side's. Different counts or types fail both sides with
//!    `HCCL_E_PARA`, each naming both calls.
//! 2. The sender stages its buffer chunk by chunk in its section for the receiver of its
//!    point-to-point area ([`crate::hccl::comm::Group::p2p`]): two chunks, so it writes one while
//!    the receiver copies the other out. Each chunk is announced in the sender's `progress`
//!    word and acknowledged in the receiver's. When the sender's buffer lies in a window the
//!    receiver also has (windows are collective), the receiver instead copies the whole
//!    message straight out of its heap mapping of the sender's memory and says so (the
//!    sender stages nothing then).
//! 3. A send is finished once every byte is acknowledged (HCCL's sends are synchronous), so
//!    its buffer and staging section are free when its stream moves on.
//!
//! A side that fails (timeout, mismatch, a lost peer) marks the message finished, so its peer
//! fails at once instead of waiting for the exec timeout.
//!
//! On a capturing stream the checked call is kept in the graph: each replay numbers its
//! transfers afresh, in host order when the replay is launched, as an eager call would be when
//! queued, so a replay pairs with the peer's replay (or eager call) of the same order. A batch progresses all its items
//! together, so a ring where every rank sends to the next and receives from the previous one
//! in one batch does not deadlock; items of one pair run one after another, in order.

use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};

use crate::sys::{ACL_ERROR_RT_INTERNAL_ERROR, HcclDataType, HcclResult, HcclSendRecvType};

use crate::acl::graph;
use crate::acl::memory::{self, Pins};
use crate::acl::stream::{self, TaskFailure};
use crate::base::counters::{self, Counter};
use crate::base::errors::{Fail, HcclRes, hccl_fail, hccl_non_null, para};
use crate::base::handle::{CommHandle, StreamHandle};
use crate::base::lock::lock;
use crate::base::patience::Patience;
use crate::base::primitives::copy;
use crate::hccl::collective::stream_error;
use crate::hccl::comm::{self, Comm};
use crate::hccl::window::Window;
use crate::ipc::board::{Mailbox, Side};
use crate::ipc::rendezvous::{HUB_LOST, RvError, deadline};
use symheap_types::DataType;

#[cfg(test)]
mod tests;

/// A receiver's `progress` value saying it copied the whole message out of the sender's window.
const DIRECT: u64 = u32::MAX as u64;

/// One send or receive as the C entry point received it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item {
    pub(crate) kind: HcclSendRecvType,
    pub(crate) buf: usize,
    pub(crate) count: u64,
    pub(crate) dtype: HcclDataType,
    pub(crate) peer: u32,
}

/// `HcclSend`, `HcclRecv` and `HcclBatchSendRecv` (called `name`) once their items are read:
/// checks them, then queues the transfers on `stream`.
///
/// Message numbers are taken only when the transfers are queued: a call rejected by its
/// checks takes none (as in HCCL, where it creates no operation), so the peer's matching call
/// pairs with this rank's next accepted call of the pair. Items with a count of 0 move
/// nothing and take no number.
pub(crate) fn call(
    comm: CommHandle,
    stream: StreamHandle,
    items: &[Item],
    name: &'static str,
) -> HcclRes {
    let comm = comm::lookup(comm)?;
    let handle = stream;
    let stream = stream::lookup(stream).map_err(stream_error)?;
    let mut transfers = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = |f: Fail<HcclResult>| Fail {
            msg: at_item(items.len(), i, f.msg),
            ..f
        };
        if check_pair(&comm, item).map_err(at)? {
            transfers.push(Transfer::check(&comm, item).map_err(at)?);
        }
    }
    if transfers.is_empty() {
        return Ok(());
    }
    if stream.capture().is_some() {
        // Kept whole: each replay numbers fresh copies (the buffers stay pinned by the
        // graph).
        let recipe = Arc::new(move || {
            let mut messages = lock(&comm.messages);
            Ok(numbered(&comm, &mut messages, transfers.clone(), name))
        });
        return graph::submit(&stream, handle, recipe).map_err(stream_error);
    }
    // Numbered and queued under the lock, so numbers are taken in queue order, and only once
    // the stream accepted the task: a refused call leaves no `Batch` behind, whose drop would
    // mark messages finished that were never numbered.
    let mut messages = lock(&comm.messages);
    stream
        .enqueue_with(|| numbered(&comm, &mut messages, transfers, name))
        .map_err(stream_error)
}

/// The checks [`call`] makes of one item, made without queuing anything (for a send or
/// receive kept in a group until `HcclGroupEnd`, [`crate::abi::group`]): whether it moves
/// anything (a count of 0 does not).
pub(crate) fn check(comm: &Comm, item: &Item) -> HcclRes<bool> {
    if !check_pair(comm, item)? {
        return Ok(false);
    }
    // The pins the check takes are dropped at once: `call` takes them again when queuing.
    Transfer::check(comm, item).map(|_| true)
}

/// The stream task that runs `transfers`, numbered now as the pairs' next messages.
fn numbered(
    comm: &Arc<Comm>,
    messages: &mut comm::Messages,
    mut transfers: Vec<Transfer>,
    name: &'static str,
) -> stream::Task {
    for t in &mut transfers {
        let counter = match t.send {
            true => &mut messages.sent[t.peer as usize],
            false => &mut messages.received[t.peer as usize],
        };
        t.msg = *counter;
        *counter += 1;
    }
    let mut batch = Batch {
        comm: comm.clone(),
        transfers,
    };
    Box::new(move || {
        let comm = batch.comm.clone();
        run(&comm, &mut batch.transfers).map_err(|f| {
            comm.set_async_error(f.code);
            TaskFailure {
                code: ACL_ERROR_RT_INTERNAL_ERROR,
                msg: format!(
                    "{name} on rank {} failed with {}: {}",
                    comm.rank, f.code, f.msg
                ),
            }
        })
    })
}

/// `msg`, prefixed with the item it is about when a batch has several.
fn at_item(items: usize, i: usize, msg: String) -> String {
    match items {
        1 => msg,
        _ => format!("item {i}: {msg}"),
    }
}

fn is_send(kind: HcclSendRecvType) -> bool {
    kind == HcclSendRecvType::HCCL_SEND
}

/// The checks of an item's type and peer: a send or a receive, with a peer other than this
/// rank. Whether it moves anything (a count of 0 does not).
fn check_pair(comm: &Comm, item: &Item) -> HcclRes<bool> {
    if item.kind != HcclSendRecvType::HCCL_SEND && item.kind != HcclSendRecvType::HCCL_RECV {
        return para(format!(
            "sendRecvType {} is neither HCCL_SEND nor HCCL_RECV",
            item.kind.0
        ));
    }
    if item.peer >= comm.n {
        return para(format!(
            "peer rank {} is not below rankSize {}",
            item.peer, comm.n
        ));
    }
    if item.peer == comm.rank {
        return para(format!(
            "peer rank {} is this rank: a rank cannot send to or receive from itself",
            item.peer
        ));
    }
    Ok(item.count != 0)
}

/// Where a transfer is.
#[derive(Clone, Copy, Debug)]
enum State {
    /// Waiting for both sides to finish the pair's earlier messages, to post its header.
    Start,
    /// Its header posted, waiting for the other side's.
    Header,
    /// Sender: `posted` of `chunks` chunks staged. While `deciding`, the receiver has not yet
    /// said whether it reads the window directly.
    Sending {
        posted: u64,
        chunks: u64,
        deciding: bool,
    },
    /// Receiver: `got` of `chunks` chunks of `chunk` bytes copied out of the sender's section
    /// at `src`.
    Receiving {
        got: u64,
        chunks: u64,
        chunk: usize,
        src: usize,
    },
    Done,
}

/// A checked send or receive: message `msg` of its pair (numbered when queued). A captured
/// one is cloned for each replay, sharing its pins.
#[derive(Clone)]
struct Transfer {
    send: bool,
    peer: u32,
    msg: u64,
    buf: usize,
    count: u64,
    dtype: HcclDataType,
    bytes: usize,
    /// Sender: bytes per staged chunk.
    chunk: usize,
    /// Sender: the window its buffer lies in (kept alive while queued) and the offset there.
    window: Option<(Arc<Window>, usize)>,
    state: State,
    _pins: Arc<Pins>,
}

impl Transfer {
    /// The checks of the item's type and buffer, made when it is called.
    fn check(comm: &Comm, item: &Item) -> HcclRes<Transfer> {
        let Some(dtype) = DataType::try_from(item.dtype).ok() else {
            return para(format!("data type {} is not supported", item.dtype));
        };
        hccl_non_null(item.buf, "buf")?;
        let bytes = usize::try_from(item.count)
            .ok()
            .and_then(|c| c.checked_mul(dtype.size()));
        let Some(bytes) = bytes else {
            return para(format!("count {} overflows", item.count));
        };
        let pins = memory::pin_range(item.buf, bytes).or_else(|e| para(format!("buf: {e}")))?;
        let send = is_send(item.kind);
        // Half a section: the area holds one section per rank.
        let chunk = comm.group.p2p[comm.rank as usize].len() / comm.n as usize / 2 / 64 * 64;
        if chunk == 0 {
            return hccl_fail(
                HcclResult::HCCL_E_MEMORY,
                "the staging buffer is too small for a section per rank",
            );
        }
        chunks(bytes, chunk)?;
        let window = match send {
            true => comm.find_window(item.buf, bytes),
            false => None,
        };
        Ok(Transfer {
            send,
            peer: item.peer,
            msg: 0,
            buf: item.buf,
            count: item.count,
            dtype: item.dtype,
            bytes,
            chunk,
            window,
            state: State::Start,
            _pins: Arc::new(pins),
        })
    }

    fn done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// What the transfer is, for messages.
    fn what(&self) -> String {
        let (verb, dir) = match self.send {
            true => ("send", "to"),
            false => ("receive", "from"),
        };
        format!(
            "{verb} of {} x {} {dir} rank {} (message #{} of the pair)",
            self.count, self.dtype, self.peer, self.msg
        )
    }

    /// This side's mailbox and the other side's.
    fn mailboxes<'a>(&self, comm: &'a Comm) -> (&'a Mailbox, &'a Mailbox) {
        let board = comm.group.rv.board();
        let (me, peer) = (comm.rank as usize, self.peer as usize);
        match self.send {
            true => (
                board.mailbox(me, peer, Side::Sender),
                board.mailbox(me, peer, Side::Receiver),
            ),
            false => (
                board.mailbox(peer, me, Side::Receiver),
                board.mailbox(peer, me, Side::Sender),
            ),
        }
    }

    /// Advances as far as it can without waiting: whether it got anywhere.
    fn poll(&mut self, comm: &Comm) -> HcclRes<bool> {
        let mut moved = false;
        while self.step(comm)? {
            moved = true;
        }
        if moved {
            comm.group.rv.board().notify();
        }
        Ok(moved)
    }

    /// One step (a header, a chunk): whether it made one.
    fn step(&mut self, comm: &Comm) -> HcclRes<bool> {
        let (mine, theirs) = self.mailboxes(comm);
        let k = self.msg;
        // Read before anything else of theirs: a side writes `done` last, so once it says it
        // is done with this message, what is read after is final.
        let their_done = theirs.done.load(Acquire);
        let moved = match self.state {
            State::Start => {
                let ready = mine.done.load(Acquire) >= k && their_done >= k;
                if ready {
                    self.post_header(mine);
                }
                ready
            }
            State::Header => theirs.header.load(Acquire) == k + 1 && self.meet(comm, theirs)?,
            State::Sending { .. } => self.send_chunk(comm, mine, theirs),
            State::Receiving { .. } => self.receive_chunk(mine, theirs),
            State::Done => return Ok(false),
        };
        if !moved {
            self.check_peer(comm, theirs, their_done)?;
        }
        Ok(moved)
    }

    /// Posts this side's header for its message.
    fn post_header(&mut self, mine: &Mailbox) {
        mine.count.store(self.count, Release);
        mine.dtype.store(self.dtype.0 as u32 as u64, Release);
        mine.chunk.store(self.chunk as u64, Release);
        let (slot, id, offset) = match &self.window {
            Some((w, offset)) => (w.slot as u64 + 1, w.id, *offset as u64),
            None => (0, 0, 0),
        };
        mine.window_slot.store(slot, Release);
        mine.window_id.store(id, Release);
        mine.window_offset.store(offset, Release);
        mine.header.store(self.msg + 1, Release);
        self.state = State::Header;
    }

    /// Both headers are posted: compares them and starts moving data. Always a step.
    fn meet(&mut self, comm: &Comm, theirs: &Mailbox) -> HcclRes<bool> {
        let count = theirs.count.load(Acquire);
        let dtype = HcclDataType(theirs.dtype.load(Acquire) as u32 as i32);
        if (count, dtype) != (self.count, self.dtype) {
            let (s, r) = match self.send {
                true => (comm.rank, self.peer),
                false => (self.peer, comm.rank),
            };
            let ((sc, st), (rc, rt)) = match self.send {
                true => ((self.count, self.dtype), (count, dtype)),
                false => ((count, dtype), (self.count, self.dtype)),
            };
            return para(format!(
                "message #{} from rank {s} to rank {r} does not match: rank {s} sends {sc} x \
                 {st}, rank {r} receives {rc} x {rt}",
                self.msg
            ));
        }
        if self.send {
            self.state = State::Sending {
                posted: 0,
                chunks: chunks(self.bytes, self.chunk)?,
                deciding: self.window.is_some(),
            };
            return Ok(true);
        }
        let (mine, _) = self.mailboxes(comm);
        let slot = theirs.window_slot.load(Acquire);
        if slot != 0 {
            let id = theirs.window_id.load(Acquire);
            let offset = theirs.window_offset.load(Acquire) as usize;
            if self.read_window(comm, slot as usize - 1, id, offset) {
                mine.progress.store(progress(self.msg, DIRECT), Release);
                counters::inc(Counter::DirectReceives);
                self.finish(mine);
                return Ok(true);
            }
            // Declined: the sender stages.
            mine.progress.store(progress(self.msg, 0), Release);
        }
        let chunk = usize::try_from(theirs.chunk.load(Acquire)).unwrap_or(usize::MAX);
        let area = &comm.group.p2p[self.peer as usize];
        // Checked: the chunk size is the peer's word (init made every rank's area the same
        // size, so it fits, but nothing here may overflow on a bad word).
        let two = chunk.checked_mul(2);
        let end = two.and_then(|two| (comm.rank as usize).checked_mul(two)?.checked_add(two));
        let Some(section) = end
            .filter(|&e| chunk != 0 && e <= area.len())
            .map(|e| e - 2 * chunk)
        else {
            return hccl_fail(
                HcclResult::HCCL_E_INTERNAL,
                format!(
                    "rank {}'s staging section for this rank (two chunks of {chunk} bytes) does \
                     not fit its area as this rank maps it ({} bytes)",
                    self.peer,
                    area.len()
                ),
            );
        };
        self.state = State::Receiving {
            got: 0,
            chunks: chunks(self.bytes, chunk)?,
            chunk,
            src: area.addr() + section,
        };
        Ok(true)
    }

    /// Receiver: copies the whole message out of this rank's mapping of the sender's window
    /// at `slot`, registered as `id`, if this rank has that very window (not another one
    /// registered in the slot since) and the message lies inside it. Otherwise the sender
    /// stages the message.
    fn read_window(&self, comm: &Comm, slot: usize, id: u64, offset: usize) -> bool {
        let window = lock(&comm.windows)
            .iter()
            .find(|w| w.slot == slot && w.id == id)
            .cloned();
        let Some(w) = window else { return false };
        if offset
            .checked_add(self.bytes)
            .is_none_or(|end| end > w.size)
        {
            return false;
        }
        // SAFETY: the destination is this transfer's pinned buffer; the source lies inside
        // the sender's window as mapped in this rank's heap, kept mapped by `w`; the sender
        // does not touch its buffer until this rank acknowledges the message.
        unsafe { copy(self.buf, w.peer_addr(self.peer, offset), self.bytes) };
        true
    }

    /// Sender: stages the next chunk when its half of the section is free, or finishes once
    /// every chunk is acknowledged. Whether it moved.
    fn send_chunk(&mut self, comm: &Comm, mine: &Mailbox, theirs: &Mailbox) -> bool {
        let State::Sending {
            posted,
            chunks,
            deciding,
        } = self.state
        else {
            return false;
        };
        let acked = progress_of(theirs.progress.load(Acquire), self.msg);
        if acked == Some(DIRECT) || (posted == chunks && acked == Some(chunks)) {
            self.finish(mine);
            return true;
        }
        if deciding {
            if acked.is_none() {
                return false;
            }
            self.state = State::Sending {
                posted,
                chunks,
                deciding: false,
            };
            return true;
        }
        let acked = acked.unwrap_or(0);
        if posted == chunks || posted >= acked + 2 {
            return false;
        }
        let chunk = self.chunk;
        let at = posted as usize * chunk;
        let len = chunk.min(self.bytes - at);
        let section = comm.group.p2p[comm.rank as usize].addr() + self.peer as usize * 2 * chunk;
        let half = (posted % 2) as usize * chunk;
        // SAFETY: the source is this transfer's pinned buffer; the destination is half of this
        // rank's section for the peer inside its mapped area (`check` sized the chunk so that
        // every section fits), which the peer has acknowledged reading (`posted < acked + 2`)
        // and no other transfer uses (a pair's messages run one at a time).
        unsafe { copy(section + half, self.buf + at, len) };
        mine.progress.store(progress(self.msg, posted + 1), Release);
        self.state = State::Sending {
            posted: posted + 1,
            chunks,
            deciding,
        };
        true
    }

    /// Receiver: copies out the next chunk once the sender posted it. Whether it moved.
    fn receive_chunk(&mut self, mine: &Mailbox, theirs: &Mailbox) -> bool {
        let State::Receiving {
            got,
            chunks,
            chunk,
            src,
        } = self.state
        else {
            return false;
        };
        let posted = progress_of(theirs.progress.load(Acquire), self.msg).unwrap_or(0);
        if got >= posted {
            return false;
        }
        let at = got as usize * chunk;
        let len = chunk.min(self.bytes - at);
        let half = (got % 2) as usize * chunk;
        // SAFETY: the destination is this transfer's pinned buffer; the source is half of
        // the sender's section for this rank, inside its area as mapped here (checked in
        // `meet`), which the sender wrote before posting the chunk and does not rewrite until
        // this rank acknowledges it.
        unsafe { copy(self.buf + at, src + half, len) };
        mine.progress.store(progress(self.msg, got + 1), Release);
        if got + 1 == chunks {
            counters::inc(Counter::StagedReceives);
            self.finish(mine);
        } else {
            self.state = State::Receiving {
                got: got + 1,
                chunks,
                chunk,
                src,
            };
        }
        true
    }

    /// Marks the message finished on this side.
    fn finish(&mut self, mine: &Mailbox) {
        mine.done.fetch_max(self.msg + 1, AcqRel);
        self.state = State::Done;
    }

    /// Fails if the other side will never make the next move: it gave up on this message,
    /// destroyed its communicator before taking it, or is lost.
    fn check_peer(&self, comm: &Comm, theirs: &Mailbox, their_done: u64) -> HcclRes {
        let (p, k) = (self.peer, self.msg);
        let fail = |msg: String| {
            hccl_fail(
                HcclResult::HCCL_E_TIMEOUT,
                format!("rank {} in the {}: {msg}", comm.rank, self.what()),
            )
        };
        if their_done > k {
            return fail(format!(
                "rank {p} gave up on this message (it failed there: see its error)"
            ));
        }
        let limit = theirs.limit.load(Acquire);
        if limit != 0 && k + 1 >= limit {
            return fail(format!(
                "rank {p} destroyed its communicator after {} message(s) of the pair and will \
                 never take part",
                limit - 1
            ));
        }
        let lost = comm.group.rv.lost(p as usize);
        if let Some(e) = &lost {
            comm.group.rv.blame(e);
        }
        match lost {
            None => Ok(()),
            Some(RvError::HubLost) => fail(HUB_LOST.into()),
            Some(e) => fail(format!(
                "rank {p} is lost ({e:?}): its process exited or was killed"
            )),
        }
    }

    /// What this transfer waits for, for messages.
    fn waiting_for(&self) -> &'static str {
        match (self.state, self.send) {
            (State::Start, _) => "for the pair's earlier messages to finish",
            (State::Header, true) => "for the matching receive",
            (State::Header, false) => "for the matching send",
            (State::Sending { .. }, _) => "for the peer to receive the data",
            (State::Receiving { .. }, _) => "for the peer's data",
            (State::Done, _) => "for nothing",
        }
    }
}

/// How many `chunk`-byte chunks move `bytes`: `HCCL_E_PARA` when the count would not stay
/// below `u32::MAX`, since a `progress` word holds it in 32 bits (and `u32::MAX` means "read
/// directly").
fn chunks(bytes: usize, chunk: usize) -> HcclRes<u64> {
    let n = bytes.div_ceil(chunk) as u64;
    if n >= DIRECT {
        return para(format!(
            "{bytes} bytes take {n} chunks of {chunk} bytes through the staging area: at most \
             {} fit one transfer (raise hcclBufferSize or split the message)",
            DIRECT - 1
        ));
    }
    Ok(n)
}

/// A `progress` word: `n` of message `k`.
fn progress(k: u64, n: u64) -> u64 {
    ((k + 1) << 32) | n
}

/// The count of message `k` in `progress` word `word`, if it is about that message.
fn progress_of(word: u64, k: u64) -> Option<u64> {
    (word >> 32 == (k + 1) & 0xFFFF_FFFF).then_some(word & 0xFFFF_FFFF)
}

/// Runs `transfers` on the stream thread until all are done, one fails, or none moves for the
/// exec timeout.
fn run(comm: &Comm, transfers: &mut [Transfer]) -> HcclRes {
    let board = comm.group.rv.board();
    let mut patience = Patience::new();
    loop {
        let mut failure = None;
        let woke = board.wait_until(
            || {
                let mut moved = false;
                for t in transfers.iter_mut() {
                    match t.poll(comm) {
                        Ok(m) => moved |= m,
                        Err(f) => {
                            failure = Some(f);
                            return true;
                        }
                    }
                }
                if moved {
                    return true;
                }
                patience.check(|| format!("on rank {} {}", comm.rank, waiting(transfers)));
                transfers.iter().all(Transfer::done)
            },
            deadline(comm.timeout),
        );
        if let Some(f) = failure {
            return Err(f);
        }
        if transfers.iter().all(Transfer::done) {
            return Ok(());
        }
        if !woke {
            return hccl_fail(
                HcclResult::HCCL_E_TIMEOUT,
                format!(
                    "rank {} waited {:.1} s {}",
                    comm.rank,
                    comm.timeout.as_secs_f64(),
                    waiting(transfers)
                ),
            );
        }
        // Something moved: the exec timeout (and the warning) count from here.
        patience = Patience::new();
    }
}

/// A queued call's transfers. Dropped with some unfinished (it failed, or its stream skipped
/// it after an earlier failure), it marks them finished, so their peers fail at once and this
/// rank's later messages of the pairs can go ahead.
struct Batch {
    comm: Arc<Comm>,
    transfers: Vec<Transfer>,
}

impl Drop for Batch {
    fn drop(&mut self) {
        let comm = &self.comm;
        let mut any = false;
        for t in self.transfers.iter_mut().filter(|t| !t.done()) {
            let (mine, _) = t.mailboxes(comm);
            t.finish(mine);
            any = true;
        }
        if any {
            comm.group.rv.board().notify();
        }
    }
}

/// What the unfinished `transfers` wait for.
fn waiting(transfers: &[Transfer]) -> String {
    let what: Vec<String> = transfers
        .iter()
        .filter(|t| !t.done())
        .map(|t| format!("in the {} {}", t.what(), t.waiting_for()))
        .collect();
    what.join("; ")
}
