//! One wrapper per C function of `symheap-sys`'s list, generated from it: the thinnest layer
//! over the tables, in the spirit of cudarc's `result` modules.
//!
//! Each wrapper is named as its C function and takes the [`Runtime`] whose tables it calls,
//! then the C parameters, unchanged and in C order. It calls the table entry and returns:
//! - for a function returning a status code (`HcclResult`, `aclError`), `Result<()>`: the
//!   error ([`Error::Hccl`] / [`Error::Acl`]) names the call (its name in the list) and
//!   carries the library's text (`HcclGetErrorString`, `aclGetRecentErrMsg`);
//! - for one returning a value (`HcclGetErrorString`, `aclGetRecentErrMsg`,
//!   `aclrtGetSocName`), that value;
//! - for an optional function the library does not export, [`Error::Unsupported`] naming it
//!   (a value-returning one then returns `Result` of its value). [`require`] holds the same
//!   check without the call, for callers that want to fail before doing any work, and
//!   [`name`] every function's C name, for messages about a call that are not its status.
//!
//! Nothing else is checked: no argument is looked at, no lock is taken.
//!
//! # Safety (every function here)
//! A wrapper's contract is its C function's, as CANN documents it: every pointer valid for
//! what the function reads or writes through it, every handle live and of this runtime's
//! libraries, and the thread rules of the call (a communicator is used by one thread at a
//! time). The wrappers add nothing to it and take nothing from it.
// The wrappers keep the C names and parameter lists, so that each reads as its prototype.
#![allow(non_snake_case, clippy::too_many_arguments)]

use std::ffi::{CStr, c_char, c_void};

use super::Runtime;
use crate::sys::*;
use crate::{Error, Result};

/// Turns the list's entries into wrappers, one entry at a time, choosing the wrapper's shape
/// from the return type as the list spells it.
macro_rules! wrappers {
    // One list: `required { .. } optional { .. }`, from `hccl_functions!`/`acl_functions!`.
    ($table:ident; $api:ident; required { $($req:tt)* } optional { $($opt:tt)* }) => {
        wrappers!(@each $table required $($req)*);
        wrappers!(@each $table optional $($opt)*);
    };
    (@each $table:ident $kind:ident) => {};
    (@each $table:ident $kind:ident
        $name:ident ( $($a:ident : $t:ty),* ) -> HcclResult ; $($rest:tt)*) => {
        wrappers!(@status $table $kind hccl_status $name ($($a: $t),*));
        wrappers!(@each $table $kind $($rest)*);
    };
    (@each $table:ident $kind:ident
        $name:ident ( $($a:ident : $t:ty),* ) -> aclError ; $($rest:tt)*) => {
        wrappers!(@status $table $kind acl_status $name ($($a: $t),*));
        wrappers!(@each $table $kind $($rest)*);
    };
    (@each $table:ident $kind:ident
        $name:ident ( $($a:ident : $t:ty),* ) -> $ret:ty ; $($rest:tt)*) => {
        wrappers!(@value $table $kind $name ($($a: $t),*) -> $ret);
        wrappers!(@each $table $kind $($rest)*);
    };

    (@status $table:ident required $check:ident $name:ident ($($a:ident : $t:ty),*)) => {
        #[doc = concat!("`", stringify!($name), "` (required), its status as a `Result`.")]
        ///
        /// # Errors
        /// The library's status, when it is not success.
        ///
        /// # Safety
        /// The C function's contract: see the [module docs](self).
        pub unsafe fn $name(rt: &Runtime, $($a: $t),*) -> Result<()> {
            // SAFETY: the caller keeps the C function's contract, and the table entry is
            // that function (`raw::from_tables`' contract).
            let code = unsafe { (rt.$table().$name)($($a),*) };
            $check(rt, stringify!($name), code)
        }
    };
    (@status $table:ident optional $check:ident $name:ident ($($a:ident : $t:ty),*)) => {
        #[doc = concat!("`", stringify!($name), "` (optional), its status as a `Result`.")]
        ///
        /// # Errors
        /// [`Error::Unsupported`] where the library lacks it; the library's status, when it is
        /// not success.
        ///
        /// # Safety
        /// The C function's contract: see the [module docs](self).
        pub unsafe fn $name(rt: &Runtime, $($a: $t),*) -> Result<()> {
            let f = rt.$table().$name.ok_or(Error::Unsupported { call: stringify!($name) })?;
            // SAFETY: the caller keeps the C function's contract, and the table entry is
            // that function (`raw::from_tables`' contract).
            let code = unsafe { f($($a),*) };
            $check(rt, stringify!($name), code)
        }
    };
    (@value $table:ident required $name:ident ($($a:ident : $t:ty),*) -> $ret:ty) => {
        #[doc = concat!("`", stringify!($name), "` (required), returning its value.")]
        ///
        /// # Safety
        /// The C function's contract: see the [module docs](self).
        pub unsafe fn $name(rt: &Runtime, $($a: $t),*) -> $ret {
            // SAFETY: the caller keeps the C function's contract, and the table entry is
            // that function (`raw::from_tables`' contract).
            unsafe { (rt.$table().$name)($($a),*) }
        }
    };
    (@value $table:ident optional $name:ident ($($a:ident : $t:ty),*) -> $ret:ty) => {
        #[doc = concat!("`", stringify!($name), "` (optional), returning its value.")]
        ///
        /// # Errors
        /// [`Error::Unsupported`] where the library lacks it.
        ///
        /// # Safety
        /// The C function's contract: see the [module docs](self).
        pub unsafe fn $name(rt: &Runtime, $($a: $t),*) -> Result<$ret> {
            let f = rt.$table().$name.ok_or(Error::Unsupported { call: stringify!($name) })?;
            // SAFETY: the caller keeps the C function's contract, and the table entry is
            // that function (`raw::from_tables`' contract).
            Ok(unsafe { f($($a),*) })
        }
    };
}

