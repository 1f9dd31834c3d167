//! Agreeing on a local step before a collective one. A rank whose own part of a window fails
//! (its reservation, physical memory or mapping) would otherwise not call
//! `HcclCommSymWinRegister`, and its peers would wait there for the exec timeout (HCCL's
//! registration returns early on a bad argument, too). So before registering, every rank
//! gathers every rank's verdict with one small AllGather, and all of them give up at once if
//! any rank failed.

use std::sync::Arc;

use super::Mapping;
use super::{Comm, Element, RootInfo, Stream};
use crate::sys::HCCL_ROOT_INFO_BYTES;
use crate::sys::HcclDataType;
use crate::{Error, Result};

/// What an agreement came to.
pub(crate) enum Agreed<T> {
    /// Every rank succeeded.
    Ok(T),
    /// Some rank failed, and every rank knows it: this rank's own error, or on the others
    /// [`Error::Asymmetric`] naming the ranks that failed.
    Failed(Error),
    /// The agreement itself could not run (its AllGather failed: a peer did not come in
    /// time), so the ranks may not know the same: this rank's own error if it failed, else
    /// the agreement's, and this rank's value if it had one (not dropped here: dropping it
    /// may be a collective step, which peers that are elsewhere would not take).
    Broken(Error, Option<T>),
}

impl Comm {
    /// Every rank's `mine`, agreed: `mine`'s value if every rank succeeded; this rank's own
    /// error if it failed; on the others, [`Error::Asymmetric`] naming the ranks that failed
    /// and `what` they failed to do. Collective: every rank calls it at the same point.
    ///
    /// # Errors
    /// As above; also the runtime's error if the agreement itself cannot run (its scratch
    /// memory, made once per communicator, or the AllGather).
    pub(crate) fn agree<T>(&self, what: &str, mine: Result<T>) -> Result<T> {
        match self.try_agree(what, mine) {
            Agreed::Ok(value) => Ok(value),
            Agreed::Failed(e) | Agreed::Broken(e, _) => Err(e),
        }
    }

    /// [`agree`](Self::agree), telling an agreed failure from an agreement that could not
    /// run.
    pub(crate) fn try_agree<T>(&self, what: &str, mine: Result<T>) -> Agreed<T> {
        let failed = match self.failed_ranks(mine.is_ok()) {
            Ok(failed) => failed,
            Err(e) => {
                return match mine {
                    Ok(value) => Agreed::Broken(e, Some(value)),
                    Err(own) => Agreed::Broken(own, None),
                };
            }
        };
        match (mine, failed.is_empty()) {
            (Ok(value), true) => Agreed::Ok(value),
            (Err(e), _) => Agreed::Failed(e),
            (Ok(_), false) => Agreed::Failed(Error::Asymmetric(format!(
                "rank(s) {failed:?} could not {what}; nothing was registered on any rank"
            ))),
        }
    }

