//! Stream-ordered reuse against deferred reuse, with and without a synchronize per step, in
//! the same run (`cargo bench --bench streams`): a decode-shaped worker on 2 emulated ranks
//! (threads). Each step allocates a step's activations (4 tensors of 4 KiB to 1 MiB), runs
//! AllReduces on two of them and frees them all; every 64th step the KV cache grows by a
//! reallocation. Reported for rank 0: the mean fragmentation over the steps (sampled after
//! each step's frees), the device memory the pool grew to, and steps/s (median of rounds).
//!
//! Then compute/communication overlap: each step "computes" (a host function on a stream
//! that sleeps, as device compute costs the host nothing) into one of two buffers, and
//! AllReduces that buffer (1 MiB); on two streams (compute, and communication behind an
//! event) against everything on one stream.
//!
//! Last, the host time to enqueue a step eagerly against replaying it as a captured graph.

use std::time::Instant;

use std::time::Duration;

use symheap::{Event, PoolConfig, ReduceOp, Result, Stream, SymPool, SymVec, emu};

#[path = "../symheap-heap/tests/support/rng.rs"]
mod rng;

const STEPS: usize = 5000;
const ROUNDS: usize = 3;

#[derive(Clone, Copy)]
struct Run {
    fragmentation: f64,
    reserved: u64,
    pending_max: usize,
    steps_per_s: f64,
}

fn worker(comm: &symheap::Comm, deferred: bool, sync_each_step: bool) -> Result<Run> {
    let config = PoolConfig::new(16 << 20)
        .max_capacity(1 << 30)
        .deferred_reuse(deferred);
    let pool = SymPool::new(comm, config)?;
    let mut rng = rng::Rng::new(5);
    let mut kv = SymVec::<f32>::zeroed(&pool, 1 << 14)?;
    let (mut fragmentation, mut pending_max) = (0.0, 0);
    let started = Instant::now();
    for step in 0..STEPS {
        let mut acts: Vec<SymVec<f32>> = (0..4)
            .map(|_| SymVec::zeroed(&pool, rng.log_uniform(1 << 10, 1 << 18) as usize))
            .collect::<Result<_>>()?;
        pool.all_reduce_in_place(&mut acts[0], ReduceOp::Sum)?;
        pool.all_reduce_in_place(&mut acts[2], ReduceOp::Sum)?;
        drop(acts);
        if step % 64 == 63 {
            let bigger = SymVec::<f32>::zeroed(&pool, kv.len() + (1 << 12))?;
            kv = bigger;
        }
        if sync_each_step {
            pool.synchronize()?;
        }
        let stats = pool.stats();
        fragmentation += stats.fragmentation;
        pending_max = pending_max.max(stats.pending_frees);
    }
    pool.synchronize()?;
    Ok(Run {
        fragmentation: fragmentation / STEPS as f64,
        reserved: pool.stats().reserved,
        pending_max,
        steps_per_s: STEPS as f64 / started.elapsed().as_secs_f64(),
    })
}

/// How long a step's compute takes.
const COMPUTE: Duration = Duration::from_micros(400);
const OVERLAP_STEPS: usize = 400;

/// Steps/s of the compute + AllReduce loop, on two streams or one.
fn overlap(comm: &symheap::Comm, two_streams: bool) -> Result<f64> {
    let pool = SymPool::new(comm, PoolConfig::new(16 << 20))?;
    let rt = comm.runtime();
    let compute = Stream::new(rt)?;
    let net = if two_streams {
        pool.on(&Stream::new(rt)?)
    } else {
        pool.on(&compute)
    };
    let mut bufs = [
        SymVec::<f32>::zeroed(&pool, 1 << 18)?,
        SymVec::<f32>::zeroed(&pool, 1 << 18)?,
    ];
    let computed = Event::new(rt)?;
    // Per buffer: its last reduction, which the compute that reuses it waits for.
    let reduced = [Event::new(rt)?, Event::new(rt)?];
    let started = Instant::now();
    for step in 0..OVERLAP_STEPS {
        let b = step % 2;
        compute.wait(&reduced[b])?;
        compute.launch_host_fn(|| std::thread::sleep(COMPUTE))?;
        computed.record(&compute)?;
        net.stream().wait(&computed)?;
        net.all_reduce_in_place(&mut bufs[b], ReduceOp::Sum)?;
        reduced[b].record(net.stream())?;
    }
    net.stream().synchronize()?;
    compute.synchronize()?;
    Ok(OVERLAP_STEPS as f64 / started.elapsed().as_secs_f64())
}

