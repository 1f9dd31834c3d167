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
//! per-element dispatch; a destination may be one of the sources; and one result may go to
//! several destinations (AllReduce writes it into every rank's output). Large results are
//! written with non-temporal stores: they will not be read back from cache anyway, and
//! streaming skips the read-for-ownership of every destination line (on the development
//! machine, 44 GB/s of streaming stores against about 30 GB/s of cached ones).

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use symheap_types::{DataType, ReduceOp};

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
trait Elem: Copy + Default + 'static {
    type Acc: Arith;
    fn load(src: &[Self], acc: &mut [Self::Acc]);
    fn combine<O: Combine>(acc: &mut [Self::Acc], src: &[Self], scratch: &mut [Self::Acc]);
    /// The result as elements: the accumulator itself when it has the element type, else
    /// narrowed into `out`.
    fn finish<'a>(acc: &'a [Self::Acc], out: &'a mut [Self]) -> &'a [Self];
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
            fn finish<'a>(acc: &'a [Self], _: &'a mut [Self]) -> &'a [Self] { acc }
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
            fn finish<'a>(acc: &'a [f32], out: &'a mut [Self]) -> &'a [Self] {
                out.convert_from_f32_slice(acc);
                out
            }
        }
    )*};
}
half_elem!(f16, bf16);

/// Elements per block: a block of accumulators stays in L1.
const BLOCK: usize = 2048;

/// Results of at least this many bytes (all destinations together) are written with
/// non-temporal stores: more than a cache holds, so nobody reads them back from cache.
const STREAM_MIN_BYTES: usize = 8 << 20;

/// Copies `len` bytes from `src` to `dst`, which do not overlap; with `stream`, bypassing the
/// caches where the target supports it.
///
/// # Safety
/// `src` is valid for reading and `dst` for writing `len` bytes.
#[inline]
unsafe fn put(dst: *mut u8, src: *const u8, len: usize, stream: bool) {
    #[cfg(target_arch = "x86_64")]
    if stream {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        // Streaming stores need 16-byte aligned destinations: plain copies for the ends.
        let head = dst.align_offset(16).min(len);
        let body = (len - head) / 16 * 16;
        // SAFETY: within the caller's ranges; the body's destinations are 16-byte aligned
        // and SSE2 is part of x86_64.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, head);
            let (s, d) = (src.add(head), dst.add(head));
            for i in (0..body).step_by(16) {
                let v = _mm_loadu_si128(s.add(i).cast::<__m128i>());
                _mm_stream_si128(d.add(i).cast::<__m128i>(), v);
            }
            std::ptr::copy_nonoverlapping(s.add(body), d.add(body), len - head - body);
        }
        return;
    }
    let _ = stream;
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// Orders earlier streaming stores before whatever follows (the rendezvous that publishes
/// the result).
fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86_64; a fence has no other effect.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// Folds `srcs` element by element, in source order, and writes the result to every one of
/// `dsts`.
///
/// # Safety
/// Every `srcs[k]` is valid for reading `count` `T`s and every `dsts[k]` for writing them,
/// all aligned; a destination may equal a source but not overlap one partially, and
/// destinations do not overlap each other; nothing else writes these ranges during the call.
unsafe fn fold<T: Elem, O: Combine>(dsts: &[*mut T], srcs: &[*const T], count: usize) {
    let mut acc = [T::Acc::default(); BLOCK];
    let mut scratch = [T::Acc::default(); BLOCK];
    let mut out = [T::default(); BLOCK];
    let stream = count * size_of::<T>() * dsts.len() >= STREAM_MIN_BYTES;
    let mut done = 0;
    while done < count {
        let len = BLOCK.min(count - done);
        let acc = &mut acc[..len];
        // SAFETY: within the first source's `count` elements; the shared slice ends with the
        // statement, before any destination (which may be this source) is written.
        T::load(
            unsafe { std::slice::from_raw_parts(srcs[0].add(done), len) },
            acc,
        );
        for &src in &srcs[1..] {
            // SAFETY: as above, for each further source.
            let src = unsafe { std::slice::from_raw_parts(src.add(done), len) };
            T::combine::<O>(acc, src, &mut scratch);
        }
        let result = T::finish(acc, &mut out[..len]);
        for &dst in dsts {
            // SAFETY: within each destination's `count` elements; `result` lives in this
            // function's own buffers, and no source slice is alive any more.
            unsafe {
                put(
                    dst.add(done).cast::<u8>(),
                    result.as_ptr().cast::<u8>(),
                    size_of_val(result),
                    stream,
                )
            };
        }
        done += len;
    }
    if stream {
        stream_fence();
    }
}

/// Dispatches on the reduction once, for a whole buffer.
///
/// # Safety
/// As for [`fold`].
unsafe fn typed<T: Elem>(op: ReduceOp, dsts: &[usize], srcs: &[usize], count: usize) {
    let srcs: Vec<*const T> = srcs.iter().map(|&s| s as *const T).collect();
    let dsts: Vec<*mut T> = dsts.iter().map(|&d| d as *mut T).collect();
    // SAFETY: forwarded from the caller.
    unsafe {
        match op {
            ReduceOp::Sum => fold::<T, SumOp>(&dsts, &srcs, count),
            ReduceOp::Prod => fold::<T, ProdOp>(&dsts, &srcs, count),
            ReduceOp::Max => fold::<T, MaxOp>(&dsts, &srcs, count),
            ReduceOp::Min => fold::<T, MinOp>(&dsts, &srcs, count),
        }
    }
}

