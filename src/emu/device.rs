//! Devices: which device the calling thread is bound to, and each device's memory limit.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use super::errors::{AclResult, acl_fail};
use super::os;
use crate::sys::{ACL_ERROR_RT_CONTEXT_NULL, ACL_ERROR_RT_INVALID_DEVICEID};

/// Devices `0..MAX_DEVICES` exist.
pub(crate) const MAX_DEVICES: usize = 64;

/// The most physical memory an emulated device has by default: 64 GiB, as an Atlas A3 die.
const DEVICE_HBM: u64 = 64 << 30;

/// The per-device limit set by [`set_device_memory_limit`]; 0 for the default.
static LIMIT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static CURRENT: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Sets the physical memory each emulated device has (by default 64 GiB, or the host's RAM if
/// that is less; 0 restores the default). `aclrtMallocPhysical` fails with
/// `ACL_ERROR_RT_MEMORY_ALLOCATION` beyond it and `aclrtGetMemInfo` reports it. Whatever the
/// limit, all devices together never get more than the host's RAM (see the
/// [emulator's choices](crate::emu)).
///
/// A test hook (process-global): tests use it to run the out-of-memory paths above.
pub fn set_device_memory_limit(bytes: u64) {
    LIMIT.store(bytes, Ordering::Relaxed);
}

/// The per-device physical memory limit.
pub(crate) fn memory_limit() -> u64 {
    match LIMIT.load(Ordering::Relaxed) {
        0 => DEVICE_HBM.min(host_ram()),
        set => set,
    }
}

/// The host's RAM in bytes (`MemTotal`), read once; 64 GiB if `/proc/meminfo` says nothing.
pub(crate) fn host_ram() -> u64 {
    static RAM: OnceLock<u64> = OnceLock::new();
    *RAM.get_or_init(|| os::meminfo("MemTotal").unwrap_or(DEVICE_HBM))
}

/// Checks a device id.
pub(crate) fn check_id(id: i32) -> AclResult<u32> {
    match u32::try_from(id) {
        Ok(id) if (id as usize) < MAX_DEVICES => Ok(id),
        _ => acl_fail(
            ACL_ERROR_RT_INVALID_DEVICEID,
            format!("device id {id} is not in 0..{MAX_DEVICES}"),
        ),
    }
}

/// `aclrtSetDevice`: binds the calling thread to device `id`.
pub(crate) fn set(id: i32) -> AclResult {
    let id = check_id(id)?;
    CURRENT.with(|c| c.set(Some(id)));
    Ok(())
}

/// `aclrtResetDevice`: releases the thread's binding if it is to device `id`.
pub(crate) fn reset(id: i32) -> AclResult {
    let id = check_id(id)?;
    CURRENT.with(|c| {
        if c.get() == Some(id) {
            c.set(None);
        }
    });
    Ok(())
}

/// The calling thread's device, or the error `aclrtGetDevice` gives without one.
pub(crate) fn current() -> AclResult<u32> {
    match CURRENT.with(Cell::get) {
        Some(id) => Ok(id),
        None => acl_fail(
            ACL_ERROR_RT_CONTEXT_NULL,
            "no current device on this thread: call aclrtSetDevice first",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{acl, ok, recent};
    use super::super::{inject_failure, test_lock};
    use crate::sys::{
        ACL_ERROR_RT_CONTEXT_NULL, ACL_ERROR_RT_INVALID_DEVICEID, ACL_ERROR_RT_PARAM_INVALID,
    };

    #[test]
    fn devices_bind_the_calling_thread() {
        let _g = test_lock();
        let a = acl();
        let mut id = -1;
        // SAFETY: valid out-pointers, or null where the emulator must refuse.
        unsafe {
            assert_eq!((a.aclrtGetDevice)(&mut id), ACL_ERROR_RT_CONTEXT_NULL);
            assert!(recent().contains("aclrtSetDevice"));
            assert_eq!((a.aclrtSetDevice)(64), ACL_ERROR_RT_INVALID_DEVICEID);
            assert_eq!((a.aclrtSetDevice)(-1), ACL_ERROR_RT_INVALID_DEVICEID);
            ok((a.aclrtSetDevice)(5));
            ok((a.aclrtGetDevice)(&mut id));
            assert_eq!(id, 5);
            assert_eq!(
                (a.aclrtGetDevice)(std::ptr::null_mut()),
                ACL_ERROR_RT_PARAM_INVALID
            );
            std::thread::spawn(move || {
                let mut other = -1;
                assert_eq!((a.aclrtGetDevice)(&mut other), ACL_ERROR_RT_CONTEXT_NULL);
            })
            .join()
            .unwrap();
            ok((a.aclrtResetDevice)(5));
            assert_eq!((a.aclrtGetDevice)(&mut id), ACL_ERROR_RT_CONTEXT_NULL);
            ok((a.aclInit)(std::ptr::null()));
            ok((a.aclInit)(std::ptr::null()));
            ok((a.aclFinalize)());

            inject_failure("aclrtSetDevice", 2, ACL_ERROR_RT_INVALID_DEVICEID);
            ok((a.aclrtSetDevice)(1));
            assert_eq!((a.aclrtSetDevice)(2), ACL_ERROR_RT_INVALID_DEVICEID);
            assert!(recent().contains("injected"));
            ok((a.aclrtGetDevice)(&mut id));
            assert_eq!(id, 1, "the injected failure changed nothing");
            ok((a.aclrtSetDevice)(2));
            ok((a.aclrtResetDevice)(2));
        }
    }
}
