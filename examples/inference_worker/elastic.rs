//! The main job's last part: the inference worker as an expert-parallel job that loses a
//! rank in the middle of decoding and goes on without it.
//!
//! [`RANKS`] rank processes under the elastic launcher ([`Job::elastic`]), laid out as
//! EP = 4 over the world with TP = 1: every rank is a data-parallel replica decoding its own
//! `BATCH` sequences (replica = its launch rank) with the dense layers whole, and hosts the
//! experts `e` with `e % world size == rank` of [`EXPERTS`]. Each step's rows go to their
//! experts' ranks with an AlltoAllV over the world and come back with another; the KV cache
//! is appended on the device (a copy queued on the pool's stream, as an attention kernel
//! writes it). Besides, each rank holds a resident weights tensor ([`RESIDENT_MIB`], 256 MiB
//! by default) loaded from host memory: the stand-in for the rest of a real model's weights.
//!
//! One rank, chosen at random, SIGKILLs itself at a random decode step. The survivors' step
//! fails; each reads the launcher's record of the loss and forms the survivors' world
//! ([`Survivors::shrink`]), moves its pool to it ([`SymPool::shrink`]: every tensor stays
//! where it was) and re-shards: expert `e` is now hosted by rank `e % 3`. A survivor keeps
//! the experts it hosted and still hosts (copied on the device into its new expert table),
//! loads the others from the host reference, and frees its old table with the experts it no
//! longer hosts. The table is stacked, the same shape on every rank (as many slots as the
//! busiest rank needs), so that every rank makes the same pool calls and the heaps stay
//! symmetric: one tensor per expert would not (8 experts over 3 ranks are 3, 3 and 2). The
//! KV cache, which the cut-short step was writing, is unspecified after the shrink
//! ([`SymVec::is_unspecified`]): it is re-prefilled from the sequences' tokens so far. The
//! survivors check that they all failed at the same step, and redo it. The lost rank's
//! sequences are dropped (a server would re-queue those requests); the survivors' go on to
//! the end, every step's logits checked against the host reference, which is per sequence
//! and so unchanged by the re-shard.
//!
//! Each rank prints microsecond wall stamps (comparable across this machine's processes), as
//! `benches/recovery.rs` does; the parent takes the latest of each over the ranks.
//! *Recovery* runs from the kill to the last survivor's first good step after it, in phases:
//! noticed (a step failed), world formed, pool shrunk, re-sharded (experts and KV cache),
//! and the step redone. *Restart* is the same job started afresh in the same run: a job of
//! the survivors' size, not elastic, from its launch to its last rank's first good step
//! (process start, communicator, pool, loading every weight, re-prefilling the surviving
//! sequences' KV caches, the step).

use std::time::{SystemTime, UNIX_EPOCH};

use symheap::{
    AllocDesc, Comm, CommConfig, Error, PoolConfig, Result, Runtime, Survivors, SymPool, SymVec,
    packed_displacements,
};
use symheap_tools::launcher::Job;

use super::{BATCH, HIDDEN, KV_CHUNK, STEPS, Weights};
use super::{apply_expert, argmax_tokens, expert_weights, first_tokens, reference_step};

/// Ranks of the job before the loss.
pub const RANKS: u32 = 4;
/// Experts; expert `e` is hosted by the rank `e % world size`.
pub const EXPERTS: usize = 8;
/// The resident weights per rank, in MiB (environment variable; default
/// [`DEFAULT_RESIDENT_MIB`]).
pub const RESIDENT_MIB: &str = "INFERENCE_WORKER_RESIDENT_MIB";
/// The resident weights per rank without [`RESIDENT_MIB`].
pub const DEFAULT_RESIDENT_MIB: u64 = 256;
/// The seed of the victim and its step (environment variable; default: the time).
pub const SEED: &str = "INFERENCE_WORKER_ELASTIC_SEED";

/// Which job a rank is in ([`Role`]): set by the parent on every rank it starts.
const ROLE: &str = "INFERENCE_WORKER_ELASTIC_ROLE";
/// The launch rank that dies.
const VICTIM: &str = "INFERENCE_WORKER_ELASTIC_VICTIM";
/// The step at whose start it dies, which the restarted job resumes at.
const KILL_STEP: &str = "INFERENCE_WORKER_ELASTIC_KILL_STEP";
/// The prefix of the variables that pass the restarted job each replica's tokens so far.
const TOKENS: &str = "INFERENCE_WORKER_ELASTIC_TOKENS_";

/// Elements of one step's rows: `BATCH` rows of `HIDDEN`.
const ROWS: usize = BATCH * HIDDEN;
/// Elements of one expert's weights.
const EXPERT_LEN: usize = HIDDEN * HIDDEN;

