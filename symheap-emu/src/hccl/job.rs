//! A collective call as the C entry point received it ([`Request`]), the synchronous checks
//! made when it is called ([`check`]), and what they produce: the checked [`Job`] that the
//! algorithms run, with its buffers pinned and, when both are in windows, located there.

use std::sync::Arc;

use crate::sys::{HcclDataType, HcclReduceOp};
use symheap_types::Collective;

use crate::acl::memory::{self, Pins};
use crate::base::errors::{HcclRes, hccl_non_null, para};
use crate::hccl::comm::Comm;
use crate::hccl::expansion::Expansion;
use crate::hccl::v_layout::Blocks;
use crate::hccl::window::Window;
use symheap_types::{DataType, ReduceOp};

/// A collective call as the C entry point received it.
pub(crate) struct Request {
    pub(crate) sig: Signature,
    pub(crate) send: usize,
    pub(crate) recv: usize,
    /// AlltoAll's receive count and type (the same as `count` / `dtype` otherwise).
    pub(crate) recv_count: u64,
    pub(crate) recv_dtype: HcclDataType,
    /// A V collective's blocks, read from the caller's arrays (`None` for the others).
    pub(crate) vectors: Option<Blocks>,
}

/// What every rank's call must agree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Signature {
    pub(crate) kind: Collective,
    /// Elements: per rank for AllGather (send), ReduceScatter and Scatter (recv), per peer for
    /// AlltoAll (send), 0 for the V collectives (their arrays are compared on their own), the
    /// whole buffer otherwise.
    pub(crate) count: u64,
    pub(crate) dtype: HcclDataType,
    pub(crate) op: HcclReduceOp,
    pub(crate) root: u32,
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}(", self.kind.c_name())?;
        if !self.kind.is_v() {
            write!(f, "count {}, ", self.count)?;
        }
        write!(f, "type {}", self.dtype)?;
        if self.kind.reduces() {
            write!(f, ", op {}", self.op)?;
        }
        if self.kind.rooted() {
            write!(f, ", root {}", self.root)?;
        }
        f.write_str(")")
    }
}

/// Where a symmetric buffer is: `(window slot, canonical offset in the window, in place)`.
pub(crate) type Place = (usize, usize, bool);

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

    /// What ranks compare to know they are symmetric.
    pub(crate) fn place(&self) -> Place {
        (self.window.slot, self.offset, self.step != 0)
    }
}

/// How a job moves its data.
pub(crate) enum Path {
    /// Through the ranks' staging buffers.
    Staged,
    /// Directly between the ranks' windows.
    Symmetric { input: SymBuf, output: SymBuf },
}

/// A checked collective: what the algorithms need. Only made by [`check`], so its buffers are
/// inside mapped device memory, pinned for the job's lifetime, aligned for reductions, and
/// either disjoint or in one of the in-place layouts the collective allows.
pub(crate) struct Job {
    /// The call as every rank made it (kind, root, ...).
    pub(crate) sig: Signature,
    pub(crate) send: usize,
    pub(crate) recv: usize,
    /// Elements, as in [`Signature::count`].
    pub(crate) count: usize,
    /// Bytes per element.
    pub(crate) es: usize,
    pub(crate) dtype: DataType,
    pub(crate) op: ReduceOp,
    pub(crate) path: Path,
    /// A V collective's blocks on this rank (`None` for the others).
    pub(crate) vectors: Option<Blocks>,
    _pins: Pins,
}

/// The byte ranges a collective reads (`[send, +in_len)`) and writes (`[recv, +out_len)`).
#[derive(Clone, Copy)]
struct Buffers {
    send: usize,
    in_len: usize,
    recv: usize,
    out_len: usize,
}

impl Job {
    /// A barrier: nothing to move, so nothing to check or pin; it takes the staged path.
    fn barrier(sig: Signature) -> Job {
        Job {
            sig,
            send: 0,
            recv: 0,
            count: 0,
            es: 1,
            dtype: DataType::I8,
            op: ReduceOp::Sum,
            path: Path::Staged,
            vectors: None,
            _pins: Pins::default(),
        }
    }
}

/// The synchronous argument checks; `None` for a collective with nothing to move.
pub(crate) fn check(comm: &Comm, req: &Request) -> HcclRes<Option<Job>> {
    let (sig, kind) = (req.sig, req.sig.kind);
    if kind == Collective::Barrier {
        return Ok(Some(Job::barrier(sig)));
    }
    let (dtype, op) = check_operation(comm, req)?;
    if let Some(blocks) = &req.vectors {
        return check_vector(comm, req, blocks, dtype, op);
    }
    if sig.count == 0 {
        return Ok(None);
    }
    let es = dtype.size();
    let Some((count, bufs)) = Buffers::of(kind, req, es, comm.n, comm.rank) else {
        return para(format!("count {} overflows", sig.count));
    };
    bufs.check_null()?;
    let pins = bufs.pin()?;
    let in_place = bufs.check_layout(kind, es, comm.rank)?;
    let path = choose_path(comm, kind, &bufs, in_place);
    Ok(Some(Job {
        sig,
        send: bufs.send,
        recv: bufs.recv,
        count,
        es,
        dtype,
        op,
        path,
        vectors: None,
        _pins: pins,
    }))
}

