//! Shared helpers for the emulator-backed tests: a lock, device buffers, element types.

use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};

use half::{bf16, f16};
use symheap::Result;
use symheap::emu::Counters;
use symheap::runtime::{Comm, DevicePtr, Element, Mapping, ReduceOp, Window};

static EMU_LOCK: Mutex<()> = Mutex::new(());

/// Serialises the tests that use the emulator: its counters and failure injection are
/// process-global. On drop, checks that the test left no emulator resource behind.
pub struct EmuSession {
    _guard: MutexGuard<'static, ()>,
}

impl EmuSession {
    pub fn start() -> Self {
        let guard = EMU_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        symheap::emu::clear_injected_failures();
        assert_eq!(
            symheap::emu::counters().live(),
            Counters::default(),
            "a previous test leaked"
        );
        EmuSession { _guard: guard }
    }

    /// Asserts that every emulator resource has been released.
    pub fn assert_clean(&self) {
        assert_eq!(symheap::emu::counters().live(), Counters::default());
    }
}

impl Drop for EmuSession {
    fn drop(&mut self) {
        symheap::emu::clear_injected_failures();
    }
}

/// Device memory of one rank: reserved, backed, mapped, and optionally registered as a window.
pub struct DeviceBuf {
    // Field order is drop order: deregister, then unmap, then release.
    _window: Option<Window>,
    pub mapping: Arc<Mapping>,
}

impl DeviceBuf {
    pub fn new(comm: &Comm, bytes: u64, registered: bool) -> Result<Self> {
        let rt = comm.runtime();
        let granularity = rt.granularity(comm.device())?;
        let size = bytes.div_ceil(granularity).max(1) * granularity;
        let mapping = Arc::new(Mapping::allocate(rt, size, comm.device())?);
        let window = if registered {
            Some(Window::register(comm, &mapping)?)
        } else {
            None
        };
        Ok(DeviceBuf {
            _window: window,
            mapping,
        })
    }

    pub fn ptr(&self) -> DevicePtr {
        self.mapping.ptr()
    }

    pub fn write<T: Elem>(&self, comm: &Comm, at: u64, data: &[T]) -> Result<()> {
        // SAFETY: the range lies inside this buffer (callers size it) and the stream using it
        // has been synchronised.
        unsafe {
            comm.runtime()
                .copy_to_device(self.ptr().byte_add(at), T::slice_as_bytes(data))
        }
    }

    pub fn read<T: Elem>(&self, comm: &Comm, at: u64, len: usize) -> Result<Vec<T>> {
        let mut out = vec![T::from_small(0); len];
        // SAFETY: as for `write`; `out` is a valid host buffer of the right size.
        unsafe {
            comm.runtime()
                .copy_to_host(T::slice_as_bytes_mut(&mut out), self.ptr().byte_add(at))?
        };
        Ok(out)
    }
}

/// An element type of the collectives, with a host reference for each reduction.
pub trait Elem: Element + PartialEq + Debug {
    /// Maps a small integer in -2..=2 to a value (unsigned types shift it to 0..=4).
    fn from_small(v: i64) -> Self;
    fn combine(self, other: Self, op: ReduceOp) -> Self;
}

macro_rules! int_elem {
    ($($t:ty => $shift:expr;)*) => {$(
        impl Elem for $t {
            fn from_small(v: i64) -> Self { (v + $shift) as $t }
            fn combine(self, other: Self, op: ReduceOp) -> Self {
                match op {
                    ReduceOp::Sum => self.wrapping_add(other),
                    ReduceOp::Prod => self.wrapping_mul(other),
                    ReduceOp::Max => self.max(other),
                    ReduceOp::Min => self.min(other),
                }
            }
        }
    )*};
}

int_elem! {
    i8 => 0;
    i16 => 0;
    i32 => 0;
    i64 => 0;
    u8 => 2;
    u16 => 2;
    u32 => 2;
    u64 => 2;
}

macro_rules! float_elem {
    ($($t:ty => $from:expr, $to:expr;)*) => {$(
        impl Elem for $t {
            fn from_small(v: i64) -> Self { $from(v as f64) }
            fn combine(self, other: Self, op: ReduceOp) -> Self {
                let (a, b): (f64, f64) = ($to(self), $to(other));
                $from(match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Prod => a * b,
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                })
            }
        }
    )*};
}

float_elem! {
    f32 => |v: f64| v as f32, f64::from;
    f64 => |v: f64| v, |v: f64| v;
    f16 => f16::from_f64, f16::to_f64;
    bf16 => bf16::from_f64, bf16::to_f64;
}

/// Runs `$body` with `$t` bound to every element type the emulator supports.
#[macro_export]
macro_rules! for_each_elem {
    ($t:ident => $body:expr) => {{
        {
            type $t = i8;
            $body
        }
        {
            type $t = i16;
            $body
        }
        {
            type $t = i32;
            $body
        }
        {
            type $t = i64;
            $body
        }
        {
            type $t = u8;
            $body
        }
        {
            type $t = u16;
            $body
        }
        {
            type $t = u32;
            $body
        }
        {
            type $t = u64;
            $body
        }
        {
            type $t = f32;
            $body
        }
        {
            type $t = f64;
            $body
        }
        {
            type $t = half::f16;
            $body
        }
        {
            type $t = half::bf16;
            $body
        }
    }};
}

/// The test value of element `i` of rank `rank`'s input, in -2..=2 before type mapping.
pub fn value<T: Elem>(rank: u32, i: usize, salt: u64) -> T {
    let v = (u64::from(rank) * 7 + i as u64 * 3 + salt) % 5;
    T::from_small(v as i64 - 2)
}

/// Every rank's input of `len` elements.
pub fn inputs<T: Elem>(ranks: u32, len: usize, salt: u64) -> Vec<Vec<T>> {
    (0..ranks)
        .map(|r| (0..len).map(|i| value(r, i, salt)).collect())
        .collect()
}

/// The element-wise reduction of `inputs` in rank order.
pub fn reduce<T: Elem>(inputs: &[Vec<T>], op: ReduceOp) -> Vec<T> {
    let mut out = inputs[0].clone();
    for input in &inputs[1..] {
        for (o, &x) in out.iter_mut().zip(input) {
            *o = o.combine(x, op);
        }
    }
    out
}
