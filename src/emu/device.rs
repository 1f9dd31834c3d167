//! Devices: which device the calling thread is bound to, and each device's memory limit.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::errors::{AclResult, acl_fail};
use crate::sys::{ACL_ERROR_RT_CONTEXT_NULL, ACL_ERROR_RT_INVALID_DEVICEID};

/// Devices `0..MAX_DEVICES` exist.
pub(crate) const MAX_DEVICES: usize = 64;

/// The default per-device physical memory: 64 GiB.
pub(crate) const DEFAULT_LIMIT: u64 = 64 << 30;

static LIMIT: AtomicU64 = AtomicU64::new(DEFAULT_LIMIT);

thread_local! {
    static CURRENT: Cell<Option<u32>> = const { Cell::new(None) };
}

/// Sets the physical memory each emulated device has (default 64 GiB). `aclrtMallocPhysical`
/// fails with `ACL_ERROR_RT_MEMORY_ALLOCATION` beyond it and `aclrtGetMemInfo` reports it.
/// Memfd pages are allocated lazily, so this is accounting, not a host reservation.
///
/// A test hook (process-global): tests use it to run the out-of-memory paths above.
pub fn set_device_memory_limit(bytes: u64) {
    LIMIT.store(bytes, Ordering::Relaxed);
}

/// The per-device physical memory limit.
pub(crate) fn memory_limit() -> u64 {
    LIMIT.load(Ordering::Relaxed)
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
