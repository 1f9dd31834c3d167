//! Events: a record is a stream task that stamps the time when the stream thread reaches it,
//! so an event captures the work queued before it on that stream, and the time between two
//! records is the real run time of the work between them.
//!
//! An event handle names its latest record; waits, queries and timings look at that record.
//! Records belong to the tasks that complete them, so destroying an event never blocks and
//! never leaves a task with a dangling reference.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::sys::{
    ACL_ERROR_RT_EVENT_CAPTURED, ACL_ERROR_RT_EVENT_SYNC_TIMEOUT,
    ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL,
    ACL_ERROR_RT_INTERNAL_ERROR, ACL_ERROR_RT_INVALID_HANDLE, aclrtEventRecordedStatus,
};

use crate::acl::device;
use crate::acl::stream::{self, TaskFailure};
use crate::acl::{graph, order};
use crate::base::counters::{self, Counter};
use crate::base::errors::{AclResult, Fail, acl_fail, acl_non_null};
use crate::base::handle::{EventHandle, StreamHandle};
use crate::base::lock::{Condvar, RankedMutex, lock, ranks};
use crate::base::registry::Registry;

/// The environment variable that bounds how long a stream waits for an event
/// (`aclrtStreamWaitEvent`), in seconds (default 1800); read once, at the first wait.
pub(crate) const EVENT_WAIT_ENV: &str = "SYMHEAP_EMU_EVENT_WAIT_SECS";

const DEFAULT_EVENT_WAIT: Duration = Duration::from_secs(1800);

/// The bound set by `set_wait_limit` (tests) in milliseconds; `u64::MAX` while unset.
static WAIT_LIMIT_MS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Sets the bound of stream waits (tests use short ones).
#[cfg(test)]
pub(crate) fn set_wait_limit(limit: Option<Duration>) {
    let ms = limit.map_or(u64::MAX, |d| {
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX - 1)
    });
    WAIT_LIMIT_MS.store(ms, Ordering::Relaxed);
}

/// How long a stream waits for an event before its wait task fails: the tests' bound if set,
/// otherwise [`EVENT_WAIT_ENV`]'s (read once: every wait task asks).
fn wait_limit() -> Duration {
    static FROM_ENV: OnceLock<Duration> = OnceLock::new();
    match WAIT_LIMIT_MS.load(Ordering::Relaxed) {
        u64::MAX => *FROM_ENV.get_or_init(|| parse_wait_limit(std::env::var(EVENT_WAIT_ENV).ok())),
        ms => Duration::from_millis(ms),
    }
}

/// The bound [`EVENT_WAIT_ENV`]'s value `v` sets: non-negative seconds (fractions allowed), or
/// the default when unset or unusable.
fn parse_wait_limit(v: Option<String>) -> Duration {
    v.and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .unwrap_or(DEFAULT_EVENT_WAIT)
}

/// What became of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Its stream has not reached it yet.
    Pending,
    /// Its stream reached it at this time.
    Ran(Instant),
    /// Its stream dropped it unrun (it had stopped at a failed task).
    Skipped,
}

/// One `aclrtRecordEvent`.
struct Record {
    outcome: RankedMutex<Outcome>,
    done: Condvar,
}

impl Record {
    fn finish(&self, outcome: Outcome) {
        let mut o = lock(&self.outcome);
        if *o == Outcome::Pending {
            *o = outcome;
        }
        drop(o);
        self.done.notify_all();
    }

    fn outcome(&self) -> Outcome {
        *lock(&self.outcome)
    }

    /// Waits until the record is no longer pending, or `limit` has passed (then `Pending`).
    fn wait(&self, limit: Option<Duration>) -> Outcome {
        let deadline = limit.and_then(|l| Instant::now().checked_add(l));
        let mut o = lock(&self.outcome);
        while *o == Outcome::Pending {
            o = match deadline {
                None => self.done.wait(o),
                Some(at) => {
                    let now = Instant::now();
                    if now >= at {
                        break;
                    }
                    self.done.wait_timeout(o, at - now).0
                }
            };
        }
        *o
    }
}

