//! Events: a record is a stream task that stamps the time when the stream thread reaches it,
//! so an event captures the work queued before it on that stream, and the time between two
//! records is the real run time of the work between them.
//!
//! An event handle names its latest record; waits, queries and timings look at that record.
//! Records belong to the tasks that complete them, so destroying an event never blocks and
//! never leaves a task with a dangling reference.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::sys::{
    ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
    ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL, ACL_ERROR_RT_INTERNAL_ERROR,
    ACL_ERROR_RT_INVALID_HANDLE, aclrtEventRecordedStatus,
};

use super::counters::{self, Counter};
use super::device;
use super::errors::{AclResult, Fail, acl_fail, non_null};
use super::registry::{HandleKind, Registry, lock, new_handle};
use super::stream::{self, TaskFailure};

/// The environment variable that bounds how long a stream waits for an event
/// (`aclrtStreamWaitEvent`), in seconds (default 1800).
pub(crate) const EVENT_WAIT_ENV: &str = "SYMHEAP_EMU_EVENT_WAIT_S";

const DEFAULT_EVENT_WAIT: Duration = Duration::from_secs(1800);

/// The bound set by [`set_wait_limit`] in milliseconds; `u64::MAX` while unset.
static WAIT_LIMIT_MS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Sets the bound of stream waits (tests use short ones).
#[cfg(test)]
pub(crate) fn set_wait_limit(limit: Option<Duration>) {
    let ms = limit.map_or(u64::MAX, |d| {
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX - 1)
    });
    WAIT_LIMIT_MS.store(ms, Ordering::Relaxed);
}

/// How long a stream waits for an event before its wait task fails.
fn wait_limit() -> Duration {
    match WAIT_LIMIT_MS.load(Ordering::Relaxed) {
        u64::MAX => std::env::var(EVENT_WAIT_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .unwrap_or(DEFAULT_EVENT_WAIT),
        ms => Duration::from_millis(ms),
    }
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
    outcome: Mutex<Outcome>,
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
                None => self.done.wait(o).unwrap_or_else(|e| e.into_inner()),
                Some(at) => {
                    let now = Instant::now();
                    if now >= at {
                        break;
                    }
                    self.done
                        .wait_timeout(o, at - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
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
    last: Mutex<Option<Arc<Record>>>,
}

static EVENTS: Registry<Event> = Registry::new();

/// The live event `handle`: NULL is `ACL_ERROR_INVALID_PARAM`, an unknown or destroyed one
/// `ACL_ERROR_RT_INVALID_HANDLE`.
fn lookup(handle: usize, what: &str) -> AclResult<Arc<Event>> {
    non_null(handle, what)?;
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
pub(crate) fn create() -> AclResult<usize> {
    device::current()?;
    let handle = new_handle(HandleKind::Event);
    EVENTS.insert(
        handle,
        Arc::new(Event {
            last: Mutex::new(None),
        }),
    );
    counters::inc(Counter::Events);
    Ok(handle)
}

/// `aclrtDestroyEvent`: forgets the handle at once, also while its record is pending (the
/// newer CANN documentation allows that, and the call does not block).
pub(crate) fn destroy(handle: usize) -> AclResult {
    lookup(handle, "event")?;
    if EVENTS.remove(handle).is_none() {
        return acl_fail(
            ACL_ERROR_RT_INVALID_HANDLE,
            format!("event {handle:#x} is not a live event"),
        );
    }
    counters::dec(Counter::Events);
    Ok(())
}

/// `aclrtRecordEvent`: queues a record on `stream`; the event then names it (a new record
/// replaces the one before).
pub(crate) fn record(handle: usize, stream: usize) -> AclResult {
    let event = lookup(handle, "event")?;
    let stream = stream::lookup(stream)?;
    let rec = Arc::new(Record {
        outcome: Mutex::new(Outcome::Pending),
        done: Condvar::new(),
    });
    let task = RecordTask(rec.clone());
    stream.enqueue(Box::new(move || {
        task.0.finish(Outcome::Ran(Instant::now()));
        Ok(())
    }))?;
    *lock(&event.last) = Some(rec);
    Ok(())
}

/// The latest record of `handle`.
fn latest(handle: usize, what: &str) -> AclResult<Option<Arc<Record>>> {
    Ok(lock(&lookup(handle, what)?.last).clone())
}

/// `aclrtSynchronizeEvent`: waits for the latest record (at once for an event never
/// recorded). A record skipped because its stream stopped at a failed task is
/// `ACL_ERROR_RT_INTERNAL_ERROR`. The wait is as long as the stream's work before the record,
/// like `aclrtSynchronizeStream`'s (every task of a stream ends: collectives at their exec
/// timeout, event waits at [`EVENT_WAIT_ENV`]'s bound).
pub(crate) fn synchronize(handle: usize) -> AclResult {
    let Some(rec) = latest(handle, "event")? else {
        return Ok(());
    };
    match rec.wait(None) {
        Outcome::Skipped => acl_fail(
            ACL_ERROR_RT_INTERNAL_ERROR,
            "the event's record did not run: its stream stopped at a failed task",
        ),
        _ => Ok(()),
    }
}

/// `aclrtQueryEventStatus`: `COMPLETE` once the latest record ran, and for an event never
/// recorded (as CANN's runtime answers); `NOT_READY` while it is pending or if it was skipped.
pub(crate) fn query(handle: usize) -> AclResult<aclrtEventRecordedStatus> {
    let ran = latest(handle, "event")?.is_none_or(|r| matches!(r.outcome(), Outcome::Ran(_)));
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
pub(crate) fn stream_wait(stream: usize, handle: usize) -> AclResult {
    let waiting = stream::lookup(stream)?;
    let Some(rec) = latest(handle, "event")? else {
        return Ok(());
    };
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

/// The time of an event's latest record, which must have run.
fn stamp(handle: usize, what: &str) -> AclResult<Instant> {
    let Some(rec) = latest(handle, what)? else {
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
pub(crate) fn elapsed_ms(start: usize, end: usize) -> AclResult<f32> {
    let from = stamp(start, "startEvent")?;
    let to = stamp(end, "endEvent")?;
    let Some(span) = to.checked_duration_since(from) else {
        return Err(Fail {
            code: ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL,
            msg: "endEvent's record ran before startEvent's".into(),
        });
    };
    Ok((span.as_secs_f64() * 1000.0) as f32)
}
