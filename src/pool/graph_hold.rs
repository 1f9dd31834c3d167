//! [`GraphHold`]: what a captured graph holds of its pool. Below both the pool's state, which
//! keeps the holds, and the capture itself (`graph.rs`), which makes them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::runtime::{Graph, Stream};
use crate::{Error, Result};

/// What a graph holds of the pool: the blocks it touched stay out of reuse while it lives,
/// and host access to them waits for the streams it was replayed on.
pub(crate) struct GraphHold {
    /// The model the capture records into (`aclmdlRI`, as an address).
    model: usize,
    /// The graph, once captured; taken when the graph drops or its pool sleeps.
    graph: Mutex<Option<Graph>>,
    /// What its pool did that destroyed the graph, if it did: "slept" or "shrank".
    destroyed_by: OnceLock<&'static str>,
    /// Set when the graph is dropped: its blocks may be reused.
    released: AtomicBool,
    /// The streams the graph was replayed on.
    replayed_on: Mutex<Vec<Stream>>,
}

impl GraphHold {
    pub(super) fn new(model: usize) -> Self {
        GraphHold {
            model,
            graph: Mutex::new(None),
            destroyed_by: OnceLock::new(),
            released: AtomicBool::new(false),
            replayed_on: Mutex::new(Vec::new()),
        }
    }

    /// The model the capture records into.
    pub(super) fn model(&self) -> usize {
        self.model
    }

    /// Keeps the captured graph.
    pub(super) fn set_graph(&self, graph: Graph) {
        *self.graph.lock().unwrap_or_else(|e| e.into_inner()) = Some(graph);
    }

    /// Takes the graph, for its destroy.
    pub(super) fn take_graph(&self) -> Option<Graph> {
        self.graph.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Destroys the graph because its pool `did` something that deregisters its windows
    /// ("slept", "shrank"; its destroy waits for its replays); later replays are refused,
    /// saying so.
    pub(super) fn destroy_because(&self, did: &'static str) -> Result<()> {
        let mut graph = self.graph.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(g) = graph.take() {
            let _ = self.destroyed_by.set(did);
            g.destroy()?;
        }
        Ok(())
    }

    /// Enqueues a replay on `stream`, with the graph's lock held.
    pub(super) fn replay(&self, stream: &Stream) -> Result<()> {
        let graph = self.graph.lock().unwrap_or_else(|e| e.into_inner());
        match &*graph {
            Some(g) => {
                self.replayed_on(stream);
                g.replay(stream)
            }
            None => match self.destroyed_by.get() {
                Some(did) => Err(Error::invalid(format!(
                    "replay: the graph was captured before its pool {did}, which destroyed it \
                     (its collectives were set up on windows that are gone): capture it again"
                ))),
                None => Err(Error::invalid("replay: the graph is being dropped")),
            },
        }
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
