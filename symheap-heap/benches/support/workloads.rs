//! The workloads: steady-state churn, fill until the first failure (three size mixes), and an
//! inference trace.
//!
//! Every random choice comes from the seeded [`Rng`], so each allocator sees exactly the same
//! calls.

use super::allocators::{Allocator, UNIT};
use crate::rng::Rng;

const MIB: u64 = 1 << 20;
/// Every workload runs in a 1 GiB region.
pub const CAPACITY: u64 = 1 << 30;

/// A size in bytes, log-uniform from 512 B to `max` bytes, in whole units.
fn log_uniform_bytes(rng: &mut Rng, max: u64) -> u64 {
    rng.log_uniform(1, max / UNIT) * UNIT
}

/// Random free-then-alloc pairs over a fixed number of live blocks.
pub struct Steady<A: Allocator> {
    alloc: A,
    slots: Vec<Option<A::Handle>>,
    /// Pre-drawn `(slot, bytes)` pairs, so the timed loop does no random number generation.
    ops: Vec<(u32, u64)>,
    next: usize,
}

impl<A: Allocator> Steady<A> {
    /// `live` blocks of 512 B .. 1 MiB in a fresh allocator.
    pub fn new(live: usize, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut alloc = A::with_capacity(CAPACITY);
        let slots = (0..live)
            .map(|_| alloc.alloc(log_uniform_bytes(&mut rng, MIB)))
            .collect();
        let ops = (0..1 << 16)
            .map(|_| {
                let slot = rng.below(live as u64) as u32;
                (slot, log_uniform_bytes(&mut rng, MIB))
            })
            .collect();
        Steady {
            alloc,
            slots,
            ops,
            next: 0,
        }
    }

    /// Frees one random live block and allocates a new random size in its place.
    #[inline]
    pub fn step(&mut self) {
        let (slot, bytes) = self.ops[self.next];
        self.next = (self.next + 1) & (self.ops.len() - 1);
        let slot = &mut self.slots[slot as usize];
        if let Some(handle) = slot.take() {
            self.alloc.free(handle);
        }
        *slot = self.alloc.alloc(bytes);
    }
}

/// How a fill workload draws the size of each allocation, in bytes.
#[derive(Debug, Clone, Copy)]
pub enum Sizes {
    /// Log-uniform from 512 B to `max`: every octave about equally likely, most blocks small.
    LogUniform { max: u64 },
    /// Uniform from 512 B to `max`: most blocks large.
    Uniform { max: u64 },
}

impl Sizes {
    fn draw(self, rng: &mut Rng) -> u64 {
        match self {
            Sizes::LogUniform { max } => log_uniform_bytes(rng, max),
            Sizes::Uniform { max } => (1 + rng.below(max / UNIT)) * UNIT,
        }
    }
}

/// A fill-until-failure workload: random actions (60 % alloc of a size drawn from `sizes`,
/// 40 % free of a random live block) from empty until the first alloc fails.
#[derive(Debug, Clone, Copy)]
pub struct Fill {
    /// Its name in tables.
    pub name: &'static str,
    /// Its sizes.
    pub sizes: Sizes,
}

/// Issue 12's workload: random blocks up to a few percent of the heap (log-uniform up to
/// 40 MiB, 3.9 % of 1 GiB).
pub const ISSUE: Fill = Fill {
    name: "issue: log-uniform 512 B..40 MiB",
    sizes: Sizes::LogUniform { max: 40 * MIB },
};
/// Large blocks: uniform up to 1/32 of the heap (32 MiB).
pub const LARGE: Fill = Fill {
    name: "large: uniform 512 B..32 MiB",
    sizes: Sizes::Uniform { max: 32 * MIB },
};
/// The original efficiency workload: log-uniform up to 1/64 of the heap (16 MiB).
pub const MIXED: Fill = Fill {
    name: "mixed: log-uniform 512 B..16 MiB",
    sizes: Sizes::LogUniform { max: 16 * MIB },
};

/// Runs `fill` with `seed` until the first alloc fails; returns the percentage of the capacity
/// in use then.
pub fn fill_at_first_failure<A: Allocator>(fill: Fill, seed: u64) -> f64 {
    let mut rng = Rng::new(seed);
    let mut alloc = A::with_capacity(CAPACITY);
    let mut live: Vec<(A::Handle, u64)> = Vec::new();
    let mut in_use = 0;
    loop {
        if live.is_empty() || rng.chance(0.6) {
            let bytes = fill.sizes.draw(&mut rng);
            match alloc.alloc(bytes) {
                Some(handle) => {
                    live.push((handle, bytes));
                    in_use += bytes;
                }
                None => return 100.0 * in_use as f64 / CAPACITY as f64,
            }
        } else {
            let (handle, bytes) = live.swap_remove(rng.below(live.len() as u64) as usize);
            alloc.free(handle);
            in_use -= bytes;
        }
    }
}

