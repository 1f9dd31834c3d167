//! The counts and displacements of the V collectives (`HcclAllGatherV`, `HcclReduceScatterV`,
//! `HcclAlltoAllV`): reading them from the caller's host arrays ([`read`]), this rank's blocks
//! and the checks made on them when called ([`Blocks`]), and what the ranks exchange on the
//! stream to agree on who sends what to whom ([`Table`], [`exchange`]).
//!
//! All three are seen the same way: rank `k` sends `count` elements starting `displ` elements
//! into its `sendBuf` to each rank `j`, and rank `j` receives them at its own displacement in
//! its `recvBuf`. AllGatherV sends the same block to every rank; ReduceScatterV receives every
//! rank's block at displacement 0 (a reduction); AlltoAllV is the general case.

use std::ffi::c_void;

use symheap_types::Collective;

use crate::base::errors::{HcclRes, hccl_non_null, para};
use crate::hccl::steps::Steps;

/// Which V collective: three of [`Collective`]'s variants, as a type of their own so that
/// this module's matches over them are exhaustive without an arm that cannot happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    AllGatherV,
    ReduceScatterV,
    AlltoAllV,
    /// `HcclAlltoAllVC`: laid out as AlltoAllV, its arrays taken from the count matrix.
    AlltoAllVC,
}

impl Shape {
    /// The C function's name.
    pub(crate) fn c_name(self) -> &'static str {
        let collective = match self {
            Shape::AllGatherV => Collective::AllGatherV,
            Shape::ReduceScatterV => Collective::ReduceScatterV,
            Shape::AlltoAllV => Collective::AlltoAllV,
            Shape::AlltoAllVC => Collective::AlltoAllVC,
        };
        collective.c_name()
    }
}

/// `count` elements of a buffer, `displ` elements in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) displ: u64,
    pub(crate) count: u64,
}

impl Block {
    /// The block's bytes `[start, start + len)` in a buffer at `base` with `es`-byte elements,
    /// or `None` when they overflow.
    fn bytes(self, base: usize, es: usize) -> Option<(usize, usize)> {
        let displ = usize::try_from(self.displ).ok()?;
        let count = usize::try_from(self.count).ok()?;
        let len = count.checked_mul(es)?;
        let start = base.checked_add(displ.checked_mul(es)?)?;
        start.checked_add(len)?;
        Some((start, len))
    }

    /// The elements of this block moved in a round that moves `[start, start + per)` of every
    /// block.
    pub(crate) fn piece(self, start: usize, per: usize) -> usize {
        (self.count as usize).saturating_sub(start).min(per)
    }
}

/// Reads the caller's host array `ptr` of `n` `uint64_t`, named `what` in errors.
///
/// # Safety
/// `ptr` is null or valid for reading `n` `u64`s (the C caller's contract; it need not be
/// aligned).
pub(crate) unsafe fn read(ptr: *const c_void, n: u32, what: &str) -> HcclRes<Vec<u64>> {
    hccl_non_null(ptr as usize, what)?;
    let ptr = ptr.cast::<u64>();
    // SAFETY: the caller's contract: `n` readable `u64`s at `ptr`, maybe unaligned.
    Ok((0..n as usize)
        .map(|i| unsafe { ptr.add(i).read_unaligned() })
        .collect())
}

/// The C names of one side of a V collective's arguments: its counts (a scalar where the C
/// function takes one count for every rank), and its displacements (`None` where it takes
/// none).
type Names = (&'static str, Option<&'static str>);

/// The C names of a V collective's arguments: `(send side, receive side)`.
fn names(shape: Shape) -> (Names, Names) {
    match shape {
        Shape::AllGatherV => (("sendCount", None), ("recvCounts", Some("recvDispls"))),
        Shape::ReduceScatterV => (("sendCounts", Some("sendDispls")), ("recvCount", None)),
        Shape::AlltoAllVC => (
            ("sendCountMatrix (its row)", None),
            ("sendCountMatrix (its column)", None),
        ),
        Shape::AlltoAllV => (
            ("sendCounts", Some("sdispls")),
            ("recvCounts", Some("rdispls")),
        ),
    }
}

