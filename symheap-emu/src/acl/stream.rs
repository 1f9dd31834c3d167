//! Streams: a thread per stream running a FIFO of tasks, so host calls that enqueue work
//! return at once and stream-ordering bugs show up as they would on a device.
//!
//! A failed task's failure is kept (the first one) until the synchronizes that cover it have
//! reported it: every host thread whose synchronize (`aclrtSynchronizeStream`, its
//! `WithTimeout` form, `aclrtSynchronizeDevice`) waits for that task gets it, not only the
//! first to wake, and the failure is cleared once the last of those still waiting has
//! reported it, so a synchronize that begins after that finds a clean stream. What happens to
//! the tasks after it depends on the stream's failure mode (`aclrtSetStreamFailureMode`): in
//! `ACL_CONTINUE_ON_FAILURE` mode (the default) they run; in `ACL_STOP_ON_FAILURE` mode they
//! are skipped (dropped, releasing what they pinned) and new tasks are refused, until the
//! failure is cleared.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use crate::sys::{
    ACL_CONTINUE_ON_FAILURE, ACL_ERROR_RT_INTERNAL_ERROR, ACL_ERROR_RT_INVALID_HANDLE,
    ACL_ERROR_RT_PARAM_INVALID, ACL_ERROR_RT_STREAM_CAPTURED, ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
    ACL_STOP_ON_FAILURE, aclError,
};

use crate::acl::{device, order};
use crate::base::counters::{self, Counter, STREAM_THREAD_PREFIX};
use crate::base::errors::{AclResult, Fail, acl_fail, invalid, panic_message, param};
use crate::base::handle::{ModelHandle, StreamHandle};
use crate::base::lock::{Condvar, RankedMutex, lock, ranks};
use crate::base::registry::Registry;
use crate::ipc::host_threads::{self, StreamAt};

/// Why a task failed: the code `aclrtSynchronizeStream` returns and the detail it records.
#[derive(Clone, Debug)]
pub(crate) struct TaskFailure {
    pub(crate) code: aclError,
    pub(crate) msg: String,
}

/// Work for a stream thread.
pub(crate) type Task = Box<dyn FnOnce() -> Result<(), TaskFailure> + Send>;

/// A failed task's failure, kept until the synchronizes that cover it have reported it.
struct Kept {
    failure: TaskFailure,
    /// The failed task's number: tasks are numbered from 0 in the order they were queued.
    task: u64,
}

struct Queue {
    tasks: VecDeque<Task>,
    enqueued: u64,
    completed: u64,
    failure: Option<Kept>,
    /// The target of each synchronize waiting now: `enqueued` when it began, so it waits for
    /// (and covers) the tasks numbered below it.
    waiting: Vec<u64>,
    shutdown: bool,
    /// The stream's own failure mode is `ACL_STOP_ON_FAILURE`.
    stop: bool,
}

struct Shared {
    /// The device the stream was created on: whose context's failure mode applies too.
    device: device::Device,
    queue: RankedMutex<Queue>,
    /// Signalled when a task is enqueued or the stream shuts down.
    work: Condvar,
    /// Signalled when a task completes.
    done: Condvar,
    /// Where the stream's task waits now, for the deadlock check: host threads
    /// synchronizing the stream wait there too.
    at: Arc<StreamAt>,
    /// The model the stream captures into ([`crate::acl::graph`]), or 0.
    capture: AtomicUsize,
}

/// A live stream.
pub(crate) struct Stream {
    handle: StreamHandle,
    shared: Arc<Shared>,
    worker: RankedMutex<Option<JoinHandle<()>>>,
}

impl Queue {
    /// Whether a failure now stops the stream: its own mode, or its device's context's.
    fn stopped(&self, device: device::Device) -> bool {
        self.failure.is_some() && (self.stop || device::stops_on_failure(device))
    }

    /// Ends the wait of a synchronize that began with `target`.
    fn stop_waiting(&mut self, target: u64) {
        if let Some(i) = self.waiting.iter().position(|&t| t == target) {
            self.waiting.swap_remove(i);
        }
    }

    /// What a synchronize that waited for the tasks below `target`, and has stopped waiting,
    /// reports: the kept failure if it is of one of those tasks (a later task's is left to
    /// the synchronizes that wait for it). The failure is cleared once no synchronize still
    /// waiting covers it: each of those reports it too.
    fn report(&mut self, target: u64) -> AclResult {
        let Some(kept) = self.failure.as_ref().filter(|k| k.task < target) else {
            return Ok(());
        };
        let fail = Fail {
            code: kept.failure.code,
            msg: kept.failure.msg.clone(),
        };
        let task = kept.task;
        if REPORT_TO_ONE.load(Ordering::Relaxed) || !self.waiting.iter().any(|&t| t > task) {
            self.failure = None;
        }
        Err(fail)
    }
}

static STREAMS: Registry<StreamHandle, Stream> = Registry::new(ranks::STREAMS);

