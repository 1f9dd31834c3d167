//! Failures inside the emulator, the thread's recent error message (`aclGetRecentErrMsg`) and
//! `HcclGetErrorString`.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char};
use std::sync::OnceLock;

use crate::sys::{ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_PARAM_INVALID, HcclResult, aclError};

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

/// An `ACL_ERROR_RT_PARAM_INVALID` failure: an ACL call's argument is invalid.
pub(crate) fn param<T>(msg: impl Into<String>) -> AclResult<T> {
    acl_fail(ACL_ERROR_RT_PARAM_INVALID, msg)
}

/// An `ACL_ERROR_INVALID_PARAM` (100000) failure: a pointer argument of an ACL call is NULL
/// (CANN's `ACL_REQUIRES_NOT_NULL` check), or another check CANN makes in its ACL layer.
pub(crate) fn invalid<T>(msg: impl Into<String>) -> AclResult<T> {
    acl_fail(ACL_ERROR_INVALID_PARAM, msg)
}

/// Fails with `ACL_ERROR_INVALID_PARAM` when the pointer argument `what` of an ACL call is
/// NULL.
pub(crate) fn acl_non_null(addr: usize, what: &str) -> AclResult {
    if addr == 0 {
        return invalid(format!("{what} is NULL"));
    }
    Ok(())
}

/// Fails with `HCCL_E_PTR` when the pointer argument `what` of an HCCL call is NULL.
pub(crate) fn hccl_non_null(addr: usize, what: &str) -> HcclRes {
    if addr == 0 {
        return hccl_fail(HcclResult::HCCL_E_PTR, format!("{what} is NULL"));
    }
    Ok(())
}

/// An `HCCL_E_PARA` failure: an HCCL call's argument is invalid.
pub(crate) fn para<T>(msg: impl Into<String>) -> HcclRes<T> {
    hccl_fail(HcclResult::HCCL_E_PARA, msg)
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

/// `HcclGetErrorString`: libhccl's description of the code ([`HcclResult::description`]),
/// and for a code it does not describe (libhccl answers codes at or above `HCCL_E_RESERVED`
/// with "unknow error" and has no entry for 22..=1041) "unknown error".
pub(crate) fn hccl_error_string(code: HcclResult) -> &'static CStr {
    // The descriptions as C strings, made once: indexes are the codes 0..=HCCL_E_RESERVED.
    static TEXTS: OnceLock<Vec<Option<CString>>> = OnceLock::new();
    let texts = TEXTS.get_or_init(|| {
        (0..=HcclResult::HCCL_E_RESERVED.0)
            .map(|c| {
                HcclResult(c)
                    .description()
                    .and_then(|t| CString::new(t).ok())
            })
            .collect()
    });
    usize::try_from(code.0)
        .ok()
        .and_then(|i| texts.get(i)?.as_deref())
        .unwrap_or(c"unknown error")
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

    #[test]
    fn error_strings_are_libhccls() {
        assert_eq!(
            hccl_error_string(HcclResult::HCCL_E_PARA),
            c"parameter error"
        );
        assert_eq!(hccl_error_string(HcclResult::HCCL_SUCCESS), c"no error");
        assert_eq!(hccl_error_string(HcclResult(77)), c"unknown error");
        assert_eq!(hccl_error_string(HcclResult(-1)), c"unknown error");
    }
}