/// The stream task of a record: stamps it when run, marks it skipped when dropped unrun.
struct RecordTask(Arc<Record>);

impl Drop for RecordTask {
    fn drop(&mut self) {
        self.0.finish(Outcome::Skipped);
    }
}

/// A live event: its latest record, if any.
struct Event {
    last: RankedMutex<Option<Arc<Record>>>,
    /// `aclrtCreateEventExWithFlag`'s flags; `None` for an event of `aclrtCreateEvent`, which
    /// a capture cannot use.
    flags: Option<u32>,
}

static EVENTS: Registry<EventHandle, Event> = Registry::new(ranks::EVENTS);

/// The live event `handle`: NULL is `ACL_ERROR_INVALID_PARAM`, an unknown or destroyed one
/// `ACL_ERROR_RT_INVALID_HANDLE`.
fn lookup(handle: EventHandle, what: &str) -> AclResult<Arc<Event>> {
    acl_non_null(handle.raw(), what)?;
    EVENTS.get(handle).map_or_else(
        || {
            acl_fail(
                ACL_ERROR_RT_INVALID_HANDLE,
                format!("{what} {handle:#x} is not a live event"),
            )
        },
        Ok,
    )
}

/// `aclrtCreateEvent`: needs a current device, like a stream.
pub(crate) fn create() -> AclResult<EventHandle> {
    create_with(None)
}

/// `aclrtCreateEventExWithFlag`: an event with `flags` (any bits; only `ACL_EVENT_SYNC`
/// matters here: without it a capture's streams cannot wait for the event).
pub(crate) fn create_ex(flags: u32) -> AclResult<EventHandle> {
    create_with(Some(flags))
}

fn create_with(flags: Option<u32>) -> AclResult<EventHandle> {
    device::current()?;
    let handle = EventHandle::fresh();
    EVENTS.insert(
        handle,
        Arc::new(Event {
            last: RankedMutex::new(ranks::EVENT_LAST, None),
            flags,
        }),
    );
    counters::inc(Counter::Events);
    Ok(handle)
}

/// `ACL_ERROR_RT_EVENT_CAPTURED` while `handle` was recorded in a capture in progress: its
/// record runs only when the graph is replayed.
fn check_not_captured(handle: EventHandle) -> AclResult {
    if graph::event_model(handle).is_some() {
        return acl_fail(
            ACL_ERROR_RT_EVENT_CAPTURED,
            "the event was recorded in a capture that is still in progress",
        );
    }
    Ok(())
}

/// `aclrtDestroyEvent`: forgets the handle at once, also while its record is pending (the
/// newer CANN documentation allows that, and the call does not block).
pub(crate) fn destroy(handle: EventHandle) -> AclResult {
    lookup(handle, "event")?;
    if EVENTS.remove(handle).is_none() {
        return acl_fail(
            ACL_ERROR_RT_INVALID_HANDLE,
            format!("event {handle:#x} is not a live event"),
        );
    }
    order::forget_event(handle);
    counters::dec(Counter::Events);
    Ok(())
}

/// `aclrtRecordEvent`: queues a record on `stream`; the event then names it (a new record
/// replaces the one before).
pub(crate) fn record(handle: EventHandle, stream: StreamHandle) -> AclResult {
    let event = lookup(handle, "event")?;
    let s = stream::lookup(stream)?;
    if graph::record(&s, stream, handle, event.flags, move || record_task(handle))? {
        return Ok(());
    }
    let position = s.enqueue_counted(record_task(handle)?)?;
    order::recorded(handle, stream, position - 1);
    Ok(())
}

/// A task that records `handle` when its stream reaches it; the event names it from now on
/// (a capture's replay records through it too).
pub(crate) fn record_task(handle: EventHandle) -> AclResult<stream::Task> {
    let event = lookup(handle, "event")?;
    let rec = Arc::new(Record {
        outcome: RankedMutex::new(ranks::RECORD, Outcome::Pending),
        done: Condvar::new(),
    });
    let task = RecordTask(rec.clone());
    *lock(&event.last) = Some(rec);
    Ok(Box::new(move || {
        task.0.finish(Outcome::Ran(Instant::now()));
        Ok(())
    }))
}

