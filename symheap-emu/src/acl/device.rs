//! Devices: how many each node has, which one the calling thread is bound to, each device's
//! memory limit, and its per-device (per-context) settings: the float overflow mode, and
//! whether its streams stop on failure.
//!
//! Device ids are per emulated node ([`crate::acl::node`]): a [`Device`] is a node and an id
//! on it, so threads of one process playing ranks of many nodes each have their own devices.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

use crate::acl::node::{self, MAX_NODES};
use crate::base::errors::{AclResult, acl_fail, param};
use crate::ipc::os;
use crate::sys::{
    ACL_ERROR_RT_CONTEXT_NULL, ACL_ERROR_RT_INVALID_DEVICEID, aclrtFloatOverflowMode,
};

/// The most devices a node can have (the size of a node's table of device contexts).
pub(crate) const MAX_DEVICES: usize = 64;

/// One emulated device: device `id` of emulated node `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Device {
    pub(crate) node: u32,
    pub(crate) id: u32,
}

impl std::fmt::Display for Device {
    /// `device 3` on node 0 (every single-node job), `device 3 of node 2` elsewhere.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.node {
            0 => write!(f, "device {}", self.id),
            node => write!(f, "device {} of node {node}", self.id),
        }
    }
}

/// The environment variable that sets how many devices the emulator has (read once).
pub(crate) const DEVICE_COUNT_ENV: &str = "SYMHEAP_EMU_DEVICE_COUNT";

/// How many devices there are by default: an Atlas A3 server's 16 dies.
const DEFAULT_DEVICE_COUNT: u32 = 16;

/// The device count `value` of [`DEVICE_COUNT_ENV`] asks for: an integer in
/// `1..=MAX_DEVICES`; unset, empty or anything else gives the default (16), with a warning for
/// a value that is set but unusable.
fn parse_device_count(value: Option<&str>) -> u32 {
    let Some(text) = value.map(str::trim).filter(|t| !t.is_empty()) else {
        return DEFAULT_DEVICE_COUNT;
    };
    match text.parse::<u32>() {
        Ok(n) if (1..=MAX_DEVICES as u32).contains(&n) => n,
        _ => {
            tracing::warn!(
                "emulated ACL: {DEVICE_COUNT_ENV}={text:?} is not a device count in \
                 1..={MAX_DEVICES}; using {DEFAULT_DEVICE_COUNT}"
            );
            DEFAULT_DEVICE_COUNT
        }
    }
}

/// How many devices the emulator has: [`DEVICE_COUNT_ENV`], read once, or 16.
pub(crate) fn count() -> u32 {
    static COUNT: OnceLock<u32> = OnceLock::new();
    *COUNT.get_or_init(|| parse_device_count(std::env::var(DEVICE_COUNT_ENV).ok().as_deref()))
}

/// A device's context settings.
struct Context {
    /// The float overflow mode (`INFNAN`, 1, by default, as on Atlas A2 / A3). Kept only for
    /// `aclrtGetDeviceSatMode`: CANN's streams take it when created, but the emulator's
    /// reductions give IEEE results (Inf and NaN, as `INFNAN`) in both modes, so its streams
    /// need no copy.
    sat_mode: AtomicI32,
    /// Whether the context is in stop-on-failure mode (set by
    /// `aclrtSetStreamFailureMode(_, ACL_STOP_ON_FAILURE)` on any of its streams or NULL;
    /// cleared by `aclrtResetDevice`).
    stop_on_failure: AtomicBool,
}

/// The contexts of one node's devices.
type NodeContexts = [Context; MAX_DEVICES];

/// Every node's device contexts, made when a thread first names a device of the node: a job
/// of one node costs one table, and one process can hold the devices of all 4096 nodes.
static CONTEXTS: [OnceLock<Box<NodeContexts>>; MAX_NODES as usize] =
    [const { OnceLock::new() }; MAX_NODES as usize];

/// `device`'s context settings.
fn context(device: Device) -> &'static Context {
    let node = CONTEXTS[device.node as usize].get_or_init(|| {
        Box::new(std::array::from_fn(|_| Context {
            sat_mode: AtomicI32::new(aclrtFloatOverflowMode::ACL_RT_OVERFLOW_MODE_INFNAN.0),
            stop_on_failure: AtomicBool::new(false),
        }))
    });
    &node[device.id as usize]
}

/// The most physical memory an emulated device has by default: 64 GiB, as an Atlas A3 die.
const DEVICE_HBM: u64 = 64 << 30;

/// The per-device limit set by [`set_device_memory_limit`]; 0 for the default.
static LIMIT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static CURRENT: Cell<Option<Device>> = const { Cell::new(None) };
}

