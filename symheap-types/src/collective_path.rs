//! Which path a collective takes: HCCL reads peers' windows directly (the symmetric path,
//! zero-copy) only when `IsSupportSymmetricMemory` says so (hicann/hcomm
//! `hccl_communicator_host.cc`), and otherwise stages the data through its HCCL buffer,
//! saying so only in an INFO log. `symheap`'s pool predicts the path by the same rules, counts
//! it in its statistics and warns at the first fallback of each reason; the emulator chooses
//! its algorithm by them.

use std::fmt;

/// The path a collective takes: [`Symmetric`](CollectivePath::Symmetric), or
/// [`Staged`](CollectivePath::Staged) and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum CollectivePath {
    /// Peers' windows are read and written directly: no staging copy.
    Symmetric,
    /// The data goes through the HCCL buffer, for this reason.
    Staged(Staged),
}

/// Why a collective stages (takes [`CollectivePath::Staged`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Staged {
    /// HCCL uses windows for AllReduce, AllGather, ReduceScatter and AlltoAll only (not
    /// their V forms, the rooted collectives or Barrier): see
    /// [`Collective::may_use_windows`](crate::Collective::may_use_windows).
    Kind,
    /// The communicator expands collectives on the host or with AIV kernels, not on the AI
    /// CPU (`hcclOpExpansionMode`, `HCCL_OP_EXPANSION_MODE`).
    Expansion,
    /// A one-rank communicator has no symmetric windows.
    SingleRank,
    /// A buffer is not in a window of this communicator.
    NotInWindow,
    /// The communicator's ranks are in more than one SuperPoD: HCCL makes it no symmetric
    /// memory (windows need HCCS, which ends at the SuperPoD), refuses to register windows on
    /// it and stages every collective (hicann/hcomm `hccl_communicator_host.cc`,
    /// `InitSymmetricMemory` and `RegisterWindow`: "Cross-SuperNode not support symmetric
    /// memory").
    CrossSuperPod,
    /// The communicator's ranks are on several nodes (servers), one on each, or the nodes
    /// have different numbers of them: HCCL's symmetric algorithms need the same number, more
    /// than one, on every server (`IsSupportSymmetricMemory` refuses
    /// `deviceNumPerAggregation_ == 1` and `multiModuleDiffDeviceNumMode_`). A data-parallel
    /// group of one rank per node is the common case.
    RanksPerNode,
}

impl Staged {
    /// Every reason, in declaration order.
    pub const ALL: [Staged; 6] = [
        Staged::Kind,
        Staged::Expansion,
        Staged::SingleRank,
        Staged::NotInWindow,
        Staged::CrossSuperPod,
        Staged::RanksPerNode,
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
            Staged::CrossSuperPod => {
                "the communicator spans SuperPoDs, where HCCL has no symmetric windows"
            }
            Staged::RanksPerNode => {
                "the communicator's nodes hold one rank each, or different numbers of ranks"
            }
        }
    }
}

impl fmt::Display for CollectivePath {
    /// `symmetric`, or `staged (` and the reason's [`describe`](Staged::describe) `)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CollectivePath::Symmetric => f.write_str("symmetric"),
            CollectivePath::Staged(why) => write!(f, "staged ({})", why.describe()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{CollectivePath, Staged};

    #[test]
    fn paths_display_their_reason() {
        assert_eq!(CollectivePath::Symmetric.to_string(), "symmetric");
        for why in Staged::ALL {
            let text = CollectivePath::Staged(why).to_string();
            assert_eq!(text, format!("staged ({})", why.describe()));
        }
    }

    /// The JSON form is the one snapshots have always had (the type was called `Path`).
    #[cfg(feature = "serde")]
    #[test]
    fn paths_keep_their_json_form() {
        let cases = [
            (CollectivePath::Symmetric, r#""Symmetric""#),
            (CollectivePath::Staged(Staged::Kind), r#"{"Staged":"Kind"}"#),
            (
                CollectivePath::Staged(Staged::NotInWindow),
                r#"{"Staged":"NotInWindow"}"#,
            ),
        ];
        for (path, json) in cases {
            assert_eq!(serde_json::to_string(&path).unwrap(), json);
            assert_eq!(serde_json::from_str::<CollectivePath>(json).unwrap(), path);
        }
    }
}
