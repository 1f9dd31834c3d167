//! Element types and reduction kernels.
//!
//! A reduction folds the sources in rank order, `((s0 op s1) op s2) ...`, for every element,
//! so every rank computes bit-identical results. Integers wrap on overflow; `fp16` and `bf16`
//! are widened to `f32`, folded in `f32`, and rounded (to nearest, ties to even) once per
//! element at the end; float `max` / `min` follow IEEE maxNum / minNum (a NaN loses to a
//! number).
//!
//! The fold runs block by block through a small accumulator, so the inner loops are plain
//! slice loops the compiler vectorises, one monomorphised loop per (type, op), with no
//! per-element dispatch, and the destination may be one of the sources.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use crate::sys::{HcclDataType, HcclReduceOp};

/// A supported element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DType {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    Bf16,
    F32,
    F64,
}

impl DType {
    /// The type of an `HcclDataType`, if supported (not INT128 or the FP8 formats).
    pub(crate) fn from_hccl(t: HcclDataType) -> Option<Self> {
        Some(match t {
            HcclDataType::HCCL_DATA_TYPE_INT8 => DType::I8,
            HcclDataType::HCCL_DATA_TYPE_INT16 => DType::I16,
            HcclDataType::HCCL_DATA_TYPE_INT32 => DType::I32,
            HcclDataType::HCCL_DATA_TYPE_INT64 => DType::I64,
            HcclDataType::HCCL_DATA_TYPE_UINT8 => DType::U8,
            HcclDataType::HCCL_DATA_TYPE_UINT16 => DType::U16,
            HcclDataType::HCCL_DATA_TYPE_UINT32 => DType::U32,
            HcclDataType::HCCL_DATA_TYPE_UINT64 => DType::U64,
            HcclDataType::HCCL_DATA_TYPE_FP16 => DType::F16,
            HcclDataType::HCCL_DATA_TYPE_BFP16 => DType::Bf16,
            HcclDataType::HCCL_DATA_TYPE_FP32 => DType::F32,
            HcclDataType::HCCL_DATA_TYPE_FP64 => DType::F64,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub(crate) fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::Bf16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }
}

/// A supported reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Sum,
    Prod,
    Max,
    Min,
}

impl Op {
    /// The reduction of an `HcclReduceOp`, if valid.
    pub(crate) fn from_hccl(op: HcclReduceOp) -> Option<Self> {
        Some(match op {
            HcclReduceOp::HCCL_REDUCE_SUM => Op::Sum,
            HcclReduceOp::HCCL_REDUCE_PROD => Op::Prod,
            HcclReduceOp::HCCL_REDUCE_MAX => Op::Max,
            HcclReduceOp::HCCL_REDUCE_MIN => Op::Min,
            _ => return None,
        })
    }
}

/// Arithmetic of an accumulator type.
trait Arith: Copy + Default {
    fn sum(self, b: Self) -> Self;
    fn prod(self, b: Self) -> Self;
    fn max(self, b: Self) -> Self;
    fn min(self, b: Self) -> Self;
}

macro_rules! int_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)]
            fn sum(self, b: Self) -> Self { self.wrapping_add(b) }
            #[inline(always)]
            fn prod(self, b: Self) -> Self { self.wrapping_mul(b) }
            #[inline(always)]
            fn max(self, b: Self) -> Self { Ord::max(self, b) }
            #[inline(always)]
            fn min(self, b: Self) -> Self { Ord::min(self, b) }
        }
    )*};
}
int_arith!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! float_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)]
            fn sum(self, b: Self) -> Self { self + b }
            #[inline(always)]
            fn prod(self, b: Self) -> Self { self * b }
            #[inline(always)]
            fn max(self, b: Self) -> Self { <$t>::max(self, b) }
            #[inline(always)]
            fn min(self, b: Self) -> Self { <$t>::min(self, b) }
        }
    )*};
}
float_arith!(f32, f64);

/// A reduction as a type, so each (type, op) pair gets its own monomorphised loop.
trait Combine {
    fn apply<A: Arith>(a: A, b: A) -> A;
}

macro_rules! combine {
    ($($name:ident => $method:ident),*) => {$(
        struct $name;
        impl Combine for $name {
            #[inline(always)]
            fn apply<A: Arith>(a: A, b: A) -> A { a.$method(b) }
        }
    )*};
}
combine!(SumOp => sum, ProdOp => prod, MaxOp => max, MinOp => min);

/// An element type: how it is widened into its accumulator and narrowed back.
trait Elem: Copy + 'static {
    type Acc: Arith;
    fn load(src: &[Self], acc: &mut [Self::Acc]);
    fn combine<O: Combine>(acc: &mut [Self::Acc], src: &[Self], scratch: &mut [Self::Acc]);
    fn store(acc: &[Self::Acc], dst: &mut [Self]);
}

macro_rules! plain_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            type Acc = $t;
            #[inline(always)]
            fn load(src: &[Self], acc: &mut [Self]) { acc.copy_from_slice(src) }
            #[inline(always)]
            fn combine<O: Combine>(acc: &mut [Self], src: &[Self], _: &mut [Self]) {
                for (a, &b) in acc.iter_mut().zip(src) {
                    *a = O::apply(*a, b);
                }
            }
            #[inline(always)]
            fn store(acc: &[Self], dst: &mut [Self]) { dst.copy_from_slice(acc) }
        }
    )*};
}
plain_elem!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

