//! Starting a job of N ranks on this machine, one process each, the way torchrun or mpirun do:
//! the library side of the `symheap-run` binary. The ranks may be spread over several
//! emulated nodes ([`Job::on_nodes`]), as `torchrun --nnodes N --nproc-per-node M` spreads
//! them over N machines: rank `r` is local rank `r % M` of node `r / M`.
//!
//! Each process gets `SYMHEAP_RANK`, `SYMHEAP_WORLD_SIZE`, `SYMHEAP_DEVICE` (its local rank:
//! one device per process, numbered per node as on real nodes of 16 NPUs),
//! `SYMHEAP_EMU_NODE` (its node, which the emulator's topology reads), `SYMHEAP_ROOT_INFO` (a
//! fresh file path for this run) and `SYMHEAP_RUN_BLAME` (see [`launch::BLAME`]): the launch
//! protocol of [`symheap_types::launch`], which is what
//! [`Comm::from_env`](symheap::Comm::from_env) and the emulator's ranks read. It also gets the
//! variables torchrun gives its workers ([`TORCHRUN_VARIABLES`]), so that a program written
//! for torchrun finds its place unchanged. Every line a rank prints is prefixed with its
//! global rank, `[rank R] `, on one node or many (the node and local rank follow from it, and
//! scripts that read the output do not depend on the layout). When a rank fails (a non-zero
//! exit or a signal), the others get a grace period to notice and exit on their own, then are
//! killed. Only the rank processes themselves are killed: a rank that starts processes of its
//! own must stop them.
//!
//! The root info carries the key that lets a process join the job, so it lives in a directory
//! made for the run that only this user can enter (mode 0700), removed when the run ends;
//! rank 0 removes the root info itself once every rank has joined. The ranks die with the
//! launcher (`PR_SET_PDEATHSIG`: with the thread that called [`Job::run`]), and
//! [`stop_on_termination_signals`] makes a launcher that gets `SIGINT`, `SIGTERM` or `SIGHUP`
//! stop its ranks and remove the directory first. `SIGKILL` cannot be handled: it leaves the
//! directory behind, with the blame file and, if the ranks were still joining, the root info
//! (whose key then admits nobody: the rendezvous it names lived in rank 0, which died with
//! the launcher). The next run of a launcher of this user with the same temp directory
//! removes it: a launcher holds a lock on its directory while it lives, and removes the
//! directories of dead launchers whose lock is free.
//!
//! The ranks are processes of the same user and can replace the blame file: the launcher
//! reads it only while it is a regular file (not through a symbolic link, without waiting on
//! a FIFO), and at most 1 MiB of it; otherwise [`Outcome::blame_unread`] says why. No wait of
//! the launcher is without a bound: each one looks at the termination signals.
//!
//! An [elastic](Job::elastic) job (`symheap-run --elastic`) goes on when ranks fail: the
//! others are neither signalled nor killed, and the job ends when every rank has ended. Each
//! rank gets [`launch::ELASTIC_DIR`], a directory of its own in the run's directory (mode
//! 0700, removed with it, so never while a rank lives). Ranks that end abnormally (a signal or
//! a non-zero exit) within [`Job::loss_window`] of the first of them are one loss, the K-th of the
//! job: the launcher writes [`launch::lost_record`]`(K)` there (their launch ranks, one
//! decimal per line, ascending; renamed into place, so that the survivors, who poll for it,
//! never read half of it), reports it on stderr (`symheap-run: elastic: lost rank 3 (pid
//! 1234, killed by signal 9); 7 ranks go on (loss 1)`) and lists it in [`Outcome::losses`].
//! [`Outcome::success`] says how such a job is judged. Ranks that a termination signal stops
//! are stopped, not lost: the job then ends as any other does.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use symheap::{Error, Result};
use symheap_types::launch;

/// An [`Error::Io`] saying what failed.
fn io_error(what: impl Into<String>, source: std::io::Error) -> Error {
    Error::Io {
        what: what.into(),
        source: std::sync::Arc::new(source),
    }
}

/// The termination signal this process received, once [`stop_on_termination_signals`] set
/// the handlers; 0 before.
static STOPPED_BY: AtomicI32 = AtomicI32::new(0);

/// How many termination signals this process received: a second one ends the grace period.
static SIGNALS: AtomicU32 = AtomicU32::new(0);

/// How often a waiting launcher looks at [`STOPPED_BY`].
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The signals [`stop_on_termination_signals`] takes over.
const TERMINATION_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

extern "C" fn on_termination_signal(signal: libc::c_int) {
    // Only atomic stores: all a signal handler may safely do here.
    STOPPED_BY.store(signal, Ordering::Relaxed);
    SIGNALS.fetch_add(1, Ordering::Relaxed);
}

/// Sets `handler` for every one of [`TERMINATION_SIGNALS`].
fn set_termination_handlers(handler: libc::sighandler_t) -> Result<()> {
    for signal in TERMINATION_SIGNALS {
        // SAFETY: an all-zero sigaction is a valid value (no flags, empty mask) to fill in.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = handler;
        // No SA_RESTART: a system call the signal interrupts fails with EINTR instead of
        // resuming unseen. (The launcher does not rely on that: the standard library
        // retries EINTR, so no call of the launcher blocks without a bound; each wait polls
        // STOPPED_BY.)
        action.sa_flags = 0;
        // SAFETY: sigemptyset fills a mask this function owns.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: a valid action; the handler only stores to atomics, which is
        // async-signal-safe; the old action is not asked for.
        if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } != 0 {
            return Err(io_error(
                format!("cannot handle signal {signal}"),
                std::io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

/// Makes `SIGINT`, `SIGTERM` and `SIGHUP` stop a running [`Job::run`] instead of this
/// process: the signal is passed on to every rank, the ranks get the grace period (a second
/// signal ends it: the ranks are killed at once), and `run` returns (removing the run's
/// directory). [`stopped_by`] then says which signal came. For a launcher binary
/// (`symheap-run`), not for a library: it replaces the process's handlers. Once the job is
/// over, [`default_termination_signals`] lets the signals end the process again.
///
/// # Errors
/// [`Error::Io`] if a handler cannot be set.
pub fn stop_on_termination_signals() -> Result<()> {
    let handler = on_termination_signal as extern "C" fn(libc::c_int);
    set_termination_handlers(handler as libc::sighandler_t)
}

/// Gives `SIGINT`, `SIGTERM` and `SIGHUP` back their default action (ending this process),
/// after [`stop_on_termination_signals`]: for a launcher whose job is over, so that nothing
/// it does afterwards (writing to a terminal or pipe that no longer reads) outlasts a signal.
///
/// # Errors
/// [`Error::Io`] if a disposition cannot be set.
pub fn default_termination_signals() -> Result<()> {
    set_termination_handlers(libc::SIG_DFL)
}

/// The termination signal that stopped a job, after [`stop_on_termination_signals`].
pub fn stopped_by() -> Option<i32> {
    Some(STOPPED_BY.load(Ordering::Relaxed)).filter(|&s| s != 0)
}

/// The variables torchrun gives each worker, which [`Job::run`] sets as torchrun does
/// (PyTorch's "torchrun (Elastic Launch)" page, "Environment Variables"): `RANK`,
/// `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `GROUP_RANK` (the node), `GROUP_WORLD_SIZE`
/// (the nodes), `ROLE_NAME` (`default`), `ROLE_RANK` and `ROLE_WORLD_SIZE` (one role: the
/// global rank and size), `MASTER_ADDR` / `MASTER_PORT` (this machine, `127.0.0.1`, and a
/// port that was free when the job started: rank 0 of a program that bootstraps through
/// `torch.distributed`'s `env://` hosts its TCP store there), and `TORCHELASTIC_RUN_ID`,
/// `TORCHELASTIC_RESTART_COUNT` (0) and `TORCHELASTIC_MAX_RESTARTS` (0: a failed job is not
/// restarted).
pub const TORCHRUN_VARIABLES: [&str; 14] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_NAME",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
];

/// Where one rank of a job sits: its node and its rank within the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seat {
    /// The global rank.
    pub rank: u32,
    /// The emulated node (torchrun's `GROUP_RANK`).
    pub node: u32,
    /// The rank within the node (torchrun's `LOCAL_RANK`), which is also its device.
    pub local_rank: u32,
}

/// A job to start: a program run as `ranks` processes, on one emulated node or several.
///
/// # Examples
/// ```no_run
/// use symheap_tools::launcher::Job;
///
/// let outcome = Job::new(4, "./worker").arg("--steps").arg("100").run()?;
/// if !outcome.success() {
///     eprintln!("{}", outcome.summary());
/// }
/// # Ok::<(), symheap::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Job {
    ranks: u32,
    nodes: u32,
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    env_removed: Vec<OsString>,
    grace: Duration,
    capture: bool,
    elastic: bool,
    loss_window: Duration,
}

/// Whether this process was started as a rank by a launcher: `SYMHEAP_RANK` is set (by
/// [`Job::run`] or `symheap-run`).
pub fn in_a_rank() -> bool {
    std::env::var_os(launch::RANK).is_some_and(|v| !v.is_empty())
}

/// How each rank of a finished job ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Each rank's process id, in rank order.
    pub pids: Vec<u32>,
    /// Each rank's exit status, in rank order.
    pub statuses: Vec<ExitStatus>,
    /// The rank that failed first, if any did: the first failed rank a peer blamed for its
    /// own failure (see [`launch::BLAME`]), or else the failed rank whose process ended first.
    pub first_failure: Option<u32>,
    /// Why [`first_failure`](Self::first_failure) is that rank when a peer blamed it, e.g.
    /// `rank 0 says: exited`.
    pub blamed_by: Option<String>,
    /// Every rank's output lines, prefixed, in the order they came, when the job was run
    /// with [`Job::capture_output`]; empty otherwise (the output went to this process's own).
    pub output: String,
    /// Why the [`launch::BLAME`] file was not read, if it was not: something other than the
    /// launcher's own regular file stood in its place (a rank replaced it with a FIFO, a
    /// device or a symbolic link, which are refused unread), or it could not be opened.
    /// [`first_failure`](Self::first_failure) is then the failed rank that ended first.
    pub blame_unread: Option<String>,
    /// Whether the job ran elastic ([`Job::elastic`]): then [`success`](Self::success)
    /// forgives [`losses`](Self::losses).
    pub elastic: bool,
    /// The losses of an elastic job, in order (the first is `lost-1`): which ranks ended
    /// abnormally together, when and how. Empty for a job that is not elastic, whose first
    /// failure ends it instead.
    pub losses: Vec<Loss>,
}

