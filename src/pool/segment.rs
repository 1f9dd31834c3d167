//! A segment: one physical allocation, mapped and registered as one window, with the heap that
//! carves it. A block never spans two segments, so `(window, offset)` is the segment's window
//! and the block's heap offset.
//!
//! On a communicator whose ranks span SuperPoDs HCCL has no windows
//! ([`Comm::spans_superpods`]): there the segment is mapped memory only, its window handle
//! null, and every collective on it stages
//! ([`Staged::CrossSuperPod`](crate::Staged::CrossSuperPod)). The same holds for each
//! attached group that spans SuperPoDs.

use crate::heap::Heap;

use super::tags::BlockInfo;
use std::sync::Arc;

use crate::raw::{
    DevicePtr, Mapping, PhysicalMemory, VirtualRange, Window, WindowCell, WindowHandle,
};
use crate::runtime::{Agreed, Comm, Element, Stream};
use crate::{Error, Result};

/// Where the warm-up collective gathers to, past its 8-byte input.
const WARM_UP_OUTPUT: u64 = 64;

/// Why a segment could not be made, and whether every rank knows it failed (then the pool
/// goes on) or a collective step of the growth broke off, leaving the ranks at different
/// steps (then the pool can take no further collective step).
pub(super) struct Unmade {
    pub(super) error: Error,
    pub(super) agreed: bool,
}

impl From<Error> for Unmade {
    /// A failure before the growth's first collective step, the same on every rank.
    fn from(error: Error) -> Self {
        Unmade {
            error,
            agreed: true,
        }
    }
}

/// An agreement's outcome as a growth step: `Broken` leaves `made` to `HcclCommDestroy`
/// (deregistering is collective, and the peers may be elsewhere).
fn agreed<T>(outcome: Agreed<T>, made: impl FnOnce(T) -> Vec<Window>) -> Result<T, Unmade> {
    match outcome {
        Agreed::Ok(value) => Ok(value),
        Agreed::Failed(error) => Err(error.into()),
        Agreed::Broken(error, value) => {
            if let Some(value) = value {
                made(value).into_iter().for_each(Window::leave_to_destroy);
            }
            Err(Unmade {
                error,
                agreed: false,
            })
        }
    }
}

pub(super) struct Segment {
    pub(super) heap: Heap,
    /// Per live block, by heap node key: its tag and allocation number.
    pub(super) infos: Vec<BlockInfo>,
    pub(super) base: DevicePtr,
    /// The handle of the window in the pool's communicator, shared with the segment's
    /// blocks: a wake registers anew and replaces it (null on a communicator spanning
    /// SuperPoDs, which has no windows).
    pub(super) handle: Arc<WindowCell>,
    pub(super) size: u64,
    /// The same memory's windows in the pool's attached groups that have windows, in attach
    /// order (declared before `window`, so they are deregistered first, in that order, on
    /// every rank).
    pub(super) attached: Vec<Window>,
    /// The window in the pool's communicator; `None` while the pool sleeps, and always on a
    /// communicator spanning SuperPoDs.
    window: Option<Window>,
    /// Owns the mapping with the windows, so the memory outlives its registrations; `None`
    /// while the pool sleeps (the memory is unmapped and freed).
    mapping: Option<Arc<Mapping>>,
    /// The address range, kept while the pool sleeps so that a wake maps at the same
    /// addresses (declared last: released after the mapping).
    range: Arc<VirtualRange>,
}

