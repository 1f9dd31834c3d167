//! Failure injection: make the n-th call of a named C function fail with a chosen code,
//! without doing anything, so every error and `Drop` path of the layers above can be run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::base::lock::{RankedMutex, lock, ranks};
use crate::sys::{AclApi, HcclApi};

/// The C function named `call` if it returns a status code (and so can be made to fail):
/// every such function of the tables' list is emulated.
fn status_function(call: &str) -> Option<&'static str> {
    HcclApi::FUNCTIONS
        .iter()
        .chain(AclApi::FUNCTIONS)
        .find(|f| f.name == call && f.returns_status())
        .map(|f| f.name)
}

/// Pending failures of one function.
#[derive(Default)]
struct Pending {
    /// Calls seen since the first failure was injected.
    calls: u64,
    /// `(call number, code)`: the call with that number fails with that code.
    failures: Vec<(u64, i32)>,
}

/// Whether any failure is pending: the only thing a call checks when none is.
static ANY: AtomicBool = AtomicBool::new(false);
static TABLE: RankedMutex<BTreeMap<&'static str, Pending>> =
    RankedMutex::new(ranks::INJECTED, BTreeMap::new());

/// Whether [`count_calls`] is on, and what it counted.
static COUNTING: AtomicBool = AtomicBool::new(false);
static COUNTS: RankedMutex<BTreeMap<&'static str, u64>> =
    RankedMutex::new(ranks::CALL_COUNTS, BTreeMap::new());

/// Starts counting, process-wide, the calls of every emulated C function that returns a
/// status code, from zero; [`call_counts`] reads the counts and stops. With the counts, a
/// test can make each call of a scenario fail in turn ([`inject_failure`]).
///
/// A test hook, process-global like [`inject_failure`].
pub fn count_calls() {
    lock(&COUNTS).clear();
    COUNTING.store(true, Ordering::Release);
}

/// The calls counted since [`count_calls`], by function name (functions never called are
/// left out), and stops counting.
pub fn call_counts() -> BTreeMap<&'static str, u64> {
    COUNTING.store(false, Ordering::Release);
    std::mem::take(&mut *lock(&COUNTS))
}

/// Makes the `nth` call (1 = the next one; 0 is treated as 1) of the C function `call`, counted
/// from now on and process-wide, fail with `code` (an `HcclResult` or `aclError` value, as the
/// function returns) without doing anything else. Several failures may be pending at once.
///
/// Injections are process-global: tests that use them must not run beside other emulator
/// tests. The call count is process-wide too, not per rank: on a multi-rank communicator the
/// `nth` call is whichever rank's call comes `nth`.
///
/// An injected failure of a collective call (`HcclAllReduce` & co., `HcclBarrier`,
/// `HcclCommSymWinRegister`, `HcclCommSymWinDeregister`) on a live communicator consumes that
/// rank's sequence number, as a rejected call does (see the [emulator's choices](crate)),
/// so the peers' matching calls fail. To make a collective step fail cleanly on every rank,
/// inject it on every rank's call, or use a one-rank communicator.
///
/// This is a test hook: it exists so that tests can run every error and `Drop` path of the
/// layers above; nothing in a real program should call it.
///
/// # Panics
/// If `call` is not one of the emulator's C functions that return a status code (a typo would
/// otherwise silently inject nothing).
pub fn inject_failure(call: &str, nth: u64, code: i32) {
    let name = status_function(call).unwrap_or_else(|| {
        panic!("inject_failure: {call:?} is not an emulated C function that returns a status")
    });
    let mut table = lock(&TABLE);
    let pending = table.entry(name).or_default();
    let at = pending.calls + nth.max(1);
    pending.failures.push((at, code));
    ANY.store(true, Ordering::Release);
}

/// Removes every pending injected failure, and stops [`count_calls`].
pub fn clear_injected_failures() {
    let mut table = lock(&TABLE);
    table.clear();
    ANY.store(false, Ordering::Release);
    COUNTING.store(false, Ordering::Release);
}

/// Counts a call of `name` and returns the code it must fail with, if one was injected for it.
pub(crate) fn take(name: &'static str) -> Option<i32> {
    if COUNTING.load(Ordering::Acquire) {
        *lock(&COUNTS).entry(name).or_default() += 1;
    }
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    let mut table = lock(&TABLE);
    let pending = table.get_mut(name)?;
    pending.calls += 1;
    let now = pending.calls;
    let hit = pending.failures.iter().position(|&(at, _)| at == now);
    let code = hit.map(|i| pending.failures.swap_remove(i).1);
    if pending.failures.is_empty() {
        table.remove(name);
    }
    ANY.store(!table.is_empty(), Ordering::Release);
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_call_fails_once() {
        let _guard = crate::test_lock();
        inject_failure("aclrtMapMem", 2, 7);
        inject_failure("aclrtMapMem", 4, 9);
        assert_eq!(take("aclrtUnmapMem"), None);
        assert_eq!(take("aclrtMapMem"), None);
        assert_eq!(take("aclrtMapMem"), Some(7));
        assert_eq!(take("aclrtMapMem"), None);
        assert_eq!(take("aclrtMapMem"), Some(9));
        assert_eq!(take("aclrtMapMem"), None);
        assert!(!ANY.load(Ordering::Acquire));
        inject_failure("HcclAllReduce", 1, 4);
        clear_injected_failures();
        assert_eq!(take("HcclAllReduce"), None);
    }

    #[test]
    #[should_panic(expected = "not an emulated C function")]
    fn unknown_names_are_rejected() {
        inject_failure("aclrtMapMemory", 1, 1);
    }

    #[test]
    #[should_panic(expected = "not an emulated C function")]
    fn functions_without_a_status_are_rejected() {
        inject_failure("HcclGetErrorString", 1, 1);
    }
}
