//! A collective's steps on the stream thread: rendezvous numbered in order under the
//! collective's sequence number, each failing with HCCL's codes.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;

use crate::sys::HcclResult;

use crate::base::errors::{Fail, HcclRes};
use crate::hccl::comm::Comm;
use crate::ipc::attendance::Key;
use crate::ipc::board::MAX_VALUE;
use crate::ipc::host_threads::{StreamAt, Watch};
use crate::ipc::rendezvous::{HUB_LOST, Rendezvous, RvError};
use crate::ipc::wire::{Reader, Wire, Writer};

/// The most words one step of [`Steps::exchange_words`] carries: a board value holds the
/// tag, the length prefix and the words.
const WORDS_PER_STEP: usize = (MAX_VALUE - 5) / 8;

/// A piece of a word array, as it travels in one step.
struct Words(Vec<u64>);

impl Wire for Words {
    const TAG: u8 = 11;
    fn put<'a>(&'a self, w: &mut Writer, _: &mut Vec<BorrowedFd<'a>>) {
        let bytes: Vec<u8> = self.0.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.blob(&bytes);
    }
    fn get(r: &mut Reader<'_>, _: &mut dyn Iterator<Item = OwnedFd>) -> Option<Self> {
        let bytes = r.blob()?;
        if bytes.len() % 8 != 0 {
            return None;
        }
        let mut reader = Reader::new(bytes);
        let words: Option<Vec<u64>> = (0..bytes.len() / 8).map(|_| reader.u64()).collect();
        words.map(Words)
    }
}

/// A collective's view of the rendezvous: numbered steps under one sequence number.
pub(crate) struct Steps<'a> {
    rv: &'a Rendezvous,
    pub(crate) rank: u32,
    pub(crate) n: u32,
    seq: u64,
    step: u32,
    timeout: Duration,
    /// The rank's host threads, the communicator and where the stream's task waits (for the
    /// deadlock check).
    watch: Watch<'a>,
}

impl<'a> Steps<'a> {
    /// The steps of `comm`'s collective number `seq`, from the first, on a stream whose task
    /// records in `at` where it waits (for the deadlock check: host threads synchronizing the
    /// stream wait there too).
    pub(crate) fn new(comm: &'a Comm, seq: u64, at: &'a StreamAt) -> Steps<'a> {
        Steps {
            rv: &comm.group.rv,
            rank: comm.rank,
            n: comm.n,
            seq,
            step: 0,
            timeout: comm.timeout,
            watch: Watch {
                threads: Some(&comm.threads),
                comm: comm.handle.raw() as u64,
                stream: Some(at),
            },
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
            .exchange_watched(key, &value, self.timeout, &self.watch)
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
                RvError::HubLost => Fail {
                    code: HcclResult::HCCL_E_TIMEOUT,
                    msg: format!("rank {}: {HUB_LOST}", self.rank),
                },
                RvError::Closed => Fail {
                    code: HcclResult::HCCL_E_PARA,
                    msg: format!(
                        "rank {}: the communicator was destroyed while step {} waited",
                        self.rank,
                        self.step - 1
                    ),
                },
                RvError::Mismatch | RvError::Duplicate => Fail {
                    code: HcclResult::HCCL_E_PARA,
                    msg: "ranks ran different operations under one sequence number".into(),
                },
                // The code a timeout would give, now instead of then.
                RvError::Deadlock(who) => Fail {
                    code: HcclResult::HCCL_E_TIMEOUT,
                    msg: format!("rank {} at step {}: {who}", self.rank, self.step - 1),
                },
            })
    }

    /// Every rank's `words`, in as many steps as they need on the board (so the number of
    /// steps is the same on every rank only if every rank brings as many words: callers make
    /// the length a function of what the ranks already agreed on). `HCCL_E_PARA` if a rank's
    /// piece differs in length all the same.
    pub(crate) fn exchange_words(&mut self, words: &[u64]) -> HcclRes<Vec<Vec<u64>>> {
        let mut all = vec![Vec::with_capacity(words.len()); self.n as usize];
        for piece in words.chunks(WORDS_PER_STEP) {
            for (k, got) in self
                .exchange(Words(piece.to_vec()))?
                .into_iter()
                .enumerate()
            {
                if got.0.len() != piece.len() {
                    return Err(Fail {
                        code: HcclResult::HCCL_E_PARA,
                        msg: format!(
                            "rank {k} sent {} words where rank {} sent {}",
                            got.0.len(),
                            self.rank,
                            piece.len()
                        ),
                    });
                }
                all[k].extend(got.0);
            }
        }
        Ok(all)
    }

    /// The next step, with nothing to exchange.
    pub(crate) fn barrier(&mut self) -> HcclRes {
        self.exchange(()).map(drop)
    }
}