/// One loss of an elastic job: the ranks that ended abnormally within [`Job::loss_window`] of the
/// first of them, recorded together as [`launch::lost_record`]`(number)`.
#[derive(Debug, Clone)]
pub struct Loss {
    /// Which loss of the job this is: 1, 2, ...
    pub number: u32,
    /// When its first rank ended, since the ranks were started.
    pub at: Duration,
    /// The ranks lost, in ascending rank order.
    pub ranks: Vec<LostRank>,
}

impl Loss {
    /// The launch ranks ([`launch::RANK`]) lost, ascending: what its record lists.
    pub fn launch_ranks(&self) -> Vec<u32> {
        self.ranks.iter().map(|r| r.rank).collect()
    }
}

/// A rank lost by an elastic job.
#[derive(Debug, Clone, Copy)]
pub struct LostRank {
    /// Its launch rank ([`launch::RANK`]).
    pub rank: u32,
    /// Its process id.
    pub pid: u32,
    /// How it ended: killed by a signal, or a non-zero exit.
    pub status: ExitStatus,
    /// When the launcher saw it end, since the ranks were started.
    pub at: Duration,
}

/// How close together abnormal ends of an elastic job's ranks must come to be one loss: a
/// failure that takes down several ranks (a node, a shared resource) rarely ends them in the
/// same millisecond, and the survivors should get one record for one event, not one per
/// rank. Measured from the first rank of the loss, so that no record waits longer than this:
/// it is part of every survivor's recovery time, so it is kept short (the default of
/// [`Job::loss_window`]).
pub const LOSS_WINDOW: Duration = Duration::from_millis(50);

impl Job {
    /// `program` as `ranks` processes on one node, with no arguments and a 5-second grace
    /// period.
    pub fn new(ranks: u32, program: impl Into<OsString>) -> Job {
        Job {
            ranks,
            nodes: 1,
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            env_removed: Vec::new(),
            grace: Duration::from_secs(5),
            capture: false,
            elastic: false,
            loss_window: LOSS_WINDOW,
        }
    }

    /// `program` as `nodes * per_node` processes, `per_node` on each of `nodes` emulated
    /// nodes, as `torchrun --nnodes N --nproc-per-node M` starts them on N machines: rank `r`
    /// is local rank `r % per_node` (and device) of node `r / per_node`. A rank count that
    /// does not fit a `u32` is refused by [`Job::run`].
    pub fn on_nodes(nodes: u32, per_node: u32, program: impl Into<OsString>) -> Job {
        // u32::MAX ranks over more than one node cannot be split evenly: `run` refuses it.
        let ranks = nodes.saturating_mul(per_node);
        Job {
            nodes,
            ..Job::new(ranks, program)
        }
    }

    /// The number of ranks.
    pub fn ranks(&self) -> u32 {
        self.ranks
    }

    /// The number of emulated nodes the ranks are spread over.
    pub fn nodes(&self) -> u32 {
        self.nodes
    }

    /// Where `rank` sits: its node and local rank.
    pub fn seat(&self, rank: u32) -> Seat {
        let per_node = (self.ranks / self.nodes.max(1)).max(1);
        Seat {
            rank,
            node: rank / per_node,
            local_rank: rank % per_node,
        }
    }

    /// This program, with the arguments it was started with, as `ranks` processes: for a
    /// program that re-runs itself as its own ranks (see [`in_a_rank`]).
    ///
    /// # Errors
    /// [`Error::Io`] if the running executable cannot be found.
    pub fn this_program(ranks: u32) -> Result<Job> {
        let exe = std::env::current_exe().map_err(|e| io_error("cannot find this program", e))?;
        Ok(Job::new(ranks, exe).args(std::env::args_os().skip(1)))
    }

