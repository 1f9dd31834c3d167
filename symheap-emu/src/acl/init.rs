//! `aclInit` / `aclFinalize`: the process's initialisation state, with CANN's answers to
//! repeated calls.
//!
//! The emulator needs no initialisation, so no other call depends on this state: it exists
//! only so that a repeated `aclInit` or `aclFinalize` gets the code CANN returns.

use crate::sys::{ACL_ERROR_REPEAT_FINALIZE, ACL_ERROR_REPEAT_INITIALIZE};

use crate::base::errors::{AclResult, acl_fail};
use crate::base::lock::{RankedMutex, lock, ranks};

/// Where a process is between `aclInit` and `aclFinalize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Neither called yet.
    Fresh,
    /// `aclInit` succeeded last.
    Initialised,
    /// `aclFinalize` succeeded last.
    Finalised,
}

/// One process's initialisation state (a type of its own so tests can run the sequences on a
/// private one, whatever other tests do to the process's).
#[derive(Debug)]
pub(crate) struct Init(RankedMutex<Phase>);

impl Init {
    /// Neither `aclInit` nor `aclFinalize` called yet.
    pub(crate) const fn new() -> Init {
        Init(RankedMutex::new(ranks::INIT, Phase::Fresh))
    }

    /// `aclInit`: `ACL_ERROR_REPEAT_INITIALIZE` (100002) when already initialised (CANN's
    /// documentation: the error may be ignored), success otherwise (also after `aclFinalize`).
    pub(crate) fn init(&self) -> AclResult {
        let mut phase = lock(&self.0);
        if *phase == Phase::Initialised {
            return acl_fail(
                ACL_ERROR_REPEAT_INITIALIZE,
                "aclInit was already called (without aclFinalize since); this error may be ignored",
            );
        }
        *phase = Phase::Initialised;
        Ok(())
    }

    /// `aclFinalize`: `ACL_ERROR_REPEAT_FINALIZE` (100037) when it already succeeded with no
    /// `aclInit` since; success otherwise (as CANN, also before any `aclInit`). Live objects
    /// stay usable.
    pub(crate) fn finalize(&self) -> AclResult {
        let mut phase = lock(&self.0);
        if *phase == Phase::Finalised {
            return acl_fail(
                ACL_ERROR_REPEAT_FINALIZE,
                "aclFinalize was already called (without aclInit since)",
            );
        }
        *phase = Phase::Finalised;
        Ok(())
    }
}

/// The process's state.
pub(crate) static PROCESS: Init = Init::new();

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::ACL_SUCCESS;
    use crate::testutil::{acl, recent};

    fn code(r: AclResult) -> i32 {
        r.map_or_else(|f| f.code, |()| ACL_SUCCESS)
    }

    #[test]
    fn repeated_init_and_finalize_get_canns_codes() {
        let s = Init::new();
        assert_eq!(code(s.init()), ACL_SUCCESS);
        assert_eq!(code(s.init()), ACL_ERROR_REPEAT_INITIALIZE);
        assert_eq!(code(s.finalize()), ACL_SUCCESS);
        assert_eq!(code(s.finalize()), ACL_ERROR_REPEAT_FINALIZE);
        // Init -> finalize -> init is the documented cycle.
        assert_eq!(code(s.init()), ACL_SUCCESS);
        assert_eq!(code(s.finalize()), ACL_SUCCESS);
        // Finalize before any init succeeds, as CANN's flag check does.
        assert_eq!(code(Init::new().finalize()), ACL_SUCCESS);
    }

    #[test]
    fn the_c_functions_use_the_process_state() {
        // Other tests may call aclInit concurrently (every Runtime does), but only tests under
        // the test lock finalize, so after any aclInit a second one is a repeat.
        let _g = crate::test_lock();
        let a = acl();
        // SAFETY: aclInit accepts NULL.
        unsafe {
            let first = (a.aclInit)(std::ptr::null());
            assert!(
                first == ACL_SUCCESS || first == ACL_ERROR_REPEAT_INITIALIZE,
                "{first}"
            );
            assert_eq!((a.aclInit)(std::ptr::null()), ACL_ERROR_REPEAT_INITIALIZE);
            assert!(recent().contains("may be ignored"));
            assert_eq!((a.aclFinalize)(), ACL_SUCCESS);
            // Leave the process initialised, as the tests of the layers above expect nothing.
            let again = (a.aclInit)(std::ptr::null());
            assert!(
                again == ACL_SUCCESS || again == ACL_ERROR_REPEAT_INITIALIZE,
                "{again}"
            );
        }
    }
}
