//! Device-to-device copies between pooled buffers, in stream order.

use crate::{Buffer, BufferMut, Element, Error, Result, SymPool, SymVec};

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
        if src.len() != dst.len() {
            return Err(Error::invalid(format!(
                "copy: {} elements into a SymVec of {}",
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
