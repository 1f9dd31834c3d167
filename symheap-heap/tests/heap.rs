//! The heap against a simple interval model, plus determinism and bad-input checks.

use std::collections::BTreeMap;

use symheap_heap::{Block, Heap, HeapError, HeapReport, OutOfSpace};

#[path = "support/rng.rs"]
mod rng;
use rng::Rng;

/// Every field of a [`HeapReport`], in a struct the model can build (`HeapReport` is
/// `#[non_exhaustive]`, so only the crate can).
#[derive(Debug, PartialEq, Eq)]
struct Report {
    capacity: u64,
    allocated: u64,
    free: u64,
    largest_free: u64,
    live_blocks: usize,
    free_regions: usize,
}

impl From<HeapReport> for Report {
    fn from(r: HeapReport) -> Self {
        Report {
            capacity: r.capacity,
            allocated: r.allocated,
            free: r.free,
            largest_free: r.largest_free,
            live_blocks: r.live_blocks,
            free_regions: r.free_regions,
        }
    }
}

/// Every field of an [`OutOfSpace`], in a struct the tests can build (`OutOfSpace` is
/// `#[non_exhaustive]`).
#[derive(Debug, PartialEq, Eq)]
struct Oom {
    requested: u64,
    align: u64,
    capacity: u64,
    free: u64,
    largest_free: u64,
}

impl From<&OutOfSpace> for Oom {
    fn from(oom: &OutOfSpace) -> Self {
        Oom {
            requested: oom.requested,
            align: oom.align,
            capacity: oom.capacity,
            free: oom.free,
            largest_free: oom.largest_free,
        }
    }
}

/// What the heap should look like: the live intervals, `offset -> size`, in bytes.
struct Model {
    capacity: u64,
    granularity: u64,
    live: BTreeMap<u64, u64>,
}

impl Model {
    /// The free gaps between live intervals, as `(start, end)`.
    fn gaps(&self) -> Vec<(u64, u64)> {
        let mut gaps = Vec::new();
        let mut end = 0;
        for (&offset, &size) in &self.live {
            if offset > end {
                gaps.push((end, offset));
            }
            end = offset + size;
        }
        if end < self.capacity {
            gaps.push((end, self.capacity));
        }
        gaps
    }

    /// The report the heap must give.
    fn report(&self) -> Report {
        let allocated: u64 = self.live.values().sum();
        let gaps = self.gaps();
        Report {
            capacity: self.capacity,
            allocated,
            free: self.capacity - allocated,
            largest_free: gaps.iter().map(|(s, e)| e - s).max().unwrap_or(0),
            live_blocks: self.live.len(),
            free_regions: gaps.len(),
        }
    }

    /// Whether some gap can hold `size` bytes (rounded to the granularity) at a multiple of
    /// `align`.
    fn can_fit(&self, size: u64, align: u64) -> bool {
        let align = align.max(self.granularity);
        let size = size.div_ceil(self.granularity) * self.granularity;
        self.gaps().iter().any(|&(start, end)| {
            let aligned = start.div_ceil(align).saturating_mul(align);
            aligned < end && end - aligned >= size
        })
    }

    /// Where an exact best fit puts `size` bytes (rounded to the granularity) without an
    /// alignment requirement: the start of the smallest gap that holds it, the lowest of equal
    /// ones.
    fn best_fit(&self, size: u64) -> Option<u64> {
        let size = size.div_ceil(self.granularity) * self.granularity;
        self.gaps()
            .into_iter()
            .filter(|&(start, end)| end - start >= size)
            .min_by_key(|&(start, end)| (end - start, start))
            .map(|(start, _)| start)
    }

    /// Whether the heap promises an exact best fit for `size` bytes at `align`: no alignment
    /// above the granularity, and well above the large-block threshold (`capacity / 4096`; twice
    /// that, so the request's whole size class is above it).
    fn promises_best_fit(&self, size: u64, align: u64) -> bool {
        let threshold = ((self.capacity / self.granularity) >> 12).max(1) * self.granularity;
        align <= self.granularity && size >= 2 * threshold
    }

