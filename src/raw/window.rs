//! Symmetric windows: memory registered with `HcclCommSymWinRegister`.

use std::sync::Arc;

use crate::Result;
use crate::runtime::Comm;
use crate::runtime::{DevicePtr, Mapping, calls};
use crate::sys::HcclCommSymWindow;

/// An opaque window handle, as `HcclCommSymWinGet` returns it (a device pointer on real
/// hardware: compare it, never dereference it).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowHandle(usize);

impl std::fmt::Debug for WindowHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WindowHandle({:#x})", self.0)
    }
}

impl WindowHandle {
    /// No window: what a pool's blocks report on a communicator that spans SuperPoDs, where
    /// HCCL has no windows ([`Comm::spans_superpods`]).
    pub const NONE: WindowHandle = WindowHandle(0);

    /// The raw handle.
    pub fn as_raw(self) -> HcclCommSymWindow {
        self.0 as HcclCommSymWindow
    }

    fn from_raw(raw: HcclCommSymWindow) -> Self {
        WindowHandle(raw as usize)
    }
}

/// A window handle that a wake replaces: the pool's blocks read their window through it.
#[derive(Debug)]
pub(crate) struct WindowCell(std::sync::atomic::AtomicUsize);

impl WindowCell {
    pub(crate) fn new(handle: WindowHandle) -> Self {
        WindowCell(std::sync::atomic::AtomicUsize::new(handle.0))
    }

    pub(crate) fn get(&self) -> WindowHandle {
        WindowHandle(self.0.load(std::sync::atomic::Ordering::Acquire))
    }

    pub(crate) fn set(&self, handle: WindowHandle) {
        self.0.store(handle.0, std::sync::atomic::Ordering::Release);
    }
}

/// A registered symmetric window; deregistered (collectively) on drop.
///
/// The window keeps the memory it registered alive, so that memory is never unmapped or freed
/// while registered. If deregistration fails, the memory is handed to the communicator and
/// freed after `HcclCommDestroy` (which deregisters what is left).
///
/// Registration and deregistration are collective: every rank must register and drop its
/// windows in the same order.
#[derive(Debug)]
pub struct Window {
    comm: Comm,
    handle: WindowHandle,
    mapping: Arc<Mapping>,
    /// Set by [`Window::deregister`], so `Drop` does not deregister twice.
    deregistered: bool,
}

impl Window {
    /// Registers the whole of `mapping` (memory from reserve + allocate + map) as a symmetric
    /// window (`HcclCommSymWinRegister`, flag 1). Collective: every rank calls it with a
    /// mapping of the same size.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) on libraries without symmetric windows;
    /// the library's error for mismatched sizes or an exhausted per-rank stride.
    pub fn register(comm: &Comm, mapping: &Arc<Mapping>) -> Result<Window> {
        let rt = comm.runtime();
        let mut raw = std::ptr::null_mut();
        comm.serialised(|c| {
            // SAFETY: live communicator, mapped memory and a valid out-pointer.
            unsafe {
                calls::HcclCommSymWinRegister(
                    rt,
                    c,
                    mapping.ptr().as_raw(),
                    mapping.size(),
                    &mut raw,
                    1,
                )
            }
        })?;
        tracing::debug!(
            rank = comm.rank(),
            bytes = mapping.size(),
            "symheap: window registered"
        );
        Ok(Window {
            comm: comm.clone(),
            handle: WindowHandle::from_raw(raw),
            mapping: Arc::clone(mapping),
            deregistered: false,
        })
    }

    /// Device memory of at least `bytes` (rounded up to the granularity) on the
    /// communicator's device, registered as a window: reserve, allocate, map and register in
    /// one call, undone in the right order on drop. Collective, as [`Window::register`].
    ///
    /// # Errors
    /// As [`Mapping::allocate`] and [`Window::register`]; what was done is undone. When some
    /// rank cannot allocate its memory, no rank registers: that rank returns its own error
    /// and the others [`Error::Asymmetric`](crate::Error::Asymmetric) naming it, at once.
    ///
    /// # Examples
    /// ```
    /// # #[cfg(feature = "emulator")] {
    /// use symheap::raw::Window;
    ///
    /// let sizes = symheap::emu::launch(2, |comm| {
    ///     let window = Window::allocate(comm, 1000)?;
    ///     let (handle, offset) = comm.window_get(window.ptr(), 1000)?;
    ///     assert_eq!((handle, offset), (window.handle(), 0));
    ///     Ok(window.size())
    /// })?;
    /// assert_eq!(sizes, [2 << 20, 2 << 20]); // one 2 MiB granule on the emulator
    /// # }
    /// # Ok::<(), symheap::Error>(())
    /// ```
    pub fn allocate(comm: &Comm, bytes: u64) -> Result<Window> {
        let rt = comm.runtime();
        let size = rt.round_to_granularity(bytes, comm.device())?;
        // Every rank learns whether every rank has its memory before anyone registers: a
        // rank that has none would leave its peers waiting in the registration.
        let mapping = Mapping::allocate(rt, size, comm.device());
        let mapping = Arc::new(comm.agree("allocate their memory for the window", mapping)?);
        Window::register(comm, &mapping)
    }

    /// The registered memory.
    pub fn mapping(&self) -> &Arc<Mapping> {
        &self.mapping
    }

