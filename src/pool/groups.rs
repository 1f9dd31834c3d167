//! One pool, several communicators: a pool on the world registers every segment in each
//! sub-communicator it has [attached](SymPool::attach), and a handle
//! [on a group](SymPool::on_group) runs its collectives there, on the same memory.

use super::{PoolShared, SymPool};
use crate::heap::fold_words;
use crate::raw::Window;
use crate::runtime::{Comm, Stream};
use crate::{Error, Result};

/// What the op hash records for an attach: a word no collective kind uses, then the group's
/// size.
const ATTACH_WORD: u64 = 0xa77a_c400;

/// An attached group: its communicator, its place in the pool's list (1 for the first; 0 is
/// the pool's own communicator) and the registrations made in it.
#[derive(Clone)]
pub(crate) struct Attached {
    pub(crate) comm: Comm,
    pub(crate) index: usize,
    pub(crate) registrations: u64,
}

/// The communicator a pool handle's collectives run on, its index (0: the pool's own), and
/// the stream they are enqueued on.
#[derive(Clone)]
pub(crate) struct Target<'a> {
    pub(crate) comm: Comm,
    pub(crate) index: usize,
    pub(crate) stream: &'a Stream,
}

impl SymPool {
    /// Registers every segment of the pool in `group` as well, and every segment the pool
    /// grows from now on, so that collectives can run on `group` over the pool's memory
    /// ([`on_group`](Self::on_group)). `group` must be a sub-communicator split from the
    /// pool's communicator ([`Comm::split`]); each segment is registered in it once.
    ///
    /// Collective over the pool's communicator: every rank attaches, at the same point of its
    /// program, a group of the same kind (its own TP pair, say), and the groups of every rank
    /// must be attached in the same order (a growth registers in each, in that order). The
    /// op hash records it. Offsets stay symmetric across the world, since every rank makes the
    /// same allocations.
    ///
    /// # Examples
    /// ```
    /// use symheap::{GroupSizes, ParallelGroups, PoolConfig, ReduceOp, SymPool, SymVec, emu};
    ///
    /// let sums = emu::launch(4, |world| {
    ///     let groups = ParallelGroups::new(world, GroupSizes { tp: 2, dp: 2, ep: 4 })?;
    ///     let pool = SymPool::new(world, PoolConfig::new(8 << 20))?;
    ///     pool.attach(groups.tp())?;
    ///     let tp = pool.on_group(groups.tp())?;
    ///     let mut v = SymVec::from_host(&pool, &[world.rank() as f32; 4])?;
    ///     tp.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
    ///     assert_eq!(pool.stats().communicators[1].symmetric, 1);
    ///     v.to_host()
    /// })?;
    /// assert_eq!(sums[0], [1.0; 4]); // 0 + 1
    /// assert_eq!(sums[2], [5.0; 4]); // 2 + 3
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `group` is not a sub-communicator of the pool's
    /// communicator, is on another device, or is attached already; [`Error::Asymmetric`] when
    /// another rank's registration failed (nothing is then attached on any rank); the
    /// library's error; [`Error::Poisoned`].
    pub fn attach(&self, group: &Comm) -> Result<()> {
        let shared = self.shared();
        let mut state = shared.lock();
        shared.check_usable()?;
        shared.check_awake("attach")?;
        shared.check_attachable(&state.groups, group)?;
        shared.quiesce(&mut state)?;
        let _span = tracing::info_span!("symheap.attach", rank = shared.comm().rank()).entered();
        // Every step is attempted on every rank, then agreed: a rank whose step fails must
        // not skip the registrations its peers make.
        let name = group.name();
        let own = state.groups.is_empty().then(|| shared.comm().name());
        let mut attempts: Vec<Result<Option<Window>>> = state
            .segments
            .iter()
            .map(|(_, segment)| segment.register_in(group))
            .collect();
        let local = [
            name.as_ref().err(),
            own.as_ref().and_then(|o| o.as_ref().err()),
        ];
        if let Some(e) = local.into_iter().flatten().next() {
            attempts.push(Err(e.clone()));
        }
        // A group spanning SuperPoDs has no windows (every rank's group spans alike): its
        // collectives on the pool's memory stage.
        let attempts: Vec<Result<Window>> =
            attempts.into_iter().filter_map(Result::transpose).collect();
        let what = "register the pool in an attached group";
        let windows = super::segment::agree_on_all(&shared.comm(), what, attempts)
            .map_err(|unmade| shared.unmade(unmade))?;
        // Agreed: both lookups succeeded here.
        if let Some(Ok(own)) = own {
            state.names[0] = own;
        }
        let name = name.unwrap_or_default();
        let registrations = windows.len() as u64;
        for ((_, segment), window) in state.segments.iter_mut().zip(windows) {
            segment.attached.push(window);
        }
        let index = state.groups.len() + 1;
        state.names.push(name);
        state.groups.push(Attached {
            comm: group.clone(),
            index,
            registrations,
        });
        state.record_collective(fold_words([ATTACH_WORD, u64::from(group.rank_count())]));
        tracing::info!(
            rank = shared.comm().rank(),
            group_rank = group.rank(),
            group_size = group.rank_count(),
            windows = registrations,
            "symheap: pool attached a group"
        );
        Ok(())
    }

