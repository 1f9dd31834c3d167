//! Tags: who an allocation is for. Each live block remembers its tag and allocation number
//! (for snapshots), and each tag its live blocks and bytes (for stats and the summary), at a
//! store and a short scan per allocation.

use super::stats::TagStats;

/// The tag of the pool's own block (the symmetry check's).
pub(super) const POOL_TAG: &str = "symheap";

/// What the pool knows of a live block beyond the heap: kept per segment, indexed by the
/// block's heap node key (dense, reused after a free), so recording it is one store.
#[derive(Clone, Copy, Default)]
pub(super) struct BlockInfo {
    /// Index into [`Tags`].
    pub(super) tag: u32,
    /// The allocation's number in its pool (1 for the first).
    pub(super) seq: u64,
}

/// Records `info` for the block with node `key`.
pub(super) fn record(infos: &mut Vec<BlockInfo>, key: u32, info: BlockInfo) {
    let i = key as usize;
    if infos.len() <= i {
        infos.resize(i + 1, BlockInfo::default());
    }
    infos[i] = info;
}

/// Live blocks and bytes per tag, in the order the tags first appeared (few tags: a scan):
/// the pool's own first, then those with a budget, in the configuration's order.
#[derive(Default)]
pub(super) struct Tags {
    counts: Vec<(&'static str, TagCount)>,
}

/// What the pool counts of one tag (its memory classes are derived from its bytes and the
/// sleep state when stats are read: `SleepState::classify`).
#[derive(Clone, Copy, Default)]
struct TagCount {
    blocks: u64,
    bytes: u64,
    peak_bytes: u64,
    /// The tag's budget ([`PoolConfig::tag_budget`](super::PoolConfig::tag_budget)), if any.
    budget: Option<u64>,
}

impl Tags {
    /// The tags of a new pool whose configuration gives the tag budgets `budgets`
    /// ([`PoolConfig::tag_budgets`](super::PoolConfig::tag_budgets)): its own, and every tag
    /// with a budget, so that stats show a budget before its tag's first allocation.
    pub(super) fn new(budgets: &[(&'static str, u64)]) -> Tags {
        let budgeted = budgets.iter().map(|&(tag, bytes)| {
            let count = TagCount {
                budget: Some(bytes),
                ..TagCount::default()
            };
            (tag, count)
        });
        let own = (POOL_TAG, TagCount::default());
        Tags {
            counts: std::iter::once(own).chain(budgeted).collect(),
        }
    }

    /// The live bytes under `tag` (0 for a tag never seen).
    pub(super) fn bytes(&self, tag: &str) -> u64 {
        self.counts
            .iter()
            .find(|(t, _)| *t == tag)
            .map_or(0, |(_, c)| c.bytes)
    }

    /// Counts a new block of `bytes` under `tag`; returns the tag's index.
    pub(super) fn add(&mut self, tag: &'static str, bytes: u64) -> u32 {
        // Tags are string literals, so the same tag is nearly always the same pointer: look
        // for that first (comparing contents calls memcmp, which the hot path notices).
        let same = |t: &&str| std::ptr::eq(t.as_ptr(), tag.as_ptr()) && t.len() == tag.len();
        let found = (self.counts.iter().position(|(t, _)| same(t)))
            .or_else(|| self.counts.iter().position(|(t, _)| *t == tag));
        let i = match found {
            Some(i) => i,
            None => {
                self.counts.push((tag, TagCount::default()));
                self.counts.len() - 1
            }
        };
        let count = &mut self.counts[i].1;
        count.blocks += 1;
        count.bytes += bytes;
        count.peak_bytes = count.peak_bytes.max(count.bytes);
        i as u32
    }

    /// Uncounts a block of `bytes` under the tag at `index`.
    pub(super) fn remove(&mut self, index: u32, bytes: u64) {
        let count = &mut self.counts[index as usize].1;
        count.blocks -= 1;
        count.bytes -= bytes;
    }

    /// The tag at `index`.
    pub(super) fn name(&self, index: u32) -> &'static str {
        self.counts[index as usize].0
    }

    /// Every tag seen so far, with its counts.
    pub(super) fn stats(&self) -> Vec<TagStats> {
        self.counts
            .iter()
            .map(|(tag, c)| TagStats {
                tag: (*tag).to_owned(),
                blocks: c.blocks,
                bytes: c.bytes,
                peak_bytes: c.peak_bytes,
                budget: c.budget,
                // Filled in by the pool, which knows its sleep state.
                resident_bytes: 0,
                offloadable_bytes: 0,
                discardable_bytes: 0,
            })
            .collect()
    }

    /// Restarts every tag's peak at its current bytes.
    pub(super) fn reset_peaks(&mut self) {
        for (_, c) in &mut self.counts {
            c.peak_bytes = c.bytes;
        }
    }
}
