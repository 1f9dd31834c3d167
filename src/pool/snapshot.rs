//! [`Snapshot`]: what a pool holds, window by window, as plain data: for `symheap-map`, which
//! draws every rank's snapshot side by side, and for anyone who wants to look inside.
//!
//! With the default `serde` feature a snapshot serialises (and round-trips exactly) through
//! JSON: [`Snapshot::to_json`], [`Snapshot::from_json`].

use std::collections::HashSet;

use super::{PoolStats, SymPool};

impl SymPool {
    /// What the pool holds now, window by window: every live block (with its tag and
    /// allocation number), every block waiting to be freed, and every free region; plus the
    /// stats, the op hash, the rank and the world size. Rank-local; O(blocks).
    ///
    /// # Examples
    /// ```
    /// use symheap::{AllocDesc, PoolConfig, RegionState, SymPool, SymVec, emu};
    ///
    /// emu::launch(1, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
    ///     let kv = SymVec::<f32>::zeroed_with(&pool, 1024, AllocDesc::tagged("kv-cache"))?;
    ///     let snapshot = pool.snapshot();
    ///     let live: Vec<_> = snapshot.windows[0]
    ///         .regions
    ///         .iter()
    ///         .filter(|r| r.state == RegionState::Live)
    ///         .collect();
    ///     assert_eq!(live.last().unwrap().tag.as_deref(), Some("kv-cache"));
    ///     assert_eq!(live.last().unwrap().offset, kv.offset());
    ///     Ok(())
    /// })?;
    /// # Ok::<(), symheap::Error>(())
    /// ```
    #[doc(alias("memory_snapshot", "_snapshot"))]
    pub fn snapshot(&self) -> Snapshot {
        let state = self.shared.lock();
        let stats = state.stats(&self.shared);
        let pending: HashSet<(usize, u64)> = state
            .pending
            .iter()
            .map(|p| (p.block.segment, p.block.offset()))
            .collect();
        let windows = state
            .segments
            .iter()
            .map(|(key, segment)| {
                let regions = segment
                    .heap
                    .regions()
                    .into_iter()
                    .map(|r| {
                        if !r.live {
                            return Region {
                                offset: r.offset,
                                size: r.size,
                                state: RegionState::Free,
                                tag: None,
                                seq: None,
                            };
                        }
                        let info = segment.infos[r.key as usize];
                        let kind = if pending.contains(&(key, r.offset)) {
                            RegionState::Pending
                        } else {
                            RegionState::Live
                        };
                        Region {
                            offset: r.offset,
                            size: r.size,
                            state: kind,
                            tag: Some(state.tags.name(info.tag).to_owned()),
                            seq: Some(info.seq),
                        }
                    })
                    .collect();
                WindowMap {
                    handle: segment.handle.get().as_raw() as u64,
                    base: segment.base.addr(),
                    size: segment.size,
                    regions,
                }
            })
            .collect();
        Snapshot {
            rank: self.shared.comm().rank(),
            rank_count: self.shared.comm().rank_count(),
            op_hash: state.op_hash(),
            stats,
            windows,
        }
    }
}

/// One rank's pool at one moment, from [`SymPool::snapshot`](crate::SymPool::snapshot).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Snapshot {
    /// The rank that took it.
    pub rank: u32,
    /// The number of ranks of its communicator (`world_size` in snapshots written before
    /// symheap named it so, which still load).
    #[cfg_attr(feature = "serde", serde(alias = "world_size"))]
    pub rank_count: u32,
    /// [`SymPool::op_hash`](crate::SymPool::op_hash) at the time: equal on ranks that made the
    /// same calls.
    pub op_hash: u64,
    /// The pool's accounting.
    pub stats: PoolStats,
    /// The windows, in the pool's order (the first is the one made with the pool).
    pub windows: Vec<WindowMap>,
}

/// One window and everything in it.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WindowMap {
    /// The window's handle (`HcclCommSymWinGet`'s), as an integer.
    pub handle: u64,
    /// The device address of its first byte.
    pub base: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Every byte of the window, in offset order: live blocks, blocks waiting to be freed, and
    /// free regions. Adjacent regions touch; together they cover `0..size`.
    pub regions: Vec<Region>,
}

/// A range of a window.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Region {
    /// Offset in the window.
    pub offset: u64,
    /// Size in bytes (the granted size for a block).
    pub size: u64,
    /// What the range is.
    pub state: RegionState,
    /// The block's tag ("" for an untagged block; `None` for a free region).
    pub tag: Option<String>,
    /// The block's allocation sequence number in its pool (1 for the first allocation), the
    /// same on every rank that made the same calls; `None` for a free region.
    pub seq: Option<u64>,
}

/// Whether a range is in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum RegionState {
    /// An allocation that is alive.
    Live,
    /// A freed block that queued work may still use: it returns to the heap at the next
    /// synchronisation.
    Pending,
    /// Free space.
    Free,
}

#[cfg(feature = "serde")]
impl Snapshot {
    /// The snapshot as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a snapshot is plain data")
    }

    /// A snapshot from JSON (as [`Snapshot::to_json`] writes it).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) saying where the JSON is not
    /// a snapshot.
    pub fn from_json(json: &str) -> crate::Result<Snapshot> {
        serde_json::from_str(json)
            .map_err(|e| crate::Error::InvalidArgument(format!("not a symheap snapshot: {e}")))
    }
}