    /// Checks a freshly allocated block and records it.
    fn add(&mut self, block: &Block, size: u64, align: u64) {
        let (offset, granted) = (block.offset(), block.size());
        let align = align.max(self.granularity);
        assert_eq!(granted, size.div_ceil(self.granularity) * self.granularity);
        assert!(granted >= size && granted % self.granularity == 0);
        assert_eq!(offset % align, 0, "offset {offset} not aligned to {align}");
        assert!(offset + granted <= self.capacity, "block out of bounds");
        if let Some((&below, &below_size)) = self.live.range(..offset).next_back() {
            assert!(
                below + below_size <= offset,
                "overlaps the block at {below}"
            );
        }
        if let Some((&above, _)) = self.live.range(offset..).next() {
            assert!(offset + granted <= above, "overlaps the block at {above}");
        }
        self.live.insert(offset, granted);
    }
}

/// Random sizes that cover tiny, unaligned, large and impossible requests; most are at most
/// `capacity / spread` bytes, so `spread` sets how many blocks fit at once.
fn random_size(rng: &mut Rng, capacity: u64, spread: u64) -> u64 {
    match rng.below(16) {
        0 => capacity + rng.below(capacity) + 1, // never fits
        1 => capacity - rng.below(capacity.min(4096)),
        _ => rng.log_uniform(1, (capacity / spread).max(1)),
    }
}

/// Mostly "no requirement", sometimes any power of two up to twice the capacity.
fn random_align(rng: &mut Rng, capacity: u64) -> u64 {
    match rng.below(4) {
        0 => 1 << rng.below(u64::from(64 - capacity.leading_zeros()) + 1),
        1 => 1,
        _ => 0,
    }
}

/// Runs one random alloc/free sequence against the model, checking everything after every step.
fn run_model(capacity: u64, granularity: u64, spread: u64, seed: u64, steps: usize) {
    let mut rng = Rng::new(seed);
    let mut heap = Heap::new(capacity, granularity).unwrap();
    let mut model = Model {
        capacity,
        granularity,
        live: BTreeMap::new(),
    };
    let mut blocks: Vec<Block> = Vec::new();
    let (mut served, mut refused, mut large) = (0, 0, 0);
    for step in 0..steps {
        // Alternate filling and draining phases so the heap spends time both full and empty.
        let alloc_bias = if (step / 300) % 2 == 0 { 0.75 } else { 0.3 };
        let before = heap.report();
        if blocks.is_empty() || rng.chance(alloc_bias) {
            let size = random_size(&mut rng, capacity, spread);
            let align = random_align(&mut rng, capacity);
            let fits = model.can_fit(size, align);
            let best = model
                .promises_best_fit(size, align)
                .then(|| model.best_fit(size));
            match heap.alloc(size, align) {
                Ok(block) => {
                    assert!(fits, "the model has no room for {size} @ {align}");
                    if let Some(best) = best {
                        assert_eq!(Some(block.offset()), best, "not the best fit for {size}");
                        large += 1;
                    }
                    model.add(&block, size, align);
                    blocks.push(block);
                    served += 1;
                }
                Err(HeapError::OutOfSpace(oom)) => {
                    assert!(!fits, "refused {size} @ {align}, which fits: {oom}");
                    let expect = Oom {
                        requested: size,
                        align: align.max(granularity),
                        capacity,
                        free: before.free,
                        largest_free: before.largest_free,
                    };
                    assert_eq!(Oom::from(&oom), expect);
                    assert_eq!(heap.report(), before, "a failed alloc changed the heap");
                    refused += 1;
                }
                Err(other) => panic!("unexpected error for {size} @ {align}: {other}"),
            }
        } else {
            let block = blocks.swap_remove(rng.below(blocks.len() as u64) as usize);
            assert_eq!(model.live.remove(&block.offset()), Some(block.size()));
            heap.free(block).unwrap();
        }
        assert_eq!(
            Report::from(heap.report()),
            model.report(),
            "seed {seed}, step {step}"
        );
    }
    assert!(
        served > 0 && refused > 0 && large > 0,
        "the sequence should exercise both outcomes, and best fits"
    );
    for block in blocks.drain(..) {
        heap.free(block).unwrap();
    }
    let empty = heap.report();
    assert_eq!((empty.free_regions, empty.largest_free), (1, capacity));
}

#[test]
fn model_based_random_sequences() {
    // Sized for a few seconds on two cores in --release; fewer steps in debug builds, fewer
    // still under Miri (which checks the same code paths, a hundred times slower).
    let (seeds, steps) = if cfg!(miri) {
        (1, 40)
    } else if cfg!(debug_assertions) {
        (4, 600)
    } else {
        (64, 4000)
    };
    // (capacity, granularity, spread): a few large blocks live at once, or hundreds of small ones.
    let configs = [
        (1u64 << 20, 512u64, 8u64),
        (1 << 20, 512, 256),
        (1000 * 512, 512, 8),
        (12_345 * 64, 64, 64),
        (1 << 16, 1, 8),
        (3 << 40, 1 << 30, 8),
        (1 << 50, 1 << 21, 128),
    ];
    for (capacity, granularity, spread) in configs {
        for seed in 0..seeds {
            run_model(capacity, granularity, spread, seed * 7919 + capacity, steps);
        }
    }
}

