//! What the host program orders between streams: for each stream, how many tasks of each
//! other stream are known to be done before the stream's next task runs (its clock, merged
//! from the events it waits for), and what the host itself has seen done (synchronizes and
//! queries). A vector clock, advanced only by the calls that order work, never by timing, so
//! a question about order gets the same answer on every run and every rank.
//!
//! The collectives of a communicator ask it ([`crate::hccl::collective`]): HCCL, like NCCL,
//! runs them one at a time, so a collective on another stream than the one before must come
//! after it in this order.

use crate::base::handle::{EventHandle, StreamHandle};
use crate::base::lock::{RankedMutex, lock, ranks};

/// Tasks known done: for each stream, how many of its first tasks (a position: the task at
/// index `i` is done once `i + 1` are).
#[derive(Clone, Default)]
struct Clock(Vec<(StreamHandle, u64)>);

impl Clock {
    fn of(&self, stream: StreamHandle) -> u64 {
        self.0
            .iter()
            .find(|&&(s, _)| s == stream)
            .map_or(0, |&(_, done)| done)
    }

    fn advance(&mut self, stream: StreamHandle, done: u64) {
        match self.0.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, known)) => *known = (*known).max(done),
            None => self.0.push((stream, done)),
        }
    }

    fn merge(&mut self, other: &Clock) {
        for &(s, done) in &other.0 {
            self.advance(s, done);
        }
    }
}

struct Order {
    /// Each stream's clock: what is done before its next task.
    streams: Vec<(StreamHandle, Clock)>,
    /// Each event's latest record's clock: what is done once the record has run.
    events: Vec<(EventHandle, Clock)>,
    /// What a host thread has seen done (the process's threads share it: a thread that acts
    /// on another's synchronize has ordered itself after it some way the emulator cannot see).
    host: Clock,
}

impl Order {
    fn stream(&mut self, stream: StreamHandle) -> &mut Clock {
        let i = match self.streams.iter().position(|(s, _)| *s == stream) {
            Some(i) => i,
            None => {
                self.streams.push((stream, Clock::default()));
                self.streams.len() - 1
            }
        };
        &mut self.streams[i].1
    }

    fn event(&self, event: EventHandle) -> Option<&Clock> {
        self.events
            .iter()
            .find(|(e, _)| *e == event)
            .map(|(_, c)| c)
    }
}

static ORDER: RankedMutex<Order> = RankedMutex::new(
    ranks::STREAM_ORDER,
    Order {
        streams: Vec::new(),
        events: Vec::new(),
        host: Clock(Vec::new()),
    },
);

fn with<T>(f: impl FnOnce(&mut Order) -> T) -> T {
    f(&mut lock(&ORDER))
}

/// `event` was recorded on `stream` as its task number `before + 1`: once the record runs,
/// the `before` tasks ahead of it are done, and whatever the stream waited for.
pub(crate) fn recorded(event: EventHandle, stream: StreamHandle, before: u64) {
    with(|o| {
        let mut clock = o.stream(stream).clone();
        clock.advance(stream, before);
        o.events.retain(|(e, _)| *e != event);
        o.events.push((event, clock));
    });
}

/// `stream` waits for `event`'s latest record: its later tasks come after what the record
/// comes after.
pub(crate) fn waited(stream: StreamHandle, event: EventHandle) {
    with(|o| {
        if let Some(clock) = o.event(event).cloned() {
            o.stream(stream).merge(&clock);
        }
    });
}

/// The host saw `stream`'s first `done` tasks finish (a synchronize, a query that found it
/// idle).
pub(crate) fn host_saw_stream(stream: StreamHandle, done: u64) {
    with(|o| {
        let mut clock = o.stream(stream).clone();
        clock.advance(stream, done);
        o.host.merge(&clock);
    });
}

/// The host saw `event`'s latest record run.
pub(crate) fn host_saw_event(event: EventHandle) {
    with(|o| {
        if let Some(clock) = o.event(event).cloned() {
            o.host.merge(&clock);
        }
    });
}

/// Whether `stream`'s next task is known to come after the first `done` tasks of `earlier`.
pub(crate) fn follows(stream: StreamHandle, earlier: StreamHandle, done: u64) -> bool {
    with(|o| o.host.of(earlier) >= done || o.stream(stream).of(earlier) >= done)
}

/// `stream` is destroyed: its work is done (handles are never reused).
pub(crate) fn forget_stream(stream: StreamHandle) {
    with(|o| {
        o.streams.retain(|(s, _)| *s != stream);
        let clocks = o.streams.iter_mut().map(|(_, c)| c);
        for clock in clocks.chain(o.events.iter_mut().map(|(_, c)| c)) {
            clock.0.retain(|(s, _)| *s != stream);
        }
        o.host.0.retain(|(s, _)| *s != stream);
    });
}

/// `event` is destroyed.
pub(crate) fn forget_event(event: EventHandle) {
    with(|o| o.events.retain(|(e, _)| *e != event));
}
