//! A communicator's collectives in call order, whichever streams they are queued on. HCCL
//! (like NCCL) runs a communicator's collectives one at a time and does not order streams
//! itself: two collectives of one communicator on two streams with nothing between them may
//! run at once, and on a device they corrupt or hang each other. So a collective queued on
//! another stream than the one before first makes its stream wait for that one (through an
//! event recorded there), and a communicator's collectives keep their call order however
//! they are spread over streams.

use super::Runtime;
use super::event::Event;
use super::stream::{Stream, WeakStream};
use crate::Result;

/// The stream of a communicator's last collective, and the event that orders the next one
/// after it. Kept under the communicator's call lock.
#[derive(Debug, Default)]
pub(crate) struct CollectiveOrder {
    /// Weak: the communicator keeps no stream alive (a destroyed stream has run its work).
    last: Option<WeakStream>,
    /// Made at the first change of stream.
    event: Option<Event>,
}

impl CollectiveOrder {
    /// Makes `stream` wait for the stream of the last collective, if that is another one
    /// still alive. Not across a capture's edge: a capturing stream cannot wait for work
    /// outside its capture, and captured work runs only when the graph is launched, so only
    /// eager work is ordered after eager work, and captured after captured (of one graph).
    pub(crate) fn before(&mut self, rt: &Runtime, stream: &Stream) -> Result<()> {
        let Some(last) = self.last.as_ref().and_then(WeakStream::upgrade) else {
            return Ok(());
        };
        if last.same_as(stream) || last.capture_model()? != stream.capture_model()? {
            return Ok(());
        }
        let event = match &self.event {
            Some(event) => event,
            None => self.event.insert(Event::new(rt)?),
        };
        event.record(&last)?;
        stream.wait(event)
    }

    /// A collective was queued on `stream`.
    pub(crate) fn after(&mut self, stream: &Stream) {
        self.last = Some(stream.downgrade());
    }
}
