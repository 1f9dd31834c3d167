//! Collectives: the synchronous checks at enqueue, the per-communicator sequence number, and
//! what runs on the stream thread: a rendezvous in which every rank compares its call with
//! its peers', then the symmetric or the staged algorithm, then an exit barrier so no rank
//! moves on while a peer may still read its memory.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use crate::sys::{ACL_ERROR_RT_INTERNAL_ERROR, HcclDataType, HcclReduceOp, HcclResult};

use super::comm::Comm;
use super::counters::{self, Counter};
use super::errors::{Fail, HcclRes, hccl_fail, para};
use super::memory::{self, Pins};
use super::reduce::{DType, Op};
use super::rendezvous::{Key, Rendezvous, RvError};
use super::stream::{self, TaskFailure};
use super::window::Window;
use super::{os, staged, symmetric};

#[cfg(test)]
mod tests;

/// Which collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    AllReduce,
    AllGather,
    ReduceScatter,
    AlltoAll,
    Broadcast,
    Barrier,
}

impl Kind {
    /// The C function's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "HcclAllReduce",
            Kind::AllGather => "HcclAllGather",
            Kind::ReduceScatter => "HcclReduceScatter",
            Kind::AlltoAll => "HcclAlltoAll",
            Kind::Broadcast => "HcclBroadcast",
            Kind::Barrier => "HcclBarrier",
        }
    }

    fn reduces(self) -> bool {
        matches!(self, Kind::AllReduce | Kind::ReduceScatter)
    }

    /// HCCL looks both buffers up with `HcclCommSymWinGet` for these four only.
    fn may_be_symmetric(self) -> bool {
        matches!(
            self,
            Kind::AllReduce | Kind::AllGather | Kind::ReduceScatter | Kind::AlltoAll
        )
    }
}

/// A collective call as the C entry point received it.
pub(crate) struct Request {
    pub(crate) kind: Kind,
    pub(crate) send: usize,
    pub(crate) recv: usize,
    /// Elements: per rank for AllGather (send) and ReduceScatter (recv), per peer for
    /// AlltoAll (send), the whole buffer otherwise.
    pub(crate) count: u64,
    pub(crate) dtype: HcclDataType,
    /// AlltoAll's receive count and type (the same as `count` / `dtype` otherwise).
    pub(crate) recv_count: u64,
    pub(crate) recv_dtype: HcclDataType,
    pub(crate) op: HcclReduceOp,
    pub(crate) root: u32,
    pub(crate) stream: usize,
}

/// What every rank's call must agree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Signature {
    kind: Kind,
    count: u64,
    dtype: HcclDataType,
    op: HcclReduceOp,
    root: u32,
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}(count {}, type {}",
            self.kind.name(),
            self.count,
            self.dtype.0
        )?;
        if self.kind.reduces() {
            write!(f, ", op {}", self.op.0)?;
        }
        if self.kind == Kind::Broadcast {
            write!(f, ", root {}", self.root)?;
        }
        f.write_str(")")
    }
}

/// Where a symmetric buffer is: `(window slot, canonical offset in the window, in place)`.
type Place = (usize, usize, bool);

/// The path a rank chose, as its peers see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Staged,
    Symmetric { input: Place, output: Place },
}

/// What each rank brings to a collective's first rendezvous.
#[derive(Clone)]
struct Arrival {
    sig: Signature,
    route: Route,
    /// The rank's staging buffer, kept alive by every peer's task until that task ends, so a
    /// rank that gives up (times out) and destroys its communicator cannot unmap a buffer a
    /// slower peer still reads.
    staging: Arc<os::Space>,
}

/// A symmetric buffer: its window (kept alive by the task) and where it sits in it.
///
/// Rank `k`'s buffer is at `offset + k * step`: `step` is 0 except for the side of an in-place
/// AllGather (input) or ReduceScatter (output) that lies at the rank's own block of the other
/// buffer, where the per-rank offsets differ by design. `offset` is then the canonical (rank
/// 0) offset, which is what ranks compare.
pub(crate) struct SymBuf {
    pub(crate) window: Arc<Window>,
    pub(crate) offset: usize,
    pub(crate) step: usize,
}

impl SymBuf {
    /// Where rank `k`'s buffer is visible in this rank's heap.
    pub(crate) fn peer(&self, k: u32) -> usize {
        self.window
            .peer_addr(k, self.offset + k as usize * self.step)
    }

    fn place(&self) -> Place {
        (self.window.slot, self.offset, self.step != 0)
    }
}

enum Path {
    Staged,
    Symmetric { input: SymBuf, output: SymBuf },
}

/// A checked collective: what the algorithms need. Only made by [`check`], so its buffers are
/// inside mapped device memory, pinned for the job's lifetime, aligned for reductions, and
/// either disjoint or in one of the in-place layouts the collective allows.
pub(crate) struct Job {
    pub(crate) kind: Kind,
    pub(crate) send: usize,
    pub(crate) recv: usize,
    /// Elements, as in [`Request::count`].
    pub(crate) count: usize,
    /// Bytes per element.
    pub(crate) es: usize,
    pub(crate) dtype: DType,
    pub(crate) op: Op,
    pub(crate) root: u32,
    sig: Signature,
    path: Path,
    _pins: Pins,
}