/// This rank's blocks of a V collective: what it sends to each rank, and where it receives
/// what each rank sends it (both in elements, one block per rank in rank order).
#[derive(Clone, Debug)]
pub(crate) struct Blocks {
    pub(crate) shape: Shape,
    pub(crate) send: Vec<Block>,
    pub(crate) recv: Vec<Block>,
}

/// Pairs counts with displacements.
fn zip(counts: &[u64], displs: &[u64]) -> Vec<Block> {
    counts
        .iter()
        .zip(displs)
        .map(|(&count, &displ)| Block { displ, count })
        .collect()
}

impl Blocks {
    /// `HcclAllGatherV`'s: the same `send_count` elements to every rank.
    pub(crate) fn all_gather_v(send_count: u64, counts: &[u64], displs: &[u64]) -> Blocks {
        let one = Block {
            displ: 0,
            count: send_count,
        };
        Blocks {
            shape: Shape::AllGatherV,
            send: vec![one; counts.len()],
            recv: zip(counts, displs),
        }
    }

    /// `HcclReduceScatterV`'s: every rank's block for this rank reduces into `recv_count`
    /// elements at displacement 0.
    pub(crate) fn reduce_scatter_v(counts: &[u64], displs: &[u64], recv_count: u64) -> Blocks {
        let one = Block {
            displ: 0,
            count: recv_count,
        };
        Blocks {
            shape: Shape::ReduceScatterV,
            send: zip(counts, displs),
            recv: vec![one; counts.len()],
        }
    }

    /// `HcclAlltoAllV`'s.
    pub(crate) fn alltoall_v(sc: &[u64], sd: &[u64], rc: &[u64], rd: &[u64]) -> Blocks {
        Blocks {
            shape: Shape::AlltoAllV,
            send: zip(sc, sd),
            recv: zip(rc, rd),
        }
    }

    /// `HcclAlltoAllVC`'s, for `rank` of `n`: `matrix[s * n + d]` elements go from rank `s` to
    /// rank `d`, each rank's blocks packed in rank order on both sides (row `rank` is what it
    /// sends, column `rank` what it receives).
    pub(crate) fn alltoall_vc(matrix: &[u64], n: usize, rank: usize) -> Blocks {
        let packed = |counts: Vec<u64>| -> Vec<Block> {
            let mut at = 0u64;
            counts
                .into_iter()
                .map(|count| {
                    let block = Block { count, displ: at };
                    at = at.saturating_add(count);
                    block
                })
                .collect()
        };
        let row = (0..n).map(|d| matrix[rank * n + d]).collect();
        let column = (0..n).map(|s| matrix[s * n + rank]).collect();
        Blocks {
            shape: Shape::AlltoAllVC,
            send: packed(row),
            recv: packed(column),
        }
    }

    /// The checks of this rank's own arrays that need no peer (`HCCL_E_PARA`): AllGatherV's
    /// `recvCounts[rank]` is this rank's `sendCount`, ReduceScatterV's `recvCount` is
    /// `sendCounts[rank]`.
    pub(crate) fn check_own(&self, rank: u32) -> HcclRes {
        let r = rank as usize;
        let (sent, received) = (self.send[r].count, self.recv[r].count);
        match self.shape {
            Shape::AllGatherV if sent != received => para(format!(
                "recvCounts[{r}] = {received} must equal this rank's sendCount {sent}"
            )),
            Shape::ReduceScatterV if sent != received => para(format!(
                "recvCount {received} must equal sendCounts[{r}] = {sent}"
            )),
            _ => Ok(()),
        }
    }

    /// Whether this rank's arguments show that the whole operation, on every rank, moves
    /// nothing: AllGatherV's `recvCounts` and ReduceScatterV's `sendCounts` are the same on
    /// every rank, so all zero means nothing moves anywhere; AlltoAllV's arrays say only what
    /// this rank sends and receives, so only a lone rank knows.
    pub(crate) fn whole_operation_is_empty(&self) -> bool {
        let zero = |blocks: &[Block]| blocks.iter().all(|b| b.count == 0);
        match self.shape {
            Shape::AllGatherV => zero(&self.recv),
            Shape::ReduceScatterV => zero(&self.send),
            Shape::AlltoAllV | Shape::AlltoAllVC => {
                self.send.len() == 1 && zero(&self.send) && zero(&self.recv)
            }
        }
    }

