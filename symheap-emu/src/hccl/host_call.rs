//! The exchange of a collective host call (`HcclCommSymWinRegister`, `HcclCreateSubCommConfig`,
//! ...): one value from every rank of a communicator at a rendezvous step, with the failures
//! in HCCL's codes. Shared by every such call, so it sits just above the communicator.

use crate::sys::HcclResult;

use crate::base::errors::{Fail, HcclRes};
use crate::hccl::comm::Comm;
use crate::ipc::attendance::Key;
use crate::ipc::host_threads::Watch;
use crate::ipc::rendezvous::{HUB_LOST, RvError};
use crate::ipc::wire::Wire;

/// Step `step` of `comm`'s `seq`-th collective host call, the C function `call`: every rank's
/// `value`, in rank order, or the failure in HCCL's codes.
pub(crate) fn exchange<T: Wire>(
    comm: &Comm,
    seq: u64,
    step: u32,
    value: T,
    call: &str,
) -> HcclRes<Vec<T>> {
    exchange_raw(comm, seq, step, value).map_err(|e| fail_of(e, comm, call))
}

/// [`exchange`], failing with the rendezvous's own error: for a caller that treats some
/// failures (a peer gone) apart.
pub(crate) fn exchange_raw<T: Wire>(
    comm: &Comm,
    seq: u64,
    step: u32,
    value: T,
) -> Result<Vec<T>, RvError> {
    let key = Key::Host { seq, step };
    // The calling thread is one of the rank's host threads, waiting in the exchange.
    let watch = Watch {
        threads: Some(&comm.threads),
        comm: comm.handle.raw() as u64,
        stream: None,
    };
    comm.group
        .rv
        .exchange_watched(key, &value, comm.timeout, &watch)
}

/// A failed exchange of `comm`'s call `call`, in HCCL's codes.
pub(crate) fn fail_of(e: RvError, comm: &Comm, call: &str) -> Fail<HcclResult> {
    match e {
        RvError::Timeout { missing } => Fail {
            code: HcclResult::HCCL_E_TCP_TRANSFER,
            msg: format!(
                "rank {} waited {:.1} s for ranks {missing:?} to call {call}",
                comm.rank,
                comm.timeout.as_secs_f64()
            ),
        },
        RvError::Gone { ranks } => Fail {
            code: HcclResult::HCCL_E_TCP_TRANSFER,
            msg: format!(
                "rank {}: ranks {ranks:?} destroyed their communicator and will never call \
                     {call}",
                comm.rank
            ),
        },
        RvError::Lost { ranks } => Fail {
            code: HcclResult::HCCL_E_TCP_TRANSFER,
            msg: format!(
                "rank {}: ranks {ranks:?} exited or were killed (their connection to the \
                     rendezvous closed) and will never call {call}",
                comm.rank
            ),
        },
        RvError::HubLost => Fail {
            code: HcclResult::HCCL_E_TCP_TRANSFER,
            msg: format!("rank {}: {HUB_LOST}", comm.rank),
        },
        RvError::Mismatch | RvError::Duplicate => Fail {
            code: HcclResult::HCCL_E_INTERNAL,
            msg: format!("ranks made different collective calls where {call} was expected"),
        },
        // The code a timeout would give, now instead of then.
        RvError::Deadlock(who) => Fail {
            code: HcclResult::HCCL_E_TCP_TRANSFER,
            msg: format!("rank {} in {call}: {who}", comm.rank),
        },
        // What a call naming a destroyed communicator gets.
        RvError::Closed => Fail {
            code: HcclResult::HCCL_E_PARA,
            msg: format!(
                "rank {}: HcclCommDestroy destroyed the communicator while {call} waited",
                comm.rank
            ),
        },
    }
}
