//! The fault walk: each pool scenario runs once clean, counting the C calls it makes, then
//! once for every call with exactly that call failing. Every run must end without a panic,
//! with an error or a recorded drop error, with the pool usable or poisoned, and with every
//! emulator resource released, except where the failing call is itself the release.
//!
//! Each scenario walks in a process of its own (this test binary, re-run): a failed release
//! may leave its resource behind for good, which would spoil the leak checks of later runs.

use std::process::Command;

use symheap::sys::{ACL_ERROR_RT_INTERNAL_ERROR, HcclResult};
use symheap::{AllocDesc, SleepPlan};
use symheap::{Comm, CommConfig};
use symheap::{Error, PoolConfig, ReduceOp, Result, Runtime, SymPool, SymVec, emu};

/// The environment variable that names the scenario a child process walks.
const SCENARIO_ENV: &str = "SYMHEAP_FAULT_SCENARIO";

/// Marks the error of a check made inside a scenario (not an error of the fault).
const BROKEN: &str = "fault walk check";

/// Calls whose failure is the release itself: what they release may stay behind.
const RELEASES: &[&str] = &[
    "aclrtUnmapMem",
    "aclrtReleaseMemAddress",
    "aclrtFreePhysical",
    "aclrtDestroyStream",
    "aclrtDestroyEvent",
    "aclrtFreeHost",
    "HcclCommSymWinDeregister",
    "HcclCommDestroy",
];

struct Scenario {
    name: &'static str,
    run: fn(&Comm) -> Result<()>,
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "create",
        run: |comm| pool(comm).map(drop),
    },
    Scenario {
        name: "alloc",
        run: |comm| {
            let pool = pool(comm)?;
            let result = pool.alloc(4096, 0).map(drop);
            checked(&pool, result)
        },
    },
    Scenario {
        name: "grow",
        run: |comm| {
            let pool = pool(comm)?;
            let result = pool.alloc(3 << 20, 0).map(drop);
            checked(&pool, result)
        },
    },
    Scenario {
        name: "reserve",
        run: |comm| {
            let pool = pool(comm)?;
            let result = pool.reserve(3 << 20);
            checked(&pool, result)
        },
    },
    Scenario {
        name: "trim",
        run: |comm| {
            let pool = pool(comm)?;
            drop(pool.alloc(3 << 20, 0)?);
            let result = pool.trim().map(drop);
            checked(&pool, result)
        },
    },
    Scenario {
        name: "collective",
        run: |comm| {
            let pool = pool(comm)?;
            let result = sum_in_place(&pool);
            checked(&pool, result)
        },
    },
    Scenario {
        name: "verify",
        run: |comm| {
            let pool = pool(comm)?;
            let result = pool.verify_symmetric();
            checked(&pool, result)
        },
    },
    Scenario {
        name: "strict",
        run: |comm| {
            let config = PoolConfig::new(2 << 20).strict_symmetry(true);
            let pool = SymPool::new(comm, config)?;
            let result = sum_in_place(&pool);
            checked(&pool, result)
        },
    },
    Scenario {
        name: "drop",
        run: |comm| {
            let pool = pool(comm)?;
            let _small = pool.alloc(4096, 0)?;
            let _grown = pool.alloc(3 << 20, 0)?;
            Ok(()) // the pool, two windows and the blocks drop here
        },
    },
    Scenario {
        name: "drop with pending frees",
        run: |comm| {
            let pool = pool(comm)?;
            let mut v = SymVec::from_host(&pool, &[1.0f32; 64])?;
            pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
            drop(v); // pending until a synchronisation that never comes
            Ok(())
        },
    },
    Scenario {
        name: "groups",
        run: |comm| {
            let group = comm.split(&[0], 1, &CommConfig::new().exec_timeout_secs(5))?;
            let pool = pool(comm)?;
            let result = pool.attach(&group).and_then(|()| {
                // Growing registers in both communicators; then a collective on the group.
                let grown = pool.alloc(3 << 20, 0)?;
                sum_in_place(&pool.on_group(&group)?)?;
                drop(grown);
                pool.trim().map(drop)
            });
            checked(&pool, result)
        },
    },
    Scenario {
        name: "sleep and wake",
        run: |comm| {
            let pool = pool(comm)?;
            let _grown = pool.alloc(3 << 20, 0)?; // two segments
            let (weights, plan) = weights(&pool)?;
            let result = pool
                .sleep(&plan)
                .and_then(|_| pool.wake())
                .and_then(|_| woke_whole(&pool, &weights));
            slept_checked(&pool, result)
        },
    },
    Scenario {
        name: "deep sleep and wake on a new world",
        run: |comm| {
            let pool = pool(comm)?;
            let (weights, plan) = weights(&pool)?;
            let root = comm.fresh_root_info()?;
            let result = pool
                .sleep(&plan.release_communicators())
                .and_then(|_| {
                    let config = CommConfig::new().exec_timeout_secs(5);
                    let world = Comm::init(comm.runtime(), 1, &root, 0, &config)?;
                    pool.wake_on(&world)
                })
                .and_then(|_| woke_whole(&pool, &weights));
            slept_checked(&pool, result)
        },
    },
    Scenario {
        name: "adapter",
        run: |comm| {
            let pool = pool(comm)?;
            let result = pool.allocator().and_then(|adapter| {
                let mut v = symheap::allocator_api2::vec::Vec::new_in(adapter);
                v.extend(0..10_000u32);
                same(
                    "adapter",
                    v.iter().map(|&x| u64::from(x)).sum(),
                    49_995_000u64,
                )
            });
            checked(&pool, result)
        },
    },
];