/// Converts an ACL stream lookup failure into HCCL's codes.
fn stream_error(f: Fail<i32>) -> Fail<HcclResult> {
    let code = if f.code == crate::sys::ACL_ERROR_RT_PARAM_INVALID {
        HcclResult::HCCL_E_PTR
    } else {
        HcclResult::HCCL_E_PARA
    };
    Fail { code, msg: f.msg }
}

/// `HcclAllReduce` & co., once the call has taken its sequence number `seq`: checks
/// synchronously, then queues the work on the stream.
pub(crate) fn enqueue(comm: &Arc<Comm>, seq: u64, req: &Request) -> HcclRes {
    let stream = stream::lookup(req.stream).map_err(stream_error)?;
    let Some(job) = check(comm, req)? else {
        return Ok(());
    };
    let comm = comm.clone();
    let task = Box::new(move || {
        run(&comm, &job, seq).map_err(|f| {
            comm.set_async_error(f.code);
            TaskFailure {
                code: ACL_ERROR_RT_INTERNAL_ERROR,
                msg: format!(
                    "{} (collective #{seq} on rank {}) failed with {}: {}",
                    job.kind.name(),
                    comm.rank,
                    f.code,
                    f.msg
                ),
            }
        })
    });
    stream.enqueue(task).map_err(stream_error)
}

/// Pins a device buffer of a collective.
fn pin(what: &str, addr: usize, len: usize) -> HcclRes<Pins> {
    memory::pin_range(addr, len).or_else(|e| para(format!("{what}: {e}")))
}

/// The synchronous argument checks; `None` for a collective with nothing to move.
fn check(comm: &Comm, req: &Request) -> HcclRes<Option<Job>> {
    let n = comm.n as usize;
    let kind = req.kind;
    let sig = Signature {
        kind,
        count: req.count,
        dtype: req.dtype,
        op: req.op,
        root: req.root,
    };
    if kind == Kind::Barrier {
        return Ok(Some(Job {
            kind,
            send: 0,
            recv: 0,
            count: 0,
            es: 1,
            dtype: DType::I8,
            op: Op::Sum,
            root: 0,
            sig,
            path: Path::Staged,
            _pins: Pins::default(),
        }));
    }
    let Some(dtype) = DType::from_hccl(req.dtype) else {
        return para(format!("data type {} is not supported", req.dtype.0));
    };
    let op = if kind.reduces() {
        match Op::from_hccl(req.op) {
            Some(op) => op,
            None => return para(format!("reduce op {} is not supported", req.op.0)),
        }
    } else {
        Op::Sum
    };
    if req.recv_count != req.count || req.recv_dtype != req.dtype {
        return para(format!(
            "sendCount {} / sendType {} must equal recvCount {} / recvType {}",
            req.count, req.dtype.0, req.recv_count, req.recv_dtype.0
        ));
    }
    if kind == Kind::Broadcast && req.root >= comm.n {
        return para(format!(
            "root {} is not below rankSize {}",
            req.root, comm.n
        ));
    }
    if req.count == 0 {
        return Ok(None);
    }
    if req.send == 0 || req.recv == 0 {
        return hccl_fail(HcclResult::HCCL_E_PTR, "sendBuf / recvBuf is NULL");
    }
    let es = dtype.size();
    let lens = usize::try_from(req.count).ok().and_then(|count| {
        let one = count.checked_mul(es)?;
        let all = one.checked_mul(n)?;
        let (input, output) = match kind {
            Kind::AllReduce | Kind::Broadcast => (one, one),
            Kind::AllGather => (one, all),
            Kind::ReduceScatter => (all, one),
            Kind::AlltoAll => (all, all),
            Kind::Barrier => (0, 0),
        };
        Some((count, input, output))
    });
    let Some((count, in_len, out_len)) = lens else {
        return para(format!("count {} overflows", req.count));
    };
    let (send, recv) = (req.send, req.recv);
    let mut pins = pin("sendBuf", send, in_len)?;
    pins.extend(pin("recvBuf", recv, out_len)?);
    if kind.reduces() && (send % es != 0 || recv % es != 0) {
        return para(format!(
            "sendBuf {send:#x} / recvBuf {recv:#x} are not aligned to the {es}-byte element"
        ));
    }
    let disjoint = send + in_len <= recv || recv + out_len <= send;
    let in_place = match kind {
        Kind::AllReduce | Kind::Broadcast => send == recv,
        Kind::AllGather => send == recv + comm.rank as usize * in_len,
        Kind::ReduceScatter => recv == send + comm.rank as usize * out_len,
        Kind::AlltoAll | Kind::Barrier => false,
    };
    if !disjoint && !in_place {
        return para(format!(
            "sendBuf [{send:#x}, +{in_len}) and recvBuf [{recv:#x}, +{out_len}) overlap in a \
             way {} does not allow",
            kind.name()
        ));
    }
    let path = if kind.may_be_symmetric() {
        match (
            comm.find_window(send, in_len),
            comm.find_window(recv, out_len),
        ) {
            (Some((iw, ioff)), Some((ow, ooff))) => {
                // In place, this rank's side lies `rank` blocks into the other buffer.
                let mine = comm.rank as usize;
                let (in_step, out_step) = match kind {
                    Kind::AllGather if in_place => (in_len, 0),
                    Kind::ReduceScatter if in_place => (0, out_len),
                    _ => (0, 0),
                };
                let input = SymBuf {
                    window: iw,
                    offset: ioff - mine * in_step,
                    step: in_step,
                };
                let output = SymBuf {
                    window: ow,
                    offset: ooff - mine * out_step,
                    step: out_step,
                };
                Path::Symmetric { input, output }
            }
            _ => Path::Staged,
        }
    } else {
        Path::Staged
    };
    Ok(Some(Job {
        kind,
        send,
        recv,
        count,
        es,
        dtype,
        op,
        root: req.root,
        sig,
        path,
        _pins: pins,
    }))
}

