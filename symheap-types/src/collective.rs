//! Which HCCL operation: one name for the pool's op hash, trace events, path prediction and
//! statistics, and for the emulator's records of a call and its choice of path, with what
//! each takes.

use std::fmt;

/// An HCCL collective or point-to-point operation, named as its C function without the
/// `Hccl` prefix. The discriminants are stable: the pool's op hash and the emulator's shared
/// board record them.
///
/// It displays, and with the `serde` feature serializes, as the C function's name
/// ([`c_name`](Collective::c_name)), e.g. `"HcclAllReduce"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[repr(u8)]
pub enum Collective {
    /// `HcclAllReduce`.
    #[cfg_attr(feature = "serde", serde(rename = "HcclAllReduce"))]
    AllReduce = 1,
    /// `HcclAllGather`.
    #[cfg_attr(feature = "serde", serde(rename = "HcclAllGather"))]
    AllGather = 2,
    /// `HcclReduceScatter`.
    #[cfg_attr(feature = "serde", serde(rename = "HcclReduceScatter"))]
    ReduceScatter = 3,
    /// `HcclAlltoAll`.
    #[cfg_attr(feature = "serde", serde(rename = "HcclAlltoAll"))]
    AlltoAll = 4,
    /// `HcclAlltoAllV`.
    #[cfg_attr(feature = "serde", serde(rename = "HcclAlltoAllV"))]
    AlltoAllV = 5,
    /// `HcclAllGatherV`.
    #[cfg_attr(feature = "serde", serde(rename = "HcclAllGatherV"))]
    AllGatherV = 6,
    /// `HcclReduceScatterV`.
    #[cfg_attr(feature = "serde", serde(rename = "HcclReduceScatterV"))]
    ReduceScatterV = 7,
    /// `HcclBroadcast`.
    #[cfg_attr(feature = "serde", serde(rename = "HcclBroadcast"))]
    Broadcast = 8,
    /// `HcclReduce`.
    #[cfg_attr(feature = "serde", serde(rename = "HcclReduce"))]
    Reduce = 9,
    /// `HcclScatter`.
    #[cfg_attr(feature = "serde", serde(rename = "HcclScatter"))]
    Scatter = 10,
    /// `HcclBarrier`.
    #[cfg_attr(feature = "serde", serde(rename = "HcclBarrier"))]
    Barrier = 11,
    /// `HcclSend`.
    #[cfg_attr(feature = "serde", serde(rename = "HcclSend"))]
    Send = 12,
    /// `HcclRecv`.
    #[cfg_attr(feature = "serde", serde(rename = "HcclRecv"))]
    Recv = 13,
    /// `HcclAlltoAllVC`: AlltoAllV with every rank's counts in one matrix.
    #[cfg_attr(feature = "serde", serde(rename = "HcclAlltoAllVC"))]
    AlltoAllVC = 14,
}

impl Collective {
    /// Every operation, in discriminant order.
    pub const ALL: [Collective; 14] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AlltoAll,
        Collective::AlltoAllV,
        Collective::AllGatherV,
        Collective::ReduceScatterV,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::Scatter,
        Collective::Barrier,
        Collective::Send,
        Collective::Recv,
        Collective::AlltoAllVC,
    ];

    /// The operation whose discriminant is `v`, if any.
    pub fn from_u8(v: u8) -> Option<Collective> {
        Self::ALL.get(usize::from(v).checked_sub(1)?).copied()
    }

    /// The C function's name, e.g. `"HcclAllReduce"`.
    pub fn c_name(self) -> &'static str {
        match self {
            Collective::AllReduce => "HcclAllReduce",
            Collective::AllGather => "HcclAllGather",
            Collective::ReduceScatter => "HcclReduceScatter",
            Collective::AlltoAll => "HcclAlltoAll",
            Collective::AlltoAllV => "HcclAlltoAllV",
            Collective::AllGatherV => "HcclAllGatherV",
            Collective::ReduceScatterV => "HcclReduceScatterV",
            Collective::Broadcast => "HcclBroadcast",
            Collective::Reduce => "HcclReduce",
            Collective::Scatter => "HcclScatter",
            Collective::Barrier => "HcclBarrier",
            Collective::Send => "HcclSend",
            Collective::Recv => "HcclRecv",
            Collective::AlltoAllVC => "HcclAlltoAllVC",
        }
    }

    /// Whether the call takes a reduction operation.
    pub fn reduces(self) -> bool {
        matches!(
            self,
            Collective::AllReduce
                | Collective::ReduceScatter
                | Collective::ReduceScatterV
                | Collective::Reduce
        )
    }

    /// Whether HCCL may run it on symmetric windows: AllReduce, AllGather, ReduceScatter and
    /// AlltoAll only (hicann/hcomm `hccl_communicator_host.cc`, `IsSupportSymmetricMemory`);
    /// the V forms, the rooted collectives and Barrier always stage.
    pub fn may_use_windows(self) -> bool {
        matches!(
            self,
            Collective::AllReduce
                | Collective::AllGather
                | Collective::ReduceScatter
                | Collective::AlltoAll
        )
    }

    /// Whether the call names a root rank.
    pub fn rooted(self) -> bool {
        matches!(
            self,
            Collective::Broadcast | Collective::Reduce | Collective::Scatter
        )
    }

    /// Whether counts and displacements come in per-rank arrays (the V collectives).
    pub fn is_v(self) -> bool {
        matches!(
            self,
            Collective::AllGatherV
                | Collective::ReduceScatterV
                | Collective::AlltoAllV
                | Collective::AlltoAllVC
        )
    }
}

impl fmt::Display for Collective {
    /// The C function's name, as [`c_name`](Collective::c_name).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.c_name())
    }
}

#[cfg(test)]
mod tests {
    use super::Collective;

    #[test]
    fn discriminants_round_trip_and_name_distinct_functions() {
        for c in Collective::ALL {
            assert_eq!(Collective::from_u8(c as u8), Some(c));
            assert!(c.c_name().starts_with("Hccl"));
        }
        assert_eq!(Collective::from_u8(0), None);
        assert_eq!(Collective::from_u8(15), None);
        let mut names: Vec<_> = Collective::ALL.iter().map(|c| c.c_name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Collective::ALL.len());
    }

    #[test]
    fn it_displays_as_its_c_function() {
        for c in Collective::ALL {
            assert_eq!(c.to_string(), c.c_name());
        }
    }

    /// Snapshots written when the kind was a string (the C name) still load, and new ones
    /// write the same string.
    #[cfg(feature = "serde")]
    #[test]
    fn it_serializes_as_its_c_function() {
        for c in Collective::ALL {
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.c_name()));
            assert_eq!(serde_json::from_str::<Collective>(&json).unwrap(), c);
        }
        assert!(serde_json::from_str::<Collective>("\"AllReduce\"").is_err());
    }
}
