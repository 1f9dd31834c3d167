//! Symmetric windows: memory registered with `HcclCommSymWinRegister`.

use super::{Comm, DevicePtr, Runtime};
use crate::Result;
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
    /// The raw handle.
    pub fn as_raw(self) -> HcclCommSymWindow {
        self.0 as HcclCommSymWindow
    }

    fn from_raw(raw: HcclCommSymWindow) -> Self {
        WindowHandle(raw as usize)
    }
}

/// A registered symmetric window; deregistered (collectively) on drop.
///
/// Registration and deregistration are collective: every rank must register and drop its
/// windows in the same order.
#[derive(Debug)]
pub struct Window {
    comm: Comm,
    handle: WindowHandle,
    ptr: DevicePtr,
    size: u64,
    /// Set by [`Window::deregister`], so `Drop` does not deregister twice.
    deregistered: bool,
}

impl Window {
    /// Registers `size` bytes at `ptr` (memory from reserve + allocate + map) as a symmetric
    /// window (`HcclCommSymWinRegister`, flag 1). Collective: every rank calls it with the same
    /// size. HCCL makes the window cover the whole physical allocation mapped at `ptr`.
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) on libraries without symmetric windows;
    /// the library's error for memory that is not mapped device memory, mismatched sizes, or
    /// an exhausted per-rank stride.
    pub fn register(comm: &Comm, ptr: DevicePtr, size: u64) -> Result<Window> {
        let rt = comm.runtime();
        let register =
            Runtime::optional("HcclCommSymWinRegister", rt.hccl().HcclCommSymWinRegister)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: live communicator and valid out-pointer; the library validates the range.
        let code = unsafe { register(comm.as_raw(), ptr.as_raw(), size, &mut raw, 1) };
        rt.hccl_check("HcclCommSymWinRegister", code)?;
        Ok(Window {
            comm: comm.clone(),
            handle: WindowHandle::from_raw(raw),
            ptr,
            size,
            deregistered: false,
        })
    }

    /// Deregisters the window now (collective), reporting any error instead of recording it
    /// as `Drop` would.
    ///
    /// # Errors
    /// The library's error.
    pub fn deregister(mut self) -> Result<()> {
        self.deregistered = true;
        self.deregister_raw()
    }

    fn deregister_raw(&self) -> Result<()> {
        let rt = self.comm.runtime();
        let deregister = Runtime::optional(
            "HcclCommSymWinDeregister",
            rt.hccl().HcclCommSymWinDeregister,
        )?;
        // SAFETY: the handle came from a successful register and is deregistered once: the
        // flag is set before, and checked by, the only other caller (`drop`).
        let code = unsafe { deregister(self.handle.as_raw()) };
        rt.hccl_check("HcclCommSymWinDeregister", code)
    }

    /// The window's handle.
    pub fn handle(&self) -> WindowHandle {
        self.handle
    }

    /// The registered address.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The registered size.
    pub fn size(&self) -> u64 {
        self.size
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
        let rt = self.runtime();
        let get = Runtime::optional("HcclCommSymWinGet", rt.hccl().HcclCommSymWinGet)?;
        let len = usize::try_from(len)
            .map_err(|_| crate::Error::invalid(format!("length {len} exceeds usize")))?;
        let (mut raw, mut offset) = (std::ptr::null_mut(), 0usize);
        // SAFETY: live communicator and valid out-pointers; the library only looks the range up.
        let code = unsafe { get(self.as_raw(), ptr.as_raw(), len, &mut raw, &mut offset) };
        rt.hccl_check("HcclCommSymWinGet", code)?;
        Ok((WindowHandle::from_raw(raw), offset as u64))
    }
}
