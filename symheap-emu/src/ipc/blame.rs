//! Telling a launcher whom a failure blames. A rank's process usually ends *after* the peers
//! that fail because of it (they fail within a millisecond of its destroy or of its sockets
//! closing, and exit while it still unwinds), so a launcher that watches only exits names the
//! wrong rank first. When the launcher sets [`BLAME_ENV`] to a file it made, each rank that
//! fails on a peer appends one line naming the process it blames, in the order the failures
//! happen: the launcher names the first blamed process that also failed.
//!
//! A step fails on the ranks that never came (a timeout), that destroyed their communicator or
//! whose processes ended; a deadlock blames the ranks at the step the fewest ranks wait at, when
//! one step is that (the odd one out: one rank deregistering while three run a collective), and
//! nobody otherwise.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

// The variable a launcher sets to the file that collects the blame (`symheap-run` does).
use symheap_types::launch::BLAME as BLAME_ENV;

/// At most this many lines from one process: the first failures are the ones that matter.
const MAX_LINES: u32 = 16;

static LINES: AtomicU32 = AtomicU32::new(0);

/// Appends `blamed pid, this pid, why` to the launcher's blame file, if there is one. Best
/// effort: a failure that cannot be told is still returned to the caller as before.
pub(crate) fn blame(blamed: &[u32], why: &str) {
    let Some(path) = std::env::var_os(BLAME_ENV) else {
        return;
    };
    if blamed.is_empty() || LINES.fetch_add(1, Ordering::Relaxed) >= MAX_LINES {
        return;
    }
    let mut line = String::new();
    for pid in blamed {
        line.push_str(&format!("{pid} {} {why}\n", std::process::id()));
    }
    let _ = append(Path::new(&path), &line);
}

/// Appends `lines` to the launcher's blame file at `path`, if that is a regular file: an
/// error, without waiting, for anything else in its place.
fn append(path: &Path, lines: &str) -> std::io::Result<()> {
    // The file is the launcher's: never create one, never follow a link planted there, never
    // wait for a reader of a FIFO put there (O_NONBLOCK, which a regular file ignores).
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    // A FIFO with a reader opens; writing to it could still wait for room, or feed whoever
    // reads it.
    if !file.metadata()?.file_type().is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    // One write of a few short lines to a file opened with O_APPEND: lines of different
    // processes do not interleave.
    file.write_all(lines.as_bytes())
}

/// The smallest group of ranks that wait at the same step, if exactly one group is that small
/// and there are several groups: `waits` are `(rank, where)`.
pub(crate) fn odd_ones_out<W: PartialEq + Copy>(waits: &[(usize, W)]) -> Vec<u32> {
    let mut groups: Vec<(W, Vec<u32>)> = Vec::new();
    for &(rank, at) in waits {
        match groups.iter_mut().find(|g| g.0 == at) {
            Some(g) => g.1.push(rank as u32),
            None => groups.push((at, vec![rank as u32])),
        }
    }
    let Some(fewest) = groups.iter().map(|g| g.1.len()).min() else {
        return Vec::new();
    };
    let mut smallest = groups.iter().filter(|g| g.1.len() == fewest);
    match (groups.len() > 1, smallest.next(), smallest.next()) {
        (true, Some(g), None) => g.1.clone(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::PathBuf;
    use std::time::Duration;

    use super::{append, odd_ones_out};

    /// A fresh directory for one test's files.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("symheap-emu-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// `append(path, ..)`'s result, if it returns within 2 s.
    fn append_within_2_s(path: PathBuf) -> Option<std::io::Result<()>> {
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(append(&path, "1 2 exited\n")));
        result.recv_timeout(Duration::from_secs(2)).ok()
    }

    /// A rank writes its blame only to the launcher's regular file: not through a link
    /// planted in its place, and not into a FIFO, whether or not anyone reads it (opening one
    /// nobody reads would wait for a reader, and writing one whose reader stopped would wait
    /// for room).
    #[test]
    fn blame_goes_only_to_a_regular_file_and_never_waits() {
        let dir = scratch("blame-writer");
        let fifo = dir.join("fifo");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let alone = append_within_2_s(fifo.clone()).expect("waited for a reader of the FIFO");
        assert!(alone.is_err());
        // A reader that never reads.
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let read = append_within_2_s(fifo).expect("waited on the FIFO");
        assert!(read.is_err(), "wrote into a FIFO");
        drop(reader);
        let target = dir.join("target");
        std::fs::write(&target, "").unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(append_within_2_s(link).unwrap().is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
        append_within_2_s(target.clone()).unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "1 2 exited\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_deadlock_blames_the_one_step_fewest_ranks_wait_at() {
        assert_eq!(odd_ones_out(&[(0, 6), (1, 6), (2, 3), (3, 6)]), vec![2]);
        assert_eq!(
            odd_ones_out(&[(0, 6), (1, 3), (2, 3), (3, 6), (4, 6)]),
            vec![1, 2]
        );
        // A tie, or everyone at one step: nobody stands out.
        assert!(odd_ones_out(&[(0, 6), (1, 3)]).is_empty());
        assert!(odd_ones_out(&[(0, 6), (1, 6)]).is_empty());
        assert!(odd_ones_out::<u64>(&[]).is_empty());
    }
}
