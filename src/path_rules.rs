//! HCCL's rules for the path a collective takes ([`CollectivePath`], from `symheap-types`):
//! HCCL reads peers' windows directly (the symmetric path, zero-copy) only when
//! `IsSupportSymmetricMemory` says so (hicann/hcomm `hccl_communicator_host.cc`), and
//! otherwise stages the data through its HCCL buffer, saying so only in an INFO log. The pool
//! predicts the path by the same rules, counts it in
//! [`PoolStats::collectives`](crate::PoolStats::collectives) and warns at the first fallback
//! of each reason, so that a silent fallback is never silent here.

use crate::{Collective, CollectivePath, Staged};

/// What HCCL's checks need to know of where a communicator's ranks are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Placement {
    /// The ranks are in more than one SuperPoD.
    pub(crate) spans_superpods: bool,
    /// The ranks are on several nodes, one on each, or the nodes have different numbers of
    /// them.
    pub(crate) uneven_nodes: bool,
}

/// The path of a `kind` collective on a communicator of `ranks` ranks placed as `placement`
/// says, whose expansion does (`ai_cpu`) or does not use windows, with both buffers in its
/// windows (`in_windows`). HCCL's checks, in its order: a communicator spanning SuperPoDs has
/// no symmetric memory at all (`IsSupportSymmetricMemory` finds none, since
/// `InitSymmetricMemory` made none); after the expansion, `deviceNumPerAggregation_ == 1`
/// (one rank per server) and `multiModuleDiffDeviceNumMode_` (servers of different rank
/// counts) stage.
pub(crate) fn predict(
    kind: Collective,
    placement: Placement,
    ai_cpu: bool,
    ranks: u32,
    in_windows: bool,
) -> CollectivePath {
    if placement.spans_superpods {
        CollectivePath::Staged(Staged::CrossSuperPod)
    } else if !kind.may_use_windows() {
        CollectivePath::Staged(Staged::Kind)
    } else if ranks == 1 {
        CollectivePath::Staged(Staged::SingleRank)
    } else if !ai_cpu {
        CollectivePath::Staged(Staged::Expansion)
    } else if placement.uneven_nodes {
        CollectivePath::Staged(Staged::RanksPerNode)
    } else if !in_windows {
        CollectivePath::Staged(Staged::NotInWindow)
    } else {
        CollectivePath::Symmetric
    }
}

/// Whether a communicator made with `hcclOpExpansionMode` `mode` expands on the AI CPU, with
/// `var` the `HCCL_OP_EXPANSION_MODE` variable: the config's 1 (host), 2 (AI CPU), 3 and 4
/// (AIV) win; otherwise the variable's `HOST` and `AIV` do not, anything else does (the A3
/// default; an invalid value has already failed the communicator's init).
pub(crate) fn expands_on_ai_cpu(mode: u32, var: Option<&str>) -> bool {
    match mode {
        1 | 3 | 4 => false,
        2 => true,
        _ => !matches!(var, Some("HOST" | "AIV")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE_NODE: Placement = Placement {
        spans_superpods: false,
        uneven_nodes: false,
    };

    #[test]
    fn hccl_s_checks_in_order() {
        let staged = |why| CollectivePath::Staged(why);
        assert_eq!(
            predict(Collective::AllReduce, ONE_NODE, true, 2, true),
            CollectivePath::Symmetric
        );
        assert_eq!(
            predict(Collective::AlltoAllV, ONE_NODE, true, 2, true),
            staged(Staged::Kind)
        );
        assert_eq!(
            predict(Collective::Broadcast, ONE_NODE, false, 1, false),
            staged(Staged::Kind)
        );
        assert_eq!(
            predict(Collective::AllGather, ONE_NODE, true, 1, true),
            staged(Staged::SingleRank)
        );
        assert_eq!(
            predict(Collective::AlltoAll, ONE_NODE, false, 4, true),
            staged(Staged::Expansion)
        );
        assert_eq!(
            predict(Collective::ReduceScatter, ONE_NODE, true, 4, false),
            staged(Staged::NotInWindow)
        );
        let across = Placement {
            spans_superpods: true,
            uneven_nodes: true,
        };
        for kind in [Collective::AllReduce, Collective::Broadcast] {
            assert_eq!(
                predict(kind, across, true, 4, true),
                staged(Staged::CrossSuperPod),
                "no windows at all across SuperPoDs"
            );
        }
        let uneven = Placement {
            uneven_nodes: true,
            ..ONE_NODE
        };
        assert_eq!(
            predict(Collective::AllGather, uneven, true, 3, true),
            staged(Staged::RanksPerNode)
        );
        assert_eq!(
            predict(Collective::AllGather, uneven, false, 3, true),
            staged(Staged::Expansion),
            "the expansion is checked first"
        );
        assert!(expands_on_ai_cpu(0, None));
        assert!(!expands_on_ai_cpu(0, Some("HOST")));
        assert!(!expands_on_ai_cpu(0, Some("AIV")));
        assert!(expands_on_ai_cpu(2, Some("HOST")));
        assert!(!expands_on_ai_cpu(3, None));
        assert!(expands_on_ai_cpu(7, Some("AI_CPU")));
    }
}