/// One call of a replayable sequence: the outcome each heap gave, for comparison.
fn replay(heap: &mut Heap, seed: u64, steps: usize) -> Vec<(Option<u64>, u64)> {
    let mut rng = Rng::new(seed);
    let mut blocks = Vec::new();
    let mut trace = Vec::new();
    for _ in 0..steps {
        let outcome = if blocks.is_empty() || rng.chance(0.6) {
            let size = random_size(&mut rng, heap.capacity(), 64);
            let align = random_align(&mut rng, heap.capacity());
            match heap.alloc(size, align) {
                Ok(block) => {
                    let offset = block.offset();
                    blocks.push(block);
                    Some(offset)
                }
                Err(_) => None,
            }
        } else {
            let block: Block = blocks.swap_remove(rng.below(blocks.len() as u64) as usize);
            heap.free(block).unwrap();
            None
        };
        trace.push((outcome, heap.op_hash()));
    }
    trace
}

#[test]
fn same_calls_same_offsets_and_hashes() {
    let (seeds, steps) = if cfg!(miri) { (2, 200) } else { (8, 2000) };
    for seed in 0..seeds {
        let mut a = Heap::new(1 << 24, 512).unwrap();
        let _other_heap_in_between = Heap::new(1 << 24, 512).unwrap(); // ids differ; no effect
        let mut b = Heap::new(1 << 24, 512).unwrap();
        assert_eq!(replay(&mut a, seed, steps), replay(&mut b, seed, steps));
        assert_eq!(a.report(), b.report());
    }
}

#[test]
fn different_calls_different_hashes() {
    let (seeds, steps) = if cfg!(miri) { (8, 100) } else { (64, 500) };
    let hash_of = |seed| {
        let mut heap = Heap::new(1 << 24, 512).unwrap();
        replay(&mut heap, seed, steps);
        heap.op_hash()
    };
    let hashes: Vec<u64> = (0..seeds).map(hash_of).collect();
    let mut unique = hashes.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), hashes.len());

    // Arguments count even when the outcome is the same (1000 and 1024 both take 1024 bytes).
    let (mut a, mut b) = (
        Heap::new(1 << 20, 512).unwrap(),
        Heap::new(1 << 20, 512).unwrap(),
    );
    let (x, y) = (a.alloc(1000, 0).unwrap(), b.alloc(1024, 0).unwrap());
    assert_eq!((x.offset(), x.size()), (y.offset(), y.size()));
    assert_ne!(a.op_hash(), b.op_hash());

    // So does the order of frees, and failed calls.
    let (mut a, mut b) = (
        Heap::new(1 << 20, 512).unwrap(),
        Heap::new(1 << 20, 512).unwrap(),
    );
    let (a1, a2) = (a.alloc(512, 0).unwrap(), a.alloc(512, 0).unwrap());
    let (b1, b2) = (b.alloc(512, 0).unwrap(), b.alloc(512, 0).unwrap());
    a.free(a1).unwrap();
    a.free(a2).unwrap();
    b.free(b2).unwrap();
    b.free(b1).unwrap();
    assert_eq!(a.report(), b.report());
    assert_ne!(a.op_hash(), b.op_hash());
    let hash = a.op_hash();
    assert!(a.alloc(2 << 20, 0).is_err());
    assert_ne!(a.op_hash(), hash);
}

#[test]
fn exact_capacity_requests() {
    for (capacity, granularity) in [(512, 512), (4097 * 512, 512), (1 << 48, 1 << 21), (999, 1)] {
        let mut heap = Heap::new(capacity, granularity).unwrap();
        let block = heap.alloc(capacity, 0).unwrap();
        assert_eq!((block.offset(), block.size()), (0, capacity));
        let report = heap.report();
        assert_eq!(
            (report.free, report.largest_free, report.free_regions),
            (0, 0, 0)
        );
        heap.free(block).unwrap();
        // And again after splitting and merging.
        let half = heap.alloc(capacity / 2, 0).unwrap();
        heap.free(half).unwrap();
        let whole = heap.alloc(capacity, 0).unwrap();
        heap.free(whole).unwrap();
    }
}

