//! The element types of collectives.

/// An element type HCCL reduces and moves: the cases of `HcclDataType` that have a Rust
/// number type (not INT128 or the FP8 formats); `symheap-sys` converts. `symheap`'s
/// `Element` trait names the one of each Rust type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DataType {
    /// `i8` (`HCCL_DATA_TYPE_INT8`).
    I8,
    /// `i16` (`HCCL_DATA_TYPE_INT16`).
    I16,
    /// `i32` (`HCCL_DATA_TYPE_INT32`).
    I32,
    /// `i64` (`HCCL_DATA_TYPE_INT64`).
    I64,
    /// `u8` (`HCCL_DATA_TYPE_UINT8`).
    U8,
    /// `u16` (`HCCL_DATA_TYPE_UINT16`).
    U16,
    /// `u32` (`HCCL_DATA_TYPE_UINT32`).
    U32,
    /// `u64` (`HCCL_DATA_TYPE_UINT64`).
    U64,
    /// IEEE half precision, `half::f16` (`HCCL_DATA_TYPE_FP16`).
    F16,
    /// bfloat16, `half::bf16` (`HCCL_DATA_TYPE_BFP16`).
    BF16,
    /// `f32` (`HCCL_DATA_TYPE_FP32`).
    F32,
    /// `f64` (`HCCL_DATA_TYPE_FP64`).
    F64,
}

impl DataType {
    /// Every data type, in declaration order.
    pub const ALL: [DataType; 12] = [
        DataType::I8,
        DataType::I16,
        DataType::I32,
        DataType::I64,
        DataType::U8,
        DataType::U16,
        DataType::U32,
        DataType::U64,
        DataType::F16,
        DataType::BF16,
        DataType::F32,
        DataType::F64,
    ];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 => 1,
            DataType::I16 | DataType::U16 | DataType::F16 | DataType::BF16 => 2,
            DataType::I32 | DataType::U32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }
}