/// The latest record of `handle`.
fn latest(handle: EventHandle, what: &str) -> AclResult<Option<Arc<Record>>> {
    Ok(lock(&lookup(handle, what)?.last).clone())
}

/// `aclrtSynchronizeEvent`: waits for the latest record (at once for an event never
/// recorded). A record skipped because its stream stopped at a failed task is
/// `ACL_ERROR_RT_INTERNAL_ERROR`. The wait is as long as the stream's work before the record,
/// like `aclrtSynchronizeStream`'s (every task of a stream ends: collectives at their exec
/// timeout, event waits at [`EVENT_WAIT_ENV`]'s bound).
pub(crate) fn synchronize(handle: EventHandle) -> AclResult {
    lookup(handle, "event")?;
    check_not_captured(handle)?;
    let Some(rec) = latest(handle, "event")? else {
        return Ok(());
    };
    match rec.wait(None) {
        Outcome::Skipped => acl_fail(
            ACL_ERROR_RT_INTERNAL_ERROR,
            "the event's record did not run: its stream stopped at a failed task",
        ),
        _ => {
            order::host_saw_event(handle);
            Ok(())
        }
    }
}

/// `aclrtQueryEventStatus`: `COMPLETE` once the latest record ran, and for an event never
/// recorded (as CANN's runtime answers); `NOT_READY` while it is pending or if it was skipped.
pub(crate) fn query(handle: EventHandle) -> AclResult<aclrtEventRecordedStatus> {
    lookup(handle, "event")?;
    check_not_captured(handle)?;
    let ran = latest(handle, "event")?.is_none_or(|r| matches!(r.outcome(), Outcome::Ran(_)));
    if ran {
        order::host_saw_event(handle);
    }
    Ok(if ran {
        aclrtEventRecordedStatus::ACL_EVENT_RECORDED_STATUS_COMPLETE
    } else {
        aclrtEventRecordedStatus::ACL_EVENT_RECORDED_STATUS_NOT_READY
    })
}

/// `aclrtStreamWaitEvent`: `stream`'s later tasks wait until the event's latest record (at
/// the time of this call) has run; nothing to wait for if it was never recorded. The wait
/// task fails, and with it the stream (see `aclrtSynchronizeStream`), if the record was
/// skipped, or with `ACL_ERROR_RT_EVENT_SYNC_TIMEOUT` if it has not run within
/// [`EVENT_WAIT_ENV`]'s bound.
pub(crate) fn stream_wait(stream: StreamHandle, handle: EventHandle) -> AclResult {
    let waiting = stream::lookup(stream)?;
    let event = lookup(handle, "event")?;
    if graph::wait(&waiting, stream, handle, event.flags)? {
        return Ok(());
    }
    let Some(rec) = latest(handle, "event")? else {
        return Ok(());
    };
    order::waited(stream, handle);
    waiting.enqueue(Box::new(move || {
        let limit = wait_limit();
        match rec.wait(Some(limit)) {
            Outcome::Ran(_) => Ok(()),
            Outcome::Skipped => Err(TaskFailure {
                code: ACL_ERROR_RT_INTERNAL_ERROR,
                msg: format!(
                    "aclrtStreamWaitEvent: the event {handle:#x}'s record did not run: its \
                     stream stopped at a failed task"
                ),
            }),
            Outcome::Pending => Err(TaskFailure {
                code: ACL_ERROR_RT_EVENT_SYNC_TIMEOUT,
                msg: format!(
                    "aclrtStreamWaitEvent: the event {handle:#x} was not reached within {:.1} s \
                     ({EVENT_WAIT_ENV} sets the bound)",
                    limit.as_secs_f64()
                ),
            }),
        }
    }))
}

