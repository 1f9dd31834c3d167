//! ACL streams: ordered queues of device work.

use std::sync::Arc;

use super::Runtime;
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
        let code = unsafe { (rt.acl().aclrtCreateStream)(&mut raw) };
        rt.acl_check("aclrtCreateStream", code)?;
        Ok(Stream {
            inner: Arc::new(StreamInner {
                rt: rt.clone(),
                raw,
            }),
        })
    }

    /// Blocks until all work enqueued so far has run.
    ///
    /// # Errors
    /// The error of the first task that failed since the last synchronisation.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: `raw` is a live stream.
        let code = unsafe { (self.runtime().acl().aclrtSynchronizeStream)(self.as_raw()) };
        self.runtime().acl_check("aclrtSynchronizeStream", code)
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
        let rt = self.runtime();
        let Some(info) = rt.acl().aclmdlRICaptureGetInfo else {
            return Ok(false);
        };
        let mut status = crate::sys::ACL_MODEL_RI_CAPTURE_STATUS_NONE;
        // SAFETY: a live stream and a valid out-pointer (the model one may be NULL).
        let code = unsafe { info(self.as_raw(), &mut status, std::ptr::null_mut()) };
        rt.acl_check("aclmdlRICaptureGetInfo", code)?;
        Ok(status != crate::sys::ACL_MODEL_RI_CAPTURE_STATUS_NONE)
    }

    /// Whether two handles name the same stream.
    pub fn same_as(&self, other: &Stream) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// A boxed host function, as `aclrtLaunchHostFunc` passes it back to [`run_host_fn`].
type HostFn = Box<dyn FnOnce() + Send>;

/// Runs the host function `args` points to, once (`aclrtHostFunc`). A panic is caught and
/// logged: it must not unwind into the runtime's thread.
unsafe extern "C" fn run_host_fn(args: *mut std::ffi::c_void) {
    // SAFETY: `args` is the `Box<HostFn>` that `launch_host_fn` leaked for this one call.
    let f = unsafe { Box::from_raw(args.cast::<HostFn>()) };
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        tracing::error!("symheap: a host function launched on a stream panicked");
    }
}

impl Stream {
    /// Enqueues `f` to run on the host when the stream reaches it (`aclrtLaunchHostFunc`);
    /// the stream's later work waits for it to return. A rank's host compute, modelled as
    /// stream work. It must not synchronize this stream (it would wait for itself). A panic
    /// in `f` is caught and logged. Refused on a stream that captures a graph (a replay would
    /// call it again).
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) if the library lacks the call; the
    /// runtime's error.
    pub fn launch_host_fn(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        let rt = self.runtime();
        let launch = Runtime::optional("aclrtLaunchHostFunc", rt.acl().aclrtLaunchHostFunc)?;
        // A captured host function runs at every replay: a closure that runs once cannot be.
        if self.is_capturing()? {
            return Err(crate::Error::invalid(
                "launch_host_fn: the stream is capturing a graph, whose replays would call the \
                 host function again; it runs once",
            ));
        }
        let args = Box::into_raw(Box::new(Box::new(f) as HostFn));
        // SAFETY: a live stream; `run_host_fn` takes back the box `args` points to, once.
        let code = unsafe { launch(self.as_raw(), Some(run_host_fn), args.cast()) };
        let launched = rt.acl_check("aclrtLaunchHostFunc", code);
        if launched.is_err() {
            // SAFETY: refused, so the runtime never calls `run_host_fn` with `args`.
            drop(unsafe { Box::from_raw(args) });
        }
        launched
    }
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        // SAFETY: `raw` is a live stream, destroyed exactly once (by the last clone).
        let code = unsafe { (self.rt.acl().aclrtDestroyStream)(self.raw) };
        if let Err(e) = self.rt.acl_check("aclrtDestroyStream", code) {
            self.rt.record_drop_error(e);
        }
    }
}
