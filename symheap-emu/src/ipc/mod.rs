//! The plumbing between ranks, whether threads or processes: system calls (memfds, mappings,
//! futexes), sockets and messages, the rendezvous hub and a rank's end of it, the names and
//! keys of rendezvous (derived from the job's secret), who a step waits for, the shared board
//! on which the ranks meet at every collective step, and where each rank's host threads wait
//! (for the deadlock check).

pub(crate) mod attendance;
pub(crate) mod blame;
pub(crate) mod board;
pub(crate) mod host_threads;
pub(crate) mod hub;
pub(crate) mod hub_watch;
pub(crate) mod keyed;
pub(crate) mod os;
pub(crate) mod rendezvous;
pub(crate) mod roster;
pub(crate) mod wire;