/// Microseconds since the epoch: comparable across this machine's processes.
fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// Prints `WORD <us>`: a stamp the parent reads from the captured output.
fn stamp(word: &str) {
    println!("{word} {}", now_us());
}

/// The expert that row `b` of replica `replica` goes to at `step`: a fixed routing that sends
/// the rows everywhere over the steps, as [`super::expert_of`] does.
fn expert_of(replica: usize, b: usize, step: usize) -> usize {
    (replica * BATCH + b + step) % EXPERTS
}

/// The rank that hosts expert `e` in a world of `ranks`.
fn host_of(e: usize, ranks: usize) -> usize {
    e % ranks
}

/// Slots of every rank's expert table in a world of `ranks`: what the busiest rank hosts.
fn slots(ranks: usize) -> usize {
    EXPERTS.div_ceil(ranks)
}

/// The expert in slot `slot` of rank `rank`'s table in a world of `ranks`, if any.
fn expert_in_slot(rank: usize, ranks: usize, slot: usize) -> Option<usize> {
    let e = rank + slot * ranks;
    (e < EXPERTS).then_some(e)
}

/// The host reference of one replica: its sequences decoded alone, per sequence, so the same
/// whichever ranks host the experts.
struct Reference {
    replica: usize,
    /// Every step's input tokens, from step 0.
    inputs: Vec<[usize; BATCH]>,
    /// The logits of the steps from `first` on.
    logits: Vec<Vec<f32>>,
    first: usize,
}

impl Reference {
    /// `replica` decoded on the host for `steps` steps from its first tokens.
    fn decoded(w: &Weights, replica: usize, steps: usize) -> Reference {
        let experts = all_experts();
        let mut reference = Reference {
            replica,
            inputs: vec![first_tokens(replica)],
            logits: Vec::with_capacity(steps),
            first: 0,
        };
        for step in 0..steps {
            let logits = reference.step(w, &experts, step);
            if step + 1 < steps {
                reference.inputs.push(argmax_tokens(&logits));
            }
            reference.logits.push(logits);
        }
        reference
    }

    /// `replica` resumed at the last step of `inputs` (its tokens so far, as a server keeps
    /// them with the requests): that step's logits, computed on the host.
    fn resumed(w: &Weights, replica: usize, inputs: Vec<[usize; BATCH]>) -> Reference {
        let first = inputs.len() - 1;
        let mut reference = Reference {
            replica,
            inputs,
            logits: Vec::new(),
            first,
        };
        reference
            .logits
            .push(reference.step(w, &all_experts(), first));
        reference
    }

    /// Step `step` of the whole model on the host (`experts`: every expert's weights), from
    /// that step's input tokens.
    fn step(&self, w: &Weights, experts: &[Vec<f32>], step: usize) -> Vec<f32> {
        let moe = |d, b, step, row: &[f32], out: &mut [f32]| {
            apply_expert(&experts[expert_of(d, b, step)], row, out);
        };
        reference_step(w, self.replica, step, &self.inputs[step], moe)
    }

    /// The logits at `step`.
    fn logits(&self, step: usize) -> &[f32] {
        &self.logits[step - self.first]
    }

    /// The input tokens at `step`.
    fn inputs(&self, step: usize) -> [usize; BATCH] {
        self.inputs[step]
    }
}

/// Every expert's weights, on the host.
fn all_experts() -> Vec<Vec<f32>> {
    (0..EXPERTS).map(expert_weights).collect()
}

/// One rank's worker: its weights, KV cache and sequences, on a pool of the current world.
struct Worker {
    w: Weights,
    pool: SymPool,
    /// The current world (kept alive for the pool).
    world: Comm,
    /// The replica each rank of the world decodes (its launch rank), in rank order.
    replicas: Vec<usize>,
    /// The resident weights: kept across a loss, loaded afresh by a restart.
    resident: SymVec<u8>,
    /// This rank's experts, stacked: slot `i` holds [`expert_in_slot`]`(rank, ranks, i)`,
    /// zeros where there is none.
    experts: SymVec<f32>,
    /// The KV cache: `ROWS` elements a step, in chunks of `KV_CHUNK` steps.
    kv: SymVec<f32>,
    /// Every step's input tokens so far (what a prefill recomputes the KV cache from).
    inputs: Vec<[usize; BATCH]>,
    /// The next step's input tokens.
    tokens: [usize; BATCH],
}

