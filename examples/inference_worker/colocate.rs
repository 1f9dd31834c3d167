//! The RL colocate cycle, as verl runs vllm-ascend and a trainer on the same NPUs: the
//! inference worker decodes, goes to sleep (its weights offloaded to host memory, its KV cache
//! and activations discarded) so that a training phase can take the device memory it gave
//! back, and wakes to decode again where it stopped.
//!
//! Each rank's device is limited to what the worker uses awake (its pool and HCCL's buffers,
//! read from `aclrtGetMemInfo`, the most of any rank) plus one granule, so the training
//! phase's allocation fits only while the worker sleeps; after each wake the same allocation
//! is tried again and must fail with out-of-memory. The cycles alternate a shallow sleep
//! (the communicators kept) and a deep one (the world and its groups destroyed, so HCCL's own
//! buffers come back too; the worker wakes on a new world made from a root info taken before
//! the sleep, and splits and attaches new groups). After each wake the worker checks its
//! weights against the host copies, re-prefills its KV cache in one batched pass (checked
//! against the cache before the sleep) and goes on; every step's logits are checked against
//! the host reference, so the tokens are those of an uninterrupted run. The device memory in
//! use after each wake must equal that before the sleep: residual growth 0.
//!
//! What a shallow sleep keeps on the device is the communicators' own memory, HCCL's buffers
//! (`2 x hcclBufferSize + 1 MiB` each); a deep sleep gives that back too, and the new world
//! and its groups take it again on wake.

use std::time::{Duration, Instant};

use symheap::raw::Mapping;
use symheap::sys::ACL_ERROR_RT_MEMORY_ALLOCATION;
use symheap::{
    AllocDesc, Comm, Error, ParallelGroups, PoolConfig, ReduceOp, Result, Runtime, SleepPlan,
    SymPool, SymVec, emu,
};

use super::{BATCH, Decoder, Pooled, SIZES, STEPS, TP, Weights, argmax_tokens};

/// Sleep and wake cycles; odd ones (the 2nd, 4th) are deep.
pub const CYCLES: usize = 4;

/// What one cycle measured on one rank (device memory in bytes, on this rank's device).
pub struct Cycle {
    /// Whether the sleep released the communicators.
    pub deep: bool,
    /// In use while decoding, before the sleep.
    pub awake_used: u64,
    /// In use while asleep.
    pub asleep_used: u64,
    /// In use while the training phase held its memory.
    pub training_used: u64,
    /// In use after the wake (and, after a deep sleep, the new world and groups).
    pub woke_used: u64,
    /// What the sleep gave back: `awake_used - asleep_used`.
    pub freed: u64,
    /// What the training phase allocated (plain device memory, `aclrtMallocPhysical` +
    /// `aclrtMapMem`) and wrote.
    pub trained: u64,
    /// Bytes the sleep copied to host memory (the weights) and discarded.
    pub offloaded: u64,
    /// See `offloaded`.
    pub discarded: u64,
    /// Communicators the sleep destroyed (0 for a shallow one).
    pub communicators_released: usize,
    /// Wall time of the sleep (for a deep one, with dropping the unattached groups).
    pub sleep: Duration,
    /// Wall time of the wake (for a deep one, with making the new world and groups).
    pub wake: Duration,
    /// `woke_used - awake_used`.
    pub residual_growth: i64,
    /// The error of the training phase's allocation, tried again after the wake.
    pub awake_training_error: Option<String>,
    /// Whether that error was the device's out-of-memory
    /// (`ACL_ERROR_RT_MEMORY_ALLOCATION`).
    pub awake_training_out_of_memory: bool,
}

/// What the colocate phase measured on one rank.
pub struct ColocateReport {
    /// The device memory limit set on every rank's device.
    pub limit: u64,
    /// The cycles, in order.
    pub cycles: Vec<Cycle>,
    /// The tokens decoded across the cycles (replica's batch row 0).
    pub tokens: Vec<usize>,
    /// The tokens of the host reference (an uninterrupted run).
    pub reference_tokens: Vec<usize>,
}

/// Device memory in use on the current device.
fn used(rt: &Runtime) -> Result<u64> {
    let (free, total) = rt.mem_info()?;
    Ok(total - free)
}

