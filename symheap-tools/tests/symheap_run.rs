//! `symheap-run` itself, killed: its ranks must not outlive it, and a signal it can handle
//! also removes its run directory (which held the root info).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A fresh directory for one test's notes from the ranks.
fn notes(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("symheap-run-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `symheap-run -n 3` of ranks that note their pid and run directory in `notes`, then sleep.
fn start(notes: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_symheap-run"))
        .args(["-n", "3", "--grace", "1", "sh", "-c"])
        .arg(
            r#"dirname "$SYMHEAP_ROOT_INFO" > "$NOTES/dir.$SYMHEAP_RANK"
               echo $$ > "$NOTES/pid.tmp.$SYMHEAP_RANK"
               mv "$NOTES/pid.tmp.$SYMHEAP_RANK" "$NOTES/pid.$SYMHEAP_RANK"
               exec sleep 60"#,
        )
        .env("NOTES", notes)
        .spawn()
        .unwrap()
}

/// Every rank's pid and the run directory, once every rank has noted them.
fn ranks_of(notes: &Path) -> (Vec<i32>, PathBuf) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let pids: Vec<i32> = (0..3)
            .filter_map(|r| std::fs::read_to_string(notes.join(format!("pid.{r}"))).ok())
            .filter_map(|p| p.trim().parse().ok())
            .collect();
        if pids.len() == 3 {
            let dir = std::fs::read_to_string(notes.join("dir.0")).unwrap();
            return (pids, PathBuf::from(dir.trim()));
        }
        assert!(Instant::now() < until, "the ranks did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether process `pid` still runs (a zombie does not).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn all_gone_soon(pids: &[i32]) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if !pids.iter().any(|&p| running(p)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn a_terminated_launcher_stops_its_ranks_and_removes_its_directory() {
    let notes = notes("term");
    let mut launcher = start(&notes);
    let (pids, run_dir) = ranks_of(&notes);
    assert!(run_dir.is_dir());
    // SAFETY: kill has no memory preconditions; the launcher is our unreaped child.
    unsafe { libc::kill(launcher.id() as i32, libc::SIGTERM) };
    let status = launcher.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status}");
    assert!(all_gone_soon(&pids), "ranks outlived the launcher");
    assert!(!run_dir.exists(), "{} is left behind", run_dir.display());
    std::fs::remove_dir_all(&notes).unwrap();
}

#[test]
fn the_ranks_of_a_killed_launcher_die_with_it() {
    let notes = notes("kill");
    let mut launcher = start(&notes);
    let (pids, run_dir) = ranks_of(&notes);
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    assert!(all_gone_soon(&pids), "ranks outlived the launcher");
    // SIGKILL cannot be handled: the private directory stays, until the next run (see
    // `a_launcher_killed_during_the_join_leaves_a_directory_the_next_run_removes`).
    let _ = std::fs::remove_dir_all(&run_dir);
    std::fs::remove_dir_all(&notes).unwrap();
}

/// `symheap-run -n N --grace 1 sh -c SCRIPT`, its output piped and its address space capped
/// at 4 GiB (inherited by the ranks), so that a launcher reading without bound fails here
/// instead of taking the machine's memory.
fn start_script(ranks: u32, script: &str, notes: &Path) -> Child {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(env!("CARGO_BIN_EXE_symheap-run"));
    command
        .args(["-n", &ranks.to_string(), "--grace", "1", "sh", "-c", script])
        .env("NOTES", notes)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: the closure runs between fork and exec and only calls setrlimit, which is
    // async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            let cap = libc::rlimit {
                rlim_cur: 4 << 30,
                rlim_max: 4 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &cap) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn().unwrap()
}

/// Waits up to `limit` for `child` to exit on its own.
fn exit_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The launcher's exit status and stderr once it ended on its own within 20 s. Otherwise it
/// is sent SIGTERM, then killed, and the test fails saying whether SIGTERM stopped it.
fn ends_on_its_own(mut launcher: Child) -> (std::process::ExitStatus, String) {
    use std::io::Read;
    let Some(status) = exit_within(&mut launcher, Duration::from_secs(20)) else {
        // SAFETY: kill has no memory preconditions; the launcher is our unreaped child.
        unsafe { libc::kill(launcher.id() as i32, libc::SIGTERM) };
        let stopped = exit_within(&mut launcher, Duration::from_secs(5));
        let _ = launcher.kill();
        let _ = launcher.wait();
        panic!(
            "symheap-run did not end within 20 s of its job; SIGTERM then {}",
            match stopped {
                Some(status) => format!("stopped it ({status})"),
                None => "did not stop it either (killed)".into(),
            }
        );
    };
    let mut stderr = String::new();
    if let Some(mut err) = launcher.stderr.take() {
        err.read_to_string(&mut stderr).unwrap();
    }
    (status, stderr)
}

