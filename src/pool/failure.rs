//! The failure that poisoned a pool: set once by the first failed wait, read by every call,
//! and cleared only when the pool goes on without the ranks it lost ([`SymPool::shrink`]).
//!
//! [`SymPool::shrink`]: super::SymPool::shrink

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::Error;

/// A cell that keeps the first error put in it until cleared.
#[derive(Default)]
pub(super) struct Failure {
    /// Whether `cause` holds an error: the one thing a healthy pool's calls look at.
    set: AtomicBool,
    cause: Mutex<Option<Arc<Error>>>,
}

impl Failure {
    /// The error, if one was set.
    pub(super) fn get(&self) -> Option<Arc<Error>> {
        if !self.set.load(Ordering::Acquire) {
            return None;
        }
        self.lock().clone()
    }

    /// Whether an error was set.
    pub(super) fn is_set(&self) -> bool {
        self.set.load(Ordering::Acquire)
    }

    /// Keeps `cause()` unless an error is set already: the first failure is the cause, a
    /// later one may be a consequence of it. True if this call set it.
    pub(super) fn set_first(&self, cause: impl FnOnce() -> Error) -> bool {
        let mut held = self.lock();
        if held.is_some() {
            return false;
        }
        *held = Some(Arc::new(cause()));
        self.set.store(true, Ordering::Release);
        true
    }

    /// Forgets the error.
    pub(super) fn clear(&self) {
        let mut held = self.lock();
        *held = None;
        self.set.store(false, Ordering::Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<Error>>> {
        self.cause.lock().unwrap_or_else(|e| e.into_inner())
    }
}
