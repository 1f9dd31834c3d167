//! The symheap emulator built as a shared library: it exports `HcclAllReduce`, `aclrtMapMem`
//! and the rest under their C names, so `symheap::raw::load_from` can open it like the real
//! `libhccl.so` / `libascendcl.so`, and C and C++ programs written for CANN link against it.

// Linking the crate is what matters: its `c-exports` feature marks every emulator entry point
// `#[no_mangle]`, and a cdylib exports those.
pub use symheap_emu::{acl_api, hccl_api};