/// What a survivor did after the loss.
struct Reshard {
    /// The experts it hosts now, and of those the ones it kept (moved on the device) and the
    /// ones it loaded from the host.
    hosted: Vec<usize>,
    kept: Vec<usize>,
    loaded: Vec<usize>,
    /// The experts it no longer hosts (freed with its old table).
    dropped: Vec<usize>,
    /// Whether the KV cache was unspecified after the shrink, and so re-prefilled.
    kv_reprefilled: bool,
}

impl Worker {
    /// A worker on `world` whose ranks decode `replicas`, from step `start` of the reference
    /// (its sequences' tokens so far, as a server keeps them with the requests): loads the
    /// resident weights (`resident_bytes`) and its experts from host memory, and prefills
    /// the KV cache.
    fn new(
        world: Comm,
        replicas: Vec<usize>,
        start: usize,
        resident_bytes: usize,
        reference: &Reference,
    ) -> Result<Worker> {
        let (rank, ranks) = (world.rank() as usize, world.rank_count() as usize);
        let replica = replicas[rank];
        let pool = SymPool::new(&world, PoolConfig::new(resident_bytes as u64 + (16 << 20)))?;
        let resident = SymVec::from_host_with(
            &pool,
            &vec![resident_byte(replica); resident_bytes],
            AllocDesc::tagged("weights"),
        )?;
        let mut table = vec![0.0; slots(ranks) * EXPERT_LEN];
        for (slot, weights) in table.chunks_mut(EXPERT_LEN).enumerate() {
            if let Some(e) = expert_in_slot(rank, ranks, slot) {
                weights.copy_from_slice(&expert_weights(e));
            }
        }
        let experts = SymVec::from_host_with(&pool, &table, AllocDesc::tagged("experts"))?;
        let kv = SymVec::zeroed_with(
            &pool,
            (start + KV_CHUNK) * ROWS,
            AllocDesc::tagged("kv-cache"),
        )?;
        let mut worker = Worker {
            w: Weights::new(),
            pool,
            world,
            replicas,
            resident,
            experts,
            kv,
            inputs: (0..start).map(|s| reference.inputs(s)).collect(),
            tokens: reference.inputs(start),
        };
        if start > 0 {
            worker.prefill()?;
        }
        Ok(worker)
    }

    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn ranks(&self) -> usize {
        self.world.rank_count() as usize
    }

    fn replica(&self) -> usize {
        self.replicas[self.rank()]
    }

    /// The next step: the number of steps done.
    fn next_step(&self) -> usize {
        self.inputs.len()
    }

    /// The next decode step, checked against the host reference: the dense block, the KV
    /// cache appended on the device, the rows to their experts' ranks and back (AlltoAllV
    /// over the world, both ways), the vocabulary projection. The worker's tokens advance
    /// only when the step succeeded; after a failure, the same step comes next.
    ///
    /// # Panics
    /// If the logits differ from the host reference's.
    fn step(&mut self, reference: &Reference) -> Result<()> {
        let (rank, ranks, replica) = (self.rank(), self.ranks(), self.replica());
        let step = self.next_step();
        let y = self.w.dense(&self.w.embedding(&self.tokens));
        // The KV cache: this step's rows appended on the device, growing by a chunk when full.
        self.grow_kv(step + 1)?;
        let rows = SymVec::from_host_with(&self.pool, &y, AllocDesc::tagged("activations"))?;
        self.pool.copy(
            &rows,
            &mut self.kv.slice_mut(step * ROWS..(step + 1) * ROWS)?,
        )?;
        // Dispatch: this rank's rows to their experts' ranks, grouped by rank in row order.
        let dest = |b: usize| host_of(expert_of(replica, b, step), ranks);
        let mut order: Vec<usize> = (0..BATCH).collect();
        order.sort_by_key(|&b| dest(b));
        let send: Vec<usize> = (0..ranks)
            .map(|p| order.iter().filter(|&&b| dest(b) == p).count() * HIDDEN)
            .collect();
        // The rows that come here, from each rank in its row order: each one's expert.
        let arriving: Vec<Vec<usize>> = (self.replicas.iter())
            .map(|&source| {
                (0..BATCH)
                    .map(|b| expert_of(source, b, step))
                    .filter(|&e| host_of(e, ranks) == rank)
                    .collect()
            })
            .collect();
        let recv: Vec<usize> = arriving.iter().map(|e| e.len() * HIDDEN).collect();
        let (sd, rd) = (packed_displacements(&send), packed_displacements(&recv));
        let dispatched: Vec<f32> = (order.iter())
            .flat_map(|&b| y[b * HIDDEN..][..HIDDEN].iter().copied())
            .collect();
        let dispatch = SymVec::from_host_with(&self.pool, &dispatched, AllocDesc::tagged("moe"))?;
        // Static shapes: room for every row of the world, so that every rank allocates alike.
        let capacity = ranks * ROWS;
        let mut received =
            SymVec::<f32>::zeroed_with(&self.pool, capacity, AllocDesc::tagged("moe"))?;
        self.pool
            .all_to_all_v(&dispatch, &send, &sd, &mut received, &recv, &rd)?;
        // This rank's experts on what came, read from the device table.
        let n: usize = recv.iter().sum();
        let got = received.slice(..n)?.to_host()?;
        let table = self.experts.to_host()?;
        let mut results = vec![0.0; capacity];
        for (i, &e) in arriving.iter().flatten().enumerate() {
            let slot = e / ranks;
            apply_expert(
                &table[slot * EXPERT_LEN..][..EXPERT_LEN],
                &got[i * HIDDEN..][..HIDDEN],
                &mut results[i * HIDDEN..][..HIDDEN],
            );
        }
        let expert_out = SymVec::from_host_with(&self.pool, &results, AllocDesc::tagged("moe"))?;
        let mut combined = SymVec::<f32>::zeroed_with(&self.pool, ROWS, AllocDesc::tagged("moe"))?;
        self.pool
            .all_to_all_v(&expert_out, &recv, &rd, &mut combined, &send, &sd)?;
        // Back in row order; the vocabulary projection, checked.
        let back = combined.to_host()?;
        let mut z = vec![0.0; ROWS];
        for (i, &b) in order.iter().enumerate() {
            z[b * HIDDEN..][..HIDDEN].copy_from_slice(&back[i * HIDDEN..][..HIDDEN]);
        }
        let logits = self.w.logits(&z);
        assert!(
            logits == reference.logits(step),
            "replica {replica} (rank {rank} of {ranks}): step {step}'s logits differ from the \
             host reference"
        );
        drop((rows, dispatch, received, expert_out, combined));
        self.pool.synchronize()?;
        self.inputs.push(self.tokens);
        self.tokens = argmax_tokens(&logits);
        Ok(())
    }