/// One availability check per optional function of a list, for [`require`].
macro_rules! requirements {
    ($table:ident; $api:ident;
        required { $( $req:ident ( $($ra:ident : $rt:ty),* ) -> $rret:ty ; )* }
        optional { $( $opt:ident ( $($oa:ident : $ot:ty),* ) -> $oret:ty ; )* }
    ) => {
        $(
            #[doc = concat!("[`Error::Unsupported`] naming `", stringify!($opt), "` unless the library exports it.")]
            ///
            /// # Errors
            /// As above.
            pub fn $opt(rt: &Runtime) -> Result<()> {
                match rt.$table().$opt {
                    Some(_) => Ok(()),
                    None => Err(Error::Unsupported { call: stringify!($opt) }),
                }
            }
        )*
    };
}

/// One constant per function of a list, its C name, for [`name`].
macro_rules! names {
    ($table:ident; $api:ident;
        required { $( $req:ident ( $($ra:ident : $rt:ty),* ) -> $rret:ty ; )* }
        optional { $( $opt:ident ( $($oa:ident : $ot:ty),* ) -> $oret:ty ; )* }
    ) => {
        $(
            #[doc = concat!("`\"", stringify!($req), "\"`.")]
            pub const $req: &str = stringify!($req);
        )*
        $(
            #[doc = concat!("`\"", stringify!($opt), "\"`.")]
            pub const $opt: &str = stringify!($opt);
        )*
    };
}

symheap_sys::hccl_functions!(wrappers, hccl;);
symheap_sys::acl_functions!(wrappers, acl;);

pub mod require {
    //! Whether the library exports an optional C function, one check per function of the
    //! list: the check each wrapper of [`calls`](super) makes before its call, for callers
    //! that must fail with [`Error::Unsupported`] before doing any work.

    use super::Runtime;
    use crate::{Error, Result};

    symheap_sys::hccl_functions!(requirements, hccl;);
    symheap_sys::acl_functions!(requirements, acl;);
}

pub mod name {
    //! The C name of every function of the list, for messages about a call that are not its
    //! status (an argument refused before it is made, say).
    #![allow(non_upper_case_globals)]

