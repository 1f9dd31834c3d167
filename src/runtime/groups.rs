//! [`ParallelGroups`]: the tensor-, data- and expert-parallel communicators of one rank, split
//! from the world the way inference engines lay them out.

use super::{Comm, CommConfig};
use crate::{Error, Result};

/// What each kind of group adds to its sub-communicator ids, so that the ids (and so the
/// default names, `{world}_sub_{id}`) of every group differ.
const TP_IDS: u64 = 0x7470_0000;
const DP_IDS: u64 = 0x6470_0000;
const EP_IDS: u64 = 0x6570_0000;

/// One rank's tensor-parallel (TP), data-parallel (DP) and expert-parallel (EP) groups.
///
/// The world of `W` ranks is a grid: rank `r` is TP rank `r % tp` of TP group `r / tp` (TP
/// groups are `tp` consecutive ranks, so they stay inside a server), and DP rank `r / tp` of
/// DP group `r % tp` (the ranks that hold the same TP shard). EP groups are `ep` consecutive
/// ranks and hold whole TP groups. A group as large as the world is the world communicator
/// itself (no split), so an EP group of all ranks costs nothing.
///
/// # Examples
/// ```
/// use symheap::{ParallelGroups, emu};
///
/// let layout = emu::launch(4, |world| {
///     let groups = ParallelGroups::new(world, 2, 4)?;
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
    tp: Comm,
    dp: Comm,
    ep: Comm,
}

impl ParallelGroups {
    /// Splits `world` into groups of `tp` and `ep` ranks (and DP groups of `world / tp`),
    /// each with `world`'s settings. Collective over the world: every rank calls it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `tp` and `ep` divide the world size and `tp` divides
    /// `ep`; what [`Comm::split`] returns.
    pub fn new(world: &Comm, tp: u32, ep: u32) -> Result<ParallelGroups> {
        Self::with_config(world, tp, ep, world.config())
    }

    /// [`new`](Self::new), with `config` for every group (its `hcclCommName`, if set, would
    /// give them all one name: leave it unset).
    ///
    /// # Errors
    /// As for [`new`](Self::new).
    pub fn with_config(
        world: &Comm,
        tp: u32,
        ep: u32,
        config: &CommConfig,
    ) -> Result<ParallelGroups> {
        let w = world.rank_count();
        let divides = |d: u32, of: u32| d != 0 && of.is_multiple_of(d);
        if !divides(tp, w) || !divides(ep, w) || !divides(tp, ep) {
            return Err(Error::invalid(format!(
                "ParallelGroups: tp = {tp} and ep = {ep} must divide the world's {w} ranks, \
                 and tp must divide ep"
            )));
        }
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
            (0..w / tp).map(|k| r % tp + k * tp).collect(),
            DP_IDS + u64::from(r % tp),
        )?;
        let ep_comm = group(
            (r - r % ep..r - r % ep + ep).collect(),
            EP_IDS + u64::from(r / ep),
        )?;
        Ok(ParallelGroups {
            world: world.clone(),
            tp: tp_comm,
            dp: dp_comm,
            ep: ep_comm,
        })
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
