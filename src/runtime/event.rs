//! ACL events: points in a stream's work that another stream, or the host, can wait for.

use std::sync::Arc;

use super::calls;
use super::{Runtime, Stream};
use crate::Result;
use crate::sys::aclrtEvent;

/// An ACL event (`aclrtCreateEvent`). Cheap to clone; destroyed when the last clone drops
/// (a record still queued completes, and its waiters still wait for it).
///
/// [`record`](Event::record) marks the point reached by the work enqueued on a stream so far;
/// [`Stream::wait`] makes another stream's later work wait for it, without the host waiting:
/// how a compute stream and a communication stream are ordered.
///
/// # Examples
/// ```
/// use symheap::{Event, PoolConfig, ReduceOp, Stream, SymPool, SymVec, emu};
///
/// emu::launch(2, |comm| {
///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
///     let compute = Stream::new(comm.runtime())?;
///     let on_compute = pool.on(&compute); // collectives enqueued on `compute`
///     let mut x = SymVec::from_host(&pool, &[1.0f32; 8])?;
///     on_compute.all_reduce_in_place(&mut x, ReduceOp::Sum)?;
///     let done = Event::new(comm.runtime())?;
///     done.record(&compute)?;
///     pool.stream().wait(&done)?; // the pool's stream waits for the reduction
///     assert_eq!(x.to_host()?, [2.0; 8]);
///     Ok(())
/// })?;
/// # Ok::<(), symheap::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Event {
    inner: Arc<EventInner>,
}

#[derive(Debug)]
struct EventInner {
    rt: Runtime,
    raw: aclrtEvent,
}

// SAFETY: ACL events are opaque handles that may be used from any thread.
unsafe impl Send for EventInner {}
// SAFETY: recording and waiting from several threads is allowed by ACL; their order is the
// caller's business, as in C.
unsafe impl Sync for EventInner {}

impl Event {
    /// Creates an event on the calling thread's current device.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) if the library has no events; the
    /// runtime's error.
    pub fn new(rt: &Runtime) -> Result<Self> {
        let mut raw = std::ptr::null_mut();
        // An event that streams may wait for, also in a graph capture, where the library
        // has the call (older ones have only plain events).
        if calls::require::aclrtCreateEventExWithFlag(rt).is_ok() {
            // SAFETY: valid out-pointer.
            unsafe { calls::aclrtCreateEventExWithFlag(rt, &mut raw, crate::sys::ACL_EVENT_SYNC) }?;
        } else {
            // SAFETY: valid out-pointer.
            unsafe { calls::aclrtCreateEvent(rt, &mut raw) }?;
        }
        Ok(Event {
            inner: Arc::new(EventInner {
                rt: rt.clone(),
                raw,
            }),
        })
    }

    /// Marks the end of the work enqueued on `stream` so far (`aclrtRecordEvent`); a new
    /// record replaces the previous one for later waits.
    ///
    /// # Errors
    /// The runtime's error.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        // SAFETY: a live event and stream.
        unsafe { calls::aclrtRecordEvent(&self.inner.rt, self.inner.raw, stream.as_raw()) }
    }

    /// Blocks the host until the last record has run (`aclrtSynchronizeEvent`).
    ///
    /// # Errors
    /// The runtime's error, e.g. when the stream failed before reaching the record.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a live event.
        unsafe { calls::aclrtSynchronizeEvent(&self.inner.rt, self.inner.raw) }
    }

    /// The raw handle, for calls this crate does not wrap.
    pub fn as_raw(&self) -> aclrtEvent {
        self.inner.raw
    }
}

impl Stream {
    /// Makes the work enqueued on this stream from now on wait until `event`'s last record
    /// has run (`aclrtStreamWaitEvent`); the host does not wait.
    ///
    /// # Errors
    /// The runtime's error.
    pub fn wait(&self, event: &Event) -> Result<()> {
        // SAFETY: a live stream and event.
        unsafe { calls::aclrtStreamWaitEvent(self.runtime(), self.as_raw(), event.as_raw()) }
    }
}

impl Drop for EventInner {
    fn drop(&mut self) {
        // An event exists only where the library could create one; without a destroy, it
        // lives as long as the process.
        if calls::require::aclrtDestroyEvent(&self.rt).is_err() {
            return;
        }
        // SAFETY: a live event, destroyed exactly once (by the last clone).
        let result = unsafe { calls::aclrtDestroyEvent(&self.rt, self.raw) };
        if let Err(e) = result {
            self.rt.record_drop_error(e);
        }
    }
}