/// Whether a failure goes to the first synchronize that covers it only, as on CANN
/// ([`report_failures_to_one`]).
static REPORT_TO_ONE: AtomicBool = AtomicBool::new(false);

/// `true`: a failed stream reports its failure as CANN does, to the first synchronize that
/// covers it, which clears it (hicann/runtime's `Stream::GetError`), so a second host thread
/// waiting for the same work gets success; `false` (the default) restores the emulator's
/// rule, every synchronize that covers it reports it (see the emulator's docs, *Streams*).
///
/// A test hook, process-global: tests of the layers above use it to check that they do not
/// count on every waiter seeing a failure. Reset it when done.
pub fn report_failures_to_one(on: bool) {
    REPORT_TO_ONE.store(on, Ordering::Relaxed);
}

/// `aclrtCreateStream`: needs a current device, like the real runtime.
pub(crate) fn create() -> AclResult<StreamHandle> {
    let device = device::current()?;
    let shared = Arc::new(Shared {
        device,
        queue: RankedMutex::new(
            ranks::STREAM_QUEUE,
            Queue {
                tasks: VecDeque::new(),
                enqueued: 0,
                completed: 0,
                failure: None,
                waiting: Vec::new(),
                shutdown: false,
                stop: false,
            },
        ),
        work: Condvar::new(),
        done: Condvar::new(),
        at: Arc::new(StreamAt::new()),
        capture: AtomicUsize::new(0),
    });
    let handle = StreamHandle::fresh();
    let worker = {
        let shared = shared.clone();
        thread::Builder::new()
            .name(format!(
                "{STREAM_THREAD_PREFIX}-{:x}",
                handle.raw() & 0xFFFF_FFFF
            ))
            .spawn(move || run(&shared))
    };
    let worker = worker.or_else(|e| {
        acl_fail(
            ACL_ERROR_RT_INTERNAL_ERROR,
            format!("cannot start the stream thread: {e}"),
        )
    })?;
    STREAMS.insert(
        handle,
        Arc::new(Stream {
            handle,
            shared,
            worker: RankedMutex::new(ranks::STREAM_WORKER, Some(worker)),
        }),
    );
    counters::inc(Counter::Streams);
    Ok(handle)
}

/// The live stream `handle` (null is `ACL_ERROR_RT_PARAM_INVALID`: the emulator has no
/// default stream).
pub(crate) fn lookup(handle: StreamHandle) -> AclResult<Arc<Stream>> {
    if handle.is_null() {
        return acl_fail(
            ACL_ERROR_RT_PARAM_INVALID,
            "stream is NULL: the emulator has no default stream",
        );
    }
    STREAMS.get(handle).map_or_else(
        || {
            acl_fail(
                ACL_ERROR_RT_INVALID_HANDLE,
                format!("{handle:#x} is not a live stream"),
            )
        },
        Ok,
    )
}

/// `aclrtSetStreamFailureMode`: `ACL_CONTINUE_ON_FAILURE` (0) or `ACL_STOP_ON_FAILURE` (1).
/// Stop mode applies to the whole context, as on Atlas A2 / A3: every stream of the stream's
/// device stops on failure, until `aclrtResetDevice`. A NULL stream (the default stream, which
/// the emulator does not have) names the calling thread's device's context.
pub(crate) fn set_failure_mode(handle: StreamHandle, mode: u64) -> AclResult {
    if mode != ACL_CONTINUE_ON_FAILURE && mode != ACL_STOP_ON_FAILURE {
        return param(format!(
            "failure mode {mode} is not ACL_CONTINUE_ON_FAILURE (0) or ACL_STOP_ON_FAILURE (1)"
        ));
    }
    let device = if handle.is_null() {
        device::current()?
    } else {
        let stream = lookup(handle)?;
        lock(&stream.shared.queue).stop = mode == ACL_STOP_ON_FAILURE;
        stream.shared.device
    };
    if mode == ACL_STOP_ON_FAILURE {
        device::set_stop_on_failure(device);
    }
    Ok(())
}

/// `aclrtDestroyStream`: runs what is queued, then stops and joins the thread. A failure still
/// pending on the stream is discarded. A NULL stream is `ACL_ERROR_INVALID_PARAM` (CANN's null
/// check; the default stream cannot be destroyed).
pub(crate) fn destroy(handle: StreamHandle) -> AclResult {
    if handle.is_null() {
        return invalid("stream is NULL: the default stream cannot be destroyed");
    }
    if lookup(handle)?.capture().is_some() {
        return acl_fail(
            ACL_ERROR_RT_STREAM_CAPTURED,
            "the stream is capturing: end the capture first",
        );
    }
    let Some(stream) = STREAMS.remove(handle) else {
        return acl_fail(
            ACL_ERROR_RT_INVALID_HANDLE,
            format!("{handle:#x} is not a live stream"),
        );
    };
    lock(&stream.shared.queue).shutdown = true;
    stream.shared.work.notify_all();
    if let Some(worker) = lock(&stream.worker).take() {
        // The worker catches every task panic, so joining cannot fail in practice.
        let _ = worker.join();
    }
    order::forget_stream(handle);
    counters::dec(Counter::Streams);
    Ok(())
}

