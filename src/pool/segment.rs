//! A segment: one physical allocation, mapped and registered as one window, with the heap that
//! carves it. A block never spans two segments, so `(window, offset)` is the segment's window
//! and the block's heap offset.

use crate::heap::Heap;

use super::tags::BlockInfo;
use std::sync::Arc;

use crate::runtime::{Comm, DevicePtr, Element, Mapping, Stream, Window, WindowHandle};
use crate::{Error, Result};

/// Where the warm-up collective gathers to, past its 8-byte input.
const WARM_UP_OUTPUT: u64 = 64;

pub(super) struct Segment {
    pub(super) heap: Heap,
    /// Per live block, by heap node key: its tag and allocation number.
    pub(super) infos: Vec<BlockInfo>,
    pub(super) base: DevicePtr,
    pub(super) handle: WindowHandle,
    pub(super) size: u64,
    /// Owns the mapping, so the memory outlives its registration.
    window: Window,
}

impl Segment {
    /// Reserves, backs, maps and registers `size` bytes (a multiple of the device granularity
    /// and of `block_granularity`) at an address aligned to `alignment` (the larger of the two
    /// granularities: a block aligned within the window is then aligned in memory too), then
    /// enqueues one warm-up collective on the new window: HCCL defers part of the registration
    /// work to the first collective that uses it. Collective. On failure, everything done so
    /// far is undone by the handles' `Drop`.
    ///
    /// The caller waits for the warm-up with the segment already in its pool, so that if the
    /// wait fails (the warm-up may still be queued) the mapping is not unmapped under it: the
    /// pool is poisoned and its `Drop` waits again before releasing the segment.
    pub(super) fn create(
        comm: &Comm,
        stream: &Stream,
        size: u64,
        block_granularity: u64,
        alignment: u64,
    ) -> Result<Segment> {
        let warm_up_end = WARM_UP_OUTPUT + 8 * u64::from(comm.size());
        if warm_up_end > size {
            return Err(Error::invalid(format!(
                "a {size}-byte window is too small for {} ranks",
                comm.size()
            )));
        }
        let heap = Heap::new(size, block_granularity)?;
        let rt = comm.runtime();
        // No rank registers unless every rank has its memory (see `Comm::agree`).
        let mapping = Mapping::allocate_aligned(rt, size, alignment, comm.device());
        let mapping = comm.agree("allocate their memory for a new segment", mapping)?;
        let window = Window::register(comm, &Arc::new(mapping))?;
        let base = window.ptr();
        // The warm-up gathers 8 bytes from every rank into the segment's start: nothing owns
        // that memory yet, and the offsets are the same on every rank.
        // SAFETY: both ranges lie inside the fresh segment (checked above); the caller waits
        // for the stream before any block of the segment is handed out.
        unsafe {
            comm.all_gather(
                base,
                base.byte_add(WARM_UP_OUTPUT),
                8,
                u8::DATA_TYPE,
                stream,
            )?
        };
        Ok(Segment {
            heap,
            infos: Vec::new(),
            base,
            handle: window.handle(),
            size,
            window,
        })
    }

    /// Leaves the window to `HcclCommDestroy` ([`Window::leave_to_destroy`]): no collective
    /// step.
    pub(super) fn leave_to_destroy(self) {
        self.window.leave_to_destroy();
    }

    /// Deregisters the window (collective) and releases the memory, reporting errors.
    pub(super) fn release(self) -> Result<()> {
        self.window.deregister()
    }
}
