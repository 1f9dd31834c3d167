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

/// Live blocks and bytes per tag, in the order the tags first appeared (few tags: a scan).
#[derive(Default)]
pub(super) struct Tags {
    counts: Vec<(&'static str, TagCount)>,
}

#[derive(Clone, Copy, Default)]
struct TagCount {
    blocks: u64,
    bytes: u64,
    peak_bytes: u64,
}

impl Tags {
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
