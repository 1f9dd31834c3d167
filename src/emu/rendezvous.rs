//! The rendezvous of the ranks of one communicator: every rank deposits a value under a key,
//! and once all have, each gets every rank's value. A rank that waits longer than its timeout
//! withdraws and fails, so a missing peer is an error, never a hang; a rank waiting for a peer
//! that destroyed its communicator (and so will never come) fails at once.
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
    /// These ranks destroyed their communicator without arriving: they never will.
    Gone { ranks: Vec<u32> },
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

struct State {
    slots: BTreeMap<Key, Slot>,
    /// Per rank: `None` while its communicator lives; once destroyed, the first collective
    /// sequence number it never took. Its stream may still run collectives it queued before
    /// (numbers below that); it makes no further host calls.
    gone: Vec<Option<u64>>,
}

/// Whether a rank with `gone` state will never deposit under `key`.
fn never_comes(gone: Option<u64>, key: Key) -> bool {
    match (gone, key) {
        (None, _) => false,
        (Some(_), Key::Host { .. }) => true,
        (Some(next), Key::Collective { seq, .. }) => seq >= next,
    }
}

/// `now + timeout`, or a day from now if that cannot be represented.
pub(crate) fn deadline(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(Duration::from_secs(86_400)))
        .unwrap_or(now)
}

/// The rendezvous point of one communicator's ranks.
pub(crate) struct Rendezvous {
    n: usize,
    state: Mutex<State>,
    /// Signalled whenever a slot completes or a rank leaves.
    cv: Condvar,
}

impl Rendezvous {
    /// A rendezvous for `n` ranks.
    pub(crate) fn new(n: u32) -> Self {
        Self {
            n: n as usize,
            state: Mutex::new(State {
                slots: BTreeMap::new(),
                gone: vec![None; n as usize],
            }),
            cv: Condvar::new(),
        }
    }

    /// Records that `rank` destroyed its communicator after taking collective sequence numbers
    /// below `next_collective`: waiters for it on any later key fail at once, now and later.
    pub(crate) fn leave(&self, rank: u32, next_collective: u64) {
        lock(&self.state).gone[rank as usize] = Some(next_collective);
        self.cv.notify_all();
    }

