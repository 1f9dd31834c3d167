//! Failures inside the emulator, the thread's recent error message (`aclGetRecentErrMsg`),
//! `HcclGetErrorString`, and the wrapper every C entry point runs its body in.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::sys::{ACL_ERROR_RT_INTERNAL_ERROR, ACL_SUCCESS, HcclResult, aclError};

use super::inject;

/// `ACL_ERROR_RT_INVALID_DEVICEID`: a device id outside `0..64`.
pub(crate) const ACL_ERROR_RT_INVALID_DEVICEID: aclError = 107001;
/// `ACL_ERROR_RT_CONTEXT_NULL`: the calling thread has no current device (no `aclrtSetDevice`).
pub(crate) const ACL_ERROR_RT_CONTEXT_NULL: aclError = 107002;

/// A failed call: the code the C function returns and the detail for `aclGetRecentErrMsg`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fail<C> {
    pub(crate) code: C,
    pub(crate) msg: String,
}

/// The result of an ACL operation.
pub(crate) type AclResult<T = ()> = Result<T, Fail<aclError>>;
/// The result of an HCCL operation.
pub(crate) type HcclRes<T = ()> = Result<T, Fail<HcclResult>>;

/// An ACL failure with `code`.
pub(crate) fn acl_fail<T>(code: aclError, msg: impl Into<String>) -> AclResult<T> {
    Err(Fail {
        code,
        msg: msg.into(),
    })
}

/// An HCCL failure with `code`.
pub(crate) fn hccl_fail<T>(code: HcclResult, msg: impl Into<String>) -> HcclRes<T> {
    Err(Fail {
        code,
        msg: msg.into(),
    })
}

thread_local! {
    /// The message of this thread's most recent failure, not yet read.
    static RECENT: RefCell<Option<CString>> = const { RefCell::new(None) };
    /// The message handed out by the last `aclGetRecentErrMsg`: kept alive until the next
    /// call on this thread, as the C API promises.
    static HANDED_OUT: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Records `msg` as this thread's most recent error message. During thread-local destruction
/// (a failing call from another thread-local's destructor) the message is dropped: `with`
/// would panic there, and a panic across the C boundary aborts.
pub(crate) fn set_recent(msg: String) {
    // A C string cannot hold NUL bytes; none of ours should contain one, but never fail here.
    let c = CString::new(msg.replace('\0', "?")).unwrap_or_default();
    let _ = RECENT.try_with(|r| *r.borrow_mut() = Some(c));
}

/// `aclGetRecentErrMsg`: takes this thread's recent message (read-and-clear) and returns a
/// pointer valid until the next call on this thread, or null when there is none (also during
/// thread-local destruction).
pub(crate) fn take_recent() -> *const c_char {
    let msg = RECENT.try_with(|r| r.borrow_mut().take()).ok().flatten();
    HANDED_OUT
        .try_with(|h| {
            let mut h = h.borrow_mut();
            *h = msg;
            h.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())
        })
        .unwrap_or(std::ptr::null())
}

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

/// Runs the body of the C function `name`: an injected failure first, then `body` with panics
/// caught (nothing unwinds across the C boundary), and the failure's message recorded.
pub(crate) fn entry<C: Code>(name: &'static str, body: impl FnOnce() -> Result<(), Fail<C>>) -> C {
    entry_with(name, || {}, body)
}