    /// A handle on this pool whose collectives (and point-to-point calls and
    /// [`window_get`](Self::window_get)) run on `group`, which is the pool's communicator or
    /// an attached one. Everything else (allocation, stats, synchronize) is the pool's: the
    /// handles share one heap and one stream, and collectives on every group are ordered on
    /// that stream in program order. A collective on a group enters the op hash with the
    /// group's place in the attach order, so every rank must make it on its group of that
    /// kind.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `group` is neither.
    pub fn on_group(&self, group: &Comm) -> Result<SymPool> {
        let shared = self.shared();
        if group.same_as(&shared.comm()) {
            return Ok(SymPool {
                shared: shared.clone(),
                on: None,
                stream: self.stream.clone(),
            });
        }
        let state = shared.lock();
        let attached = state.groups.iter().find(|g| g.comm.same_as(group));
        match attached {
            Some(g) => Ok(SymPool {
                shared: shared.clone(),
                on: Some(g.clone()),
                stream: self.stream.clone(),
            }),
            None => Err(Error::invalid(format!(
                "on_group: this communicator ({} ranks) is not attached to the pool: attach it \
                 first (SymPool::attach)",
                group.rank_count()
            ))),
        }
    }

    /// A handle on the communicator this handle's collectives run on: the pool's own, or the
    /// group of [`on_group`](Self::on_group).
    pub fn group(&self) -> Comm {
        self.target().comm
    }

    /// The communicators attached so far, in attach order.
    pub fn attached(&self) -> Vec<Comm> {
        let state = self.shared().lock();
        state.groups.iter().map(|g| g.comm.clone()).collect()
    }

    pub(crate) fn target(&self) -> Target<'_> {
        let stream = self.stream.as_ref().unwrap_or(&self.shared().stream);
        match &self.on {
            Some(g) => Target {
                comm: g.comm.clone(),
                index: g.index,
                stream,
            },
            None => Target {
                comm: self.shared().comm(),
                index: 0,
                stream,
            },
        }
    }

    /// A handle on this pool whose collectives and copies are enqueued on `stream` (a compute
    /// or communication stream of the caller's) instead of the pool's own, and whose
    /// allocations are first used there. The pool tracks every stream a block was used on:
    /// freed, its memory is reused at once, and a user on another stream waits for that work
    /// first (an event the pool records and waits for, no host wait); host access waits for
    /// what it must. Ordering data between streams is the caller's, with [`Event`]s, as on
    /// the device (the pool only orders reuse). HCCL matches a communicator's collectives by
    /// call order: enqueue one communicator's collectives on one stream, or order its streams.
    /// Everything else is shared with the pool, as for [`on_group`](Self::on_group) (which it
    /// combines with: `pool.on_group(&tp)?.on(&s)`).
    ///
    /// [`Event`]: crate::Event
    pub fn on(&self, stream: &Stream) -> SymPool {
        let own = stream.same_as(&self.shared().stream);
        SymPool {
            shared: self.shared().clone(),
            on: self.on.clone(),
            stream: (!own).then(|| stream.clone()),
        }
    }
}

impl PoolShared {
    /// Why `group` cannot be attached, if it cannot.
    fn check_attachable(&self, attached: &[Attached], group: &Comm) -> Result<()> {
        if group.same_as(&self.comm()) {
            return Err(Error::invalid(
                "attach: this is the pool's own communicator, where every segment is registered \
                 already",
            ));
        }
        if !group.parent().is_some_and(|p| p.same_as(&self.comm())) {
            return Err(Error::invalid(
                "attach: the group must be a sub-communicator split from the pool's \
                 communicator (Comm::split)",
            ));
        }
        if group.device() != self.device() {
            return Err(Error::invalid(format!(
                "attach: the group is on device {}, the pool on device {}",
                group.device(),
                self.device()
            )));
        }
        if attached.iter().any(|g| g.comm.same_as(group)) {
            return Err(Error::invalid(
                "attach: the group is attached already (each segment is registered in it once)",
            ));
        }
        Ok(())
    }
}
