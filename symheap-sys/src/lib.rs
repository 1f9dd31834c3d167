//! Raw FFI for symheap: the C types of HCCL and the ACL runtime, and the function-pointer
//! tables that both backends fill (the real CANN libraries, loaded at run time, and the
//! emulator, `symheap-emu`).
//!
//! This is the only crate with `extern "C"` types. Names keep their C spelling so they can be
//! checked against the CANN headers; layouts are pinned with `static_assertions`.
//!
//! [`hccl_functions!`] and [`acl_functions!`] are the one list of C functions: the tables here
//! ([`HcclApi`], [`AclApi`]) and the emulator's exported functions are expanded from it.
//! The words above the C types (which operation, which reduction, which element type) are
//! in `symheap-types`, which knows no C; this crate converts them to their C values
//! (`HcclReduceOp::from(ReduceOp::Sum)`, `HcclDataType::from(DataType::F32)`).
#![allow(non_camel_case_types, non_snake_case)]

mod convert;
mod table;
mod types;

pub use table::{AclApi, CFunction, FnTable, HcclApi};
pub use types::*;
