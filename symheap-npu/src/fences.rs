//! Stream-ordered reuse over the caller's streams (raw `aclrtStream` handles, which torch_npu
//! owns): a freed block goes back to the heap at once, so where the next one lands depends on
//! the order of the calls alone; a later user on another stream waits, on the device, for the
//! work the freeing stream had queued when it freed.
//!
//! As symheap's pool does it (`src/pool/fences.rs`), with one difference: the event is
//! recorded at free time, so the waiter waits for no more than the work queued before the
//! free. One event per stream that freed, re-recorded at each free; a stream waits for it only
//! when that stream has frees it has not waited for. Nothing here waits on the host but
//! [`Fences::wait_all`].

use symheap::raw::calls;
use symheap::sys::aclrtStream;
use symheap::{Event, Result, Runtime};

/// The streams that freed memory, and who has waited for them.
#[derive(Default)]
pub struct Fences {
    entries: Vec<Fence>,
}

struct Fence {
    /// The stream's handle, as an address (only compared).
    stream: usize,
    /// Recorded on the stream at its latest free.
    event: Event,
    /// How many frees the stream made.
    frees: u64,
    /// For each stream that has waited for this one: how many frees it waited for.
    waited: Vec<(usize, u64)>,
}

impl Fences {
    /// A block that `stream`'s queued work may use was freed: records the stream's event.
    ///
    /// # Errors
    /// The runtime's error making or recording the event.
    ///
    /// # Safety
    /// `stream` is a live stream of `rt`'s device (or null, the default stream).
    pub unsafe fn freed_on(&mut self, rt: &Runtime, stream: aclrtStream) -> Result<()> {
        let key = stream as usize;
        let index = match self.entries.iter().position(|f| f.stream == key) {
            Some(i) => i,
            None => {
                self.entries.push(Fence {
                    stream: key,
                    event: Event::new(rt)?,
                    frees: 0,
                    waited: Vec::new(),
                });
                self.entries.len() - 1
            }
        };
        let fence = &mut self.entries[index];
        // SAFETY: a live event of this runtime; the stream is live by the caller's contract.
        unsafe { calls::aclrtRecordEvent(rt, fence.event.as_raw(), stream) }?;
        fence.frees += 1;
        Ok(())
    }

    /// Makes `user` wait (on the device) for every other stream's work queued before its
    /// frees, where it has not waited for them yet.
    ///
    /// # Errors
    /// The runtime's error queueing the wait.
    ///
    /// # Safety
    /// As [`freed_on`](Self::freed_on), for `user`.
    pub unsafe fn order_before(&mut self, rt: &Runtime, user: aclrtStream) -> Result<()> {
        let key = user as usize;
        for f in &mut self.entries {
            if f.stream == key {
                continue;
            }
            let waited = f.waited.iter().position(|(s, _)| *s == key);
            if waited.is_some_and(|i| f.waited[i].1 == f.frees) {
                continue;
            }
            // SAFETY: a live event, recorded at least once; the stream is live by the
            // caller's contract.
            unsafe { calls::aclrtStreamWaitEvent(rt, user, f.event.as_raw()) }?;
            match waited {
                Some(i) => f.waited[i].1 = f.frees,
                None => f.waited.push((key, f.frees)),
            }
        }
        Ok(())
    }

    /// Waits on the host for every stream's work before its latest free, then forgets them:
    /// what was freed is no longer used by any queued work.
    ///
    /// # Errors
    /// The runtime's error waiting for an event.
    pub fn wait_all(&mut self) -> Result<()> {
        for f in &self.entries {
            f.event.synchronize()?;
        }
        self.entries.clear();
        Ok(())
    }

    /// How many streams have freed memory since the last [`wait_all`](Self::wait_all).
    pub fn streams(&self) -> usize {
        self.entries.len()
    }
}
