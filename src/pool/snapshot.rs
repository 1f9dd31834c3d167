//! [`SymPool::snapshot`]: the pool's windows, block by block, as a [`Snapshot`].

use std::collections::HashSet;

use super::SymPool;
use crate::snapshot::{Region, RegionState, Snapshot, WindowMap};

impl SymPool {
    /// What the pool holds now, window by window: every live block (with its tag and
    /// allocation number), every block waiting to be freed, and every free region; plus the
    /// stats, the op hash, the rank and the world size. Rank-local; O(blocks).
    ///
    /// # Examples
    /// ```
    /// use symheap::{PoolConfig, RegionState, SymPool, SymVec, emu};
    ///
    /// emu::launch(1, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
    ///     let kv = SymVec::<f32>::zeroed_tagged(&pool, 1024, "kv-cache")?;
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
    pub fn snapshot(&self) -> Snapshot {
        let state = self.shared.lock();
        let stats = state.stats();
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
                    handle: segment.handle.as_raw() as u64,
                    base: segment.base.addr(),
                    size: segment.size,
                    regions,
                }
            })
            .collect();
        Snapshot {
            rank: self.shared.comm().rank(),
            world_size: self.shared.comm().size(),
            op_hash: state.op_hash(),
            stats,
            windows,
        }
    }
}

impl SymPool {
    /// Restarts the peaks ([`PoolStats::peak_allocated`](super::PoolStats::peak_allocated) and
    /// every tag's `peak_bytes`) at the current values, as PyTorch's
    /// `reset_peak_memory_stats`: to measure the peak of one phase.
    pub fn reset_peak(&self) {
        let mut state = self.shared.lock();
        state.peak_allocated = state.allocated;
        state.tags.reset_peaks();
    }
}
