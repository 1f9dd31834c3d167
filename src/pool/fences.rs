//! Stream-ordered reuse: memory freed while queued work may still use it goes back to the
//! heap at once (the model of `cudaMallocAsync`). Later work on the streams that used it runs
//! after that work anyway; a user on another stream must wait for them first. `Fences` keeps,
//! per stream, how many such frees there were since the last synchronize, and which streams
//! have already waited for them: an allocation for stream `T` makes `T` wait (an event, no
//! host wait) for every other stream with frees `T` has not waited for.
//!
//! Which blocks are reused, and where, depends only on the order of the calls; the events only
//! order work, so every rank still gets the same offsets.
//!
//! It waits for more than it must (every earlier free of the other stream, not only those that
//! overlap the new block), and keeps one event per stream.

use crate::Result;
use crate::runtime::{Event, Stream};

/// Per stream that freed memory since the last synchronize.
#[derive(Default)]
pub(crate) struct Fences {
    entries: Vec<Fence>,
}

struct Fence {
    stream: Stream,
    /// Frees of memory this stream's queued work may use, since the last synchronize.
    frees: u64,
    /// Recorded on the stream after the work of the first `recorded` frees.
    event: Option<Event>,
    recorded: u64,
    /// For each stream that has waited for this one: how many frees it waited for.
    waited: Vec<(Stream, u64)>,
}

impl Fences {
    /// A block that `stream`'s queued work may use was freed.
    pub(crate) fn freed_on(&mut self, stream: &Stream) {
        match self.entries.iter_mut().find(|f| f.stream.same_as(stream)) {
            Some(f) => f.frees += 1,
            None => self.entries.push(Fence {
                stream: stream.clone(),
                frees: 1,
                event: None,
                recorded: 0,
                waited: Vec::new(),
            }),
        }
    }

    /// Whether any memory was freed since the last synchronize while queued work may use it.
    pub(crate) fn any(&self) -> bool {
        !self.entries.is_empty()
    }

    /// Makes `user` wait for every other stream's work on memory freed so far.
    ///
    /// # Errors
    /// The runtime's error recording or waiting for an event.
    pub(crate) fn order_before(&mut self, user: &Stream) -> Result<()> {
        for f in &mut self.entries {
            if f.stream.same_as(user) {
                continue;
            }
            let waited = f.waited.iter().position(|(s, _)| s.same_as(user));
            if waited.is_some_and(|i| f.waited[i].1 == f.frees) {
                continue;
            }
            if f.recorded < f.frees || f.event.is_none() {
                let event = match &f.event {
                    Some(e) => e.clone(),
                    None => Event::new(f.stream.runtime())?,
                };
                event.record(&f.stream)?;
                f.event = Some(event);
                f.recorded = f.frees;
            }
            if let Some(event) = &f.event {
                user.wait(event)?;
            }
            match waited {
                Some(i) => f.waited[i].1 = f.frees,
                None => f.waited.push((user.clone(), f.frees)),
            }
        }
        Ok(())
    }

    /// The streams that freed memory since the last synchronize.
    pub(crate) fn streams(&self) -> impl Iterator<Item = &Stream> {
        self.entries.iter().map(|f| &f.stream)
    }

    /// Every stream has been waited for by the host: nothing is left to order.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }
}