/// A rank replaces the blame file with a FIFO that nobody writes: the launcher neither waits
/// for a writer nor ignores SIGTERM; it ends with the job, saying why it read no blame.
#[test]
fn a_fifo_in_place_of_the_blame_file_neither_hangs_nor_deafens_the_launcher() {
    let notes = notes("fifo");
    let launcher = start_script(
        2,
        r#"if [ "$SYMHEAP_RANK" = 0 ]; then rm -f "$SYMHEAP_RUN_BLAME" && mkfifo "$SYMHEAP_RUN_BLAME" || exit 9; fi"#,
        &notes,
    );
    let (status, stderr) = ends_on_its_own(launcher);
    assert_eq!(status.code(), Some(0), "{status}: {stderr}");
    assert!(
        stderr.contains("blame file") && stderr.contains("not a regular file"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&notes).unwrap();
}

/// A rank replaces the blame file with a link to /dev/zero and fails: the launcher does not
/// follow the link (it read without bound), names the failed rank by exit order and says why
/// it read no blame.
#[test]
fn a_link_in_place_of_the_blame_file_is_not_followed() {
    let notes = notes("zero");
    let launcher = start_script(
        2,
        r#"if [ "$SYMHEAP_RANK" = 1 ]; then rm -f "$SYMHEAP_RUN_BLAME" && ln -s /dev/zero "$SYMHEAP_RUN_BLAME" || exit 9; exit 3; fi"#,
        &notes,
    );
    let (status, stderr) = ends_on_its_own(launcher);
    assert_eq!(status.code(), Some(1), "{status}: {stderr}");
    assert!(
        stderr.contains("rank 1 failed first: exit status 3"),
        "{stderr}"
    );
    assert!(
        stderr.contains("blame file") && stderr.contains("symbolic link"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&notes).unwrap();
}

/// One rank of [`a_launcher_terminated_during_the_join_leaves_nothing_behind`] and of
/// [`a_launcher_killed_during_the_join_leaves_a_directory_the_next_run_removes`]: ranks 0
/// and 1 join a communicator of 3 on the emulator, rank 2 never comes, so the join lasts
/// until the launcher is stopped.
#[test]
#[ignore = "one rank of a launcher test"]
fn rank_in_a_join() {
    let notes = PathBuf::from(std::env::var_os("NOTES").expect("set by the test"));
    let rank: u32 = std::env::var("SYMHEAP_RANK").unwrap().parse().unwrap();
    let root_info = PathBuf::from(std::env::var_os("SYMHEAP_ROOT_INFO").unwrap());
    let dir = root_info.parent().unwrap();
    std::fs::write(
        notes.join(format!("dir.{rank}")),
        dir.as_os_str().as_encoded_bytes(),
    )
    .unwrap();
    std::fs::write(
        notes.join(format!("pid.tmp.{rank}")),
        std::process::id().to_string(),
    )
    .unwrap();
    std::fs::rename(
        notes.join(format!("pid.tmp.{rank}")),
        notes.join(format!("pid.{rank}")),
    )
    .unwrap();
    if rank == 2 {
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let rt = symheap::Runtime::emulated().unwrap();
    let config = symheap::CommConfig::new().exec_timeout_secs(60);
    let joined = symheap::Comm::from_env(&rt, config);
    panic!("the join ended: {:?}", joined.map(|_| ()));
}

/// The temp directory of the launchers of the test whose notes are in `notes`: their own,
/// so that no launcher of another test (which removes what killed launchers left) removes
/// what a killed one of this test left before the test looks at it.
fn own_temp_dir(notes: &Path) -> PathBuf {
    let temp = notes.join("tmp");
    std::fs::create_dir_all(&temp).unwrap();
    temp
}

/// `symheap-run -n 3` of [`rank_in_a_join`], once every rank has started and rank 0 has
/// published the root info: the launcher, every rank's pid and the run directory.
fn start_a_join(notes: &Path) -> (Child, Vec<i32>, PathBuf) {
    let launcher = Command::new(env!("CARGO_BIN_EXE_symheap-run"))
        .env("TMPDIR", own_temp_dir(notes))
        .args(["-n", "3", "--grace", "1"])
        .arg(std::env::current_exe().unwrap())
        .args(["rank_in_a_join", "--exact", "--ignored", "--nocapture"])
        .arg("--test-threads=1")
        .env("NOTES", notes)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (pids, run_dir) = ranks_of(notes);
    let until = Instant::now() + Duration::from_secs(20);
    while !run_dir.join("root-info").exists() {
        assert!(
            Instant::now() < until,
            "rank 0 did not publish the root info"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    (launcher, pids, run_dir)
}

#[test]
fn a_launcher_terminated_during_the_join_leaves_nothing_behind() {
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let notes = notes(&format!("join-{signal}"));
        let (mut launcher, pids, run_dir) = start_a_join(&notes);
        // SAFETY: kill has no memory preconditions; the launcher is our unreaped child.
        unsafe { libc::kill(launcher.id() as i32, signal) };
        let status = exit_within(&mut launcher, Duration::from_secs(20));
        let _ = launcher.kill();
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(128 + signal),
            "signal {signal}: {status:?}"
        );
        assert!(all_gone_soon(&pids), "ranks outlived the launcher");
        assert!(!run_dir.exists(), "{} is left behind", run_dir.display());
        std::fs::remove_dir_all(&notes).unwrap();
    }
}

/// SIGKILL cannot be handled: the run directory stays (the root info in it, since the ranks
/// were still joining) until the next `symheap-run` of this user removes it.
#[test]
fn a_launcher_killed_during_the_join_leaves_a_directory_the_next_run_removes() {
    let notes = notes("join-kill");
    let (mut launcher, pids, run_dir) = start_a_join(&notes);
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    assert!(all_gone_soon(&pids), "ranks outlived the launcher");
    assert!(run_dir.join("root-info").exists());
    let next = Command::new(env!("CARGO_BIN_EXE_symheap-run"))
        .env("TMPDIR", own_temp_dir(&notes))
        .args(["-n", "1", "true"])
        .status()
        .unwrap();
    assert!(next.success());
    let left = run_dir.exists();
    let _ = std::fs::remove_dir_all(&run_dir);
    assert!(!left, "the next run left {} behind", run_dir.display());
    std::fs::remove_dir_all(&notes).unwrap();
}

/// Ranks that ignore SIGTERM, under a grace period of a minute: a second SIGTERM to the
/// launcher ends the grace period, so the ranks are killed and the launcher ends at once.
#[test]
fn a_second_signal_ends_the_grace_period() {
    let notes = notes("twice");
    let mut launcher = Command::new(env!("CARGO_BIN_EXE_symheap-run"))
        .args(["-n", "2", "--grace", "60", "sh", "-c"])
        .arg(
            r#"trap '' TERM
               echo $$ > "$NOTES/pid.tmp.$SYMHEAP_RANK"
               mv "$NOTES/pid.tmp.$SYMHEAP_RANK" "$NOTES/pid.$SYMHEAP_RANK"
               while :; do sleep 0.05; done"#,
        )
        .env("NOTES", &notes)
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while !(0..2).all(|r| notes.join(format!("pid.{r}")).exists()) {
        assert!(Instant::now() < until, "the ranks did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill has no memory preconditions; the launcher is our unreaped child.
    unsafe { libc::kill(launcher.id() as i32, libc::SIGTERM) };
    let first = exit_within(&mut launcher, Duration::from_millis(500));
    assert_eq!(
        first, None,
        "the ranks ignore SIGTERM: the grace period runs"
    );
    // SAFETY: as above.
    unsafe { libc::kill(launcher.id() as i32, libc::SIGTERM) };
    let second = exit_within(&mut launcher, Duration::from_secs(10));
    let _ = launcher.kill();
    let _ = launcher.wait();
    assert_eq!(
        second.and_then(|s| s.code()),
        Some(128 + libc::SIGTERM),
        "{second:?}"
    );
    std::fs::remove_dir_all(&notes).unwrap();
}

/// SIGTERM at any point of a launcher's life, from its start to its ranks' run: it ends
/// within its grace period (or at once, before it set its handlers), and leaves no run
/// directory behind.
#[test]
fn a_launcher_terminated_at_any_point_ends_and_leaves_nothing_behind() {
    for delay_ms in (0..=120).step_by(8) {
        let mut launcher = Command::new(env!("CARGO_BIN_EXE_symheap-run"))
            .args(["-n", "2", "--grace", "1", "sh", "-c", "exec sleep 30"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SAFETY: kill has no memory preconditions; the launcher is our unreaped child.
        unsafe { libc::kill(launcher.id() as i32, libc::SIGTERM) };
        let status = exit_within(&mut launcher, Duration::from_secs(10));
        let _ = launcher.kill();
        let _ = launcher.wait();
        let status = status.unwrap_or_else(|| panic!("still running {delay_ms} ms in"));
        use std::os::unix::process::ExitStatusExt;
        assert!(
            status.code() == Some(128 + libc::SIGTERM) || status.signal() == Some(libc::SIGTERM),
            "{delay_ms} ms in: {status}"
        );
        let prefix = format!("symheap-run-{}-", launcher.id());
        let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "{delay_ms} ms in: left {left:?}");
    }
}

/// `symheap-run --elastic`: rank 1 of 3 is killed, the launcher says so on stderr, the others
/// run to their end and read the record, and the job succeeds.
#[test]
fn an_elastic_launcher_reports_its_loss_and_goes_on() {
    let output = Command::new(env!("CARGO_BIN_EXE_symheap-run"))
        .args(["--elastic", "-n", "3", "--", "sh", "-c"])
        .arg(
            r#"if [ "$SYMHEAP_RANK" = 1 ]; then kill -9 $$; fi
               i=0; while [ ! -e "$SYMHEAP_ELASTIC_DIR/lost-1" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
               echo "lost: $(cat "$SYMHEAP_ELASTIC_DIR/lost-1")""#,
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}: {stderr}", output.status);
    assert!(
        stderr.contains("symheap-run: elastic: lost rank 1 (pid ")
            && stderr.contains(", killed by signal 9); 2 ranks go on (loss 1)"),
        "{stderr}"
    );
    for rank in [0, 2] {
        assert!(
            stdout.contains(&format!("[rank {rank}] lost: 1\n")),
            "{stdout}"
        );
    }
}
