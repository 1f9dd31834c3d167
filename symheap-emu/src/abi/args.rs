//! Every C function's arguments as a struct of the function's name, fields named as in CANN's
//! headers: what its body in [`crate::abi::acl_bodies`] or [`crate::abi::hccl_bodies`]
//! receives. Generated from `symheap-sys`'s list, apart from the functions themselves
//! ([`crate::abi::exports`]) so that the bodies need nothing of those.

use std::ffi::{c_char, c_void};

use crate::sys::*;

/// Expands one table's list into an argument struct per function.
macro_rules! arg_structs {
    (
        $table:ident;
        required { $( $req:ident ( $($ra:ident : $rt:ty),* ) -> $rret:ty ; )* }
        optional { $( $opt:ident ( $($oa:ident : $ot:ty),* ) -> $oret:ty ; )* }
    ) => {
        $( arg_structs!(@one $req ( $($ra : $rt),* )); )*
        $( arg_structs!(@one $opt ( $($oa : $ot),* )); )*
    };
    (@one $name:ident ( $($arg:ident : $ty:ty),* )) => {
        /// The C function's arguments, named as in CANN's headers.
        #[allow(non_camel_case_types, non_snake_case, dead_code, reason = "C names; the emulator ignores some arguments")]
        pub(crate) struct $name {
            $(pub(crate) $arg: $ty,)*
        }
    };
}

symheap_sys::hccl_functions!(arg_structs);
symheap_sys::acl_functions!(arg_structs);
