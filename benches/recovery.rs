//! The time from a lost rank to the survivors' next correct step, against a full restart of
//! the same job (`cargo bench --bench recovery`), in the same run.
//!
//! The job: `RECOVERY_RANKS` ranks (default 4) as processes under `symheap-run --elastic`,
//! each loading `RECOVERY_WEIGHTS_MIB` MiB of weights (default 1024) into its pool from host
//! memory, then running AllReduce steps whose sums are checked. One rank SIGKILLs itself at a
//! step; the survivors read the launcher's loss record, form their world, shrink their pools
//! and run the next step, checked. *Recovery* is from the kill to the last survivor's first
//! correct step after it. *Restart* is what the job costs without the loss machinery: a fresh
//! job of the survivors' size, from its launch to its last rank's first correct step
//! (process start, communicator, pool and window registration, loading the weights). Both
//! are wall times on this machine; each run does both, `RECOVERY_RUNS` runs (default 5).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use symheap::{Comm, CommConfig, PoolConfig, ReduceOp, Runtime, Survivors, SymPool, SymVec};
use symheap_tools::launcher::{self, Job};

/// The step at which the victim dies.
const KILL_STEP: u32 = 5;
/// Steps each job runs.
const STEPS: u32 = 10;
const LEN: usize = 1024;

fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Microseconds since the epoch: comparable across this machine's processes.
fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// One rank: loads its weights, steps; `victim` (if any) dies at [`KILL_STEP`]. Prints
/// `FIRST <us>` at its first correct step, `KILL <us>` just before dying, `FAILED`, `WORLD`
/// and `SHRUNK <us>` when a step failed, the survivors' world was formed and the pool moved
/// to it, and `RECOVERED <us>` at its first correct step after that. (The latest of each
/// over the ranks is the job's.)
fn rank(victim: Option<u32>) -> symheap::Result<()> {
    let rt = Runtime::emulated()?;
    let config = CommConfig::new().exec_timeout_secs(120);
    let comm = Comm::from_env(&rt, config.clone())?;
    let me = comm.rank();
    let mut world = Survivors::from_env()?.expect("launched with --elastic");
    let weights_bytes = u64::from(env_u32("RECOVERY_WEIGHTS_MIB", 1024)) << 20;
    let pool = SymPool::new(&comm, PoolConfig::new(weights_bytes + (16 << 20)))?;
    let host = vec![me as f32; (weights_bytes / 4) as usize];
    let weights = SymVec::from_host(&pool, &host)?;
    drop(host);
    let mut n = 0;
    let mut recovering = false;
    let mut first = true;
    let mut _comm = comm;
    while n < STEPS {
        if Some(me) == victim && n == KILL_STEP {
            println!("KILL {}", now_us());
            // SAFETY: raise only sends a signal to this process.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        let stepped = (|| {
            let mut v = SymVec::from_host(&pool, &vec![(me + n) as f32; LEN])?;
            pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
            v.to_host()
        })();
        match stepped {
            Ok(got) => {
                let want: u32 = world.launch_ranks().iter().map(|&r| r + n).sum();
                assert!(got.iter().all(|&x| x == want as f32), "step {n}");
                if first {
                    println!("FIRST {}", now_us());
                    first = false;
                }
                if recovering {
                    println!("RECOVERED {}", now_us());
                    recovering = false;
                }
                n += 1;
            }
            Err(_) => {
                println!("FAILED {}", now_us());
                let survivors = world.shrink(&rt, &config)?;
                println!("WORLD {}", now_us());
                pool.shrink(&survivors)?;
                println!("SHRUNK {}", now_us());
                _comm = survivors;
                recovering = true;
            }
        }
    }
    assert!(!weights.is_unspecified());
    Ok(())
}

/// The latest `WORD <us>` of a job's output.
fn latest(output: &str, word: &str) -> Option<u128> {
    let tag = format!("] {word} ");
    output
        .lines()
        .filter_map(|l| l.split_once(&tag).and_then(|(_, v)| v.trim().parse().ok()))
        .max()
}

/// Runs a job of `ranks` (one of which dies if `victim` is set): its output and launch time.
fn job(ranks: u32, victim: Option<u32>) -> Result<(String, u128), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut job = Job::new(ranks, exe)
        .arg("--recovery-rank")
        .elastic()
        .grace(Duration::from_secs(30))
        .capture_output();
    if let Some(v) = victim {
        job = job.env("RECOVERY_VICTIM", v.to_string());
    }
    let launched = now_us();
    let outcome = job.run().map_err(|e| e.to_string())?;
    if !outcome.success() {
        return Err(format!("{}\n{}", outcome.summary(), outcome.output));
    }
    Ok((outcome.output, launched))
}

fn main() -> std::process::ExitCode {
    if launcher::in_a_rank() && std::env::args().any(|a| a == "--recovery-rank") {
        let victim = std::env::var("RECOVERY_VICTIM")
            .ok()
            .and_then(|v| v.parse().ok());
        return match rank(victim) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("recovery: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let ranks = env_u32("RECOVERY_RANKS", 4);
    let runs = env_u32("RECOVERY_RUNS", 5);
    let weights = env_u32("RECOVERY_WEIGHTS_MIB", 1024);
    println!(
        "{ranks} ranks, {weights} MiB of weights each; rank {} dies at step {KILL_STEP}\n",
        ranks - 1
    );
    println!(
        "| run | recovery ms | of which: noticed | world formed | pool shrunk | restart ms | restart / recovery |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let mut ratios = Vec::new();
    for run in 1..=runs {
        let measured = (|| -> Result<([f64; 4], f64), String> {
            let (lost, _) = job(ranks, Some(ranks - 1))?;
            let at = |word: &str| latest(&lost, word).ok_or(format!("no {word} line"));
            let kill = at("KILL")?;
            let ms = |from: u128, to: u128| to.saturating_sub(from) as f64 / 1e3;
            let phases = [
                ms(kill, at("RECOVERED")?),
                ms(kill, at("FAILED")?),
                ms(at("FAILED")?, at("WORLD")?),
                ms(at("WORLD")?, at("SHRUNK")?),
            ];
            let (fresh, launched) = job(ranks - 1, None)?;
            let first = latest(&fresh, "FIRST").ok_or("no FIRST line")?;
            Ok((phases, ms(launched, first)))
        })();
        match measured {
            Ok(([recovery, noticed, formed, shrunk], restart)) => {
                let ratio = restart / recovery;
                ratios.push(ratio);
                println!(
                    "| {run} | {recovery:.1} | {noticed:.1} | {formed:.1} | {shrunk:.1} | {restart:.1} | {ratio:.1} |"
                );
            }
            Err(e) => {
                eprintln!("run {run} failed: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    println!("\nmedian restart / recovery: {median:.1}x");
    std::process::ExitCode::SUCCESS
}
