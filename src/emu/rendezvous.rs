//! The rendezvous of the ranks of one communicator: every rank deposits a value under a key,
//! and once all have, each gets every rank's value. A rank that waits longer than its timeout
//! withdraws and fails, so a missing peer is an error, never a hang.
//!
//! Keys carry sequence numbers assigned in host program order, so the n-th collective (or
//! host-side collective call) of one rank meets the n-th of every other rank.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::registry::lock;

/// What a rendezvous is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Key {
    /// Step `step` of the `seq`-th host-side collective call (window register / deregister).
    Host { seq: u64, step: u32 },
    /// Step `step` of the `seq`-th collective enqueued on the communicator.
    Collective { seq: u64, step: u32 },
}

/// Why a rendezvous failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RvError {
    /// These ranks did not arrive in time.
    Timeout { missing: Vec<u32> },
    /// Ranks deposited values of different kinds under one key (different operations).
    Mismatch,
    /// This rank already has a value under the key.
    Duplicate,
}

type Value = Arc<dyn Any + Send + Sync>;

struct Slot {
    values: Vec<Option<Value>>,
    arrived: usize,
    departed: usize,
    complete: bool,
}

/// The rendezvous point of one communicator's ranks.
pub(crate) struct Rendezvous {
    n: usize,
    slots: Mutex<BTreeMap<Key, Slot>>,
    /// Signalled whenever a slot completes.
    cv: Condvar,
}

impl Rendezvous {
    /// A rendezvous for `n` ranks.
    pub(crate) fn new(n: u32) -> Self {
        Self {
            n: n as usize,
            slots: Mutex::new(BTreeMap::new()),
            cv: Condvar::new(),
        }
    }

    /// Deposits `value` for `rank` under `key` and waits up to `timeout` for every rank; then
    /// returns all ranks' values, in rank order.
    pub(crate) fn exchange<T: Any + Clone + Send + Sync>(
        &self,
        key: Key,
        rank: u32,
        value: T,
        timeout: Duration,
    ) -> Result<Vec<T>, RvError> {
        let me = rank as usize;
        let deadline = Instant::now() + timeout;
        let mut slots = lock(&self.slots);
        let slot = slots.entry(key).or_insert_with(|| Slot {
            values: vec![None; self.n],
            arrived: 0,
            departed: 0,
            complete: false,
        });
        if slot.values[me].is_some() {
            return Err(RvError::Duplicate);
        }
        slot.values[me] = Some(Arc::new(value));
        slot.arrived += 1;
        if slot.arrived == self.n {
            slot.complete = true;
            self.cv.notify_all();
        }
        loop {
            let slot = slots
                .get_mut(&key)
                .expect("a slot lives until every rank left it");
            if slot.complete {
                let values: Option<Vec<T>> = slot
                    .values
                    .iter()
                    .map(|v| v.as_ref().and_then(|v| v.downcast_ref::<T>()).cloned())
                    .collect();
                slot.departed += 1;
                if slot.departed == self.n {
                    slots.remove(&key);
                }
                return values.ok_or(RvError::Mismatch);
            }
            let now = Instant::now();
            if now >= deadline {
                let missing = (0..self.n)
                    .filter(|&r| slot.values[r].is_none())
                    .map(|r| r as u32)
                    .collect();
                slot.values[me] = None;
                slot.arrived -= 1;
                if slot.arrived == 0 {
                    slots.remove(&key);
                }
                return Err(RvError::Timeout { missing });
            }
            slots = self
                .cv
                .wait_timeout(slots, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_gets_every_value_in_rank_order() {
        let rv = Rendezvous::new(3);
        let key = Key::Collective { seq: 0, step: 0 };
        let got: Vec<Vec<u32>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3u32)
                .map(|r| {
                    let rv = &rv;
                    s.spawn(move || rv.exchange(key, r, r * 10, Duration::from_secs(5)).unwrap())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(got.iter().all(|v| v == &[0, 10, 20]));
        assert!(lock(&rv.slots).is_empty());
    }

    #[test]
    fn missing_ranks_time_out_and_mismatched_kinds_are_reported() {
        let rv = Rendezvous::new(2);
        let key = Key::Host { seq: 1, step: 0 };
        let err = rv.exchange(key, 0, 1u8, Duration::from_millis(20));
        assert_eq!(err, Err(RvError::Timeout { missing: vec![1] }));
        assert!(lock(&rv.slots).is_empty(), "a timed-out rank withdraws");
        let results = std::thread::scope(|s| {
            let a = s.spawn(|| rv.exchange(key, 0, 1u8, Duration::from_secs(5)).map(drop));
            let b = s.spawn(|| rv.exchange(key, 1, 1u16, Duration::from_secs(5)).map(drop));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert_eq!(results, (Err(RvError::Mismatch), Err(RvError::Mismatch)));
    }
}
