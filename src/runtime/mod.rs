//! Safe wrappers over the C function tables: every call returns [`Result`], every handle is
//! RAII, and errors inside `Drop` are recorded on the [`Runtime`] instead of panicking.
//!
//! A [`Runtime`] is a pair of filled C function tables ([`Runtime::from_tables`]): the real
//! CANN libraries ([`Runtime::load`], [`Runtime::load_from`]) or the built-in emulator
//! (`symheap::emu`, behind the default `emulator` feature). Nothing here knows which:
//! everything above this module works the same on both.

mod agreement;
pub(crate) mod bootstrap;
mod collective;
mod comm;
mod copy;
mod device;
mod element;
mod event;
mod graph;
mod groups;
mod host_fn;
mod loader;
mod memory;
mod stream;
mod window;

use std::any::Any;
use std::ffi::{CStr, c_char};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::sys::{ACL_ERROR_REPEAT_INITIALIZE, ACL_SUCCESS, AclApi, HcclApi, HcclResult, aclError};
use crate::{Error, Result};

pub(crate) use agreement::Agreed;
pub use bootstrap::Placement;
pub use comm::{Comm, CommConfig, RootInfo};
pub use element::Element;
pub use event::Event;
pub use graph::Graph;
pub use groups::ParallelGroups;
pub use memory::{DevicePtr, Mapping, PhysicalMemory, VirtualRange};
pub use stream::Stream;
pub use window::{Window, WindowHandle};

/// Which backend a [`Runtime`] calls.
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

/// What [`Runtime::from_tables`] needs besides the two tables.
pub struct Origin {
    /// What [`Runtime::backend`] reports.
    pub backend: Backend,
    /// Whether device memory is ordinary host memory of this process (true on the emulator):
    /// typed owners then offer host views of it.
    pub host_addressable: bool,
    /// Whatever keeps the tables' code alive (the loaded libraries, or `Box::new(())`); the
    /// runtime drops it after the last call through the tables.
    pub keep_alive: Box<dyn Any + Send + Sync>,
}

