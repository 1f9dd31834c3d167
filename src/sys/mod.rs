//! Raw FFI: the C types of HCCL and ACL and the function-pointer tables both backends fill.
//!
//! This is the only module with `extern "C"` types. Names keep their C spelling so they can be
//! checked against the CANN headers.
#![allow(non_camel_case_types, non_snake_case)]

mod table;
mod types;

pub(crate) use table::FnTable;
pub use table::{AclApi, CFunction, HcclApi};
#[cfg(feature = "emulator")]
pub(crate) use table::{acl_functions, hccl_functions};
pub use types::*;
