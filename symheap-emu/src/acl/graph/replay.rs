//! One replay of a graph: the captured work of each stream in its own lane, the lanes run
//! side by side (the origin stream's on the replay stream's thread, each joined stream's on
//! a thread of its own) and ordered by the capture's event records and waits, as a device
//! runs a model's streams. A lane that fails stops the others at their next wait.

use std::sync::{Condvar, Mutex};

use crate::acl::stream::{Task, TaskFailure};
use crate::base::registry::lock;

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
    state: Mutex<(Vec<bool>, bool)>,
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
            st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.0[slot]
    }
}

/// Runs a lane: `Ok(false)` if it stopped because another lane failed.
fn run_lane(lane: Vec<Step>, signals: &Signals) -> Result<bool, TaskFailure> {
    for step in lane {
        let done = match step {
            Step::Run(task) => task(),
            Step::Signal(slot, record) => {
                let recorded = record.map_or(Ok(()), |r| r());
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

/// Runs `lanes` (the origin's first) with `slots` signals, side by side: the first failure.
pub(super) fn run(lanes: Vec<Vec<Step>>, slots: usize) -> Result<(), TaskFailure> {
    let signals = Signals {
        state: Mutex::new((vec![false; slots], false)),
        changed: Condvar::new(),
    };
    let mut lanes = lanes.into_iter();
    let origin = lanes.next().unwrap_or_default();
    std::thread::scope(|scope| {
        let others: Vec<_> = lanes
            .map(|lane| scope.spawn(|| run_lane(lane, &signals)))
            .collect();
        let mut result = run_lane(origin, &signals).map(drop);
        for other in others {
            let joined = other.join().unwrap_or_else(|_| {
                Err(TaskFailure {
                    code: crate::sys::ACL_ERROR_RT_INTERNAL_ERROR,
                    msg: "a lane of the replay panicked".into(),
                })
            });
            if let (Ok(()), Err(f)) = (&result, joined) {
                result = Err(f);
            }
        }
        result
    })
}
