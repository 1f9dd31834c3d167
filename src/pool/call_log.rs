//! The pool's bounded log of its last calls, per rank: what a divergence between ranks is
//! reported with, in the user's terms.
//!
//! Every allocation, free and collective of the pool appends one fixed-size entry to a ring
//! of [`CALL_LOG_LEN`] (no allocation after the pool is made: the hot path pays a copy of a
//! few words). When the ranks find that they diverged ([`SymPool::verify_symmetric`], or the
//! emulator's refusal of a collective on asymmetric buffers), they gather every rank's ring
//! and compare each differing rank's with rank 0's, entry by entry:
//! `rank 2's allocation #5 (4096 B, tag "kv") has no match on rank 0`.
//!
//! [`SymPool::verify_symmetric`]: super::SymPool::verify_symmetric

use std::collections::VecDeque;

use crate::Collective;

/// How many of its last calls each rank keeps.
pub(crate) const CALL_LOG_LEN: usize = 64;

/// Words per entry in the gathered form: kind and number, two operands, the tag's first
/// 16 bytes.
const WORDS: usize = 5;

/// Words of one rank's gathered log: the number of calls ever logged, then the last ones.
pub(crate) const LOG_WORDS: usize = 1 + CALL_LOG_LEN * WORDS;

const ALLOC: u64 = 1;
const FREE: u64 = 2;
const COLLECTIVE: u64 = 3;

/// One pool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    /// Allocation number `n` of the pool.
    Alloc {
        n: u64,
        size: u64,
        align: u64,
        tag: [u8; 16],
    },
    /// A free of allocation number `n`.
    Free { n: u64 },
    /// The pool's `n`th collective, of `kind` (its C name's index) and `count` elements.
    Collective { n: u64, kind: u64, count: u64 },
}

/// The last [`CALL_LOG_LEN`] pool calls of this rank.
#[derive(Debug)]
pub(crate) struct CallLog {
    entries: VecDeque<Entry>,
    /// Calls ever logged: the first entry's position is `total - entries.len()`.
    total: u64,
    collectives: u64,
}

impl Default for CallLog {
    fn default() -> Self {
        CallLog {
            entries: VecDeque::with_capacity(CALL_LOG_LEN),
            total: 0,
            collectives: 0,
        }
    }
}

/// The first 16 bytes of `tag`, zero-padded.
fn tag_bytes(tag: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    let n = tag.len().min(16);
    out[..n].copy_from_slice(&tag.as_bytes()[..n]);
    out
}

impl CallLog {
    fn push(&mut self, entry: Entry) {
        if self.entries.len() == CALL_LOG_LEN {
            self.entries.pop_front();
        }
        self.entries.push_back(entry);
        self.total += 1;
    }

    /// Allocation number `n`.
    pub(crate) fn alloc(&mut self, n: u64, size: u64, align: u64, tag: &str) {
        let tag = tag_bytes(tag);
        self.push(Entry::Alloc {
            n,
            size,
            align,
            tag,
        });
    }

    /// A free of allocation number `n`.
    pub(crate) fn free(&mut self, n: u64) {
        self.push(Entry::Free { n });
    }

    /// A collective of `kind` on `count` elements (`None`: per-rank counts).
    pub(crate) fn collective(&mut self, kind: Collective, count: Option<u64>) {
        self.collectives += 1;
        let kind = Collective::ALL.iter().position(|k| *k == kind).unwrap_or(0) as u64;
        self.push(Entry::Collective {
            n: self.collectives,
            kind,
            count: count.unwrap_or(u64::MAX),
        });
    }

    /// The gathered form: [`LOG_WORDS`] words.
    pub(crate) fn to_words(&self) -> Vec<u64> {
        let mut out = vec![0u64; LOG_WORDS];
        out[0] = self.total;
        for (i, e) in self.entries.iter().enumerate() {
            let w = &mut out[1 + i * WORDS..1 + (i + 1) * WORDS];
            match *e {
                Entry::Alloc {
                    n,
                    size,
                    align,
                    tag,
                } => {
                    w[0] = ALLOC << 56 | n;
                    w[1] = size;
                    w[2] = align;
                    w[3] = u64::from_le_bytes(tag[..8].try_into().expect("8 bytes"));
                    w[4] = u64::from_le_bytes(tag[8..].try_into().expect("8 bytes"));
                }
                Entry::Free { n } => w[0] = FREE << 56 | n,
                Entry::Collective { n, kind, count } => {
                    w[0] = COLLECTIVE << 56 | n;
                    w[1] = kind;
                    w[2] = count;
                }
            }
        }
        out
    }
}

