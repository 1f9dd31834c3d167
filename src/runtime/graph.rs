//! ACL graphs (`aclmdlRI`): the work queued on a stream between two calls, captured once and
//! replayed many times.

use std::sync::Arc;

use super::calls;
use super::host_fn::HostFns;
use super::{Runtime, Stream};
use crate::Result;
use crate::sys::{ACL_MODEL_RI_CAPTURE_MODE_GLOBAL, aclmdlRI};

/// A captured graph (`aclmdlRI`), destroyed (`aclmdlRIDestroy`) when the last clone drops.
/// Made by [`Stream::end_capture`]; pooled memory is captured with
/// [`SymPool::capture`](crate::SymPool::capture), which keeps the memory the graph uses.
#[derive(Clone, Debug)]
pub struct Graph {
    inner: Arc<GraphInner>,
}

struct GraphInner {
    rt: Runtime,
    raw: aclmdlRI,
    /// The replayable host functions the model calls: freed once it is destroyed.
    host_fns: HostFns,
}

impl std::fmt::Debug for GraphInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphInner")
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

// SAFETY: a model handle is an opaque value that may be used from any thread.
unsafe impl Send for GraphInner {}
// SAFETY: replaying from several threads is allowed by ACL; their order is the caller's.
unsafe impl Sync for GraphInner {}

impl Stream {
    /// Starts capturing the work queued on this stream (`aclmdlRICaptureBegin`, global mode:
    /// no thread may make synchronous copies meanwhile): it is kept in a graph, not run.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) without graph support; the runtime's
    /// error (the stream already captures, say).
    pub fn begin_capture(&self) -> Result<()> {
        let rt = self.runtime();
        // SAFETY: a live stream.
        unsafe { calls::aclmdlRICaptureBegin(rt, self.as_raw(), ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) }
    }

    /// Ends the capture begun on this stream (`aclmdlRICaptureEnd`): the graph.
    ///
    /// # Errors
    /// The runtime's error: the stream does not capture, a stream that joined did not join
    /// back, the capture was invalidated.
    pub fn end_capture(&self) -> Result<Graph> {
        let rt = self.runtime();
        calls::require::aclmdlRICaptureEnd(rt)?;
        let model = self.capture_model()?;
        let fns = rt.graph_host_fns();
        let host_fns = model.map(|m| fns.take(m)).unwrap_or_default();
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live stream and a valid out-pointer.
        let ended = unsafe { calls::aclmdlRICaptureEnd(rt, self.as_raw(), &mut raw) };
        if let Err(e) = ended {
            // If the stream still captures the model (the end was refused), it keeps its
            // host functions; else the library dropped it, and they never run.
            match (model, self.capture_model()) {
                (Some(m), Ok(Some(now))) if now == m => fns.put_back(m, host_fns),
                _ => drop(host_fns),
            }
            return Err(e);
        }
        Ok(Graph {
            inner: Arc::new(GraphInner {
                rt: rt.clone(),
                raw,
                host_fns,
            }),
        })
    }
}

impl Graph {
    /// Enqueues one replay of the graph on `stream` (`aclmdlRIExecuteAsync`).
    ///
    /// # Errors
    /// The runtime's error (`stream` captures, say).
    pub fn replay(&self, stream: &Stream) -> Result<()> {
        // SAFETY: a live model and stream.
        unsafe { calls::aclmdlRIExecuteAsync(&self.inner.rt, self.inner.raw, stream.as_raw()) }
    }

    /// The raw handle, for calls this crate does not wrap.
    pub fn as_raw(&self) -> aclmdlRI {
        self.inner.raw
    }

    /// Destroys the graph now (`aclmdlRIDestroy`, which waits for running replays), if this
    /// is its last handle; `Ok(false)` if other clones keep it.
    ///
    /// # Errors
    /// The runtime's error: a replay still runs after the library's wait.
    pub fn destroy(self) -> Result<bool> {
        let Ok(mut inner) = Arc::try_unwrap(self.inner) else {
            return Ok(false);
        };
        let raw = std::mem::replace(&mut inner.raw, std::ptr::null_mut());
        let destroyed = inner.destroy(raw);
        if destroyed.is_err() {
            std::mem::take(&mut inner.host_fns).leak();
        }
        destroyed.map(|()| true)
    }
}

impl GraphInner {
    fn destroy(&self, raw: aclmdlRI) -> Result<()> {
        // Made only where the library could capture, so it can destroy too.
        if calls::require::aclmdlRIDestroy(&self.rt).is_err() {
            return Ok(());
        }
        // SAFETY: a live model, destroyed exactly once (by the last clone, or `destroy`).
        unsafe { calls::aclmdlRIDestroy(&self.rt, raw) }
    }
}

impl Drop for GraphInner {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        if let Err(e) = self.destroy(self.raw) {
            // The model may still call its host functions.
            std::mem::take(&mut self.host_fns).leak();
            self.rt.record_drop_error(e);
        }
    }
}