    /// The non-empty byte ranges `(start, len)` this rank reads (`send`) and writes (`recv`),
    /// distinct and sorted, and each buffer's extent (the end of its last block, from its
    /// base); `HCCL_E_PARA` naming the block when one overflows.
    pub(crate) fn ranges(&self, send: usize, recv: usize, es: usize) -> HcclRes<Ranges> {
        let (send_names, recv_names) = names(self.shape);
        let side = |blocks: &[Block], base: usize, (counts, displs): Names| {
            let mut out = Vec::new();
            let mut extent = 0;
            for (j, b) in blocks.iter().enumerate() {
                let Some((start, len)) = b.bytes(base, es) else {
                    return para(match displs {
                        // A scalar count, the same block for every rank.
                        None => format!("{counts} {} overflows", b.count),
                        Some(displs) => format!(
                            "{displs}[{j}] = {} and {counts}[{j}] = {} overflow",
                            b.displ, b.count
                        ),
                    });
                };
                if len > 0 {
                    out.push((start, len));
                    extent = extent.max(start - base + len);
                }
            }
            out.sort_unstable();
            out.dedup();
            Ok((out, extent))
        };
        let (send_ranges, send_extent) = side(&self.send, send, send_names)?;
        let (recv_ranges, recv_extent) = side(&self.recv, recv, recv_names)?;
        Ok(Ranges {
            shape: self.shape,
            send: send_ranges,
            send_extent,
            recv: recv_ranges,
            recv_extent,
        })
    }

    /// The words every rank sends its peers on the stream: AllGatherV's `recvCounts` and
    /// `recvDispls`, ReduceScatterV's `sendCounts` and `sendDispls` (which must be the same on
    /// every rank), AlltoAllV's `sendCounts`, `sdispls` and `recvCounts` (whose counts must
    /// pair up).
    fn words(&self) -> Vec<u64> {
        let blocks = match self.shape {
            Shape::AllGatherV => &self.recv,
            _ => &self.send,
        };
        let mut words: Vec<u64> = blocks.iter().map(|b| b.count).collect();
        words.extend(blocks.iter().map(|b| b.displ));
        if matches!(self.shape, Shape::AlltoAllV | Shape::AlltoAllVC) {
            words.extend(self.recv.iter().map(|b| b.count));
        }
        words
    }
}

/// The byte ranges of a V collective on this rank (see [`Blocks::ranges`]).
pub(crate) struct Ranges {
    pub(crate) shape: Shape,
    pub(crate) send: Vec<(usize, usize)>,
    pub(crate) send_extent: usize,
    pub(crate) recv: Vec<(usize, usize)>,
    pub(crate) recv_extent: usize,
}

impl Ranges {
    /// `HCCL_E_PARA` when two receive blocks write the same bytes (except ReduceScatterV's,
    /// which is one block) or a receive block overlaps a send block.
    pub(crate) fn check_disjoint(&self) -> HcclRes {
        let overlap = |a: (usize, usize), b: (usize, usize)| a.0 < b.0 + b.1 && b.0 < a.0 + a.1;
        // Sorted by start: two ranges overlap only if some range overlaps its successor.
        if let Some(w) = self.recv.windows(2).find(|w| overlap(w[0], w[1])) {
            return para(format!(
                "{}: receive blocks [{:#x}, +{}) and [{:#x}, +{}) overlap",
                self.shape.c_name(),
                w[0].0,
                w[0].1,
                w[1].0,
                w[1].1
            ));
        }
        for &s in &self.send {
            if let Some(&r) = self.recv.iter().find(|&&r| overlap(s, r)) {
                return para(format!(
                    "{}: sendBuf block [{:#x}, +{}) overlaps recvBuf block [{:#x}, +{}) (sendBuf \
                     and recvBuf must be disjoint)",
                    self.shape.c_name(),
                    s.0,
                    s.1,
                    r.0,
                    r.1
                ));
            }
        }
        Ok(())
    }
}