impl Segment {
    /// Reserves, backs, maps and registers `size` bytes (a multiple of the device granularity
    /// and of `block_granularity`) at an address aligned to `alignment` (the larger of the two
    /// granularities: a block aligned within the window is then aligned in memory too), in
    /// `comm` and each of `groups`, and enqueues the warm-ups ([`register_everywhere`]).
    /// Collective.
    ///
    /// The caller waits for the warm-up with the segment already in its pool, so that if the
    /// wait fails (the warm-up may still be queued) the mapping is not unmapped under it: the
    /// pool is poisoned and its `Drop` waits again before releasing the segment.
    pub(super) fn create(
        comm: &Comm,
        groups: &[Comm],
        stream: &Stream,
        size: u64,
        block_granularity: u64,
        alignment: u64,
    ) -> Result<Segment, Unmade> {
        let warm_up_end = WARM_UP_OUTPUT + 8 * u64::from(comm.rank_count());
        if warm_up_end > size {
            return Err(Error::invalid(format!(
                "a {size}-byte window is too small for {} ranks",
                comm.rank_count()
            ))
            .into());
        }
        let heap = Heap::new(size, block_granularity).map_err(Error::from)?;
        let mapping = Mapping::allocate_aligned(comm.runtime(), size, alignment, comm.device());
        let Registered {
            mapping,
            window,
            attached,
        } = register_everywhere(comm, groups, stream, mapping)?;
        let segment = Segment {
            heap,
            infos: Vec::new(),
            base: mapping.ptr(),
            handle: Arc::new(WindowCell::new(handle_of(window.as_ref()))),
            size,
            attached,
            range: Arc::clone(mapping.range()),
            window,
            mapping: Some(mapping),
        };
        Ok(segment)
    }

    /// Registers the segment's memory in `group` too (collective within the group): the new
    /// window, whose offsets are the segment's; `None` for a group spanning SuperPoDs, which
    /// has no windows.
    pub(super) fn register_in(&self, group: &Comm) -> Result<Option<Window>> {
        match &self.mapping {
            Some(_) if group.spans_superpods() => Ok(None),
            Some(mapping) => Window::register(group, mapping).map(Some),
            None => Err(crate::Error::invalid(
                "a sleeping segment has no memory to register",
            )),
        }
    }

    /// Leaves the window to `HcclCommDestroy` ([`Window::leave_to_destroy`]): no collective
    /// step.
    pub(super) fn leave_to_destroy(mut self) {
        for w in self.attached.drain(..) {
            w.leave_to_destroy();
        }
        if let Some(w) = self.window.take() {
            w.leave_to_destroy();
        }
        self.mapping = None;
    }

    /// Deregisters the windows (collective, in each group and then in the pool's
    /// communicator) and releases the memory, reporting the first error.
    pub(super) fn release(mut self) -> Result<()> {
        let unregistered = self.unregister();
        // The range goes last; a failure is reported here (and tried again on drop).
        let released = Arc::into_inner(self.range).map_or(Ok(()), |r| r.release());
        unregistered.and(released)
    }

    /// Deregisters the windows (collective, in each group and then in the pool's
    /// communicator), unmaps and frees the memory, and keeps the address range: the first
    /// half of a sleep. Every window is tried; the first error is returned (a window whose
    /// deregistration failed keeps its memory mapped, with the communicator, which frees it
    /// once destroyed).
    pub(super) fn unregister(&mut self) -> Result<()> {
        let mapping = self.mapping.take();
        let mut result = Ok(());
        for w in self.attached.drain(..) {
            result = result.and(w.deregister());
        }
        match self.window.take() {
            // The window is the memory's last holder: its deregistration unmaps and frees it
            // (or, failing, leaves it to the communicator), reporting the error.
            Some(w) => {
                drop(mapping);
                result = result.and(w.deregister());
            }
            // No window (the communicator spans SuperPoDs): the segment releases its memory.
            None => {
                if let Some(mapping) = mapping.and_then(Arc::into_inner) {
                    result = result.and(mapping.release());
                }
            }
        }
        result
    }

    /// Whether the segment has memory (it does unless its pool sleeps).
    pub(super) fn is_mapped(&self) -> bool {
        self.mapping.is_some()
    }

    /// [`unregister`](Self::unregister)s a segment that has memory; one that sleeps is left
    /// as it is.
    pub(super) fn unregister_if_mapped(&mut self) -> Result<()> {
        match self.is_mapped() {
            true => self.unregister(),
            false => Ok(()),
        }
    }

