//! The reduction of a reducing collective.

/// The reduction of a reducing collective (AllReduce, ReduceScatter, ReduceScatterV, Reduce:
/// the [`Collective`](crate::Collective)s whose [`reduces`](crate::Collective::reduces) is
/// true). Each case is one of HCCL's `HcclReduceOp` values; `symheap-sys` converts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ReduceOp {
    /// Element-wise sum (`HCCL_REDUCE_SUM`).
    Sum,
    /// Element-wise product (`HCCL_REDUCE_PROD`).
    Prod,
    /// Element-wise maximum (`HCCL_REDUCE_MAX`).
    Max,
    /// Element-wise minimum (`HCCL_REDUCE_MIN`).
    Min,
}

impl ReduceOp {
    /// Every reduction, in declaration order.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];
}
