//! [`HostView`] and [`HostViewMut`]: host views of pooled memory where device memory is
//! host-addressable (the emulator). A view keeps its pool from sleeping while it lives, since
//! a sleep takes the memory away under it.

use std::ops::{Deref, DerefMut};

use crate::pool::{HostViewToken, SymBlock};
use crate::runtime::Element;
use crate::{Error, Result};

/// A host view of a [`SymVec`](crate::SymVec)'s elements ([`SymVec::host`](crate::SymVec::host)):
/// derefs to `&[T]`. While it lives, [`SymPool::sleep`](crate::SymPool::sleep) refuses.
pub struct HostView<'a, T> {
    elements: &'a [T],
    _token: HostViewToken,
}

/// A mutable host view ([`SymVec::host_mut`](crate::SymVec::host_mut)): derefs to
/// `&mut [T]`. While it lives, [`SymPool::sleep`](crate::SymPool::sleep) refuses.
pub struct HostViewMut<'a, T> {
    elements: &'a mut [T],
    _token: HostViewToken,
}

impl<'a, T: Element> HostView<'a, T> {
    /// A view of `len` elements from element `start` of `block`, which the caller has
    /// checked lie inside it, once no queued work uses it.
    pub(crate) fn open(block: &'a SymBlock, start: usize, len: usize) -> Result<Self> {
        let token = open_token(block)?;
        let ptr = block.device_ptr().byte_add((start * size_of::<T>()) as u64);
        // SAFETY: host-addressable device memory of `len` elements inside the block, which
        // the borrow keeps alive; every bit pattern is a valid `T` and the block is aligned
        // for it. No queued work uses it, work that writes it is refused while the token
        // lives, and the pool cannot sleep (unmap it) meanwhile.
        let elements = unsafe { std::slice::from_raw_parts(ptr.as_raw().cast(), len) };
        Ok(HostView {
            elements,
            _token: token,
        })
    }
}

impl<'a, T: Element> HostViewMut<'a, T> {
    /// As [`HostView::open`], for a caller that holds the block's only borrow (`&mut` of
    /// its owner).
    pub(crate) fn open(block: &'a SymBlock, start: usize, len: usize) -> Result<Self> {
        let token = open_token(block)?;
        let ptr = block.device_ptr().byte_add((start * size_of::<T>()) as u64);
        // SAFETY: as for `HostView::open`, and the caller's exclusive borrow of the owner
        // excludes every other view and use.
        let elements = unsafe { std::slice::from_raw_parts_mut(ptr.as_raw().cast(), len) };
        Ok(HostViewMut {
            elements,
            _token: token,
        })
    }
}

/// A host view needs host-addressable memory that no graph may write behind its back (a
/// replay takes no borrow of the buffers it writes). Also what a DLPack export to the host
/// holds (`dlpack`).
pub(crate) fn open_token(block: &SymBlock) -> Result<HostViewToken> {
    if !block.pool().runtime().is_host_addressable() {
        return Err(Error::NotHostAddressable);
    }
    // Contents a lost rank's cut-short work left unspecified are not shown, not even to
    // write through a view: write them with a host copy first.
    block.check_specified()?;
    if block.is_held() {
        return Err(Error::invalid(
            "a host view of a buffer a live SymGraph uses: its replays may write it at any \
             time; use to_host / copy_from_host",
        ));
    }
    block.open_host_view()
}

impl<T> Deref for HostView<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.elements
    }
}

impl<T> Deref for HostViewMut<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.elements
    }
}

impl<T> DerefMut for HostViewMut<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.elements
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for HostView<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.elements.fmt(f)
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for HostViewMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.elements.fmt(f)
    }
}
