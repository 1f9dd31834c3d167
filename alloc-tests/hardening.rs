//! Who can join a job, tried as an attacker would (the threat model is in the emulator's
//! docs, *Who can join a job*): another user holding the key, processes that flood the hub
//! with connections and garbage and plant files, and a rank's `fork()`ed child.
//!
//! Tests that need a second user run as root and drop to uid 65534 with `setpriv`; without
//! root they say "skipped: needs root" (CI runs as root).

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use symheap::{Comm, CommConfig, PoolConfig, ReduceOp, RootInfo, Runtime, SymPool, SymVec};

use crate::harness::EmuSession;
use crate::processes::{failed, placement, rank_job_in};

/// The unprivileged user the attacks run as.
const NOBODY: &str = "65534";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// This test binary's ignored test `hardening::name`, as a command (run as `NOBODY` when
/// `as_nobody`).
fn this_test(name: &str, as_nobody: bool) -> Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    let test = format!("hardening::{name}");
    let mut command = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups"])
            .arg(exe);
        c
    } else {
        Command::new(exe)
    };
    command.args([
        test.as_str(),
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    command
}

/// A directory for one test's files, that `NOBODY` may read.
fn scratch(name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("symheap-hardening-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// The key leaked (a root info readable by everyone): a process of another user that tries
/// to join with it is refused by the hub, by the kernel's word on who connected, and the
/// job's own ranks then form their group.
#[test]
fn a_process_of_another_user_cannot_join_even_with_the_key() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        eprintln!("skipped: needs root (to run a process as another user)");
        return;
    }
    let _session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    let root = RootInfo::new(&rt).unwrap();
    let dir = scratch("leaked-key");
    let leaked = dir.join("root-info");
    std::fs::write(&leaked, root.as_bytes()).unwrap();
    std::fs::set_permissions(&leaked, std::fs::Permissions::from_mode(0o644)).unwrap();
    let output = this_test("rank_of_another_user", true)
        .env("SYMHEAP_TEST_LEAKED", &leaked)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{said}");
    assert!(said.contains("refused as expected"), "{said}");
    // The real ranks, as threads of this process, still join.
    let comms: Vec<symheap::Result<Comm>> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..2)
            .map(|rank| {
                let (rt, root) = (&rt, &root);
                s.spawn(move || {
                    rt.set_device(rank)?;
                    Comm::init(rt, 2, root, rank, &CommConfig::new().exec_timeout_secs(30))
                })
            })
            .collect();
        joins.into_iter().map(|j| j.join().unwrap()).collect()
    });
    for comm in comms {
        comm.unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Run as `NOBODY` by the test above: joins with the leaked key, and must be refused.
#[test]
#[ignore = "run as another user by a_process_of_another_user_cannot_join_even_with_the_key"]
fn rank_of_another_user() {
    let path = std::env::var_os("SYMHEAP_TEST_LEAKED").expect("set by the parent test");
    let bytes = std::fs::read(path).unwrap();
    let root = RootInfo::from_bytes(&bytes).unwrap();
    let rt = Runtime::emulated().unwrap();
    rt.set_device(1).unwrap();
    let joined = Comm::init(&rt, 2, &root, 1, &CommConfig::new().exec_timeout_secs(30));
    let err = joined.expect_err("another user joined the job");
    let text = err.to_string();
    assert!(text.contains("uid 65534 may not join"), "{text}");
    println!("refused as expected: {text}");
}

/// Connects a `SOCK_SEQPACKET` socket to the abstract name `name` (without the `@`).
fn connect_abstract(name: &[u8]) -> Option<OwnedFd> {
    // SAFETY: creates a fresh socket.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    if name.len() + 1 > addr.sun_path.len() {
        return None;
    }
    for (i, &b) in name.iter().enumerate() {
        addr.sun_path[i + 1] = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    let rc = unsafe {
        libc::connect(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            (&raw const addr).cast(),
            len as libc::socklen_t,
        )
    };
    (rc == 0).then_some(fd)
}

/// The emulator hubs listening on this machine, as any local user can list them.
fn hub_names() -> Vec<Vec<u8>> {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    table
        .lines()
        .filter_map(|line| line.split_whitespace().nth(7))
        .filter_map(|path| path.strip_prefix('@'))
        .filter(|name| name.starts_with("symheap-emu-"))
        .map(|name| name.as_bytes().to_vec())
        .collect()
}

/// Run by the attack test, as this user or as `NOBODY`: for `SYMHEAP_TEST_ATTACK_SECS`,
/// floods every hub it can see with connections (holding up to 1100), sends garbage on a
/// third of them, and plants files where a launcher's run directory might go.
#[test]
#[ignore = "run by a_job_completes_while_attackers_connect_send_garbage_and_plant_files"]
fn attacker() {
    let secs: u64 = std::env::var("SYMHEAP_TEST_ATTACK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let until = Instant::now() + Duration::from_secs(secs);
    let mut held: std::collections::VecDeque<OwnedFd> = Default::default();
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    let notes = std::env::var_os("SYMHEAP_TEST_NOTES").map(PathBuf::from);
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let mut round = 0u64;
    let mut connected = 0u64;
    while Instant::now() < until {
        for name in hub_names() {
            for k in 0..50 {
                let Some(fd) = connect_abstract(&name) else {
                    break;
                };
                connected += 1;
                if k % 3 == 0 {
                    let garbage = [0x01u8, 0xff, 0x00, 0x10, 0x42, 0x13];
                    // SAFETY: sends from a valid buffer on a valid socket.
                    unsafe {
                        libc::send(
                            std::os::fd::AsRawFd::as_raw_fd(&fd),
                            garbage.as_ptr().cast(),
                            garbage.len(),
                            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                        )
                    };
                }
                held.push_back(fd);
                if held.len() > 1100 {
                    held.pop_front();
                }
            }
        }
        // Decoys where a launcher started by our parent might make its run directory.
        let decoy = std::env::temp_dir().join(format!("symheap-run-{parent}-{round:x}"));
        if std::fs::create_dir(&decoy).is_ok() {
            let _ = std::fs::write(decoy.join("root-info"), [0u8; 4108]);
        }
        round += 1;
        if let Some(notes) = &notes {
            // How many connections it made, for the test to see that it attacked at all.
            // (Written beside and renamed: a reader never sees it empty.)
            let (tmp, file) = (
                notes.join(format!(".attacker-{uid}")),
                notes.join(format!("attacker-{uid}")),
            );
            if std::fs::write(&tmp, connected.to_string()).is_ok() {
                let _ = std::fs::rename(&tmp, &file);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A small job's rank: a pool, and all-reduces checked against the host.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_under_attack() -> symheap::Result<()> {
    let rank = placement();
    let notes = PathBuf::from(std::env::var_os("SYMHEAP_TEST_NOTES").expect("set by the test"));
    let before = attacked(&notes);
    let rt = Runtime::emulated()?;
    let comm = Comm::from_env(&rt, CommConfig::new().exec_timeout_secs(60))?;
    let pool = SymPool::new(&comm, PoolConfig::new(4 << 20))?;
    // The steps run once this job's hub has been attacked, at most 10 s from now.
    let until = Instant::now() + Duration::from_secs(10);
    while attacked(&notes) <= before && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    for step in 0..200 {
        let mut v = SymVec::from_host(&pool, &[(rank + step) as f32; 1024])?;
        pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
        let expected = (0..comm.rank_count())
            .map(|r| (r + step) as f32)
            .sum::<f32>();
        assert!(v.to_host()?.iter().all(|&x| x == expected), "step {step}");
    }
    pool.synchronize()
}

/// How many connections this user's attacker has made so far.
fn attacked(notes: &Path) -> u64 {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    std::fs::read_to_string(notes.join(format!("attacker-{me}")))
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Removes the decoys an attacker planted for this process.
fn remove_decoys() {
    let prefix = format!("symheap-run-{}-", std::process::id());
    for entry in std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn stop(mut attacker: Child) {
    let _ = attacker.kill();
    let _ = attacker.wait();
}

/// Jobs of 4 ranks complete, one after another, while attackers keep connecting to every
/// hub they see, sending garbage and planting files: one of this user without the key, and
/// (as root) one of another user.
#[test]
fn a_job_completes_while_attackers_connect_send_garbage_and_plant_files() {
    use std::os::unix::fs::PermissionsExt;
    let notes = scratch("attack");
    // The other user's attacker writes its count here too.
    std::fs::set_permissions(&notes, std::fs::Permissions::from_mode(0o777)).unwrap();
    let attacker = |as_nobody: bool| {
        this_test("attacker", as_nobody)
            .env("SYMHEAP_TEST_ATTACK_SECS", "60")
            .env("SYMHEAP_TEST_NOTES", &notes)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut attackers = vec![attacker(false)];
    if is_root() {
        attackers.push(attacker(true));
    } else {
        eprintln!("skipped the second user's attacker: needs root");
    }
    // Let the attackers start watching for hubs.
    std::thread::sleep(Duration::from_millis(200));
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let job = rank_job_in("hardening", 4, "rank_under_attack");
        outcomes.push(job.env("SYMHEAP_TEST_NOTES", &notes).run().unwrap());
    }
    attackers.into_iter().for_each(stop);
    remove_decoys();
    for outcome in &outcomes {
        assert!(outcome.success(), "{}", failed(outcome));
    }
    assert!(attacked(&notes) > 0, "the attacker never reached a hub");
    std::fs::remove_dir_all(&notes).unwrap();
}

/// Rank 1 of 2 forks a child that does not exec and keeps every socket and mapping of its
/// parent, and then exits while rank 0 waits for it in an AllReduce: rank 0 fails at once,
/// not at the exec timeout. The child, calling into the emulator through the inherited
/// communicator, is refused at once with a message saying why.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_that_forks() -> symheap::Result<()> {
    let rank = placement();
    let rt = Runtime::emulated()?;
    let comm = Comm::from_env(&rt, CommConfig::new().exec_timeout_secs(60))?;
    let pool = SymPool::new(&comm, PoolConfig::new(4 << 20))?;
    let mut v = SymVec::from_host(&pool, &[1.0f32; 256])?;
    pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
    pool.synchronize()?;
    let notes = PathBuf::from(std::env::var_os("SYMHEAP_TEST_NOTES").expect("set by the test"));
    if rank == 1 {
        // SAFETY: the child only calls into the emulator (which refuses at once), writes a
        // file and sleeps; it never returns into the test harness.
        let child = unsafe { libc::fork() };
        if child == 0 {
            let said = match pool.all_reduce_in_place(&mut v, ReduceOp::Sum) {
                Ok(()) => "the child's AllReduce succeeded".to_string(),
                Err(e) => format!("refused: {e}"),
            };
            let _ = std::fs::write(notes.join("child.tmp"), said);
            let _ = std::fs::rename(notes.join("child.tmp"), notes.join("child"));
            std::thread::sleep(Duration::from_secs(30));
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        std::fs::write(notes.join("grandchild"), child.to_string()).unwrap();
        wait_for(&notes.join("child"));
        std::process::exit(3);
    }
    let started = Instant::now();
    let waited = pool
        .all_reduce_in_place(&mut v, ReduceOp::Sum)
        .and_then(|()| pool.synchronize());
    let err = waited.expect_err("rank 1 is gone; its child must not stand in for it");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("exited or were killed"), "{err}");
    Ok(())
}

fn wait_for(path: &Path) {
    let until = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(Instant::now() < until, "{} did not appear", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_forked_child_neither_keeps_its_rank_alive_nor_uses_its_handles() {
    let notes = scratch("fork");
    let outcome = rank_job_in("hardening", 2, "rank_that_forks")
        .env("SYMHEAP_TEST_NOTES", &notes)
        .run()
        .unwrap();
    let grandchild: Option<i32> = std::fs::read_to_string(notes.join("grandchild"))
        .ok()
        .and_then(|p| p.trim().parse().ok());
    if let Some(pid) = grandchild {
        // SAFETY: kill has no memory preconditions; the child sleeps, waiting for this.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let child_said = std::fs::read_to_string(notes.join("child")).unwrap_or_default();
    assert!(outcome.statuses[0].success(), "{}", failed(&outcome));
    assert_eq!(outcome.statuses[1].code(), Some(3), "{}", failed(&outcome));
    assert!(
        child_said.starts_with("refused") && child_said.contains("fork()ed"),
        "{child_said}"
    );
    std::fs::remove_dir_all(&notes).unwrap();
}

/// Every memfd behind a registered window (and the staging buffers and board) is sealed
/// against shrinking: truncating one killed all 4 ranks with SIGBUS. (The seals are read, not
/// tried: other tests of this process hold memfds too.)
#[test]
fn every_emulator_memfd_is_sealed_against_shrinking() {
    // Its memfds count in the leak checks of the tests that hold the session: hold it too.
    let session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    rt.set_device(0).unwrap();
    let root = RootInfo::new(&rt).unwrap();
    let comm = Comm::init(&rt, 1, &root, 0, &CommConfig::new()).unwrap();
    let window = symheap::raw::Window::allocate(&comm, 1).unwrap();
    let mut seen = 0;
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let target = std::fs::read_link(entry.path()).unwrap_or_default();
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if !target.to_string_lossy().contains("symheap-emu") {
            continue;
        }
        // SAFETY: F_GET_SEALS only reads a property of a descriptor.
        let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
        // (An error: the descriptor was closed and reused meanwhile.)
        if seals >= 0 {
            assert_ne!(
                seals & libc::F_SEAL_SHRINK,
                0,
                "{} may shrink",
                target.display()
            );
            seen += 1;
        }
    }
    assert!(seen > 0, "no emulator memfd found");
    window.deregister().unwrap();
    drop(comm);
    session.assert_clean();
}

// ---- A pool shared by threads (issue 30, item 3) ----

/// One run of the two-thread race: on each of 2 ranks, two threads of one pool sum a vector
/// of theirs in place and read it back, while rank 1 asks for the maximum instead, so every
/// collective of the run fails (on both ranks, as soon as both have arrived). What each of
/// the 4 threads got: `Ok` with the data, or the error's text.
fn shared_pool_race(rt: &Runtime) -> Vec<Result<Vec<f32>, String>> {
    use std::sync::Barrier;
    let per_rank = symheap::emu::launch_with(rt, 2, &CommConfig::new(), |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let op = if comm.rank() == 0 {
            ReduceOp::Sum
        } else {
            ReduceOp::Max
        };
        // Allocated in one order on every rank; each thread then owns one.
        let vectors = [
            SymVec::from_host(&pool, &[1.0f32; 64])?,
            SymVec::from_host(&pool, &[1.0f32; 64])?,
        ];
        let start = Barrier::new(2);
        let got: Vec<Result<Vec<f32>, String>> = std::thread::scope(|s| {
            let threads = vectors.map(|mut v| {
                let (pool, start) = (&pool, &start);
                s.spawn(move || {
                    comm.runtime().set_device(comm.device())?;
                    start.wait();
                    pool.all_reduce_in_place(&mut v, op)?;
                    v.to_host()
                })
            });
            threads
                .map(|t| t.join().unwrap().map_err(|e| e.to_string()))
                .into()
        });
        Ok(got)
    })
    .unwrap();
    let _ = rt.take_drop_errors();
    per_rank.into_iter().flatten().collect()
}

/// Restores the emulator's rule for reporting a stream failure however a test ends.
struct ReportToEvery;

impl Drop for ReportToEvery {
    fn drop(&mut self) {
        symheap::emu::testing::report_failures_to_one(false);
    }
}

/// Runs the two-thread race `runs` times under each rule for reporting a stream failure
/// (the emulator's, to every waiter, and CANN's, to one), and fails if any thread got `Ok`:
/// it would have read the unreduced input as the collective's result.
fn no_thread_of_a_shared_pool_gets_ok(runs: usize) {
    let session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    let _restore = ReportToEvery;
    let mut wrong = Vec::new();
    for to_one in [false, true] {
        symheap::emu::testing::report_failures_to_one(to_one);
        for run in 0..runs {
            for (thread, got) in shared_pool_race(&rt).into_iter().enumerate() {
                if let Ok(data) = got {
                    let rule = if to_one { "to one" } else { "to every" };
                    wrong.push(format!(
                        "reported {rule}, run {run}, thread {thread}: Ok({:?}..)",
                        &data[..2]
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} threads got Ok for a failed collective: {wrong:?}",
        wrong.len(),
        2 * 4 * runs
    );
    session.assert_clean();
}

/// Two threads of one pool, a collective of each failing: neither `all_reduce_in_place` +
/// `to_host` returns `Ok`, whether the runtime reports the failure to both synchronizes (the
/// emulator) or to one (CANN). A second thread's synchronize used to return `Ok`, and its
/// `to_host` the unreduced value, in 4 of 18 runs.
#[test]
fn no_thread_of_a_shared_pool_gets_ok_for_a_collective_that_failed() {
    no_thread_of_a_shared_pool_gets_ok(100);
}

/// The issue's bar: 1000 runs of the two-thread race under each rule, none `Ok`.
#[test]
#[ignore = "2 x 1000 runs (about 5 s): run by hand with --ignored"]
fn no_thread_of_a_shared_pool_gets_ok_in_1000_runs() {
    no_thread_of_a_shared_pool_gets_ok(1000);
}

/// A launcher's job whose rank 1 puts `what` (a shell command, given the blame file's path in
/// `$B`) in place of the blame file and fails: the outcome, once the launcher ends, which
/// must be within 20 s.
fn job_whose_rank_replaces_the_blame_file(what: &str) -> symheap_tools::launcher::Outcome {
    let script = format!(
        r#"B="$SYMHEAP_RUN_BLAME"
           if [ "$SYMHEAP_RANK" = 1 ]; then rm -f "$B" && {what} || exit 9; exit 3; fi"#
    );
    let job = symheap_tools::launcher::Job::new(2, "sh")
        .args(["-c", script.as_str()])
        .grace(Duration::from_secs(1));
    let (done, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // (The test ends at the timeout below if the launcher hangs: nobody receives then.)
        let _ = done.send(job.run());
    });
    outcome
        .recv_timeout(Duration::from_secs(20))
        .expect("the launcher hangs after the job")
        .unwrap()
}

/// A rank (a process of the job's own user) replaces the launcher's blame file with a FIFO
/// nobody writes, or with a symbolic link: the launcher neither waits for a writer (it hung
/// after the job, deaf to SIGTERM) nor follows the link (one to /dev/zero read without end,
/// see `symheap-tools/tests/symheap_run.rs`); it names the failed rank by exit order and
/// says why it read no blame.
#[test]
fn a_rank_that_replaces_the_blame_file_cannot_hang_or_mislead_the_launcher() {
    let outcome = job_whose_rank_replaces_the_blame_file(r#"mkfifo "$B""#);
    assert_eq!(outcome.first_failure, Some(1), "{}", failed(&outcome));
    let why = outcome.blame_unread.unwrap_or_default();
    assert!(why.contains("not a regular file"), "{why}");
    // A link to a file blaming a process that is no rank of the job.
    let outcome = job_whose_rank_replaces_the_blame_file(
        r#"echo "1 1 exited" > "$B.x" && ln -s "$B.x" "$B""#,
    );
    assert_eq!(outcome.first_failure, Some(1), "{}", failed(&outcome));
    let why = outcome.blame_unread.unwrap_or_default();
    assert!(why.contains("symbolic link"), "{why}");
}
