//! [`SymBox`]: one value in pooled device memory.

use crate::pool::{AllocDesc, SymPool};
use crate::raw::{DevicePtr, WindowHandle};
use crate::runtime::Element;
use crate::{Result, SymVec};

/// One `T` in a [`SymPool`]'s window (a scalar tensor: a loss, a step counter, a flag).
///
/// # Examples
/// ```
/// use symheap::{PoolConfig, SymBox, SymPool, emu};
///
/// emu::launch(1, |comm| {
///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
///     let mut step = SymBox::new(&pool, 7u64)?;
///     step.set(8)?;
///     assert_eq!(step.get()?, 8);
///     Ok(())
/// })?;
/// # Ok::<(), symheap::Error>(())
/// ```
#[derive(Debug)]
pub struct SymBox<T: Element> {
    inner: SymVec<T>,
}

impl<T: Element> SymBox<T> {
    /// Moves `value` into device memory.
    ///
    /// # Errors
    /// The pool's allocation errors; the runtime's error.
    pub fn new(pool: &SymPool, value: T) -> Result<Self> {
        SymBox::new_with(pool, value, AllocDesc::default())
    }

    /// [`new`](Self::new), described by `desc` (a tag, see [`AllocDesc`]).
    ///
    /// # Errors
    /// As for [`new`](Self::new).
    pub fn new_with(pool: &SymPool, value: T, desc: AllocDesc) -> Result<Self> {
        Ok(SymBox {
            inner: SymVec::from_host_with(pool, &[value], desc)?,
        })
    }

    /// The value, after waiting for queued work on it.
    ///
    /// # Errors
    /// The runtime's error.
    pub fn get(&self) -> Result<T> {
        Ok(self.inner.to_host()?[0])
    }

    /// Overwrites the value, after waiting for queued work on it.
    ///
    /// # Errors
    /// The runtime's error.
    pub fn set(&mut self, value: T) -> Result<()> {
        self.inner.copy_from_host(&[value])
    }

    /// The window holding the value.
    pub fn window(&self) -> WindowHandle {
        self.inner.window()
    }

    /// The value's offset in its window.
    pub fn offset(&self) -> u64 {
        self.inner.offset()
    }

    /// The value's device address.
    pub fn device_ptr(&self) -> DevicePtr {
        self.inner.device_ptr()
    }

    /// The value as a one-element [`SymVec`], for collectives.
    pub fn as_vec(&self) -> &SymVec<T> {
        &self.inner
    }

    /// The value as a mutable one-element [`SymVec`], for collectives.
    pub fn as_vec_mut(&mut self) -> &mut SymVec<T> {
        &mut self.inner
    }
}
