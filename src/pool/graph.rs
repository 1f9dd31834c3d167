//! Graph-safe pooling: [`SymPool::capture`] records a step as an ACL graph ([`SymGraph`]) and
//! keeps every block the step touched, or allocated, out of reuse until the graph drops (the
//! private graph pool of PyTorch, made symmetric: offsets given during a capture follow program
//! order like any others). Replays cost the pool nothing.

use std::sync::Arc;

use super::graph_hold::GraphHold;
use super::{PoolShared, SymPool};
use crate::runtime::{Graph, Stream};
use crate::{Error, Result};

/// A step of pooled work captured once and replayed many times: an ACL graph, and the hold on
/// the pool's memory it needs. It keeps its pool (and so the pool's windows and communicator)
/// alive, so the graph is always destroyed first, then windows, then the communicator.
pub struct SymGraph {
    /// Holds the ACL graph itself too (a sleep destroys it).
    hold: Arc<GraphHold>,
    pool: Arc<PoolShared>,
}

impl std::fmt::Debug for SymGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SymGraph")
            .field("model", &self.hold.model())
            .finish_non_exhaustive()
    }
}

impl SymPool {
    /// Captures the pooled work `step` enqueues on `stream` as a graph. `step` gets a handle
    /// on this pool bound to `stream` ([`on`](Self::on)); its collectives and copies are
    /// captured, not run, and run at each [`SymGraph::replay`].
    ///
    /// The step's pooled collectives and copies go on `stream` or on streams that joined the
    /// capture (they waited for an event recorded on it, and join back the same way before
    /// `step` returns): on a stream that takes no part they would run at once, outside the
    /// graph, and are refused, as is pooled work on a stream capturing a graph of its own
    /// (the pool would not keep that graph's memory). Host work joins with
    /// [`Stream::launch_replayable_host_fn`].
    ///
    /// Before capturing, the pool synchronizes. Every block the captured work uses, and every
    /// block allocated during the capture, stays reserved for the graph (not reused, even when
    /// dropped) until the graph drops; the offsets are the same on every rank. During the
    /// capture the pool refuses to grow, trim, attach a group, synchronize or verify, with a
    /// clear error: reserve and warm up before capturing. Host access to pooled memory
    /// (`from_host`, `to_host`, `host`) is refused while the capture runs, and a strict-symmetry
    /// pool ([`PoolConfig::strict_symmetry`](crate::PoolConfig::strict_symmetry)) cannot verify
    /// inside one, so its collectives are refused there. Blocks freed during the capture that
    /// earlier work may still use wait for the next synchronize. Host views (`host`,
    /// `host_mut`) of a buffer a live graph uses are refused (a replay may write it at any
    /// time); `to_host` and `copy_from_host` wait for the replays.
    ///
    /// # Examples
    /// ```
    /// use symheap::{PoolConfig, ReduceOp, Stream, SymPool, SymVec, emu};
    ///
    /// let sums = emu::launch(2, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
    ///     let stream = Stream::new(comm.runtime())?;
    ///     let mut x = SymVec::from_host(&pool, &[1.0f32; 8])?;
    ///     let graph = pool.capture(&stream, |s| s.all_reduce_in_place(&mut x, ReduceOp::Sum))?;
    ///     for _ in 0..3 {
    ///         graph.replay(&stream)?; // no pool call, no lock
    ///     }
    ///     x.to_host() // waits for the replays
    /// })?;
    /// assert_eq!(sums[0], [8.0; 8]); // 1 -> 2 -> 4 -> 8
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a capture of this pool is already in progress, or
    /// `stream` is the pool's own stream; what `step` returns (the capture is then ended and
    /// dropped); the runtime's error beginning or ending the capture.
    pub fn capture(
        &self,
        stream: &Stream,
        step: impl FnOnce(&SymPool) -> Result<()>,
    ) -> Result<SymGraph> {
        let shared = self.shared();
        if stream.same_as(&shared.stream) {
            return Err(Error::invalid(
                "capture: capture on a stream of your own, not the pool's (which the pool \
                 synchronizes)",
            ));
        }
        let hold;
        {
            let mut state = shared.lock();
            if state.capturing.is_some() {
                return Err(Error::invalid("capture: this pool is capturing already"));
            }
            shared.check_awake("capture")?;
            // Nothing queued is left to order against: a capture cannot wait for work outside.
            shared.flush_pending(&mut state)?;
            stream.synchronize()?;
            stream.begin_capture()?;
            let model = stream.capture_model().ok().flatten();
            hold = Arc::new(GraphHold::new(model.map_or(0, |m| m as usize)));
            state.capturing = Some(hold.clone());
            state.graphs.retain(|g| g.strong_count() > 0);
            state.graphs.push(Arc::downgrade(&hold));
        }
        let ran = step(&self.on(stream));
        let ended = stream.end_capture();
        shared.lock().capturing = None;
        let graph = match ended {
            Ok(graph) => graph,
            Err(e) => {
                // No graph: what it held goes back (at the next synchronize).
                shared.release_graph(&hold);
                return Err(e);
            }
        };
        hold.set_graph(graph);
        let graph = SymGraph {
            hold,
            pool: shared.clone(),
        };
        ran.map(|()| graph)
    }
}