/// `aclrtCreateEventWithFlag`: an event with `flags`, as one of `aclrtCreateEventExWithFlag`
/// (any bits; `ACL_EVENT_SYNC` lets a capture's streams wait for it). The two differ on the
/// device in whether an event must be reset before it is recorded again; here every event is
/// reusable without a reset (see `aclrtResetEvent`).
pub(crate) fn create_with_flag(flags: u32) -> AclResult<EventHandle> {
    create_with(Some(flags))
}

/// `aclrtResetEvent`: a task on `stream` that returns the event to "never recorded" (waits on
/// it then pass at once, as for a new event), unless it was recorded again after this call:
/// the record this call saw is the one the task clears. In a capture the reset is kept and
/// runs at each replay.
pub(crate) fn reset(handle: EventHandle, stream: StreamHandle) -> AclResult {
    lookup(handle, "event")?;
    let s = stream::lookup(stream)?;
    graph::submit(
        &s,
        stream,
        Arc::new(move || {
            let event = lookup(handle, "event")?;
            let seen = lock(&event.last).clone();
            Ok(Box::new(move || {
                let mut last = lock(&event.last);
                let unchanged = match (&*last, &seen) {
                    (Some(now), Some(then)) => Arc::ptr_eq(now, then),
                    _ => false,
                };
                if unchanged {
                    *last = None;
                }
                Ok(())
            }) as stream::Task)
        }),
    )
}

/// The time of an event's latest record, which must have run.
fn stamp(handle: EventHandle, what: &str, rec: Option<Arc<Record>>) -> AclResult<Instant> {
    let Some(rec) = rec else {
        return acl_fail(
            ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
            format!("{what} {handle:#x} was never recorded"),
        );
    };
    match rec.outcome() {
        Outcome::Ran(at) => Ok(at),
        Outcome::Pending => acl_fail(
            ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
            format!(
                "{what} {handle:#x} has not completed: synchronize its stream or the event first"
            ),
        ),
        Outcome::Skipped => acl_fail(
            ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
            format!("{what} {handle:#x}'s record did not run: its stream stopped at a failed task"),
        ),
    }
}

/// `aclrtEventElapsedTime`: milliseconds from `start`'s latest record to `end`'s, both run
/// (`ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID` otherwise); an end before the start is
/// `ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL`.
pub(crate) fn elapsed_ms(start: EventHandle, end: EventHandle) -> AclResult<f32> {
    // Both handles are checked before either time.
    let (first, last) = (latest(start, "startEvent")?, latest(end, "endEvent")?);
    check_not_captured(start)?;
    check_not_captured(end)?;
    let from = stamp(start, "startEvent", first)?;
    let to = stamp(end, "endEvent", last)?;
    let Some(span) = to.checked_duration_since(from) else {
        return Err(Fail {
            code: ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL,
            msg: "endEvent's record ran before startEvent's".into(),
        });
    };
    Ok((span.as_secs_f64() * 1000.0) as f32)
}

#[cfg(test)]
mod tests {
    use std::ptr::null_mut;
    use std::time::Duration;

    use super::set_wait_limit;
    use crate::acl::stream::lookup as stream_lookup;
    use crate::sys::*;
    use crate::testutil::{DevBuf, acl, assert_clean, gate, ok, recent};
    use crate::{GRANULARITY as G, test_lock, testing::counters};

    const COMPLETE: aclrtEventRecordedStatus =
        aclrtEventRecordedStatus::ACL_EVENT_RECORDED_STATUS_COMPLETE;
    const NOT_READY: aclrtEventRecordedStatus =
        aclrtEventRecordedStatus::ACL_EVENT_RECORDED_STATUS_NOT_READY;

    /// The event functions (optional entries the emulator fills).
    struct Ev {
        create: unsafe extern "C" fn(*mut aclrtEvent) -> aclError,
        record: unsafe extern "C" fn(aclrtEvent, aclrtStream) -> aclError,
        sync: unsafe extern "C" fn(aclrtEvent) -> aclError,
        wait: unsafe extern "C" fn(aclrtStream, aclrtEvent) -> aclError,
        query: unsafe extern "C" fn(aclrtEvent, *mut aclrtEventRecordedStatus) -> aclError,
        elapsed: unsafe extern "C" fn(*mut f32, aclrtEvent, aclrtEvent) -> aclError,
        destroy: unsafe extern "C" fn(aclrtEvent) -> aclError,
    }

