//! [`ParallelGroups`]: the tensor-, data- and expert-parallel communicators of one rank, split
//! from the world the way inference engines lay them out.

use super::{Comm, CommConfig};
use crate::{Error, Result};

/// What each kind of group adds to its sub-communicator ids, so that the ids (and so the
/// default names, `{world}_sub_{id}`) of every group differ.
const TP_IDS: u64 = 0x7470_0000;
const DP_IDS: u64 = 0x6470_0000;
const EP_IDS: u64 = 0x6570_0000;

/// The sizes of a world's parallel groups, each named: what [`ParallelGroups::new`] splits.
///
/// `tp` ranks per tensor-parallel group, `dp` per data-parallel group and `ep` per
/// expert-parallel group. They fit a world of `W` ranks when every size is at least 1,
/// `tp * dp == W`, `tp` divides `ep` (an EP group holds whole TP groups) and `ep` divides `W`;
/// [`check`](Self::check) says which rule fails.
///
/// # Examples
/// ```
/// use symheap::GroupSizes;
///
/// assert!(GroupSizes { tp: 2, dp: 2, ep: 4 }.check(4).is_ok());
/// let e = GroupSizes { tp: 2, dp: 4, ep: 4 }.check(4).unwrap_err();
/// assert!(e.to_string().contains("tp x dp = 2 x 4 = 8 is not the world's 4 ranks"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupSizes {
    /// Ranks per tensor-parallel group: consecutive ranks (so they stay inside a server).
    pub tp: u32,
    /// Ranks per data-parallel group: the ranks that hold the same TP shard.
    pub dp: u32,
    /// Ranks per expert-parallel group: consecutive ranks, whole TP groups.
    pub ep: u32,
}

impl GroupSizes {
    /// `Ok` if these sizes lay out a world of `world_size` ranks; else which rule fails.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the sizes and the first rule they break, in this
    /// order: a size is 0; `tp * dp` is not `world_size`; `tp` does not divide `ep`; `ep`
    /// does not divide `world_size`.
    pub fn check(&self, world_size: u32) -> Result<()> {
        let GroupSizes { tp, dp, ep } = *self;
        let fail = |rule: String| {
            Err(Error::invalid(format!(
                "ParallelGroups: tp = {tp}, dp = {dp}, ep = {ep} on a world of {world_size} \
                 ranks: {rule}"
            )))
        };
        for (name, size) in [("tp", tp), ("dp", dp), ("ep", ep)] {
            if size == 0 {
                return fail(format!("{name} is 0; every size must be at least 1"));
            }
        }
        let product = u64::from(tp) * u64::from(dp);
        if product != u64::from(world_size) {
            return fail(format!(
                "tp x dp = {tp} x {dp} = {product} is not the world's {world_size} ranks"
            ));
        }
        if !ep.is_multiple_of(tp) {
            return fail(format!(
                "tp = {tp} does not divide ep = {ep} (an EP group holds whole TP groups)"
            ));
        }
        if !world_size.is_multiple_of(ep) {
            return fail(format!(
                "ep = {ep} does not divide the world's {world_size} ranks"
            ));
        }
        Ok(())
    }
}

/// One rank's tensor-parallel (TP), data-parallel (DP) and expert-parallel (EP) groups.
///
/// The world of `W = tp * dp` ranks is a grid: rank `r` is TP rank `r % tp` of TP group
/// `r / tp` (TP groups are `tp` consecutive ranks, so they stay inside a server), and DP rank
/// `r / tp` of DP group `r % tp` (the `dp` ranks that hold the same TP shard). EP groups are
/// `ep` consecutive ranks and hold whole TP groups. A group as large as the world is the world
/// communicator itself (no split), so an EP group of all ranks costs nothing.
///
/// # Examples
/// ```
/// use symheap::{GroupSizes, ParallelGroups, emu};
///
/// let layout = emu::launch(4, |world| {
///     let groups = ParallelGroups::new(world, GroupSizes { tp: 2, dp: 2, ep: 4 })?;
///     // TP pairs {0, 1} and {2, 3}, DP pairs {0, 2} and {1, 3}, EP = the world.
///     assert!(groups.ep().same_as(world));
///     Ok((groups.tp().global_ranks(), groups.dp().global_ranks()))
/// })?;
/// assert_eq!(layout[2], (vec![2, 3], vec![0, 2]));
/// # Ok::<(), symheap::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct ParallelGroups {
    world: Comm,
    sizes: GroupSizes,
    tp: Comm,
    dp: Comm,
    ep: Comm,
}

impl ParallelGroups {
    /// Splits `world` into groups of `sizes.tp`, `sizes.dp` and `sizes.ep` ranks, each with
    /// `world`'s settings. Collective over the world: every rank calls it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the sizes do not fit the world ([`GroupSizes::check`]:
    /// every size at least 1, `tp * dp` the world size, `tp` divides `ep`, `ep` divides the
    /// world size), before any split; what [`Comm::split`] returns.
    pub fn new(world: &Comm, sizes: GroupSizes) -> Result<ParallelGroups> {
        Self::with_config(world, sizes, world.config())
    }

    /// [`new`](Self::new), with `config` for every group (its `hcclCommName`, if set, would
    /// give them all one name: leave it unset).
    ///
    /// # Errors
    /// As for [`new`](Self::new).
    pub fn with_config(
        world: &Comm,
        sizes: GroupSizes,
        config: &CommConfig,
    ) -> Result<ParallelGroups> {
        let w = world.rank_count();
        sizes.check(w)?;
        let GroupSizes { tp, dp, ep } = sizes;
        let r = world.rank();
        let group = |ranks: Vec<u32>, id: u64| match ranks.len() as u32 == w {
            true => Ok(world.clone()),
            false => world.split(&ranks, id, config),
        };
        let tp_comm = group(
            (r - r % tp..r - r % tp + tp).collect(),
            TP_IDS + u64::from(r / tp),
        )?;
        let dp_comm = group(
            (0..dp).map(|k| r % tp + k * tp).collect(),
            DP_IDS + u64::from(r % tp),
        )?;
        let ep_comm = group(
            (r - r % ep..r - r % ep + ep).collect(),
            EP_IDS + u64::from(r / ep),
        )?;
        Ok(ParallelGroups {
            world: world.clone(),
            sizes,
            tp: tp_comm,
            dp: dp_comm,
            ep: ep_comm,
        })
    }

    /// The sizes the groups were made with.
    pub fn sizes(&self) -> GroupSizes {
        self.sizes
    }

    /// The world the groups were split from.
    pub fn world(&self) -> &Comm {
        &self.world
    }

    /// This rank's tensor-parallel group.
    pub fn tp(&self) -> &Comm {
        &self.tp
    }

    /// This rank's data-parallel group.
    pub fn dp(&self) -> &Comm {
        &self.dp
    }

    /// This rank's expert-parallel group.
    pub fn ep(&self) -> &Comm {
        &self.ep
    }

    /// The distinct groups other than the world, in TP, DP, EP order: what a pool on the world
    /// attaches ([`SymPool::attach`](crate::SymPool::attach)).
    pub fn sub_groups(&self) -> Vec<&Comm> {
        let mut out: Vec<&Comm> = Vec::new();
        for g in [&self.tp, &self.dp, &self.ep] {
            if !g.same_as(&self.world) && !out.iter().any(|o| o.same_as(g)) {
                out.push(g);
            }
        }
        out
    }
}
