//! What a pool reports about itself, and restarting its peaks.

use super::SymPool;
pub use super::sleep::SleepStats;

/// A snapshot of a pool's accounting, from [`SymPool::stats`](SymPool::stats).
///
/// Non-exhaustive, so that a field can be added without breaking callers: read its fields;
/// only the pool builds one. A field added later carries `#[serde(default)]`, so that
/// snapshots written before it still load.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct PoolStats {
    /// Bytes in live blocks (granted sizes, including the pool's own small block, tagged
    /// `"symheap"`, where [`verify_symmetric`](SymPool::verify_symmetric) gathers every
    /// rank's op hash).
    #[doc(alias("memory_allocated"))]
    pub allocated: u64,
    /// Bytes of device memory the pool holds (all windows).
    #[doc(alias("memory_reserved"))]
    pub reserved: u64,
    /// The pool budget: the most `reserved` may grow to
    /// ([`PoolConfig::budget`](super::PoolConfig::budget); the initial capacity unless set).
    /// (0 when read from a snapshot written before it existed.)
    #[cfg_attr(feature = "serde", serde(default))]
    pub budget: u64,
    /// The largest `allocated` seen.
    #[doc(alias("max_memory_allocated"))]
    pub peak_allocated: u64,
    /// Successful allocations so far, the pool's own block included (as in `allocated`).
    pub alloc_count: u64,
    /// Frees so far (including those still waiting for the stream).
    pub free_count: u64,
    /// Allocations that failed for lack of memory.
    pub oom_count: u64,
    /// The largest free region in any window: the largest request that fits now.
    pub largest_free: u64,
    /// `1 - largest_free / free`: 0 when all free memory is one region.
    pub fragmentation: f64,
    /// Registered windows (one per segment).
    pub windows: usize,
    /// Calls of `HcclCommSymWinRegister` this pool has made, in every communicator
    /// ([`communicators`](Self::communicators) has them one by one).
    pub registrations: u64,
    /// Bytes in live blocks of the adapter's rank-private region (not in `allocated`).
    pub private_allocated: u64,
    /// The size of the adapter's rank-private region: 0 until the first
    /// [`SymPool::allocator`](super::SymPool::allocator) call (not in `reserved`).
    pub private_reserved: u64,
    /// Freed blocks waiting for [`SymPool::synchronize`](super::SymPool::synchronize) because
    /// queued work may still use them.
    pub pending_frees: usize,
    /// Live blocks and bytes by tag ([`AllocDesc`](super::AllocDesc);
    /// "" for untagged allocations), each with its budget if it has one: the pool's own tag
    /// first, then the tags with a budget in the configuration's order (listed before their
    /// first allocation), then the others in the order they first appeared.
    pub tags: Vec<TagStats>,
    /// Collectives this pool has run, by kind and the path each took
    /// ([`SymPool::path`](super::SymPool::path)); point-to-point calls are not collectives.
    /// (Empty when read from a snapshot written before it existed.)
    #[cfg_attr(feature = "serde", serde(default))]
    pub collectives: Vec<CollectiveStats>,
    /// The communicators the pool's windows are registered in: its own first, then the
    /// attached groups in attach order ([`SymPool::attach`](super::SymPool::attach)). (Empty
    /// when read from a snapshot written before it existed.)
    #[cfg_attr(feature = "serde", serde(default))]
    pub communicators: Vec<CommStats>,
    /// Asleep or awake, and the sleeps so far ([`SymPool::sleep`](super::SymPool::sleep)).
    /// (Default when read from a snapshot written before it existed.)
    #[cfg_attr(feature = "serde", serde(default))]
    pub sleep: SleepStats,
}

/// One communicator the pool's memory is registered in.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct CommStats {
    /// Its name (`HcclGetCommName`), read when the pool attaches its first group (empty
    /// before: a pool on one communicator has none to tell apart).
    pub name: String,
    /// This rank in it.
    pub rank: u32,
    /// Its size.
    pub ranks: u32,
    /// The pool's windows registered in it (one per segment).
    pub windows: usize,
    /// The `HcclCommSymWinRegister` calls the pool has made in it.
    pub registrations: u64,
    /// Collectives on it that took the symmetric path.
    pub symmetric: u64,
    /// Collectives on it that staged.
    pub staged: u64,
    /// The device memory HCCL holds for the communicator's own buffers, outside the pool:
    /// `2 x hcclBufferSize` MiB (the input and output CCL buffers) and the 1 MiB expansion
    /// buffer, from the [`CommConfig`](crate::CommConfig) it was made with
    /// ([`CommConfig::buffer_bytes`](crate::CommConfig::buffer_bytes)), as `ncclCommMemStats`
    /// reports a communicator's buffers. (0 when read from a snapshot written before it
    /// existed.)
    #[cfg_attr(feature = "serde", serde(default))]
    pub hccl_buffer_bytes: u64,
}

