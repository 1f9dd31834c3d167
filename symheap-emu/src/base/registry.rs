//! Opaque handles and the registries of live objects behind them.
//!
//! Every handle the emulator gives out (physical memory, streams, events, communicators) is a fresh
//! number that is never reused and never a dereferenceable address, looked up in a registry.
//! A stale, foreign or made-up handle is therefore an error, not a dangling pointer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::base::lock::{Rank, RankedMutex, lock};

/// What a handle names; each kind has its own range of values.
#[derive(Clone, Copy, Debug)]
pub(crate) enum HandleKind {
    /// `aclrtDrvMemHandle`.
    Physical = 1,
    /// `aclrtStream`.
    Stream = 2,
    /// `HcclComm`.
    Comm = 3,
    /// `aclrtEvent`.
    Event = 4,
    /// `aclmdlRI`.
    Model = 5,
    /// `aclprofConfig *`: a profiling configuration.
    ProfConfig = 6,
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

/// A new handle value of `kind`. The values are non-canonical x86-64 addresses (top bits set),
/// so a caller that wrongly dereferences one faults instead of reading someone's memory.
pub(crate) fn new_raw(kind: HandleKind) -> usize {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    0xE5E0_0000_0000_0000 | ((kind as usize) << 48) | ((id & 0xFFF_FFFF_FFFF) << 4)
}

/// Live objects by handle (of type `H`).
pub(crate) struct Registry<H, T> {
    map: RankedMutex<BTreeMap<H, Arc<T>>>,
}

impl<H: Copy + Ord, T> Registry<H, T> {
    /// An empty registry whose lock has `rank` (usable in a `static`).
    pub(crate) const fn new(rank: Rank) -> Self {
        Self {
            map: RankedMutex::new(rank, BTreeMap::new()),
        }
    }

    /// Records `value` under `handle`.
    pub(crate) fn insert(&self, handle: H, value: Arc<T>) {
        lock(&self.map).insert(handle, value);
    }

    /// The live object named by `handle`.
    pub(crate) fn get(&self, handle: H) -> Option<Arc<T>> {
        lock(&self.map).get(&handle).cloned()
    }

    /// Every live object with its handle, in handle order.
    pub(crate) fn all(&self) -> Vec<(H, Arc<T>)> {
        lock(&self.map)
            .iter()
            .map(|(&h, v)| (h, Arc::clone(v)))
            .collect()
    }

    /// Forgets `handle`, returning its object.
    pub(crate) fn remove(&self, handle: H) -> Option<Arc<T>> {
        lock(&self.map).remove(&handle)
    }
}
