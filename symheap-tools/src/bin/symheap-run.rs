//! `symheap-run -n N [--grace SECS] [--] PROGRAM [ARGS...]`: runs PROGRAM as N ranks on this
//! machine, one process each, like torchrun or mpirun for one node. See
//! [`symheap_tools::launcher`].

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use symheap_tools::launcher::{self, Job};

const USAGE: &str = "usage: symheap-run -n N [--grace SECS] [--] PROGRAM [ARGS...]

Runs PROGRAM as N ranks, one process each, with SYMHEAP_RANK, SYMHEAP_WORLD_SIZE,
SYMHEAP_DEVICE and SYMHEAP_ROOT_INFO set (what symheap's Comm::from_env reads). Output lines
are prefixed with [rank R]. When a rank fails, the others are killed after the grace period
(default 5 s) and symheap-run exits with status 1. SIGINT, SIGTERM or SIGHUP is passed on
to every rank (a second one kills them at once); the ranks die with symheap-run in any
case.";

fn parse(mut args: impl Iterator<Item = OsString>) -> Result<Job, String> {
    let mut ranks = None;
    let mut grace = None;
    let program = loop {
        let Some(arg) = args.next() else {
            return Err("no PROGRAM given".into());
        };
        let number = |value: Option<OsString>, what: &str| -> Result<u64, String> {
            let value = value.ok_or(format!("{what} needs a value"))?;
            value.to_str().and_then(|v| v.parse().ok()).ok_or(format!(
                "{what} {} is not a number",
                value.to_string_lossy()
            ))
        };
        match arg.to_str() {
            Some("-n" | "--nproc") => ranks = Some(number(args.next(), "-n")?),
            Some("--grace") => grace = Some(number(args.next(), "--grace")?),
            Some("-h" | "--help") => return Err(String::new()),
            Some("--") => break args.next().ok_or("no PROGRAM given after --")?,
            Some(flag) if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
            _ => break arg,
        }
    };
    let ranks = ranks.ok_or("-n N is required")?;
    let ranks = u32::try_from(ranks)
        .ok()
        .filter(|&n| n > 0)
        .ok_or(format!("-n {ranks} is not a rank count"))?;
    let mut job = Job::new(ranks, program).args(args);
    if let Some(secs) = grace {
        job = job.grace(Duration::from_secs(secs));
    }
    Ok(job)
}

fn main() -> ExitCode {
    let job = match parse(std::env::args_os().skip(1)) {
        Ok(job) => job,
        Err(why) => {
            if !why.is_empty() {
                eprintln!("symheap-run: {why}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = launcher::stop_on_termination_signals() {
        eprintln!("symheap-run: {e}");
        return ExitCode::FAILURE;
    }
    let outcome = job.run();
    // The job is over (its ranks reaped, its directory removed): from here on a signal ends
    // this process as usual, whatever it is doing (writing to a pipe nobody reads, say).
    if let Err(e) = launcher::default_termination_signals() {
        eprintln!("symheap-run: {e}");
    }
    if let Some(why) = outcome.as_ref().ok().and_then(|o| o.blame_unread.as_ref()) {
        eprintln!(
            "symheap-run: warning: {why}; the first failure is named by the order in which the \
             ranks ended"
        );
    }
    if let Some(signal) = launcher::stopped_by() {
        eprintln!("symheap-run: stopped by signal {signal}; the ranks were stopped too");
        return ExitCode::from(128u8.saturating_add(signal as u8));
    }
    match outcome {
        Ok(outcome) if outcome.success() => ExitCode::SUCCESS,
        Ok(outcome) => {
            eprintln!("symheap-run: {}", outcome.summary());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("symheap-run: {e}");
            ExitCode::FAILURE
        }
    }
}
