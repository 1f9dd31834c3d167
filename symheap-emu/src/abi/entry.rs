//! What every emulated C function runs in: an injected failure first, then its body with
//! panics caught (nothing unwinds across the C boundary) and the failure's message recorded
//! for `aclGetRecentErrMsg`.
//!
//! A body's return type decides how it is entered ([`Body`]): a plain status result, a string
//! pointer, or a [`CollectiveCall`], whose communicator is looked up and whose sequence number
//! is taken before an injected failure is returned, so that a failed call on a live
//! communicator always consumes its number, as a call rejected by the checks does.

use std::ffi::{c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crate::sys::{ACL_ERROR_RT_INTERNAL_ERROR, ACL_SUCCESS, HcclResult, aclError};

use crate::abi::{fork, inject};
use crate::base::errors::{AclResult, Fail, HcclRes, panic_message, set_recent};
use crate::hccl::comm::Comm;

/// A C status type: what success and an emulator panic are in it.
pub(crate) trait Code: Copy {
    /// Success.
    const OK: Self;
    /// What a panic inside the emulator is reported as.
    const PANIC: Self;
    /// The code from the raw integer given to `inject_failure`.
    fn from_raw(raw: i32) -> Self;
}

impl Code for aclError {
    const OK: Self = ACL_SUCCESS;
    const PANIC: Self = ACL_ERROR_RT_INTERNAL_ERROR;
    fn from_raw(raw: i32) -> Self {
        raw
    }
}

impl Code for HcclResult {
    const OK: Self = HcclResult::HCCL_SUCCESS;
    const PANIC: Self = HcclResult::HCCL_E_INTERNAL;
    fn from_raw(raw: i32) -> Self {
        HcclResult(raw)
    }
}

/// What an emulated C function's body returns; `enter` runs it as the C function `name`.
/// `make` builds the body's value (for a plain result, it is the whole body).
pub(crate) trait Body: Sized {
    /// The C function's return type.
    type Ret;
    /// Runs `make` as the C function `name`.
    fn enter(name: &'static str, make: impl FnOnce() -> Self) -> Self::Ret;
}

impl<C: Code> Body for Result<(), Fail<C>> {
    type Ret = C;
    fn enter(name: &'static str, make: impl FnOnce() -> Self) -> C {
        if let Some(why) = fork::refusal() {
            return refused(name, why);
        }
        if let Some(raw) = inject::take(name) {
            return injected(name, raw);
        }
        finish(name, catch_unwind(AssertUnwindSafe(make)))
    }
}

/// Functions that return a string (`HcclGetErrorString`, `aclGetRecentErrMsg`) cannot fail:
/// a panic is caught and gives NULL.
impl Body for *const c_char {
    type Ret = *const c_char;
    fn enter(_name: &'static str, make: impl FnOnce() -> Self) -> Self {
        catch_unwind(AssertUnwindSafe(make)).unwrap_or(std::ptr::null())
    }
}

/// Functions that return a number (`HcclGetCommConfigCapability`) cannot fail: a panic is
/// caught and gives 0.
impl Body for u32 {
    type Ret = u32;
    fn enter(_name: &'static str, make: impl FnOnce() -> Self) -> Self {
        catch_unwind(AssertUnwindSafe(make)).unwrap_or(0)
    }
}

/// Functions that return a new object or NULL (`aclprofCreateConfig`): a failure's or a
/// panic's message becomes the recent error message, and the function returns NULL.
impl Body for AclResult<*mut c_void> {
    type Ret = *mut c_void;
    fn enter(name: &'static str, make: impl FnOnce() -> Self) -> *mut c_void {
        let mut made = std::ptr::null_mut();
        let outcome = catch_unwind(AssertUnwindSafe(|| make().map(|p| made = p)));
        if finish(name, outcome) == ACL_SUCCESS {
            made
        } else {
            std::ptr::null_mut()
        }
    }
}

/// Which of a communicator's two call sequences a collective call takes a number of.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Sequence {
    /// Collectives on streams (`HcclAllReduce` & co., `HcclBarrier`).
    Stream,
    /// Collective host calls (`HcclCommSymWinRegister` / `HcclCommSymWinDeregister`).
    Host,
}

/// What a collective call does once it has its communicator and sequence number.
type Rest = Box<dyn FnOnce(&Arc<Comm>, u64) -> HcclRes>;

/// A collective call: its communicator (or why there is none) and the rest of its body, which
/// gets the communicator and the call's sequence number; or, between `HcclGroupStart` and
/// `HcclGroupEnd`, a call kept for the group ([`crate::abi::group`]), which takes its number
/// when the group is issued.
pub(crate) struct CollectiveCall {
    how: How,
}

/// What a [`CollectiveCall`] does when entered.
enum How {
    /// Takes a sequence number of `comm` now, then runs `rest`.
    Numbered {
        comm: HcclRes<Arc<Comm>>,
        sequence: Sequence,
        rest: Rest,
    },
    /// Checks the call and keeps it in the calling thread's group: no number is taken now.
    Grouped(Box<dyn FnOnce() -> HcclRes>),
}

/// The body of a collective C function: `comm` is the communicator the call names (looked up
/// without side effects), `rest` does everything after the sequence number is taken.
pub(crate) fn collective(
    comm: HcclRes<Arc<Comm>>,
    sequence: Sequence,
    rest: impl FnOnce(&Arc<Comm>, u64) -> HcclRes + 'static,
) -> CollectiveCall {
    CollectiveCall {
        how: How::Numbered {
            comm,
            sequence,
            rest: Box::new(rest),
        },
    }
}

/// The body of a collective C function called inside a group: `keep` checks the call and
/// keeps it for `HcclGroupEnd`. An injected failure of the call keeps nothing.
pub(crate) fn grouped(keep: impl FnOnce() -> HcclRes + 'static) -> CollectiveCall {
    CollectiveCall {
        how: How::Grouped(Box::new(keep)),
    }
}

/// Runs a collective call now, as `HcclGroupEnd` issues the calls its group kept: takes the
/// call's sequence number and runs the rest (no injected failure, no panic guard: the call
/// runs inside `HcclGroupEnd`'s own entry).
pub(crate) fn issue(call: CollectiveCall) -> HcclRes {
    match call.how {
        How::Numbered {
            comm,
            sequence,
            rest,
        } => {
            let comm = comm?;
            rest(&comm, take_number(&comm, sequence))
        }
        How::Grouped(keep) => keep(),
    }
}

/// The next number of `comm`'s sequence `sequence`.
fn take_number(comm: &Comm, sequence: Sequence) -> u64 {
    match sequence {
        Sequence::Stream => comm.next_collective_seq(),
        Sequence::Host => comm.next_host_seq(),
    }
}

impl Body for CollectiveCall {
    type Ret = HcclResult;
    fn enter(name: &'static str, make: impl FnOnce() -> Self) -> HcclResult {
        if let Some(why) = fork::refusal() {
            return refused(name, why);
        }
        let injection = inject::take(name);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let (comm, sequence, rest) = match make().how {
                How::Numbered {
                    comm,
                    sequence,
                    rest,
                } => (comm, sequence, rest),
                // A call kept for its group takes no number yet; an injected failure keeps
                // nothing.
                How::Grouped(_) if injection.is_some() => return Ok(None),
                How::Grouped(keep) => return keep().map(Some),
            };
            let comm = match (comm, injection) {
                (Ok(comm), _) => comm,
                // An injected failure of a call naming no live communicator consumes nothing.
                (Err(_), Some(_)) => return Ok(None),
                (Err(fail), None) => return Err(fail),
            };
            // Taken before any other check: peers' matching calls then fail (time out), and
            // this rank's next call does not pair with their current one.
            let seq = take_number(&comm, sequence);
            if injection.is_some() {
                return Ok(None);
            }
            rest(&comm, seq).map(Some)
        }));
        match (injection, outcome) {
            (Some(raw), Ok(_)) => injected(name, raw),
            (_, outcome) => finish(name, outcome.map(|r| r.map(drop))),
        }
    }
}

