//! The profiling API of `libmsprofiler.so` (`acl/acl_prof.h`), with nothing to profile: the
//! emulator has no device timeline, so a profiling run collects no data. The calls keep
//! msprofiler's state machine and checks, so a program sees the codes CANN gives
//! (`aclprofInit` twice is `ACL_ERROR_REPEAT_INITIALIZE`, `aclprofStop` without a start
//! `ACL_ERROR_PROF_NOT_RUN`, a bad configuration NULL), and nothing is written to the result
//! path. The checks follow hicann/runtime's `src/dfx/msprof/collector/dvvp/msprofiler/
//! prof_acl_api.cpp` and `msprof/engine/src/prof_acl_mgr.cpp` (see the emulator's docs).
//!
//! The state is a few atomics, taken with no lock: no profiling call waits for anything.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crate::acl::device;
use crate::base::errors::{AclResult, acl_fail, invalid};
use crate::base::registry::{HandleKind, new_raw};
use crate::sys::{
    ACL_ERROR_INVALID_FILE, ACL_ERROR_PROF_ALREADY_RUN, ACL_ERROR_PROF_NOT_RUN,
    ACL_ERROR_REPEAT_INITIALIZE, aclprofConfigType,
};

/// The most device ids a configuration lists (msprofiler's `PROF_MAX_DEV_NUM` bound is
/// larger than any device count; the emulator's own bound is its most devices).
pub(crate) const MAX_DEVICE_IDS: usize = device::MAX_DEVICES;

/// The longest result path `aclprofInit` takes, in bytes (Linux's `PATH_MAX`).
const MAX_PATH_LEN: usize = 4096;

/// `ACL_PROF_MSPROFTX`: the one data type a configuration without devices may ask for.
const ACL_PROF_MSPROFTX: u64 = 0x0080;

/// The `aclprofConfigType` values `aclprofSetConfig` takes: above `ACL_PROF_ARGS_MIN` (0),
/// below `ACL_PROF_ARGS_MAX` (17).
const CONFIG_TYPES: std::ops::RangeInclusive<aclprofConfigType> = 1..=16;

/// How many configurations may be alive at once. msprofiler allocates them without a bound;
/// a program makes one per profiling run, so a fixed table is plenty, and a full one is
/// reported as CANN reports a failed allocation (NULL).
const MAX_CONFIGS: usize = 256;

/// Profiling is off: neither initialized nor running.
const OFF: u8 = 0;
/// `aclprofInit` succeeded; nothing runs.
const INITIALIZED: u8 = 1;
/// `aclprofStart` succeeded (collecting nothing).
const RUNNING: u8 = 2;

/// Where the process's profiling is: [`OFF`], [`INITIALIZED`] or [`RUNNING`].
static STATE: AtomicU8 = AtomicU8::new(OFF);

/// The live configurations' handles (0: a free slot).
static CONFIGS: [AtomicUsize; MAX_CONFIGS] = [const { AtomicUsize::new(0) }; MAX_CONFIGS];

/// `aclprofInit`: profiling initialized with the result path `path` (`length` bytes), which
/// must be given; nothing is created there, as no data is ever collected.
///
/// # Safety
/// `path` is null or valid for reading `length` bytes.
pub(crate) unsafe fn init(path: *const u8, length: usize) -> AclResult {
    if path.is_null() {
        return invalid("profilerResultPath is NULL");
    }
    if length == 0 || length > MAX_PATH_LEN {
        return invalid(format!(
            "length {length} is not a path length in 1..={MAX_PATH_LEN}"
        ));
    }
    // SAFETY: non-null, and readable for `length` bytes by the caller's contract.
    let bytes = unsafe { std::slice::from_raw_parts(path, length) };
    let text = bytes.split(|&b| b == 0).next().unwrap_or_default();
    if text.iter().all(u8::is_ascii_whitespace) {
        return acl_fail(ACL_ERROR_INVALID_FILE, "the profiling result path is empty");
    }
    STATE
        .compare_exchange(OFF, INITIALIZED, Ordering::AcqRel, Ordering::Acquire)
        .map(drop)
        .or_else(|_| {
            acl_fail(
                ACL_ERROR_REPEAT_INITIALIZE,
                "profiling is already initialized",
            )
        })
}

/// `aclprofFinalize`: profiling off again (a run in progress ends with it).
pub(crate) fn finalize() -> AclResult {
    if STATE.swap(OFF, Ordering::AcqRel) == OFF {
        return acl_fail(ACL_ERROR_PROF_NOT_RUN, "profiling was not initialized");
    }
    Ok(())
}

