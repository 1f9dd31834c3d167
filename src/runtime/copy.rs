//! Copies between host and device memory, and memset.

use std::ffi::c_void;

use super::{DevicePtr, Runtime, Stream};
use crate::Result;
use crate::sys::aclrtMemcpyKind;

impl Runtime {
    /// Copies `src` into device memory at `dst`, returning when the copy is done.
    ///
    /// # Errors
    /// The runtime's error (for example a destination outside device memory).
    ///
    /// # Safety
    /// `dst..dst + src.len()` is device memory the caller may write, and no queued work still
    /// reads or writes it.
    pub unsafe fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: the caller owns the destination; `src` is a valid host slice.
        let code = unsafe {
            (self.acl().aclrtMemcpy)(
                dst.as_raw(),
                src.len(),
                src.as_ptr().cast(),
                src.len(),
                aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE,
            )
        };
        self.acl_check("aclrtMemcpy", code)
    }

    /// Copies device memory at `src` into `dst`, returning when the copy is done.
    ///
    /// # Errors
    /// The runtime's error (for example a source outside device memory).
    ///
    /// # Safety
    /// `src..src + dst.len()` is device memory the caller may read, and no queued work still
    /// writes it.
    pub unsafe fn copy_to_host(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        // SAFETY: `dst` is a valid, exclusively borrowed host slice; the caller vouches for
        // the source.
        let code = unsafe {
            (self.acl().aclrtMemcpy)(
                dst.as_mut_ptr().cast(),
                dst.len(),
                src.as_raw(),
                dst.len(),
                aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
            )
        };
        self.acl_check("aclrtMemcpy", code)
    }

    /// Fills `len` bytes of device memory at `dst` with `value`, returning when done.
    ///
    /// # Errors
    /// The runtime's error.
    ///
    /// # Safety
    /// `dst..dst + len` is device memory the caller may write, not in use by queued work.
    pub unsafe fn memset(&self, dst: DevicePtr, value: u8, len: usize) -> Result<()> {
        // SAFETY: the caller owns the destination.
        let code = unsafe { (self.acl().aclrtMemset)(dst.as_raw(), len, i32::from(value), len) };
        self.acl_check("aclrtMemset", code)
    }
}

impl Stream {
    /// Enqueues a copy of `len` bytes between two device buffers.
    ///
    /// # Errors
    /// The runtime's error for arguments it can check at enqueue time.
    ///
    /// # Safety
    /// Both ranges are device memory the caller may use, and stay valid until the copy has
    /// run (a later [`synchronize`](Stream::synchronize)).
    pub unsafe fn copy_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        len: usize,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe {
            self.memcpy_async(
                dst.as_raw(),
                src.as_raw(),
                len,
                aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_DEVICE,
            )
        }
    }

    /// Enqueues a copy of `src` into device memory at `dst`.
    ///
    /// # Errors
    /// The runtime's error for arguments it can check at enqueue time.
    ///
    /// # Safety
    /// The destination is device memory the caller may write, and `src` must stay alive and
    /// unchanged until the copy has run (a later [`synchronize`](Stream::synchronize)).
    pub unsafe fn copy_to_device_async(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe {
            self.memcpy_async(
                dst.as_raw(),
                src.as_ptr().cast(),
                src.len(),
                aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE,
            )
        }
    }

    /// Enqueues a fill of `len` bytes at `dst` with `value`.
    ///
    /// # Errors
    /// The runtime's error for arguments it can check at enqueue time.
    ///
    /// # Safety
    /// The destination is device memory the caller may write until the fill has run.
    pub unsafe fn memset_async(&self, dst: DevicePtr, value: u8, len: usize) -> Result<()> {
        let rt = self.runtime();
        // SAFETY: forwarded contract; the stream is live.
        let code = unsafe {
            (rt.acl().aclrtMemsetAsync)(dst.as_raw(), len, i32::from(value), len, self.as_raw())
        };
        rt.acl_check("aclrtMemsetAsync", code)
    }

    /// # Safety
    /// As for the public copies.
    unsafe fn memcpy_async(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        len: usize,
        kind: aclrtMemcpyKind,
    ) -> Result<()> {
        let rt = self.runtime();
        // SAFETY: forwarded contract; the stream is live.
        let code = unsafe { (rt.acl().aclrtMemcpyAsync)(dst, len, src, len, kind, self.as_raw()) };
        rt.acl_check("aclrtMemcpyAsync", code)
    }
}