    /// Makes room in the KV cache for `steps` steps: a bigger cache, the rows so far copied
    /// on the device.
    fn grow_kv(&mut self, steps: usize) -> Result<()> {
        if steps * ROWS <= self.kv.len() {
            return Ok(());
        }
        let mut bigger = SymVec::zeroed_with(
            &self.pool,
            (steps + KV_CHUNK) * ROWS,
            AllocDesc::tagged("kv-cache"),
        )?;
        let written = self.next_step() * ROWS;
        if written > 0 {
            self.pool.copy(
                &self.kv.slice(..written)?,
                &mut bigger.slice_mut(..written)?,
            )?;
        }
        self.kv = bigger;
        Ok(())
    }

    /// The KV cache the steps so far wrote, recomputed on the host in one batched pass.
    fn kv_of_inputs(&self) -> Vec<f32> {
        let tokens: Vec<usize> = self.inputs.iter().flatten().copied().collect();
        self.w.dense(&self.w.embedding(&tokens))
    }

    /// Recomputes the KV cache from the steps' input tokens so far and writes all of it (the
    /// rest zeroed), as a worker re-prefills its sequences.
    fn prefill(&mut self) -> Result<()> {
        let mut cache = self.kv_of_inputs();
        cache.resize(self.kv.len(), 0.0);
        self.kv.copy_from_host(&cache)
    }

