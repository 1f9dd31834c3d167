//! Page-locked host memory (`aclrtMallocHost`): where a sleeping pool keeps the contents it
//! offloads, so that the copies out and back run at the DMA engine's speed.

use std::ffi::c_void;

use super::{Runtime, calls};
use crate::Result;

/// `len` bytes of page-locked host memory; freed (`aclrtFreeHost`) on drop.
#[derive(Debug)]
pub(crate) struct PinnedHostBuffer {
    rt: Runtime,
    ptr: *mut c_void,
    len: usize,
}

// SAFETY: the buffer is plain host memory owned by this value alone.
unsafe impl Send for PinnedHostBuffer {}
// SAFETY: shared references only read it.
unsafe impl Sync for PinnedHostBuffer {}

impl PinnedHostBuffer {
    /// Allocates `len` bytes (at least 1).
    ///
    /// # Errors
    /// [`Error::Unsupported`](crate::Error::Unsupported) if the library lacks
    /// `aclrtMallocHost`; the runtime's error (out of host memory).
    pub(crate) fn new(rt: &Runtime, len: usize) -> Result<Self> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the runtime writes the new allocation's address.
        unsafe { calls::aclrtMallocHost(rt, &mut ptr, len.max(1)) }?;
        Ok(PinnedHostBuffer {
            rt: rt.clone(),
            ptr,
            len,
        })
    }

    /// The bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes allocated by `new`, live until drop; no `&mut` exists while
        // `&self` is borrowed.
        unsafe { std::slice::from_raw_parts(self.ptr.cast(), self.len) }
    }

    /// The bytes, mutably.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for `as_slice`, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast(), self.len) }
    }
}

impl Drop for PinnedHostBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from aclrtMallocHost and is freed once, here.
        if let Err(e) = unsafe { calls::aclrtFreeHost(&self.rt, self.ptr) } {
            self.rt.record_drop_error(e);
        }
    }
}