/// A pool that may grow once.
fn pool(comm: &Comm) -> Result<SymPool> {
    SymPool::new(comm, PoolConfig::new(2 << 20).max_capacity(8 << 20))
}

/// An in-place AllReduce on one rank, read back: the input, or an error, never stale data.
fn sum_in_place(pool: &SymPool) -> Result<()> {
    let mut v = SymVec::from_host(pool, &[1.0f32; 64])?;
    pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
    same("AllReduce", v.to_host()?, vec![1.0f32; 64])
}

fn same<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{BROKEN}: {what} gave {got:?}, not {want:?}"
        )))
    }
}

/// `result`, after checking that a pool whose step failed is still usable or poisoned.
fn checked(pool: &SymPool, result: Result<()>) -> Result<()> {
    if let Err(failure) = &result {
        match pool.alloc(512, 0) {
            Ok(_) | Err(Error::Poisoned(_)) => {}
            Err(e) => {
                return Err(Error::InvalidArgument(format!(
                    "{BROKEN}: after `{failure}` the pool is neither usable nor poisoned: {e}"
                )));
            }
        }
    }
    result
}

/// Weights to offload across a sleep, and the plan that does.
fn weights(pool: &SymPool) -> Result<(SymVec<u32>, SleepPlan)> {
    let weights = SymVec::from_host_with(pool, &[3u32; 64], AllocDesc::tagged("weights"))?;
    Ok((weights, SleepPlan::new().offload("weights")))
}

/// After a wake: the offloaded weights are back, and a collective works.
fn woke_whole(pool: &SymPool, weights: &SymVec<u32>) -> Result<()> {
    same("offloaded", weights.to_host()?, vec![3; 64])?;
    sum_in_place(pool)
}

/// [`checked`], where a pool may also end asleep (a sleep or a wake that failed), saying so.
fn slept_checked(pool: &SymPool, result: Result<()>) -> Result<()> {
    if result.is_err() && pool.is_asleep() {
        return match pool.alloc(512, 0) {
            Err(Error::Asleep(_) | Error::Poisoned(_)) => result,
            other => Err(Error::InvalidArgument(format!(
                "{BROKEN}: an asleep pool allocated: {other:?}"
            ))),
        };
    }
    checked(pool, result)
}

/// The code an injected failure of `call` returns.
fn failure_code(call: &str) -> i32 {
    if call.starts_with("Hccl") {
        HcclResult::HCCL_E_INTERNAL.0
    } else {
        ACL_ERROR_RT_INTERNAL_ERROR
    }
}

#[test]
fn every_c_call_of_every_pool_scenario_can_fail() {
    let exe = std::env::current_exe().expect("the test binary's path");
    for scenario in SCENARIOS {
        // Its output is shown only if it fails: a passing walk's lines would hide the suite's.
        let run = Command::new(&exe)
            .args(["faults::walk_one_scenario", "--exact", "--ignored"])
            .args(["--nocapture", "--test-threads=1"])
            .env(SCENARIO_ENV, scenario.name)
            .output()
            .expect("the test binary starts");
        assert!(
            run.status.success(),
            "scenario {:?}: {}\n{}{}",
            scenario.name,
            run.status,
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
    }
}

#[test]
#[ignore = "run by every_c_call_of_every_pool_scenario_can_fail, in a process of its own"]
fn walk_one_scenario() {
    let name = std::env::var(SCENARIO_ENV).expect("run by the fault walk");
    let scenario = SCENARIOS.iter().find(|s| s.name == name).unwrap();
    let rt = Runtime::emulated().unwrap();
    let config = CommConfig::new().exec_timeout_secs(5);
    let run = || emu::launch_with(&rt, 1, &config, |comm| (scenario.run)(comm)).map(drop);

    emu::testing::count_calls();
    run().unwrap_or_else(|e| panic!("{name}, clean: {e}"));
    let calls = emu::testing::call_counts();
    assert!(rt.take_drop_errors().is_empty(), "{name}, clean");
    emu::testing::check_released().unwrap_or_else(|left| panic!("{name}, clean: {left}"));

    // Releases last: a failed one may leave its resource behind for the rest of the process.
    let (releases, others): (Vec<_>, Vec<_>) =
        calls.iter().partition(|(call, _)| RELEASES.contains(call));
    let (mut points, mut leaked) = (0, 0);
    for (&call, &count) in others.into_iter().chain(releases) {
        for nth in 1..=count {
            let before = emu::testing::counters().live();
            emu::testing::inject_failure(call, nth, failure_code(call));
            let outcome = run();
            emu::testing::clear_injected_failures();
            let at = format!("{name}: call {nth} of {count} to {call}");
            let drop_errors = rt.take_drop_errors();
            match &outcome {
                Err(e @ Error::Panicked { .. }) => panic!("{at}: {e}"),
                Err(e) if e.to_string().contains(BROKEN) => panic!("{at}: {e}"),
                Ok(()) if drop_errors.is_empty() => panic!("{at}: the failure went unnoticed"),
                _ => {}
            }
            if RELEASES.contains(&call) {
                leaked += u64::from(emu::testing::counters().live() != before);
            } else {
                emu::testing::check_released().unwrap_or_else(|left| panic!("{at}: {left}"));
            }
            points += 1;
        }
    }
    println!(
        "fault walk {name:?}: {} C functions, {points} fault points, all released except \
         {leaked} failed releases",
        calls.len()
    );
}
