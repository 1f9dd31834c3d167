//! `symheap-run [-n N | --nnodes N --nproc-per-node M] [--grace SECS] [--elastic] [--]
//! PROGRAM [ARGS...]`: runs PROGRAM as ranks on this machine, one process each, like torchrun
//! or mpirun; with `--nnodes`, as that many emulated nodes; with `--elastic`, going on without
//! the ranks it loses. See [`symheap_tools::launcher`].

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use symheap_tools::launcher::{self, Job};

const USAGE: &str = "usage: symheap-run -n N [--grace SECS] [--elastic] [--] PROGRAM [ARGS...]
       symheap-run --nnodes N --nproc-per-node M [--grace SECS] [--elastic] [--] PROGRAM [ARGS...]

Runs PROGRAM as N ranks (-n N, one node) or as N x M ranks on N emulated nodes of M ranks
each (torchrun's flags; `--nproc-per-node M` alone is one node; `--flag=value` works too),
one process each. Rank r is local rank r % M of node r / M and uses device r % M. Each gets
SYMHEAP_RANK, SYMHEAP_WORLD_SIZE, SYMHEAP_DEVICE, SYMHEAP_EMU_NODE and SYMHEAP_ROOT_INFO
(what symheap's Comm::from_env and the emulator read) and torchrun's RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_NAME, ROLE_RANK,
ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and TORCHELASTIC_*. Output lines are prefixed with
[rank R], the global rank. When a rank fails, the others are killed after the grace period
(default 5 s) and symheap-run exits with status 1. SIGINT, SIGTERM or SIGHUP is passed on
to every rank (a second one kills them at once); the ranks die with symheap-run in any
case.

With --elastic, a rank that fails (killed by a signal, or a non-zero exit) does not end the
job: the others run on. Each rank gets SYMHEAP_ELASTIC_DIR, a private directory of the run,
where symheap-run writes lost-K at its K-th loss (the ranks lost then, one per line,
ascending; ranks failing within 200 ms of each other are one loss) and reports the loss on
stderr. The job ends when every rank has ended, and succeeds if at least one rank was never
lost, every such rank exited 0, and every lost rank was killed by a signal (a non-zero exit
still fails the job).";

/// The layout the flags ask for.
#[derive(Debug, Default)]
struct Layout {
    /// `-n` / `--nproc`: the total.
    total: Option<u64>,
    /// `--nnodes`.
    nodes: Option<u64>,
    /// `--nproc-per-node`.
    per_node: Option<u64>,
}

impl Layout {
    /// `(nodes, ranks per node)`, or why the flags do not make one.
    fn resolve(&self) -> Result<(u32, u32), String> {
        let (nodes, per_node) = match (self.total, self.nodes, self.per_node) {
            (None, None, None) => {
                return Err("-n N or --nnodes N --nproc-per-node M is required".into());
            }
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err(
                    "-n N is --nnodes 1 --nproc-per-node N: give -n or the node flags, not both"
                        .into(),
                );
            }
            (None, Some(_), None) => {
                return Err("--nnodes N needs --nproc-per-node M (the ranks on each node)".into());
            }
            (Some(total), None, None) => (1, total),
            (None, nodes, Some(per_node)) => (nodes.unwrap_or(1), per_node),
        };
        let count = |n: u64, flag: &str| {
            u32::try_from(n)
                .ok()
                .filter(|&n| n > 0)
                .ok_or(format!("{flag} {n} is not a positive count"))
        };
        let flag = if self.total.is_some() {
            "-n"
        } else {
            "--nproc-per-node"
        };
        let (nodes, per_node) = (count(nodes, "--nnodes")?, count(per_node, flag)?);
        nodes.checked_mul(per_node).ok_or(format!(
            "--nnodes {nodes} x --nproc-per-node {per_node} ranks are too many"
        ))?;
        Ok((nodes, per_node))
    }
}

fn parse(mut args: impl Iterator<Item = OsString>) -> Result<Job, String> {
    let mut layout = Layout::default();
    let mut grace = None;
    let mut elastic = false;
    let program = loop {
        let Some(arg) = args.next() else {
            return Err("no PROGRAM given".into());
        };
        // `--flag=value` as torchrun writes them, or `--flag value`.
        let (flag, inline) = match arg.to_str().and_then(|a| a.split_once('=')) {
            Some((flag, value)) if flag.starts_with("--") => {
                (Some(flag.to_string()), Some(OsString::from(value)))
            }
            _ => (arg.to_str().map(str::to_string), None),
        };
        let mut value = |what: &str| -> Result<u64, String> {
            let value = inline
                .clone()
                .or_else(|| args.next())
                .ok_or(format!("{what} needs a value"))?;
            value.to_str().and_then(|v| v.parse().ok()).ok_or(format!(
                "{what} {} is not a number",
                value.to_string_lossy()
            ))
        };
        match flag.as_deref() {
            Some("-n" | "--nproc") => layout.total = Some(value("-n")?),
            Some("--nnodes") => layout.nodes = Some(value("--nnodes")?),
            Some("--nproc-per-node" | "--nproc_per_node") => {
                layout.per_node = Some(value("--nproc-per-node")?);
            }
            Some("--grace") => grace = Some(value("--grace")?),
            Some("--elastic") if inline.is_none() => elastic = true,
            Some("--elastic") => return Err("--elastic takes no value".into()),
            Some("-h" | "--help") => return Err(String::new()),
            Some("--") if inline.is_none() => {
                break args.next().ok_or("no PROGRAM given after --")?;
            }
            Some(flag) if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
            _ => break arg,
        }
    };
    let (nodes, per_node) = layout.resolve()?;
    let mut job = Job::on_nodes(nodes, per_node, program).args(args);
    if let Some(secs) = grace {
        job = job.grace(Duration::from_secs(secs));
    }
    if elastic {
        job = job.elastic();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(args: &str) -> Result<Job, String> {
        parse(args.split_whitespace().map(OsString::from))
    }

    /// `(nodes, ranks)` of the job the arguments ask for.
    fn layout(args: &str) -> (u32, u32) {
        let job = job(args).unwrap();
        (job.nodes(), job.ranks())
    }

    #[test]
    fn node_flags_give_nodes_times_ranks_per_node() {
        assert_eq!(layout("--nnodes 4 --nproc-per-node 16 prog"), (4, 64));
        assert_eq!(layout("--nproc-per-node=16 --nnodes=24 prog"), (24, 384));
        assert_eq!(layout("--nnodes 2 --nproc_per_node 3 -- prog -n 5"), (2, 6));
        assert_eq!(layout("--nproc-per-node 8 prog"), (1, 8));
        assert_eq!(layout("-n 5 prog --nnodes 3"), (1, 5));
        let six = job("--nnodes 2 --nproc-per-node 3 prog").unwrap();
        let seats: Vec<_> = (0..6)
            .map(|r| six.seat(r))
            .map(|s| (s.node, s.local_rank))
            .collect();
        assert_eq!(seats, [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]);
    }

    #[test]
    fn elastic_is_a_flag_of_both_forms() {
        assert!(job("--elastic -n 4 prog").unwrap().is_elastic());
        assert!(
            job("--nnodes 2 --nproc-per-node 2 --elastic prog")
                .unwrap()
                .is_elastic()
        );
        assert!(!job("-n 4 prog --elastic").unwrap().is_elastic());
        assert!(!job("-n 4 prog").unwrap().is_elastic());
        assert!(
            job("--elastic=1 -n 4 prog")
                .unwrap_err()
                .contains("takes no value")
        );
    }

    #[test]
    fn missing_or_inconsistent_node_flags_are_usage_errors() {
        let err = |args: &str| job(args).unwrap_err();
        assert!(err("--nnodes 4 prog").contains("needs --nproc-per-node"));
        assert!(err("-n 4 --nnodes 2 prog").contains("not both"));
        assert!(err("-n 4 --nproc-per-node 4 prog").contains("not both"));
        assert!(err("--nnodes 0 --nproc-per-node 4 prog").contains("--nnodes 0"));
        assert!(err("--nnodes 2 --nproc-per-node 0 prog").contains("--nproc-per-node 0"));
        assert!(
            err("--nnodes 1:4 --nproc-per-node 4 prog").contains("--nnodes 1:4 is not a number")
        );
        assert!(err("--nnodes 65536 --nproc-per-node 65536 prog").contains("too many"));
        assert!(err("prog").contains("is required"));
        assert!(err("--nnodes").contains("needs a value"));
        assert!(err("--nodes 2 prog").contains("unknown option --nodes"));
    }
}
