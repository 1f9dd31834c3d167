//! ACL graphs (`aclmdlRI*`): capturing the work queued on streams into a model, and replaying
//! it, as hicann/runtime documents and implements them (`docs/zh/dev_guide/04-01_single_stream_capture.md`,
//! `04-02_cross_stream_capture.md`; `src/runtime/feature/aclgraph/`, `context_aclgraph.cc`).
//!
//! While a stream captures, the work queued on it is kept in the model as recipes instead of
//! running; a stream that waits for an event recorded in the capture joins it. A replay
//! (`aclmdlRIExecuteAsync`) makes every recipe's task afresh, in capture order (so each
//! collective takes its communicator's next sequence number, in the host order of the
//! replays), and runs each captured stream's tasks in a lane of its own, the lanes side by
//! side and ordered by the capture's events ([`replay`]); the replay's stream goes on when
//! every lane is done.

use std::cell::Cell;
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::Duration;

use crate::sys::{
    ACL_ERROR_RT_CAPTURE_DEPENDENCY, ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
    ACL_ERROR_RT_FEATURE_NOT_SUPPORT, ACL_ERROR_RT_MODEL_CAPTURED, ACL_ERROR_RT_MODEL_RUNNING,
    ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED, ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED,
    ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD, ACL_ERROR_RT_STREAM_CAPTURED,
    ACL_ERROR_RT_STREAM_NOT_CAPTURED, ACL_ERROR_RT_STREAM_UNJOINED, ACL_EVENT_SYNC,
    ACL_MODEL_RI_CAPTURE_MODE_GLOBAL, ACL_MODEL_RI_CAPTURE_MODE_RELAXED,
    ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE,
    ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED, ACL_MODEL_RI_CAPTURE_STATUS_NONE, aclmdlRICaptureMode,
    aclmdlRICaptureStatus,
};

use crate::acl::device;
use crate::acl::stream::{self, Task, TaskFailure};
use crate::base::counters::{self, Counter};
use crate::base::errors::{AclResult, acl_fail, invalid, param};
use crate::base::handle::{EventHandle, ModelHandle, StreamHandle};
use crate::base::lock::{Condvar, RankedMutex, lock, ranks};
use crate::base::registry::Registry;
use replay::Step;

/// Makes a task for one replay of a captured call.
pub(crate) type Recipe = Arc<dyn Fn() -> AclResult<Task> + Send + Sync>;