#[test]
fn beyond_2_pow_48() {
    let mut heap = Heap::new(1 << 60, 1 << 30).unwrap();
    let blocks: Vec<Block> = (0..1000)
        .map(|i| heap.alloc((1 << 50) + i, 1 << 40).unwrap())
        .collect();
    let last = blocks.last().unwrap();
    assert!(last.offset() > 1 << 59);
    assert_eq!(last.offset() % (1 << 40), 0);
    for block in blocks {
        heap.free(block).unwrap();
    }
    assert_eq!(heap.report().largest_free, 1 << 60);
}

/// Asserts `result` is an `InvalidArgument` whose message mentions `needle`.
fn assert_invalid<T: std::fmt::Debug>(result: Result<T, HeapError>, needle: &str) {
    match result {
        Err(HeapError::InvalidArgument(msg)) => {
            assert!(msg.contains(needle), "{msg:?} lacks {needle:?}")
        }
        other => panic!("expected InvalidArgument mentioning {needle:?}, got {other:?}"),
    }
}

#[test]
fn bad_construction_is_refused() {
    assert_invalid(Heap::new(1 << 20, 0), "granularity 0 is not a power of two");
    assert_invalid(Heap::new(1 << 20, 768), "granularity 768");
    assert_invalid(Heap::new(0, 512), "capacity 0");
    assert_invalid(
        Heap::new(1000, 512),
        "capacity 1000 must be a non-zero multiple",
    );
}

#[test]
fn bad_allocs_change_nothing_but_the_hash() {
    let mut heap = Heap::new(1 << 20, 512).unwrap();
    let keep = heap.alloc(3000, 0).unwrap();
    let cases: [(u64, u64, &str); 6] = [
        (0, 0, "size must be at least 1 byte"),
        (512, 3, "alignment 3 is neither 0 nor a power of two"),
        (512, 4097, "alignment 4097"),
        (u64::MAX, 0, "overflows u64"),
        ((1 << 63) + 1, 1 << 63, "overflows u64"),
        (u64::MAX - 511, 1024, "overflows u64"),
    ];
    for (size, align, needle) in cases {
        let (report, hash) = (heap.report(), heap.op_hash());
        assert_invalid(heap.alloc(size, align), needle);
        assert_eq!(heap.report(), report);
        assert_ne!(heap.op_hash(), hash);
    }
    heap.free(keep).unwrap();
}

#[test]
fn out_of_memory_reports_what_was_free() {
    let capacity = 64 * 512;
    let mut heap = Heap::new(capacity, 512).unwrap();
    let low = heap.alloc(512, 0).unwrap();
    let before = heap.report();
    let expect = |requested, align| Oom {
        requested,
        align,
        capacity,
        free: capacity - 512,
        largest_free: capacity - 512,
    };
    for (size, align, reported_align) in [
        (capacity, 0, 512),             // one granule too many
        (capacity + 1, 0, 512),         // more than the heap
        (512, capacity, capacity),      // only offset 0 is aligned, and it is taken
        (40 * 512, 32 * 512, 32 * 512), // aligned start leaves too little
    ] {
        match heap.alloc(size, align) {
            Err(HeapError::OutOfSpace(oom)) => {
                assert_eq!(Oom::from(&oom), expect(size, reported_align));
                let text = HeapError::OutOfSpace(oom).to_string();
                assert!(text.contains("raise the heap capacity"), "{text}");
            }
            other => panic!("expected OutOfSpace for {size} @ {align}, got {other:?}"),
        }
        assert_eq!(heap.report(), before);
    }
    heap.free(low).unwrap();
}

#[test]
fn foreign_blocks_are_refused() {
    let mut a = Heap::new(1 << 20, 512).unwrap();
    let mut b = Heap::new(1 << 20, 512).unwrap();
    let mine = b.alloc(4096, 0).unwrap();
    let theirs = a.alloc(4096, 0).unwrap();
    let (report, hash) = (b.report(), b.op_hash());
    assert_invalid(b.free(theirs), "belongs to another heap");
    assert_eq!(b.report(), report);
    assert_ne!(b.op_hash(), hash);
    // Same offset, same size, wrong heap: refused; the right heap frees it.
    b.free(mine).unwrap();
    assert_eq!(b.report().allocated, 0);
    assert_eq!(
        a.report().live_blocks,
        1,
        "a's block was dropped, not freed"
    );
}