/// A collective's view of the rendezvous: numbered steps under one sequence number.
pub(crate) struct Ctx<'a> {
    rv: &'a Rendezvous,
    pub(crate) rank: u32,
    pub(crate) n: u32,
    seq: u64,
    step: u32,
    timeout: Duration,
}

impl Ctx<'_> {
    /// The next step: every rank's `value`, or `HCCL_E_TIMEOUT` after the exec timeout.
    pub(crate) fn exchange<T: Any + Clone + Send + Sync>(&mut self, value: T) -> HcclRes<Vec<T>> {
        let key = Key::Collective {
            seq: self.seq,
            step: self.step,
        };
        self.step += 1;
        self.rv
            .exchange(key, self.rank, value, self.timeout)
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

/// Runs a checked collective on the stream thread.
fn run(comm: &Comm, job: &Job, seq: u64) -> HcclRes {
    let mut ctx = Ctx {
        rv: &comm.group.rv,
        rank: comm.rank,
        n: comm.n,
        seq,
        step: 0,
        timeout: comm.timeout,
    };
    let route = match &job.path {
        Path::Staged => Route::Staged,
        Path::Symmetric { input, output } => Route::Symmetric {
            input: input.place(),
            output: output.place(),
        },
    };
    let all = ctx.exchange(Arrival {
        sig: job.sig,
        route,
        staging: comm.staging.clone(),
    })?;
    if all.iter().any(|a| a.sig != job.sig) {
        let calls: Vec<String> = all
            .iter()
            .enumerate()
            .map(|(r, a)| format!("rank {r}: {}", a.sig))
            .collect();
        return para(format!(
            "ranks made different calls as collective #{seq}: {}",
            calls.join("; ")
        ));
    }
    if all.iter().any(|a| a.route != route) {
        let routes: Vec<String> = all
            .iter()
            .enumerate()
            .map(|(r, a)| match a.route {
                Route::Staged => format!("rank {r}: staged (not both buffers in a window)"),
                Route::Symmetric { input, output } => {
                    let place = |(slot, offset, in_place): Place| {
                        let how = if in_place {
                            " (in place, rank 0's)"
                        } else {
                            ""
                        };
                        format!("slot {slot:#x} offset {offset:#x}{how}")
                    };
                    format!("rank {r}: input {}, output {}", place(input), place(output))
                }
            })
            .collect();
        return para(format!(
            "asymmetric buffers: the symmetric path needs every rank's input and output at the \
             same window offsets: {}",
            routes.join("; ")
        ));
    }
    match &job.path {
        Path::Staged => {
            let staging: Vec<usize> = all.iter().map(|a| a.staging.addr()).collect();
            let cap = all.iter().map(|a| a.staging.len()).min().unwrap_or(0);
            counters::inc(Counter::StagedCollectives);
            staged::run(&mut ctx, job, &staging, cap)?;
        }
        Path::Symmetric { input, output } => {
            counters::inc(Counter::SymmetricCollectives);
            symmetric::run(&ctx, job, input, output);
        }
    }
    ctx.barrier()
}

/// Copies `len` bytes (overlap allowed; nothing to do when `dst == src`).
///
/// # Safety
/// Both ranges are valid for `len` bytes (device ranges of a [`Job`] are), and no other thread
/// writes them during the copy.
pub(crate) unsafe fn copy(dst: usize, src: usize, len: usize) {
    if len > 0 && dst != src {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
    }
}

/// `[lo, hi)`: part `j` of `len` elements split as evenly as possible in `n` parts.
pub(crate) fn part(len: usize, n: u32, j: u32) -> (usize, usize) {
    let n = n as usize;
    let j = j as usize;
    (len * j / n, len * (j + 1) / n)
}