    /// A new root info, made by rank 0 and handed to every rank through this communicator:
    /// the bootstrap of a new communicator of the same ranks ([`Comm::init`]), for when this
    /// one is to be released, as a deep sleep of a pool does
    /// ([`SleepPlan::release_communicators`](crate::SleepPlan::release_communicators)).
    /// Collective.
    ///
    /// # Examples
    /// ```
    /// use symheap::{Comm, CommConfig, emu};
    ///
    /// let ranks = emu::launch(2, |comm| {
    ///     let root = comm.fresh_root_info()?;
    ///     let again = Comm::init(comm.runtime(), 2, &root, comm.rank(), &CommConfig::new())?;
    ///     Ok(again.rank())
    /// })?;
    /// assert_eq!(ranks, [0, 1]);
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// Rank 0's error making the root info (on the others [`Error::Asymmetric`]); the
    /// runtime's error.
    pub fn fresh_root_info(&self) -> Result<RootInfo> {
        let made = if self.rank() == 0 {
            RootInfo::new(self.runtime()).map(Some)
        } else {
            Ok(None)
        };
        let made = self.agree("make a new root info", made)?;
        let scratch = self.agreement_scratch()?;
        let at = self.gathered_end();
        let len = HCCL_ROOT_INFO_BYTES as u64;
        if at + len > scratch.size() {
            return Err(Error::invalid(format!(
                "a root info ({len} bytes) does not fit the agreement's scratch memory"
            )));
        }
        let buf = scratch.ptr().byte_add(at);
        let rt = self.runtime();
        let stream = Stream::new(rt)?;
        let mut bytes = made.map_or([0; HCCL_ROOT_INFO_BYTES], |root| root.as_bytes());
        // SAFETY: as for `failed_ranks`: the communicator's own scratch, past the verdicts,
        // used by one agreement at a time; the stream is waited for before the copy back.
        unsafe {
            rt.raw().copy_to_device(buf, &bytes)?;
            self.raw()
                .broadcast(buf, len, HcclDataType::HCCL_DATA_TYPE_UINT8, 0, &stream)?;
            self.synchronize(&stream)?;
            rt.raw().copy_to_host(&mut bytes, buf)?;
        }
        RootInfo::from_bytes(&bytes)
    }

    /// The ranks whose verdict was "failed", gathered from every rank.
    fn failed_ranks(&self, ok: bool) -> Result<Vec<u32>> {
        let verdicts = self.gather_words(u64::from(!ok))?;
        Ok((0..verdicts.len() as u32)
            .filter(|&r| verdicts[r as usize] != 0)
            .collect())
    }

    /// Every rank's `word`, in rank order, gathered through the agreements' scratch memory
    /// (so it needs no other device memory: a pool that sleeps can still compare). Collective.
    pub(crate) fn gather_words(&self, word: u64) -> Result<Vec<u64>> {
        let scratch = self.agreement_scratch()?;
        let n = self.rank_count() as usize;
        let rt = self.runtime();
        let stream = Stream::new(rt)?;
        let (send, recv) = (scratch.ptr(), scratch.ptr().byte_add(64));
        let mut words = vec![0u64; n];
        // SAFETY: the scratch is this communicator's own, a granule long (the 64 + 8n bytes
        // of `gathered_end` fit), and only agreements touch it, one at a time (collective
        // calls are made in the same order on every rank, and this one waits for its stream
        // before returning).
        unsafe {
            rt.raw().copy_to_device(send, &word.to_ne_bytes())?;
            self.raw()
                .all_gather(send, recv, 1, HcclDataType::HCCL_DATA_TYPE_UINT64, &stream)?;
            self.synchronize(&stream)?;
            rt.raw()
                .copy_to_host(u64::slice_as_bytes_mut(&mut words), recv)?;
        }
        Ok(words)
    }

    /// Where the gathered words end in the agreements' scratch memory (this rank's word, then
    /// every rank's from byte 64), rounded to 64 bytes.
    fn gathered_end(&self) -> u64 {
        (64 + 8 * u64::from(self.rank_count())).next_multiple_of(64)
    }

    /// Frees the agreements' scratch memory (a sleeping pool gives back all the device memory
    /// it can); the next agreement makes it again. Local.
    pub(crate) fn release_agreement_scratch(&self) {
        let scratch = self
            .agreement_slot()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(scratch);
    }

    /// The device memory agreements run in: one granule, made at the first agreement and
    /// kept with the communicator.
    fn agreement_scratch(&self) -> Result<Arc<Mapping>> {
        let mut slot = self
            .agreement_slot()
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(scratch) = &*slot {
            return Ok(Arc::clone(scratch));
        }
        let rt = self.runtime();
        let size = rt.round_to_granularity(self.gathered_end(), self.device())?;
        let scratch = Arc::new(Mapping::allocate(rt, size, self.device())?);
        *slot = Some(Arc::clone(&scratch));
        Ok(scratch)
    }
}