    fn ev() -> Ev {
        let a = acl();
        Ev {
            create: a.aclrtCreateEvent.unwrap(),
            record: a.aclrtRecordEvent.unwrap(),
            sync: a.aclrtSynchronizeEvent.unwrap(),
            wait: a.aclrtStreamWaitEvent.unwrap(),
            query: a.aclrtQueryEventStatus.unwrap(),
            elapsed: a.aclrtEventElapsedTime.unwrap(),
            destroy: a.aclrtDestroyEvent.unwrap(),
        }
    }

    // The wrappers below pass handles to the emulator, which validates them.
    impl Ev {
        fn new_event(&self) -> aclrtEvent {
            let mut e = null_mut();
            // SAFETY: a valid out-pointer.
            ok(unsafe { (self.create)(&mut e) });
            e
        }
        fn status(&self, e: aclrtEvent) -> aclrtEventRecordedStatus {
            let mut s = aclrtEventRecordedStatus(-1);
            // SAFETY: a valid out-pointer.
            ok(unsafe { (self.query)(e, &mut s) });
            s
        }
        fn ms(&self, start: aclrtEvent, end: aclrtEvent) -> Result<f32, aclError> {
            let mut ms = -1.0f32;
            // SAFETY: a valid out-pointer.
            match unsafe { (self.elapsed)(&mut ms, start, end) } {
                ACL_SUCCESS => Ok(ms),
                code => Err(code),
            }
        }
    }

    /// Runs `body` with two streams on `device`, then releases everything.
    fn on_two_streams(device: i32, body: impl FnOnce(aclrtStream, aclrtStream)) {
        let a = acl();
        let (mut s1, mut s2) = (null_mut(), null_mut());
        // SAFETY: valid out-pointers; the handles are destroyed below.
        unsafe {
            ok((a.aclrtSetDevice)(device));
            ok((a.aclrtCreateStream)(&mut s1));
            ok((a.aclrtCreateStream)(&mut s2));
        }
        body(s1, s2);
        // SAFETY: handles from above.
        unsafe {
            ok((a.aclrtDestroyStream)(s1));
            ok((a.aclrtDestroyStream)(s2));
            ok((a.aclrtResetDevice)(device));
        }
    }

    /// Queues a task that sleeps for `d` on `s`.
    fn sleep_on(s: aclrtStream, d: Duration) {
        stream_lookup(crate::base::handle::StreamHandle::from_c(s))
            .unwrap()
            .enqueue(Box::new(move || {
                std::thread::sleep(d);
                Ok(())
            }))
            .unwrap();
    }

