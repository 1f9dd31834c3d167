//! Pool settings.

use super::tags::POOL_TAG;
use crate::{Error, Result};

/// How a [`SymPool`](super::SymPool) is sized and checked. Every rank must use the same
/// configuration.
///
/// Method names follow one convention. A setting is set by a builder method named after it,
/// which takes and returns the configuration ([`granularity`](Self::granularity),
/// [`budget`](Self::budget), [`tag_budget`](Self::tag_budget),
/// [`private_capacity`](Self::private_capacity),
/// [`strict_symmetry`](Self::strict_symmetry); the capacity is [`new`](Self::new)'s
/// argument). It is read by a getter whose name says what it returns: sizes end in `_bytes`
/// ([`capacity_bytes`](Self::capacity_bytes), [`granularity_bytes`](Self::granularity_bytes),
/// [`budget_bytes`](Self::budget_bytes), [`tag_budget_bytes`](Self::tag_budget_bytes),
/// [`private_capacity_bytes`](Self::private_capacity_bytes)), flags begin with `is_`
/// ([`is_strict_symmetry`](Self::is_strict_symmetry)).
///
/// # Budgets
/// Two kinds of byte budget bound what a pool takes, so that a worker sharing a device (with a
/// training phase, with another model) cannot take more than its share:
/// - the **pool budget** ([`budget`](Self::budget)) caps the device memory the pool's windows
///   hold ([`PoolStats::reserved`](super::PoolStats::reserved)): the pool grows by new windows
///   up to it, and an allocation or [`reserve`](super::SymPool::reserve) that would need more
///   fails. It is the setting [`max_capacity`](Self::max_capacity) has always set, under the
///   name that says what it is for: the two are one setting, the last call wins. Its default
///   is the initial capacity: no growth.
/// - a **tag budget** ([`tag_budget`](Self::tag_budget)) caps the live bytes (granted sizes)
///   of the allocations with one tag ([`AllocDesc`](super::AllocDesc)): an allocation that
///   would take the tag past it fails, before the pool looks for room.
///
/// Either refusal is an [`Error::OutOfMemory`] whose [`OverBudget`](crate::OverBudget) names
/// the budget, its size, what is used under it and the setting to change; it changes no
/// memory, and it is the same on every rank that made the same calls (budgets are
/// configuration, equal on every rank, so no rank needs to ask the others). The adapter's
/// rank-private region ([`private_capacity`](Self::private_capacity)) is outside both.
///
/// # Examples
/// ```
/// use symheap::PoolConfig;
///
/// let config = PoolConfig::new(256 << 20)   // one 256 MiB window at start
///     .granularity(512)                      // block alignment (the default)
///     .max_capacity(1 << 30)                 // may grow to 1 GiB in more windows
///     .strict_symmetry(true);                // verify every rank's op hash before collectives
/// assert_eq!(config.capacity_bytes(), 256 << 20);
/// assert_eq!(config.granularity_bytes(), 512);
/// assert_eq!(config.max_capacity_bytes(), 1 << 30);
/// assert!(config.is_strict_symmetry());
///
/// // At most 1 GiB of windows; the KV cache gets at most 768 MiB of it.
/// let config = PoolConfig::new(256 << 20)
///     .budget(1 << 30)
///     .tag_budget("kv-cache", 768 << 20);
/// assert_eq!(config.budget_bytes(), 1 << 30);
/// assert_eq!(config.tag_budget_bytes("kv-cache"), Some(768 << 20));
/// assert_eq!(config.tag_budget_bytes("activations"), None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    capacity: u64,
    granularity: u64,
    /// The pool budget (`budget`, also set by `max_capacity`); `None`: the capacity.
    max_capacity: Option<u64>,
    /// Tag budgets in the order they were set (duplicates are refused by `validate`).
    tag_budgets: Vec<(&'static str, u64)>,
    private_capacity: Option<u64>,
    strict_symmetry: bool,
    deferred_reuse: bool,
}

impl PoolConfig {
    /// A pool whose first window holds `capacity_bytes` (rounded up to the device's allocation
    /// granularity, 2 MiB on Ascend).
    pub fn new(capacity_bytes: u64) -> Self {
        PoolConfig {
            capacity: capacity_bytes,
            granularity: 512,
            max_capacity: None,
            tag_budgets: Vec::new(),
            private_capacity: None,
            strict_symmetry: false,
            deferred_reuse: false,
        }
    }

    /// Block alignment and size granularity in bytes (a power of two; default 512, the
    /// alignment tensor code on Ascend expects).
    pub fn granularity(mut self, bytes: u64) -> Self {
        self.granularity = bytes;
        self
    }

    /// The most the pool may grow to, in bytes, by adding windows when full (default: the
    /// initial capacity, i.e. no growth).
    ///
    /// The same setting as [`budget`](Self::budget), under its older name: see there.
    pub fn max_capacity(mut self, bytes: u64) -> Self {
        self.max_capacity = Some(bytes);
        self
    }