/// `aclrtSynchronizeStream`: waits for everything enqueued so far, then reports the failure of
/// any of that work (see [`wait_for`]).
pub(crate) fn synchronize(handle: StreamHandle) -> AclResult {
    synchronize_within(handle, None)
}

/// The limit of a synchronize's `timeout` argument in ms: `None` for -1 (no limit); 0 and
/// below -1 are 107000, as hicann/runtime's `ApiErrorDecorator::StreamSynchronize` and
/// `DeviceSynchronize` check.
pub(crate) fn sync_timeout(timeout: i32) -> AclResult<Option<Instant>> {
    match timeout {
        -1 => Ok(None),
        t if t > 0 => Ok(Some(
            Instant::now() + std::time::Duration::from_millis(t as u64),
        )),
        t => param(format!(
            "timeout {t} is neither -1 (no limit) nor a positive number of ms"
        )),
    }
}

/// `aclrtStreamQuery`: whether everything enqueued so far has run (107027 while the stream
/// captures, as `ApiErrorDecorator::StreamQuery` answers).
pub(crate) fn query(handle: StreamHandle) -> AclResult<bool> {
    let stream = lookup(handle)?;
    if stream.capture().is_some() {
        return acl_fail(
            ACL_ERROR_RT_STREAM_CAPTURED,
            "the stream is capturing: it cannot be queried",
        );
    }
    let q = lock(&stream.shared.queue);
    let (done, idle) = (q.completed, q.completed == q.enqueued);
    drop(q);
    if idle {
        order::host_saw_stream(handle, done);
    }
    Ok(idle)
}

/// `aclrtSynchronizeDevice`: every stream of the current device, synchronized until `until`;
/// 107027 (before waiting for any) if one captures, as `Context::Synchronize` checks. The
/// first failure is reported; every stream's failure is reported to this wait (see
/// [`wait_for`]), not only the first.
pub(crate) fn synchronize_device(until: Option<Instant>) -> AclResult {
    let device = device::current()?;
    let streams: Vec<(StreamHandle, Arc<Stream>)> = STREAMS
        .all()
        .into_iter()
        .filter(|(_, s)| s.device() == device)
        .collect();
    if streams.iter().any(|(_, s)| s.capture().is_some()) {
        return acl_fail(
            ACL_ERROR_RT_STREAM_CAPTURED,
            "a stream of the device is capturing: the device cannot be synchronized",
        );
    }
    // Every stream is waited for (and its failure reported to this wait), the first failure
    // returned.
    let mut result = Ok(());
    for (_, s) in &streams {
        result = result.and(wait_for(s, until));
    }
    result
}

/// [`synchronize`], waiting until `until` at most (`ACL_ERROR_RT_STREAM_SYNC_TIMEOUT` then,
/// the failure kept).
pub(crate) fn synchronize_within(handle: StreamHandle, until: Option<Instant>) -> AclResult {
    let stream = lookup(handle)?;
    wait_for(&stream, until)
}

/// Waits until `until` at most for what `stream` has queued, then reports the failure of any of
/// that work: to every thread waiting for it, not only the first to wake (CANN reports it to
/// one; see the emulator's docs, *Streams*). The failure is cleared once no synchronize still
/// waiting covers it. A wait that times out reports nothing and leaves the failure kept.
pub(crate) fn wait_for(stream: &Stream, until: Option<Instant>) -> AclResult {
    if stream.capture().is_some() {
        return acl_fail(
            ACL_ERROR_RT_STREAM_CAPTURED,
            "the stream is capturing: its work runs when the graph is replayed",
        );
    }
    let shared = &stream.shared;
    // For the deadlock check, this thread waits where the stream's task waits, until this
    // wait ends however it ends (a wait with a timeout ends by itself: not counted).
    let _waiting = until
        .is_none()
        .then(|| host_threads::synchronizing(&shared.at));
    let mut q = lock(&shared.queue);
    let target = q.enqueued;
    // Registered while it waits, so that a failure it covers is kept for it.
    q.waiting.push(target);
    let mut timed_out = false;
    while q.completed < target {
        q = match until {
            None => shared.done.wait(q),
            Some(until) => {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    timed_out = true;
                    break;
                }
                shared.done.wait_timeout(q, left).0
            }
        };
    }
    q.stop_waiting(target);
    if timed_out {
        return acl_fail(
            ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
            "the stream's work did not finish within the timeout",
        );
    }
    order::host_saw_stream(stream.handle, target);
    q.report(target)
}

impl Stream {
    /// The device the stream was created on.
    pub(crate) fn device(&self) -> device::Device {
        self.shared.device
    }

    /// The model the stream captures into, if it captures.
    pub(crate) fn capture(&self) -> Option<ModelHandle> {
        match self.shared.capture.load(Ordering::Acquire) {
            0 => None,
            model => Some(ModelHandle::from_raw(model)),
        }
    }