    #[test]
    fn events_are_validated_handles() {
        let _g = test_lock();
        let e = ev();
        let mut h = null_mut();
        // SAFETY: every handle and pointer is validated by the emulator.
        unsafe {
            assert_eq!((e.create)(&mut h), ACL_ERROR_RT_CONTEXT_NULL, "no device");
        }
        on_two_streams(0, |s, _| {
            let bogus = 0x5000 as aclrtEvent;
            let mut st = COMPLETE;
            let mut ms = 0f32;
            // SAFETY: as above.
            unsafe {
                assert_eq!((e.create)(null_mut()), ACL_ERROR_INVALID_PARAM);
                for code in [
                    (e.record)(null_mut(), s),
                    (e.sync)(null_mut()),
                    (e.wait)(s, null_mut()),
                    (e.query)(null_mut(), &mut st),
                    (e.elapsed)(&mut ms, null_mut(), bogus),
                    (e.destroy)(null_mut()),
                ] {
                    assert_eq!(code, ACL_ERROR_INVALID_PARAM);
                }
                for code in [
                    (e.record)(bogus, s),
                    (e.sync)(bogus),
                    (e.wait)(s, bogus),
                    (e.query)(bogus, &mut st),
                    (e.destroy)(bogus),
                ] {
                    assert_eq!(code, ACL_ERROR_RT_INVALID_HANDLE);
                }
                let x = e.new_event();
                assert_eq!(counters().events, 1);
                assert_eq!((e.query)(x, null_mut()), ACL_ERROR_INVALID_PARAM);
                assert_eq!((e.elapsed)(null_mut(), x, x), ACL_ERROR_INVALID_PARAM);
                assert_eq!((e.elapsed)(&mut ms, x, null_mut()), ACL_ERROR_INVALID_PARAM);
                assert_eq!((e.elapsed)(&mut ms, x, bogus), ACL_ERROR_RT_INVALID_HANDLE);
                // The emulator has no default stream.
                assert_eq!((e.record)(x, null_mut()), ACL_ERROR_RT_PARAM_INVALID);
                assert_eq!((e.wait)(null_mut(), x), ACL_ERROR_RT_PARAM_INVALID);
                assert_eq!(
                    (e.record)(x, 0x5000 as aclrtStream),
                    ACL_ERROR_RT_INVALID_HANDLE
                );
                ok((e.destroy)(x));
                assert_eq!(counters().events, 0);
                // A destroyed event is an unknown handle, never a dangling pointer.
                assert_eq!((e.destroy)(x), ACL_ERROR_RT_INVALID_HANDLE);
                assert_eq!((e.record)(x, s), ACL_ERROR_RT_INVALID_HANDLE);
                assert_eq!((e.query)(x, &mut st), ACL_ERROR_RT_INVALID_HANDLE);
            }
        });
        assert_clean();
    }

    #[test]
    fn an_event_never_recorded_is_complete_but_has_no_time() {
        let _g = test_lock();
        let e = ev();
        on_two_streams(0, |s, _| {
            let x = e.new_event();
            assert_eq!(e.status(x), COMPLETE);
            // SAFETY: live handles.
            unsafe {
                ok((e.sync)(x));
                ok((e.wait)(s, x));
                ok((acl().aclrtSynchronizeStream)(s));
            }
            assert_eq!(e.ms(x, x), Err(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID));
            assert!(recent().contains("never recorded"));
            // SAFETY: a live handle.
            ok(unsafe { (e.destroy)(x) });
        });
        assert_clean();
    }

