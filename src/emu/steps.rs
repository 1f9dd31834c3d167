//! A collective's steps on the stream thread: rendezvous numbered in order under the
//! collective's sequence number, each failing with HCCL's codes.

use std::time::Duration;

use crate::sys::HcclResult;

use super::attendance::Key;
use super::comm::Comm;
use super::errors::{Fail, HcclRes};
use super::rendezvous::{HOST_LOST, Rendezvous, RvError};
use super::wire::Wire;

/// A collective's view of the rendezvous: numbered steps under one sequence number.
pub(crate) struct Steps<'a> {
    rv: &'a Rendezvous,
    pub(crate) rank: u32,
    pub(crate) n: u32,
    seq: u64,
    step: u32,
    timeout: Duration,
}

impl Steps<'_> {
    /// The steps of `comm`'s collective number `seq`, from the first.
    pub(crate) fn new(comm: &Comm, seq: u64) -> Steps<'_> {
        Steps {
            rv: &comm.group.rv,
            rank: comm.rank,
            n: comm.n,
            seq,
            step: 0,
            timeout: comm.timeout,
        }
    }

    /// The next step: every rank's `value`, or `HCCL_E_TIMEOUT` after the exec timeout or
    /// once a missing rank will never come.
    pub(crate) fn exchange<T: Wire>(&mut self, value: T) -> HcclRes<Vec<T>> {
        let key = Key::Collective {
            seq: self.seq,
            step: self.step,
        };
        self.step += 1;
        self.rv
            .exchange(key, &value, self.timeout)
            .map_err(|e| match e {
                RvError::Timeout { missing } => Fail {
                    code: HcclResult::HCCL_E_TIMEOUT,
                    msg: format!(
                        "rank {} waited {:.1} s at step {} for ranks {missing:?}",
                        self.rank,
                        self.timeout.as_secs_f64(),
                        self.step - 1
                    ),
                },
                RvError::Gone { ranks } => Fail {
                    code: HcclResult::HCCL_E_TIMEOUT,
                    msg: format!(
                        "rank {} at step {}: ranks {ranks:?} destroyed their communicator and \
                         will never take part",
                        self.rank,
                        self.step - 1
                    ),
                },
                RvError::Lost { ranks } => Fail {
                    code: HcclResult::HCCL_E_TIMEOUT,
                    msg: format!(
                        "rank {} at step {}: ranks {ranks:?} exited or were killed (their \
                         connection to the rendezvous closed)",
                        self.rank,
                        self.step - 1
                    ),
                },
                RvError::HostLost => Fail {
                    code: HcclResult::HCCL_E_TIMEOUT,
                    msg: format!("rank {}: {HOST_LOST}", self.rank),
                },
                RvError::Mismatch | RvError::Duplicate => Fail {
                    code: HcclResult::HCCL_E_PARA,
                    msg: "ranks ran different operations under one sequence number".into(),
                },
            })
    }

    /// The next step, with nothing to exchange.
    pub(crate) fn barrier(&mut self) -> HcclRes {
        self.exchange(()).map(drop)
    }
}