    /// After the pool moved to `world` (the survivors', whose ranks decode `replicas`):
    /// checks that every survivor is at the same step (the one that failed, to redo),
    /// re-shards the experts (a new table: the experts kept copied on the device, the others
    /// loaded from the host; the old table freed) and re-prefills the KV cache if the loss
    /// left it unspecified.
    fn reshard(&mut self, world: Comm, replicas: Vec<usize>) -> Result<Reshard> {
        let (old_rank, old_ranks) = (self.rank(), self.ranks());
        self.world = world;
        self.replicas = replicas;
        let (rank, ranks) = (self.rank(), self.ranks());
        // The step to redo: the same on every survivor, or the sequences would diverge.
        let step = self.next_step() as u64;
        let mine = SymVec::from_host_with(&self.pool, &[step], AllocDesc::tagged("check"))?;
        let mut steps = SymVec::<u64>::zeroed_with(&self.pool, ranks, AllocDesc::tagged("check"))?;
        self.pool.all_gather(&mine, &mut steps)?;
        let steps = steps.to_host()?;
        if steps.iter().any(|&s| s != step) {
            return Err(Error::InvalidArgument(format!(
                "the survivors are at different steps {steps:?}: some finished a step that \
                 others did not"
            )));
        }
        // Were the old table unspecified (work the loss cut short used it), nothing in it
        // could be kept: every expert would come from the host.
        let old_table_specified = !self.experts.is_unspecified();
        let mut table = vec![0.0; slots(ranks) * EXPERT_LEN];
        let (mut hosted, mut kept, mut loaded) = (Vec::new(), Vec::new(), Vec::new());
        for (slot, weights) in table.chunks_mut(EXPERT_LEN).enumerate() {
            let Some(e) = expert_in_slot(rank, ranks, slot) else {
                continue;
            };
            hosted.push(e);
            if old_table_specified && host_of(e, old_ranks) == old_rank {
                kept.push((e, slot));
            } else {
                weights.copy_from_slice(&expert_weights(e));
                loaded.push(e);
            }
        }
        let mut experts = SymVec::from_host_with(&self.pool, &table, AllocDesc::tagged("experts"))?;
        for &(e, slot) in &kept {
            let old_slot = e / old_ranks;
            self.pool.copy(
                &self
                    .experts
                    .slice(old_slot * EXPERT_LEN..(old_slot + 1) * EXPERT_LEN)?,
                &mut experts.slice_mut(slot * EXPERT_LEN..(slot + 1) * EXPERT_LEN)?,
            )?;
        }
        let dropped = (0..slots(old_ranks))
            .filter_map(|slot| expert_in_slot(old_rank, old_ranks, slot))
            .filter(|e| !hosted.contains(e))
            .collect();
        // The old table goes, with the experts this rank no longer hosts (after the copies,
        // in stream order).
        self.experts = experts;
        let kv_reprefilled = self.kv.is_unspecified();
        if kv_reprefilled {
            self.prefill()?;
        }
        self.pool.synchronize()?;
        Ok(Reshard {
            hosted,
            kept: kept.into_iter().map(|(e, _)| e).collect(),
            loaded,
            dropped,
            kv_reprefilled,
        })
    }

    /// At the end: the KV cache holds what every step appended (recomputed on the host), and
    /// the resident weights are what was loaded.
    fn check_end(&self) -> Result<()> {
        let written = self.inputs.len() * ROWS;
        let kv = self.kv.slice(..written)?.to_host()?;
        assert!(
            kv == self.kv_of_inputs(),
            "replica {}: the KV cache differs from its recomputation",
            self.replica()
        );
        let head = self.resident.slice(..self.resident.len().min(1 << 16))?;
        let byte = resident_byte(self.replica());
        assert!(
            head.to_host()?.iter().all(|&v| v == byte),
            "replica {}: the resident weights changed",
            self.replica()
        );
        Ok(())
    }
}

/// The byte replica `replica`'s resident weights are filled with.
fn resident_byte(replica: usize) -> u8 {
    replica as u8 + 1
}

/// Which job a rank is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// The elastic job of [`RANKS`] that loses the victim at the kill step.
    Loses,
    /// The fresh job of the survivors' size, resuming their sequences at the kill step.
    Restarts,
}

/// What the parent passed down.
struct Orders {
    role: Role,
    victim: usize,
    kill_step: usize,
    resident_bytes: usize,
}

impl Orders {
    fn from_env() -> Result<Orders> {
        let var = |name: &str| {
            std::env::var(name)
                .map_err(|_| Error::InvalidArgument(format!("{name} is not set by the parent")))
        };
        let number = |name: &str| -> Result<usize> {
            var(name)?
                .parse()
                .map_err(|_| Error::InvalidArgument(format!("{name} is not a number")))
        };
        let role = match var(ROLE)?.as_str() {
            "loses" => Role::Loses,
            "restarts" => Role::Restarts,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "{ROLE}={other}: neither loses nor restarts"
                )));
            }
        };
        Ok(Orders {
            role,
            victim: number(VICTIM)?,
            kill_step: number(KILL_STEP)?,
            resident_bytes: number(RESIDENT_MIB)? << 20,
        })
    }
}

/// Whether this process is a rank of the elastic part's jobs (the parent started it so).
pub fn in_an_elastic_rank() -> bool {
    std::env::var_os(ROLE).is_some()
}

/// One rank of the elastic part's jobs, as the parent ([`run`]) ordered it.
///
/// # Panics
/// When a check fails: a step's logits, the KV cache or the resident weights.
pub fn rank_main() -> Result<()> {
    let orders = Orders::from_env()?;
    let rt = Runtime::emulated()?;
    let config = CommConfig::new().exec_timeout_secs(60);
    let comm = Comm::from_env(&rt, config.clone())?;
    match orders.role {
        Role::Loses => lose_a_rank(&rt, &config, comm, &orders),
        Role::Restarts => restart(comm, &orders),
    }
}

