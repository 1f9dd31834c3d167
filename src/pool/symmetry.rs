//! Checking that every rank made the same calls: an AllGather of the op hashes.

use super::call_log::{LOG_WORDS, explain};
use super::{PoolShared, PoolState, SymPool};
use crate::raw::Mapping;
use crate::runtime::{Element, Stream};
use crate::{Error, Result};

impl SymPool {
    /// Compares every rank's [`op_hash`](Self::op_hash). Collective; synchronises the pool's
    /// stream.
    ///
    /// It catches a rank whose pool calls differ from rank 0's since the pool was made: an
    /// extra or missing allocation or free, and a skipped, extra or different collective
    /// (kind, count, type, reduction, root, buffers, and the count and displacement arrays of
    /// `all_gather_v` and `reduce_scatter_v`, which every rank passes alike). In strict mode
    /// ([`PoolConfig::strict_symmetry`](crate::PoolConfig::strict_symmetry)) the check runs
    /// before every collective, with that collective already counted, so a mismatched one
    /// never runs. What it cannot see:
    /// - calls that bypass the pool (collectives issued on the [`Comm`](crate::Comm)
    ///   directly), and the values in the buffers;
    /// - [`all_to_all_v`](Self::all_to_all_v)'s count and displacement arrays, which differ
    ///   between ranks by design (its kind, type and buffers are recorded);
    /// - point-to-point [`send`](Self::send) and [`recv`](Self::recv): only two ranks take
    ///   part, so they are not recorded (a third rank would disagree), and strict mode does
    ///   not check before them (its check is a collective of every rank);
    /// - without strict mode, what happened between the divergence and the check: the
    ///   collectives in between were paired by order, and on real hardware a mismatched pair
    ///   can exchange wrong data before the check reports it (the emulator rejects one whose
    ///   signature or offsets differ);
    /// - a difference that cancels out before the check: a rank that skips a collective and
    ///   later makes one extra identical call (same kind, count, type, reduction and buffers)
    ///   ends with the same hash.
    ///
    /// When the hashes differ, the ranks also gather each one's log of its last 64 pool calls
    /// and the error names, for each differing rank, its first call that has no match on
    /// rank 0, in the user's terms: `rank 2's allocation #5 (4096 B, tag "kv") has no match
    /// on rank 0, whose call there is allocation #5 (4096 B, tag "x")`. Allocations are
    /// numbered as [snapshots](Self::snapshot) number them; a tag shows its first 16 bytes.
    ///
    /// # Errors
    /// [`Error::Asymmetric`] on every rank, naming the ranks whose hash differs from rank 0's
    /// and the calls that differ, when the ranks' call histories differ; the runtime's error.
    pub fn verify_symmetric(&self) -> Result<()> {
        let mut state = self.shared.lock();
        self.shared.verify_locked(&mut state)
    }
}

impl PoolShared {
    /// The symmetry check, with the state lock held (so no call can change the hash while the
    /// ranks compare it).
    pub(crate) fn verify_locked(&self, state: &mut PoolState) -> Result<()> {
        self.check_usable()?;
        self.check_awake("verify_symmetric")?;
        self.quiesce(state)?;
        let hashes = self.gather_word(state, state.op_hash())?;
        let ranks = hashes.len();
        let differing: Vec<usize> = (1..ranks).filter(|&r| hashes[r] != hashes[0]).collect();
        if differing.is_empty() {
            return Ok(());
        }
        let listing: Vec<String> = hashes
            .iter()
            .enumerate()
            .map(|(r, h)| format!("rank {r}: {h:#018x}"))
            .collect();
        let calls = match self.gather_logs(state, &self.stream) {
            Ok(logs) => explain(&split(&logs), &differing),
            Err(e) => format!("their call logs could not be gathered: {e}"),
        };
        Err(Error::Asymmetric(format!(
            "ranks {differing:?} made different pool calls from rank 0: {calls} (op hashes: {})",
            listing.join(", ")
        )))
    }