impl PoolShared {
    /// The graph `hold` is gone: waits for its replays (a failure poisons the pool), then
    /// hands the freed blocks only it held to the pending list, which the next synchronize
    /// releases once the streams that used them are done.
    pub(crate) fn release_graph(&self, hold: &Arc<GraphHold>) {
        let replays = hold.replay_streams();
        if let Err(e) = self.wait_streams(replays.iter()) {
            self.runtime().record_drop_error(e);
        }
        hold.release();
        let mut state = self.lock();
        for mut h in std::mem::take(&mut state.held) {
            h.holds.retain(|g| !g.is_released());
            if h.holds.is_empty() {
                state.pending.push(super::Pending {
                    block: h.block,
                    streams: h.streams,
                });
            } else {
                state.held.push(h);
            }
        }
    }

    /// [`Error::InvalidArgument`] when `what`, on `stream`, would not be work of the pool's
    /// capture as the pool counts it: during the pool's capture, on a stream that takes no
    /// part in it (the work would run now, outside the graph) or captures another graph;
    /// outside it, on a capturing stream (the pool would not keep the memory that graph
    /// uses).
    pub(crate) fn check_in_capture(
        &self,
        state: &super::PoolState,
        stream: &Stream,
        what: &str,
    ) -> Result<()> {
        let model = stream.capture_model()?.map(|m| m as usize);
        let why = match (&state.capturing, model) {
            (None, None) => return Ok(()),
            (Some(hold), Some(m)) if hold.model() == m => return Ok(()),
            (Some(_), None) => {
                "the pool is capturing a graph, and this stream takes no part in the capture, \
                 so the work would run now instead of in the graph: enqueue it on the \
                 capturing stream, or first make this stream wait for an event recorded there"
            }
            (Some(_), Some(_)) => "the stream captures another graph than the pool's",
            (None, Some(_)) => {
                "the stream captures a graph that the pool does not know of, which would not \
                 keep the memory it uses from reuse: capture pooled work with SymPool::capture"
            }
        };
        Err(Error::invalid(format!("{what}: {why}")))
    }

    /// [`Error::InvalidArgument`] during a capture, for `what`, which the pool cannot do then.
    pub(crate) fn check_not_capturing(&self, state: &super::PoolState, what: &str) -> Result<()> {
        if state.capturing.is_some() {
            return Err(Error::invalid(format!(
                "{what} is not allowed while the pool captures a graph: do it before \
                 SymPool::capture (reserve() makes room ahead)"
            )));
        }
        Ok(())
    }
}

impl SymGraph {
    /// Enqueues one replay on `stream`: the captured work runs again, on the same buffers,
    /// taking fresh collective sequence numbers. Costs the pool nothing (no allocation, hash
    /// or pool lock); host access to the graph's buffers waits for the replay.
    ///
    /// A [sleep](SymPool::sleep) destroys the ACL graphs of its pool (after their replays),
    /// since their captured collectives were set up on windows the sleep deregisters: a graph
    /// captured before a sleep refuses to replay after it, saying to capture it again. Its
    /// blocks stay reserved until it drops, as before. A capture cannot span a sleep (a sleep
    /// refuses during a capture).
    ///
    /// # Errors
    /// [`Error::Asleep`] while the pool sleeps; [`Error::InvalidArgument`] for a graph
    /// captured before a sleep; the runtime's error.
    pub fn replay(&self, stream: &Stream) -> Result<()> {
        self.pool.check_awake("replay")?;
        // The graph's lock is held while the replay is enqueued: a sleep takes the graph
        // (and waits for its replays) only after.
        self.hold.replay(stream)
    }
}

impl Drop for SymGraph {
    fn drop(&mut self) {
        // The graph first: its destroy waits for replays still running. If it fails, the
        // graph may still run: its blocks are never reused.
        if let Some(Err(e)) = self.hold.take_graph().map(Graph::destroy) {
            self.pool.runtime().record_drop_error(e);
            return;
        }
        self.pool.release_graph(&self.hold);
    }
}