/// A loaded backend: the HCCL and ACL function tables, and what keeps their code alive.
///
/// Cheap to clone (an `Arc`). Every handle made from it keeps it alive, so the libraries are
/// never unloaded while a function pointer taken from them can still be called.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    hccl: HcclApi,
    acl: AclApi,
    backend: Backend,
    /// Whether device memory is host-addressable (true on the emulator only).
    host_addressable: bool,
    drop_errors: Mutex<Vec<Error>>,
    /// Replayable host functions that graphs captured, kept while the graphs live.
    graph_host_fns: host_fn::GraphHostFns,
    // Declared last: dropped after everything that could still call into the libraries.
    _keep_alive: Box<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("backend", &self.inner.backend)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Builds a runtime over two filled tables and calls `aclInit`: the one constructor that
    /// [`Runtime::load`], [`Runtime::load_from`] and the emulator (`symheap::emu`) all call,
    /// and that a caller with its own implementation of the C functions (a test double, a
    /// library linked statically) can call too.
    ///
    /// # Safety
    /// - Every function pointer in `hccl` and `acl` implements the C function of that name
    ///   with exactly the prototype declared in [`crate::sys`], with the semantics CANN's
    ///   documentation gives it (status codes, out-pointers written on success, handles valid
    ///   until destroyed).
    /// - The functions can be called from any thread, and stay callable for as long as
    ///   `origin.keep_alive` lives.
    /// - `origin.host_addressable` is true only if every device address the tables hand out is
    ///   memory of this process that the host may read and write while it is mapped.
    ///
    /// # Errors
    /// The error of `aclInit` (`ACL_ERROR_REPEAT_INITIALIZE` is accepted: another user of the
    /// library initialised it first).
    ///
    /// # Examples
    /// ```
    /// # #[cfg(feature = "emulator")] {
    /// use symheap::Runtime;
    /// use symheap::{Backend, Origin};
    ///
    /// // The emulator's tables, as an older CANN without the symmetric-window API would be.
    /// let mut hccl = symheap::emu::hccl_api();
    /// hccl.HcclCommSymWinRegister = None;
    /// let origin = Origin {
    ///     backend: Backend::InProcess { name: "emulator without windows" },
    ///     host_addressable: true,
    ///     keep_alive: Box::new(()),
    /// };
    /// // SAFETY: the emulator's functions implement the C prototypes and live forever.
    /// let rt = unsafe { Runtime::from_tables(hccl, symheap::emu::acl_api(), origin) }?;
    /// assert!(rt.is_host_addressable());
    /// # }
    /// # Ok::<(), symheap::Error>(())
    /// ```
    pub unsafe fn from_tables(hccl: HcclApi, acl: AclApi, origin: Origin) -> Result<Runtime> {
        let rt = Runtime {
            inner: Arc::new(Inner {
                hccl,
                acl,
                backend: origin.backend,
                host_addressable: origin.host_addressable,
                drop_errors: Mutex::new(Vec::new()),
                graph_host_fns: host_fn::GraphHostFns::default(),
                _keep_alive: origin.keep_alive,
            }),
        };
        // SAFETY: aclInit accepts a null config path; the table entry is aclInit by the
        // caller's contract.
        let code = unsafe { (rt.acl().aclInit)(std::ptr::null()) };
        // Another user of the library may have initialised it first.
        if code != ACL_ERROR_REPEAT_INITIALIZE {
            rt.acl_check("aclInit", code)?;
        }
        Ok(rt)
    }

    /// Which backend this runtime calls.
    pub fn backend(&self) -> &Backend {
        &self.inner.backend
    }

    /// Whether device memory can be read and written by host code (true on the emulator, false
    /// on real NPUs). Typed owners offer host views only when this is true.
    pub fn is_host_addressable(&self) -> bool {
        self.inner.host_addressable
    }

    /// Takes the errors recorded by `Drop` implementations of this runtime's handles since the
    /// last call. A long-running worker should check this periodically.
    pub fn take_drop_errors(&self) -> Vec<Error> {
        std::mem::take(
            &mut *self
                .inner
                .drop_errors
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }

    /// Whether the libraries provide the C function `name` (`"HcclReduce"`,
    /// `"aclrtMalloc"`, ...): the functions symheap requires always, an optional one where
    /// the loaded CANN exports it (an older CANN lacks the symmetric-window calls, for
    /// example), a name symheap does not know never. A call of a missing function fails with
    /// [`Error::Unsupported`] naming it.
    ///
    /// # Examples
    /// ```
    /// # #[cfg(feature = "emulator")] {
    /// let rt = symheap::Runtime::emulated()?;
    /// assert!(rt.supports("HcclCommSymWinRegister"));
    /// assert!(!rt.supports("HcclNoSuchCall"));
    /// # }
    /// # Ok::<(), symheap::Error>(())
    /// ```
    pub fn supports(&self, name: &str) -> bool {
        self.hccl().has(name) || self.acl().has(name)
    }

    /// [`Error::Unsupported`] naming `call` unless the libraries provide it.
    pub(crate) fn require(&self, call: &'static str) -> Result<()> {
        if self.supports(call) {
            Ok(())
        } else {
            Err(Error::Unsupported { call })
        }
    }

    pub(crate) fn hccl(&self) -> &HcclApi {
        &self.inner.hccl
    }

    pub(crate) fn acl(&self) -> &AclApi {
        &self.inner.acl
    }

    /// The host functions captured into graphs in progress, kept for their replays.
    fn graph_host_fns(&self) -> &host_fn::GraphHostFns {
        &self.inner.graph_host_fns
    }

    /// Records an error from a `Drop` (for [`take_drop_errors`](Self::take_drop_errors)) and
    /// logs it as a `tracing` error, so it is never silently lost.
    pub(crate) fn record_drop_error(&self, err: Error) {
        tracing::error!(error = %err, "symheap: error while dropping a handle");
        self.inner
            .drop_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(err);
    }

    /// The library's most recent error text (`aclGetRecentErrMsg`), or an empty string.
    fn recent_error_message(&self) -> String {
        let Some(get) = self.acl().aclGetRecentErrMsg else {
            return String::new();
        };
        // SAFETY: aclGetRecentErrMsg takes no arguments and returns null or a C string that
        // stays valid until the next ACL call on this thread; it is copied out at once.
        unsafe { c_string(get()) }
    }

    /// Turns an `aclError` into a `Result`.
    pub(crate) fn acl_check(&self, call: &'static str, code: aclError) -> Result<()> {
        if code == ACL_SUCCESS {
            return Ok(());
        }
        Err(Error::Acl {
            call,
            code,
            message: self.recent_error_message(),
        })
    }

    /// Turns an `HcclResult` into a `Result`, with `HcclGetErrorString` and any recorded detail.
    pub(crate) fn hccl_check(&self, call: &'static str, code: HcclResult) -> Result<()> {
        if code == HcclResult::HCCL_SUCCESS {
            return Ok(());
        }
        // SAFETY: HcclGetErrorString accepts any code and returns null or a static C string.
        let mut message = unsafe { c_string((self.hccl().HcclGetErrorString)(code)) };
        let detail = self.recent_error_message();
        if !detail.is_empty() {
            message = format!("{message}: {detail}");
        }
        Err(Error::Hccl {
            call,
            code,
            message,
        })
    }

    /// The optional HCCL function `f`, or [`Error::Unsupported`] naming `call`.
    pub(crate) fn optional<F>(call: &'static str, f: Option<F>) -> Result<F> {
        f.ok_or(Error::Unsupported { call })
    }
}

/// Copies a possibly-null C string.
///
/// # Safety
/// `ptr` is null or points to a NUL-terminated string valid for the duration of the call.
unsafe fn c_string(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}
