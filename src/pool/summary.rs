//! Reading a pool's accounting as a person would: `Display` for [`PoolStats`] and
//! [`SymPool::memory_summary`], a table like PyTorch's `memory_summary()`.

use std::fmt::{self, Write as _};

use super::tags::POOL_TAG;
use super::{PoolStats, SymPool};
use crate::heap::Bytes;

impl fmt::Display for PoolStats {
    /// A few lines: allocated (and peak), reserved (and the pool budget), free and
    /// fragmentation, the adapter's private region, HCCL's own buffers, counts; sizes in
    /// binary units.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let free = self.reserved - self.allocated;
        writeln!(
            f,
            "allocated  {:>12}  (peak {})",
            Bytes(self.allocated),
            Bytes(self.peak_allocated)
        )?;
        write!(f, "reserved   {:>12}  ", Bytes(self.reserved))?;
        // 0: a snapshot written before budgets.
        if self.budget != 0 {
            write!(f, "of budget {}, ", Bytes(self.budget))?;
        }
        writeln!(
            f,
            "in {} window(s), {} registration(s)",
            self.windows, self.registrations
        )?;
        writeln!(
            f,
            "free       {:>12}  largest region {}, fragmentation {:.1} %",
            Bytes(free),
            Bytes(self.largest_free),
            self.fragmentation * 100.0
        )?;
        writeln!(
            f,
            "private    {:>12}  of {} (allocator adapter)",
            Bytes(self.private_allocated),
            Bytes(self.private_reserved)
        )?;
        if !self.communicators.is_empty() {
            writeln!(
                f,
                "hccl bufs  {:>12}  staging buffers of {} communicator(s), outside the pool",
                Bytes(self.hccl_buffer_bytes()),
                self.communicators.len()
            )?;
        }
        let sleep = &self.sleep;
        if sleep.sleeps > 0 {
            let ago = |t: Option<std::time::SystemTime>| {
                t.and_then(|t| t.elapsed().ok())
                    .map_or("-".to_owned(), |d| format!("{:.1} s ago", d.as_secs_f64()))
            };
            writeln!(
                f,
                "sleep      {:>12}  {} sleep(s), last {}, last wake {}; {} on the host",
                if sleep.asleep { "asleep" } else { "awake" },
                sleep.sleeps,
                ago(sleep.last_sleep),
                ago(sleep.last_wake),
                Bytes(sleep.offloaded_bytes)
            )?;
        }
        write!(
            f,
            "calls      {} allocations, {} frees ({} pending), {} out of memory",
            self.alloc_count, self.free_count, self.pending_frees, self.oom_count
        )?;
        let (symmetric, staged) = self.symmetric_and_staged();
        write!(
            f,
            "\ncollectives {symmetric} symmetric (zero-copy), {staged} staged"
        )?;
        for c in self
            .collectives
            .iter()
            .filter(|c| c.path != crate::CollectivePath::Symmetric)
        {
            write!(f, "\n           {} x {}: {}", c.count, c.kind, c.path)?;
        }
        // One line per communicator once groups are attached.
        if self.communicators.len() > 1 {
            for (i, c) in self.communicators.iter().enumerate() {
                write!(
                    f,
                    "\n{:<11}{} (rank {} of {}): {} window(s), {} registration(s), \
                     {} symmetric, {} staged, {} HCCL buffers",
                    if i == 0 { "comms" } else { "" },
                    if c.name.is_empty() { "?" } else { &c.name },
                    c.rank,
                    c.ranks,
                    c.windows,
                    c.registrations,
                    c.symmetric,
                    c.staged,
                    Bytes(c.hccl_buffer_bytes)
                )?;
            }
        }
        Ok(())
    }
}

impl SymPool {
    /// The pool's accounting as a table: the totals (as [`PoolStats`] displays them), then
    /// live memory by tag (with each tag's budget, if it has one: see
    /// [`PoolConfig::tag_budget`](super::PoolConfig::tag_budget)), then each window's use.
    /// Rank-local.
    ///
    /// # Examples
    /// ```
    /// use symheap::{AllocDesc, PoolConfig, SymPool, SymVec, emu};
    ///
    /// emu::launch(1, |comm| {
    ///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
    ///     let _kv = SymVec::<f32>::zeroed_with(&pool, 256 << 10, AllocDesc::tagged("kv-cache"))?;
    ///     let summary = pool.memory_summary();
    ///     assert!(summary.contains("kv-cache"));
    ///     assert!(summary.contains("hccl bufs"));
    ///     assert!(summary.contains("1.00 MiB"));
    ///     println!("{summary}");
    ///     Ok(())
    /// })?;
    /// # Ok::<(), symheap::Error>(())
    /// ```
    pub fn memory_summary(&self) -> String {
        let snapshot = self.snapshot();
        let mut out = String::new();
        let rule = "-".repeat(72);
        let _ = writeln!(
            out,
            "symheap pool, rank {} of {}, op hash {:#018x}\n{rule}",
            snapshot.rank, snapshot.rank_count, snapshot.op_hash
        );
        let _ = writeln!(out, "{}\n{rule}", snapshot.stats);
        let _ = writeln!(
            out,
            "{:<24} {:>7} {:>11} {:>11} {:>11} {:>11} {:>11}",
            "tag", "blocks", "allocated", "peak", "budget", "resident", "offloadable"
        );
        for tag in &snapshot.stats.tags {
            let name = match tag.tag.as_str() {
                "" => "(untagged)",
                POOL_TAG => "symheap (pool's own)",
                other => other,
            };
            let budget = tag.budget.map_or("-".to_owned(), |b| Bytes(b).to_string());
            let _ = writeln!(
                out,
                "{name:<24} {:>7} {:>11} {:>11} {budget:>11} {:>11} {:>11}",
                tag.blocks,
                Bytes(tag.bytes).to_string(),
                Bytes(tag.peak_bytes).to_string(),
                Bytes(tag.resident_bytes).to_string(),
                Bytes(tag.offloadable_bytes).to_string()
            );
        }
        let _ = writeln!(
            out,
            "{rule}\n{:<8} {:>12} {:>12} {:>12} {:>14}",
            "window", "size", "allocated", "free", "largest free"
        );
        for (i, window) in snapshot.windows.iter().enumerate() {
            let free: Vec<u64> = window
                .regions
                .iter()
                .filter(|r| r.tag.is_none())
                .map(|r| r.size)
                .collect();
            let total_free: u64 = free.iter().sum();
            let _ = writeln!(
                out,
                "{i:<8} {:>12} {:>12} {:>12} {:>14}",
                Bytes(window.size).to_string(),
                Bytes(window.size - total_free).to_string(),
                Bytes(total_free).to_string(),
                Bytes(free.iter().copied().max().unwrap_or(0)).to_string()
            );
        }
        out
    }
}
