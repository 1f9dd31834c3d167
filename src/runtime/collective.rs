//! The reduction of the reducing collectives. The collectives themselves are the pool's
//! (typed, checked) and the raw layer's ([`crate::raw::RawComm`], on raw device pointers).

use crate::sys::HcclReduceOp;

/// The reduction of a reducing collective (AllReduce, ReduceScatter, ReduceScatterV, Reduce).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Element-wise sum.
    Sum,
    /// Element-wise product.
    Prod,
    /// Element-wise maximum.
    Max,
    /// Element-wise minimum.
    Min,
}

impl ReduceOp {
    /// The C value.
    pub fn to_raw(self) -> HcclReduceOp {
        match self {
            ReduceOp::Sum => HcclReduceOp::HCCL_REDUCE_SUM,
            ReduceOp::Prod => HcclReduceOp::HCCL_REDUCE_PROD,
            ReduceOp::Max => HcclReduceOp::HCCL_REDUCE_MAX,
            ReduceOp::Min => HcclReduceOp::HCCL_REDUCE_MIN,
        }
    }
}
