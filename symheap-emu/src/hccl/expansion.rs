//! Which engine expands a communicator's collectives, and so whether they may use windows:
//! HCCL takes the symmetric path only in AI CPU expansion (hicann/hcomm
//! `hccl_communicator_host.cc`, `IsSupportSymmetricMemory`: `aicpuUnfoldMode`).
//!
//! The mode comes from the config's `hcclOpExpansionMode` when it is 1 to 4, else from the
//! `HCCL_OP_EXPANSION_MODE` variable (hicann/hcomm `comm_config.cc`,
//! `SetConfigOpExpansionMode`; `externalinput.cc`, `ParseOpExpansion`), as on an A3
//! (910_93), where AI CPU expansion is the default. The AIV modes run HCCL's AIV kernels,
//! which select their own algorithms and do not read windows: the emulator treats them as
//! never symmetric.

use crate::base::errors::{HcclRes, para};

/// The variable HCCL reads when the config leaves the mode to it.
const ENV: &str = "HCCL_OP_EXPANSION_MODE";

/// How collectives are expanded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expansion {
    /// On the AI CPU (the A3 default): windows are used.
    AiCpu,
    /// On the host: never symmetric.
    Host,
    /// By AIV kernels (modes 3 and 4, `AIV`): never symmetric.
    Aiv,
}

/// The expansion of a communicator whose config says `mode`, with the variable as this
/// process has it.
///
/// # Errors
/// `HCCL_E_PARA` for a variable HCCL does not accept (init fails, as `ParseOpExpansion`
/// makes it).
pub(crate) fn of(mode: u32) -> HcclRes<Expansion> {
    resolve(mode, std::env::var(ENV).ok().as_deref())
}

/// [`of`], with the variable's value given.
fn resolve(mode: u32, var: Option<&str>) -> HcclRes<Expansion> {
    let from_env = match var {
        None | Some("") | Some("AI_CPU") | Some("AICPU_CacheDisable") => Expansion::AiCpu,
        // 910B only; an A3 keeps its default (with a warning).
        Some("HOST_TS") => Expansion::AiCpu,
        Some("HOST") => Expansion::Host,
        Some("AIV") => Expansion::Aiv,
        Some(other) => {
            return para(format!(
                "{ENV} is {other:?}: HCCL accepts AI_CPU, AICPU_CacheDisable, AIV, HOST or \
                 HOST_TS"
            ));
        }
    };
    Ok(match mode {
        1 => Expansion::Host,
        2 => Expansion::AiCpu,
        3 | 4 => Expansion::Aiv,
        // 0 is the default; HCCL warns about other values and keeps the variable's choice.
        _ => from_env,
    })
}

#[cfg(test)]
mod tests {
    use super::{Expansion::*, resolve};
    use crate::sys::HcclResult;

    #[test]
    fn the_config_wins_and_the_variable_decides_otherwise() {
        assert_eq!(resolve(0, None).unwrap(), AiCpu);
        assert_eq!(resolve(0, Some("HOST")).unwrap(), Host);
        assert_eq!(resolve(0, Some("AIV")).unwrap(), Aiv);
        assert_eq!(resolve(0, Some("AICPU_CacheDisable")).unwrap(), AiCpu);
        assert_eq!(resolve(0, Some("HOST_TS")).unwrap(), AiCpu);
        assert_eq!(resolve(1, None).unwrap(), Host);
        assert_eq!(resolve(2, Some("HOST")).unwrap(), AiCpu);
        assert_eq!(resolve(3, None).unwrap(), Aiv);
        assert_eq!(resolve(4, None).unwrap(), Aiv);
        assert_eq!(resolve(9, Some("HOST")).unwrap(), Host);
        let bad = resolve(2, Some("aicpu")).unwrap_err();
        assert_eq!(bad.code, HcclResult::HCCL_E_PARA);
        assert!(bad.msg.contains("HCCL_OP_EXPANSION_MODE"), "{}", bad.msg);
    }

    /// A collective on registered buffers takes the symmetric path in AI CPU expansion only.
    #[test]
    fn only_ai_cpu_expansion_uses_windows() {
        use crate::sys::*;
        use crate::testutil::{DevBuf, deregister, hccl, hok, register, run_ranks, test_config};
        use crate::{GRANULARITY as G, test_lock, testing::counters};
        let _g = test_lock();
        for (mode, symmetric) in [(0, true), (1, false), (2, true), (3, false), (4, false)] {
            let mut config = test_config();
            config.hcclOpExpansionMode = mode;
            let before = counters().symmetric_collectives;
            run_ranks(2, &config, |r| {
                let buf = DevBuf::new(r.rank, G);
                let win = register(r, &buf);
                // SAFETY: both halves of a live window; the emulator validates the rest.
                hok(unsafe {
                    (hccl().HcclAllReduce)(
                        buf.ptr,
                        buf.at(G / 2),
                        1024,
                        HcclDataType::HCCL_DATA_TYPE_FP32,
                        HcclReduceOp::HCCL_REDUCE_SUM,
                        r.comm,
                        r.stream,
                    )
                });
                assert_eq!(r.sync(), ACL_SUCCESS);
                deregister(win);
                buf.free();
            });
            let took = counters().symmetric_collectives - before;
            assert_eq!(
                took,
                if symmetric { 2 } else { 0 },
                "hcclOpExpansionMode {mode}"
            );
        }
        crate::testutil::assert_clean();
    }
}