    /// Starts (`Some`) or ends (`None`) the stream's capture.
    pub(crate) fn set_capture(&self, model: Option<ModelHandle>) {
        self.shared
            .capture
            .store(model.map_or(0, ModelHandle::raw), Ordering::Release);
    }

    /// Where the stream's task waits now, for the deadlock check: the stream's own tasks
    /// record it, and a host thread synchronizing the stream waits there too.
    pub(crate) fn at(&self) -> Arc<StreamAt> {
        Arc::clone(&self.shared.at)
    }

    /// Queues `task` behind everything already enqueued. A stream stopped by a failure in
    /// stop-on-failure mode refuses new tasks until synchronized, with the failure's code.
    pub(crate) fn enqueue(&self, task: Task) -> AclResult {
        self.enqueue_with(|| task)
    }

    /// As [`Stream::enqueue`], returning the task's position: it is done once the stream has
    /// completed that many tasks ([`crate::acl::order`] counts in positions).
    pub(crate) fn enqueue_counted(&self, task: Task) -> AclResult<u64> {
        self.enqueue_then(|| task, |enqueued| enqueued)
    }

    /// As [`Stream::enqueue`], but the task is made by `make` only once the stream accepts
    /// it (under the queue's lock, so nothing else is queued in between): what `make` commits
    /// (a message number) is never committed for a refused task.
    pub(crate) fn enqueue_with(&self, make: impl FnOnce() -> Task) -> AclResult {
        self.enqueue_then(make, drop)
    }

    /// Queues the task `make` makes, then tells `then` how many tasks the stream has been
    /// given (this one the last), under the queue's lock.
    fn enqueue_then<T>(
        &self,
        make: impl FnOnce() -> Task,
        then: impl FnOnce(u64) -> T,
    ) -> AclResult<T> {
        let mut q = lock(&self.shared.queue);
        if q.shutdown {
            return acl_fail(ACL_ERROR_RT_INVALID_HANDLE, "the stream is being destroyed");
        }
        if q.stopped(self.shared.device) {
            let (code, msg) = q
                .failure
                .as_ref()
                .map_or((ACL_ERROR_RT_INTERNAL_ERROR, ""), |k| {
                    (k.failure.code, k.failure.msg.as_str())
                });
            return acl_fail(
                code,
                format!(
                    "the stream stopped at a failed task (stop-on-failure mode) and takes no \
                     new task until aclrtSynchronizeStream reports the failure (to every \
                     thread waiting for it): {msg}"
                ),
            );
        }
        q.tasks.push_back(make());
        q.enqueued += 1;
        let then = then(q.enqueued);
        drop(q);
        self.shared.work.notify_one();
        Ok(then)
    }
}

