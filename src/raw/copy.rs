//! Copies between host and device memory, and fills, on raw device addresses: the raw views
//! of a [`Runtime`] (synchronous) and of a [`Stream`] (queued).

use std::ffi::c_void;

use crate::Result;
use crate::runtime::{DevicePtr, calls};
use crate::runtime::{Runtime, Stream};
use crate::sys::aclrtMemcpyKind;

/// The raw view of a [`Runtime`] ([`Runtime::raw`]): synchronous copies and fills of device
/// memory at raw addresses (`aclrtMemcpy`, `aclrtMemset`), each an `unsafe fn`.
#[derive(Clone, Copy, Debug)]
pub struct RawRuntime<'a> {
    rt: &'a Runtime,
}

/// The raw view of a [`Stream`] ([`Stream::raw`]): copies and fills of device memory at raw
/// addresses queued on the stream (`aclrtMemcpyAsync`, `aclrtMemsetAsync`), each an
/// `unsafe fn`.
#[derive(Clone, Copy, Debug)]
pub struct RawStream<'a> {
    stream: &'a Stream,
}

impl Runtime {
    /// The raw layer's view of this runtime: copies and fills at raw device addresses
    /// ([`RawRuntime`], all `unsafe`). Typed owners (`SymVec`, ...) copy safely.
    pub fn raw(&self) -> RawRuntime<'_> {
        RawRuntime { rt: self }
    }
}

impl Stream {
    /// The raw layer's view of this stream: queued copies and fills at raw device addresses
    /// ([`RawStream`], all `unsafe`).
    pub fn raw(&self) -> RawStream<'_> {
        RawStream { stream: self }
    }
}

impl RawRuntime<'_> {
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
        unsafe {
            calls::aclrtMemcpy(
                self.rt,
                dst.as_raw(),
                src.len(),
                src.as_ptr().cast(),
                src.len(),
                aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE,
            )
        }
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
        unsafe {
            calls::aclrtMemcpy(
                self.rt,
                dst.as_mut_ptr().cast(),
                dst.len(),
                src.as_raw(),
                dst.len(),
                aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
            )
        }
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
        unsafe { calls::aclrtMemset(self.rt, dst.as_raw(), len, i32::from(value), len) }
    }
}

impl RawStream<'_> {
    /// Enqueues a copy of `len` bytes between two device buffers.
    ///
    /// # Errors
    /// The runtime's error for arguments it can check at enqueue time.
    ///
    /// # Safety
    /// Both ranges are device memory the caller may use, and stay valid until the copy has
    /// run (a later [`Stream::synchronize`]).
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
    /// unchanged until the copy has run (a later [`Stream::synchronize`]).
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
        let rt = self.stream.runtime();
        // SAFETY: forwarded contract; the stream is live.
        unsafe {
            calls::aclrtMemsetAsync(
                rt,
                dst.as_raw(),
                len,
                i32::from(value),
                len,
                self.stream.as_raw(),
            )
        }
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
        let rt = self.stream.runtime();
        // SAFETY: forwarded contract; the stream is live.
        unsafe { calls::aclrtMemcpyAsync(rt, dst, len, src, len, kind, self.stream.as_raw()) }
    }
}
