//! ACL streams: ordered queues of device work.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::Runtime;
use super::calls;
use crate::Result;
use crate::sys::aclrtStream;

/// An ACL stream (`aclrtCreateStream`). Cheap to clone; destroyed when the last clone drops.
///
/// Work enqueued on a stream runs in order, asynchronously to the host:
/// [`synchronize`](Stream::synchronize) waits for it.
#[derive(Clone, Debug)]
pub struct Stream {
    inner: Arc<StreamInner>,
}

#[derive(Debug)]
struct StreamInner {
    rt: Runtime,
    raw: aclrtStream,
    /// Taken by a waiter that must act on what its synchronize reports before another waiter
    /// of this stream synchronizes ([`Stream::wait_turn`]).
    turn: Mutex<()>,
}

// SAFETY: ACL streams are opaque handles that may be used from any thread.
unsafe impl Send for StreamInner {}
// SAFETY: enqueueing on one stream from several threads is allowed by ACL; ordering between
// those threads is the caller's business, as in C.
unsafe impl Sync for StreamInner {}

impl Stream {
    /// Creates a stream on the calling thread's current device.
    ///
    /// # Errors
    /// The runtime's error, e.g. when no device is set on this thread.
    pub fn new(rt: &Runtime) -> Result<Self> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        unsafe { calls::aclrtCreateStream(rt, &mut raw) }?;
        Ok(Stream {
            inner: Arc::new(StreamInner {
                rt: rt.clone(),
                raw,
                turn: Mutex::new(()),
            }),
        })
    }

    /// Blocks until all work enqueued so far has run.
    ///
    /// # Errors
    /// The error of the first task that failed since the last synchronisation.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: `raw` is a live stream.
        unsafe { calls::aclrtSynchronizeStream(self.runtime(), self.as_raw()) }
    }

    /// One waiter's turn to synchronize the stream and act on the result: a pool holds it
    /// from before it synchronizes until it has poisoned itself on a failure. CANN reports a
    /// failed task to one synchronize only (hicann/runtime's `Stream::GetError` reads and
    /// clears the stream's error), so a second thread of the pool whose synchronize found the
    /// failure already taken must find the pool poisoned once it has its turn.
    pub(crate) fn wait_turn(&self) -> MutexGuard<'_, ()> {
        // The guard protects no data, only an order: a panic while holding it leaves nothing
        // inconsistent.
        self.inner.turn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The raw handle, for calls this crate does not wrap.
    pub fn as_raw(&self) -> aclrtStream {
        self.inner.raw
    }

    /// The runtime the stream belongs to.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.rt
    }

    /// Whether the stream is capturing a graph (`aclmdlRICaptureGetInfo`); `false` where the
    /// library has no graphs.
    ///
    /// # Errors
    /// The runtime's error.
    pub fn is_capturing(&self) -> Result<bool> {
        Ok(self.capture_model()?.is_some())
    }

    /// The model the stream captures into (`aclmdlRICaptureGetInfo`), if it captures.
    pub(crate) fn capture_model(&self) -> Result<Option<crate::sys::aclmdlRI>> {
        let rt = self.runtime();
        if calls::require::aclmdlRICaptureGetInfo(rt).is_err() {
            return Ok(None);
        }
        let mut status = crate::sys::ACL_MODEL_RI_CAPTURE_STATUS_NONE;
        let mut model = std::ptr::null_mut();
        // SAFETY: a live stream and valid out-pointers.
        unsafe { calls::aclmdlRICaptureGetInfo(rt, self.as_raw(), &mut status, &mut model) }?;
        Ok((status != crate::sys::ACL_MODEL_RI_CAPTURE_STATUS_NONE).then_some(model))
    }

    /// Whether two handles name the same stream.
    pub fn same_as(&self, other: &Stream) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A handle that does not keep the stream alive.
    pub(crate) fn downgrade(&self) -> WeakStream {
        WeakStream(Arc::downgrade(&self.inner))
    }
}

/// A stream not kept alive ([`Stream::downgrade`]).
#[derive(Clone, Debug)]
pub(crate) struct WeakStream(Weak<StreamInner>);

impl WeakStream {
    /// The stream, unless it was destroyed.
    pub(crate) fn upgrade(&self) -> Option<Stream> {
        self.0.upgrade().map(|inner| Stream { inner })
    }
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        // SAFETY: `raw` is a live stream, destroyed exactly once (by the last clone).
        let result = unsafe { calls::aclrtDestroyStream(&self.rt, self.raw) };
        if let Err(e) = result {
            self.rt.record_drop_error(e);
        }
    }
}
