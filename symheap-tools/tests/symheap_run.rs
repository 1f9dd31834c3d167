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
    // SIGKILL cannot be handled: the empty private directory is all that stays.
    let _ = std::fs::remove_dir_all(&run_dir);
    std::fs::remove_dir_all(&notes).unwrap();
}
