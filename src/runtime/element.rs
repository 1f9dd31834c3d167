//! Element types of device buffers and collectives, each named by its [`DataType`] (whose C
//! value, `HcclDataType`, `symheap-sys` converts to).

use half::{bf16, f16};

use crate::DataType;

/// A number type that can live in device memory and travel through collectives.
///
/// # Safety
/// Implementors are plain old data: `Copy`, no padding, no pointers, every bit pattern a valid
/// value, and `DATA_TYPE` describes exactly their size and encoding. This lets device bytes be
/// copied back into them.
pub unsafe trait Element: Copy + Send + Sync + 'static {
    /// The data type of this element; `HcclDataType::from(T::DATA_TYPE)` (or `.into()`) is
    /// its C value, for the raw collectives.
    const DATA_TYPE: DataType;

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
        // type has the same size and encoding (the test below checks the size).
        unsafe impl Element for $t {
            const DATA_TYPE: DataType = DataType::$dt;
        }
    )*};
}

element! {
    i8 => I8,
    i16 => I16,
    i32 => I32,
    i64 => I64,
    u8 => U8,
    u16 => U16,
    u32 => U32,
    u64 => U64,
    f16 => F16,
    bf16 => BF16,
    f32 => F32,
    f64 => F64,
}

#[cfg(test)]
mod tests {
    use super::Element;

    fn size_matches<T: Element>() -> bool {
        T::DATA_TYPE.size() == std::mem::size_of::<T>()
    }

    /// The trait's contract: each data type describes its Rust type's size.
    #[test]
    fn every_element_has_its_data_type_s_size() {
        assert!(size_matches::<i8>() && size_matches::<i16>());
        assert!(size_matches::<i32>() && size_matches::<i64>());
        assert!(size_matches::<u8>() && size_matches::<u16>());
        assert!(size_matches::<u32>() && size_matches::<u64>());
        assert!(size_matches::<half::f16>() && size_matches::<half::bf16>());
        assert!(size_matches::<f32>() && size_matches::<f64>());
    }
}