/// The code of a call refused before it ran (in a `fork`ed child), with `why` recorded.
fn refused<C: Code>(name: &str, why: &str) -> C {
    set_recent(format!("{name}: {why}"));
    C::PANIC
}

/// The code of an injected failure of `name`, recorded as the thread's recent error.
fn injected<C: Code>(name: &str, raw: i32) -> C {
    set_recent(format!("{name}: injected failure (code {raw})"));
    C::from_raw(raw)
}

/// The code of a body's outcome, with a failure's or panic's message recorded.
fn finish<C: Code>(name: &str, outcome: std::thread::Result<Result<(), Fail<C>>>) -> C {
    match outcome {
        Ok(Ok(())) => C::OK,
        Ok(Err(fail)) => {
            set_recent(format!("{name}: {}", fail.msg));
            fail.code
        }
        Err(payload) => {
            set_recent(format!(
                "{name}: internal error: the emulator panicked: {}",
                panic_message(payload.as_ref())
            ));
            C::PANIC
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;
    use crate::base::errors::{hccl_fail, take_recent};

    /// A failing call from a thread-local destructor that runs after the recent-error slot
    /// was destroyed.
    #[test]
    fn calls_during_thread_local_destruction_do_not_panic() {
        struct Late;
        impl Drop for Late {
            fn drop(&mut self) {
                let code = Body::enter("HcclGetRankId", || {
                    hccl_fail(HcclResult::HCCL_E_PARA, "from a destructor")
                });
                assert_eq!(code, HcclResult::HCCL_E_PARA);
                let _ = take_recent();
            }
        }
        thread_local! { static LATE: Late = const { Late }; }
        std::thread::spawn(|| {
            LATE.with(|_| {});
            // Registered after LATE's destructor, so the recent-error slot is destroyed first.
            set_recent("x".into());
            let _ = take_recent();
        })
        .join()
        .expect("the destructor's call returned without panicking");
    }

    #[test]
    fn entry_catches_panics_and_records_messages() {
        let _guard = crate::test_lock();
        let code: aclError = Body::enter("aclrtSetDevice", || -> Result<(), Fail<aclError>> {
            panic!("boom")
        });
        assert_eq!(code, ACL_ERROR_RT_INTERNAL_ERROR);
        // SAFETY: a message was just recorded on this thread.
        let msg = unsafe { CStr::from_ptr(take_recent()) }
            .to_string_lossy()
            .into_owned();
        assert!(
            msg.contains("aclrtSetDevice") && msg.contains("boom"),
            "{msg}"
        );
        let code = Body::enter("HcclGetRankId", || {
            hccl_fail(HcclResult::HCCL_E_PARA, "bad")
        });
        assert_eq!(code, HcclResult::HCCL_E_PARA);
    }
}