    /// Maps new physical memory at the segment's addresses and registers it in `comm` and
    /// each of `groups`, at the same offsets, with new handles, as [`create`](Self::create)
    /// does ([`register_everywhere`]); the caller waits for the warm-ups before it restores
    /// contents (a warm-up writes the segment's first bytes). Collective over `comm`.
    pub(super) fn remap(
        &mut self,
        comm: &Comm,
        groups: &[Comm],
        stream: &Stream,
    ) -> Result<(), Unmade> {
        let mapped = PhysicalMemory::allocate(comm.runtime(), self.size, comm.device())
            .and_then(|physical| Mapping::new(&self.range, 0, &Arc::new(physical)));
        let Registered {
            mapping,
            window,
            attached,
        } = register_everywhere(comm, groups, stream, mapped)?;
        self.handle.set(handle_of(window.as_ref()));
        self.window = window;
        self.mapping = Some(mapping);
        self.attached = attached;
        Ok(())
    }
}

impl Segment {
    /// Deregisters the segment's windows, keeping its memory mapped and its contents (after a
    /// loss each rank deregisters locally, without its peers), then registers the same memory
    /// in `comm` at the same offsets, with new handles. The warm-up collective overwrites the
    /// segment's first bytes: they are saved first and written back once it ran. Collective
    /// over `comm`; the pool's groups are gone (they held the lost ranks).
    pub(super) fn rebind(&mut self, comm: &Comm, stream: &Stream) -> Result<(), Unmade> {
        let mapping = match &self.mapping {
            Some(mapping) => Arc::clone(mapping),
            None => return Err(Error::invalid("a sleeping segment cannot be rebound").into()),
        };
        let windows: Vec<Window> = self.attached.drain(..).chain(self.window.take()).collect();
        for w in windows {
            // A deregistration that fails leaves the window to the old communicator's
            // destroy; the memory stays this segment's either way.
            if let Err(e) = w.deregister() {
                comm.runtime().record_drop_error(e);
            }
        }
        let rt = comm.runtime();
        // A failure of this rank alone: its peers go on to register.
        let alone = |error| Unmade {
            error,
            agreed: false,
        };
        let warmed = (WARM_UP_OUTPUT + 8 * u64::from(comm.rank_count())).min(self.size);
        let mut saved = vec![0u8; warmed as usize];
        // SAFETY: the first `warmed` bytes of the segment's live mapping; no queued work
        // uses the pool's memory now (the caller drained every stream).
        unsafe { rt.raw().copy_to_host(&mut saved, self.base) }.map_err(alone)?;
        let Registered {
            mapping,
            window,
            attached,
        } = register_mapping(comm, &[], stream, mapping)?;
        self.handle.set(handle_of(window.as_ref()));
        self.window = window;
        self.mapping = Some(mapping);
        self.attached = attached;
        stream.synchronize().map_err(alone)?;
        // SAFETY: as above: the warm-up has run, nothing else is queued.
        unsafe { rt.raw().copy_to_device(self.base, &saved) }.map_err(alone)?;
        Ok(())
    }
}

/// The window handle blocks of a segment read: its window's, or null where the pool's
/// communicator spans SuperPoDs and has none.
fn handle_of(window: Option<&Window>) -> WindowHandle {
    window.map_or(WindowHandle::NONE, Window::handle)
}

/// Registers `mapped` (a segment's memory, or this rank's error making it) in `comm` and in
/// each of `groups` (not in those spanning SuperPoDs, which have no windows), then enqueues
/// one warm-up collective on each communicator: HCCL defers part of a registration's work to
/// the first collective that uses it. Returns the mapping and the windows, the world's (if
/// it has windows) and the groups' in order. Collective over `comm`.
///
/// Every step is agreed, in the world and in the groups: one that fails on some ranks leaves
/// their peers waiting in theirs until the exec timeout, and the agreement makes every rank
/// give up alike (no rank registers unless every rank has its memory, see `Comm::agree`);
/// what was done is undone by the handles' `Drop`. If an agreement itself breaks off (a peer
/// came later than the timeout), or a warm-up cannot be queued, the failure is not agreed
/// ([`Unmade::agreed`]): the ranks are at different steps, and the windows go to
/// `HcclCommDestroy`.
fn register_everywhere(
    comm: &Comm,
    groups: &[Comm],
    stream: &Stream,
    mapped: Result<Mapping>,
) -> Result<Registered, Unmade> {
    let what = "allocate and map their memory for a segment";
    let mapping = Arc::new(agreed(comm.try_agree(what, mapped), |_| Vec::new())?);
    register_mapping(comm, groups, stream, mapping)
}

