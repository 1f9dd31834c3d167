//! Who has joined a rendezvous whose group has not formed yet: one word per rank, in a small
//! memfd that the hub writes and hands to every rank that joins. A rank whose join times out
//! reads it to name the ranks missing at that moment, without asking the hub, which may no
//! longer answer (its process stopped, say): no receive after the deadline, no guess.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::ipc::os::{self, Space};

/// A rank that has not joined.
pub(crate) const NEVER: u32 = 0;
/// A rank that has joined and waits.
pub(crate) const JOINED: u32 = 1;
/// A rank that joined and gave up (its connection closed): it came, but is not there now.
pub(crate) const GAVE_UP: u32 = 2;

/// The name of the roster's memfd (`/proc/PID/fd` links show it).
const NAME: &std::ffi::CStr = c"symheap-emu-roster";

/// One process's mapping of the roster of a group of `n` ranks.
pub(crate) struct Roster {
    space: Space,
    n: usize,
}

impl Roster {
    /// A fresh roster of `n` ranks, none joined, and its memfd.
    pub(crate) fn create(n: usize) -> io::Result<(Roster, OwnedFd)> {
        let fd = os::memfd_named(NAME, Self::size(n))?;
        Ok((Roster::map(std::os::fd::AsFd::as_fd(&fd), n)?, fd))
    }

    /// Maps the roster of `n` ranks that `fd` holds (checked as every shared memfd is).
    pub(crate) fn map(fd: BorrowedFd<'_>, n: usize) -> io::Result<Roster> {
        Ok(Roster {
            space: os::map_shared(fd, Self::size(n))?,
            n,
        })
    }

    fn size(n: usize) -> usize {
        n.max(1) * size_of::<AtomicU32>()
    }

    fn word(&self, rank: usize) -> &AtomicU32 {
        assert!(rank < self.n, "rank {rank} of a roster of {}", self.n);
        // SAFETY: the mapping holds `n` aligned words (page-aligned, 4 bytes each) and lives
        // as long as `self`; atomics make concurrent access from other processes defined.
        unsafe { &*(self.space.addr() as *const AtomicU32).add(rank) }
    }

    /// Records that `rank` is now `state` ([`JOINED`], [`GAVE_UP`]).
    pub(crate) fn set(&self, rank: u32, state: u32) {
        self.word(rank as usize).store(state, Ordering::Release);
    }

    /// The ranks other than `me` to name when a join times out: those that never came; if
    /// every rank came, those that came and gave up.
    pub(crate) fn missing(&self, me: u32) -> Vec<u32> {
        let state = |k: u32| self.word(k as usize).load(Ordering::Acquire);
        let others = (0..self.n as u32).filter(|&k| k != me);
        let never: Vec<u32> = others.clone().filter(|&k| state(k) == NEVER).collect();
        match never.is_empty() {
            true => others.filter(|&k| state(k) == GAVE_UP).collect(),
            false => never,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn a_mapped_roster_sees_the_hubs_words_and_names_who_never_came_first() {
        let (hub, fd) = Roster::create(4).unwrap();
        let rank = Roster::map(fd.as_fd(), 4).unwrap();
        assert_eq!(rank.missing(0), [1, 2, 3]);
        hub.set(0, JOINED);
        hub.set(1, GAVE_UP);
        hub.set(3, JOINED);
        assert_eq!(rank.missing(0), [2]);
        hub.set(2, JOINED);
        assert_eq!(rank.missing(0), [1]);
        assert!(
            Roster::map(fd.as_fd(), 1 << 20).is_err(),
            "mapped past its end"
        );
    }
}
