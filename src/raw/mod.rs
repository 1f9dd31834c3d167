//! The raw layer: device memory, symmetric windows and collectives on raw device pointers,
//! one step above the C functions. What the pool is built on; a pool user needs none of it.
//!
//! - [`calls`]: one `unsafe fn` per C function of `symheap-sys`'s list, generated from it,
//!   each returning `Result` with the call's name (the thinnest layer: nothing checked but
//!   the status code, and whether an optional function exists).
//! - RAII owners of device memory and windows: [`VirtualRange`], [`PhysicalMemory`],
//!   [`Mapping`], [`Window`] (with [`DevicePtr`] and [`WindowHandle`], plain addresses and
//!   handles). Making and dropping them is safe: each releases what it holds once, in the
//!   order the C API asks for (a mapping before its range and memory, a window before its
//!   memory), and records a failure in `Drop` on the [`Runtime`] instead of panicking.
//! - Raw views of the safe handles, whose methods are `unsafe`: [`RawComm`] (the
//!   collectives, `comm.raw()`), [`RawRuntime`] and [`RawStream`] (copies and fills,
//!   `rt.raw()`, `stream.raw()`).
//! - The loader seam: [`load`], [`load_from`] and [`from_tables`] make a [`Runtime`] over the
//!   real libraries or any other implementation of the C functions ([`Origin`], [`Backend`]).
//!
//! # Contract
//! The `unsafe fn`s here are the C functions' contracts, stated in Rust: the caller
//! guarantees what the C library cannot check, chiefly that every device address points into
//! live device memory of the right size and stays valid, and untouched by the host, until
//! the stream the work was queued on has been synchronised. What this layer does check is
//! said on each function: the communicator lock (calls on one communicator never overlap),
//! the per-rank length of the V collectives' count arrays, integer conversions, and
//! [`Error::Unsupported`](crate::Error::Unsupported) for a function the library lacks.
//! Nothing here checks that peers agree: that, and typed bounds-checked buffers, is what the
//! pool above adds.

mod collectives;
mod copy;
mod loader;
mod window;

// Defined below the safe handles, which use them: `src/runtime/{calls, memory, origin}.rs`.
// This module is their public path; what it defines itself (the views, windows and the
// loader) sits above the safe handles, so the two never import each other.
pub use crate::runtime::calls;
pub use crate::runtime::{Backend, DevicePtr, Mapping, Origin, PhysicalMemory, VirtualRange};
pub use collectives::RawComm;
pub use copy::{RawRuntime, RawStream};
pub use loader::{load, load_from};
pub(crate) use window::WindowCell;
pub use window::{Window, WindowHandle};

use crate::Result;
use crate::runtime::Runtime;
use crate::sys::{AclApi, HcclApi};

/// Builds a runtime over two filled tables and calls `aclInit`: the one constructor that
/// [`load`], [`load_from`] and the emulator (`Runtime::emulated`) all call, and that a
/// caller with its own implementation of the C functions (a test double, a library linked
/// statically) can call too.
///
/// # Safety
/// - Every function pointer in `hccl` and `acl` implements the C function of that name with
///   exactly the prototype declared in [`crate::sys`], with the semantics CANN's
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
/// use symheap::raw::{self, Backend, Origin};
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
/// let rt = unsafe { raw::from_tables(hccl, symheap::emu::acl_api(), origin) }?;
/// assert!(rt.is_host_addressable());
/// # }
/// # Ok::<(), symheap::Error>(())
/// ```
pub unsafe fn from_tables(hccl: HcclApi, acl: AclApi, origin: Origin) -> Result<Runtime> {
    // SAFETY: the caller's contract, which is the constructor's.
    unsafe { Runtime::from_tables(hccl, acl, origin) }
}
