//! The emulator's C functions and its filled tables, generated from the one list in
//! `symheap-sys`.
//!
//! For every function of the list this expands to an `extern "C"` function of the same name
//! and prototype that runs the body of that name in [`crate::abi::hccl_bodies`] or
//! [`crate::abi::acl_bodies`], given its [`crate::abi::args`], through [`Body::enter`]
//! (injected failures, panics caught, the recent error message), and a table fill naming each
//! of them. With the `c-exports` feature the functions carry their C names (`#[no_mangle]`),
//! for a `cdylib` that can stand in for `libhccl.so` / `libascendcl.so`.

use std::ffi::{c_char, c_void};

use crate::abi::entry::Body;
use crate::abi::{acl_bodies, args, hccl_bodies};
use crate::sys::*;

/// Expands `symheap-sys`'s list of one table into exported shims over the bodies in
/// `$bodies`, and a `pub fn $filler() -> $table` with every entry filled (optional ones
/// `Some`).
macro_rules! emulate {
    (
        $bodies:ident $filler:ident $table:ident;
        required { $( $req:ident ( $($ra:ident : $rt:ty),* ) -> $rret:ty ; )* }
        optional { $( $opt:ident ( $($oa:ident : $ot:ty),* ) -> $oret:ty ; )* }
    ) => {
        $( emulate!(@shim $bodies $req ( $($ra : $rt),* ) -> $rret); )*
        $( emulate!(@shim $bodies $opt ( $($oa : $ot),* ) -> $oret); )*

        #[doc = concat!("The `", stringify!($table), "` table, filled with the emulator's functions (every optional entry `Some`).")]
        pub fn $filler() -> $table {
            $table {
                $( $req: $req, )*
                $( $opt: Some($opt), )*
            }
        }
    };
    (@shim $bodies:ident $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty) => {
        #[cfg_attr(feature = "c-exports", unsafe(no_mangle))]
        #[allow(non_snake_case)]
        unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            Body::enter(stringify!($name), move || {
                // SAFETY: for a body that is an `unsafe fn` (one that reads or writes through
                // the caller's pointers), the C caller's contract is the body's contract. The
                // other bodies are safe: one macro makes every shim, hence the allow.
                #[allow(unused_unsafe, reason = "about half the bodies are safe functions")]
                unsafe { $bodies::$name(args::$name { $($arg),* }) }
            })
        }
    };
}

symheap_sys::hccl_functions!(emulate, hccl_bodies hccl_api);
symheap_sys::acl_functions!(emulate, acl_bodies acl_api);