/// The inference trace's counterpart of [`fill_at_first_failure`]: the trace of `seed`, replayed
/// in the smallest capacity (to 1 MiB) at which it runs without a failed alloc, fills it to
/// `peak live bytes / that capacity` (one MiB less, and some alloc fails). In percent.
pub fn trace_fill<A: Allocator>(seed: u64) -> f64 {
    let (ops, slots) = llm_trace(seed);
    let peak_live = trace_stats::<A>(&ops, slots, CAPACITY).peak_live;
    100.0 * peak_live as f64 / min_capacity::<A>(&ops, slots, peak_live) as f64
}

/// One call of a recorded trace. Slots name blocks, so the trace is independent of handles.
#[derive(Debug, Clone, Copy)]
pub enum TraceOp {
    /// Allocate `bytes` into `slot`.
    Alloc { slot: u32, bytes: u64 },
    /// Free what `slot` holds (nothing if its alloc failed).
    Free { slot: u32 },
    /// End of one decode step: a point to sample fragmentation at. Not timed work.
    StepEnd,
}

/// Shape of the inference trace: a decoder of `LAYERS` layers serving `SEQS` sequences.
const LAYERS: usize = 24;
const SEQS: usize = 20;
const STEPS: usize = 1000;
/// KV cache per token (one rank's shard, all layers).
const KV_PER_TOKEN: u64 = 32 << 10;
/// KV blocks grow by this many tokens at a time (free, then alloc the bigger block).
const KV_CHUNK: u64 = 64;

/// Records an inference-shaped trace:
/// * per layer and step, activations of four fixed shapes (hidden 4 MiB, qkv 1 MiB, scores
///   512 KiB, MLP 12 MiB), freed in the order a forward pass would;
/// * one KV-cache block per sequence that grows 64 tokens at a time (free + bigger alloc),
///   freed when the sequence finishes and re-created for a new one (prompt 128..1024 tokens,
///   then 64..1024 generated);
/// * occasional large temporaries: a prefill buffer per new prompt (64 KiB per prompt token) and
///   a 96 MiB logits gather every 37 steps.
pub fn llm_trace(seed: u64) -> (Vec<TraceOp>, usize) {
    let mut rng = Rng::new(seed);
    let mut ops = Vec::new();
    let mut slots = 0u32;
    let mut fresh = || {
        slots += 1;
        slots - 1
    };
    // Each sequence: (kv slot, tokens now, tokens at the end, tokens the block holds).
    let mut seqs: Vec<(u32, u64, u64, u64)> = Vec::new();
    let temp = fresh();
    let hidden = [fresh(), fresh()];
    let (qkv, scores, mlp) = (fresh(), fresh(), fresh());
    for step in 0..STEPS {
        // Admit new sequences: prefill temporaries, then the prompt's KV block.
        while seqs.len() < SEQS {
            let prompt = 128 + rng.below(897);
            let total = prompt + 64 + rng.below(961);
            ops.push(TraceOp::Alloc {
                slot: temp,
                bytes: prompt * (64 << 10),
            });
            let kv = fresh();
            let held = prompt.div_ceil(KV_CHUNK) * KV_CHUNK;
            ops.push(TraceOp::Alloc {
                slot: kv,
                bytes: held * KV_PER_TOKEN,
            });
            ops.push(TraceOp::Free { slot: temp });
            seqs.push((kv, prompt, total, held));
        }
        if step % 37 == 0 {
            ops.push(TraceOp::Alloc {
                slot: temp,
                bytes: 96 * MIB,
            });
        }
        // The forward pass: the residual stream alternates between two hidden buffers.
        ops.push(TraceOp::Alloc {
            slot: hidden[0],
            bytes: 4 * MIB,
        });
        for layer in 0..LAYERS {
            let (input, output) = (hidden[layer % 2], hidden[(layer + 1) % 2]);
            ops.push(TraceOp::Alloc {
                slot: qkv,
                bytes: MIB,
            });
            ops.push(TraceOp::Alloc {
                slot: scores,
                bytes: 512 << 10,
            });
            ops.push(TraceOp::Free { slot: scores });
            ops.push(TraceOp::Alloc {
                slot: mlp,
                bytes: 12 * MIB,
            });
            ops.push(TraceOp::Free { slot: qkv });
            ops.push(TraceOp::Alloc {
                slot: output,
                bytes: 4 * MIB,
            });
            ops.push(TraceOp::Free { slot: mlp });
            ops.push(TraceOp::Free { slot: input });
        }
        ops.push(TraceOp::Free {
            slot: hidden[LAYERS % 2],
        });
        if step % 37 == 0 {
            ops.push(TraceOp::Free { slot: temp });
        }
        // Every sequence gained a token: grow full KV blocks, retire finished sequences.
        seqs.retain_mut(|(kv, tokens, total, held)| {
            *tokens += 1;
            if *tokens >= *total {
                ops.push(TraceOp::Free { slot: *kv });
                return false;
            }
            if *tokens > *held {
                *held += KV_CHUNK;
                ops.push(TraceOp::Free { slot: *kv });
                ops.push(TraceOp::Alloc {
                    slot: *kv,
                    bytes: *held * KV_PER_TOKEN,
                });
            }
            true
        });
        ops.push(TraceOp::StepEnd);
    }
    for (kv, ..) in seqs {
        ops.push(TraceOp::Free { slot: kv });
    }
    (ops, slots as usize)
}

