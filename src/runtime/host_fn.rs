//! Host functions on a stream (`aclrtLaunchHostFunc`): a rank's host work, in stream order.
//!
//! A function launched on a capturing stream is part of the graph and runs at every replay,
//! so it must be callable many times ([`Stream::launch_replayable_host_fn`]) and live as
//! long as the graph: the runtime keeps it under the model's handle while the capture runs,
//! then the [`Graph`](super::Graph) that the capture made owns it until the model is
//! destroyed (a failed capture frees it; the library may reuse a freed model's handle, so
//! nothing is looked up by handle after that).

use std::ffi::c_void;
use std::sync::Mutex;

use super::Stream;
use super::calls;
use crate::Result;
use crate::sys::aclmdlRI;

/// A host function that runs once, as `aclrtLaunchHostFunc` passes it back to
/// [`run_once`].
type OnceFn = Box<dyn FnOnce() + Send>;

/// A host function that runs every time its task runs (each replay of a graph).
type ReplayableFn = Box<dyn Fn() + Send + Sync>;

/// The replayable host functions of one model. Each is boxed twice: the runtime holds a
/// thin pointer to the inner (fat) box, which must not move.
#[derive(Default)]
#[allow(clippy::vec_box)] // the second box is the stable address the runtime calls through
pub(super) struct HostFns(Vec<Box<ReplayableFn>>);

impl HostFns {
    /// Never frees them: for a model whose destroy failed, which may still call them.
    pub(super) fn leak(self) {
        std::mem::forget(self);
    }
}

/// Runs `f`, catching a panic: it must not unwind into the runtime's thread.
fn call_caught(f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        tracing::error!("symheap: a host function launched on a stream panicked");
    }
}

/// `aclrtHostFunc` for [`Stream::launch_host_fn`]: runs the function once and frees it.
unsafe extern "C" fn run_once(args: *mut c_void) {
    // SAFETY: `args` is the `Box<OnceFn>` that `launch_host_fn` leaked for this one call.
    let f = unsafe { Box::from_raw(args.cast::<OnceFn>()) };
    call_caught(f);
}

/// `aclrtHostFunc` for a captured [`Stream::launch_replayable_host_fn`]: runs the function,
/// which the runtime keeps.
unsafe extern "C" fn run_kept(args: *mut c_void) {
    // SAFETY: `args` points to a `ReplayableFn` that `GraphHostFns`, then the model's
    // `Graph`, keeps until the model is destroyed (or its capture failed), so it outlives
    // every call.
    let f = unsafe { &*args.cast::<ReplayableFn>() };
    call_caught(f);
}

/// The replayable host functions captured into each model whose capture is in progress.
#[derive(Default)]
pub(super) struct GraphHostFns {
    kept: Mutex<Vec<(usize, Box<ReplayableFn>)>>,
}

impl GraphHostFns {
    fn keep(&self, model: aclmdlRI, f: Box<ReplayableFn>) -> *mut c_void {
        let args = std::ptr::from_ref::<ReplayableFn>(&*f).cast_mut().cast();
        self.lock().push((model as usize, f));
        args
    }

    /// Frees the function `args` points to, which the runtime refused to launch.
    fn forget(&self, args: *mut c_void) {
        self.lock()
            .retain(|(_, f)| !std::ptr::eq(std::ptr::from_ref::<ReplayableFn>(f), args.cast()));
    }

    /// Takes the functions of `model`, whose capture ends.
    pub(super) fn take(&self, model: aclmdlRI) -> HostFns {
        let mut kept = self.lock();
        let (mine, others) = std::mem::take(&mut *kept)
            .into_iter()
            .partition(|(m, _)| *m == model as usize);
        *kept = others;
        HostFns(mine.into_iter().map(|(_, f)| f).collect())
    }

    /// Gives back the functions of `model`, whose capture goes on (its end was refused).
    pub(super) fn put_back(&self, model: aclmdlRI, fns: HostFns) {
        self.lock()
            .extend(fns.0.into_iter().map(|f| (model as usize, f)));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(usize, Box<ReplayableFn>)>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Stream {
    /// Enqueues `f` to run on the host when the stream reaches it (`aclrtLaunchHostFunc`);
    /// the stream's later work waits for it to return. A rank's host compute, modelled as
    /// stream work. It must not synchronize this stream (it would wait for itself). A panic
    /// in `f` is caught and logged. Refused on a stream that captures a graph, whose replays
    /// would call it again: use [`launch_replayable_host_fn`](Self::launch_replayable_host_fn)
    /// there.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) if the library lacks the call;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) on a capturing stream; the
    /// runtime's error.
    pub fn launch_host_fn(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        calls::require::aclrtLaunchHostFunc(self.runtime())?;
        if self.capture_model()?.is_some() {
            return Err(crate::Error::invalid(
                "launch_host_fn: the stream is capturing a graph, whose replays would call the \
                 host function again; it runs once (launch_replayable_host_fn takes one that \
                 can run at every replay)",
            ));
        }
        self.launch_once(f)
    }

    /// Launches `f` (`aclrtLaunchHostFunc`) to run once: the stream is not capturing.
    fn launch_once(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        let args = Box::into_raw(Box::new(Box::new(f) as OnceFn));
        // SAFETY: a live stream; `run_once` takes back the box `args` points to, once.
        let launched = unsafe {
            calls::aclrtLaunchHostFunc(self.runtime(), self.as_raw(), Some(run_once), args.cast())
        };
        if launched.is_err() {
            // SAFETY: refused, so the runtime never calls `run_once` with `args`.
            drop(unsafe { Box::from_raw(args) });
        }
        launched
    }

    /// Enqueues `f` like [`launch_host_fn`](Self::launch_host_fn), on any stream, capturing
    /// or not. On a capturing stream it becomes part of the graph and runs at every replay,
    /// in the graph's order; the graph keeps `f` until it is destroyed (a model ended or
    /// destroyed through the raw C calls keeps it until the runtime drops). A rank's compute
    /// step in a captured decode loop, on the emulator.
    ///
    /// # Examples
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use symheap::{Runtime, Stream};
    ///
    /// let rt = Runtime::emulated()?;
    /// rt.set_device(0)?;
    /// let stream = Stream::new(&rt)?;
    /// let calls = Arc::new(AtomicUsize::new(0));
    /// stream.begin_capture()?;
    /// let c = calls.clone();
    /// stream.launch_replayable_host_fn(move || {
    ///     c.fetch_add(1, Ordering::Relaxed);
    /// })?;
    /// let graph = stream.end_capture()?;
    /// for _ in 0..3 {
    ///     graph.replay(&stream)?;
    /// }
    /// stream.synchronize()?;
    /// assert_eq!(calls.load(Ordering::Relaxed), 3);
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// As for [`launch_host_fn`](Self::launch_host_fn), except on a capturing stream.
    pub fn launch_replayable_host_fn(&self, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        let rt = self.runtime();
        calls::require::aclrtLaunchHostFunc(rt)?;
        let Some(model) = self.capture_model()? else {
            return self.launch_once(f);
        };
        // Kept before the launch: the capture may end, and the graph run, on another thread
        // as soon as the runtime has the task.
        let fns = rt.graph_host_fns();
        let args = fns.keep(model, Box::new(Box::new(f)));
        // SAFETY: a live stream; `args` points to a function the runtime keeps until the
        // model is destroyed, and `run_kept` only borrows it.
        let launched =
            unsafe { calls::aclrtLaunchHostFunc(rt, self.as_raw(), Some(run_kept), args) };
        if launched.is_err() {
            fns.forget(args);
        }
        launched
    }
}
