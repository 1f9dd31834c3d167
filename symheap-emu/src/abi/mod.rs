//! The C boundary: entering an emulated C function (an injected failure first, panics caught,
//! the recent error message kept), the `extern "C"` functions and filled tables generated from
//! `symheap-sys`'s list, and the bodies of the ACL and HCCL calls.

pub(crate) mod acl_bodies;
pub(crate) mod args;
pub(crate) mod entry;
pub(crate) mod exports;
pub(crate) mod fork;
pub(crate) mod group;
pub(crate) mod hccl_bodies;
pub(crate) mod inject;