    /// Adds an argument for every rank's process.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Job {
        self.args.push(arg.into());
        self
    }

    /// Adds arguments for every rank's process.
    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Job {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for every rank's process (beside the ones the launcher
    /// sets, which win).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Job {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Removes an environment variable from every rank's process (one this process has).
    pub fn env_remove(mut self, key: impl Into<OsString>) -> Job {
        self.env_removed.push(key.into());
        self
    }

    /// Keeps the ranks' output (prefixed, stdout and stderr together) in
    /// [`Outcome::output`] instead of relaying it: for a caller that shows it only when the
    /// job failed, such as a test.
    pub fn capture_output(mut self) -> Job {
        self.capture = true;
        self
    }

    /// Makes the job elastic, as `symheap-run --elastic`: a rank that ends abnormally (killed
    /// by a signal, or a non-zero exit) does not end the job. The other ranks run on; the
    /// launcher records each loss in the job's [`launch::ELASTIC_DIR`] (as
    /// [`launch::lost_record`], for the survivors to form their next world) and reports it on
    /// stderr (in [`Outcome::output`] with [`capture_output`](Self::capture_output)). The job
    /// ends when every rank has ended; see [`Outcome::success`] for its verdict. The grace
    /// period then applies only to a launcher stopped by a signal.
    pub fn elastic(mut self) -> Job {
        self.elastic = true;
        self
    }

    /// How close together abnormal ends of an elastic job's ranks must come to be one loss
    /// ([`LOSS_WINDOW`] unless set): the survivors wait this long after the first before
    /// they learn of the loss.
    pub fn loss_window(mut self, window: Duration) -> Job {
        self.loss_window = window;
        self
    }

    /// Whether the job is elastic ([`Job::elastic`]).
    pub fn is_elastic(&self) -> bool {
        self.elastic
    }

    /// How long the other ranks may run on after one failed before they are killed.
    pub fn grace(mut self, grace: Duration) -> Job {
        self.grace = grace;
        self
    }

    /// Starts every rank, relays their output line by line with a `[rank R] ` prefix, and
    /// waits for all of them. On the first failure the others get the grace period, then are
    /// killed (`SIGKILL`); in an [elastic](Job::elastic) job they run on, and the losses are
    /// recorded instead.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero ranks or nodes, or ranks that do not split evenly
    /// over the nodes; [`Error::Io`] for a program that cannot be
    /// started or a root-info directory that cannot be made; ranks already started are then
    /// killed.
    pub fn run(&self) -> Result<Outcome> {
        if self.ranks == 0 {
            return Err(Error::InvalidArgument(
                "a job needs at least one rank".into(),
            ));
        }
        if self.ranks == u32::MAX {
            return Err(Error::InvalidArgument(format!(
                "{} ranks are too many for one job",
                self.ranks
            )));
        }
        if self.nodes == 0 || !self.ranks.is_multiple_of(self.nodes) {
            return Err(Error::InvalidArgument(format!(
                "{} ranks cannot be spread evenly over {} nodes",
                self.ranks, self.nodes
            )));
        }
        let dir = RunDir::create(self.elastic)?;
        let torchrun = TorchrunJob {
            master_port: free_port()?,
            run_id: dir.run_id(),
        };
        let captured = Arc::new(Mutex::new(Vec::new()));
        let sinks = if self.capture {
            [
                Sink::Buffer(Arc::clone(&captured)),
                Sink::Buffer(Arc::clone(&captured)),
            ]
        } else {
            [Sink::Stdout, Sink::Stderr]
        };
        let mut ranks = Vec::with_capacity(self.ranks as usize);
        for rank in 0..self.ranks {
            match self.spawn(rank, &dir, &torchrun, &sinks) {
                Ok(r) => ranks.push(r),
                Err(e) => {
                    for mut r in ranks {
                        let _ = r.child.kill();
                        r.finish();
                    }
                    return Err(e);
                }
            }
        }
        let losses = self
            .elastic
            .then(|| Losses::new(dir.elastic(), self.loss_window, sinks[1].clone()));
        let mut outcome = self.wait(ranks, losses);
        match read_blame(&dir.blame()) {
            Ok(blame) => outcome.name_the_blamed(&blame),
            Err(why) => outcome.blame_unread = Some(why),
        }
        outcome.output =
            String::from_utf8_lossy(&captured.lock().unwrap_or_else(|e| e.into_inner()))
                .into_owned();
        Ok(outcome)
    }

    fn spawn(
        &self,
        rank: u32,
        dir: &RunDir,
        torchrun: &TorchrunJob,
        sinks: &[Sink; 2],
    ) -> Result<Rank> {
        let seat = self.seat(rank);
        let mut command = Command::new(&self.program);
        // SAFETY: getpid has no preconditions.
        let launcher = unsafe { libc::getpid() };
        // SAFETY: the closure runs in the child between fork and exec and calls only prctl,
        // getppid and errno-free returns, which are async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                // The rank dies with the launcher's thread; if the launcher is already gone
                // (the child was adopted before prctl), it must not start at all.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                    || libc::getppid() != launcher
                {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        for key in &self.env_removed {
            command.env_remove(key);
        }
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env(launch::RANK, rank.to_string())
            .envs(self.torchrun_variables(seat, torchrun))
            .env(launch::WORLD_SIZE, self.ranks.to_string())
            .env(launch::DEVICE, seat.local_rank.to_string())
            .env(launch::NODE, seat.node.to_string())
            .env(launch::ROOT_INFO, dir.root_info())
            .env(launch::BLAME, dir.blame());
        if self.elastic {
            command.env(launch::ELASTIC_DIR, dir.elastic());
        } else {
            // Unset, not inherited (nor set with `Job::env`): a rank of this job must not
            // take another job's directory (that of an elastic job whose rank started this
            // launcher) for its own.
            command.env_remove(launch::ELASTIC_DIR);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                let program = self.program.to_string_lossy();
                io_error(format!("cannot start {program} as rank {rank}"), e)
            })?;
        let relays = [
            child
                .stdout
                .take()
                .map(|out| relay(rank, out, sinks[0].clone())),
            child
                .stderr
                .take()
                .map(|err| relay(rank, err, sinks[1].clone())),
        ];
        Ok(Rank {
            child,
            status: None,
            relays: relays.into_iter().flatten().collect(),
        })
    }

    /// The values of [`TORCHRUN_VARIABLES`] for the rank at `seat`, in that order.
    fn torchrun_variables(&self, seat: Seat, job: &TorchrunJob) -> [(&'static str, String); 14] {
        let per_node = self.ranks / self.nodes;
        let values = [
            seat.rank.to_string(),
            self.ranks.to_string(),
            seat.local_rank.to_string(),
            per_node.to_string(),
            seat.node.to_string(),
            self.nodes.to_string(),
            "default".to_string(),
            seat.rank.to_string(),
            self.ranks.to_string(),
            "127.0.0.1".to_string(),
            job.master_port.to_string(),
            job.run_id.clone(),
            "0".to_string(),
            "0".to_string(),
        ];
        let mut named = TORCHRUN_VARIABLES.map(|name| (name, String::new()));
        for ((_, slot), value) in named.iter_mut().zip(values) {
            *slot = value;
        }
        named
    }

    /// Waits for every rank, in the order they exit, killing the rest once the grace period
    /// after the first failure has passed. The first failure is the rank whose process ended
    /// first, by the time each rank's waiter thread saw it end, not by rank number (until
    /// [`Outcome::name_the_blamed`] hears better). With `losses` (an elastic job), a failure
    /// is recorded there instead and starts no grace period, unless a termination signal is
    /// stopping the job: the ranks it ends are stopped, not lost.
    fn wait(&self, mut ranks: Vec<Rank>, mut losses: Option<Losses>) -> Outcome {
        let (exited, exits) = mpsc::channel();
        for (rank, r) in ranks.iter().enumerate() {
            let (pid, exited) = (r.child.id(), exited.clone());
            std::thread::spawn(move || {
                wait_for_exit(pid);
                let _ = exited.send(rank);
            });
        }
        drop(exited);
        let mut first_failure = None;
        let mut kill_at: Option<Instant> = None;
        let mut passed_on = false;
        let mut running = ranks.len();
        while running > 0 {
            if let Some(losses) = losses.as_mut() {
                losses.record_if_due(running);
            }
            if let (Some(signal), false) = (stopped_by(), passed_on) {
                passed_on = true;
                for r in ranks.iter().filter(|r| r.status.is_none()) {
                    // SAFETY: kill has no memory preconditions; the child is not reaped yet,
                    // so its pid is still its own.
                    unsafe { libc::kill(r.child.id() as libc::pid_t, signal) };
                }
                kill_at = kill_at.or(Some(Instant::now() + self.grace));
            }
            if SIGNALS.load(Ordering::Relaxed) >= 2 {
                // Asked twice: no more grace.
                kill_at = kill_at.map(|at| at.min(Instant::now()));
            }
            // Woken for whichever comes first: the kill, the end of a loss's window, a signal.
            let wake = [kill_at, losses.as_ref().and_then(Losses::due)];
            let poll = wake
                .into_iter()
                .flatten()
                .map(|at| at.saturating_duration_since(Instant::now()))
                .fold(SIGNAL_POLL, Duration::min);
            let next = match exits.recv_timeout(poll) {
                Err(RecvTimeoutError::Timeout) if kill_at.is_none_or(|at| Instant::now() < at) => {
                    continue;
                }
                next => next,
            };
            match next {
                Ok(rank) => {
                    let r = &mut ranks[rank];
                    // Reaped only now: until here the exited process stays a zombie, so its
                    // pid cannot be reused by a process the kill below would hit.
                    let status = r
                        .child
                        .wait()
                        .unwrap_or_else(|_| ExitStatus::from_raw(libc::SIGKILL));
                    r.status = Some(status);
                    running -= 1;
                    if status.success() {
                        continue;
                    }
                    match losses.as_mut() {
                        Some(losses) if !passed_on => {
                            first_failure = first_failure.or(Some(rank as u32));
                            losses.lose(rank as u32, r.child.id(), status);
                        }
                        _ if first_failure.is_none() => {
                            first_failure = Some(rank as u32);
                            kill_at = Some(Instant::now() + self.grace);
                        }
                        _ => {}
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    for r in ranks.iter_mut().filter(|r| r.status.is_none()) {
                        let _ = r.child.kill();
                    }
                    kill_at = None;
                }
                // Every waiter is gone: the rest are waited for in `finish`.
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let pids = ranks.iter().map(|r| r.child.id()).collect();
        let statuses = ranks.into_iter().map(Rank::finish).collect();
        let losses = losses.map_or_else(Vec::new, |mut losses| {
            // Nobody is left to wait for the window's end.
            losses.record(0);
            losses.recorded
        });
        Outcome {
            pids,
            statuses,
            first_failure,
            blamed_by: None,
            output: String::new(),
            blame_unread: None,
            elastic: self.elastic,
            losses,
        }
    }
}

/// The losses of an elastic job as they come: the loss still open (its window not yet over)
/// and the ones recorded.
struct Losses {
    /// The job's [`launch::ELASTIC_DIR`].
    dir: PathBuf,
    /// Where each loss is reported: the launcher's stderr, or the captured output.
    report: Sink,
    /// Abnormal ends within this of the first are one loss.
    window: Duration,
    /// When the ranks were started: losses are timed from here.
    started: Instant,
    /// The ranks of the open loss, in the order they ended.
    open: Vec<LostRank>,
    /// When the open loss's first rank ended.
    opened: Option<Instant>,
    /// The losses recorded, in order.
    recorded: Vec<Loss>,
}

impl Losses {
    fn new(dir: PathBuf, window: Duration, report: Sink) -> Losses {
        Losses {
            dir,
            window,
            report,
            started: Instant::now(),
            open: Vec::new(),
            opened: None,
            recorded: Vec::new(),
        }
    }

    /// Adds a rank that ended abnormally to the open loss, opening one if none is.
    fn lose(&mut self, rank: u32, pid: u32, status: ExitStatus) {
        let now = Instant::now();
        self.opened.get_or_insert(now);
        self.open.push(LostRank {
            rank,
            pid,
            status,
            at: now.duration_since(self.started),
        });
    }

    /// When the open loss is to be recorded, if one is open.
    fn due(&self) -> Option<Instant> {
        self.opened.map(|at| at + self.window)
    }

    /// Records the open loss if its window is over.
    fn record_if_due(&mut self, running: usize) {
        if self.due().is_some_and(|due| Instant::now() >= due) {
            self.record(running);
        }
    }

    /// Records the open loss, if one is open, with `running` ranks going on: writes its
    /// [`launch::lost_record`] and reports it. A record that cannot be written is reported
    /// too, and the job goes on: its ranks may still end well without it.
    fn record(&mut self, running: usize) {
        if self.open.is_empty() {
            return;
        }
        self.opened = None;
        let mut ranks = std::mem::take(&mut self.open);
        ranks.sort_by_key(|r| r.rank);
        let loss = Loss {
            number: self.recorded.len() as u32 + 1,
            at: ranks.iter().map(|r| r.at).min().unwrap_or_default(),
            ranks,
        };
        let mut report = String::new();
        if let Err(e) = write_lost_record(&self.dir, &loss) {
            let name = launch::lost_record(loss.number);
            report = format!(
                "symheap-run: elastic: cannot write {}: {e}\n",
                self.dir.join(name).display()
            );
        }
        let lost: Vec<String> = loss
            .ranks
            .iter()
            .map(|r| format!("{} (pid {}, {})", r.rank, r.pid, describe_briefly(r.status)))
            .collect();
        let going_on = match running {
            0 => "no rank goes on".to_string(),
            1 => "1 rank goes on".to_string(),
            n => format!("{n} ranks go on"),
        };
        report.push_str(&format!(
            "symheap-run: elastic: lost rank{} {}; {going_on} (loss {})\n",
            if lost.len() == 1 { "" } else { "s" },
            lost.join(", "),
            loss.number
        ));
        self.report.write_line(report.as_bytes());
        self.recorded.push(loss);
    }
}

/// Writes `loss`'s record in `dir`: its ranks, one decimal per line, ascending. Written to a
/// hidden temporary name beside it and renamed into place, because the survivors poll for
/// the record and must never read half of it.
fn write_lost_record(dir: &std::path::Path, loss: &Loss) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = launch::lost_record(loss.number);
    let temporary = dir.join(format!(".{name}.tmp"));
    // The directory is the job's, and its ranks (this user's processes) can write there:
    // whatever they left at the temporary name goes, and `create_new` neither follows a
    // link put there since nor opens a file another process holds.
    let _ = std::fs::remove_file(&temporary);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(&temporary)?;
    let text: String = loss.ranks.iter().map(|r| format!("{}\n", r.rank)).collect();
    file.write_all(text.as_bytes())?;
    drop(file);
    std::fs::rename(&temporary, dir.join(name))
}

/// What every rank of one run shares among torchrun's variables.
struct TorchrunJob {
    /// `MASTER_PORT`.
    master_port: u16,
    /// `TORCHELASTIC_RUN_ID`.
    run_id: String,
}

/// A TCP port of `127.0.0.1` that is free now: bound to port 0 and let go. Another process
/// may take it before rank 0 does, as with the port `torchrun --standalone` picks the same way.
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| io_error("cannot find a free port for MASTER_PORT", e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| io_error("cannot find a free port for MASTER_PORT", e))
}

/// Returns once process `pid`, a child of this process, has exited, leaving it unreaped
/// (`WNOWAIT`) for [`Child::wait`].
fn wait_for_exit(pid: u32) {
    loop {
        // SAFETY: `info` is a plain C struct that waitid fills; an all-zero value is valid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid only writes `info`; WNOWAIT leaves the child to be reaped by its
        // `Child`, which owns it.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// The most of the blame file the launcher reads: the first lines are the ones that matter,
/// and each process writes at most 16 short lines.
const BLAME_READ_MAX: u64 = 1 << 20;

/// The contents of the blame file at `path`, whole lines only, at most [`BLAME_READ_MAX`]
/// bytes of them; or why it is not read. The file is the launcher's, but the ranks (processes
/// of this user) can put something else in its place: a symbolic link is not followed (one to
/// `/dev/zero` would read without end), and neither a FIFO (opening it would wait for a
/// writer that may never come, and reading it for data that may never end) nor a device is
/// read.
fn read_blame(path: &std::path::Path) -> std::result::Result<String, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display();
    // O_NONBLOCK: opening a FIFO must not wait for a writer.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let file = match file {
        Ok(file) => file,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(format!(
                "the blame file {shown} was replaced by a symbolic link, which is not followed"
            ));
        }
        Err(e) => return Err(format!("cannot open the blame file {shown}: {e}")),
    };
    let kind = file
        .metadata()
        .map_err(|e| format!("cannot read the blame file {shown}: {e}"))?
        .file_type();
    if !kind.is_file() {
        return Err(format!(
            "the blame file {shown} is not a regular file (a rank put a FIFO, socket or \
             device in its place), so it is not read"
        ));
    }
    let mut bytes = Vec::new();
    file.take(BLAME_READ_MAX)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the blame file {shown}: {e}"))?;
    if bytes.len() as u64 == BLAME_READ_MAX {
        // A line cut at the limit could name another process (`123` of `1234`): drop it.
        let whole = bytes
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |end| end + 1);
        bytes.truncate(whole);
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

impl Outcome {
    /// Takes as the first failure the first failed rank that a line of `blame` (the
    /// [`launch::BLAME`] file's contents) names.
    fn name_the_blamed(&mut self, blame: &str) {
        let rank_of = |pid: &str| {
            let pid: u32 = pid.parse().ok()?;
            self.pids.iter().position(|&p| p == pid)
        };
        for line in blame.lines() {
            let mut words = line.splitn(3, ' ');
            let (Some(blamed), Some(by), why) = (words.next(), words.next(), words.next()) else {
                continue;
            };
            let Some(blamed) = rank_of(blamed).filter(|&r| !self.statuses[r].success()) else {
                continue;
            };
            self.first_failure = Some(blamed as u32);
            let by = rank_of(by).map_or_else(|| format!("process {by}"), |r| format!("rank {r}"));
            self.blamed_by = Some(format!("{by} says: {}", why.unwrap_or("failed")));
            return;
        }
    }

    /// Whether the job succeeded: every rank exited with status 0. An
    /// [elastic](Job::elastic) job succeeds if at least one rank was never lost, every rank
    /// never lost exited 0, and every lost rank was lost to a signal: a rank that exits
    /// non-zero says itself that its program failed, and the other ranks going on without
    /// it does not undo that (its loss is still recorded, so that they can go on).
    pub fn success(&self) -> bool {
        if !self.elastic {
            return self.statuses.iter().all(ExitStatus::success);
        }
        let mut survivors = self.survivors().peekable();
        survivors.peek().is_some()
            && survivors.all(|rank| self.statuses[rank as usize].success())
            && self.lost_by_exit().next().is_none()
    }

    /// Whether `rank` is among the [`losses`](Self::losses).
    pub fn lost(&self, rank: u32) -> bool {
        self.losses
            .iter()
            .any(|loss| loss.ranks.iter().any(|r| r.rank == rank))
    }

    /// The ranks never lost, ascending.
    fn survivors(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.statuses.len() as u32).filter(|&rank| !self.lost(rank))
    }

    /// The lost ranks that exited with a non-zero status (not killed by a signal).
    fn lost_by_exit(&self) -> impl Iterator<Item = &LostRank> {
        self.losses
            .iter()
            .flat_map(|loss| &loss.ranks)
            .filter(|r| r.status.code().is_some())
    }

    /// [`summary`](Self::summary) of an elastic job: each loss, the ranks never lost that
    /// failed (stopped by a signal), and the verdict.
    fn elastic_summary(&self) -> String {
        let ranks = self.statuses.len();
        if self.losses.is_empty() && self.success() {
            return format!("all {ranks} ranks succeeded");
        }
        let mut lines: Vec<String> = self
            .losses
            .iter()
            .map(|loss| {
                let ranks: Vec<String> = loss
                    .ranks
                    .iter()
                    .map(|r| format!("rank {} (pid {}), {}", r.rank, r.pid, describe(r.status)))
                    .collect();
                format!(
                    "loss {} at {:.3} s: {}",
                    loss.number,
                    loss.at.as_secs_f64(),
                    ranks.join("; ")
                )
            })
            .collect();
        for rank in self.survivors() {
            let status = self.statuses[rank as usize];
            if !status.success() {
                lines.push(format!("rank {rank} failed: {}", describe(status)));
            }
        }
        let survivors = self.survivors().count();
        if survivors == 0 {
            lines.push("every rank was lost: the job failed".to_string());
        } else if self.success() {
            lines.push(match survivors {
                1 => "the other rank succeeded".to_string(),
                n => format!("the other {n} ranks succeeded"),
            });
        }
        for r in self.lost_by_exit() {
            lines.push(format!(
                "lost rank {} ended with {}: its own failure, which fails the job",
                r.rank,
                describe(r.status)
            ));
        }
        lines.join("\n")
    }

    /// One line per rank that did not succeed, the first failure first, e.g.
    /// `rank 2 failed first: exit status 1`. For an elastic job: one line per loss, e.g.
    /// `loss 1 at 0.012 s: rank 2 (pid 1234), killed by signal 9 (SIGKILL)`, then the
    /// verdict (`the other 3 ranks succeeded`, or why the job failed).
    pub fn summary(&self) -> String {
        if self.elastic {
            return self.elastic_summary();
        }
        let mut lines = Vec::new();
        let order = self
            .first_failure
            .into_iter()
            .chain((0..self.statuses.len() as u32).filter(|&r| Some(r) != self.first_failure));
        for rank in order {
            let status = self.statuses[rank as usize];
            if status.success() {
                continue;
            }
            let mut line = format!("rank {rank} failed: {}", describe(status));
            if Some(rank) == self.first_failure {
                line = format!("rank {rank} failed first: {}", describe(status));
                if let Some(why) = &self.blamed_by {
                    line.push_str(&format!(" ({why})"));
                }
            }
            lines.push(line);
        }
        if lines.is_empty() {
            format!("all {} ranks succeeded", self.statuses.len())
        } else {
            lines.join("\n")
        }
    }
}

/// `exit status 1`, or `killed by signal 9`: [`describe`] without the signal's name, for a
/// line that already has parentheses.
fn describe_briefly(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => format!("{status}"),
    }
}