/// How many collectives of one kind took one path.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct CollectiveStats {
    /// The communicator they ran on, as an index into [`PoolStats::communicators`] (0: the
    /// pool's own).
    #[cfg_attr(feature = "serde", serde(default))]
    pub comm: usize,
    /// Which collective (in JSON, its C function's name, e.g. `"HcclAllReduce"`).
    pub kind: crate::Collective,
    /// The path they took.
    pub path: crate::CollectivePath,
    /// How many.
    pub count: u64,
}

impl PoolStats {
    /// How many collectives took `path` (any kind).
    pub fn collectives_on(&self, path: crate::CollectivePath) -> u64 {
        self.collectives
            .iter()
            .filter(|c| c.path == path)
            .map(|c| c.count)
            .sum()
    }

    /// The device memory HCCL holds for the staging buffers of every communicator the pool is
    /// registered in ([`CommStats::hccl_buffer_bytes`], summed): memory outside the pool, on
    /// the same device.
    pub fn hccl_buffer_bytes(&self) -> u64 {
        self.communicators.iter().map(|c| c.hccl_buffer_bytes).sum()
    }

    /// How many collectives took the symmetric path, and how many staged.
    pub fn symmetric_and_staged(&self) -> (u64, u64) {
        let symmetric = self.collectives_on(crate::CollectivePath::Symmetric);
        let all: u64 = self.collectives.iter().map(|c| c.count).sum();
        (symmetric, all - symmetric)
    }
}

/// The live allocations that carry one tag.
///
/// Non-exhaustive, as [`PoolStats`] is, and its later fields carry `#[serde(default)]`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct TagStats {
    /// The tag ("" for untagged allocations).
    pub tag: String,
    /// Live blocks with the tag.
    pub blocks: u64,
    /// Bytes in them (granted sizes).
    pub bytes: u64,
    /// The most bytes the tag has held at once.
    pub peak_bytes: u64,
    /// The tag's budget in bytes ([`PoolConfig::tag_budget`](super::PoolConfig::tag_budget)),
    /// if it has one: `bytes` never passes it.
    #[cfg_attr(feature = "serde", serde(default))]
    pub budget: Option<u64>,
    /// Of `bytes`, those on the device now: all while the pool is awake, none while it
    /// sleeps. (0 in a snapshot written before it existed.)
    #[cfg_attr(feature = "serde", serde(default))]
    pub resident_bytes: u64,
    /// Of `bytes`, those a sleep keeps in host memory: the tag's blocks, if the plan of the
    /// current or last [sleep](super::SymPool::sleep) offloads the tag (before the first
    /// sleep, the default plan: none).
    #[cfg_attr(feature = "serde", serde(default))]
    pub offloadable_bytes: u64,
    /// Of `bytes`, those a sleep discards: `bytes - offloadable_bytes`.
    #[cfg_attr(feature = "serde", serde(default))]
    pub discardable_bytes: u64,
}

impl SymPool {
    /// Restarts the peaks ([`PoolStats::peak_allocated`](PoolStats::peak_allocated) and
    /// every tag's `peak_bytes`) at the current values, as PyTorch's
    /// `reset_peak_memory_stats`: to measure the peak of one phase.
    #[doc(alias("reset_peak_memory_stats", "reset_max_memory_allocated"))]
    pub fn reset_peak(&self) {
        let mut state = self.shared.lock();
        state.peak_allocated = state.allocated;
        state.tags.reset_peaks();
    }
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::CollectiveStats;
    use crate::{Collective, CollectivePath, Staged};

    /// The kind was a string (the C function's name) before it was a [`Collective`]: a
    /// snapshot written then still loads, and one written now reads the same.
    #[test]
    fn collective_stats_keep_their_json_form() {
        let written_before =
            r#"{"comm":1,"kind":"HcclReduceScatter","path":{"Staged":"Expansion"},"count":3}"#;
        let stats: CollectiveStats = serde_json::from_str(written_before).unwrap();
        let want = CollectiveStats {
            comm: 1,
            kind: Collective::ReduceScatter,
            path: CollectivePath::Staged(Staged::Expansion),
            count: 3,
        };
        assert_eq!(stats, want);
        assert_eq!(serde_json::to_string(&stats).unwrap(), written_before);
        let without_comm = r#"{"kind":"HcclAllReduce","path":"Symmetric","count":2}"#;
        let stats: CollectiveStats = serde_json::from_str(without_comm).unwrap();
        assert_eq!(
            (stats.comm, stats.kind, stats.path),
            (0, Collective::AllReduce, CollectivePath::Symmetric)
        );
    }
}
