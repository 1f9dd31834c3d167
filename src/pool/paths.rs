//! How many collectives of each kind took each path ([`CollectivePath`]): kept by the pool, shown in
//! its stats and summary, and a warning at the first fallback of each reason.

use std::collections::BTreeMap;

use super::stats::CollectiveStats;
use crate::path_rules;
use crate::runtime::Comm;
use crate::{Collective, CollectivePath, Staged};

/// Collectives by kind and path.
#[derive(Default)]
pub(crate) struct PathCounts {
    /// By communicator (0: the pool's own; k: the k-th attached group), kind and path.
    counts: BTreeMap<(usize, Collective, CollectivePath), u64>,
    /// The reasons already warned about.
    warned: Vec<Staged>,
}

impl PathCounts {
    /// Counts one `kind` collective on `path`; `true` for the first that staged for its
    /// reason (the caller warns).
    pub(crate) fn record(&mut self, comm: usize, kind: Collective, path: CollectivePath) -> bool {
        *self.counts.entry((comm, kind, path)).or_default() += 1;
        match path {
            CollectivePath::Staged(why) if !self.warned.contains(&why) => {
                self.warned.push(why);
                true
            }
            _ => false,
        }
    }

    /// The counts, by communicator, kind (in `Collective`'s order) and path.
    pub(crate) fn stats(&self) -> Vec<CollectiveStats> {
        self.counts
            .iter()
            .map(|(&(comm, kind, path), &count)| CollectiveStats {
                comm,
                kind,
                path,
                count,
            })
            .collect()
    }
}

/// The path of a `kind` collective on `comm` whose buffers are (`in_windows`) or are not
/// all in windows of `comm`.
pub(crate) fn predict(comm: &Comm, kind: Collective, in_windows: bool) -> CollectivePath {
    path_rules::predict(
        kind,
        comm.placement(),
        comm.expands_on_ai_cpu(),
        comm.rank_count(),
        in_windows,
    )
}
