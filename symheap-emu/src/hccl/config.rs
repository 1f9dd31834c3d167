//! HCCL's process-wide configuration: `HcclSetConfig` / `HcclGetConfig`.
//!
//! CANN documents one setting, `HCCL_DETERMINISTIC` (hicann/hcomm
//! `docs/zh/api_ref/comm_mgr_c/HcclSetConfig.md`, `HcclGetConfig.md`,
//! `data_type_definition/HcclConfig.md`): 0 non-deterministic (the default), 1 deterministic,
//! 2 strict (order-preserving reductions, Atlas A2 only). The value is the process's, shared
//! by every communicator and thread, as HCCL keeps it (`g_externalInput.hcclDeterministic`,
//! `src/legacy/ascend910/platform/common/externalinput.cc`), and behaves as HCCL's
//! `HcclSetConfig` / `HcclGetConfig` in `src/legacy/ascend910/framework/op_base/src/op_base.cc`:
//! - the `HCCL_DETERMINISTIC` environment variable (`false`, `true` or `strict`, any case) wins:
//!   while it is set, `HcclSetConfig` succeeds and changes nothing, and `HcclGetConfig` answers
//!   the variable's value;
//! - otherwise `HcclSetConfig` takes 0 or 1; 2 is `HCCL_E_NOT_SUPPORT` (the emulated device is
//!   an A3) and any other value `HCCL_E_PARA`;
//! - a config other than `HCCL_DETERMINISTIC` is ignored by both calls, which succeed (HCCL's
//!   code has no branch for it); `HcclGetConfig` then leaves `configValue` as it was.
//!
//! The emulator's reductions fold in rank order whatever the setting, so they are always
//! deterministic (strictly so): the value is kept and answered, and changes no result.

use std::sync::atomic::{AtomicI32, Ordering};

use crate::sys::{HcclConfig, HcclResult};

use crate::base::errors::{HcclRes, hccl_fail, para};

/// The environment variable that wins over `HcclSetConfig`.
pub(crate) const DETERMINISTIC_ENV: &str = "HCCL_DETERMINISTIC";

/// `HCCL_DETERMINISTIC` as `HcclSetConfig` last set it (0 until then).
static DETERMINISTIC: AtomicI32 = AtomicI32::new(0);

/// The value `HCCL_DETERMINISTIC` (the variable) gives, if it is set: `None` when unset.
/// A value HCCL does not accept (it fails communicator init with `HCCL_E_PARA`) counts as
/// unset here.
fn from_env(var: Option<&str>) -> Option<i32> {
    match var?.to_ascii_uppercase().as_str() {
        "FALSE" => Some(0),
        "TRUE" => Some(1),
        "STRICT" => Some(2),
        _ => None,
    }
}

fn env() -> Option<String> {
    std::env::var(DETERMINISTIC_ENV).ok()
}

/// `HcclSetConfig(config, value)`.
pub(crate) fn set(config: HcclConfig, value: i32) -> HcclRes {
    set_with(config, value, env().as_deref())
}

/// [`set`], with the environment variable's value given.
fn set_with(config: HcclConfig, value: i32, var: Option<&str>) -> HcclRes {
    if config != HcclConfig::HCCL_DETERMINISTIC {
        return Ok(());
    }
    if var.is_some() {
        // HCCL: "HCCL_DETERMINISTIC has been set by Env, so will not be reset again".
        return Ok(());
    }
    match value {
        0 | 1 => {
            DETERMINISTIC.store(value, Ordering::Relaxed);
            Ok(())
        }
        2 => hccl_fail(
            HcclResult::HCCL_E_NOT_SUPPORT,
            "HCCL_DETERMINISTIC 2 (strict, order-preserving reductions) is supported on Atlas A2 \
             only, and the emulated device is an Atlas A3",
        ),
        _ => para(format!(
            "HCCL_DETERMINISTIC is only support 0, 1 or 2, not {value}"
        )),
    }
}

/// `HcclGetConfig(config)`: the value, or `None` for a config it leaves unanswered.
pub(crate) fn get(config: HcclConfig) -> Option<i32> {
    get_with(config, env().as_deref())
}

/// [`get`], with the environment variable's value given.
fn get_with(config: HcclConfig, var: Option<&str>) -> Option<i32> {
    if config != HcclConfig::HCCL_DETERMINISTIC {
        return None;
    }
    Some(from_env(var).unwrap_or_else(|| DETERMINISTIC.load(Ordering::Relaxed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_is_set_and_read_unless_the_variable_wins() {
        let _guard = crate::test_lock();
        let det = HcclConfig::HCCL_DETERMINISTIC;
        set_with(det, 0, None).unwrap();
        assert_eq!(get_with(det, None), Some(0));
        set_with(det, 1, None).unwrap();
        assert_eq!(get_with(det, None), Some(1));
        let code = |r: HcclRes| r.unwrap_err().code;
        assert_eq!(code(set_with(det, 2, None)), HcclResult::HCCL_E_NOT_SUPPORT);
        assert_eq!(code(set_with(det, 3, None)), HcclResult::HCCL_E_PARA);
        assert_eq!(code(set_with(det, -1, None)), HcclResult::HCCL_E_PARA);
        assert_eq!(
            get_with(det, None),
            Some(1),
            "a refused value changes nothing"
        );
        // The variable wins, in any case, and a set under it is a successful no-op.
        assert_eq!(get_with(det, Some("strict")), Some(2));
        assert_eq!(get_with(det, Some("False")), Some(0));
        set_with(det, 0, Some("TRUE")).unwrap();
        assert_eq!(get_with(det, None), Some(1));
        // Other configs are ignored by both calls.
        let other = HcclConfig::HCCL_CONFIG_RESERVED;
        set_with(other, 7, None).unwrap();
        assert_eq!(get_with(other, None), None);
        set_with(det, 0, None).unwrap();
    }
}
