//! Element types of device buffers and collectives, mapped to `HcclDataType`.

use half::{bf16, f16};

use crate::sys::HcclDataType;

/// A number type that can live in device memory and travel through collectives.
///
/// # Safety
/// Implementors are plain old data: `Copy`, no padding, no pointers, every bit pattern a valid
/// value, and `DATA_TYPE` describes exactly their size and encoding. This lets device bytes be
/// copied back into them.
pub unsafe trait Element: Copy + Send + Sync + 'static {
    /// The HCCL data type of this element.
    const DATA_TYPE: HcclDataType;

    /// Views elements as their bytes.
    fn slice_as_bytes(elems: &[Self]) -> &[u8] {
        // SAFETY: the trait's contract: no padding, so every byte is initialised.
        unsafe { std::slice::from_raw_parts(elems.as_ptr().cast(), std::mem::size_of_val(elems)) }
    }

    /// Views elements as mutable bytes.
    fn slice_as_bytes_mut(elems: &mut [Self]) -> &mut [u8] {
        // SAFETY: the trait's contract: no padding, and any bit pattern is a valid value, so
        // writing arbitrary bytes keeps every element valid.
        unsafe {
            std::slice::from_raw_parts_mut(elems.as_mut_ptr().cast(), std::mem::size_of_val(elems))
        }
    }
}

macro_rules! element {
    ($($t:ty => $dt:ident),* $(,)?) => {$(
        // SAFETY: a primitive number type: no padding, every bit pattern valid, and the HCCL
        // type has the same size and encoding.
        unsafe impl Element for $t {
            const DATA_TYPE: HcclDataType = HcclDataType::$dt;
        }
    )*};
}

element! {
    i8 => HCCL_DATA_TYPE_INT8,
    i16 => HCCL_DATA_TYPE_INT16,
    i32 => HCCL_DATA_TYPE_INT32,
    i64 => HCCL_DATA_TYPE_INT64,
    u8 => HCCL_DATA_TYPE_UINT8,
    u16 => HCCL_DATA_TYPE_UINT16,
    u32 => HCCL_DATA_TYPE_UINT32,
    u64 => HCCL_DATA_TYPE_UINT64,
    f16 => HCCL_DATA_TYPE_FP16,
    bf16 => HCCL_DATA_TYPE_BFP16,
    f32 => HCCL_DATA_TYPE_FP32,
    f64 => HCCL_DATA_TYPE_FP64,
}