/// The largest `value` of any rank (collective over the pool's world: also a barrier).
fn agree_max(pool: &SymPool, value: u64) -> Result<u64> {
    let mut v = SymVec::from_host_with(pool, &[value], AllocDesc::tagged("check"))?;
    pool.all_reduce_in_place(&mut v, ReduceOp::Max)?;
    Ok(v.to_host()?[0])
}

/// The worker's groups, and the pool with its collectives on them: made anew on each world.
fn groups_of(world: &Comm, pool: &SymPool) -> Result<(ParallelGroups, Pooled)> {
    let groups = ParallelGroups::new(world, SIZES)?;
    pool.attach(groups.tp())?;
    let backend = Pooled {
        tp: pool.on_group(groups.tp())?,
        pool: pool.clone(),
    };
    Ok((groups, backend))
}

/// The pool with its collectives on the worker's groups (there while it is awake).
fn backend(worker: &Option<(ParallelGroups, Pooled)>) -> &Pooled {
    &worker.as_ref().expect("the worker is awake").1
}

/// One rank's colocate phase on `comm` (the world; a deep sleep destroys it, so the caller
/// must not use it afterwards): decode, then `CYCLES` times sleep, train, wake and decode on,
/// to `STEPS` steps in all, each checked against `expected`.
///
/// Sets the emulator's device memory limit (process-wide) for the phase and restores the
/// default at its end.
///
/// # Panics
/// When a check fails: the training allocation fits awake, the residual memory grows, a
/// weight or the re-prefilled KV cache differs, or the tokens differ from the reference's.
pub fn run(comm: &Comm, expected: &[Vec<Vec<f32>>]) -> Result<ColocateReport> {
    let rt = comm.runtime().clone();
    let (rank, ranks, device) = (comm.rank(), comm.rank_count(), comm.device());
    let config = comm.config().clone();
    let mut world = comm.clone();
    let pool = SymPool::new(&world, PoolConfig::new(64 << 20))?;
    let mut worker = Some(groups_of(&world, &pool)?);
    // This rank's weights, resident and tagged for offload (the emulated matmuls read the
    // host copies; after each wake the device copies are checked against them).
    let w = Weights::new();
    let (r, t) = (rank as usize, rank as usize % TP);
    let host_weights = [&w.w1[t], &w.w2[t], &w.wv[t], &w.experts[r], &w.embed];
    let resident = host_weights
        .iter()
        .map(|v| SymVec::from_host_with(&pool, v, AllocDesc::tagged("weights")))
        .collect::<Result<Vec<_>>>()?;
    let mut decoder = Decoder::new(backend(&worker), r)?;

    // The device holds the worker and one granule more: what the training phase wants fits
    // only while the worker sleeps.
    let granule = rt.granularity(device)?;
    let limit = agree_max(&pool, used(&rt)?)? + granule;
    emu::testing::set_device_memory_limit(limit);

    let segment = STEPS / (CYCLES + 1);
    let mut cycles = Vec::with_capacity(CYCLES);
    for c in 0..CYCLES {
        decoder.run(backend(&worker), expected, segment)?;
        let deep = c % 2 == 1;
        let awake_used = used(&rt)?;
        let kv_before = decoder.kv_contents(backend(&worker))?;

        // Sleep: the weights to host memory, the KV cache and activations discarded.
        let mut plan = SleepPlan::new().offload("weights");
        let root = match deep {
            true => Some(world.fresh_root_info()?),
            false => None,
        };
        let start = Instant::now();
        if deep {
            plan = plan.release_communicators();
            // Every sub-communicator of the world that the pool does not hold goes first.
            worker = None;
        }
        let slept = pool.sleep(&plan)?;
        let sleep = start.elapsed();
        let asleep_used = used(&rt)?;
        let freed = awake_used.saturating_sub(asleep_used);

        // Training: plain device memory, as much as the sleep freed (whole granules), written.
        let trained = freed / granule * granule;
        let training = Mapping::allocate(&rt, trained, device)?;
        // SAFETY: the mapping's `trained` bytes are this phase's own, and no queued work uses
        // them (`memset` returns when done).
        unsafe { rt.raw().memset(training.ptr(), 0x5a, trained as usize)? };
        let training_used = used(&rt)?;
        drop(training);

        // Wake, on a new world after a deep sleep.
        let start = Instant::now();
        match root {
            Some(root) => {
                world = Comm::init(&rt, ranks, &root, rank, &config)?;
                pool.wake_on(&world)?;
                worker = Some(groups_of(&world, &pool)?);
            }
            None => {
                pool.wake()?;
            }
        }
        let wake = start.elapsed();
        for (v, host) in resident.iter().zip(host_weights) {
            assert!(
                &v.to_host()? == host,
                "rank {rank}: a weight came back changed"
            );
        }
        // The KV cache came back unspecified: prefill it again.
        decoder.prefill(backend(&worker))?;
        assert!(
            decoder.kv_contents(backend(&worker))? == kv_before,
            "rank {rank}: the re-prefilled KV cache differs from the one before the sleep"
        );
        let woke_used = used(&rt)?;
        let residual_growth = woke_used as i64 - awake_used as i64;
        assert_eq!(
            residual_growth, 0,
            "rank {rank}: cycle {c} left memory behind"
        );

        // The training phase's allocation, tried again now that the worker is awake.
        let awake_training_error = Mapping::allocate(&rt, trained, device).err();
        let awake_training_out_of_memory = matches!(
            awake_training_error,
            Some(Error::Acl {
                code: ACL_ERROR_RT_MEMORY_ALLOCATION,
                ..
            })
        );
        assert!(
            awake_training_out_of_memory,
            "rank {rank}: the training allocation, awake: {awake_training_error:?}"
        );
        cycles.push(Cycle {
            deep,
            awake_used,
            asleep_used,
            training_used,
            woke_used,
            freed,
            trained,
            offloaded: slept.offloaded_bytes,
            discarded: slept.discarded_bytes,
            communicators_released: slept.communicators_released,
            sleep,
            wake,
            residual_growth,
            awake_training_error: awake_training_error.map(|e| e.to_string()),
            awake_training_out_of_memory,
        });
    }
    decoder.run(backend(&worker), expected, STEPS)?;
    let d = r / TP;
    let reference_tokens: Vec<usize> = (expected.iter())
        .map(|step| argmax_tokens(&step[d])[0])
        .collect();
    assert_eq!(
        decoder.history, reference_tokens,
        "rank {rank}: the colocated worker decoded other tokens than an uninterrupted run"
    );
    assert_eq!(decoder.step(), STEPS);
    // Every rank is done with its checks before the limit goes.
    agree_max(&pool, 0)?;
    emu::testing::set_device_memory_limit(0);
    Ok(ColocateReport {
        limit,
        cycles,
        tokens: decoder.history,
        reference_tokens,
    })
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

/// Prints rank 0's report.
pub fn print(report: &ColocateReport) {
    println!(
        "RL colocate ({CYCLES} cycles of decode, sleep, train, wake; {STEPS} decode steps in \
         all, batch {BATCH}), rank 0's device, limited to {} ({} bytes: the worker awake + one \
         granule):",
        mib(report.limit),
        report.limit
    );
    println!(
        "  cycle  sleep    used awake  used asleep  freed (bytes)  training took     used \
         training     sleep     wake  used after wake  residual growth"
    );
    for (i, c) in report.cycles.iter().enumerate() {
        println!(
            "  {:<5}  {:<7}  {:>10}  {:>11}  {:>13}  {:>9} ({:>3.0}%)  {:>13}  {:>6.1} ms  {:>5.1} ms  {:>15}  {:>13} B",
            i + 1,
            if c.deep { "deep" } else { "shallow" },
            mib(c.awake_used),
            mib(c.asleep_used),
            c.freed,
            mib(c.trained),
            100.0 * c.trained as f64 / c.freed as f64,
            mib(c.training_used),
            c.sleep.as_secs_f64() * 1e3,
            c.wake.as_secs_f64() * 1e3,
            mib(c.woke_used),
            c.residual_growth,
        );
    }
    let c = &report.cycles[0];
    println!(
        "  each sleep offloaded {} bytes of weights and discarded {} bytes (KV cache, \
         activations); a deep one also destroyed {} communicators (world, TP pair)",
        c.offloaded,
        c.discarded,
        report
            .cycles
            .iter()
            .map(|c| c.communicators_released)
            .max()
            .unwrap_or(0)
    );
    if let Some(e) = &c.awake_training_error {
        println!("  the training allocation, tried again awake after each wake: {e}");
    }
    println!(
        "  after each wake: the weights equal their host copies, the re-prefilled KV cache \
         equals the one before the sleep, and every step's logits equal the host reference's, \
         so the {} tokens equal an uninterrupted run's",
        report.tokens.len()
    );
}