/// Who sends what to whom in a V collective: the same on every rank once [`exchange`] made it.
pub(crate) struct Table {
    n: usize,
    /// `[k * n + j]`: what rank `k` sends rank `j`, in `k`'s `sendBuf`.
    blocks: Vec<Block>,
}

impl Table {
    /// What rank `from` sends rank `to`.
    pub(crate) fn block(&self, from: u32, to: u32) -> Block {
        self.blocks[from as usize * self.n + to as usize]
    }

    /// The largest count any rank sends any rank: how many elements the staged path's rounds
    /// must cover.
    pub(crate) fn max_count(&self) -> usize {
        self.blocks.iter().map(|b| b.count).max().unwrap_or(0) as usize
    }
}

/// Exchanges this rank's `blocks` of a V collective with its peers (in as many steps as the
/// words need) and builds the table every rank then shares; `HCCL_E_PARA`, with the same
/// message on every rank, when the arrays that must match do not.
pub(crate) fn exchange(steps: &mut Steps<'_>, blocks: &Blocks) -> HcclRes<Table> {
    let shape = blocks.shape;
    let all = steps.exchange_words(&blocks.words())?;
    let n = all.len();
    let word = |k: usize, array: usize, j: usize| all[k][array * n + j];
    match shape {
        Shape::AlltoAllV | Shape::AlltoAllVC => check_pairs(&all)?,
        _ => check_identical(shape, &all)?,
    }
    let blocks = (0..n)
        .flat_map(|k| (0..n).map(move |j| (k, j)))
        .map(|(k, j)| match shape {
            // Rank k sends its whole sendBuf (recvCounts[k] elements) to every rank.
            Shape::AllGatherV => Block {
                displ: 0,
                count: word(0, 0, k),
            },
            // Every rank sends sendCounts[j] elements at sendDispls[j] to rank j.
            Shape::ReduceScatterV => Block {
                displ: word(0, 1, j),
                count: word(0, 0, j),
            },
            Shape::AlltoAllV | Shape::AlltoAllVC => Block {
                displ: word(k, 1, j),
                count: word(k, 0, j),
            },
        })
        .collect();
    Ok(Table { n, blocks })
}

/// AllGatherV / ReduceScatterV: every rank's arrays must equal rank 0's; names the first
/// difference otherwise.
fn check_identical(shape: Shape, all: &[Vec<u64>]) -> HcclRes {
    let n = all.len();
    let [counts, displs] = match shape {
        Shape::AllGatherV => ["recvCounts", "recvDispls"],
        _ => ["sendCounts", "sendDispls"],
    };
    for (k, words) in all.iter().enumerate().skip(1) {
        if let Some(i) = (0..words.len()).find(|&i| words[i] != all[0][i]) {
            let (name, j) = if i < n { (counts, i) } else { (displs, i - n) };
            return para(format!(
                "{} needs the same {counts} and {displs} on every rank: rank 0 has {name}[{j}] \
                 = {}, rank {k} has {name}[{j}] = {}",
                shape.c_name(),
                all[0][i],
                words[i]
            ));
        }
    }
    Ok(())
}

/// AlltoAllV: what rank `k` sends rank `j` (`sendCounts[j]` on `k`) must be what `j` expects
/// from `k` (`recvCounts[k]` on `j`); names the first pair that differs otherwise.
fn check_pairs(all: &[Vec<u64>]) -> HcclRes {
    let n = all.len();
    for (k, sender) in all.iter().enumerate() {
        for (j, receiver) in all.iter().enumerate() {
            let (sent, expected) = (sender[j], receiver[2 * n + k]);
            if sent != expected {
                return para(format!(
                    "HcclAlltoAllV: rank {k} sends {sent} elements to rank {j} (its \
                     sendCounts[{j}]) but rank {j} expects {expected} from rank {k} (its \
                     recvCounts[{k}])"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
