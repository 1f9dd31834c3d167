//! [`AllocDesc`]: what an allocation is for, beyond its size and alignment.

/// What an allocation is for, beyond its size and alignment: the one way to pass a tag (and,
/// as the pool learns more about its tensors, any other per-allocation choice) to
/// [`SymPool::alloc_with`](super::SymPool::alloc_with), [`SymVec::zeroed_with`],
/// [`SymVec::from_host_with`] and [`SymBox::new_with`]. The short forms (`alloc`, `zeroed`,
/// `from_host`, `new`) take [`AllocDesc::default`].
///
/// The tag says who the memory is for ("kv-cache", "activations", ...):
/// [`SymPool::stats`](super::SymPool::stats), [`memory_summary`](super::SymPool::memory_summary)
/// and [`snapshot`](super::SymPool::snapshot) account by it. The empty tag is untagged.
///
/// [`SymVec::zeroed_with`]: crate::SymVec::zeroed_with
/// [`SymVec::from_host_with`]: crate::SymVec::from_host_with
/// [`SymBox::new_with`]: crate::SymBox::new_with
///
/// # Examples
/// ```
/// use symheap::{AllocDesc, PoolConfig, SymPool, SymVec, emu};
///
/// emu::launch(1, |comm| {
///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
///     let _kv = SymVec::<f32>::zeroed_with(&pool, 1024, AllocDesc::tagged("kv-cache"))?;
///     let stats = pool.stats();
///     assert!(stats.tags.iter().any(|t| t.tag == "kv-cache" && t.blocks == 1));
///     Ok(())
/// })?;
/// # Ok::<(), symheap::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AllocDesc {
    /// Who the memory is for; empty for untagged.
    pub tag: &'static str,
}

impl AllocDesc {
    /// An untagged allocation (the same as [`AllocDesc::default`]).
    pub const fn new() -> Self {
        AllocDesc { tag: "" }
    }

    /// An allocation tagged `tag`.
    pub const fn tagged(tag: &'static str) -> Self {
        AllocDesc { tag }
    }

    /// This description with the tag `tag`.
    pub const fn tag(mut self, tag: &'static str) -> Self {
        self.tag = tag;
        self
    }
}
