//! One replay of a graph: the captured work of each stream in its own lane, the lanes run
//! side by side (the origin stream's on the replay stream's thread, each joined stream's on
//! a thread the model keeps for it) and ordered by the capture's event records and waits, as
//! a device runs a model's streams. A lane that fails stops the others at their next wait.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, mpsc};

use crate::acl::stream::{Task, TaskFailure};
use crate::base::lock::{Condvar, RankedMutex, lock, ranks};
use crate::sys::ACL_ERROR_RT_INTERNAL_ERROR;

type Job = Box<dyn FnOnce() + Send>;

/// The threads that run a model's joined lanes, one per lane after the origin's, made at the
/// first replay that needs them; they end when the model is gone. Replays running at once
/// queue their lanes on them in order.
pub(super) struct LaneThreads {
    senders: RankedMutex<Vec<mpsc::Sender<Job>>>,
}

impl Default for LaneThreads {
    fn default() -> Self {
        Self {
            senders: RankedMutex::new(ranks::LANES, Vec::new()),
        }
    }
}

impl LaneThreads {
    /// Runs `job` on lane thread `i`.
    fn send(&self, i: usize, job: Job) -> Result<(), TaskFailure> {
        let mut senders = lock(&self.senders);
        while senders.len() <= i {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("symheap-emu graph lane".into())
                .spawn(move || rx.into_iter().for_each(|job| job()))
                .map_err(|e| failure(format!("cannot start a thread for a graph lane: {e}")))?;
            senders.push(tx);
        }
        senders[i]
            .send(job)
            .map_err(|_| failure("a graph lane's thread is gone".into()))
    }
}

fn failure(msg: String) -> TaskFailure {
    TaskFailure {
        code: ACL_ERROR_RT_INTERNAL_ERROR,
        msg,
    }
}

/// A step of a lane.
pub(super) enum Step {
    /// Stream work.
    Run(Task),
    /// An event record of the capture: signals `slot` (after recording the event anew for
    /// waiters outside the graph, where it still exists).
    Signal(usize, Option<Task>),
    /// A wait for the record that signals `slot`.
    Await(usize),
}

/// The replay's signals, and whether a lane failed.
struct Signals {
    state: RankedMutex<(Vec<bool>, bool)>,
    changed: Condvar,
}

impl Signals {
    fn set(&self, slot: usize) {
        lock(&self.state).0[slot] = true;
        self.changed.notify_all();
    }

    fn abort(&self) {
        lock(&self.state).1 = true;
        self.changed.notify_all();
    }

    /// Waits for `slot`: false if a lane failed first.
    fn wait(&self, slot: usize) -> bool {
        let mut st = lock(&self.state);
        while !st.0[slot] && !st.1 {
            st = self.changed.wait(st);
        }
        st.0[slot]
    }
}

/// Runs `task`, a panic in it a failure (a lane that unwound would leave the others waiting
/// for its signals).
fn run_task(task: Task) -> Result<(), TaskFailure> {
    catch_unwind(AssertUnwindSafe(task))
        .unwrap_or_else(|_| Err(failure("a task of the replay panicked".into())))
}

/// Runs a lane: `Ok(false)` if it stopped because another lane failed.
fn run_lane(lane: Vec<Step>, signals: &Signals) -> Result<bool, TaskFailure> {
    for step in lane {
        let done = match step {
            Step::Run(task) => run_task(task),
            Step::Signal(slot, record) => {
                let recorded = record.map_or(Ok(()), run_task);
                signals.set(slot);
                recorded
            }
            Step::Await(slot) => {
                if !signals.wait(slot) {
                    return Ok(false);
                }
                Ok(())
            }
        };
        if let Err(f) = done {
            signals.abort();
            return Err(f);
        }
    }
    Ok(true)
}

/// Runs `lanes` (the origin's first, here; the others on `threads`) with `slots` signals,
/// side by side: the first failure.
pub(super) fn run(
    lanes: Vec<Vec<Step>>,
    slots: usize,
    threads: &LaneThreads,
) -> Result<(), TaskFailure> {
    let signals = Arc::new(Signals {
        state: RankedMutex::new(ranks::SIGNALS, (vec![false; slots], false)),
        changed: Condvar::new(),
    });
    let (done, results) = mpsc::channel();
    let mut lanes = lanes.into_iter();
    let origin = lanes.next().unwrap_or_default();
    let mut result = Ok(());
    let mut others = 0;
    for (i, lane) in lanes.enumerate() {
        let (shared, done) = (signals.clone(), done.clone());
        let job = Box::new(move || {
            let _ = done.send(run_lane(lane, &shared));
        });
        match threads.send(i, job) {
            Ok(()) => others += 1,
            Err(f) => {
                signals.abort();
                result = Err(f);
                break;
            }
        }
    }
    if result.is_ok() {
        result = run_lane(origin, &signals).map(drop);
    }
    for _ in 0..others {
        let ran = results
            .recv()
            .unwrap_or_else(|_| Err(failure("a graph lane's thread is gone".into())));
        if let (Ok(()), Err(f)) = (&result, ran) {
            result = Err(f);
        }
    }
    result
}
