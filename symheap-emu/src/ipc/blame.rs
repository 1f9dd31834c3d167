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
    // The file is the launcher's: never create one, never follow a link planted there.
    let file = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    // One write of a few short lines to a file opened with O_APPEND: lines of different
    // processes do not interleave.
    if let Ok(mut file) = file {
        let _ = file.write_all(line.as_bytes());
    }
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
    use super::odd_ones_out;

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
