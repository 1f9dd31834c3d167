//! [`HostView`] and [`HostViewMut`]: host views of pooled memory where device memory is
//! host-addressable (the emulator). A view keeps its pool from sleeping while it lives, since
//! a sleep takes the memory away under it.

use std::ops::{Deref, DerefMut};

use crate::pool::HostViewToken;

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

impl<'a, T> HostView<'a, T> {
    pub(crate) fn new(elements: &'a [T], token: HostViewToken) -> Self {
        HostView {
            elements,
            _token: token,
        }
    }
}

impl<'a, T> HostViewMut<'a, T> {
    pub(crate) fn new(elements: &'a mut [T], token: HostViewToken) -> Self {
        HostViewMut {
            elements,
            _token: token,
        }
    }
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
