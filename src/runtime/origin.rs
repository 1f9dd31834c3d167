//! Where a [`Runtime`](super::Runtime)'s tables come from ([`Backend`]) and what its
//! constructor needs besides them ([`Origin`]); public as `symheap::raw::{Backend, Origin}`.

use std::any::Any;
use std::path::PathBuf;

/// Which backend a [`Runtime`](super::Runtime) calls ([`Runtime::backend`](super::Runtime::backend)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// Tables filled in this process (the built-in emulator, or a caller's own), named.
    InProcess {
        /// What filled them, e.g. `"symheap emulator"`.
        name: &'static str,
    },
    /// Shared libraries loaded at run time.
    Loaded {
        /// The HCCL library that was opened.
        hccl: PathBuf,
        /// The ACL runtime library that was opened.
        acl: PathBuf,
    },
}

/// What [`from_tables`](crate::raw::from_tables) needs besides the two tables.
pub struct Origin {
    /// What [`Runtime::backend`](super::Runtime::backend) reports.
    pub backend: Backend,
    /// Whether device memory is ordinary host memory of this process (true on the emulator):
    /// typed owners then offer host views of it.
    pub host_addressable: bool,
    /// Whatever keeps the tables' code alive (the loaded libraries, or `Box::new(())`); the
    /// runtime drops it after the last call through the tables.
    pub keep_alive: Box<dyn Any + Send + Sync>,
}