macro_rules! half_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            type Acc = f32;
            #[inline(always)]
            fn load(src: &[Self], acc: &mut [f32]) { src.convert_to_f32_slice(acc) }
            #[inline(always)]
            fn combine<O: Combine>(acc: &mut [f32], src: &[Self], scratch: &mut [f32]) {
                let wide = &mut scratch[..src.len()];
                src.convert_to_f32_slice(wide);
                for (a, &b) in acc.iter_mut().zip(wide.iter()) {
                    *a = O::apply(*a, b);
                }
            }
            #[inline(always)]
            fn store(acc: &[f32], dst: &mut [Self]) { dst.convert_from_f32_slice(acc) }
        }
    )*};
}
half_elem!(f16, bf16);

/// Elements per block: a block of accumulators stays in L1.
const BLOCK: usize = 2048;

/// Folds `srcs` into `dst`, element by element, in source order.
///
/// # Safety
/// Every `srcs[k]` is valid for reading `count` `T`s and `dst` for writing them, all aligned;
/// `dst` may equal a source but not overlap one partially; nothing else writes these ranges
/// during the call.
unsafe fn fold<T: Elem, O: Combine>(dst: *mut T, srcs: &[*const T], count: usize) {
    let mut acc = [T::Acc::default(); BLOCK];
    let mut scratch = [T::Acc::default(); BLOCK];
    let mut done = 0;
    while done < count {
        let len = BLOCK.min(count - done);
        let acc = &mut acc[..len];
        // SAFETY: within the first source's `count` elements; the shared slice ends with the
        // statement, before `dst` (which may be this source) is written.
        T::load(
            unsafe { std::slice::from_raw_parts(srcs[0].add(done), len) },
            acc,
        );
        for &src in &srcs[1..] {
            // SAFETY: as above, for each further source.
            let src = unsafe { std::slice::from_raw_parts(src.add(done), len) };
            T::combine::<O>(acc, src, &mut scratch);
        }
        // SAFETY: within `dst`'s `count` elements; no source slice is alive any more.
        T::store(acc, unsafe {
            std::slice::from_raw_parts_mut(dst.add(done), len)
        });
        done += len;
    }
}

/// Dispatches on the reduction once, for a whole buffer.
///
/// # Safety
/// As for [`fold`].
unsafe fn typed<T: Elem>(op: Op, dst: usize, srcs: &[usize], count: usize) {
    let srcs: Vec<*const T> = srcs.iter().map(|&s| s as *const T).collect();
    let dst = dst as *mut T;
    // SAFETY: forwarded from the caller.
    unsafe {
        match op {
            Op::Sum => fold::<T, SumOp>(dst, &srcs, count),
            Op::Prod => fold::<T, ProdOp>(dst, &srcs, count),
            Op::Max => fold::<T, MaxOp>(dst, &srcs, count),
            Op::Min => fold::<T, MinOp>(dst, &srcs, count),
        }
    }
}

/// `dst[i] = srcs[0][i] op srcs[1][i] op ...` for `count` elements of `dtype`.
///
/// # Safety
/// Every source address is valid for reading `count` elements and `dst` for writing them, all
/// aligned to the element size; `dst` may equal a source but not overlap one partially; and
/// nothing else writes these ranges during the call. `srcs` is not empty.
pub(crate) unsafe fn reduce(dtype: DType, op: Op, dst: usize, srcs: &[usize], count: usize) {
    debug_assert!(!srcs.is_empty());
    // SAFETY: forwarded from the caller; the element type matches `dtype`.
    unsafe {
        match dtype {
            DType::I8 => typed::<i8>(op, dst, srcs, count),
            DType::I16 => typed::<i16>(op, dst, srcs, count),
            DType::I32 => typed::<i32>(op, dst, srcs, count),
            DType::I64 => typed::<i64>(op, dst, srcs, count),
            DType::U8 => typed::<u8>(op, dst, srcs, count),
            DType::U16 => typed::<u16>(op, dst, srcs, count),
            DType::U32 => typed::<u32>(op, dst, srcs, count),
            DType::U64 => typed::<u64>(op, dst, srcs, count),
            DType::F16 => typed::<f16>(op, dst, srcs, count),
            DType::Bf16 => typed::<bf16>(op, dst, srcs, count),
            DType::F32 => typed::<f32>(op, dst, srcs, count),
            DType::F64 => typed::<f64>(op, dst, srcs, count),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_in_rank_order_and_may_write_a_source() {
        let a: Vec<i8> = (0..5000).map(|i| (i % 100) as i8).collect();
        let b: Vec<i8> = (0..5000).map(|i| (i % 7) as i8 + 100).collect();
        let mut out = a.clone();
        let srcs = [out.as_ptr() as usize, b.as_ptr() as usize];
        // SAFETY: both sources hold 5000 elements; `out` is the first source exactly.
        unsafe { reduce(DType::I8, Op::Sum, out.as_mut_ptr() as usize, &srcs, 5000) };
        for i in 0..5000 {
            assert_eq!(out[i], a[i].wrapping_add(b[i]), "wraps at {i}");
        }
        let x = [f16::from_f32(1.0), f16::from_f32(f32::NAN)];
        let y = [f16::from_f32(2048.0), f16::from_f32(3.0)];
        let mut z = [f16::ZERO; 2];
        for (op, want) in [(Op::Sum, [2049.0, f32::NAN]), (Op::Max, [2048.0, 3.0])] {
            let srcs = [x.as_ptr() as usize, y.as_ptr() as usize];
            // SAFETY: two elements each.
            unsafe { reduce(DType::F16, op, z.as_mut_ptr() as usize, &srcs, 2) };
            // fp16 spacing at 2048 is 2: 2049 rounds to even (2048) when narrowed once.
            let want0 = f16::from_f32(want[0]);
            assert_eq!(z[0], want0);
            assert_eq!(z[1].is_nan(), want[1].is_nan());
        }
    }
}
