//! Streams: a thread per stream running a FIFO of tasks, so host calls that enqueue work
//! return at once and stream-ordering bugs show up as they would on a device.
//!
//! A failed task makes the stream *sticky-failed*: later tasks are skipped (dropped, releasing
//! what they pinned) until `aclrtSynchronizeStream` reports the failure and clears it.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};

use crate::sys::{
    ACL_ERROR_RT_INTERNAL_ERROR, ACL_ERROR_RT_INVALID_HANDLE, ACL_ERROR_RT_PARAM_INVALID, aclError,
};

use super::counters::{self, Counter, STREAM_THREAD_PREFIX};
use super::device;
use super::errors::{AclResult, Fail, acl_fail, panic_message};
use super::registry::{HandleKind, Registry, lock, new_handle};

/// Why a task failed: the code `aclrtSynchronizeStream` returns and the detail it records.
#[derive(Debug)]
pub(crate) struct TaskFailure {
    pub(crate) code: aclError,
    pub(crate) msg: String,
}

/// Work for a stream thread.
pub(crate) type Task = Box<dyn FnOnce() -> Result<(), TaskFailure> + Send>;

struct Queue {
    tasks: VecDeque<Task>,
    enqueued: u64,
    completed: u64,
    failure: Option<TaskFailure>,
    shutdown: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a task is enqueued or the stream shuts down.
    work: Condvar,
    /// Signalled when a task completes.
    done: Condvar,
}

/// A live stream.
pub(crate) struct Stream {
    shared: Arc<Shared>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

static STREAMS: Registry<Stream> = Registry::new();

/// `aclrtCreateStream`: needs a current device, like the real runtime.
pub(crate) fn create() -> AclResult<usize> {
    device::current()?;
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            tasks: VecDeque::new(),
            enqueued: 0,
            completed: 0,
            failure: None,
            shutdown: false,
        }),
        work: Condvar::new(),
        done: Condvar::new(),
    });
    let handle = new_handle(HandleKind::Stream);
    let worker = {
        let shared = shared.clone();
        thread::Builder::new()
            .name(format!("{STREAM_THREAD_PREFIX}-{:x}", handle & 0xFFFF_FFFF))
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
            shared,
            worker: Mutex::new(Some(worker)),
        }),
    );
    counters::inc(Counter::Streams);
    Ok(handle)
}