/// [`entry`] for a collective C function: `on_injected` runs when the call fails by injection
/// (to consume the call's sequence number, as a locally rejected call does).
pub(crate) fn entry_with<C: Code>(
    name: &'static str,
    on_injected: impl FnOnce(),
    body: impl FnOnce() -> Result<(), Fail<C>>,
) -> C {
    if let Some(raw) = inject::take(name) {
        // Best effort: a panic here is caught and ignored, the injected code is returned.
        let _ = catch_unwind(AssertUnwindSafe(on_injected));
        set_recent(format!("{name}: injected failure (code {raw})"));
        return C::from_raw(raw);
    }
    match catch_unwind(AssertUnwindSafe(body)) {
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

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// `HcclGetErrorString`: a static description naming the code.
pub(crate) fn hccl_error_string(code: HcclResult) -> &'static CStr {
    match code.0 {
        0 => c"HCCL_SUCCESS: success",
        1 => c"HCCL_E_PARA: parameter error",
        2 => c"HCCL_E_PTR: empty pointer",
        3 => c"HCCL_E_MEMORY: memory error",
        4 => c"HCCL_E_INTERNAL: internal error",
        5 => c"HCCL_E_NOT_SUPPORT: not supported",
        6 => c"HCCL_E_NOT_FOUND: resource not found",
        7 => c"HCCL_E_UNAVAIL: resource unavailable",
        8 => c"HCCL_E_SYSCALL: system call error",
        9 => c"HCCL_E_TIMEOUT: timeout",
        10 => c"HCCL_E_OPEN_FILE_FAILURE: open file failure",
        11 => c"HCCL_E_TCP_CONNECT: tcp connect failure",
        12 => c"HCCL_E_ROCE_CONNECT: roce connect failure",
        13 => c"HCCL_E_TCP_TRANSFER: tcp transfer failure",
        14 => c"HCCL_E_ROCE_TRANSFER: roce transfer failure",
        15 => c"HCCL_E_RUNTIME: runtime call failure",
        16 => c"HCCL_E_DRV: driver call failure",
        17 => c"HCCL_E_PROFILING: profiling failure",
        18 => c"HCCL_E_CCE: cce failure",
        19 => c"HCCL_E_NETWORK: network failure",
        20 => c"HCCL_E_AGAIN: try again",
        21 => c"HCCL_E_REMOTE: error cqe",
        22 => c"HCCL_E_SUSPENDING: communicator suspending",
        23 => c"HCCL_E_OPRETRY_FAIL: operator retry failure",
        24 => c"HCCL_E_OOM: out of memory",
        1041 => c"HCCL_E_IN_STATUS: wrong status",
        1042 => c"HCCL_E_RESERVED: reserved",
        _ => c"unknown HcclResult",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_message_is_read_once() {
        set_recent("first".into());
        let p = take_recent();
        assert!(!p.is_null());
        // SAFETY: non-null and valid until the next take_recent on this thread.
        assert_eq!(unsafe { CStr::from_ptr(p) }.to_str().unwrap(), "first");
        assert!(take_recent().is_null());
    }

    /// A failing call from a thread-local destructor that runs after `RECENT` was destroyed.
    #[test]
    fn calls_during_thread_local_destruction_do_not_panic() {
        struct Late;
        impl Drop for Late {
            fn drop(&mut self) {
                let code: HcclResult = entry("HcclGetRankId", || {
                    hccl_fail(HcclResult::HCCL_E_PARA, "from a destructor")
                });
                assert_eq!(code, HcclResult::HCCL_E_PARA);
                let _ = take_recent();
            }
        }
        thread_local! { static LATE: Late = const { Late }; }
        std::thread::spawn(|| {
            LATE.with(|_| {});
            // Registered after LATE's destructor, so RECENT is destroyed first.
            set_recent("x".into());
            let _ = take_recent();
        })
        .join()
        .expect("the destructor's call returned without panicking");
    }

    #[test]
    fn entry_catches_panics_and_records_messages() {
        let _guard = crate::emu::test_lock();
        let code: aclError = entry("aclrtSetDevice", || panic!("boom"));
        assert_eq!(code, ACL_ERROR_RT_INTERNAL_ERROR);
        // SAFETY: a message was just recorded on this thread.
        let msg = unsafe { CStr::from_ptr(take_recent()) }
            .to_string_lossy()
            .into_owned();
        assert!(
            msg.contains("aclrtSetDevice") && msg.contains("boom"),
            "{msg}"
        );
        let code: HcclResult = entry("HcclGetRankId", || {
            hccl_fail(HcclResult::HCCL_E_PARA, "bad")
        });
        assert_eq!(code, HcclResult::HCCL_E_PARA);
        assert_eq!(hccl_error_string(code), c"HCCL_E_PARA: parameter error");
        assert_eq!(hccl_error_string(HcclResult(77)), c"unknown HcclResult");
    }
}