/// Sets the physical memory each emulated device has (by default 64 GiB, or the host's RAM if
/// that is less; 0 restores the default). `aclrtMallocPhysical` and `aclrtMalloc` fail with
/// `ACL_ERROR_RT_MEMORY_ALLOCATION` beyond it and `aclrtGetMemInfo` reports it. Whatever the
/// limit, all devices together never get more than the host's RAM (see the
/// [emulator's choices](crate)).
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

/// Checks a device id of the calling thread's node: `0..count()`; the device it names.
///
/// # Errors
/// `ACL_ERROR_RT_INVALID_DEVICEID` for an id out of range; `ACL_ERROR_INVALID_PARAM` when
/// `SYMHEAP_EMU_NODE` is set to something that is not a node.
pub(crate) fn check_id(id: i32) -> AclResult<Device> {
    let n = count();
    match u32::try_from(id) {
        Ok(id) if id < n => Ok(Device {
            node: node::current_node()?,
            id,
        }),
        _ => acl_fail(
            ACL_ERROR_RT_INVALID_DEVICEID,
            format!(
                "device id {id} is not in 0..{n} (the emulator has {n} devices per node; \
                 {DEVICE_COUNT_ENV} sets how many, {} which node a process is on)",
                node::NODE_ENV
            ),
        ),
    }
}

/// `aclrtSetDevice`: binds the calling thread to device `id` of its node.
pub(crate) fn set(id: i32) -> AclResult {
    let device = check_id(id)?;
    CURRENT.with(|c| c.set(Some(device)));
    Ok(())
}

/// `aclrtResetDevice`: releases the thread's binding if it is to device `id` (of its node),
/// and ends the device's context settings: its stop-on-failure mode and overflow mode return
/// to the defaults.
pub(crate) fn reset(id: i32) -> AclResult {
    let device = check_id(id)?;
    CURRENT.with(|c| {
        if c.get() == Some(device) {
            c.set(None);
        }
    });
    let context = context(device);
    context.stop_on_failure.store(false, Ordering::Relaxed);
    context.sat_mode.store(
        aclrtFloatOverflowMode::ACL_RT_OVERFLOW_MODE_INFNAN.0,
        Ordering::Relaxed,
    );
    Ok(())
}

/// `aclrtSetDeviceSatMode`: the current device's overflow mode (for streams created from now
/// on, in CANN); only `SATURATION` (0) and `INFNAN` (1) are modes.
pub(crate) fn set_sat_mode(mode: aclrtFloatOverflowMode) -> AclResult {
    let id = current()?;
    if !matches!(
        mode,
        aclrtFloatOverflowMode::ACL_RT_OVERFLOW_MODE_SATURATION
            | aclrtFloatOverflowMode::ACL_RT_OVERFLOW_MODE_INFNAN
    ) {
        return param(format!(
            "overflow mode {} is not ACL_RT_OVERFLOW_MODE_SATURATION (0) or \
             ACL_RT_OVERFLOW_MODE_INFNAN (1)",
            mode.0
        ));
    }
    context(id).sat_mode.store(mode.0, Ordering::Relaxed);
    Ok(())
}

/// The overflow mode of `device` (`aclrtGetDeviceSatMode`).
pub(crate) fn sat_mode(device: Device) -> aclrtFloatOverflowMode {
    aclrtFloatOverflowMode(context(device).sat_mode.load(Ordering::Relaxed))
}

/// Puts `device`'s context in stop-on-failure mode: every stream of it stops at its first
/// failed task.
pub(crate) fn set_stop_on_failure(device: Device) {
    context(device)
        .stop_on_failure
        .store(true, Ordering::Relaxed);
}

/// Whether `device`'s context is in stop-on-failure mode.
pub(crate) fn stops_on_failure(device: Device) -> bool {
    context(device).stop_on_failure.load(Ordering::Relaxed)
}