    /// The window's handle.
    pub fn handle(&self) -> WindowHandle {
        self.handle
    }

    /// The registered address.
    pub fn ptr(&self) -> DevicePtr {
        self.mapping.ptr()
    }

    /// The registered size.
    pub fn size(&self) -> u64 {
        self.mapping.size()
    }

    /// Deregisters the window now (collective), then releases its memory if the window held
    /// the last handle on it ([`Mapping::release`]), reporting any error instead of recording
    /// it as `Drop` would.
    ///
    /// # Errors
    /// The library's error. If deregistering or unmapping fails, the memory stays with the
    /// communicator, which tries again once it is destroyed.
    pub fn deregister(mut self) -> Result<()> {
        self.deregistered = true;
        self.deregister_raw()?;
        let (comm, mapping) = (self.comm.clone(), Arc::clone(&self.mapping));
        drop(self);
        let Some(mapping) = Arc::into_inner(mapping) else {
            return Ok(()); // someone else still holds the memory
        };
        if let Err(e) = mapping.unmap() {
            // Tried again when the communicator is destroyed.
            comm.adopt_orphan(None, Arc::new(mapping));
            return Err(e);
        }
        mapping.release()
    }

    /// Leaves the window registered for `HcclCommDestroy` to release, without a collective
    /// step: for an owner that cannot count on its peers (its thread is panicking, or its
    /// queued work failed). The memory goes to the communicator, which frees it after the
    /// destroy (hicann/hcomm: the communicator's `SymmetricMemory` deregisters every window
    /// still registered when it is destroyed).
    pub(crate) fn leave_to_destroy(mut self) {
        self.deregistered = true;
        self.comm
            .adopt_orphan(Some(self.handle.0), Arc::clone(&self.mapping));
    }

    /// Deregisters; on failure hands the memory to the communicator.
    fn deregister_raw(&self) -> Result<()> {
        let result = self.comm.serialised(|_| {
            // SAFETY: the handle came from a successful register and is deregistered once:
            // the flag is set before, and checked by, the only other caller (`drop`).
            unsafe { calls::HcclCommSymWinDeregister(self.comm.runtime(), self.handle.as_raw()) }
        });
        match &result {
            Ok(()) => tracing::debug!(
                rank = self.comm.rank(),
                bytes = self.mapping.size(),
                "symheap: window deregistered"
            ),
            Err(_) => self
                .comm
                .adopt_orphan(Some(self.handle.0), Arc::clone(&self.mapping)),
        }
        result
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        if self.deregistered {
            return;
        }
        if let Err(e) = self.deregister_raw() {
            self.comm.runtime().record_drop_error(e);
        }
    }
}

impl Comm {
    /// Finds the window holding `[ptr, ptr + len)` and the offset of `ptr` in it
    /// (`HcclCommSymWinGet`).
    ///
    /// # Errors
    /// `HCCL_E_NOT_FOUND` when the range is not wholly inside one window (HCCL also says so
    /// on every one-rank communicator); [`Error::Unsupported`](crate::Error::Unsupported) on
    /// libraries without symmetric windows.
    pub fn window_get(&self, ptr: DevicePtr, len: u64) -> Result<(WindowHandle, u64)> {
        calls::require::HcclCommSymWinGet(self.runtime())?;
        let len = usize::try_from(len)
            .map_err(|_| crate::Error::invalid(format!("length {len} exceeds usize")))?;
        let (mut raw, mut offset) = (std::ptr::null_mut(), 0usize);
        self.serialised(|comm| {
            // SAFETY: live communicator and valid out-pointers; the library only looks the
            // range up.
            unsafe {
                calls::HcclCommSymWinGet(
                    self.runtime(),
                    comm,
                    ptr.as_raw(),
                    len,
                    &mut raw,
                    &mut offset,
                )
            }
        })?;
        Ok((WindowHandle::from_raw(raw), offset as u64))
    }

    /// The path a `kind` collective from `[input, +input_len)` to `[output, +output_len)`
    /// takes on this communicator, by HCCL's rules (`IsSupportSymmetricMemory`): ranks in one
    /// SuperPoD ([`spans_superpods`](Self::spans_superpods)), the kind, more than one rank,
    /// AI CPU expansion, and each buffer wholly inside one of this communicator's windows,
    /// found with `HcclCommSymWinGet` as HCCL finds them.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) on libraries without symmetric
    /// windows; the library's error for a lookup that fails other than "not found".
    pub fn path(
        &self,
        kind: crate::Collective,
        input: DevicePtr,
        input_len: u64,
        output: DevicePtr,
        output_len: u64,
    ) -> Result<crate::CollectivePath> {
        let windowed = |ptr, len| match self.window_get(ptr, len) {
            Ok(_) => Ok(true),
            Err(crate::Error::Hccl { code, .. })
                if code == crate::sys::HcclResult::HCCL_E_NOT_FOUND =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        };
        if self.spans_superpods() {
            // No windows to look up: HCCL makes this communicator none.
            return Ok(crate::CollectivePath::Staged(crate::Staged::CrossSuperPod));
        }
        let in_windows = windowed(input, input_len)? && windowed(output, output_len)?;
        Ok(crate::path_rules::predict(
            kind,
            self.placement(),
            self.expands_on_ai_cpu(),
            self.rank_count(),
            in_windows,
        ))
    }
}