/// `exit status 1`, or `killed by signal 9 (SIGKILL)`.
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => {
            let name = match signal {
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGBUS => " (SIGBUS)",
                libc::SIGINT => " (SIGINT)",
                _ => "",
            };
            format!("killed by signal {signal}{name}")
        }
        (None, None) => format!("{status}"),
    }
}

/// One started rank.
struct Rank {
    child: Child,
    status: Option<ExitStatus>,
    relays: Vec<JoinHandle<()>>,
}

impl Rank {
    /// Waits for the process and for its output to be relayed.
    fn finish(mut self) -> ExitStatus {
        let status = match self.status {
            Some(status) => status,
            None => self
                .child
                .wait()
                .unwrap_or_else(|_| ExitStatus::from_raw(libc::SIGKILL)),
        };
        // Its output ends when the last process holding the pipes exits: normally the rank,
        // but a process the rank started may outlive it. Drain for a while, then leave.
        let drained_by = Instant::now() + Duration::from_secs(1);
        while Instant::now() < drained_by && !self.relays.iter().all(JoinHandle::is_finished) {
            std::thread::sleep(Duration::from_millis(5));
        }
        status
    }
}

/// Where a rank's output lines go.
#[derive(Clone)]
enum Sink {
    Stdout,
    Stderr,
    Buffer(Arc<Mutex<Vec<u8>>>),
}

