//! Which path a collective on pooled buffers would take, asked before calling it.

use crate::pool::predict;
use crate::{Collective, CollectivePath, Element, SymPool, SymVec};

impl SymPool {
    /// The path a `kind` collective from `input` to `output` takes: [`CollectivePath::Symmetric`]
    /// when HCCL reads the pool's windows directly, else why it stages, by HCCL's rules
    /// (the same on real hardware and on the emulator): the kind (AllReduce, AllGather,
    /// ReduceScatter and AlltoAll only), a one-rank communicator, the expansion mode (AI
    /// CPU only), and both buffers in windows of this pool's communicator.
    ///
    /// # Examples
    /// ```
    /// use symheap::{Collective, CollectivePath, PoolConfig, Staged, SymPool, SymVec, emu};
    ///
    /// emu::launch(2, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
    ///     let (a, b) = (SymVec::<f32>::zeroed(&pool, 8)?, SymVec::<f32>::zeroed(&pool, 16)?);
    ///     assert_eq!(pool.path(Collective::AllGather, &a, &b), CollectivePath::Symmetric);
    ///     let staged = pool.path(Collective::AllGatherV, &a, &b);
    ///     assert_eq!(staged, CollectivePath::Staged(Staged::Kind));
    ///     Ok(())
    /// })?;
    /// # Ok::<(), symheap::Error>(())
    /// ```
    pub fn path<T: Element, U: Element>(
        &self,
        kind: Collective,
        input: &SymVec<T>,
        output: &SymVec<U>,
    ) -> CollectivePath {
        let ours = [input.alloc(), output.alloc()]
            .iter()
            .all(|b| b.belongs_to(self.shared()));
        predict(&self.target().comm, kind, ours)
    }
}
