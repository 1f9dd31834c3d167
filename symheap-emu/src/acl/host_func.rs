//! `aclrtLaunchHostFunc`: a host function as stream work, captured like any other.

use std::cell::Cell;
use std::sync::Arc;

use crate::acl::{graph, stream};
use crate::base::errors::{AclResult, param};
use crate::base::handle::StreamHandle;

/// `aclrtLaunchHostFunc`: queues a call of `func(args)` on the stream's thread, behind
/// everything already enqueued; the stream goes on once it returns. A NULL `func` is
/// `ACL_ERROR_RT_PARAM_INVALID` (as hicann/runtime's `ApiErrorDecorator::LaunchHostFunc`
/// answers a NULL callback).
///
/// # Safety
/// `func`, when not NULL, may be called with `args` from another thread: once, or, when the
/// stream is capturing, once per replay of the graph until it is destroyed.
pub(crate) unsafe fn launch_host_func(
    handle: StreamHandle,
    func: crate::sys::aclrtHostFunc,
    args: usize,
) -> AclResult {
    let Some(func) = func else {
        return param("fn is NULL");
    };
    graph::submit(
        &*stream::lookup(handle)?,
        handle,
        Arc::new(move || {
            Ok(Box::new(move || {
                let _running = Running::enter();
                // SAFETY: the caller's contract: `func` may be called with `args` from any
                // thread (once per replay when captured).
                unsafe { func(args as *mut std::ffi::c_void) };
                Ok(())
            }) as stream::Task)
        }),
    )
}

thread_local! {
    /// How many host functions the calling thread is inside (a count, not a flag, so that
    /// nothing depends on host functions never nesting).
    static RUNNING: Cell<u32> = const { Cell::new(0) };
}

/// Whether the calling thread is running a host function queued on a stream: the emulator's
/// device code, where device-side calls (`HcclSymWinGetPeerPointer`) answer.
pub(crate) fn running() -> bool {
    RUNNING.with(Cell::get) > 0
}

/// Counts the calling thread as running a host function until dropped (also when the host
/// function unwinds).
struct Running;

impl Running {
    fn enter() -> Running {
        RUNNING.with(|r| r.set(r.get() + 1));
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // `try_with`: never panic during thread-local destruction.
        let _ = RUNNING.try_with(|r| r.set(r.get().saturating_sub(1)));
    }
}