/// A rank of the elastic job: decodes every step; the victim dies at the kill step, the
/// survivors shrink, re-shard and decode on.
fn lose_a_rank(rt: &Runtime, config: &CommConfig, comm: Comm, orders: &Orders) -> Result<()> {
    let me = comm.rank() as usize;
    let mut survivors = Survivors::from_env()?.ok_or_else(|| {
        Error::InvalidArgument("the elastic part needs an elastic launcher".into())
    })?;
    let reference = &Reference::decoded(&Weights::new(), me, STEPS);
    let replicas = (0..RANKS as usize).collect();
    let mut worker = Worker::new(comm, replicas, 0, orders.resident_bytes, reference)?;
    let mut recovered = false;
    let mut recovering = false;
    while worker.next_step() < STEPS {
        let step = worker.next_step();
        if me == orders.victim && step == orders.kill_step {
            stamp("KILL");
            // SAFETY: raise only sends a signal to this process.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        match worker.step(reference) {
            Ok(()) => {
                if recovering {
                    stamp("RECOVERED");
                    recovering = false;
                }
            }
            // One loss is what the job expects; a second failure ends it.
            Err(error) if !recovered => {
                stamp("FAILED");
                println!("NOTICED step {step}: {error}");
                let world = survivors.shrink(rt, config)?;
                stamp("WORLD");
                worker.pool.shrink(&world)?;
                stamp("SHRUNK");
                let replicas = survivors.launch_ranks().iter().map(|&r| r as usize);
                let done = worker.reshard(world, replicas.collect())?;
                stamp("RESHARDED");
                println!(
                    "RESHARD launch rank {me}, now rank {} of {}: experts {:?} (kept {:?} on \
                     the device, loaded {:?} from the host, freed {:?}); KV cache {}",
                    worker.rank(),
                    worker.ranks(),
                    done.hosted,
                    done.kept,
                    done.loaded,
                    done.dropped,
                    match done.kv_reprefilled {
                        true =>
                            format!("unspecified after the shrink: re-prefilled ({step} steps)"),
                        false => "specified after the shrink: kept".to_string(),
                    }
                );
                recovered = true;
                recovering = true;
            }
            Err(error) => return Err(error),
        }
    }
    worker.check_end()?;
    println!(
        "DONE launch rank {me}: {STEPS} steps of its {BATCH} sequences equal the host \
         reference's; {}",
        match recovered {
            true => "survived the loss",
            false => "no loss seen",
        }
    );
    Ok(())
}

/// A rank of the fresh job of the survivors' size: loads everything, re-prefills its
/// sequences from their tokens so far (which the parent passes, as a server keeps them with
/// the requests) and runs the kill step, checked.
fn restart(comm: Comm, orders: &Orders) -> Result<()> {
    let replicas: Vec<usize> = (0..RANKS as usize)
        .filter(|&r| r != orders.victim)
        .collect();
    let replica = replicas[comm.rank() as usize];
    let inputs = tokens_from_env(replica)?;
    if inputs.len() != orders.kill_step + 1 {
        return Err(Error::InvalidArgument(format!(
            "{}{replica}: {} steps of tokens, not {}",
            TOKENS,
            inputs.len(),
            orders.kill_step + 1
        )));
    }
    let reference = &Reference::resumed(&Weights::new(), replica, inputs);
    let resumed = orders.kill_step;
    let mut worker = Worker::new(comm, replicas, resumed, orders.resident_bytes, reference)?;
    worker.step(reference)?;
    stamp("FIRST");
    worker.check_end()
}

/// Replica `replica`'s input tokens of every step so far, `BATCH` a step: as the parent
/// passed them in [`TOKENS`]`{replica}`.
fn tokens_from_env(replica: usize) -> Result<Vec<[usize; BATCH]>> {
    let name = format!("{TOKENS}{replica}");
    let text = std::env::var(&name)
        .map_err(|_| Error::InvalidArgument(format!("{name} is not set by the parent")))?;
    let tokens = (text.split_whitespace())
        .map(|t| t.parse::<usize>())
        .collect::<std::result::Result<Vec<usize>, _>>()
        .map_err(|_| Error::InvalidArgument(format!("{name}: not a list of tokens")))?;
    if tokens.is_empty() || tokens.len() % BATCH != 0 {
        return Err(Error::InvalidArgument(format!(
            "{name}: {} tokens, not whole steps of {BATCH}",
            tokens.len()
        )));
    }
    Ok(tokens
        .chunks(BATCH)
        .map(|step| std::array::from_fn(|b| step[b]))
        .collect())
}