    /// The pool budget: the most device memory, in bytes, that the pool's windows may hold
    /// (default: the initial capacity, i.e. no growth). The pool grows by windows up to it
    /// when an allocation does not fit; past it, the allocation (or
    /// [`reserve`](super::SymPool::reserve)) fails with [`Error::OutOfMemory`] naming the
    /// budget. Windows are whole multiples of the device granularity (2 MiB on Ascend), so
    /// a budget that is not one is never quite reached.
    ///
    /// This is the setting [`max_capacity`](Self::max_capacity) sets (one setting, two
    /// names; the last call wins). It must be at least the capacity. The adapter's
    /// rank-private region ([`private_capacity`](Self::private_capacity)) is not counted.
    ///
    /// # Examples
    /// ```
    /// use symheap::{Error, PoolConfig, SymPool, emu};
    ///
    /// emu::launch(2, |comm| {
    ///     // A 2 MiB window, growing to 4 MiB at most.
    ///     let pool = SymPool::new(comm, PoolConfig::new(2 << 20).budget(4 << 20))?;
    ///     let _a = pool.alloc(2 << 20, 0)?; // grows to 4 MiB
    ///     let Err(Error::OutOfMemory(oom)) = pool.alloc(2 << 20, 0) else {
    ///         panic!("a third window would pass the budget");
    ///     };
    ///     let over = oom.over_budget.as_ref().unwrap();
    ///     assert_eq!((over.limit, over.used), (4 << 20, 4 << 20));
    ///     assert!(oom.to_string().contains("pool budget"));
    ///     Ok(())
    /// })?;
    /// # Ok::<(), symheap::Error>(())
    /// ```
    pub fn budget(self, bytes: u64) -> Self {
        self.max_capacity(bytes)
    }

    /// A budget for the allocations tagged `tag` ([`AllocDesc`](super::AllocDesc); `""`
    /// budgets the untagged ones): their live bytes (granted sizes, rounded up to the
    /// [`granularity`](Self::granularity)) may not pass `bytes`. An allocation that would
    /// take the tag past it fails with [`Error::OutOfMemory`] naming the tag's budget, before
    /// the pool looks for room: it changes no memory, and later allocations within the budget
    /// succeed. Freed blocks leave the tag's count at once, even while they wait for the
    /// stream. A tag may have one budget; it need not fit in the pool budget (the pool
    /// budget then binds first). A tag with a budget shows in [`PoolStats::tags`] from the
    /// start, with its budget beside its live bytes.
    ///
    /// [`PoolStats::tags`]: super::PoolStats::tags
    ///
    /// # Examples
    /// ```
    /// use symheap::{AllocDesc, Error, PoolConfig, SymPool, SymVec, emu};
    ///
    /// emu::launch(1, |comm| {
    ///     let config = PoolConfig::new(8 << 20).tag_budget("kv-cache", 1 << 20);
    ///     let pool = SymPool::new(comm, config)?;
    ///     let kv = AllocDesc::tagged("kv-cache");
    ///     let _a = SymVec::<u8>::zeroed_with(&pool, 768 << 10, kv)?;
    ///     let Err(Error::OutOfMemory(oom)) = SymVec::<u8>::zeroed_with(&pool, 512 << 10, kv)
    ///     else {
    ///         panic!("the KV cache would pass its budget");
    ///     };
    ///     assert!(oom.to_string().contains(r#"tag "kv-cache""#), "{oom}");
    ///     let _b = SymVec::<u8>::zeroed_with(&pool, 256 << 10, kv)?; // fits exactly
    ///     let _c = SymVec::<u8>::zeroed(&pool, 4 << 20)?; // untagged: no budget
    ///     Ok(())
    /// })?;
    /// # Ok::<(), symheap::Error>(())
    /// ```
    pub fn tag_budget(mut self, tag: &'static str, bytes: u64) -> Self {
        self.tag_budgets.push((tag, bytes));
        self
    }

    /// The size of the rank-private region that the `allocator-api2` adapter
    /// ([`SymPool::allocator`](super::SymPool::allocator)) allocates from, in bytes, rounded
    /// up to the device granularity (default: an eighth of the capacity). It is device memory
    /// outside every window, mapped on the first `allocator()` call; containers never take
    /// memory from the windows, so they cannot move symmetric offsets.
    pub fn private_capacity(mut self, bytes: u64) -> Self {
        self.private_capacity = Some(bytes);
        self
    }