/// [`check`] of a V collective, whose buffers are read and written in `blocks`.
fn check_vector(
    comm: &Comm,
    req: &Request,
    blocks: &Blocks,
    dtype: DataType,
    op: ReduceOp,
) -> HcclRes<Option<Job>> {
    let kind = req.sig.kind;
    // CANN refuses it for all three, whatever the blocks (two NULLs are unused buffers).
    if req.send == req.recv && req.send != 0 {
        return para(format!(
            "{}: sendBuf and recvBuf are the same address {:#x} (there is no in-place form)",
            kind.c_name(),
            req.send
        ));
    }
    blocks.check_own(comm.rank)?;
    if blocks.whole_operation_is_empty() {
        return Ok(None);
    }
    let es = dtype.size();
    let ranges = blocks.ranges(req.send, req.recv, es)?;
    let bufs = Buffers {
        send: req.send,
        in_len: ranges.send_extent,
        recv: req.recv,
        out_len: ranges.recv_extent,
    };
    // A buffer's extent is 0 exactly when the rank moves nothing through it.
    bufs.check_null()?;
    // Every block is pinned on its own: what lies between them is not the collective's.
    let mut pins = Pins::default();
    for (what, list) in [("sendBuf", &ranges.send), ("recvBuf", &ranges.recv)] {
        for &(addr, len) in list {
            let pinned = memory::pin_range(addr, len).or_else(|e| para(format!("{what}: {e}")));
            pins.extend(pinned?);
        }
    }
    bufs.check_aligned(kind, es)?;
    ranges.check_disjoint()?;
    let path = choose_path(comm, kind, &bufs, false);
    Ok(Some(Job {
        sig: req.sig,
        send: req.send,
        recv: req.recv,
        count: 0,
        es,
        dtype,
        op,
        path,
        vectors: Some(blocks.clone()),
        _pins: pins,
    }))
}

/// The checks of what the call asks for, before any buffer is looked at: the element type,
/// the reduction, AlltoAll's receive side and Broadcast's root.
fn check_operation(comm: &Comm, req: &Request) -> HcclRes<(DataType, ReduceOp)> {
    let Some(dtype) = DataType::try_from(req.sig.dtype).ok() else {
        return para(format!("data type {} is not supported", req.sig.dtype));
    };
    let op = if req.sig.kind.reduces() {
        match ReduceOp::try_from(req.sig.op).ok() {
            Some(op) => op,
            None => return para(format!("reduce op {} is not supported", req.sig.op)),
        }
    } else {
        ReduceOp::Sum
    };
    if req.sig.kind.is_v() && req.recv_dtype != req.sig.dtype {
        return para(format!(
            "sendType {} must equal recvType {}",
            req.sig.dtype.0, req.recv_dtype.0
        ));
    }
    if req.recv_count != req.sig.count || req.recv_dtype != req.sig.dtype {
        return para(format!(
            "sendCount {} / sendType {} must equal recvCount {} / recvType {}",
            req.sig.count, req.sig.dtype.0, req.recv_count, req.recv_dtype.0
        ));
    }
    if req.sig.kind.rooted() && req.sig.root >= comm.n {
        return para(format!(
            "root {} is not below rankSize {}",
            req.sig.root, comm.n
        ));
    }
    Ok((dtype, op))
}

impl Buffers {
    /// The element count and byte ranges of `req` with `es`-byte elements on rank `rank` of
    /// `n`, or `None` when they overflow. A rooted collective's non-root ranks have no input
    /// (Scatter) or output (Reduce): that buffer is not used and may be NULL.
    fn of(
        kind: Collective,
        req: &Request,
        es: usize,
        n: u32,
        rank: u32,
    ) -> Option<(usize, Buffers)> {
        let count = usize::try_from(req.sig.count).ok()?;
        let one = count.checked_mul(es)?;
        let all = one.checked_mul(n as usize)?;
        let root = rank == req.sig.root;
        let (in_len, out_len) = match kind {
            Collective::AllReduce | Collective::Broadcast => (one, one),
            Collective::AllGather => (one, all),
            Collective::ReduceScatter => (all, one),
            Collective::AlltoAll => (all, all),
            Collective::Reduce => (one, if root { one } else { 0 }),
            Collective::Scatter => (if root { all } else { 0 }, one),
            // Never asked (no buffers, checked by `check_vector`, or point-to-point).
            Collective::Barrier
            | Collective::AllGatherV
            | Collective::ReduceScatterV
            | Collective::AlltoAllV
            | Collective::AlltoAllVC
            | Collective::Send
            | Collective::Recv => (0, 0),
        };
        let bufs = Buffers {
            send: req.send,
            in_len,
            recv: req.recv,
            out_len,
        };
        Some((count, bufs))
    }