/// How the parent runs the part.
pub struct Settings {
    /// The seed of the victim and its step.
    pub seed: u64,
    /// The resident weights per rank, in MiB.
    pub resident_mib: u64,
}

impl Settings {
    /// From [`SEED`] (default: the time) and [`RESIDENT_MIB`] (default
    /// [`DEFAULT_RESIDENT_MIB`]).
    pub fn from_env() -> Settings {
        let number = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse().ok());
        Settings {
            seed: number(SEED).unwrap_or_else(|| now_us() as u64),
            resident_mib: number(RESIDENT_MIB).unwrap_or(DEFAULT_RESIDENT_MIB),
        }
    }
}

/// What the part measured.
pub struct ElasticReport {
    /// The seed the victim and its step came from.
    pub seed: u64,
    /// The launch rank that was killed.
    pub victim: u32,
    /// The step at which it died.
    pub kill_step: usize,
    /// The resident weights per rank, in MiB.
    pub resident_mib: u64,
    /// What a survivor saw fail (the first survivor's `NOTICED` line).
    pub noticed: String,
    /// Each survivor's re-shard, in launch rank order.
    pub reshards: Vec<String>,
    /// From the kill to the last survivor's first good step after it, ms.
    pub recovery_ms: f64,
    /// Its phases, ms: noticed, world formed, pool shrunk, re-sharded, step redone.
    pub phases_ms: [f64; 5],
    /// A fresh job of the survivors' size, from its launch to its last rank's first good
    /// step, ms.
    pub restart_ms: f64,
}

/// The `WORD <us>` stamps of a job's output (`[rank R] WORD <us>` lines), by rank.
fn stamps(output: &str, word: &str) -> Vec<(u32, u128)> {
    output
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("[rank ")?;
            let (rank, text) = rest.split_once("] ")?;
            let value = text.strip_prefix(word)?.strip_prefix(' ')?;
            Some((
                rank.parse().ok()?,
                value.split_whitespace().next()?.parse().ok()?,
            ))
        })
        .collect()
}

/// The lines of a job's output that start with `word`, without their rank prefix, in
/// launch rank order.
fn lines_of(output: &str, word: &str) -> Vec<String> {
    let mut lines: Vec<(u32, String)> = output
        .lines()
        .filter_map(|line| {
            let (rank, text) = line.strip_prefix("[rank ")?.split_once("] ")?;
            let text = text.strip_prefix(word)?.strip_prefix(' ')?;
            Some((rank.parse().ok()?, text.to_string()))
        })
        .collect();
    lines.sort_by_key(|(rank, _)| *rank);
    lines.into_iter().map(|(_, text)| text).collect()
}