/// The calling thread's device, or the error `aclrtGetDevice` gives without one.
pub(crate) fn current() -> AclResult<Device> {
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
    use crate::sys::{
        ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_CONTEXT_NULL, ACL_ERROR_RT_INVALID_DEVICEID,
        ACL_ERROR_RT_PARAM_INVALID,
    };
    use crate::testutil::{acl, ok, recent};
    use crate::{abi::inject::inject_failure, test_lock};

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
                ACL_ERROR_INVALID_PARAM
            );
            std::thread::spawn(move || {
                let mut other = -1;
                assert_eq!((a.aclrtGetDevice)(&mut other), ACL_ERROR_RT_CONTEXT_NULL);
            })
            .join()
            .unwrap();
            ok((a.aclrtResetDevice)(5));
            assert_eq!((a.aclrtGetDevice)(&mut id), ACL_ERROR_RT_CONTEXT_NULL);

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

    #[test]
    fn the_device_count_comes_from_the_environment_or_is_16() {
        use super::parse_device_count as parse;
        assert_eq!(parse(None), 16);
        assert_eq!(parse(Some("")), 16);
        assert_eq!(parse(Some(" 8 ")), 8);
        assert_eq!(parse(Some("1")), 1);
        assert_eq!(parse(Some("64")), 64);
        for bad in ["0", "65", "-3", "x", "8.5"] {
            assert_eq!(parse(Some(bad)), 16, "{bad}");
        }
    }

    #[test]
    fn device_count_ids_and_soc_name() {
        let _g = test_lock();
        let a = acl();
        let n = super::count();
        let mut got = 0u32;
        // SAFETY: valid out-pointers, or null where the emulator must refuse.
        unsafe {
            ok(a.aclrtGetDeviceCount.unwrap()(&mut got));
            assert_eq!(got, n);
            assert_eq!(
                a.aclrtGetDeviceCount.unwrap()(std::ptr::null_mut()),
                ACL_ERROR_INVALID_PARAM
            );
            assert_eq!((a.aclrtSetDevice)(n as i32), ACL_ERROR_RT_INVALID_DEVICEID);
            assert!(recent().contains("SYMHEAP_EMU_DEVICE_COUNT"));
            ok((a.aclrtSetDevice)(n as i32 - 1));
            ok((a.aclrtResetDevice)(n as i32 - 1));
            assert_eq!(
                (a.aclrtResetDevice)(n as i32),
                ACL_ERROR_RT_INVALID_DEVICEID
            );
            let soc = a.aclrtGetSocName.unwrap()();
            assert!(!soc.is_null());
            let name = std::ffi::CStr::from_ptr(soc).to_str().unwrap();
            assert_eq!(name, "Ascend910_9391");
            // CANN's own test for an Atlas A3.
            assert!(name.starts_with("Ascend910_93"));
            assert_eq!(a.aclrtGetSocName.unwrap()(), soc, "a static string");
        }
    }

    #[test]
    fn saturation_mode_is_per_device_until_reset() {
        use crate::sys::aclrtFloatOverflowMode as Mode;
        let _g = test_lock();
        let a = acl();
        let (set, get) = (
            a.aclrtSetDeviceSatMode.unwrap(),
            a.aclrtGetDeviceSatMode.unwrap(),
        );
        let mut mode = Mode(-1);
        // SAFETY: valid out-pointers, or null where the emulator must refuse.
        unsafe {
            assert_eq!(
                set(Mode::ACL_RT_OVERFLOW_MODE_SATURATION),
                ACL_ERROR_RT_CONTEXT_NULL
            );
            assert_eq!(get(&mut mode), ACL_ERROR_RT_CONTEXT_NULL);
            ok((a.aclrtSetDevice)(14));
            ok(get(&mut mode));
            assert_eq!(
                mode,
                Mode::ACL_RT_OVERFLOW_MODE_INFNAN,
                "the A2 / A3 default"
            );
            assert_eq!(get(std::ptr::null_mut()), ACL_ERROR_INVALID_PARAM);
            ok(set(Mode::ACL_RT_OVERFLOW_MODE_SATURATION));
            for bad in [Mode::ACL_RT_OVERFLOW_MODE_UNDEF, Mode(-1)] {
                assert_eq!(set(bad), ACL_ERROR_RT_PARAM_INVALID);
            }
            ok(get(&mut mode));
            assert_eq!(
                mode,
                Mode::ACL_RT_OVERFLOW_MODE_SATURATION,
                "bad values change nothing"
            );
            // Another device keeps its own mode, and this thread's binding does not change it.
            ok((a.aclrtSetDevice)(13));
            ok(get(&mut mode));
            assert_eq!(mode, Mode::ACL_RT_OVERFLOW_MODE_INFNAN);
            assert_eq!(
                super::sat_mode(super::Device { node: 0, id: 14 }),
                Mode::ACL_RT_OVERFLOW_MODE_SATURATION
            );
            ok((a.aclrtResetDevice)(13));
            // Resetting the device ends its context: the default again.
            ok((a.aclrtResetDevice)(14));
            ok((a.aclrtSetDevice)(14));
            ok(get(&mut mode));
            assert_eq!(mode, Mode::ACL_RT_OVERFLOW_MODE_INFNAN);
            ok((a.aclrtResetDevice)(14));
        }
    }
}