/// What a capture keeps of one call, in capture order.
enum Item {
    /// Stream work, made afresh for each replay.
    Work(Recipe),
    /// An event record: each replay records the event anew, with a task the event's module
    /// makes (so that this module needs nothing of it).
    Record(EventHandle, Recipe),
    /// A wait for an event recorded earlier in the capture: the join check reads it, and a
    /// replay's lane waits there for the record's lane.
    Wait(EventHandle),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Status {
    Capturing,
    Invalidated,
    Ready,
}

struct State {
    status: Status,
    /// The stream the capture began on, its mode, its device and the thread that began it.
    origin: StreamHandle,
    mode: aclmdlRICaptureMode,
    device: device::Device,
    thread: ThreadId,
    items: Vec<(StreamHandle, Item)>,
    /// Streams that joined the capture (the origin not among them).
    joined: Vec<StreamHandle>,
    /// Replays launched and not yet finished.
    running: usize,
}

/// A model: a capture in progress, or the graph it made.
pub(crate) struct Model {
    state: RankedMutex<State>,
    idle: Condvar,
    /// The threads that run its joined streams' lanes in a replay.
    lanes: replay::LaneThreads,
}

static MODELS: Registry<ModelHandle, Model> = Registry::new(ranks::MODELS);

/// Captures in progress, per device and mode (the context's count of `CaptureModeEnter`).
static ACTIVE: RankedMutex<Vec<(device::Device, [u32; 3])>> =
    RankedMutex::new(ranks::ACTIVE_CAPTURES, Vec::new());

thread_local! {
    /// This thread's exchange mode (`aclmdlRICaptureThreadExchangeMode`); GLOBAL at first.
    static EXCHANGE: Cell<aclmdlRICaptureMode> = const { Cell::new(ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) };
    /// Captures this thread began and has not ended, per mode.
    static BEGUN: Cell<[u32; 3]> = const { Cell::new([0; 3]) };
}

/// Counts a capture of `mode` on `device` in or out.
fn count_capture(device: device::Device, mode: aclmdlRICaptureMode, delta: i32) {
    let m = mode as usize;
    let mut active = lock(&ACTIVE);
    match active.iter_mut().find(|(d, _)| *d == device) {
        Some((_, counts)) => counts[m] = counts[m].saturating_add_signed(delta),
        None if delta > 0 => {
            let mut counts = [0; 3];
            counts[m] = 1;
            active.push((device, counts));
        }
        None => {}
    }
    drop(active);
    BEGUN.with(|b| {
        let mut counts = b.get();
        counts[m] = counts[m].saturating_add_signed(delta);
        b.set(counts);
    });
}

/// The strictest mode among `counts` (the lowest value with a capture), if any.
fn strictest(counts: [u32; 3]) -> Option<aclmdlRICaptureMode> {
    (0..3)
        .find(|&m| counts[m] > 0)
        .map(|m| m as aclmdlRICaptureMode)
}

/// The check of a synchronous copy or fill (`aclrtMemcpy`, `aclrtMemset`) while a stream
/// captures, by hicann/runtime's rule (`Context::IsCaptureModeSupport`): allowed without a
/// capture on this device or in RELAXED exchange mode; in GLOBAL exchange mode forbidden if any
/// capture of the device is GLOBAL or one this thread began is THREAD_LOCAL; in THREAD_LOCAL
/// exchange mode forbidden if this thread began a GLOBAL or THREAD_LOCAL capture.
pub(crate) fn check_unsafe_call(what: &str) -> AclResult {
    let Ok(device) = device::current() else {
        return Ok(());
    };
    let context = lock(&ACTIVE)
        .iter()
        .find(|(d, _)| *d == device)
        .and_then(|(_, c)| strictest(*c));
    let Some(context) = context else {
        return Ok(());
    };
    let thread = BEGUN.with(|b| strictest(b.get()));
    let forbidden = match EXCHANGE.with(Cell::get) {
        ACL_MODEL_RI_CAPTURE_MODE_GLOBAL => {
            context == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL
                || thread == Some(ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL)
        }
        ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL => thread.is_some_and(|t| t <= 1),
        _ => false,
    };
    if forbidden {
        return acl_fail(
            ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
            format!(
                "{what} is not allowed while a stream captures in this capture mode: switch \
                 this thread to ACL_MODEL_RI_CAPTURE_MODE_RELAXED with \
                 aclmdlRICaptureThreadExchangeMode around it"
            ),
        );
    }
    Ok(())
}

/// `aclmdlRICaptureThreadExchangeMode`: swaps this thread's exchange mode with `*mode`.
pub(crate) fn exchange_mode(mode: aclmdlRICaptureMode) -> AclResult<aclmdlRICaptureMode> {
    check_mode(mode)?;
    Ok(EXCHANGE.with(|x| x.replace(mode)))
}

fn check_mode(mode: aclmdlRICaptureMode) -> AclResult {
    if !(ACL_MODEL_RI_CAPTURE_MODE_GLOBAL..=ACL_MODEL_RI_CAPTURE_MODE_RELAXED).contains(&mode) {
        return param(format!("capture mode {mode} is not one of 0, 1, 2"));
    }
    Ok(())
}

/// `aclmdlRICaptureBegin`: `stream` starts capturing into a new model.
pub(crate) fn begin(stream: StreamHandle, mode: aclmdlRICaptureMode) -> AclResult {
    if stream.is_null() {
        return invalid("stream is NULL: the default stream cannot be captured");
    }
    check_mode(mode)?;
    let s = stream::lookup(stream)?;
    if s.capture().is_some() {
        return acl_fail(
            ACL_ERROR_RT_STREAM_CAPTURED,
            "the stream is already capturing",
        );
    }
    let device = s.device();
    let handle = ModelHandle::fresh();
    let model = Arc::new(Model {
        state: RankedMutex::new(
            ranks::MODEL,
            State {
                status: Status::Capturing,
                origin: stream,
                mode,
                device,
                thread: std::thread::current().id(),
                items: Vec::new(),
                joined: Vec::new(),
                running: 0,
            },
        ),
        idle: Condvar::new(),
        lanes: replay::LaneThreads::default(),
    });
    MODELS.insert(handle, model);
    counters::inc(Counter::Models);
    s.set_capture(Some(handle));
    count_capture(device, mode, 1);
    Ok(())
}

/// The live model `handle` (NULL `ACL_ERROR_INVALID_PARAM`, unknown `ACL_ERROR_RT_PARAM_INVALID`).
fn lookup(handle: ModelHandle) -> AclResult<Arc<Model>> {
    if handle.is_null() {
        return invalid("modelRI is NULL");
    }
    MODELS
        .get(handle)
        .map_or_else(|| param(format!("{handle:#x} is not a live model")), Ok)
}

/// `aclmdlRICaptureGetInfo`: the stream's capture status and model (`NONE` and 0 when it is
/// not capturing).
pub(crate) fn info(stream: StreamHandle) -> AclResult<(aclmdlRICaptureStatus, ModelHandle)> {
    if stream.is_null() {
        return invalid("stream is NULL");
    }
    let Some(handle) = stream::lookup(stream)?.capture() else {
        return Ok((ACL_MODEL_RI_CAPTURE_STATUS_NONE, ModelHandle::NULL));
    };
    let status = match lookup(handle).map(|m| lock(&m.state).status) {
        Ok(Status::Invalidated) => ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED,
        _ => ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE,
    };
    Ok((status, handle))
}

/// Keeps `item`, queued on `stream`, in the model `handle` that the stream captures into.
fn keep(handle: ModelHandle, stream: StreamHandle, item: Item) -> AclResult {
    let model = lookup(handle)?;
    let mut st = lock(&model.state);
    if st.status == Status::Capturing {
        st.items.push((stream, item));
    }
    Ok(())
}

/// Queues stream work on `stream` (whose handle is `handle`): into the capture it is in, as a
/// recipe made afresh per replay, or at once.
pub(crate) fn submit(stream: &stream::Stream, handle: StreamHandle, recipe: Recipe) -> AclResult {
    match stream.capture() {
        Some(model) => keep(model, handle, Item::Work(recipe)),
        None => stream.enqueue(recipe()?),
    }
}

/// Events recorded in captures still in progress, and the model of each.
static CAPTURED_EVENTS: RankedMutex<Vec<(EventHandle, ModelHandle)>> =
    RankedMutex::new(ranks::CAPTURED_EVENTS, Vec::new());

/// The capture's rule for `aclrtRecordEvent` of `event` (made with `flags`, `None` for one of
/// `aclrtCreateEvent`) on `stream` (whose handle is `handle`), as hicann/runtime's
/// `RecordEvent` on a capturing stream: `false` when the stream does not capture (record now);
/// otherwise the record is kept in the model, made by `recorder` at each replay, or dropped.
pub(crate) fn record(
    stream: &stream::Stream,
    handle: StreamHandle,
    event: EventHandle,
    flags: Option<u32>,
    recorder: impl Fn() -> AclResult<Task> + Send + Sync + 'static,
) -> AclResult<bool> {
    let Some(model) = stream.capture() else {
        return Ok(false);
    };
    let Some(flags) = flags else {
        return acl_fail(
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "an event of aclrtCreateEvent cannot be recorded in a capture: create it with \
             aclrtCreateEventExWithFlag(&event, ACL_EVENT_SYNC)",
        );
    };
    if flags & ACL_EVENT_SYNC == 0 {
        // Succeeds and records nothing: no stream could wait for it.
        return Ok(true);
    }
    keep(model, handle, Item::Record(event, Arc::new(recorder)))?;
    let mut events = lock(&CAPTURED_EVENTS);
    events.retain(|&(e, _)| e != event);
    events.push((event, model));
    Ok(true)
}

/// The capture's rule for `aclrtStreamWaitEvent` of `stream` (whose handle is `handle`) on
/// `event` (made with `flags`): `false` when neither the event's record nor the stream is in
/// a capture (wait now). A wait for a record of a capture joins the stream to it; a capturing
/// stream cannot wait for a record outside its capture.
pub(crate) fn wait(
    stream: &stream::Stream,
    handle: StreamHandle,
    event: EventHandle,
    flags: Option<u32>,
) -> AclResult<bool> {
    if let Some(model) = event_model(event) {
        if flags.is_some_and(|f| f & ACL_EVENT_SYNC == 0) {
            return param("the event has no ACL_EVENT_SYNC flag: no stream can wait for it");
        }
        return capture_wait(model, handle, event).map(|()| true);
    }
    if stream.capture().is_none() {
        return Ok(false);
    }
    if flags.is_none() {
        return acl_fail(
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
            "a capturing stream cannot wait for an event of aclrtCreateEvent",
        );
    }
    acl_fail(
        ACL_ERROR_RT_CAPTURE_DEPENDENCY,
        "a capturing stream waits for an event recorded outside the capture",
    )
}

/// `stream` waits for `event`, recorded in the capture `model`: it joins the capture if it is
/// not capturing, and the wait is kept.
fn capture_wait(model: ModelHandle, stream: StreamHandle, event: EventHandle) -> AclResult {
    let s = stream::lookup(stream)?;
    match s.capture() {
        None => {
            s.set_capture(Some(model));
            lock(&lookup(model)?.state).joined.push(stream);
        }
        Some(m) if m == model => {}
        Some(other) => {
            // Two captures that depend on each other: both are invalid (`TerminateCapture`).
            for m in [model, other] {
                if let Ok(m) = lookup(m) {
                    lock(&m.state).status = Status::Invalidated;
                }
            }
            return acl_fail(
                crate::sys::ACL_ERROR_STREAM_CAPTURE_CONFLICT,
                "the stream captures into another model than the event's: both captures are \
                 invalidated",
            );
        }
    }
    keep(model, stream, Item::Wait(event))
}

/// The capture in progress `event` was last recorded in, if any.
pub(crate) fn event_model(event: EventHandle) -> Option<ModelHandle> {
    let events = lock(&CAPTURED_EVENTS);
    events.iter().find(|&&(e, _)| e == event).map(|&(_, m)| m)
}

/// Every stream and event of the capture `handle` leaves it, and the capture's count goes.
fn finish_capture(handle: ModelHandle, st: &State) {
    lock(&CAPTURED_EVENTS).retain(|&(_, m)| m != handle);
    for s in std::iter::once(st.origin).chain(st.joined.iter().copied()) {
        if let Ok(s) = stream::lookup(s) {
            s.set_capture(None);
        }
    }
    count_capture(st.device, st.mode, -1);
}

/// The capture's model forgotten after a failed end.
fn drop_model(handle: ModelHandle) {
    if MODELS.remove(handle).is_some() {
        counters::dec(Counter::Models);
    }
}

/// `aclmdlRICaptureEnd`: the checks of `CaptureEnd` in hicann/runtime's order, then the model.
pub(crate) fn end(stream: StreamHandle) -> AclResult<ModelHandle> {
    if stream.is_null() {
        return invalid("stream is NULL");
    }
    let Some(handle) = stream::lookup(stream)?.capture() else {
        return acl_fail(
            ACL_ERROR_RT_STREAM_NOT_CAPTURED,
            "the stream is not capturing",
        );
    };
    let model = lookup(handle)?;
    let mut st = lock(&model.state);
    if st.origin != stream {
        return acl_fail(
            ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED,
            "the capture did not begin on this stream: end it on its origin stream",
        );
    }
    if st.mode != ACL_MODEL_RI_CAPTURE_MODE_RELAXED && st.thread != std::thread::current().id() {
        finish_capture(handle, &st);
        drop(st);
        drop_model(handle);
        return acl_fail(
            ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD,
            "the capture ends on another thread than it began (allowed only in \
             ACL_MODEL_RI_CAPTURE_MODE_RELAXED)",
        );
    }
    let failure = if st.status == Status::Invalidated {
        Some((
            ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
            "the capture was invalidated".to_owned(),
        ))
    } else {
        unjoined(&st).map(|why| (ACL_ERROR_RT_STREAM_UNJOINED, why))
    };
    finish_capture(handle, &st);
    if let Some((code, why)) = failure {
        drop(st);
        drop_model(handle);
        return acl_fail(code, why);
    }
    st.status = Status::Ready;
    Ok(handle)
}

/// Why the joined streams did not all join back (`CheckCaptureModelValidity`): each one's last
/// task must be an event record that a later task waits for, and the origin stream must wait
/// for one of them.
fn unjoined(st: &State) -> Option<String> {
    let mut origin_waits = st.joined.is_empty();
    for &s in &st.joined {
        let last = st.items.iter().rposition(|(on, _)| *on == s);
        let Some(at) = last else {
            return Some(format!(
                "stream {s:#x} joined the capture but queued nothing"
            ));
        };
        let Item::Record(event, _) = st.items[at].1 else {
            return Some(format!(
                "the last task of stream {s:#x} is not an event record: record an event on \
                 it and make the origin stream wait for it"
            ));
        };
        let waits: Vec<StreamHandle> = st.items[at + 1..]
            .iter()
            .filter(|(_, i)| matches!(i, Item::Wait(e) if *e == event))
            .map(|(on, _)| *on)
            .collect();
        if waits.is_empty() {
            return Some(format!(
                "nothing waits for the last record of stream {s:#x}: it never joined back"
            ));
        }
        origin_waits |= waits.contains(&st.origin);
    }
    (!origin_waits).then(|| "the joined streams never join back to the origin stream".to_owned())
}

/// How long `aclmdlRIDestroy` waits for running replays (hicann/runtime polls 10 000 x 1 ms).
const DESTROY_WAIT: Duration = Duration::from_secs(10);

/// `aclmdlRIDestroy`.
pub(crate) fn destroy(handle: ModelHandle) -> AclResult {
    let model = lookup(handle)?;
    let st = lock(&model.state);
    if st.status != Status::Ready {
        return acl_fail(
            ACL_ERROR_RT_MODEL_CAPTURED,
            "the model is still being captured",
        );
    }
    let (mut st, waited) = model
        .idle
        .wait_timeout_while(st, DESTROY_WAIT, |st| st.running > 0);
    if waited.timed_out() && st.running > 0 {
        return acl_fail(
            ACL_ERROR_RT_MODEL_RUNNING,
            format!(
                "a replay of the model still runs after {} s",
                DESTROY_WAIT.as_secs()
            ),
        );
    }
    st.items.clear();
    drop(st);
    drop_model(handle);
    Ok(())
}

/// Ends a replay's count when the replay's task is done (or dropped unrun).
struct Running(Arc<Model>);

impl Drop for Running {
    fn drop(&mut self) {
        let mut st = lock(&self.0.state);
        st.running -= 1;
        if st.running == 0 {
            self.0.idle.notify_all();
        }
    }
}

/// `aclmdlRIExecuteAsync`: one replay on `stream`. Every recipe makes its task now (on this
/// thread, in capture order); one task on `stream` runs the captured streams' lanes side by
/// side ([`replay::run`]) and ends when they all have.
pub(crate) fn execute(handle: ModelHandle, stream: StreamHandle) -> AclResult {
    let model = lookup(handle)?;
    let s = stream::lookup(stream)?;
    if s.capture().is_some() {
        return acl_fail(
            ACL_ERROR_RT_STREAM_CAPTURED,
            "a graph cannot be replayed into a stream that captures",
        );
    }
    let mut st = lock(&model.state);
    if st.status != Status::Ready {
        return acl_fail(
            ACL_ERROR_RT_MODEL_CAPTURED,
            "the model is still being captured",
        );
    }
    // One lane per captured stream, the origin's first; each record signals a slot that the
    // waits for it (the last record of the event before them) await.
    let mut lanes: Vec<(StreamHandle, Vec<Step>)> = vec![(st.origin, Vec::new())];
    let mut last_record: Vec<(EventHandle, usize)> = Vec::new();
    let mut slots = 0;
    for (on, item) in &st.items {
        let step = match item {
            Item::Work(recipe) => Step::Run(recipe()?),
            // An event destroyed since the capture has no one left to wait for its record
            // outside the graph: only the graph's own waits are signalled.
            Item::Record(event, recorder) => {
                last_record.retain(|&(e, _)| e != *event);
                last_record.push((*event, slots));
                slots += 1;
                Step::Signal(slots - 1, recorder().ok())
            }
            Item::Wait(event) => match last_record.iter().find(|&&(e, _)| e == *event) {
                Some(&(_, slot)) => Step::Await(slot),
                None => continue,
            },
        };
        match lanes.iter_mut().find(|(s, _)| s == on) {
            Some((_, lane)) => lane.push(step),
            None => lanes.push((*on, vec![step])),
        }
    }
    st.running += 1;
    drop(st);
    let running = Running(model);
    let lanes: Vec<Vec<Step>> = lanes.into_iter().map(|(_, lane)| lane).collect();
    s.enqueue(Box::new(move || {
        replay::run(lanes, slots, &running.0.lanes).map_err(|f| TaskFailure {
            msg: format!("in a graph replay: {}", f.msg),
            ..f
        })
    }))
}

mod replay;
#[cfg(test)]
mod tests;
