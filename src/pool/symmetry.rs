//! Checking that every rank made the same calls: an AllGather of the op hashes.

use super::{PoolShared, PoolState, SymPool};
use crate::runtime::Element;
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
    /// # Errors
    /// [`Error::Asymmetric`] on every rank, naming the ranks whose hash differs from rank 0's,
    /// when the ranks' call histories differ; the runtime's error.
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
        let ranks = self.comm().rank_count() as usize;
        let mine = state.op_hash();
        let check_block = state
            .check_block
            .as_ref()
            .expect("the pool keeps its check block");
        let base = state.device_ptr(check_block);
        let rt = self.runtime();
        // The check block is only ever used here, under the lock, and every use ends with a
        // synchronisation, so no queued work touches it now.
        // SAFETY: the block holds (ranks + 1) u64s: our hash first, then everyone's.
        unsafe {
            rt.raw()
                .copy_to_device(base, u64::slice_as_bytes(&[mine]))?
        };
        // SAFETY: as above; the gathered hashes land after our own.
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
        let mut hashes = vec![0u64; ranks];
        // SAFETY: as above; the stream is synchronised.
        unsafe {
            rt.raw()
                .copy_to_host(u64::slice_as_bytes_mut(&mut hashes), base.byte_add(8))?
        };
        // A failure another thread's wait found meanwhile: the hashes may not be the gather's.
        self.check_usable()?;
        let differing: Vec<usize> = (1..ranks).filter(|&r| hashes[r] != hashes[0]).collect();
        if differing.is_empty() {
            return Ok(());
        }
        let listing: Vec<String> = hashes
            .iter()
            .enumerate()
            .map(|(r, h)| format!("rank {r}: {h:#018x}"))
            .collect();
        Err(Error::Asymmetric(format!(
            "ranks {differing:?} made different allocation calls from rank 0 ({})",
            listing.join(", ")
        )))
    }
}
