//! Which path a collective takes: HCCL reads peers' windows directly (the symmetric path,
//! zero-copy) only when `IsSupportSymmetricMemory` says so (hicann/hcomm
//! `hccl_communicator_host.cc`), and otherwise stages the data through its HCCL buffer,
//! saying so only in an INFO log. The pool predicts the path by the same rules, counts it in
//! [`PoolStats::collectives`](crate::PoolStats::collectives) and warns at the first fallback
//! of each reason, so that a silent fallback is never silent here.

use std::fmt;

use crate::sys::Collective;

/// The path a collective takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Path {
    /// Peers' windows are read and written directly: no staging copy.
    Symmetric,
    /// The data goes through the HCCL buffer, for this reason.
    Staged(Staged),
}

/// Why a collective stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Staged {
    /// HCCL uses windows for AllReduce, AllGather, ReduceScatter and AlltoAll only (not
    /// their V forms, the rooted collectives or Barrier).
    Kind,
    /// The communicator expands collectives on the host or with AIV kernels, not on the AI
    /// CPU (`hcclOpExpansionMode`, `HCCL_OP_EXPANSION_MODE`).
    Expansion,
    /// A one-rank communicator has no symmetric windows.
    SingleRank,
    /// A buffer is not in a window of this communicator.
    NotInWindow,
}

impl Staged {
    /// Every reason, in declaration order.
    pub const ALL: [Staged; 4] = [
        Staged::Kind,
        Staged::Expansion,
        Staged::SingleRank,
        Staged::NotInWindow,
    ];

    /// What the reason means, in a few words.
    pub fn describe(self) -> &'static str {
        match self {
            Staged::Kind => {
                "HCCL uses windows only for AllReduce, AllGather, ReduceScatter, AlltoAll"
            }
            Staged::Expansion => "the communicator does not expand collectives on the AI CPU",
            Staged::SingleRank => "a one-rank communicator has no symmetric windows",
            Staged::NotInWindow => "a buffer is not in a window of this communicator",
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Symmetric => f.write_str("symmetric"),
            Path::Staged(why) => write!(f, "staged ({})", why.describe()),
        }
    }
}

/// The path of a `kind` collective on a communicator of `ranks` ranks whose expansion does
/// (`ai_cpu`) or does not use windows, with both buffers in its windows (`in_windows`).
/// HCCL's checks, in its order.
pub(crate) fn predict(kind: Collective, ai_cpu: bool, ranks: u32, in_windows: bool) -> Path {
    if !kind.may_use_windows() {
        Path::Staged(Staged::Kind)
    } else if ranks == 1 {
        Path::Staged(Staged::SingleRank)
    } else if !ai_cpu {
        Path::Staged(Staged::Expansion)
    } else if !in_windows {
        Path::Staged(Staged::NotInWindow)
    } else {
        Path::Symmetric
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

    #[test]
    fn hccl_s_checks_in_order() {
        let staged = |why| Path::Staged(why);
        assert_eq!(
            predict(Collective::AllReduce, true, 2, true),
            Path::Symmetric
        );
        assert_eq!(
            predict(Collective::AlltoAllV, true, 2, true),
            staged(Staged::Kind)
        );
        assert_eq!(
            predict(Collective::Broadcast, false, 1, false),
            staged(Staged::Kind)
        );
        assert_eq!(
            predict(Collective::AllGather, true, 1, true),
            staged(Staged::SingleRank)
        );
        assert_eq!(
            predict(Collective::AlltoAll, false, 4, true),
            staged(Staged::Expansion)
        );
        assert_eq!(
            predict(Collective::ReduceScatter, true, 4, false),
            staged(Staged::NotInWindow)
        );
        assert!(expands_on_ai_cpu(0, None));
        assert!(!expands_on_ai_cpu(0, Some("HOST")));
        assert!(!expands_on_ai_cpu(0, Some("AIV")));
        assert!(expands_on_ai_cpu(2, Some("HOST")));
        assert!(!expands_on_ai_cpu(3, None));
        assert!(expands_on_ai_cpu(7, Some("AI_CPU")));
    }
}