/// [`register_everywhere`] for memory every rank has mapped already.
fn register_mapping(
    comm: &Comm,
    groups: &[Comm],
    stream: &Stream,
    mapping: Arc<Mapping>,
) -> Result<Registered, Unmade> {
    // Every rank of a communicator sees the same topology: all skip, or all register.
    let window = match comm.spans_superpods() {
        true => None,
        false => {
            let window = Window::register(comm, &mapping);
            Some(agreed(comm.try_agree("register a segment", window), |w| {
                vec![w]
            })?)
        }
    };
    let give_up = |window: Option<Window>| window.map(Window::leave_to_destroy);
    // Every registration is agreed before any warm-up is queued: a failure then drops
    // (deregisters) windows that no queued work uses.
    let mut attached = Vec::new();
    if !groups.is_empty() {
        let attempts = groups
            .iter()
            .filter(|g| !g.spans_superpods())
            .map(|g| Window::register(g, &mapping))
            .collect();
        let what = "register a segment in every attached group";
        match agree_on_all(comm, what, attempts) {
            Ok(windows) => attached = windows,
            Err(unmade) => {
                if !unmade.agreed {
                    give_up(window);
                }
                return Err(unmade);
            }
        }
    }
    // Groups are no larger than the world: their warm-ups fit where the world's does.
    let base = mapping.ptr();
    let queued = std::iter::once(comm)
        .chain(groups)
        .try_for_each(|c| warm_up(c, base, stream));
    if let Err(error) = queued {
        attached.into_iter().for_each(Window::leave_to_destroy);
        give_up(window);
        return Err(Unmade {
            error,
            agreed: false,
        });
    }
    Ok(Registered {
        mapping,
        window,
        attached,
    })
}

/// A segment's memory and its windows ([`register_everywhere`]).
struct Registered {
    mapping: Arc<Mapping>,
    /// The window in the pool's communicator, unless it spans SuperPoDs.
    window: Option<Window>,
    /// The windows in the attached groups that have windows, in attach order.
    attached: Vec<Window>,
}

/// Every rank's registrations, agreed over `comm` once each was attempted (one that fails
/// must not skip the later ones, which are collective in their groups): the windows, or on
/// every rank an error. On failure the windows made are dropped after the agreement, so every
/// rank deregisters them alike.
pub(super) fn agree_on_all(
    comm: &Comm,
    what: &str,
    attempts: Vec<Result<Window>>,
) -> Result<Vec<Window>, Unmade> {
    let first_error = attempts.iter().find_map(|a| a.as_ref().err().cloned());
    let windows: Vec<Window> = attempts.into_iter().flatten().collect();
    let outcome = match comm.try_agree(what, first_error.map_or(Ok(()), Err)) {
        Agreed::Ok(()) => Agreed::Ok(windows),
        Agreed::Failed(e) => Agreed::Failed(e),
        Agreed::Broken(e, _) => Agreed::Broken(e, Some(windows)),
    };
    agreed(outcome, |w| w)
}

/// The warm-up collective of a fresh window at `base` on `comm`: it gathers 8 bytes from
/// every rank into the segment's start, which nothing owns yet (at the same offsets on every
/// rank). HCCL defers part of a registration's work to the first collective on the window.
fn warm_up(comm: &Comm, base: DevicePtr, stream: &Stream) -> Result<()> {
    // SAFETY: both ranges lie inside the fresh segment (its size was checked against the
    // world's, which no group exceeds); the caller waits for the stream before any block of
    // the segment is handed out.
    unsafe {
        comm.raw().all_gather(
            base,
            base.byte_add(WARM_UP_OUTPUT),
            8,
            u8::DATA_TYPE.into(),
            stream,
        )
    }
}
