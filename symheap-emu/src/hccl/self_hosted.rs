//! A rendezvous that its first member to arrive hosts: the members of a sub-communicator
//! ([`crate::hccl::sub_comm`]) and the ranks of a rank-table job
//! ([`crate::hccl::cluster_info`]) have no root info, so each tries to bind the hub's name
//! and whoever binds it runs the hub in its process; the others find the name bound, check
//! that a process of an admitted user listens there before they send anything, and join.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::sys::HcclResult;

use crate::base::errors::{HcclRes, hccl_fail, para};
use crate::hccl::comm::{self, Meeting};
use crate::ipc::hub;
use crate::ipc::rendezvous::{JoinError, Rendezvous, deadline};

/// What the failures of one kind of self-hosted rendezvous say.
pub(crate) struct Purpose {
    /// The rendezvous, as a message names it ("the sub-communicator's rendezvous").
    pub(crate) what: &'static str,
    /// What the caller can do when another process holds the name.
    pub(crate) remedy: &'static str,
    /// A group of the same name still formed elsewhere ("a sub-communicator of the same name").
    pub(crate) same: &'static str,
}

/// How long a member waits between tries when the hub's name is bound but not yet listening,
/// or was just released.
const RETRY: Duration = Duration::from_millis(2);
/// How long the hub's name may stay bound by a socket that does not listen: a member binds
/// and listens at once, so past this it is a process that only holds the name.
const BOUND_NOT_LISTENING: Duration = Duration::from_secs(2);

/// Hosts the members' rendezvous at `meeting` if no member has yet (binding its name), then
/// joins it as `rank` of `n` at `place` (its topology word), sharing `staging`, waiting up to `timeout` in all.
pub(crate) fn serve_or_join(
    meeting: &Meeting,
    n: u32,
    rank: u32,
    place: u64,
    staging: BorrowedFd<'_>,
    timeout: Duration,
    purpose: &Purpose,
) -> HcclRes<(Rendezvous, Vec<OwnedFd>)> {
    let Purpose { what, remedy, same } = purpose;
    let until = deadline(timeout);
    // Since when the name has been bound by a socket that refuses connections.
    let mut refused_since = None;
    loop {
        let taken = match hub::start(&meeting.name, meeting.session) {
            Ok(()) => false,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => true,
            Err(e) => {
                return hccl_fail(
                    HcclResult::HCCL_E_SYSCALL,
                    format!("cannot start {what}: {e}"),
                );
            }
        };
        let left = until.saturating_duration_since(Instant::now());
        let joined = Rendezvous::join(
            &meeting.name,
            &meeting.session,
            n,
            rank,
            place,
            staging,
            left,
            None,
        );
        let refused = matches!(&joined, Err(JoinError::Unreachable(e))
            if taken && e.kind() == std::io::ErrorKind::ConnectionRefused);
        refused_since = match refused {
            true => refused_since.or_else(|| Some(Instant::now())),
            false => None,
        };
        match joined {
            Err(JoinError::Stranger { pid, uid }) => {
                return hccl_fail(
                    HcclResult::HCCL_E_TCP_CONNECT,
                    format!(
                        "rank {rank}: {}: {remedy}",
                        comm::held_by_stranger(pid, uid)
                    ),
                );
            }
            Err(JoinError::Unreachable(_))
                if refused_since.is_some_and(|t| t.elapsed() > BOUND_NOT_LISTENING) =>
            {
                return hccl_fail(
                    HcclResult::HCCL_E_TCP_CONNECT,
                    format!(
                        "rank {rank}: {what} name has been bound for \
                         {:.0} s by a socket that takes no connections (a process that only \
                         holds the name, maybe another user's): {remedy}",
                        BOUND_NOT_LISTENING.as_secs_f64()
                    ),
                );
            }
            // Bound but not listening yet, or its last member just left (it may close a join
            // as it ends): try again. A formed group of the same name is one whose members
            // are destroying it (their queued work may hold it a while) or one still in use:
            // wait for it to go.
            Err(JoinError::Unreachable(_) | JoinError::Closed | JoinError::Formed)
                if !left.is_zero() =>
            {
                std::thread::sleep(RETRY)
            }
            Err(JoinError::Formed) => {
                return para(format!(
                    "rank {rank} waited {:.1} s for {same} to be destroyed on every member: \
                     {remedy}",
                    timeout.as_secs_f64()
                ));
            }
            Err(JoinError::Refused(why)) => {
                return para(format!("{what} refused rank {rank}: {why}"));
            }
            Err(e) => return comm::join_failed(e, rank, timeout),
            Ok(joined) => return Ok(joined),
        }
    }
}