    #[test]
    fn a_pending_record_is_not_ready_until_its_stream_reaches_it() {
        let _g = test_lock();
        let e = ev();
        on_two_streams(0, |s, _| {
            let x = e.new_event();
            let open = gate(s);
            // SAFETY: live handles.
            unsafe { ok((e.record)(x, s)) };
            assert_eq!(e.status(x), NOT_READY);
            assert_eq!(e.ms(x, x), Err(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID));
            assert!(recent().contains("not completed"));
            let opener = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                drop(open);
            });
            // SAFETY: a live handle; blocks until the gate opens.
            unsafe { ok((e.sync)(x)) };
            opener.join().unwrap();
            assert_eq!(e.status(x), COMPLETE);
            assert_eq!(e.ms(x, x), Ok(0.0));
            // SAFETY: a live handle.
            ok(unsafe { (e.destroy)(x) });
        });
        assert_clean();
    }

    #[test]
    fn elapsed_time_is_the_run_time_of_the_work_between_two_records() {
        let _g = test_lock();
        let e = ev();
        on_two_streams(0, |s, _| {
            let (start, end) = (e.new_event(), e.new_event());
            // Held first, so the time the host takes to queue does not count.
            let open = gate(s);
            // SAFETY: live handles.
            unsafe { ok((e.record)(start, s)) };
            sleep_on(s, Duration::from_millis(60));
            // SAFETY: as above.
            unsafe { ok((e.record)(end, s)) };
            std::thread::sleep(Duration::from_millis(30));
            drop(open);
            // SAFETY: a live stream.
            unsafe { ok((acl().aclrtSynchronizeStream)(s)) };
            let ms = e.ms(start, end).unwrap();
            // The 60 ms task, not the 30 ms the stream was held before it.
            assert!((59.0..2000.0).contains(&ms), "{ms} ms");
            assert_eq!(e.ms(end, start), Err(ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL));
            // Recording again replaces the record: now nothing runs between them.
            // SAFETY: live handles.
            unsafe {
                ok((e.record)(start, s));
                ok((e.record)(end, s));
                ok((e.sync)(end));
            }
            let again = e.ms(start, end).unwrap();
            assert!((0.0..ms).contains(&again), "{again} ms after {ms} ms");
            // SAFETY: live handles.
            unsafe {
                ok((e.destroy)(start));
                ok((e.destroy)(end));
            }
        });
        assert_clean();
    }

    #[test]
    fn a_stream_waits_for_the_work_another_stream_recorded() {
        let _g = test_lock();
        let a = acl();
        let e = ev();
        let buf = DevBuf::new(0, G);
        let out = crate::testutil::PinnedBuf::new(&[0u8; 16]);
        on_two_streams(0, |producer, consumer| {
            let (x, done) = (e.new_event(), e.new_event());
            let open = gate(producer);
            // SAFETY: device ranges validated; `out` outlives the synchronize below.
            unsafe {
                ok((a.aclrtMemsetAsync)(buf.ptr, 16, 0x11, 16, producer));
                ok((e.record)(x, producer));
                ok((e.wait)(consumer, x));
                ok((a.aclrtMemcpyAsync)(
                    out.ptr(),
                    16,
                    buf.ptr,
                    16,
                    aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
                    consumer,
                ));
                ok((e.record)(done, consumer));
                // The wait captured the record of the call's time: a later record of the
                // same event does not change what the consumer waits for.
                ok((e.record)(x, consumer));
            }
            std::thread::sleep(Duration::from_millis(50));
            // Held by the producer's gate: the consumer has not copied yet.
            assert_eq!(e.status(done), NOT_READY);
            drop(open);
            // SAFETY: a live stream.
            unsafe { ok((a.aclrtSynchronizeStream)(consumer)) };
            assert_eq!(e.status(done), COMPLETE);
            // SAFETY: live handles.
            unsafe {
                ok((e.destroy)(x));
                ok((e.destroy)(done));
            }
        });
        assert_eq!(out.get(), [0x11; 16]);
        drop(out);
        buf.free();
        assert_clean();
    }

    #[test]
    fn a_stream_wait_is_bounded_and_fails_its_stream() {
        let _g = test_lock();
        let a = acl();
        let e = ev();
        on_two_streams(0, |producer, consumer| {
            let x = e.new_event();
            let open = gate(producer);
            set_wait_limit(Some(Duration::from_millis(50)));
            // SAFETY: live handles.
            unsafe {
                ok((e.record)(x, producer));
                ok((e.wait)(consumer, x));
                assert_eq!(
                    (a.aclrtSynchronizeStream)(consumer),
                    ACL_ERROR_RT_EVENT_SYNC_TIMEOUT
                );
            }
            set_wait_limit(None);
            assert!(
                recent().contains("SYMHEAP_EMU_EVENT_WAIT_SECS"),
                "{}",
                recent()
            );
            drop(open);
            // SAFETY: live handles.
            unsafe {
                ok((a.aclrtSynchronizeStream)(producer));
                ok((e.destroy)(x));
            }
        });
        assert_clean();
    }

    #[test]
    fn a_record_skipped_by_a_stopped_stream_fails_its_waiters() {
        let _g = test_lock();
        let a = acl();
        let e = ev();
        // Device 15: stop mode covers the device's context, and no other test uses it.
        on_two_streams(15, |producer, consumer| {
            let x = e.new_event();
            let open = gate(producer);
            // SAFETY: live handles.
            unsafe {
                ok(a.aclrtSetStreamFailureMode.unwrap()(
                    producer,
                    ACL_STOP_ON_FAILURE,
                ));
            }
            stream_lookup(crate::base::handle::StreamHandle::from_c(producer))
                .unwrap()
                .enqueue(Box::new(|| {
                    Err(super::TaskFailure {
                        code: ACL_ERROR_RT_INTERNAL_ERROR,
                        msg: "the collective failed".into(),
                    })
                }))
                .unwrap();
            // SAFETY: live handles.
            unsafe {
                ok((e.record)(x, producer));
                ok((e.wait)(consumer, x));
                drop(open);
                assert_eq!((e.sync)(x), ACL_ERROR_RT_INTERNAL_ERROR);
                assert!(recent().contains("stopped at a failed task"));
                assert_eq!(e.status(x), NOT_READY);
                assert_eq!(e.ms(x, x), Err(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID));
                assert_eq!(
                    (a.aclrtSynchronizeStream)(consumer),
                    ACL_ERROR_RT_INTERNAL_ERROR
                );
                assert!(recent().contains("did not run"));
                assert_eq!(
                    (a.aclrtSynchronizeStream)(producer),
                    ACL_ERROR_RT_INTERNAL_ERROR
                );
                ok((e.destroy)(x));
            }
        });
        assert_clean();
    }

    #[test]
    fn destroying_a_pending_event_does_not_block_or_break_its_waiters() {
        let _g = test_lock();
        let a = acl();
        let e = ev();
        on_two_streams(0, |producer, consumer| {
            let x = e.new_event();
            let open = gate(producer);
            // SAFETY: live handles.
            unsafe {
                ok((e.record)(x, producer));
                ok((e.wait)(consumer, x));
                ok((e.destroy)(x));
            }
            assert_eq!(counters().events, 0);
            drop(open);
            // SAFETY: live streams.
            unsafe {
                ok((a.aclrtSynchronizeStream)(consumer));
                ok((a.aclrtSynchronizeStream)(producer));
            }
        });
        assert_clean();
    }

    #[test]
    fn event_wait_bound_is_seconds_or_the_default() {
        use super::{DEFAULT_EVENT_WAIT, parse_wait_limit};
        let parse = |v: Option<&str>| parse_wait_limit(v.map(str::to_owned));
        assert_eq!(parse(Some(" 2.5 ")), Duration::from_millis(2500));
        assert_eq!(parse(Some("0")), Duration::ZERO);
        for unusable in [
            None,
            Some(""),
            Some("soon"),
            Some("-1"),
            Some("NaN"),
            Some("inf"),
        ] {
            assert_eq!(parse(unusable), DEFAULT_EVENT_WAIT, "{unusable:?}");
        }
    }

    #[test]
    fn a_reset_clears_the_record_it_saw_and_not_a_later_one() {
        let _g = test_lock();
        let e = ev();
        let reset = acl().aclrtResetEvent.unwrap();
        on_two_streams(0, |s1, s2| {
            let x = e.new_event();
            // SAFETY: live handles.
            unsafe { ok((e.record)(x, s1)) };
            // SAFETY: a live handle.
            unsafe { ok((e.sync)(x)) };
            // A reset that runs: the event is never recorded again.
            // SAFETY: live handles.
            unsafe { ok(reset(x, s2)) };
            // SAFETY: a live handle.
            ok(unsafe { (acl().aclrtSynchronizeStream)(s2) });
            assert_eq!(e.ms(x, x), Err(ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID));
            // A reset held on s2 while x is recorded again on s1: the new record stays.
            // SAFETY: live handles.
            unsafe { ok((e.record)(x, s1)) };
            let open = gate(s2);
            // SAFETY: live handles.
            unsafe { ok(reset(x, s2)) };
            // SAFETY: live handles.
            unsafe { ok((e.record)(x, s1)) };
            // SAFETY: a live handle.
            unsafe { ok((e.sync)(x)) };
            drop(open);
            // SAFETY: a live handle.
            ok(unsafe { (acl().aclrtSynchronizeStream)(s2) });
            assert_eq!(e.ms(x, x), Ok(0.0));
            // SAFETY: live handles; NULL and a destroyed event are refused.
            unsafe {
                assert_eq!(reset(null_mut(), s1), ACL_ERROR_INVALID_PARAM);
                ok((e.destroy)(x));
                assert_eq!(reset(x, s1), ACL_ERROR_RT_INVALID_HANDLE);
            }
        });
        assert_clean();
    }
}
