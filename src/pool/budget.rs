//! Budgets: the pool budget on the device memory the windows hold, and tag budgets on the live
//! bytes of each tag ([`PoolConfig::budget`], [`PoolConfig::tag_budget`]).
//!
//! Both are checked against the pool's own accounting, which is the same on every rank that
//! made the same calls, so every rank refuses the same request with the same report and no
//! rank has to ask the others. A tag budget is checked before the pool looks for room, so a
//! refusal leaves the heaps (and their op hashes) as they were; only the count of refusals
//! (`oom_count`) moves, alike on every rank.

use super::{PoolConfig, PoolShared, PoolState};
use crate::{Budget, Error, OutOfMemory, OverBudget, Result};

/// What a refusal by the pool budget tells the caller to raise.
const POOL_BUDGET_SETTING: &str =
    "PoolConfig::budget (alias max_capacity; or free tensors / call synchronize)";

/// What a refusal by a tag budget tells the caller to raise.
const TAG_BUDGET_SETTING: &str = "PoolConfig::tag_budget";

impl PoolState {
    /// Refuses an allocation of `size` bytes tagged `tag` that would take the tag past its
    /// budget in `config`. Changes nothing but the count of refusals.
    ///
    /// A request the heap would refuse as bad input (size 0, an alignment that is not a power
    /// of two, a size that overflows when rounded) passes: the heap then says what is wrong
    /// with it, as it would without a budget.
    pub(super) fn check_tag_budget(
        &mut self,
        config: &PoolConfig,
        size: u64,
        align: u64,
        tag: &'static str,
    ) -> Result<()> {
        let Some(limit) = config.tag_budget_bytes(tag) else {
            return Ok(());
        };
        if align != 0 && !align.is_power_of_two() {
            return Ok(());
        }
        // The heap grants the request rounded up to the granularity, never more.
        let Some(granted) = size.checked_next_multiple_of(config.granularity_bytes()) else {
            return Ok(());
        };
        let used = self.tags.bytes(tag);
        if used.saturating_add(granted) <= limit {
            return Ok(());
        }
        self.oom_count += 1;
        Err(Error::OutOfMemory(OutOfMemory {
            requested: size,
            align: align.max(config.granularity_bytes()),
            capacity: self.reserved(),
            free: self.free(),
            largest_free: self.largest_free(),
            setting: TAG_BUDGET_SETTING,
            configured: limit,
            over_budget: Some(OverBudget {
                budget: Budget::Tag(tag.to_owned()),
                limit,
                used,
                adding: granted,
            }),
        }))
    }

    /// The error for a request that fits nowhere and whose window of `adding` bytes would take
    /// the pool past its budget: the same on every rank that made the same calls.
    pub(super) fn over_pool_budget(
        &self,
        pool: &PoolShared,
        size: u64,
        align: u64,
        adding: u64,
    ) -> Error {
        let limit = pool.config.budget_bytes();
        Error::OutOfMemory(OutOfMemory {
            requested: size,
            align: align.max(pool.config.granularity_bytes()),
            capacity: self.reserved(),
            free: self.free(),
            largest_free: self.largest_free(),
            setting: POOL_BUDGET_SETTING,
            configured: limit,
            over_budget: Some(OverBudget {
                budget: Budget::Pool,
                limit,
                used: self.reserved(),
                adding,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{Error, PoolConfig};

    fn refusal(config: PoolConfig) -> String {
        match config.validate() {
            Err(Error::InvalidArgument(msg)) => msg,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn bad_budgets_are_refused_by_name() {
        let base = || PoolConfig::new(4 << 20);
        assert!(refusal(base().budget(0)).contains("must be non-zero"));
        let below = refusal(base().budget(2 << 20));
        assert!(
            below.contains("budget") && below.contains("below the capacity"),
            "{below}"
        );
        let zero = refusal(base().tag_budget("kv", 0));
        assert!(zero.contains(r#"tag "kv" must be non-zero"#), "{zero}");
        let twice = refusal(base().tag_budget("kv", 1 << 20).tag_budget("kv", 2 << 20));
        assert!(
            twice.contains(r#"tag "kv" is given a budget twice"#),
            "{twice}"
        );
        assert!(refusal(base().tag_budget("symheap", 1 << 20)).contains("pool's own"));
        let good = base()
            .budget(8 << 20)
            .tag_budget("", 512)
            .tag_budget("kv", 1 << 20);
        good.validate().unwrap();
        // `budget` and `max_capacity` are one setting: the last call wins.
        let both = base().budget(8 << 20).max_capacity(6 << 20);
        assert_eq!(
            (both.budget_bytes(), both.max_capacity_bytes()),
            (6 << 20, 6 << 20)
        );
        assert_eq!(base().budget_bytes(), 4 << 20);
    }
}
