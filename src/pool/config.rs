//! Pool settings.

use crate::{Error, Result};

/// How a [`SymPool`](super::SymPool) is sized and checked. Every rank must use the same
/// configuration.
///
/// Method names follow one convention. A setting is set by a builder method named after it,
/// which takes and returns the configuration ([`granularity`](Self::granularity),
/// [`max_capacity`](Self::max_capacity), [`private_capacity`](Self::private_capacity),
/// [`strict_symmetry`](Self::strict_symmetry); the capacity is [`new`](Self::new)'s
/// argument). It is read by a getter whose name says what it returns: sizes end in `_bytes`
/// ([`capacity_bytes`](Self::capacity_bytes), [`granularity_bytes`](Self::granularity_bytes),
/// [`max_capacity_bytes`](Self::max_capacity_bytes),
/// [`private_capacity_bytes`](Self::private_capacity_bytes)), flags begin with `is_`
/// ([`is_strict_symmetry`](Self::is_strict_symmetry)).
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
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    capacity: u64,
    granularity: u64,
    max_capacity: Option<u64>,
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
    pub fn max_capacity(mut self, bytes: u64) -> Self {
        self.max_capacity = Some(bytes);
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

    /// Whether to compare every rank's op hash before each collective (default false). Costs
    /// one tiny AllGather and a stream synchronisation per collective.
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

    /// The growth limit in bytes.
    pub fn max_capacity_bytes(&self) -> u64 {
        self.max_capacity.unwrap_or(self.capacity)
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
        if self.max_capacity_bytes() < self.capacity {
            return Err(Error::invalid(format!(
                "PoolConfig: max_capacity {} is below the capacity {}",
                self.max_capacity_bytes(),
                self.capacity
            )));
        }
        Ok(())
    }
}