impl Sink {
    /// Writes one whole line in one call, under the sink's lock, so that lines of different
    /// ranks never interleave and each keeps its own prefix.
    fn write_line(&self, line: &[u8]) {
        match self {
            Sink::Stdout => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(line).and_then(|()| out.flush());
            }
            Sink::Stderr => {
                let _ = std::io::stderr().lock().write_all(line);
            }
            Sink::Buffer(buffer) => buffer
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(line),
        }
    }
}

/// Copies `from` to `to` line by line, each prefixed with the rank.
fn relay(rank: u32, from: impl Read + Send + 'static, to: Sink) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut lines = BufReader::new(from);
        let prefix = format!("[rank {rank}] ");
        let mut line = prefix.clone().into_bytes();
        while matches!(lines.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            to.write_line(&line);
            line.truncate(prefix.len());
        }
    })
}

/// What run directories are called: `symheap-run-{launcher pid}-{hex}`.
const RUN_DIR_PREFIX: &str = "symheap-run-";

/// A fresh private directory for one run's root-info and blame files, removed when the run
/// ends. The launcher holds a lock on it while it lives (`flock`, which the kernel drops
/// when the process ends, however it ends): a directory whose lock is free and whose
/// launcher is gone was left by a killed launcher, and the next run removes it
/// ([`remove_stale_run_dirs`]).
struct RunDir {
    path: PathBuf,
    /// The open directory, locked: kept open until the directory is removed.
    _lock: std::fs::File,
}

