//! Which HCCL operation: one name for the pool's op hash and trace events and for the
//! emulator's records of a call, with what each takes.

/// An HCCL collective or point-to-point operation, named as its C function without the
/// `Hccl` prefix. The discriminants are stable: the pool's op hash and the emulator's shared
/// board record them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Collective {
    /// `HcclAllReduce`.
    AllReduce = 1,
    /// `HcclAllGather`.
    AllGather = 2,
    /// `HcclReduceScatter`.
    ReduceScatter = 3,
    /// `HcclAlltoAll`.
    AlltoAll = 4,
    /// `HcclAlltoAllV`.
    AlltoAllV = 5,
    /// `HcclAllGatherV`.
    AllGatherV = 6,
    /// `HcclReduceScatterV`.
    ReduceScatterV = 7,
    /// `HcclBroadcast`.
    Broadcast = 8,
    /// `HcclReduce`.
    Reduce = 9,
    /// `HcclScatter`.
    Scatter = 10,
    /// `HcclBarrier`.
    Barrier = 11,
    /// `HcclSend`.
    Send = 12,
    /// `HcclRecv`.
    Recv = 13,
    /// `HcclAlltoAllVC`: AlltoAllV with every rank's counts in one matrix.
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
}