/// `dst[i] = srcs[0][i] op srcs[1][i] op ...` for `count` elements of `dtype`, for every
/// `dst` in `dsts`.
///
/// # Safety
/// Every source address is valid for reading `count` elements and every destination for
/// writing them, all aligned to the element size; a destination may equal a source but not
/// overlap one partially, and destinations do not overlap each other; nothing else writes
/// these ranges during the call. `srcs` is not empty.
pub(crate) unsafe fn reduce(
    dtype: DataType,
    op: ReduceOp,
    dsts: &[usize],
    srcs: &[usize],
    count: usize,
) {
    debug_assert!(!srcs.is_empty());
    // SAFETY: forwarded from the caller; the element type matches `dtype`.
    unsafe {
        match dtype {
            DataType::I8 => typed::<i8>(op, dsts, srcs, count),
            DataType::I16 => typed::<i16>(op, dsts, srcs, count),
            DataType::I32 => typed::<i32>(op, dsts, srcs, count),
            DataType::I64 => typed::<i64>(op, dsts, srcs, count),
            DataType::U8 => typed::<u8>(op, dsts, srcs, count),
            DataType::U16 => typed::<u16>(op, dsts, srcs, count),
            DataType::U32 => typed::<u32>(op, dsts, srcs, count),
            DataType::U64 => typed::<u64>(op, dsts, srcs, count),
            DataType::F16 => typed::<f16>(op, dsts, srcs, count),
            DataType::BF16 => typed::<bf16>(op, dsts, srcs, count),
            DataType::F32 => typed::<f32>(op, dsts, srcs, count),
            DataType::F64 => typed::<f64>(op, dsts, srcs, count),
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
        let mut copy = vec![0i8; 5000];
        let srcs = [out.as_ptr() as usize, b.as_ptr() as usize];
        let dsts = [out.as_mut_ptr() as usize, copy.as_mut_ptr() as usize];
        // SAFETY: both sources hold 5000 elements; `out` is the first source exactly.
        unsafe { reduce(DataType::I8, ReduceOp::Sum, &dsts, &srcs, 5000) };
        for i in 0..5000 {
            assert_eq!(out[i], a[i].wrapping_add(b[i]), "wraps at {i}");
        }
        assert_eq!(out, copy);
        let x = [f16::from_f32(1.0), f16::from_f32(f32::NAN)];
        let y = [f16::from_f32(2048.0), f16::from_f32(3.0)];
        let mut z = [f16::ZERO; 2];
        for (op, want) in [
            (ReduceOp::Sum, [2049.0, f32::NAN]),
            (ReduceOp::Max, [2048.0, 3.0]),
        ] {
            let srcs = [x.as_ptr() as usize, y.as_ptr() as usize];
            // SAFETY: two elements each.
            unsafe { reduce(DataType::F16, op, &[z.as_mut_ptr() as usize], &srcs, 2) };
            // fp16 spacing at 2048 is 2: 2049 rounds to even (2048) when narrowed once.
            let want0 = f16::from_f32(want[0]);
            assert_eq!(z[0], want0);
            assert_eq!(z[1].is_nan(), want[1].is_nan());
        }
    }

    #[test]
    fn large_results_are_streamed_to_any_alignment() {
        // 3 MiB of f64 to three destinations crosses the streaming threshold; an odd
        // destination offset exercises the unaligned head and tail.
        let count = 3 << 17;
        let a: Vec<f64> = (0..count).map(|i| i as f64).collect();
        let b = vec![0.5f64; count];
        let mut bytes = vec![0u8; 3 * count * 8 + 8];
        let base = bytes.as_mut_ptr() as usize;
        let dsts = [base + 8, base + 8 + count * 8, base + 8 + 2 * count * 8];
        let srcs = [a.as_ptr() as usize, b.as_ptr() as usize];
        // SAFETY: every destination has room for `count` elements and is 8-byte aligned.
        unsafe { reduce(DataType::F64, ReduceOp::Max, &dsts, &srcs, count) };
        for d in dsts {
            // SAFETY: just written.
            let got = unsafe { std::slice::from_raw_parts(d as *const f64, count) };
            assert!(
                got.iter()
                    .enumerate()
                    .all(|(i, &v)| v == (i as f64).max(0.5))
            );
        }
        let n = 5 << 19;
        let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let mut odd = vec![0u8; n * 4 + 64];
        let at = (odd.as_mut_ptr() as usize).next_multiple_of(16) + 4;
        // SAFETY: room for `n` f32s at a 4-byte (not 16-byte) aligned address.
        unsafe {
            reduce(
                DataType::F32,
                ReduceOp::Sum,
                &[at],
                &[x.as_ptr() as usize],
                n,
            )
        };
        // SAFETY: just written.
        let got = unsafe { std::slice::from_raw_parts(at as *const f32, n) };
        assert_eq!(got, &x[..]);
    }
}