/// The stream thread: runs tasks in order until shut down and drained.
fn run(shared: &Shared) {
    loop {
        let (task, skip) = {
            let mut q = lock(&shared.queue);
            loop {
                if let Some(task) = q.tasks.pop_front() {
                    break (task, q.stopped(shared.device));
                }
                if q.shutdown {
                    return;
                }
                q = shared.work.wait(q);
            }
        };
        // The task (and every pin it holds) is gone before completion is announced, so a
        // synchronized host may unmap at once. A skipped task is dropped inside
        // `catch_unwind` too: a panic in a destructor must not end the stream thread.
        let outcome = match catch_unwind(AssertUnwindSafe(move || {
            if skip {
                drop(task);
                Ok(())
            } else {
                task()
            }
        })) {
            Ok(result) => result,
            Err(payload) => Err(TaskFailure {
                code: ACL_ERROR_RT_INTERNAL_ERROR,
                msg: format!(
                    "internal error: a stream task panicked: {}",
                    panic_message(payload.as_ref())
                ),
            }),
        };
        let mut q = lock(&shared.queue);
        if let Err(failure) = outcome {
            let task = q.completed;
            q.failure.get_or_insert(Kept { failure, task });
        }
        q.completed += 1;
        drop(q);
        shared.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::ptr::null_mut;

    use super::*;
    use crate::sys::{
        ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_CONTEXT_NULL, ACL_SUCCESS, aclrtMemcpyKind,
        aclrtStream, aclrtStreamStatus,
    };
    use crate::testutil::{DevBuf, acl, assert_clean, gate, ok, recent};
    use crate::{GRANULARITY as G, test_lock, testing::counters};

    fn create() -> aclrtStream {
        let mut s = null_mut();
        // SAFETY: valid out-pointer.
        ok(unsafe { (acl().aclrtCreateStream)(&mut s) });
        s
    }

    /// The first byte of the buffer, as each host-function call of the test below saw it.
    static CALLS: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

    unsafe extern "C" fn note(args: *mut std::ffi::c_void) {
        // SAFETY: the test passes a pointer to a live device buffer's first byte, which the
        // emulator maps as host memory; the stream ran the copy before this call.
        let first = unsafe { *args.cast::<u8>() };
        CALLS.lock().unwrap().push(first);
    }

    #[test]
    fn a_host_function_runs_in_stream_order() {
        let _g = test_lock();
        on_stream(0, |s, buf| {
            let launch = acl().aclrtLaunchHostFunc.expect("filled");
            CALLS.lock().unwrap().clear();
            // SAFETY: valid stream and buffer; `note` reads the buffer's first byte.
            unsafe {
                ok((acl().aclrtMemsetAsync)(buf.ptr, G, 7, G, s));
                ok(launch(s, Some(note), buf.ptr));
                ok((acl().aclrtMemsetAsync)(buf.ptr, G, 9, G, s));
                ok(launch(s, Some(note), buf.ptr));
                assert_eq!(
                    launch(s, None, buf.ptr),
                    crate::sys::ACL_ERROR_RT_PARAM_INVALID
                );
                assert_eq!(
                    launch(null_mut(), Some(note), buf.ptr),
                    crate::sys::ACL_ERROR_RT_PARAM_INVALID
                );
                ok((acl().aclrtSynchronizeStream)(s));
            }
            // Each call saw the memset before it, and none after.
            assert_eq!(*CALLS.lock().unwrap(), [7, 9]);
        });
        assert_clean();
    }

    #[test]
    fn queries_and_synchronizes_with_timeouts_see_queued_work_and_every_stream_of_the_device() {
        let _g = test_lock();
        let a = acl();
        let (query, sync_for) = (
            a.aclrtStreamQuery.unwrap(),
            a.aclrtSynchronizeStreamWithTimeout.unwrap(),
        );
        let (device, device_for) = (
            a.aclrtSynchronizeDevice.unwrap(),
            a.aclrtSynchronizeDeviceWithTimeout.unwrap(),
        );
        let status = |s: aclrtStream| {
            let mut st = aclrtStreamStatus(-1);
            // SAFETY: a valid out-pointer.
            ok(unsafe { query(s, &mut st) });
            st
        };
        // SAFETY: plain device binding; the emulator validates handles.
        unsafe { ok((a.aclrtSetDevice)(3)) };
        let (s, other) = (create(), create());
        assert_eq!(status(s), aclrtStreamStatus::ACL_STREAM_STATUS_COMPLETE);
        let open = gate(other);
        assert_eq!(
            status(other),
            aclrtStreamStatus::ACL_STREAM_STATUS_NOT_READY
        );
        // SAFETY: live handles; a NULL status is checked.
        unsafe {
            assert_eq!(query(s, null_mut()), ACL_ERROR_INVALID_PARAM);
            for bad in [0, -2] {
                assert_eq!(sync_for(s, bad), ACL_ERROR_RT_PARAM_INVALID);
                assert_eq!(device_for(bad), ACL_ERROR_RT_PARAM_INVALID);
            }
            ok(sync_for(s, 1000));
            // The gated stream does not finish in time, alone or as part of the device.
            assert_eq!(sync_for(other, 20), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
            assert_eq!(device_for(20), ACL_ERROR_RT_STREAM_SYNC_TIMEOUT);
        }
        drop(open);
        // SAFETY: live handles.
        unsafe { ok(device()) };
        assert_eq!(status(other), aclrtStreamStatus::ACL_STREAM_STATUS_COMPLETE);
        // A capturing stream of the device refuses all three, before any wait.
        // SAFETY: live handles.
        unsafe {
            ok((a.aclmdlRICaptureBegin.unwrap())(s, 0));
            let mut st = aclrtStreamStatus(-1);
            assert_eq!(query(s, &mut st), ACL_ERROR_RT_STREAM_CAPTURED);
            assert_eq!(sync_for(s, 1000), ACL_ERROR_RT_STREAM_CAPTURED);
            assert_eq!(device(), ACL_ERROR_RT_STREAM_CAPTURED);
            let mut model = null_mut();
            ok((a.aclmdlRICaptureEnd.unwrap())(s, &mut model));
            ok((a.aclmdlRIDestroy.unwrap())(model));
            ok((a.aclrtDestroyStream)(s));
            ok((a.aclrtDestroyStream)(other));
            ok((a.aclrtResetDevice)(3));
        }
        assert_clean();
    }

    /// Runs `body` with a stream and a 2 MiB buffer on `device`, then releases everything.
    fn on_stream(device: i32, body: impl FnOnce(aclrtStream, &DevBuf)) {
        let a = acl();
        // SAFETY: plain device binding.
        unsafe { ok((a.aclrtSetDevice)(device)) };
        let s = create();
        let buf = DevBuf::new(device as u32, G);
        body(s, &buf);
        buf.free();
        // SAFETY: handles from above.
        unsafe {
            ok((a.aclrtDestroyStream)(s));
            ok((a.aclrtResetDevice)(device));
        }
        assert_clean();
    }

    #[test]
    fn streams_need_a_device_and_valid_handles() {
        let _g = test_lock();
        let a = acl();
        let mut s = null_mut();
        // SAFETY: the emulator validates every argument.
        unsafe {
            assert_eq!((a.aclrtCreateStream)(&mut s), ACL_ERROR_RT_CONTEXT_NULL);
            ok((a.aclrtSetDevice)(0));
            assert_eq!((a.aclrtCreateStream)(null_mut()), ACL_ERROR_INVALID_PARAM);
            assert_eq!(
                (a.aclrtSynchronizeStream)(null_mut()),
                ACL_ERROR_RT_PARAM_INVALID
            );
            let bogus = 0x5000 as aclrtStream;
            assert_eq!(
                (a.aclrtSynchronizeStream)(bogus),
                ACL_ERROR_RT_INVALID_HANDLE
            );
            assert_eq!((a.aclrtDestroyStream)(bogus), ACL_ERROR_RT_INVALID_HANDLE);
            s = create();
            assert_eq!(counters().streams, 1);
            ok((a.aclrtSynchronizeStream)(s));
            ok((a.aclrtDestroyStream)(s));
            assert_eq!((a.aclrtDestroyStream)(s), ACL_ERROR_RT_INVALID_HANDLE);
            ok((a.aclrtResetDevice)(0));
        }
        assert_clean();
    }

    #[test]
    fn async_copies_run_in_order_and_only_after_synchronize_are_visible() {
        let _g = test_lock();
        on_stream(1, |s, buf| {
            let a = acl();
            let src = crate::testutil::PinnedBuf::new(&[5u32; 4]);
            let dst = crate::testutil::PinnedBuf::new(&[0u32; 4]);
            let open = gate(s);
            // SAFETY: `src` and `dst` outlive the synchronize below; device sides are validated.
            unsafe {
                ok((a.aclrtMemsetAsync)(buf.ptr, 16, 0, 16, s));
                ok((a.aclrtMemcpyAsync)(
                    buf.ptr,
                    16,
                    src.ptr(),
                    16,
                    aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE,
                    s,
                ));
                ok((a.aclrtMemcpyAsync)(
                    dst.ptr(),
                    16,
                    buf.ptr,
                    16,
                    aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
                    s,
                ));
                // Nothing has run yet: the stream is held by the gate.
                assert_eq!(dst.get(), [0; 4]);
                // Queued work pins the mapping.
                assert_eq!((a.aclrtUnmapMem)(buf.ptr), ACL_ERROR_RT_PARAM_INVALID);
                assert!(recent().contains("synchronize"));
                drop(open);
                ok((a.aclrtSynchronizeStream)(s));
            }
            assert_eq!(dst.get(), [5; 4]);
        });
    }

    /// Queues a task that fails with `msg`.
    fn fail(s: aclrtStream, msg: &'static str) {
        lookup(StreamHandle::from_c(s))
            .unwrap()
            .enqueue(Box::new(move || {
                Err(TaskFailure {
                    code: ACL_ERROR_RT_INTERNAL_ERROR,
                    msg: msg.into(),
                })
            }))
            .unwrap();
    }

    fn set_mode(s: aclrtStream, mode: u64) -> aclError {
        // SAFETY: the emulator validates the handle.
        unsafe { acl().aclrtSetStreamFailureMode.unwrap()(s, mode) }
    }

    #[test]
    fn by_default_a_failed_task_is_kept_until_synchronize_and_later_tasks_run() {
        let _g = test_lock();
        on_stream(0, |s, buf| {
            let a = acl();
            let open = gate(s);
            fail(s, "the collective failed");
            fail(s, "a second failure");
            // SAFETY: device range validated by the emulator.
            unsafe {
                ok((a.aclrtMemsetAsync)(buf.ptr, 4, 0x11, 4, s));
                drop(open);
                assert_eq!((a.aclrtSynchronizeStream)(s), ACL_ERROR_RT_INTERNAL_ERROR);
                // The first failure is the one reported.
                assert!(recent().contains("the collective failed"));
                // Continue on failure: the memset after the failures ran.
                assert_eq!(buf.read::<u8>(0, 4), vec![0x11; 4]);
                ok((a.aclrtSynchronizeStream)(s));
            }
        });
    }

    /// How many host threads wait in a synchronize of `s` now.
    fn waiting(s: aclrtStream) -> usize {
        let stream = lookup(StreamHandle::from_c(s)).unwrap();
        lock(&stream.shared.queue).waiting.len()
    }

    /// Waits (yielding) until `n` host threads wait in a synchronize of `s`.
    fn until_waiting(s: aclrtStream, n: usize) {
        while waiting(s) < n {
            std::thread::yield_now();
        }
    }

    /// What one synchronize of stream `s` (an `aclrtStream` as an integer, to cross threads)
    /// returned, and the message it left: by `aclrtSynchronizeStream` (`how` 0), its
    /// `WithTimeout` form (1) or `aclrtSynchronizeDevice` on `device` (2).
    fn synchronize_by(how: usize, s: usize, device: i32) -> (aclError, String) {
        let (a, s) = (acl(), s as aclrtStream);
        // SAFETY: a live stream; the emulator validates every argument.
        let code = unsafe {
            match how {
                0 => (a.aclrtSynchronizeStream)(s),
                1 => a.aclrtSynchronizeStreamWithTimeout.unwrap()(s, 60_000),
                _ => {
                    ok((a.aclrtSetDevice)(device));
                    a.aclrtSynchronizeDevice.unwrap()()
                }
            }
        };
        (code, recent())
    }

    /// Three host threads wait on a stream when a task fails (one in each kind of
    /// synchronize), in both failure modes: every one of them reports the failure, with its
    /// message, and a synchronize after theirs finds the stream clean (and, in stop mode,
    /// taking work again).
    #[test]
    fn every_thread_waiting_on_a_failed_stream_reports_its_failure() {
        let _g = test_lock();
        // Device 15 for stop mode: it covers the device's whole context.
        for (device, mode) in [(0, ACL_CONTINUE_ON_FAILURE), (15, ACL_STOP_ON_FAILURE)] {
            on_stream(device, |s, buf| {
                let a = acl();
                ok(set_mode(s, mode));
                let open = gate(s);
                fail(s, "the collective failed");
                let handle = s as usize;
                let outcomes = std::thread::scope(|scope| {
                    let waits = [0, 1, 2]
                        .map(|how| scope.spawn(move || synchronize_by(how, handle, device)));
                    until_waiting(s, 3);
                    drop(open);
                    waits.map(|w| w.join().unwrap())
                });
                for (how, (code, msg)) in outcomes.iter().enumerate() {
                    assert_eq!(
                        *code, ACL_ERROR_RT_INTERNAL_ERROR,
                        "mode {mode}, synchronize {how}: {msg}"
                    );
                    assert!(msg.contains("the collective failed"), "{msg}");
                }
                // SAFETY: a live stream; the device range is validated by the emulator.
                unsafe {
                    ok((a.aclrtSynchronizeStream)(s));
                    ok((a.aclrtMemsetAsync)(buf.ptr, 4, 0x44, 4, s));
                    ok((a.aclrtSynchronizeStream)(s));
                }
                assert_eq!(buf.read::<u8>(0, 4), vec![0x44; 4]);
            });
        }
    }

    /// With CANN's rule (the test hook), of three threads waiting on a failed stream exactly
    /// one reports the failure.
    #[test]
    fn reporting_to_one_as_cann_does_gives_the_failure_to_exactly_one_waiter() {
        let _g = test_lock();
        /// Restores the emulator's rule however the test ends.
        struct Restore;
        impl Drop for Restore {
            fn drop(&mut self) {
                report_failures_to_one(false);
            }
        }
        let _restore = Restore;
        report_failures_to_one(true);
        on_stream(0, |s, _| {
            let open = gate(s);
            fail(s, "the collective failed");
            let handle = s as usize;
            let codes = std::thread::scope(|scope| {
                let waits =
                    [0, 0, 0].map(|how| scope.spawn(move || synchronize_by(how, handle, 0)));
                until_waiting(s, 3);
                drop(open);
                waits.map(|w| w.join().unwrap().0)
            });
            let failed = codes
                .iter()
                .filter(|&&c| c == ACL_ERROR_RT_INTERNAL_ERROR)
                .count();
            assert_eq!(failed, 1, "{codes:?}");
            assert_eq!(
                codes.iter().filter(|&&c| c == ACL_SUCCESS).count(),
                2,
                "{codes:?}"
            );
        });
    }

    /// A thread whose synchronize began before the failing task was queued waits for less
    /// than that task: it reports success, and leaves the failure to the thread whose
    /// synchronize covers it.
    #[test]
    fn a_synchronize_reports_only_failures_of_the_work_it_waited_for() {
        let _g = test_lock();
        on_stream(0, |s, _| {
            let a = acl();
            let open = gate(s);
            let handle = s as usize;
            let (early, late) = std::thread::scope(|scope| {
                let early = scope.spawn(move || synchronize_by(0, handle, 0));
                until_waiting(s, 1);
                fail(s, "after the early synchronize");
                let late = scope.spawn(move || synchronize_by(0, handle, 0));
                until_waiting(s, 2);
                drop(open);
                (early.join().unwrap(), late.join().unwrap())
            });
            assert_eq!(early.0, ACL_SUCCESS, "{}", early.1);
            assert_eq!(late.0, ACL_ERROR_RT_INTERNAL_ERROR, "{}", late.1);
            // SAFETY: a live stream.
            unsafe { ok((a.aclrtSynchronizeStream)(s)) };
        });
    }

    #[test]
    fn stop_on_failure_skips_and_refuses_tasks_until_synchronize() {
        let _g = test_lock();
        // Device 15: stop mode covers the device's whole context, and no other test uses it.
        on_stream(15, |s, buf| {
            let a = acl();
            assert_eq!(set_mode(s, 2), ACL_ERROR_RT_PARAM_INVALID);
            assert_eq!(
                set_mode(0x5000 as aclrtStream, ACL_STOP_ON_FAILURE),
                ACL_ERROR_RT_INVALID_HANDLE
            );
            // Another stream of the same device, created before the mode was set.
            let other = create();
            ok(set_mode(s, ACL_STOP_ON_FAILURE));
            let open = gate(s);
            fail(s, "the collective failed");
            // SAFETY: device ranges validated by the emulator.
            unsafe {
                ok((a.aclrtMemsetAsync)(buf.ptr, 4, 0x11, 4, s));
                drop(open);
                // Once the failure has happened, new work is refused with its code.
                let refused = loop {
                    let code = (a.aclrtMemsetAsync)(buf.ptr, 4, 0x22, 4, s);
                    if code != ACL_SUCCESS {
                        break code;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                };
                assert_eq!(refused, ACL_ERROR_RT_INTERNAL_ERROR);
                assert!(recent().contains("stop-on-failure"));
                assert_eq!((a.aclrtSynchronizeStream)(s), ACL_ERROR_RT_INTERNAL_ERROR);
                assert!(recent().contains("the collective failed"));
                // The memset after the failure was skipped.
                assert_eq!(buf.read::<u8>(0, 4), vec![0; 4]);
                // Synchronize cleared the failure: the stream takes and runs work again.
                ok((a.aclrtMemsetAsync)(buf.ptr, 4, 0x11, 4, s));
                ok((a.aclrtSynchronizeStream)(s));
                assert_eq!(buf.read::<u8>(0, 4), vec![0x11; 4]);

                // The context is in stop mode: the other stream stops too.
                let open = gate(other);
                fail(other, "failure on the other stream");
                ok((a.aclrtMemsetAsync)(buf.ptr, 4, 0x33, 4, other));
                drop(open);
                assert_eq!(
                    (a.aclrtSynchronizeStream)(other),
                    ACL_ERROR_RT_INTERNAL_ERROR
                );
                assert_eq!(buf.read::<u8>(0, 4), vec![0x11; 4], "skipped");
                ok((a.aclrtDestroyStream)(other));
                // A NULL stream names the context: accepted with a device, refused without.
                ok(set_mode(null_mut(), ACL_STOP_ON_FAILURE));
                ok(set_mode(null_mut(), 0));
            }
        });
        // aclrtResetDevice (in on_stream) ended the context's stop mode.
        assert!(!device::stops_on_failure(device::Device {
            node: 0,
            id: 15
        }));
        assert_eq!(
            set_mode(null_mut(), ACL_STOP_ON_FAILURE),
            ACL_ERROR_RT_CONTEXT_NULL
        );
    }

    #[test]
    fn a_skipped_task_that_panics_when_dropped_does_not_kill_the_stream() {
        struct PanicsOnDrop;
        impl Drop for PanicsOnDrop {
            fn drop(&mut self) {
                panic!("drop of a skipped task");
            }
        }
        let _g = test_lock();
        on_stream(15, |s, buf| {
            let a = acl();
            ok(set_mode(s, ACL_STOP_ON_FAILURE));
            let open = gate(s);
            let stream = lookup(StreamHandle::from_c(s)).unwrap();
            stream
                .enqueue(Box::new(|| {
                    Err(TaskFailure {
                        code: ACL_ERROR_RT_INTERNAL_ERROR,
                        msg: "first failure".into(),
                    })
                }))
                .unwrap();
            let bomb = PanicsOnDrop;
            stream
                .enqueue(Box::new(move || {
                    let _keep = &bomb;
                    Ok(())
                }))
                .unwrap();
            drop(open);
            // SAFETY: plain calls on a live stream; the device range is validated.
            unsafe {
                assert_eq!((a.aclrtSynchronizeStream)(s), ACL_ERROR_RT_INTERNAL_ERROR);
                assert!(recent().contains("first failure"));
                // The thread survived: later work runs.
                ok((a.aclrtMemsetAsync)(buf.ptr, 4, 0x33, 4, s));
                ok((a.aclrtSynchronizeStream)(s));
            }
            assert_eq!(buf.read::<u8>(0, 4), vec![0x33; 4]);
        });
    }

    #[test]
    fn destroy_drains_the_queue() {
        let _g = test_lock();
        let a = acl();
        // SAFETY: plain device binding.
        unsafe { ok((a.aclrtSetDevice)(0)) };
        let s = create();
        let buf = DevBuf::new(0, G);
        let open = gate(s);
        // SAFETY: device range validated by the emulator.
        unsafe { ok((a.aclrtMemsetAsync)(buf.ptr, 4, 0x22, 4, s)) };
        let opener = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            drop(open);
        });
        // SAFETY: handle from above.
        unsafe { ok((a.aclrtDestroyStream)(s)) };
        opener.join().unwrap();
        assert_eq!(buf.read::<u8>(0, 4), vec![0x22; 4]);
        buf.free();
        // SAFETY: plain device binding.
        unsafe { ok((a.aclrtResetDevice)(0)) };
        assert_clean();
    }
}