    /// `HCCL_E_PTR` when a buffer the call uses is NULL.
    fn check_null(&self) -> HcclRes {
        for (what, addr, len) in [
            ("sendBuf", self.send, self.in_len),
            ("recvBuf", self.recv, self.out_len),
        ] {
            if len > 0 {
                hccl_non_null(addr, what)?;
            }
        }
        Ok(())
    }

    /// Pins both ranges (those not empty), which must be wholly in mapped device memory.
    fn pin(&self) -> HcclRes<Pins> {
        let pin = |what: &str, addr, len| match len {
            0 => Ok(Pins::default()),
            _ => memory::pin_range(addr, len).or_else(|e| para(format!("{what}: {e}"))),
        };
        let mut pins = pin("sendBuf", self.send, self.in_len)?;
        pins.extend(pin("recvBuf", self.recv, self.out_len)?);
        Ok(pins)
    }

    /// A reduction's buffers (those used) must be aligned to its `es`-byte elements.
    fn check_aligned(&self, kind: Collective, es: usize) -> HcclRes {
        let (send, recv) = (self.send, self.recv);
        let off = |addr: usize, len: usize| len > 0 && !addr.is_multiple_of(es);
        if kind.reduces() && (off(send, self.in_len) || off(recv, self.out_len)) {
            return para(format!(
                "sendBuf {send:#x} / recvBuf {recv:#x} are not aligned to the {es}-byte element"
            ));
        }
        Ok(())
    }

    /// Checks that a reduction's buffers are aligned to its `es`-byte elements and that the
    /// buffers are disjoint or in the in-place layout of `kind` on rank `rank`; whether they
    /// are in place.
    fn check_layout(&self, kind: Collective, es: usize, rank: u32) -> HcclRes<bool> {
        let Buffers {
            send,
            in_len,
            recv,
            out_len,
        } = *self;
        self.check_aligned(kind, es)?;
        // An unused buffer (a non-root's) overlaps nothing.
        let disjoint =
            in_len == 0 || out_len == 0 || send + in_len <= recv || recv + out_len <= send;
        let in_place = match kind {
            Collective::AllReduce | Collective::Broadcast | Collective::Reduce => send == recv,
            Collective::AllGather => send == recv + rank as usize * in_len,
            Collective::ReduceScatter | Collective::Scatter => {
                recv == send + rank as usize * out_len
            }
            Collective::AlltoAll
            | Collective::Barrier
            | Collective::AllGatherV
            | Collective::ReduceScatterV
            | Collective::AlltoAllV
            | Collective::AlltoAllVC
            | Collective::Send
            | Collective::Recv => false,
        };
        if !disjoint && !in_place {
            return para(format!(
                "sendBuf [{send:#x}, +{in_len}) and recvBuf [{recv:#x}, +{out_len}) overlap in a \
                 way {} does not allow",
                kind.c_name()
            ));
        }
        Ok(in_place)
    }
}

/// The symmetric path when `comm`'s ranks are in one SuperPoD, on nodes that each have the
/// same number of them (more than one: `Topology::nodes_rule_out_windows`), `kind` may use
/// windows, `comm` expands on the AI CPU and both buffers lie in windows of `comm` (what HCCL finds with
/// `HcclCommSymWinGet`), the staged path otherwise. (A communicator spanning SuperPoDs has
/// no windows, as HCCL makes it no symmetric memory; the check says so here too.)
fn choose_path(comm: &Comm, kind: Collective, bufs: &Buffers, in_place: bool) -> Path {
    if comm.topology.spans_superpods()
        || comm.topology.nodes_rule_out_windows()
        || !kind.may_use_windows()
        || comm.expansion != Expansion::AiCpu
    {
        return Path::Staged;
    }
    let (Some((iw, ioff)), Some((ow, ooff))) = (
        comm.find_window(bufs.send, bufs.in_len),
        comm.find_window(bufs.recv, bufs.out_len),
    ) else {
        return Path::Staged;
    };
    // In place, this rank's side lies `rank` blocks into the other buffer.
    let mine = comm.rank as usize;
    let (in_step, out_step) = match kind {
        Collective::AllGather if in_place => (bufs.in_len, 0),
        Collective::ReduceScatter if in_place => (0, bufs.out_len),
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