/// A 64-bit mix of `x` (splitmix64's finaliser).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Runs the part from the parent: the elastic job of [`RANKS`] that loses a rank, then the
/// fresh job of the survivors' size; `start(ranks)` is the job that runs [`rank_main`] as
/// `ranks` processes (this program, or a test's rank). Checks that the job lost exactly the
/// chosen rank and that every survivor decoded to the end, each step checked (the ranks
/// assert that), and measures recovery against restart.
///
/// # Errors
/// What failed, with the ranks' output.
pub fn run(
    start: &dyn Fn(u32) -> Job,
    settings: &Settings,
) -> std::result::Result<ElasticReport, String> {
    let victim = (mix(settings.seed) % u64::from(RANKS)) as u32;
    // A step with steps before it and after it.
    let kill_step = 1 + (mix(settings.seed ^ 1) % (STEPS as u64 - 2)) as usize;
    let job = |ranks: u32, role: &str| {
        start(ranks)
            .capture_output()
            .env(ROLE, role)
            .env(VICTIM, victim.to_string())
            .env(KILL_STEP, kill_step.to_string())
            .env(RESIDENT_MIB, settings.resident_mib.to_string())
    };
    let failed = |what: &str, outcome: &symheap_tools::launcher::Outcome| {
        format!(
            "{what} (seed {}: launch rank {victim} killed at step {kill_step})\n{}\nthe \
             ranks' output:\n{}",
            settings.seed,
            outcome.summary(),
            outcome.output
        )
    };
    let lost = job(RANKS, "loses")
        .elastic()
        .run()
        .map_err(|e| e.to_string())?;
    if !lost.success() {
        return Err(failed("the elastic job failed", &lost));
    }
    let losses: Vec<Vec<u32>> = lost.losses.iter().map(|l| l.launch_ranks()).collect();
    if losses != [vec![victim]] {
        return Err(failed(
            &format!("the launcher reported the losses {losses:?}, not the victim's alone"),
            &lost,
        ));
    }
    let output = &lost.output;
    let survivors: Vec<u32> = (0..RANKS).filter(|&r| r != victim).collect();
    let ranks_of = |word: &str| {
        let mut ranks: Vec<u32> = stamps(output, word).iter().map(|&(r, _)| r).collect();
        ranks.sort_unstable();
        ranks
    };
    for (word, who) in [
        ("KILL", vec![victim]),
        ("FAILED", survivors.clone()),
        ("RECOVERED", survivors.clone()),
    ] {
        if ranks_of(word) != who {
            return Err(failed(
                &format!("{word} came from ranks {:?}, not {who:?}", ranks_of(word)),
                &lost,
            ));
        }
    }
    let done = lines_of(output, "DONE");
    if done.len() != survivors.len() || !done.iter().all(|l| l.ends_with("survived the loss")) {
        return Err(failed("not every survivor decoded to the end", &lost));
    }
    let latest = |word: &str| stamps(output, word).iter().map(|&(_, us)| us).max();
    let at = |word: &str| latest(word).ok_or_else(|| failed(&format!("no {word} stamp"), &lost));
    let ms = |from: u128, to: u128| to.saturating_sub(from) as f64 / 1e3;
    let kill = at("KILL")?;
    let marks = [
        kill,
        at("FAILED")?,
        at("WORLD")?,
        at("SHRUNK")?,
        at("RESHARDED")?,
        at("RECOVERED")?,
    ];
    let phases_ms = std::array::from_fn(|i| ms(marks[i], marks[i + 1]));

    // The survivors' tokens so far, which a server keeps with the requests: what the
    // restarted job resumes from.
    let w = Weights::new();
    let restart = survivors
        .iter()
        .fold(job(RANKS - 1, "restarts"), |job, &r| {
            let reference = Reference::decoded(&w, r as usize, kill_step + 1);
            let tokens: Vec<String> = reference
                .inputs
                .iter()
                .flatten()
                .map(usize::to_string)
                .collect();
            job.env(format!("{TOKENS}{r}"), tokens.join(" "))
        });
    let launched = now_us();
    let fresh = restart.run().map_err(|e| e.to_string())?;
    if !fresh.success() {
        return Err(failed("the restarted job failed", &fresh));
    }
    let firsts = stamps(&fresh.output, "FIRST");
    if firsts.len() != survivors.len() {
        return Err(failed(
            "not every restarted rank made its first step",
            &fresh,
        ));
    }
    let first = firsts.iter().map(|&(_, us)| us).max().unwrap_or(launched);
    Ok(ElasticReport {
        seed: settings.seed,
        victim,
        kill_step,
        resident_mib: settings.resident_mib,
        noticed: lines_of(output, "NOTICED")
            .into_iter()
            .next()
            .unwrap_or_default(),
        reshards: lines_of(output, "RESHARD"),
        recovery_ms: ms(kill, marks[5]),
        phases_ms,
        restart_ms: ms(launched, first),
    })
}

/// Prints what the part did and measured.
pub fn print(r: &ElasticReport) {
    let survivors = RANKS - 1;
    println!(
        "elastic EP ({RANKS} ranks as processes under the elastic launcher, EP = {RANKS} x TP = 1, \
         {EXPERTS} experts, {STEPS} decode steps, batch {BATCH} per rank, {} MiB of resident \
         weights per rank): launch rank {} SIGKILLed at step {} (seed {})",
        r.resident_mib, r.victim, r.kill_step, r.seed
    );
    println!("  what the first survivor saw fail: {}", r.noticed);
    for line in &r.reshards {
        println!("  {line}");
    }
    println!(
        "  checked: the launcher lost launch rank {} alone; the {survivors} survivors redid \
         step {} and decoded on to step {STEPS}, every step's logits of their {} sequences \
         equal to the host reference's; the KV caches equal their recomputation; the lost \
         rank's {BATCH} sequences dropped",
        r.victim,
        r.kill_step,
        survivors as usize * BATCH
    );
    let [noticed, formed, shrunk, resharded, redone] = r.phases_ms;
    println!(
        "  recovery, from the kill to the last survivor's first good step: {:>7.1} ms \
         (noticed {noticed:.1}, world formed {formed:.1}, pool shrunk {shrunk:.1}, re-sharded \
         {resharded:.1}, step redone {redone:.1})",
        r.recovery_ms
    );
    println!(
        "  restart, a fresh job of {survivors} ranks from launch to its last rank's first good \
         step: {:>7.1} ms (process start, communicator, pool, {} MiB of weights and the experts \
         loaded, KV caches re-prefilled)",
        r.restart_ms, r.resident_mib
    );
    println!("  restart / recovery: {:.1}x", r.restart_ms / r.recovery_ms);
}