    /// Whether to compare every rank's op hash before each collective (default false), so a
    /// collective after ranks diverged never runs: it fails on every rank with
    /// [`Error::Asymmetric`](crate::Error::Asymmetric) naming the calls that differ.
    ///
    /// It costs one tiny AllGather and a stream synchronisation per collective: on the
    /// emulator a 2-rank AllReduce took 1.04x (1 MiB) to 2.8x (64 KiB) as long
    /// (`benches/README.md`, *Strict symmetry*), so it stays off by default. Without it, the
    /// ranks still find a divergence, later: at [`verify_symmetric`](super::SymPool::verify_symmetric),
    /// or when the emulator refuses a collective whose ranks passed buffers at different
    /// offsets or made different calls. Either way the error names, for each rank that
    /// differs from rank 0, its first pool call of the last 64 (allocation with size,
    /// alignment and tag, free, collective with kind and count) that has no match on rank 0:
    /// `rank 2's allocation #2 (4096 B, tag "kv") has no match on rank 0, whose call there is
    /// allocation #2 (4096 B, align 4, untagged)`. Each rank keeps that log in a fixed ring,
    /// a copy of a few words per call. On real hardware, without strict mode, collectives
    /// between the divergence and the next `verify_symmetric` may exchange wrong data.
    pub fn strict_symmetry(mut self, on: bool) -> Self {
        self.strict_symmetry = on;
        self
    }

    /// Whether a block freed while queued work may still use it waits for the next
    /// [`synchronize`](super::SymPool::synchronize) before it is reused (default false).
    ///
    /// By default reuse is stream-ordered: the block goes back to the heap at once, since
    /// later work on the streams that used it runs after that work, and the pool makes any
    /// other stream that gets the memory wait for them (an event, no host wait); a worker
    /// then need not synchronize every step to keep fragmentation down. Deferred reuse is the
    /// conservative choice where a collective may fail and its peers keep writing: a poisoned
    /// pool never reuses the memory of work that was queued when it failed, but memory
    /// reused before the failure was noticed may still be written by a peer that runs late.
    pub fn deferred_reuse(mut self, on: bool) -> Self {
        self.deferred_reuse = on;
        self
    }

    /// Whether freed blocks wait for a synchronize ([`deferred_reuse`](Self::deferred_reuse)).
    pub fn is_deferred_reuse(&self) -> bool {
        self.deferred_reuse
    }

    /// The initial capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity
    }

    /// The block granularity in bytes.
    pub fn granularity_bytes(&self) -> u64 {
        self.granularity
    }

    /// The growth limit in bytes: the pool budget ([`budget_bytes`](Self::budget_bytes)).
    pub fn max_capacity_bytes(&self) -> u64 {
        self.max_capacity.unwrap_or(self.capacity)
    }

    /// The pool budget in bytes ([`budget`](Self::budget); the initial capacity unless set).
    pub fn budget_bytes(&self) -> u64 {
        self.max_capacity_bytes()
    }

    /// The budget of the allocations tagged `tag`, in bytes, if it has one
    /// ([`tag_budget`](Self::tag_budget)).
    pub fn tag_budget_bytes(&self, tag: &str) -> Option<u64> {
        self.tag_budgets
            .iter()
            .find(|(t, _)| *t == tag)
            .map(|&(_, bytes)| bytes)
    }

    /// Every tag budget, in the order they were set.
    pub fn tag_budgets(&self) -> &[(&'static str, u64)] {
        &self.tag_budgets
    }

    /// The size of the adapter's private region in bytes (before rounding).
    pub fn private_capacity_bytes(&self) -> u64 {
        self.private_capacity.unwrap_or(self.capacity.div_ceil(8))
    }

    /// Whether collectives verify symmetry first.
    pub fn is_strict_symmetry(&self) -> bool {
        self.strict_symmetry
    }

    pub(super) fn validate(&self) -> Result<()> {
        if self.capacity == 0 {
            return Err(Error::invalid("PoolConfig: capacity must be non-zero"));
        }
        if !self.granularity.is_power_of_two() {
            return Err(Error::invalid(format!(
                "PoolConfig: granularity {} is not a power of two",
                self.granularity
            )));
        }
        if self.private_capacity == Some(0) {
            return Err(Error::invalid(
                "PoolConfig: private_capacity must be non-zero",
            ));
        }
        if self.max_capacity == Some(0) {
            return Err(Error::invalid(
                "PoolConfig: the pool budget (budget / max_capacity) must be non-zero",
            ));
        }
        if self.max_capacity_bytes() < self.capacity {
            return Err(Error::invalid(format!(
                "PoolConfig: the pool budget (budget / max_capacity) {} is below the capacity {}",
                self.max_capacity_bytes(),
                self.capacity
            )));
        }
        validate_tag_budgets(&self.tag_budgets)
    }
}

/// Refuses a zero budget, a budget on the pool's own tag, and a tag budgeted twice.
fn validate_tag_budgets(budgets: &[(&'static str, u64)]) -> Result<()> {
    for (i, &(tag, bytes)) in budgets.iter().enumerate() {
        if bytes == 0 {
            return Err(Error::invalid(format!(
                "PoolConfig: the budget of tag {tag:?} must be non-zero"
            )));
        }
        if tag == POOL_TAG {
            return Err(Error::invalid(format!(
                "PoolConfig: tag {POOL_TAG:?} is the pool's own and takes no budget"
            )));
        }
        if budgets[..i].iter().any(|&(t, _)| t == tag) {
            return Err(Error::invalid(format!(
                "PoolConfig: tag {tag:?} is given a budget twice; give each tag one tag_budget"
            )));
        }
    }
    Ok(())
}