impl RunDir {
    /// A new directory in the temp directory that only this user can enter, with an empty
    /// private blame file and, for an elastic job, the [`launch::ELASTIC_DIR`] (mode 0700
    /// too); the ones killed launchers of this user left are removed first.
    fn create(elastic: bool) -> Result<RunDir> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        let temp = std::env::temp_dir();
        remove_stale_run_dirs(&temp);
        let mut tries = 0;
        let path = loop {
            let nanos = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = temp.join(format!("{RUN_DIR_PREFIX}{}-{nanos:x}", std::process::id()));
            // `create`, not `create_all`: a directory someone made there first is not ours.
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => break path,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 16 => {
                    tries += 1;
                }
                Err(e) => return Err(io_error(format!("cannot create {}", path.display()), e)),
            }
        };
        let lock = match lock_dir(&path) {
            Ok(Some(lock)) => lock,
            Ok(None) => {
                let e = std::io::Error::from_raw_os_error(libc::EWOULDBLOCK);
                return Err(io_error(format!("cannot lock {}", path.display()), e));
            }
            Err(e) => {
                let _ = std::fs::remove_dir(&path);
                return Err(io_error(format!("cannot lock {}", path.display()), e));
            }
        };
        let run = RunDir { path, _lock: lock };
        // The mode asked for passes through the umask, which may only take bits away: set
        // it exactly.
        std::fs::set_permissions(&run.path, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io_error(format!("cannot restrict {}", run.path.display()), e))?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(run.blame())
            .map_err(|e| io_error(format!("cannot create {}", run.blame().display()), e))?;
        if elastic {
            let cannot = |e| io_error(format!("cannot create {}", run.elastic().display()), e);
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(run.elastic())
                .map_err(cannot)?;
            // Exactly 0700 whatever the umask, as the run directory.
            std::fs::set_permissions(run.elastic(), std::fs::Permissions::from_mode(0o700))
                .map_err(cannot)?;
        }
        Ok(run)
    }

    fn root_info(&self) -> PathBuf {
        self.path.join("root-info")
    }

    /// The run's name, unique on this machine while it runs: the directory's own name.
    fn run_id(&self) -> String {
        self.path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    }

    /// The [`launch::ELASTIC_DIR`] of an elastic job: a directory of its own in the run's,
    /// so that the survivors' files (`lost-K`, `root-K`) never meet the root info or the
    /// blame file. Removed with the run's directory, once every rank has ended.
    fn elastic(&self) -> PathBuf {
        self.path.join("elastic")
    }

    /// The [`launch::BLAME`] file, made empty by [`RunDir::create`].
    fn blame(&self) -> PathBuf {
        self.path.join("blame")
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        // Removed while still locked (the lock closes after this): no other launcher's
        // sweep takes it meanwhile.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The directory `path`, opened and locked (`flock`, exclusive), or `None` if another open
/// file holds the lock. Not through a symbolic link; closed on exec, so that no rank holds
/// the lock after its launcher died.
fn lock_dir(path: &std::path::Path) -> std::io::Result<Option<std::fs::File>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    // SAFETY: flock on a descriptor this function owns; it touches no memory.
    if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(dir));
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(None),
        _ => Err(e),
    }
}

/// The launcher pid in a run directory's name, `symheap-run-{pid}-{hex}`.
fn run_dir_pid(name: &std::ffi::OsStr) -> Option<libc::pid_t> {
    let rest = name.to_str()?.strip_prefix(RUN_DIR_PREFIX)?;
    let (pid, suffix) = rest.split_once('-')?;
    let digits = |s: &str, radix| !s.is_empty() && s.chars().all(|c| c.is_digit(radix));
    (digits(pid, 10) && digits(suffix, 16))
        .then(|| pid.parse().ok())
        .flatten()
}