    symheap_sys::hccl_functions!(names, hccl;);
    symheap_sys::acl_functions!(names, acl;);
}

/// An `HcclResult` as a `Result`: the message is `HcclGetErrorString`'s text, followed by the
/// library's most recent detail where it has one.
fn hccl_status(rt: &Runtime, call: &'static str, code: HcclResult) -> Result<()> {
    if code == HcclResult::HCCL_SUCCESS {
        return Ok(());
    }
    // SAFETY: HcclGetErrorString accepts any code and returns null or a static C string,
    // copied out at once.
    let mut message = unsafe { c_string(HcclGetErrorString(rt, code)) };
    let detail = recent_error_message(rt);
    if !detail.is_empty() {
        message = format!("{message}: {detail}");
    }
    Err(Error::Hccl {
        call,
        code,
        message,
    })
}

/// An `aclError` as a `Result`, with the library's most recent error text.
fn acl_status(rt: &Runtime, call: &'static str, code: aclError) -> Result<()> {
    if code == ACL_SUCCESS {
        return Ok(());
    }
    Err(Error::Acl {
        call,
        code,
        message: recent_error_message(rt),
    })
}

/// The library's most recent error text (`aclGetRecentErrMsg`), or an empty string where it
/// has none or lacks the call.
fn recent_error_message(rt: &Runtime) -> String {
    // SAFETY: aclGetRecentErrMsg takes no arguments and returns null or a C string that stays
    // valid until the next ACL call on this thread; it is copied out at once.
    unsafe { aclGetRecentErrMsg(rt) }.map_or_else(
        |_| String::new(),
        |text| {
            // SAFETY: as above.
            unsafe { c_string(text) }
        },
    )
}

/// Copies a possibly-null C string.
///
/// # Safety
/// `ptr` is null or points to a NUL-terminated string valid for the duration of the call.
pub(crate) unsafe fn c_string(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(all(test, feature = "emulator"))]
mod tests {
    use std::ptr::null_mut;

    use super::*;
    use crate::raw::{Backend, Origin, from_tables};

    /// The emulator's tables without `HcclReduce`, as a CANN that lacks it would be.
    fn without_reduce() -> Runtime {
        let mut hccl = crate::emu::hccl_api();
        hccl.HcclReduce = None;
        let origin = Origin {
            backend: Backend::InProcess {
                name: "emulator without HcclReduce",
            },
            host_addressable: true,
            keep_alive: Box::new(()),
        };
        // SAFETY: the emulator's functions implement the C prototypes and live forever.
        unsafe { from_tables(hccl, crate::emu::acl_api(), origin) }.unwrap()
    }

    #[test]
    fn an_absent_optional_function_is_unsupported_under_its_listed_name() {
        let rt = without_reduce();
        let (dt, op) = (
            HcclDataType::HCCL_DATA_TYPE_FP32,
            HcclReduceOp::HCCL_REDUCE_SUM,
        );
        // SAFETY: the table entry is absent, so nothing is called.
        let err = unsafe {
            HcclReduce(
                &rt,
                null_mut(),
                null_mut(),
                1,
                dt,
                op,
                0,
                null_mut(),
                null_mut(),
            )
        }
        .unwrap_err();
        assert!(
            matches!(err, Error::Unsupported { call: "HcclReduce" }),
            "{err}"
        );
        assert!(matches!(
            require::HcclReduce(&rt),
            Err(Error::Unsupported { call: "HcclReduce" })
        ));
        assert!(require::HcclSend(&rt).is_ok());
        assert_eq!(name::HcclReduce, "HcclReduce");
    }

    #[test]
    fn a_failed_status_names_the_call_and_carries_the_library_text() {
        let rt = without_reduce();
        // SAFETY: a null out-pointer is refused by the library before any write.
        let err = unsafe { HcclGetRankSize(&rt, null_mut(), null_mut()) }.unwrap_err();
        let Error::Hccl { call, message, .. } = &err else {
            panic!("expected an HCCL error, got {err}");
        };
        assert_eq!(*call, "HcclGetRankSize");
        assert!(!message.is_empty(), "{err}");
    }
}