/// The live stream `handle` (null is `ACL_ERROR_RT_PARAM_INVALID`: the emulator has no
/// default stream).
pub(crate) fn lookup(handle: usize) -> AclResult<Arc<Stream>> {
    if handle == 0 {
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

/// `aclrtDestroyStream`: runs what is queued, then stops and joins the thread. A failure still
/// pending on the stream is discarded.
pub(crate) fn destroy(handle: usize) -> AclResult {
    lookup(handle)?;
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
    counters::dec(Counter::Streams);
    Ok(())
}

/// `aclrtSynchronizeStream`: waits for everything enqueued so far, then reports (and clears)
/// the stream's failure, if any.
pub(crate) fn synchronize(handle: usize) -> AclResult {
    let stream = lookup(handle)?;
    let shared = &stream.shared;
    let mut q = lock(&shared.queue);
    let target = q.enqueued;
    while q.completed < target {
        q = shared.done.wait(q).unwrap_or_else(|e| e.into_inner());
    }
    match q.failure.take() {
        None => Ok(()),
        Some(f) => Err(Fail {
            code: f.code,
            msg: f.msg,
        }),
    }
}

impl Stream {
    /// Queues `task` behind everything already enqueued.
    pub(crate) fn enqueue(&self, task: Task) -> AclResult {
        let mut q = lock(&self.shared.queue);
        if q.shutdown {
            return acl_fail(ACL_ERROR_RT_INVALID_HANDLE, "the stream is being destroyed");
        }
        q.tasks.push_back(task);
        q.enqueued += 1;
        drop(q);
        self.shared.work.notify_one();
        Ok(())
    }
}

/// The stream thread: runs tasks in order until shut down and drained.
fn run(shared: &Shared) {
    loop {
        let (task, skip) = {
            let mut q = lock(&shared.queue);
            loop {
                if let Some(task) = q.tasks.pop_front() {
                    break (task, q.failure.is_some());
                }
                if q.shutdown {
                    return;
                }
                q = shared.work.wait(q).unwrap_or_else(|e| e.into_inner());
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
        if let Err(f) = outcome {
            q.failure.get_or_insert(f);
        }
        q.completed += 1;
        drop(q);
        shared.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::ptr::null_mut;

    use super::super::testutil::{DevBuf, acl, assert_clean, gate, ok, recent};
    use super::super::{GRANULARITY as G, counters, test_lock};
    use super::*;
    use crate::sys::{ACL_ERROR_RT_CONTEXT_NULL, aclrtMemcpyKind, aclrtStream};

    fn create() -> aclrtStream {
        let mut s = null_mut();
        // SAFETY: valid out-pointer.
        ok(unsafe { (acl().aclrtCreateStream)(&mut s) });
        s
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
            assert_eq!(
                (a.aclrtCreateStream)(null_mut()),
                ACL_ERROR_RT_PARAM_INVALID
            );
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
            let src = [5u32; 4];
            let mut dst = [0u32; 4];
            let open = gate(s);
            // SAFETY: `src` and `dst` outlive the synchronize below; device sides are validated.
            unsafe {
                ok((a.aclrtMemsetAsync)(buf.ptr, 16, 0, 16, s));
                ok((a.aclrtMemcpyAsync)(
                    buf.ptr,
                    16,
                    src.as_ptr().cast(),
                    16,
                    aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE,
                    s,
                ));
                ok((a.aclrtMemcpyAsync)(
                    dst.as_mut_ptr().cast(),
                    16,
                    buf.ptr,
                    16,
                    aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
                    s,
                ));
                // Nothing has run yet: the stream is held by the gate.
                assert_eq!(dst, [0; 4]);
                // Queued work pins the mapping.
                assert_eq!((a.aclrtUnmapMem)(buf.ptr), ACL_ERROR_RT_PARAM_INVALID);
                assert!(recent().contains("synchronize"));
                drop(open);
                ok((a.aclrtSynchronizeStream)(s));
            }
            assert_eq!(dst, [5; 4]);
        });
    }

    #[test]
    fn a_failed_task_is_sticky_until_synchronize() {
        let _g = test_lock();
        on_stream(0, |s, buf| {
            let a = acl();
            let open = gate(s);
            lookup(s as usize)
                .unwrap()
                .enqueue(Box::new(|| {
                    Err(TaskFailure {
                        code: ACL_ERROR_RT_INTERNAL_ERROR,
                        msg: "the collective failed".into(),
                    })
                }))
                .unwrap();
            // SAFETY: device range validated by the emulator.
            unsafe {
                ok((a.aclrtMemsetAsync)(buf.ptr, 4, 0x11, 4, s));
                drop(open);
                assert_eq!((a.aclrtSynchronizeStream)(s), ACL_ERROR_RT_INTERNAL_ERROR);
                assert!(recent().contains("the collective failed"));
                // The memset after the failure was skipped.
                assert_eq!(buf.read::<u8>(0, 4), vec![0; 4]);
                ok((a.aclrtSynchronizeStream)(s));
                ok((a.aclrtMemsetAsync)(buf.ptr, 4, 0x11, 4, s));
                ok((a.aclrtSynchronizeStream)(s));
            }
            assert_eq!(buf.read::<u8>(0, 4), vec![0x11; 4]);
        });
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
        on_stream(0, |s, buf| {
            let a = acl();
            let open = gate(s);
            let stream = lookup(s as usize).unwrap();
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
