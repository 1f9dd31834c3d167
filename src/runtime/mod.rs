//! The handles a pool user holds, all safe: the [`Runtime`] (a backend's function tables),
//! devices, [`Stream`]s, [`Event`]s and captured [`Graph`]s, communicators ([`Comm`],
//! [`ParallelGroups`]) and how ranks find each other ([`RootInfo`], [`Placement`]). Every
//! call returns [`Result`], every handle is RAII, and errors inside `Drop` are recorded on
//! the [`Runtime`] instead of panicking. No method of these handles is `unsafe`: what takes
//! raw device addresses is in [`crate::raw`], reached through a handle's `raw()` view. Below
//! the handles, and defined here because they use it, sit the call layer ([`calls`]), the
//! owners of device memory and the loader's [`Backend`] / [`Origin`]: they are public only
//! as `symheap::raw::*`, with the raw layer's contract.
//!
//! A [`Runtime`] is a pair of filled C function tables
//! ([`raw::from_tables`](crate::raw::from_tables)): the real CANN libraries
//! ([`raw::load`](crate::raw::load), [`raw::load_from`](crate::raw::load_from)) or the
//! built-in emulator (`Runtime::emulated`, behind the default `emulator` feature). Nothing
//! here knows which: everything above this module works the same on both.

mod agreement;
pub(crate) mod bootstrap;
pub mod calls;
mod collective_order;
mod comm;
mod device;
mod element;
mod event;
mod graph;
mod groups;
mod host_fn;
mod host_memory;
mod launch_vars;
mod memory;
mod origin;
mod rank_table;
mod stream;
mod survivors;

use std::any::Any;
use std::sync::{Arc, Mutex};

use crate::sys::{ACL_ERROR_REPEAT_INITIALIZE, AclApi, HcclApi};
use crate::{Error, Result};

pub(crate) use agreement::Agreed;
pub use bootstrap::Placement;
pub use comm::{Comm, CommConfig, RootInfo};
pub use element::Element;
pub use event::Event;
pub use graph::Graph;
pub use groups::{GroupSizes, ParallelGroups};
pub(crate) use host_memory::PinnedHostBuffer;
pub use memory::{DevicePtr, Mapping, PhysicalMemory, VirtualRange};
pub use origin::{Backend, Origin};
pub use rank_table::RankTablePlacement;
pub use stream::Stream;
pub(crate) use stream::WeakStream;
pub use survivors::Survivors;

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
    /// Builds a runtime over two filled tables and calls `aclInit`: the body of
    /// [`raw::from_tables`](crate::raw::from_tables), the one constructor every backend goes
    /// through.
    ///
    /// # Safety
    /// As [`raw::from_tables`](crate::raw::from_tables).
    ///
    /// # Errors
    /// The error of `aclInit` (`ACL_ERROR_REPEAT_INITIALIZE` is accepted: another user of the
    /// library initialised it first).
    pub(crate) unsafe fn from_tables(
        hccl: HcclApi,
        acl: AclApi,
        origin: Origin,
    ) -> Result<Runtime> {
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
        match unsafe { calls::aclInit(&rt, std::ptr::null()) } {
            // Another user of the library may have initialised it first.
            Err(Error::Acl { code, .. }) if code == ACL_ERROR_REPEAT_INITIALIZE => {}
            other => other?,
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
}
