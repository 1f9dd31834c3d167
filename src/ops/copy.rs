//! Device-to-device copies between pooled buffers, in stream order.

use crate::buffer::{Buffer, BufferMut, Span};
use crate::{Element, Error, Result, SymPool, SymStorage, SymVec};

impl SymPool {
    /// Copies `src` into `dst` (whole vectors or [views](SymVec::slice)) on the device
    /// (`aclrtMemcpyAsync`, device to device), enqueued
    /// on this handle's stream ([`on`](Self::on); the pool's own by default) and tracked like a
    /// collective: the host does not wait, later work on that stream sees the copy, and host
    /// access to either buffer waits for it. The buffers may come from different pools on the
    /// same device.
    ///
    /// # Examples
    /// ```
    /// use symheap::{PoolConfig, SymPool, SymVec, emu};
    ///
    /// emu::launch(1, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
    ///     let a = SymVec::from_host(&pool, &[1u16, 2, 3])?;
    ///     let mut b = SymVec::<u16>::zeroed(&pool, 3)?;
    ///     b.copy_from(&a)?;
    ///     assert_eq!(b.to_host()?, [1, 2, 3]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the lengths differ or `dst` is on another device than
    /// this pool; [`Error::Poisoned`]; the runtime's error.
    pub fn copy<T: Element>(
        &self,
        src: &impl Buffer<T>,
        dst: &mut impl BufferMut<T>,
    ) -> Result<()> {
        let (src, dst) = (Span::read(src)?, Span::write(dst)?);
        if src.len() != dst.len() {
            return Err(Error::invalid(format!(
                "copy: {} elements into a buffer of {}",
                src.len(),
                dst.len()
            )));
        }
        let device = self.shared().device();
        for (what, v) in [("src", src.alloc()), ("dst", dst.alloc())] {
            if v.pool().device() != device {
                return Err(Error::invalid(format!(
                    "copy: {what} is on device {}, this pool on device {device}",
                    v.pool().device()
                )));
            }
        }
        let stream = self.target().stream;
        let bytes = src.len() * size_of::<T>();
        // Under the state lock, so the marks below refer to work the next synchronize waits
        // for (as for collectives).
        let state = self.shared().lock();
        self.shared().check_usable()?;
        self.shared().check_awake("copy")?;
        let own = src.alloc().belongs_to(self.shared()) && dst.alloc().belongs_to(self.shared());
        if state.capture_hold().is_some() && !own {
            return Err(Error::invalid(
                "copy: during a capture both buffers must be this pool's (the graph keeps them \
                 from reuse)",
            ));
        }
        self.shared().check_in_capture(&state, stream, "copy")?;
        dst.alloc().check_no_host_view("copy")?;
        // SAFETY: both blocks are live, at least `bytes` long, distinct (`&` and `&mut`), and
        // stay allocated until the stream has run the copy: their frees wait for it in stream
        // order or, on another stream, behind an event.
        unsafe {
            stream
                .raw()
                .copy_device_async(dst.device_ptr(), src.device_ptr(), bytes)?
        };
        for block in [src.alloc(), dst.alloc()] {
            block.mark_used_on(stream);
            if let Some(hold) = state.capture_hold() {
                block.hold_for(hold);
            }
        }
        Ok(())
    }
}

impl<T: Element> SymVec<T> {
    /// Copies `src` into this vector on the device, in stream order on the pool's stream (see
    /// [`SymPool::copy`], which takes another stream).
    ///
    /// # Errors
    /// As for [`SymPool::copy`].
    pub fn copy_from(&mut self, src: &SymVec<T>) -> Result<()> {
        let pool = SymPool::of(self.alloc().pool());
        pool.copy(src, self)
    }
}

impl SymStorage {
    /// Resizes to `bytes` by reallocation, as tensor libraries resize storage: a new block
    /// from the same pool (with the same tag), the first `min(old, new)` bytes copied on the
    /// device in stream order on the pool's stream, the rest unspecified (as for
    /// [`uninit`](Self::uninit)), and the old block freed (reused in stream order). A pool
    /// allocation and free: every rank resizes alike. The storage must not be shared (`&mut`):
    /// views of the old block would dangle.
    ///
    /// # Examples
    /// ```
    /// use symheap::{PoolConfig, SymPool, SymStorage, emu};
    ///
    /// emu::launch(1, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
    ///     let mut s = SymStorage::from_host(&pool, &[1u32, 2])?;
    ///     s.resize(16)?;
    ///     assert_eq!(s.len(), 16);
    ///     assert_eq!(s.to_host::<u32>()?[..2], [1, 2]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// The pool's allocation errors (the storage is then unchanged); as for
    /// [`SymPool::copy`].
    pub fn resize(&mut self, bytes: usize) -> Result<()> {
        let pool = SymPool::of(self.alloc().pool());
        let mut resized = SymStorage::uninit_with(&pool, bytes, self.desc())?;
        let keep = bytes.min(self.len());
        pool.copy(
            &self.view::<u8>(0, keep)?,
            &mut resized.view::<u8>(0, keep)?,
        )?;
        std::mem::swap(self, &mut resized);
        Ok(())
    }
}