    /// Every rank's `mine`, in rank order: an AllGather through the pool's check block on
    /// the pool's stream, waited for. With the state lock held (the check block is only ever
    /// used under it, and every use ends with a synchronisation).
    fn gather_word(&self, state: &PoolState, mine: u64) -> Result<Vec<u64>> {
        let ranks = self.comm().rank_count() as usize;
        let check_block = state
            .check_block
            .as_ref()
            .expect("the pool keeps its check block");
        let base = state.device_ptr(check_block);
        let rt = self.runtime();
        // SAFETY: the block holds (ranks + 1) u64s (made for at least this many ranks): our
        // word first, then everyone's; no queued work touches it now (see above).
        unsafe {
            rt.raw()
                .copy_to_device(base, u64::slice_as_bytes(&[mine]))?
        };
        // SAFETY: as above; the gathered words land after our own.
        unsafe {
            self.comm().raw().all_gather(
                base,
                base.byte_add(8),
                1,
                u64::DATA_TYPE.into(),
                &self.stream,
            )?
        };
        self.wait_or_poison([&self.stream])?;
        let mut words = vec![0u64; ranks];
        // SAFETY: as above; the stream is synchronised.
        unsafe {
            rt.raw()
                .copy_to_host(u64::slice_as_bytes_mut(&mut words), base.byte_add(8))?
        };
        // A failure another thread's wait found meanwhile: the words may not be the gather's.
        self.check_usable()?;
        Ok(words)
    }

    /// `failed`, the error of a wait for queued work, told in the user's terms where it is
    /// the emulator's refusal of a collective whose ranks passed different buffers or made
    /// different calls (which every rank sees): the ranks gather their call logs on a stream
    /// of their own (the pool's failed) and name the calls that differ
    /// ([`Error::Asymmetric`], with the refusal). Any other error is returned as it is.
    pub(crate) fn explain_refused_collective(&self, state: &PoolState, failed: Error) -> Error {
        let refusal = failed.to_string();
        let asymmetric = [
            "asymmetric buffers",
            "ranks made different calls as collective",
        ];
        if !matches!(failed, Error::Collective { .. })
            || !self.runtime().is_host_addressable()
            || !asymmetric.iter().any(|a| refusal.contains(a))
        {
            return failed;
        }
        let gathered = Stream::new(self.runtime()).and_then(|s| self.gather_logs(state, &s));
        let Ok(logs) = gathered else {
            return failed;
        };
        let logs = split(&logs);
        let differing: Vec<usize> = (1..logs.len()).filter(|&r| logs[r] != logs[0]).collect();
        if differing.is_empty() {
            return failed;
        }
        Error::Asymmetric(format!(
            "ranks {differing:?} made different pool calls from rank 0: {} (and so {refusal})",
            explain(&logs, &differing)
        ))
    }

    /// Every rank's call log, gathered: [`LOG_WORDS`] words per rank, in rank order.
    /// Collective over the pool's communicator, on `stream`, through memory of its own
    /// outside the windows (the heaps may differ between ranks by now).
    fn gather_logs(&self, state: &PoolState, stream: &Stream) -> Result<Vec<u64>> {
        let ranks = self.comm().rank_count() as usize;
        let words = LOG_WORDS as u64;
        let bytes = (ranks as u64 + 1) * words * 8;
        let size = bytes.div_ceil(self.device_granularity) * self.device_granularity;
        let rt = self.runtime();
        let mapping = Mapping::allocate(rt, size, self.comm().device())?;
        let base = mapping.ptr();
        let gathered = base.byte_add(words * 8);
        let mine = state.log.to_words();
        // SAFETY: the mapping holds (ranks + 1) logs: ours first, then everyone's; nothing
        // else uses it.
        unsafe { rt.raw().copy_to_device(base, u64::slice_as_bytes(&mine))? };
        // SAFETY: as above; the stream is synchronised before the mapping drops.
        unsafe {
            self.comm()
                .raw()
                .all_gather(base, gathered, words, u64::DATA_TYPE.into(), stream)?
        };
        self.comm().synchronize(stream)?;
        let mut all = vec![0u64; ranks * LOG_WORDS];
        // SAFETY: as above; the stream is synchronised.
        unsafe {
            rt.raw()
                .copy_to_host(u64::slice_as_bytes_mut(&mut all), gathered)?
        };
        Ok(all)
    }
}

/// Gathered logs, one slice per rank.
fn split(logs: &[u64]) -> Vec<&[u64]> {
    logs.chunks(LOG_WORDS).collect()
}
