//! [`GraphHold`]: what a captured graph holds of its pool. Below both the pool's state, which
//! keeps the holds, and the capture itself (`graph.rs`), which makes them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::runtime::Stream;

/// What a graph holds of the pool: the blocks it touched stay out of reuse while it lives,
/// and host access to them waits for the streams it was replayed on.
pub(crate) struct GraphHold {
    /// The model the capture records into (`aclmdlRI`, as an address).
    model: usize,
    /// Set when the graph is dropped: its blocks may be reused.
    released: AtomicBool,
    /// The streams the graph was replayed on.
    replayed_on: Mutex<Vec<Stream>>,
}

impl GraphHold {
    pub(super) fn new(model: usize) -> Self {
        GraphHold {
            model,
            released: AtomicBool::new(false),
            replayed_on: Mutex::new(Vec::new()),
        }
    }

    /// The model the capture records into.
    pub(super) fn model(&self) -> usize {
        self.model
    }

    /// Marks the graph dropped: its blocks may be reused.
    pub(super) fn release(&self) {
        self.released.store(true, Ordering::Release);
    }

    /// Notes that a replay was enqueued on `stream`.
    pub(super) fn replayed_on(&self, stream: &Stream) {
        let mut on = self.replayed_on.lock().unwrap_or_else(|e| e.into_inner());
        if !on.iter().any(|s| s.same_as(stream)) {
            on.push(stream.clone());
        }
    }

    /// Whether the graph was dropped.
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// The streams replays of the graph were enqueued on.
    pub(crate) fn replay_streams(&self) -> Vec<Stream> {
        self.replayed_on
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
