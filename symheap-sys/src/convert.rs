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

impl TryFrom<HcclReduceOp> for ReduceOp {
    /// The value itself, when no reduction has it.
    type Error = HcclReduceOp;

    /// The reduction of an `HCCL_REDUCE_*` value: the inverse of the `From` above, found
    /// through it (so the two cannot disagree).
    fn try_from(op: HcclReduceOp) -> Result<ReduceOp, HcclReduceOp> {
        ReduceOp::ALL
            .into_iter()
            .find(|&r| HcclReduceOp::from(r) == op)
            .ok_or(op)
    }
}

impl TryFrom<HcclDataType> for DataType {
    /// The value itself, for a type without a Rust number type (INT128, the FP8 formats) or
    /// no type at all.
    type Error = HcclDataType;

    /// The element type of an `HCCL_DATA_TYPE_*` value: the inverse of the `From` above,
    /// found through it (so the two cannot disagree).
    fn try_from(t: HcclDataType) -> Result<DataType, HcclDataType> {
        DataType::ALL
            .into_iter()
            .find(|&d| HcclDataType::from(d) == t)
            .ok_or(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_c_value_of_a_word_converts_back() {
        for op in ReduceOp::ALL {
            assert_eq!(ReduceOp::try_from(HcclReduceOp::from(op)), Ok(op));
        }
        for t in DataType::ALL {
            assert_eq!(DataType::try_from(HcclDataType::from(t)), Ok(t));
        }
        let int128 = HcclDataType::HCCL_DATA_TYPE_INT128;
        assert!(DataType::try_from(int128).is_err());
        assert!(ReduceOp::try_from(HcclReduceOp(99)).is_err());
    }

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
