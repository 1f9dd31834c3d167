//! An inference-shaped workload on the heap, as two ranks would run it.
//!
//! `cargo run --release -p symheap-heap --example heap_trace`
//!
//! A decode loop over a 1 GiB heap with 512-byte granules: 16 layers of activations per step
//! (two hidden-state buffers that take turns, an MLP intermediate), one KV-cache block per
//! sequence that grows 64 tokens at a time (free, then a bigger alloc, as a cache without
//! paging would), sequences finishing and new ones arriving, and a large logits temporary every
//! 50 steps. Both "ranks" make the same calls, so they get the same offsets and the same op
//! hash: that is what lets collectives address peers' buffers by offset.

use symheap_heap::{Block, Heap, HeapError, HeapReport};

/// `Result` with the heap's error.
type Result<T> = std::result::Result<T, HeapError>;

const MIB: u64 = 1 << 20;
const LAYERS: usize = 16;
const SEQS: usize = 8;
const STEPS: u64 = 400;
/// KV bytes per token (this rank's shard, all layers).
const KV_PER_TOKEN: u64 = 64 << 10;
/// KV blocks grow this many tokens at a time.
const KV_CHUNK: u64 = 64;

/// One sequence: its KV block, tokens so far and its final length.
struct Seq {
    kv: Block,
    tokens: u64,
    end: u64,
}

/// Runs the trace on `heap`; returns the report at the moment of peak use.
fn run(heap: &mut Heap) -> Result<HeapReport> {
    let mut peak = heap.report();
    let mut seqs: Vec<Seq> = Vec::new();
    for step in 0..STEPS {
        // New sequences take the places of finished ones; lengths are a fixed function of the
        // step, so the trace is the same on every rank.
        while seqs.len() < SEQS {
            let prompt = 128 + (step * 37 + seqs.len() as u64 * 101) % 512;
            let kv = heap.alloc(prompt.next_multiple_of(KV_CHUNK) * KV_PER_TOKEN, 0)?;
            seqs.push(Seq {
                kv,
                tokens: prompt,
                end: prompt + 64 + (step * 53) % 384,
            });
        }
        let logits = (step % 50 == 0)
            .then(|| heap.alloc(96 * MIB, 0))
            .transpose()?;
        // The forward pass: the residual stream moves between two hidden buffers.
        let mut hidden = heap.alloc(4 * MIB, 0)?;
        for _ in 0..LAYERS {
            let mlp = heap.alloc(12 * MIB, 0)?;
            let next = heap.alloc(4 * MIB, 0)?;
            heap.free(mlp)?;
            heap.free(std::mem::replace(&mut hidden, next))?;
            if heap.report().allocated > peak.allocated {
                peak = heap.report();
            }
        }
        heap.free(hidden)?;
        if let Some(logits) = logits {
            heap.free(logits)?;
        }
        // One more token each: grow full KV blocks, retire finished sequences.
        let mut kept = Vec::with_capacity(seqs.len());
        for mut seq in seqs.drain(..) {
            seq.tokens += 1;
            if seq.tokens == seq.end {
                heap.free(seq.kv)?;
                continue;
            }
            if seq.tokens * KV_PER_TOKEN > seq.kv.size() {
                let bigger = seq.kv.size() + KV_CHUNK * KV_PER_TOKEN;
                heap.free(seq.kv)?;
                seq.kv = heap.alloc(bigger, 0)?;
            }
            kept.push(seq);
        }
        seqs = kept;
    }
    for seq in seqs {
        heap.free(seq.kv)?;
    }
    Ok(peak)
}

fn main() -> Result<()> {
    let mut rank0 = Heap::new(1 << 30, 512)?;
    let mut rank1 = Heap::new(1 << 30, 512)?;
    let peak = run(&mut rank0)?;
    run(&mut rank1)?;

    let mib = |bytes: u64| bytes as f64 / MIB as f64;
    println!("heap_trace: {STEPS} decode steps, {LAYERS} layers, {SEQS} sequences, 1 GiB heap");
    println!(
        "at peak:  {:.0} MiB allocated in {} blocks, {:.0} MiB free in {} regions \
         (largest {:.0} MiB)",
        mib(peak.allocated),
        peak.live_blocks,
        mib(peak.free),
        peak.free_regions,
        mib(peak.largest_free)
    );
    println!("at end:   {:?}", rank0.report());
    println!(
        "op hash:  rank 0 {:#018x}, rank 1 {:#018x}",
        rank0.op_hash(),
        rank1.op_hash()
    );
    assert_eq!(rank0.op_hash(), rank1.op_hash(), "same calls, same hash");
    assert_eq!(rank0.report().allocated, 0);
    Ok(())
}
