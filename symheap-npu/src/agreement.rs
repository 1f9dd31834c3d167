//! Agreeing before a collective step (attaching a communicator, registering a new segment):
//! every rank gathers every rank's verdict (whether its own part worked) and its history (how
//! many allocator calls it made, and a fingerprint folded from them), with one small
//! AllGather, and every rank refuses the step alike when some rank failed or made other calls
//! than rank 0. So a divergence is reported, with the ranks it concerns, at the next
//! agreement, before anything is registered: no hang, no asymmetric window.

use symheap::raw::{DevicePtr, Mapping, calls};
use symheap::sys::{HcclComm, HcclDataType, HcclResult, aclrtMemcpyKind};
use symheap::{Runtime, Stream};

use crate::error::{Failure, Outcome};

/// One rank's word in an agreement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the rank's own part of the step worked.
    pub ok: bool,
    /// How many allocator calls the rank has made.
    pub calls: u64,
    /// The fold of those calls.
    pub fingerprint: u64,
}

/// The words per verdict on the wire.
const WORDS: usize = 3;

/// Where the gathered verdicts start in the scratch memory (this rank's own is at 0).
const GATHERED_AT: u64 = 64;

/// Every rank's verdict, gathered over `comm` (an AllGather on `stream` through `scratch`,
/// waited for). Collective.
///
/// # Errors
/// The runtime's error; [`HcclResult::HCCL_E_PARA`] if the scratch memory cannot hold the
/// verdicts of `ranks` ranks.
///
/// # Safety
/// `comm` is a live communicator of `rt` with `ranks` ranks, used by no other thread during
/// the call; `scratch` is device memory no queued work uses.
pub unsafe fn gather(
    rt: &Runtime,
    comm: HcclComm,
    ranks: u32,
    scratch: &Mapping,
    stream: &Stream,
    mine: Verdict,
) -> Outcome<Vec<Verdict>> {
    let n = ranks as usize;
    let bytes = 8 * WORDS;
    if GATHERED_AT + (bytes * n) as u64 > scratch.size() {
        return Err(Failure::invalid(format!(
            "the verdicts of {ranks} ranks do not fit the agreement's scratch memory"
        )));
    }
    let send: DevicePtr = scratch.ptr();
    let recv = scratch.ptr().byte_add(GATHERED_AT);
    let words = [u64::from(mine.ok), mine.calls, mine.fingerprint];
    let mut gathered = vec![0u64; WORDS * n];
    // SAFETY: the scratch is device memory of at least GATHERED_AT + 24 n bytes (checked),
    // which no queued work uses (the caller's contract); the copies are synchronous and the
    // AllGather is waited for before the copy back; `comm` is live and ours for the call.
    unsafe {
        calls::aclrtMemcpy(
            rt,
            send.as_raw(),
            bytes,
            words.as_ptr().cast(),
            bytes,
            aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE,
        )?;
        calls::HcclAllGather(
            rt,
            send.as_raw(),
            recv.as_raw(),
            WORDS as u64,
            HcclDataType::HCCL_DATA_TYPE_UINT64,
            comm,
            stream.as_raw(),
        )?;
        stream.synchronize()?;
        calls::aclrtMemcpy(
            rt,
            gathered.as_mut_ptr().cast(),
            bytes * n,
            recv.as_raw(),
            bytes * n,
            aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
        )?;
    }
    Ok(gathered
        .chunks_exact(WORDS)
        .map(|w| Verdict {
            ok: w[0] != 0,
            calls: w[1],
            fingerprint: w[2],
        })
        .collect())
}

/// What the gathered verdicts `all` mean for the step `what`, on rank `me`: `Ok` when every
/// rank's part worked and every rank made the same calls as rank 0; otherwise the same error
/// on every rank (the ranks that made other calls come first: they are the cause).
///
/// # Errors
/// `HCCL_E_INTERNAL` naming the ranks whose history differs from rank 0's, or the ranks whose
/// part failed (`HCCL_E_MEMORY`).
pub fn judge(all: &[Verdict], me: u32, what: &str) -> Outcome<()> {
    let Some(first) = all.first() else {
        return Ok(());
    };
    let differ: Vec<usize> = (1..all.len())
        .filter(|&r| (all[r].calls, all[r].fingerprint) != (first.calls, first.fingerprint))
        .collect();
    if let Some(&r) = differ.first() {
        let mut message = format!(
            "ranks {differ:?} made different allocation calls from rank 0 (rank 0: {} calls, \
             fingerprint {:#018x}; rank {r}: {} calls, fingerprint {:#018x}); every rank refuses \
             to {what}, nothing was registered",
            first.calls, first.fingerprint, all[r].calls, all[r].fingerprint
        );
        if differ.contains(&(me as usize)) {
            message.push_str(&format!(" (this is rank {me})"));
        }
        return Err(Failure::new(HcclResult::HCCL_E_INTERNAL, message));
    }
    let failed: Vec<usize> = (0..all.len()).filter(|&r| !all[r].ok).collect();
    if !failed.is_empty() {
        return Err(Failure::new(
            HcclResult::HCCL_E_MEMORY,
            format!(
                "ranks {failed:?} could not {what}; every rank refuses it, nothing was registered"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(ok: bool, calls: u64, fingerprint: u64) -> Verdict {
        Verdict {
            ok,
            calls,
            fingerprint,
        }
    }

    #[test]
    fn agreeing_ranks_pass() {
        let all = [v(true, 3, 7); 4];
        assert_eq!(judge(&all, 1, "attach"), Ok(()));
    }

    #[test]
    fn a_different_history_names_its_ranks_first() {
        let mut all = [v(true, 3, 7); 4];
        all[2] = v(false, 4, 9);
        let e = judge(&all, 0, "attach").unwrap_err();
        assert_eq!(e.code, HcclResult::HCCL_E_INTERNAL);
        assert!(
            e.message
                .starts_with("ranks [2] made different allocation calls from rank 0"),
            "{e}"
        );
        assert!(e.message.contains("rank 2: 4 calls"), "{e}");
        let mine = judge(&all, 2, "attach").unwrap_err();
        assert!(mine.message.ends_with("(this is rank 2)"), "{mine}");
    }

    #[test]
    fn a_failed_part_names_its_ranks() {
        let mut all = [v(true, 3, 7); 3];
        all[1].ok = false;
        let e = judge(&all, 0, "make a segment").unwrap_err();
        assert_eq!(e.code, HcclResult::HCCL_E_MEMORY);
        assert!(
            e.message.starts_with("ranks [1] could not make a segment"),
            "{e}"
        );
    }
}