/// Removes from `temp` the run directories that killed launchers of this user left behind
/// (`SIGKILL` leaves no time to remove one; it holds the root info if the ranks were still
/// joining, and the blame file). Only a directory, not a link, that this user owns with mode
/// 0700 and a run directory's name, whose launcher is no longer alive (by its pid, in this
/// PID namespace) and whose lock is free (in any namespace sharing the directory), so that
/// neither a running launcher's directory nor anything of another user is touched. Best
/// effort: what cannot be removed stays for the next run.
fn remove_stale_run_dirs(temp: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for entry in entries.flatten() {
        let Some(pid) = run_dir_pid(&entry.file_name()) else {
            continue;
        };
        // SAFETY: signal 0 only asks whether the process exists; nothing is sent.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
        let path = entry.path();
        let ours = std::fs::symlink_metadata(&path)
            .is_ok_and(|m| m.is_dir() && m.uid() == me && m.mode() & 0o7777 == 0o700);
        if alive || !ours {
            continue;
        }
        // Held until the directory is gone, so that no other sweep races this one.
        if let Ok(Some(_lock)) = lock_dir(&path) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(ranks: u32, script: &str) -> Outcome {
        Job::new(ranks, "sh")
            .args(["-c", script])
            .grace(Duration::from_millis(200))
            .run()
            .unwrap()
    }

    #[test]
    fn every_rank_sees_its_placement() {
        let outcome = sh(
            3,
            r#"test "$SYMHEAP_WORLD_SIZE" = 3 && test "$SYMHEAP_DEVICE" = "$SYMHEAP_RANK" \
               && test -n "$SYMHEAP_ROOT_INFO" && test ! -e "$SYMHEAP_ROOT_INFO" \
               && test -d "$(dirname "$SYMHEAP_ROOT_INFO")" \
               && test "$(stat -c %a "$(dirname "$SYMHEAP_ROOT_INFO")")" = 700 \
               && test "$(stat -c %a "$SYMHEAP_RUN_BLAME")" = 600"#,
        );
        assert!(outcome.success(), "{}", outcome.summary());
        assert_eq!(outcome.first_failure, None);
        assert_eq!(outcome.summary(), "all 3 ranks succeeded");
    }

    /// On 2 nodes of 3: each rank's node, local rank and device, in symheap's variables and
    /// torchrun's, follow from its global rank.
    #[test]
    fn every_rank_on_several_nodes_sees_its_node_and_local_rank() {
        let outcome = Job::on_nodes(2, 3, "sh")
            .args([
                "-c",
                r#"node=$((RANK / 3)); local=$((RANK % 3))
                   test "$RANK" = "$SYMHEAP_RANK" && test "$WORLD_SIZE" = 6 \
                   && test "$SYMHEAP_WORLD_SIZE" = 6 && test "$LOCAL_RANK" = $local \
                   && test "$SYMHEAP_DEVICE" = $local && test "$LOCAL_WORLD_SIZE" = 3 \
                   && test "$GROUP_RANK" = $node && test "$SYMHEAP_EMU_NODE" = $node \
                   && test "$GROUP_WORLD_SIZE" = 2 && test "$ROLE_RANK" = "$RANK" \
                   && test "$ROLE_WORLD_SIZE" = 6 && test "$ROLE_NAME" = default \
                   && test "$MASTER_ADDR" = 127.0.0.1 && test "$MASTER_PORT" -gt 0 \
                   && test -n "$TORCHELASTIC_RUN_ID" && test "$TORCHELASTIC_RESTART_COUNT" = 0 \
                   && echo "at $node.$local""#,
            ])
            .capture_output()
            .run()
            .unwrap();
        assert!(
            outcome.success(),
            "{}\n{}",
            outcome.summary(),
            outcome.output
        );
        for rank in 0..6 {
            let line = format!("[rank {rank}] at {}.{}", rank / 3, rank % 3);
            assert!(outcome.output.contains(&line), "{}", outcome.output);
        }
        assert!(Job::on_nodes(0, 3, "sh").run().is_err());
        assert!(Job::on_nodes(2, 0, "sh").run().is_err());
        assert!(Job::on_nodes(1 << 16, 1 << 16, "sh").run().is_err());
        let job = Job::on_nodes(4, 16, "sh");
        assert_eq!((job.ranks(), job.nodes()), (64, 4));
        assert_eq!(
            job.seat(17),
            Seat {
                rank: 17,
                node: 1,
                local_rank: 1
            }
        );
    }

    /// A rank of the second node that fails is named by its global rank.
    #[test]
    fn a_failed_rank_on_another_node_is_named_by_its_global_rank() {
        let outcome = Job::on_nodes(2, 2, "sh")
            .args([
                "-c",
                r#"if [ "$GROUP_RANK.$LOCAL_RANK" = 1.1 ]; then exit 4; fi; sleep 30"#,
            ])
            .grace(Duration::from_millis(200))
            .run()
            .unwrap();
        assert_eq!(outcome.first_failure, Some(3), "{}", outcome.summary());
        assert!(
            outcome
                .summary()
                .starts_with("rank 3 failed first: exit status 4")
        );
    }

    #[test]
    fn the_first_failure_stops_the_others_and_is_named() {
        let started = Instant::now();
        let outcome = sh(
            3,
            r#"if [ "$SYMHEAP_RANK" = 1 ]; then exit 3; fi; sleep 30"#,
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(outcome.first_failure, Some(1));
        let summary = outcome.summary();
        assert!(
            summary.starts_with("rank 1 failed first: exit status 3"),
            "{summary}"
        );
        assert!(
            summary.contains("rank 0 failed: killed by signal 9 (SIGKILL)"),
            "{summary}"
        );
    }

    /// Rank 0 fails because of rank 1, says so in the blame file, and exits long before rank 1
    /// does: rank 1 is named first, with what rank 0 said.
    #[test]
    fn a_failed_rank_its_peer_blames_is_named_first_though_it_exited_later() {
        let outcome = sh(
            3,
            r#"dir="$(dirname "$SYMHEAP_ROOT_INFO")"
               case "$SYMHEAP_RANK" in
               1) echo $$ > "$dir/pid.tmp"; mv "$dir/pid.tmp" "$dir/pid"; sleep 0.1; exit 3 ;;
               0) while [ ! -e "$dir/pid" ]; do :; done
                  echo "$(cat "$dir/pid") $$ exited" >> "$SYMHEAP_RUN_BLAME"; exit 1 ;;
               esac"#,
        );
        assert_eq!(outcome.first_failure, Some(1), "{}", outcome.summary());
        assert_eq!(outcome.blamed_by.as_deref(), Some("rank 0 says: exited"));
        let summary = outcome.summary();
        assert!(
            summary.starts_with("rank 1 failed first: ")
                && summary.contains("(rank 0 says: exited)\nrank 0 failed: exit status 1"),
            "{summary}"
        );
    }

    /// Rank 2 fails, and the others fail right after because of it: once the launcher has
    /// reaped it (they wait for its `/proc` entry to go), so that rank 2 did end first as the
    /// launcher sees it, whatever the load. The lowest failed rank, 0, is not named.
    /// (With only a few milliseconds between the exits, a loaded machine could schedule the
    /// waiter threads out of order: that made this test flaky.)
    #[test]
    fn the_rank_that_exited_first_is_named_first_not_the_lowest() {
        for _ in 0..10 {
            let outcome = sh(
                4,
                r#"gone="$(dirname "$SYMHEAP_ROOT_INFO")/gone"
                   if [ "$SYMHEAP_RANK" = 2 ]; then echo $$ > "$gone.tmp"; mv "$gone.tmp" "$gone"; exit 3; fi
                   while [ ! -e "$gone" ]; do :; done
                   pid="$(cat "$gone")"
                   while [ -e "/proc/$pid" ]; do sleep 0.001; done
                   exit 1"#,
            );
            assert_eq!(outcome.first_failure, Some(2), "{}", outcome.summary());
            assert!(
                outcome
                    .summary()
                    .starts_with("rank 2 failed first: exit status 3"),
                "{}",
                outcome.summary()
            );
        }
    }

    /// Captured lines are whole, each with its own rank's prefix, however the ranks' writes
    /// interleave.
    #[test]
    fn captured_output_keeps_every_line_whole_under_its_own_prefix() {
        let outcome = Job::new(3, "sh")
            .args(["-c", r#"i=0; while [ $i -lt 300 ]; do echo "line $SYMHEAP_RANK.$i"; echo "err $SYMHEAP_RANK.$i" >&2; i=$((i+1)); done"#])
            .capture_output()
            .run()
            .unwrap();
        assert!(outcome.success(), "{}", outcome.summary());
        let lines: Vec<&str> = outcome.output.lines().collect();
        assert_eq!(lines.len(), 3 * 300 * 2);
        for line in lines {
            let (prefix, text) = line.split_once("] ").expect("a prefix");
            let rank = prefix.strip_prefix("[rank ").expect("a rank prefix");
            let (_, rest) = text.split_once(' ').expect("a word and a number");
            assert_eq!(rest.split('.').next(), Some(rank), "{line}");
        }
    }

    /// A fresh directory for one test's files.
    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("symheap-launcher-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// What stands in the blame file's place is read only if it is a regular file, without
    /// blocking on a FIFO or following a link, and only so far.
    #[test]
    fn the_blame_file_is_read_only_if_regular_and_only_so_far() {
        let dir = scratch("blame");
        let fifo = dir.join("fifo");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let err = read_blame(&fifo).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
        let link = dir.join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let err = read_blame(&link).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        let err = read_blame(&dir.join("gone")).unwrap_err();
        assert!(err.contains("cannot open"), "{err}");
        // A file grown past the limit: the whole lines before it, no cut one.
        let big = dir.join("big");
        let line = "1234567 7654321 exited\n";
        let lines = (BLAME_READ_MAX as usize).div_ceil(line.len()) + 10;
        std::fs::write(&big, line.repeat(lines)).unwrap();
        let read = read_blame(&big).unwrap();
        assert!(
            read.len() as u64 <= BLAME_READ_MAX && read.len() > 1000,
            "{}",
            read.len()
        );
        assert!(read.lines().all(|l| l == line.trim_end()));
        std::fs::write(&big, "1 2 exited").unwrap();
        assert_eq!(read_blame(&big).unwrap(), "1 2 exited");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The sweep removes the run directories of dead launchers of this user, and nothing
    /// else: not a live launcher's, not a locked one, not one of another mode or name, not a
    /// link (nor what it points to).
    #[test]
    fn only_the_run_directories_of_dead_launchers_are_swept() {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let temp = scratch("sweep");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let live = std::process::id();
        let make = |name: String, mode: u32| {
            let path = temp.join(name);
            std::fs::DirBuilder::new().mode(mode).create(&path).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            std::fs::write(path.join("root-info"), b"key").unwrap();
            path
        };
        let stale = make(format!("symheap-run-{dead}-1a"), 0o700);
        let running = make(format!("symheap-run-{live}-1b"), 0o700);
        let open = make(format!("symheap-run-{dead}-1c"), 0o755);
        let locked = make(format!("symheap-run-{dead}-1d"), 0o700);
        let other = make(format!("symheap-run-x{dead}-1e"), 0o700);
        let target = make("target".into(), 0o700);
        let link = temp.join(format!("symheap-run-{dead}-1f"));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let lock = lock_dir(&locked).unwrap().expect("a fresh lock");
        remove_stale_run_dirs(&temp);
        assert!(!stale.exists());
        for kept in [&running, &open, &locked, &other, &target] {
            assert!(kept.join("root-info").exists(), "{}", kept.display());
        }
        assert!(link.symlink_metadata().is_ok());
        drop(lock);
        remove_stale_run_dirs(&temp);
        assert!(!locked.exists());
        assert_eq!(
            run_dir_pid(std::ffi::OsStr::new("symheap-run-12-ab")),
            Some(12)
        );
        for name in [
            "symheap-run-12",
            "symheap-run--ab",
            "symheap-run-12-",
            "symheap-run-1x-ab",
        ] {
            assert_eq!(run_dir_pid(std::ffi::OsStr::new(name)), None, "{name}");
        }
        std::fs::remove_dir_all(&temp).unwrap();
    }

    /// An elastic job of `ranks` ranks running `script`, its output captured.
    fn elastic(ranks: u32, script: &str) -> Outcome {
        elastic_within(LOSS_WINDOW, ranks, script)
    }

    /// [`elastic`] with `window` as the job's [`Job::loss_window`].
    fn elastic_within(window: Duration, ranks: u32, script: &str) -> Outcome {
        Job::new(ranks, "sh")
            .loss_window(window)
            .args(["-c", script])
            .grace(Duration::from_millis(200))
            .elastic()
            .capture_output()
            .run()
            .unwrap()
    }

    /// Shell lines that wait (up to 10 s) for the record of loss `$1` and print it as
    /// `lost-K=` and its bytes in hex, then the elastic directory's entries.
    const SHOW_RECORD: &str = r#"show() {
           i=0; while [ ! -e "$SYMHEAP_ELASTIC_DIR/lost-$1" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
           echo "lost-$1=$(od -An -tx1 "$SYMHEAP_ELASTIC_DIR/lost-$1" | tr -d ' \n')"
           echo "entries: $(ls -A "$SYMHEAP_ELASTIC_DIR" | tr '\n' ' ')"
       }
       go="$(dirname "$SYMHEAP_ROOT_INFO")/go""#;

    /// Rank 2 of 4 kills itself: the others run to their end, the job succeeds, and the
    /// record of loss 1 (`2\n`, in hex `320a`) is there for them to read.
    #[test]
    fn an_elastic_job_goes_on_without_a_killed_rank() {
        let outcome = elastic(
            4,
            &format!(
                r#"{SHOW_RECORD}
                   test "$(stat -c %a "$SYMHEAP_ELASTIC_DIR")" = 700 || exit 7
                   if [ "$SYMHEAP_RANK" = 2 ]; then kill -9 $$; fi
                   show 1; sleep 0.3; echo "rank $SYMHEAP_RANK ran to its end""#
            ),
        );
        let out = &outcome.output;
        assert!(outcome.success(), "{}\n{out}", outcome.summary());
        assert_eq!(outcome.losses.len(), 1, "{}", outcome.summary());
        let loss = &outcome.losses[0];
        assert_eq!((loss.number, loss.launch_ranks()), (1, vec![2]));
        assert_eq!(loss.ranks[0].status.signal(), Some(libc::SIGKILL));
        assert_eq!(loss.ranks[0].pid, outcome.pids[2]);
        assert!(outcome.lost(2) && !outcome.lost(0));
        for rank in [0, 1, 3] {
            assert!(outcome.statuses[rank].success());
            for line in [
                "lost-1=320a".to_string(),
                "entries: lost-1 ".to_string(),
                format!("rank {rank} ran to its end"),
            ] {
                assert!(
                    out.contains(&format!("[rank {rank}] {line}\n")),
                    "{line}: {out}"
                );
            }
        }
        let event = format!(
            "symheap-run: elastic: lost rank 2 (pid {}, killed by signal 9); 3 ranks go on \
             (loss 1)\n",
            outcome.pids[2]
        );
        assert!(out.contains(&event), "{out}");
        let summary = outcome.summary();
        assert!(
            summary.starts_with("loss 1 at ")
                && summary.contains(": rank 2 (pid ")
                && summary.contains("killed by signal 9 (SIGKILL)")
                && summary.ends_with("\nthe other 3 ranks succeeded"),
            "{summary}"
        );
    }

    /// Two ranks killed at the same moment (each as soon as rank 0 says go) and a third
    /// killed 50 ms later, well within the job's loss window (a second here, so that a
    /// loaded machine cannot split the loss), are one loss.
    #[test]
    fn ranks_lost_together_are_one_loss() {
        let outcome = elastic_within(
            Duration::from_secs(1),
            5,
            &format!(
                r#"{SHOW_RECORD}
                   case "$SYMHEAP_RANK" in
                   0) sleep 0.2; touch "$go" ;;
                   1|3) while [ ! -e "$go" ]; do sleep 0.005; done; kill -9 $$ ;;
                   4) while [ ! -e "$go" ]; do sleep 0.005; done; sleep 0.05; kill -9 $$ ;;
                   esac
                   show 1; sleep 0.3"#
            ),
        );
        let out = &outcome.output;
        assert!(outcome.success(), "{}\n{out}", outcome.summary());
        assert_eq!(outcome.losses.len(), 1, "{}", outcome.summary());
        assert_eq!(outcome.losses[0].launch_ranks(), [1, 3, 4]);
        assert!(out.contains("[rank 0] lost-1=310a330a340a\n"), "{out}");
        assert!(out.contains("[rank 2] entries: lost-1 \n"), "{out}");
        assert!(
            out.contains("symheap-run: elastic: lost ranks 1 (pid "),
            "{out}"
        );
        assert!(out.contains("; 2 ranks go on (loss 1)\n"), "{out}");
    }

    /// Ranks killed a second apart are two losses, each with its own record.
    #[test]
    fn ranks_lost_a_second_apart_are_two_losses() {
        let outcome = elastic(
            3,
            &format!(
                r#"{SHOW_RECORD}
                   case "$SYMHEAP_RANK" in
                   1) kill -9 $$ ;;
                   2) sleep 1; kill -9 $$ ;;
                   esac
                   show 1; show 2"#
            ),
        );
        let out = &outcome.output;
        assert!(outcome.success(), "{}\n{out}", outcome.summary());
        let ranks: Vec<_> = outcome.losses.iter().map(Loss::launch_ranks).collect();
        assert_eq!(ranks, [[1], [2]], "{}", outcome.summary());
        let apart = outcome.losses[1].at - outcome.losses[0].at;
        assert!(apart > LOSS_WINDOW, "{apart:?}");
        assert!(out.contains("[rank 0] lost-1=310a\n"), "{out}");
        assert!(out.contains("[rank 0] lost-2=320a\n"), "{out}");
        assert!(out.contains("[rank 0] entries: lost-1 lost-2 \n"), "{out}");
        assert!(out.contains("; 2 ranks go on (loss 1)\n"), "{out}");
        assert!(out.contains("; 1 rank goes on (loss 2)\n"), "{out}");
    }

    /// With every rank lost, no rank went on: the job failed.
    #[test]
    fn an_elastic_job_that_loses_every_rank_fails() {
        let outcome = elastic(3, "kill -9 $$");
        assert!(!outcome.success());
        assert!(
            (0..3).all(|rank| outcome.lost(rank)),
            "{}",
            outcome.summary()
        );
        assert!(
            outcome
                .summary()
                .ends_with("\nevery rank was lost: the job failed"),
            "{}",
            outcome.summary()
        );
    }

    /// Rank 2 is lost to a signal and rank 0, going on, then exits 1: the job fails (rank 0
    /// is recorded as loss 2, so that rank 1 could go on without it).
    #[test]
    fn a_survivor_that_exits_1_fails_an_elastic_job() {
        let outcome = elastic(
            3,
            &format!(
                r#"{SHOW_RECORD}
                   if [ "$SYMHEAP_RANK" = 2 ]; then kill -9 $$; fi
                   show 1
                   if [ "$SYMHEAP_RANK" = 0 ]; then exit 1; fi
                   show 2"#
            ),
        );
        let out = &outcome.output;
        assert!(!outcome.success(), "{}\n{out}", outcome.summary());
        let ranks: Vec<_> = outcome.losses.iter().map(Loss::launch_ranks).collect();
        assert_eq!(ranks, [[2], [0]], "{}", outcome.summary());
        assert_eq!(outcome.statuses[0].code(), Some(1));
        assert!(outcome.statuses[1].success());
        assert!(out.contains("[rank 1] lost-2=300a\n"), "{out}");
        assert!(
            outcome.summary().ends_with(
                "\nlost rank 0 ended with exit status 1: its own failure, which fails the job"
            ),
            "{}",
            outcome.summary()
        );
    }

    /// Without `elastic`, the first loss still ends the job, and no rank sees an elastic
    /// directory, not even one given with `env`.
    #[test]
    fn without_elastic_the_first_loss_still_ends_the_job() {
        let started = Instant::now();
        let outcome = Job::new(4, "sh")
            .args([
                "-c",
                r#"test -z "${SYMHEAP_ELASTIC_DIR+set}" || exit 7
                   if [ "$SYMHEAP_RANK" = 2 ]; then kill -9 $$; fi; sleep 30"#,
            ])
            .env(launch::ELASTIC_DIR, "/nonexistent")
            .grace(Duration::from_millis(200))
            .run()
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert!(!outcome.success() && !outcome.elastic);
        assert!(outcome.losses.is_empty());
        assert_eq!(outcome.first_failure, Some(2), "{}", outcome.summary());
        assert!(
            outcome
                .summary()
                .starts_with("rank 2 failed first: killed by signal 9 (SIGKILL)"),
            "{}",
            outcome.summary()
        );
    }

    #[test]
    fn a_program_that_cannot_start_is_an_error() {
        let err = Job::new(2, "/nonexistent/program").run().unwrap_err();
        assert!(err.to_string().contains("/nonexistent/program"), "{err}");
        let Error::Io { source, .. } = &err else {
            panic!("expected an I/O error, got {err:?}");
        };
        assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        assert!(Job::new(0, "sh").run().is_err());
    }
}