/// Runs `ops` on `alloc` (the timed part): no measurement, only the calls.
#[inline]
pub fn replay<A: Allocator>(alloc: &mut A, ops: &[TraceOp], slots: &mut [Option<A::Handle>]) {
    for op in ops {
        match *op {
            TraceOp::Alloc { slot, bytes } => slots[slot as usize] = alloc.alloc(bytes),
            TraceOp::Free { slot } => {
                if let Some(handle) = slots[slot as usize].take() {
                    alloc.free(handle);
                }
            }
            TraceOp::StepEnd => {}
        }
    }
}

/// What a trace did to an allocator's space.
#[derive(Debug, Default, Clone, Copy)]
pub struct TraceStats {
    /// Allocations that failed (the trace goes on without them).
    pub failed: usize,
    /// Most bytes live at once.
    pub peak_live: u64,
    /// Highest end offset ever handed out: the part of the capacity the trace really needed.
    pub peak_extent: u64,
    /// Mean over decode steps of `1 - largest_free / free`, in percent.
    pub mean_fragmentation: f64,
    /// The worst step's `1 - largest_free / free`, in percent.
    pub max_fragmentation: f64,
}

/// Runs `ops` on a fresh allocator of `capacity` bytes, measuring as it goes (not timed).
pub fn trace_stats<A: Allocator>(ops: &[TraceOp], slot_count: usize, capacity: u64) -> TraceStats {
    let mut alloc = A::with_capacity(capacity);
    let mut slots: Vec<Option<(A::Handle, u64)>> = (0..slot_count).map(|_| None).collect();
    let (mut stats, mut live, mut steps) = (TraceStats::default(), 0, 0);
    for op in ops {
        match *op {
            TraceOp::Alloc { slot, bytes } => match alloc.alloc(bytes) {
                Some(handle) => {
                    live += bytes;
                    stats.peak_live = stats.peak_live.max(live);
                    stats.peak_extent = stats.peak_extent.max(alloc.offset(&handle) + bytes);
                    slots[slot as usize] = Some((handle, bytes));
                }
                None => stats.failed += 1,
            },
            TraceOp::Free { slot } => {
                if let Some((handle, bytes)) = slots[slot as usize].take() {
                    alloc.free(handle);
                    live -= bytes;
                }
            }
            TraceOp::StepEnd => {
                let (free, largest) = alloc.free_and_largest();
                let fragmentation = 100.0 * (1.0 - largest as f64 / free as f64);
                stats.mean_fragmentation += fragmentation;
                stats.max_fragmentation = stats.max_fragmentation.max(fragmentation);
                steps += 1;
            }
        }
    }
    stats.mean_fragmentation /= f64::from(steps);
    stats
}

/// The smallest capacity, to 1 MiB, at which the trace runs without a failed alloc: bisection
/// between the peak live bytes (no allocator can do with less) and `CAPACITY`. Failure is not
/// strictly monotonic in the capacity, so this is the bisection's answer, not a proven minimum.
pub fn min_capacity<A: Allocator>(ops: &[TraceOp], slot_count: usize, peak_live: u64) -> u64 {
    let (mut lo, mut hi) = (peak_live.div_ceil(MIB) - 1, CAPACITY / MIB); // lo fails, hi works
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let ok = trace_stats::<A>(ops, slot_count, mid * MIB).failed == 0;
        if ok { hi = mid } else { lo = mid }
    }
    hi * MIB
}
