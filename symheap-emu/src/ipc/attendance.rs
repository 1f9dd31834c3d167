//! Who a rendezvous step waits for: step keys, why a rank will not come again, and which
//! missing ranks will therefore never come to a step. The rendezvous hub decides this for
//! steps it relays, each rank for steps on the board, by the same rule.

use crate::ipc::wire::{Reader, Writer};

/// What a rendezvous is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Key {
    /// Step `step` of the `seq`-th host-side collective call (window register / deregister).
    Host { seq: u64, step: u32 },
    /// Step `step` of the `seq`-th collective enqueued on the communicator.
    Collective { seq: u64, step: u32 },
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Host { seq, step } => write!(f, "window exchange #{seq} (step {step})"),
            Key::Collective { seq, step } => write!(f, "collective #{seq} (step {step})"),
        }
    }
}

impl Key {
    /// The key as it travels: kind, sequence number, step.
    pub(crate) fn encode(self) -> Vec<u8> {
        let (kind, seq, step) = match self {
            Key::Host { seq, step } => (0, seq, step),
            Key::Collective { seq, step } => (1, seq, step),
        };
        let mut w = Writer::default();
        w.u8(kind).u64(seq).u32(step);
        w.bytes
    }

    /// The key `bytes` encode.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Key> {
        let mut r = Reader::new(bytes);
        let (kind, seq, step) = (r.u8()?, r.u64()?, r.u32()?);
        match kind {
            0 => Some(Key::Host { seq, step }),
            1 => Some(Key::Collective { seq, step }),
            _ => None,
        }
    }
}

/// Why a rank will not come to later steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gone {
    /// It destroyed its communicator after taking collective numbers below this one; its
    /// stream may still run collectives it queued before.
    Left { next_collective: u64 },
    /// Its connection closed without that (its process exited or was killed): nothing more
    /// comes from it.
    Died,
}

impl Gone {
    /// The 64-bit word the board records it as: 0 while the rank may come,
    /// `next_collective + 1` once it left, `u64::MAX` once it died.
    pub(crate) fn word(gone: Option<Gone>) -> u64 {
        match gone {
            None => 0,
            Some(Gone::Left { next_collective }) => next_collective.saturating_add(1),
            Some(Gone::Died) => u64::MAX,
        }
    }

    /// What a board word records.
    pub(crate) fn from_word(word: u64) -> Option<Gone> {
        match word {
            0 => None,
            u64::MAX => Some(Gone::Died),
            w => Some(Gone::Left {
                next_collective: w - 1,
            }),
        }
    }

    /// Whether a rank gone this way will never come to step `key`.
    fn misses(self, key: Key) -> bool {
        match (self, key) {
            (Gone::Died, _) | (Gone::Left { .. }, Key::Host { .. }) => true,
            (Gone::Left { next_collective }, Key::Collective { seq, .. }) => seq >= next_collective,
        }
    }
}

/// Ranks that will never come to a step, by why.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Absent {
    /// Some died: these (reported first, being the likelier cause).
    Died(Vec<u32>),
    /// None died, these left.
    Left(Vec<u32>),
}

/// Which of the `missing` ranks (each with why it is gone, if it is) will never come to step
/// `key`, if any.
pub(crate) fn never_coming(
    key: Key,
    missing: impl IntoIterator<Item = (u32, Option<Gone>)>,
) -> Option<Absent> {
    let never: Vec<(u32, Gone)> = missing
        .into_iter()
        .filter_map(|(rank, gone)| Some((rank, gone?)))
        .filter(|&(_, gone)| gone.misses(key))
        .collect();
    let died: Vec<u32> = never
        .iter()
        .filter(|(_, g)| *g == Gone::Died)
        .map(|&(rank, _)| rank)
        .collect();
    if !died.is_empty() {
        Some(Absent::Died(died))
    } else if !never.is_empty() {
        Some(Absent::Left(
            never.into_iter().map(|(rank, _)| rank).collect(),
        ))
    } else {
        None
    }
}
