#![doc = include_str!("../docs/emulator.md")]
#![allow(non_camel_case_types)]

// The wings, in the order their imports run (see "Where things live" above).
mod abi;
mod acl;
mod base;
mod hccl;
mod ipc;
pub mod testing;
#[cfg(test)]
mod testutil;
pub mod topology;

// The C types, as `crate::sys::..` throughout.
use symheap_sys as sys;

pub use abi::exports::{acl_api, hccl_api};

/// The allocation granularity of device memory (2 MiB), for both granularity options.
pub const GRANULARITY: usize = 2 << 20;

/// Serialises the unit tests that depend on process-global emulator state (counters,
/// injected failures), and resets that state on acquisition (no injected failure pending, the
/// default device memory limit), so a test that failed half-way does not leak into the next.
#[cfg(test)]
pub(crate) fn test_lock() -> base::lock::RankedGuard<'static, ()> {
    static LOCK: base::lock::RankedMutex<()> =
        base::lock::RankedMutex::new(base::lock::ranks::TESTS, ());
    let guard = base::lock::lock(&LOCK);
    testing::clear_injected_failures();
    testing::set_device_memory_limit(0);
    guard
}