const GRAPH_STEPS: usize = 2000;

/// Host time per step, in microseconds, of a step enqueued eagerly (allocate a temporary,
/// copy into it, AllReduce it in the pair, copy the result out, free it) and of the same step
/// captured once and replayed; each measured over `GRAPH_STEPS` steps, then synchronized.
fn eager_vs_replayed(comm: &symheap::Comm) -> Result<(f64, f64)> {
    let pool = SymPool::new(comm, PoolConfig::new(16 << 20))?;
    let stream = Stream::new(comm.runtime())?;
    let on = pool.on(&stream);
    let input = SymVec::from_host(&pool, &[1.0f32; 4096])?;
    let mut out = SymVec::<f32>::zeroed(&pool, 4096)?;
    let step = |s: &SymPool, out: &mut SymVec<f32>| -> Result<()> {
        let mut tmp = SymVec::<f32>::zeroed(s, 4096)?;
        s.copy(&input, &mut tmp)?;
        s.all_reduce_in_place(&mut tmp, ReduceOp::Sum)?;
        s.copy(&tmp, out)
    };
    let started = Instant::now();
    for _ in 0..GRAPH_STEPS {
        step(&on, &mut out)?;
    }
    let eager = started.elapsed().as_secs_f64() * 1e6 / GRAPH_STEPS as f64;
    pool.synchronize()?;
    let graph = pool.capture(&stream, |s| step(s, &mut out))?;
    let started = Instant::now();
    for _ in 0..GRAPH_STEPS {
        graph.replay(&stream)?;
    }
    let replayed = started.elapsed().as_secs_f64() * 1e6 / GRAPH_STEPS as f64;
    stream.synchronize()?;
    Ok((eager, replayed))
}

fn main() -> Result<()> {
    let layouts = [
        ("stream-ordered, never synchronize", false, false),
        ("deferred, never synchronize", true, false),
        ("deferred, synchronize per step", true, true),
        ("stream-ordered, synchronize per step", false, true),
    ];
    println!("a decode-shaped worker, 2 ranks as threads, {STEPS} steps, {ROUNDS} rounds; rank 0");
    let runs = emu::launch(2, |comm| {
        let mut out = vec![Vec::new(); layouts.len()];
        for _ in 0..ROUNDS {
            for (i, &(_, deferred, sync)) in layouts.iter().enumerate() {
                out[i].push(worker(comm, deferred, sync)?);
            }
        }
        Ok(out)
    })?;
    println!(
        "{:<38} {:>14} {:>12} {:>13} {:>10}",
        "", "fragmentation", "reserved", "pending, max", "steps/s"
    );
    for ((name, ..), rounds) in layouts.iter().zip(&runs[0]) {
        let mut rates: Vec<f64> = rounds.iter().map(|r| r.steps_per_s).collect();
        rates.sort_by(f64::total_cmp);
        let r = rounds[0];
        println!(
            "{name:<38} {:>13.1}% {:>8.0} MiB {:>13} {:>10.0}",
            r.fragmentation * 100.0,
            r.reserved as f64 / (1 << 20) as f64,
            r.pending_max,
            rates[rates.len() / 2]
        );
    }
    let rates = emu::launch(2, |comm| {
        let mut out = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            out.0.push(overlap(comm, true)?);
            out.1.push(overlap(comm, false)?);
        }
        Ok(out)
    })?;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (two, one) = (median(rates[0].0.clone()), median(rates[0].1.clone()));
    println!(
        "\ncompute ({} us a step) and a 1 MiB AllReduce, {OVERLAP_STEPS} steps, rank 0:",
        COMPUTE.as_micros()
    );
    println!("  two streams (compute, communication): {two:>8.0} steps/s");
    println!("  one stream:                           {one:>8.0} steps/s");
    println!(
        "  overlap speed-up:                     {:>8.2}x",
        two / one
    );
    let host = emu::launch(2, |comm| {
        (0..ROUNDS)
            .map(|_| eager_vs_replayed(comm))
            .collect::<Result<Vec<_>>>()
    })?;
    let eager = median(host[0].iter().map(|h| h.0).collect());
    let replayed = median(host[0].iter().map(|h| h.1).collect());
    println!("\na step (temporary, two copies, an AllReduce), host time to enqueue it, rank 0:");
    println!("  eager:    {eager:>8.2} us a step");
    println!("  replayed: {replayed:>8.2} us a step (no pool call)");
    println!("  eager / replayed: {:>6.1}x", eager / replayed);
    Ok(())
}
