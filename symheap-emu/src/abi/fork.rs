//! A process `fork()`ed from one that used the emulator, without `exec`, inherits its state
//! (communicators, streams, memory) but none of its threads: the hub, the stream workers and
//! the peers' view of who is alive all stay with the parent. Every C function called in such
//! a child fails at once, saying so, instead of returning success and hanging later (a
//! collective that no worker will run). CANN does not support using a device context across
//! `fork` either; a child that needs the device must `exec` a program that initialises anew.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

static IN_CHILD: AtomicBool = AtomicBool::new(false);
static WATCH: Once = Once::new();

extern "C" fn mark_child() {
    // Only an atomic store: a fork handler of a multi-threaded process may do little else.
    IN_CHILD.store(true, Ordering::Relaxed);
}

/// Why a C function may not run here, if this process is such a child. The first call into
/// the emulator sets the watch, before the process can have state worth inheriting.
pub(crate) fn refusal() -> Option<&'static str> {
    WATCH.call_once(|| {
        // SAFETY: registers a child handler that only stores to an atomic; the other two
        // handlers are none.
        unsafe { libc::pthread_atfork(None, None, Some(mark_child)) };
    });
    IN_CHILD.load(Ordering::Relaxed).then_some(
        "this process was fork()ed from one that used the emulator and did not exec: its \
         communicators, streams and memory belong to the parent (exec a program that \
         initialises anew)",
    )
}