/// One rank's gathered log: the position of its first entry among all its calls, and the
/// entries (malformed words are dropped).
fn from_words(words: &[u64]) -> (u64, Vec<Entry>) {
    let total = words.first().copied().unwrap_or(0);
    let len = (total as usize).min(CALL_LOG_LEN);
    let entries = (0..len)
        .filter_map(|i| {
            let w = words.get(1 + i * WORDS..1 + (i + 1) * WORDS)?;
            let n = w[0] & ((1 << 56) - 1);
            match w[0] >> 56 {
                ALLOC => {
                    let mut tag = [0u8; 16];
                    tag[..8].copy_from_slice(&w[3].to_le_bytes());
                    tag[8..].copy_from_slice(&w[4].to_le_bytes());
                    Some(Entry::Alloc {
                        n,
                        size: w[1],
                        align: w[2],
                        tag,
                    })
                }
                FREE => Some(Entry::Free { n }),
                COLLECTIVE => Some(Entry::Collective {
                    n,
                    kind: w[1],
                    count: w[2],
                }),
                _ => None,
            }
        })
        .collect::<Vec<_>>();
    (total - entries.len() as u64, entries)
}

/// An entry in the user's terms: `allocation #5 (4096 B, tag "kv")`.
fn describe(e: &Entry) -> String {
    match *e {
        Entry::Alloc {
            n,
            size,
            align,
            tag,
        } => {
            let end = tag.iter().position(|&b| b == 0).unwrap_or(16);
            let tag = String::from_utf8_lossy(&tag[..end]);
            let align = match align {
                0 => String::new(),
                a => format!(", align {a}"),
            };
            let tag = match tag.is_empty() {
                true => String::from("untagged"),
                false => format!("tag {tag:?}"),
            };
            format!("allocation #{n} ({size} B{align}, {tag})")
        }
        Entry::Free { n } => format!("free of allocation #{n}"),
        Entry::Collective { n, kind, count } => {
            let kind = Collective::ALL
                .get(kind as usize)
                .map_or("?", |k| k.c_name());
            match count {
                u64::MAX => format!("collective #{n} ({kind})"),
                c => format!("collective #{n} ({kind}, {c} elements)"),
            }
        }
    }
}

/// What differs between rank 0's log and each of `differing`'s, from every rank's gathered
/// log (`logs[r]`, [`LOG_WORDS`] words each): the first entry of each that has no match on
/// rank 0, and rank 0's entry there. The same text on every rank.
pub(crate) fn explain(logs: &[&[u64]], differing: &[usize]) -> String {
    let (base_start, base) = from_words(logs[0]);
    let mut out = Vec::new();
    for &r in differing {
        let (start, theirs) = from_words(logs[r]);
        // Each log holds the last calls of its rank: compare call by call, by position among
        // all the calls, from the first position both still hold.
        let from = start.max(base_start);
        let end = (start + theirs.len() as u64).max(base_start + base.len() as u64);
        let at = |log: &[Entry], first: u64, p: u64| log.get((p - first) as usize).copied();
        let first = (from..end).find(|&p| at(&theirs, start, p) != at(&base, base_start, p));
        let line = match first {
            None => format!(
                "rank {r}'s last {} pool calls match rank 0's: they diverged earlier",
                end - from
            ),
            Some(p) => match (
                at(&theirs, start, p).as_ref(),
                at(&base, base_start, p).as_ref(),
            ) {
                (Some(t), Some(b)) => format!(
                    "rank {r}'s {} has no match on rank 0, whose call there is {}",
                    describe(t),
                    describe(b)
                ),
                (Some(t), None) => format!(
                    "rank {r}'s {} has no match on rank 0 (rank 0 made no further call)",
                    describe(t)
                ),
                (None, Some(b)) => format!(
                    "rank 0's {} has no match on rank {r} (rank {r} made no further call)",
                    describe(b)
                ),
                (None, None) => unreachable!("one of the logs is longer"),
            },
        };
        out.push(line);
    }
    out.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(log: &CallLog) -> Vec<u64> {
        log.to_words()
    }

    #[test]
    fn an_extra_allocation_is_named_with_its_size_and_tag() {
        let mut a = CallLog::default();
        let mut b = CallLog::default();
        for log in [&mut a, &mut b] {
            log.alloc(1, 1024, 0, "w");
        }
        b.alloc(2, 4096, 0, "kv");
        a.alloc(2, 4096, 0, "x");
        b.alloc(3, 4096, 0, "x");
        for log in [&mut a, &mut b] {
            log.collective(Collective::AllReduce, Some(1024));
        }
        let (wa, wb) = (words(&a), words(&b));
        let said = explain(&[&wa, &wb], &[1]);
        assert_eq!(
            said,
            "rank 1's allocation #2 (4096 B, tag \"kv\") has no match on rank 0, whose call \
             there is allocation #2 (4096 B, tag \"x\")"
        );
    }

    #[test]
    fn a_skipped_collective_and_a_full_ring_are_told() {
        let mut a = CallLog::default();
        let mut b = CallLog::default();
        for i in 0..100 {
            a.free(i);
            b.free(i);
        }
        a.collective(Collective::AllGather, Some(8));
        let (wa, wb) = (words(&a), words(&b));
        assert_eq!(
            explain(&[&wa, &wb], &[1]),
            "rank 0's free of allocation #99 has no match on rank 1 (rank 1 made no further call)"
                .replace(
                    "free of allocation #99",
                    "collective #1 (HcclAllGather, 8 elements)"
                )
        );
        assert_eq!(
            explain(&[&wb, &wb], &[1]),
            "rank 1's last 64 pool calls match rank 0's: they diverged earlier"
        );
    }
}
