//! Telling a process's ranks at once that the rendezvous hub's process has ended.
//!
//! The hub records every other rank's end on the board and wakes the ranks waiting there;
//! its own end nobody records. A rank waiting on the board looks at the hub only when its
//! wait's slice ends (up to 100 ms, kept long so that waiting costs no CPU), so the survivors
//! of the hub's process learned of its loss up to 100 ms late. A thread per rendezvous (a
//! rank's end of a communicator) sleeps in `poll` on the hub's pidfd instead, and wakes the
//! board's waiters when it ends.

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use crate::ipc::board::Board;
use crate::ipc::wire::poll_readable;

/// The watch; it ends when dropped.
pub(crate) struct HubWatch {
    /// Written to on drop: its peer, which the thread polls too, then reads as readable. (Not
    /// only closed: a child `fork()`ed since may hold it open.)
    stop: UnixStream,
}

impl HubWatch {
    /// Watches the process of `pidfd` (the hub's) and notifies `board` when it ends. `None`
    /// if a descriptor or the thread cannot be had: the waits' slices then tell, later.
    pub(crate) fn start(pidfd: BorrowedFd<'_>, board: Arc<Board>) -> Option<HubWatch> {
        let pidfd = pidfd.try_clone_to_owned().ok()?;
        let (stop, stopped) = UnixStream::pair().ok()?;
        std::thread::Builder::new()
            .name("symheap-hubwatch".into())
            .spawn(move || {
                let fds = [pidfd.as_fd(), stopped.as_fd()];
                loop {
                    match poll_readable(&fds, Duration::from_secs(3600)) {
                        Ok(ready) if ready.contains(&0) => return board.notify(),
                        Ok(ready) if ready.contains(&1) => return,
                        Ok(_) => continue,
                        Err(_) => return,
                    }
                }
            })
            .ok()?;
        Some(HubWatch { stop })
    }
}

impl Drop for HubWatch {
    fn drop(&mut self) {
        let _ = self.stop.write_all(&[1]);
    }
}
