//! The C values of the shared vocabulary's words (`symheap-types`), which knows no C types.

use symheap_types::{DataType, ReduceOp};

use crate::types::{HcclDataType, HcclReduceOp};

impl From<ReduceOp> for HcclReduceOp {
    /// The `HCCL_REDUCE_*` value of the reduction.
    fn from(op: ReduceOp) -> HcclReduceOp {
        match op {
            ReduceOp::Sum => HcclReduceOp::HCCL_REDUCE_SUM,
            ReduceOp::Prod => HcclReduceOp::HCCL_REDUCE_PROD,
            ReduceOp::Max => HcclReduceOp::HCCL_REDUCE_MAX,
            ReduceOp::Min => HcclReduceOp::HCCL_REDUCE_MIN,
        }
    }
}

impl From<DataType> for HcclDataType {
    /// The `HCCL_DATA_TYPE_*` value of the element type.
    fn from(t: DataType) -> HcclDataType {
        match t {
            DataType::I8 => HcclDataType::HCCL_DATA_TYPE_INT8,
            DataType::I16 => HcclDataType::HCCL_DATA_TYPE_INT16,
            DataType::I32 => HcclDataType::HCCL_DATA_TYPE_INT32,
            DataType::I64 => HcclDataType::HCCL_DATA_TYPE_INT64,
            DataType::U8 => HcclDataType::HCCL_DATA_TYPE_UINT8,
            DataType::U16 => HcclDataType::HCCL_DATA_TYPE_UINT16,
            DataType::U32 => HcclDataType::HCCL_DATA_TYPE_UINT32,
            DataType::U64 => HcclDataType::HCCL_DATA_TYPE_UINT64,
            DataType::F16 => HcclDataType::HCCL_DATA_TYPE_FP16,
            DataType::BF16 => HcclDataType::HCCL_DATA_TYPE_BFP16,
            DataType::F32 => HcclDataType::HCCL_DATA_TYPE_FP32,
            DataType::F64 => HcclDataType::HCCL_DATA_TYPE_FP64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_has_its_own_c_value() {
        let mut ops: Vec<i32> = ReduceOp::ALL.map(|op| HcclReduceOp::from(op).0).to_vec();
        ops.sort_unstable();
        assert_eq!(ops, [0, 1, 2, 3]);
        let mut types: Vec<i32> = DataType::ALL.map(|t| HcclDataType::from(t).0).to_vec();
        types.sort_unstable();
        types.dedup();
        assert_eq!(types, (0..12).collect::<Vec<i32>>());
    }
}
