//! Shared helpers for the emulator-backed tests: a lock, device buffers, element types.

use std::fmt::Debug;
use std::sync::{Mutex, MutexGuard};

use half::{bf16, f16};
use symheap::Result;
use symheap::raw::{DevicePtr, Mapping, Window};
use symheap::{Comm, Element};

static EMU_LOCK: Mutex<()> = Mutex::new(());

/// Serialises the tests that use the emulator: its counters and failure injection are
/// process-global. Checks at the start that no earlier test left anything behind.
pub struct EmuSession {
    _guard: MutexGuard<'static, ()>,
}

impl EmuSession {
    pub fn start() -> Self {
        let guard = EMU_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        symheap::emu::testing::clear_injected_failures();
        if let Err(left) = symheap::emu::testing::check_released() {
            panic!("a previous test leaked: {left}");
        }
        EmuSession { _guard: guard }
    }

    /// Asserts that every emulator resource has been released: objects, stream threads and
    /// memfds.
    #[track_caller]
    pub fn assert_clean(&self) {
        if let Err(left) = symheap::emu::testing::check_released() {
            panic!("{left}");
        }
    }
}

impl Drop for EmuSession {
    fn drop(&mut self) {
        symheap::emu::testing::clear_injected_failures();
    }
}

/// Device memory of one rank, registered as a window or not.
pub enum DeviceBuf {
    Registered(Window),
    Plain(Mapping),
}

impl DeviceBuf {
    /// At least `bytes` (rounded up to the granularity) on the communicator's device.
    pub fn new(comm: &Comm, bytes: u64, registered: bool) -> Result<Self> {
        if registered {
            return Window::allocate(comm, bytes).map(DeviceBuf::Registered);
        }
        let rt = comm.runtime();
        let size = rt.round_to_granularity(bytes, comm.device())?;
        Mapping::allocate(rt, size, comm.device()).map(DeviceBuf::Plain)
    }

    pub fn ptr(&self) -> DevicePtr {
        match self {
            DeviceBuf::Registered(window) => window.ptr(),
            DeviceBuf::Plain(mapping) => mapping.ptr(),
        }
    }

    pub fn write<T: Element>(&self, comm: &Comm, at: u64, data: &[T]) -> Result<()> {
        // SAFETY: the range lies inside this buffer (callers size it) and the stream using it
        // has been synchronised.
        unsafe {
            comm.runtime()
                .raw()
                .copy_to_device(self.ptr().byte_add(at), T::slice_as_bytes(data))
        }
    }

    pub fn read<T: Elem>(&self, comm: &Comm, at: u64, len: usize) -> Result<Vec<T>> {
        let mut out = vec![T::from_i64(0); len];
        // SAFETY: as for `write`; `out` is a valid host buffer of the right size.
        unsafe {
            comm.runtime()
                .raw()
                .copy_to_host(T::slice_as_bytes_mut(&mut out), self.ptr().byte_add(at))?
        };
        Ok(out)
    }
}

/// An element type with exact small integers, to write test inputs and expected results.
pub trait Elem: Element + PartialEq + Debug {
    /// `v` in this type (exact for the small values the tests use).
    fn from_i64(v: i64) -> Self;
}

macro_rules! elem {
    ($($t:ty => $from:expr;)*) => {$(
        impl Elem for $t {
            fn from_i64(v: i64) -> Self { $from(v) }
        }
    )*};
}

elem! {
    i8 => |v| v as i8;
    i16 => |v| v as i16;
    i32 => |v| v as i32;
    i64 => |v| v;
    u8 => |v| v as u8;
    u16 => |v| v as u16;
    u32 => |v| v as u32;
    u64 => |v| v as u64;
    f32 => |v| v as f32;
    f64 => |v| v as f64;
    f16 => |v| f16::from_f64(v as f64);
    bf16 => |v| bf16::from_f64(v as f64);
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