/// `aclprofCreateConfig`'s checks and a new configuration: `devices` distinct ids of this
/// process's devices (at least one unless only `ACL_PROF_MSPROFTX` data is asked for), and no
/// AI Core events (CANN requires NULL). The handle is never a dereferenceable address.
pub(crate) fn create_config(
    devices: &[u32],
    events_given: bool,
    data_types: u64,
) -> AclResult<usize> {
    if events_given {
        return invalid("aicoreEvents must be NULL");
    }
    let count = device::count();
    if devices.len() > count as usize {
        return invalid(format!(
            "deviceNums {} is more than the {count} devices",
            devices.len()
        ));
    }
    for (i, &id) in devices.iter().enumerate() {
        if id >= count {
            return invalid(format!("device id {id} is not in 0..{count}"));
        }
        if devices[..i].contains(&id) {
            return invalid(format!("device id {id} is listed twice"));
        }
    }
    if devices.is_empty() && data_types & ACL_PROF_MSPROFTX == 0 {
        return invalid("deviceNums is 0 and ACL_PROF_MSPROFTX is not asked for");
    }
    let handle = new_raw(HandleKind::ProfConfig);
    CONFIGS
        .iter()
        .find(|slot| {
            slot.compare_exchange(0, handle, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
        .map(|_| handle)
        .map_or_else(
            || {
                invalid(format!(
                    "more than {MAX_CONFIGS} profiling configurations are alive"
                ))
            },
            Ok,
        )
}

/// Fails with `ACL_ERROR_INVALID_PARAM` unless `config` is a live configuration.
fn check_config(config: usize) -> AclResult {
    if config == 0 {
        return invalid("profilerConfig is NULL");
    }
    if !CONFIGS
        .iter()
        .any(|slot| slot.load(Ordering::Acquire) == config)
    {
        return invalid(format!(
            "profilerConfig {config:#x} is not a live profiling configuration"
        ));
    }
    Ok(())
}

/// `aclprofDestroyConfig`: forgets a live configuration.
pub(crate) fn destroy_config(config: usize) -> AclResult {
    check_config(config)?;
    let freed = CONFIGS.iter().any(|slot| {
        slot.compare_exchange(config, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    });
    if !freed {
        // Destroyed by another thread between the check and here.
        return invalid(format!(
            "profilerConfig {config:#x} is not a live profiling configuration"
        ));
    }
    Ok(())
}

/// `aclprofStart`: a profiling run with `config` (collecting nothing). As msprofiler does, a
/// start without `aclprofInit` initializes profiling first.
pub(crate) fn start(config: usize) -> AclResult {
    check_config(config)?;
    if STATE.swap(RUNNING, Ordering::AcqRel) == RUNNING {
        return acl_fail(ACL_ERROR_PROF_ALREADY_RUN, "profiling is already running");
    }
    Ok(())
}

/// `aclprofStop`: ends the profiling run.
pub(crate) fn stop(config: usize) -> AclResult {
    check_config(config)?;
    STATE
        .compare_exchange(RUNNING, INITIALIZED, Ordering::AcqRel, Ordering::Acquire)
        .map(drop)
        .or_else(|_| acl_fail(ACL_ERROR_PROF_NOT_RUN, "profiling is not running"))
}

/// `aclprofSetConfig`: a known setting with a value (accepted, and without effect: nothing is
/// collected).
pub(crate) fn set_config(
    kind: aclprofConfigType,
    value: Option<ConfigLength>,
    length: usize,
) -> AclResult {
    if !CONFIG_TYPES.contains(&kind) {
        return invalid(format!(
            "configType {kind} is not in {}..={}",
            CONFIG_TYPES.start(),
            CONFIG_TYPES.end()
        ));
    }
    let Some(value) = value else {
        return invalid("config is NULL");
    };
    match value {
        ConfigLength::Is(n) if length != 0 && n == length => Ok(()),
        ConfigLength::Is(n) => invalid(format!(
            "configLength {length} is not the length of config ({n})"
        )),
        ConfigLength::Longer => invalid(format!(
            "configLength {length} is not the length of config (no NUL in its first {} bytes)",
            length.saturating_add(1)
        )),
    }
}

/// What `aclprofSetConfig` found of its `config` string, read no further than `configLength`
/// and its NUL.
pub(crate) enum ConfigLength {
    /// The string's length: a NUL at this index, at most `configLength`.
    Is(usize),
    /// No NUL in the first `configLength + 1` bytes: the string is longer than it says.
    Longer,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::ACL_ERROR_INVALID_PARAM;

    fn code(r: AclResult) -> i32 {
        r.err().map_or(0, |f| f.code)
    }

    #[test]
    fn configurations_are_checked_as_msprofiler_checks_them() {
        assert_eq!(
            code(create_config(&[0, 0], false, 1).map(drop)),
            ACL_ERROR_INVALID_PARAM
        );
        assert_eq!(
            code(create_config(&[0], true, 1).map(drop)),
            ACL_ERROR_INVALID_PARAM
        );
        assert_eq!(
            code(create_config(&[], false, 1).map(drop)),
            ACL_ERROR_INVALID_PARAM
        );
        let tx_only = create_config(&[], false, ACL_PROF_MSPROFTX).unwrap();
        assert_eq!(code(destroy_config(tx_only)), 0);
        assert_eq!(code(destroy_config(tx_only)), ACL_ERROR_INVALID_PARAM);
    }
}