    /// Deposits `value` for `rank` under `key` and waits up to `timeout` for every rank; then
    /// returns all ranks' values, in rank order. Fails at once when a missing rank has left
    /// ([`Rendezvous::leave`]) and will never deposit under `key`.
    pub(crate) fn exchange<T: Any + Clone + Send + Sync>(
        &self,
        key: Key,
        rank: u32,
        value: T,
        timeout: Duration,
    ) -> Result<Vec<T>, RvError> {
        let me = rank as usize;
        let deadline = deadline(timeout);
        let mut guard = lock(&self.state);
        if guard.deposit(key, me, Arc::new(value), self.n)? {
            self.cv.notify_all();
        }
        loop {
            if let Some(values) = guard.depart(key, self.n) {
                return values;
            }
            let now = Instant::now();
            if let Some(failure) = guard.give_up(key, me, now >= deadline) {
                return Err(failure);
            }
            guard = self
                .cv
                .wait_timeout(guard, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl State {
    /// Deposits rank `me`'s `value` under `key` (in a slot for `n` ranks); whether the slot is
    /// complete now.
    fn deposit(&mut self, key: Key, me: usize, value: Value, n: usize) -> Result<bool, RvError> {
        let slot = self.slots.entry(key).or_insert_with(|| Slot {
            values: vec![None; n],
            arrived: 0,
            departed: 0,
            complete: false,
        });
        if slot.values[me].is_some() {
            return Err(RvError::Duplicate);
        }
        slot.values[me] = Some(value);
        slot.arrived += 1;
        slot.complete = slot.arrived == n;
        Ok(slot.complete)
    }

    /// Once the slot under `key` is complete: every rank's value as a `T` (or
    /// [`RvError::Mismatch`] when some rank's is not one), and this rank is done with the slot
    /// (the last of the `n` to leave removes it).
    fn depart<T: Any + Clone>(&mut self, key: Key, n: usize) -> Option<Result<Vec<T>, RvError>> {
        let slot = self
            .slots
            .get_mut(&key)
            .expect("a slot lives until every rank left it");
        if !slot.complete {
            return None;
        }
        let values: Option<Vec<T>> = slot
            .values
            .iter()
            .map(|v| v.as_ref().and_then(|v| v.downcast_ref::<T>()).cloned())
            .collect();
        slot.departed += 1;
        if slot.departed == n {
            self.slots.remove(&key);
        }
        Some(values.ok_or(RvError::Mismatch))
    }

    /// When waiting on under `key` is pointless (a missing rank left and will never come, or
    /// `timed_out`): withdraws rank `me`'s value and says why.
    fn give_up(&mut self, key: Key, me: usize, timed_out: bool) -> Option<RvError> {
        let State { slots, gone } = self;
        let slot = slots
            .get_mut(&key)
            .expect("a slot lives until every rank left it");
        let missing: Vec<u32> = (0..slot.values.len())
            .filter(|&r| slot.values[r].is_none())
            .map(|r| r as u32)
            .collect();
        let left: Vec<u32> = missing
            .iter()
            .copied()
            .filter(|&r| never_comes(gone[r as usize], key))
            .collect();
        if left.is_empty() && !timed_out {
            return None;
        }
        slot.values[me] = None;
        slot.arrived -= 1;
        if slot.arrived == 0 {
            slots.remove(&key);
        }
        Some(if left.is_empty() {
            RvError::Timeout { missing }
        } else {
            RvError::Gone { ranks: left }
        })
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
        assert!(lock(&rv.state).slots.is_empty());
    }

    #[test]
    fn missing_ranks_time_out_and_mismatched_kinds_are_reported() {
        let rv = Rendezvous::new(2);
        let key = Key::Host { seq: 1, step: 0 };
        let err = rv.exchange(key, 0, 1u8, Duration::from_millis(20));
        assert_eq!(err, Err(RvError::Timeout { missing: vec![1] }));
        assert!(
            lock(&rv.state).slots.is_empty(),
            "a timed-out rank withdraws"
        );
        let results = std::thread::scope(|s| {
            let a = s.spawn(|| rv.exchange(key, 0, 1u8, Duration::from_secs(5)).map(drop));
            let b = s.spawn(|| rv.exchange(key, 1, 1u16, Duration::from_secs(5)).map(drop));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert_eq!(results, (Err(RvError::Mismatch), Err(RvError::Mismatch)));
    }

    #[test]
    fn a_rank_that_left_fails_its_waiters_at_once() {
        let rv = Rendezvous::new(2);
        let long = Duration::from_secs(60);
        let start = Instant::now();
        let host = Key::Host { seq: 0, step: 0 };
        let waited = std::thread::scope(|s| {
            let w = s.spawn(|| rv.exchange(host, 0, (), long));
            // Rank 1 leaves while rank 0 waits (or before it arrives: same outcome).
            std::thread::sleep(Duration::from_millis(20));
            rv.leave(1, 1);
            w.join().unwrap()
        });
        assert_eq!(waited, Err(RvError::Gone { ranks: vec![1] }));
        // Later keys fail on arrival: host calls always, collectives from the rank's next
        // sequence number on.
        let later = Key::Host { seq: 5, step: 0 };
        assert_eq!(
            rv.exchange(later, 0, (), long),
            Err(RvError::Gone { ranks: vec![1] })
        );
        let next = Key::Collective { seq: 1, step: 0 };
        assert_eq!(
            rv.exchange(next, 0, (), long),
            Err(RvError::Gone { ranks: vec![1] })
        );
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(lock(&rv.state).slots.is_empty());
        // A collective the rank queued before leaving still meets its peers.
        let queued = Key::Collective { seq: 0, step: 3 };
        let got = std::thread::scope(|s| {
            let a = s.spawn(|| rv.exchange(queued, 0, 7u8, long));
            let b = s.spawn(|| rv.exchange(queued, 1, 8u8, long));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert_eq!(got, (Ok(vec![7, 8]), Ok(vec![7, 8])));
    }

    #[test]
    fn deadlines_never_overflow() {
        let far = deadline(Duration::MAX);
        assert!(far > Instant::now());
    }
}
