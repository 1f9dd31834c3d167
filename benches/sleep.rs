//! Sleep and wake against tearing everything down and building it again, in the same run
//! (`cargo bench --bench sleep`): emulated ranks as threads, pools of 64 MiB, 256 MiB and
//! 1 GiB per rank on 2 ranks (and 256 MiB on 4).
//!
//! Each pool lives on a world communicator made for it (from a fresh root info handed round
//! on `emu::launch`'s communicator, which stays as the bootstrap) with a TP group split from
//! that world and attached. Half its bytes are "weights" (8 blocks, uploaded from host
//! memory the bench keeps), the rest "kv-cache" (8 blocks, contents unused). Five kinds of
//! cycle, in alternation, `REPS` times each:
//!
//! - **shallow offload**: `sleep(offload("weights"))`, then `wake()`;
//! - **shallow discard**: `sleep(SleepPlan::new())`, then `wake()`;
//! - **deep offload** / **deep discard**: the same plans with `release_communicators()`;
//!   the wake is `Comm::init` of a new world (root info taken before the sleep, not timed),
//!   `wake_on`, a new TP split and `attach`;
//! - **re-create** (the peer, what vllm-ascend does today): drop the blocks, the pool, the
//!   TP group and the world (their memory and HCCL's buffers go back), then `Comm::init` a
//!   new world (fresh root info, not timed), split the TP group, `SymPool::new`, attach,
//!   allocate the same blocks and upload the weights from host (`from_host_with` of the
//!   bytes the offload keeps). "re-create w/o upload" is the same less the upload step,
//!   the peer of the discard cycles.
//!
//! A cycle's time is the slowest rank's (each rank times its own calls between barriers on
//! the bootstrap communicator); the table gives medians over the repetitions.
//!
//! Residual device memory while asleep (or, for the peer, torn down): the used bytes
//! (`total - free` of `aclrtGetMemInfo` on the rank's device) minus the same before the pool
//! and its two communicators existed, as a fraction of the pool's bytes. What those two
//! communicators hold of their own (HCCL's buffers, symheap's agreement scratch) is measured
//! when the peer makes them (the used bytes after `Comm::init`, the split, `SymPool::new` and
//! `attach`, less the pool's reserved bytes), never assumed. The targets: at most 1 % of the
//! pool's bytes plus that (shallow), plus nothing (deep). The table gives the residual, and
//! what is left of it beyond the communicators' own memory (shallow) as a share of the pool.

use std::time::Instant;

use symheap::{
    AllocDesc, Comm, CommConfig, PoolConfig, Result, RootInfo, SleepPlan, Stream, SymBlock,
    SymPool, SymVec, emu,
};

/// Pool bytes per rank, and ranks.
const CASES: [(u64, u32); 4] = [(64 << 20, 2), (256 << 20, 2), (1 << 30, 2), (256 << 20, 4)];
const REPS: usize = 5;
/// Blocks per half of the pool.
const BLOCKS: u64 = 8;
const WEIGHTS: &str = "weights";
const KV: &str = "kv-cache";
/// The TP group's split id.
const TP_ID: u64 = 7;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    ShallowOffload,
    ShallowDiscard,
    DeepOffload,
    DeepDiscard,
    Recreate,
}

const MODES: [Mode; 5] = [
    Mode::ShallowOffload,
    Mode::ShallowDiscard,
    Mode::DeepOffload,
    Mode::DeepDiscard,
    Mode::Recreate,
];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::ShallowOffload => "shallow offload",
            Mode::ShallowDiscard => "shallow discard",
            Mode::DeepOffload => "deep offload",
            Mode::DeepDiscard => "deep discard",
            Mode::Recreate => "re-create (peer)",
        }
    }

    fn plan(self) -> SleepPlan {
        let plan = match self {
            Mode::ShallowOffload | Mode::DeepOffload => SleepPlan::new().offload(WEIGHTS),
            _ => SleepPlan::new(),
        };
        match self {
            Mode::DeepOffload | Mode::DeepDiscard => plan.release_communicators(),
            _ => plan,
        }
    }

    fn deep(self) -> bool {
        matches!(self, Mode::DeepOffload | Mode::DeepDiscard | Mode::Recreate)
    }
}

/// One cycle on one rank, in seconds (and bytes).
#[derive(Clone, Copy, Default, Debug)]
struct Cycle {
    /// Sleep, or the peer's teardown.
    sleep: f64,
    /// Wake (deep: init + wake_on + split + attach), or the peer's whole re-create.
    wake: f64,
    /// Steps of the wake: `Comm::init`; `wake_on` (the peer: `SymPool::new` + `attach`);
    /// split (+ `attach` after a deep wake); the peer's allocation and upload.
    init: f64,
    pool: f64,
    groups: f64,
    alloc: f64,
    upload: f64,
    /// The peer only: the same upload again, into memory the first one touched.
    warm_upload: f64,
    /// Used device bytes while asleep, minus those before the pool and its communicators.
    residual: i64,
    /// What the pool's two communicators hold of their own (HCCL's buffers, symheap's
    /// agreement scratch), measured as the peer made them.
    comms_own: i64,
}

/// A step of a wake, named, and where a cycle keeps its time.
type Step = (&'static str, fn(&Cycle) -> f64);

/// A rank's used device bytes.
fn used(comm: &Comm) -> Result<i64> {
    let (free, total) = comm.runtime().mem_info()?;
    Ok(total as i64 - free as i64)
}

/// A pool and what lives in it, on this rank.
struct Live {
    world: Comm,
    tp: Comm,
    pool: SymPool,
    weights: Vec<SymVec<u8>>,
    kv: Vec<SymBlock>,
}

/// A new world of `boot`'s ranks, from `root`.
fn new_world(boot: &Comm, root: &RootInfo) -> Result<Comm> {
    let config = CommConfig::new();
    Comm::init(
        boot.runtime(),
        boot.rank_count(),
        root,
        boot.rank(),
        &config,
    )
}

/// This rank's TP pair of `world`.
fn split_tp(world: &Comm) -> Result<Comm> {
    let r = world.rank();
    let pair = [r - r % 2, r - r % 2 + 1];
    world.split(&pair, TP_ID + u64::from(r / 2), world.config())
}

/// The bytes of each weight and KV block of a pool of `bytes`.
fn block_sizes(bytes: u64) -> (u64, u64) {
    let weight = bytes / 2 / BLOCKS;
    // A little room left: the pool's own first bytes, and rounding.
    let kv = (bytes / 2 - (2 << 20)) / BLOCKS / 4096 * 4096;
    (weight, kv)
}

/// The peer's re-create, or the first setup: world, TP group, pool, blocks, upload.
fn create(boot: &Comm, bytes: u64, host: &[Vec<u8>], cycle: &mut Cycle, base: i64) -> Result<Live> {
    // The bootstrap exchange is not timed (vllm-ascend's goes through its TCP store).
    let root = boot.fresh_root_info()?;
    let rt = boot.runtime();
    let sync = Stream::new(rt)?;
    barrier(boot, &sync)?;
    let t = Instant::now();
    let world = new_world(boot, &root)?;
    cycle.init = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let tp = split_tp(&world)?;
    cycle.groups = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let pool = SymPool::new(&world, PoolConfig::new(bytes))?;
    pool.attach(&tp)?;
    cycle.pool = t.elapsed().as_secs_f64();
    // What the two communicators hold of their own: HCCL's buffers, and the one granule of
    // scratch each that symheap's agreements use (made at their first agreement).
    cycle.comms_own = used(boot)? - base - pool.stats().reserved as i64;
    let t = Instant::now();
    let (_, kv_bytes) = block_sizes(bytes);
    let kv = (0..BLOCKS)
        .map(|_| pool.alloc_with(kv_bytes, 0, AllocDesc::tagged(KV)))
        .collect::<Result<Vec<_>>>()?;
    cycle.alloc = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let weights = host
        .iter()
        .map(|w| SymVec::from_host_with(&pool, w, AllocDesc::tagged(WEIGHTS)))
        .collect::<Result<Vec<_>>>()?;
    cycle.upload = t.elapsed().as_secs_f64();
    cycle.wake = cycle.init + cycle.groups + cycle.pool + cycle.alloc + cycle.upload;
    Ok(Live {
        world,
        tp,
        pool,
        weights,
        kv,
    })
}

/// Every rank here, and nothing queued on `stream`.
fn barrier(boot: &Comm, stream: &Stream) -> Result<()> {
    boot.barrier(stream)?;
    boot.synchronize(stream)
}

/// One cycle of `mode` on this rank; `live` is replaced by what the cycle leaves.
fn cycle(
    boot: &Comm,
    mode: Mode,
    live: &mut Option<Live>,
    host: &[Vec<u8>],
    base: i64,
) -> Result<Cycle> {
    let sync = Stream::new(boot.runtime())?;
    let mut c = Cycle::default();
    let bytes = live
        .as_ref()
        .expect("a live pool")
        .pool
        .config()
        .capacity_bytes();
    if mode == Mode::Recreate {
        let old = live.take().expect("a live pool");
        barrier(boot, &sync)?;
        let t = Instant::now();
        let Live {
            world,
            tp,
            pool,
            weights,
            kv,
        } = old;
        drop((weights, kv));
        drop(pool);
        drop(tp);
        drop(world);
        c.sleep = t.elapsed().as_secs_f64();
        // Every rank torn down (a peer's window maps this rank's memory until it goes), as a
        // sleep ends.
        barrier(boot, &sync)?;
        let residual = used(boot)? - base;
        *live = Some(create(boot, bytes, host, &mut c, base)?);
        c.residual = residual;
        // Where the upload's time goes: the same bytes again, into pages already touched.
        let l = live.as_mut().expect("a live pool");
        barrier(boot, &sync)?;
        let t = Instant::now();
        for (w, h) in l.weights.iter_mut().zip(host) {
            w.copy_from_host(h)?;
        }
        c.warm_upload = t.elapsed().as_secs_f64();
        return Ok(c);
    }
    let l = live.as_mut().expect("a live pool");
    let root = if mode.deep() {
        Some(l.world.fresh_root_info()?)
    } else {
        None
    };
    let plan = mode.plan();
    barrier(boot, &sync)?;
    let t = Instant::now();
    l.pool.sleep(&plan)?;
    c.sleep = t.elapsed().as_secs_f64();
    c.residual = used(boot)? - base;
    barrier(boot, &sync)?;
    let t = Instant::now();
    if let Some(root) = root {
        let world = new_world(boot, &root)?;
        c.init = t.elapsed().as_secs_f64();
        let t = Instant::now();
        l.pool.wake_on(&world)?;
        c.pool = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let tp = split_tp(&world)?;
        l.pool.attach(&tp)?;
        c.groups = t.elapsed().as_secs_f64();
        c.wake = c.init + c.pool + c.groups;
        l.world = world;
        l.tp = tp;
    } else {
        l.pool.wake()?;
        c.wake = t.elapsed().as_secs_f64();
        c.pool = c.wake;
    }
    if !plan.offloads(WEIGHTS) {
        // The weights were discarded: load them again (not timed), as a server would before
        // serving, so that the next offload keeps real weights.
        let l = live.as_mut().expect("a live pool");
        for (w, h) in l.weights.iter_mut().zip(host) {
            w.copy_from_host(h)?;
        }
    }
    Ok(c)
}

/// Everything one rank measured: `(mode, cycle)` for every repetition, in order.
fn rank(boot: &Comm, bytes: u64) -> Result<Vec<(Mode, Cycle)>> {
    let r = boot.rank() as u8;
    let (weight_bytes, _) = block_sizes(bytes);
    let host: Vec<Vec<u8>> = (0..BLOCKS as u8)
        .map(|b| {
            (0..weight_bytes as usize)
                .map(|i| (i as u8).wrapping_mul(31) ^ b ^ r)
                .collect()
        })
        .collect();
    // The bootstrap's own scratch is made at its first agreement: before the baseline.
    let _ = boot.fresh_root_info()?;
    let base = used(boot)?;
    let mut first = Cycle::default();
    let mut live = Some(create(boot, bytes, &host, &mut first, base)?);
    let mut out = Vec::new();
    for rep in 0..REPS {
        for mode in MODES {
            let c = cycle(boot, mode, &mut live, &host, base)?;
            if rep == 0 {
                // The weights came back, or were loaded again (the first block, in full).
                let l = live.as_ref().expect("a live pool");
                let back = l.weights[0].to_host()?;
                assert!(
                    back == host[0],
                    "rank {r}: {mode:?}: the weights did not come back"
                );
                assert!(l.pool.comm().same_as(&l.world) && !l.tp.is_released());
            }
            out.push((mode, c));
        }
    }
    drop(live);
    Ok(out)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ms(s: f64) -> String {
    format!("{:.1} ms", s * 1e3)
}

fn mib(b: i64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; nothing else is read.
    let started = Instant::now();
    println!(
        "sleep / wake against re-creating the pool, communicators and groups: ranks as threads; \
         {REPS} repetitions, medians of the slowest rank's time"
    );
    println!("half of each pool is weights (offloaded or re-uploaded), half KV cache (discarded)");
    for (bytes, ranks) in CASES {
        let per_rank = emu::launch(ranks, |boot| rank(boot, bytes))?;
        let case = format!("{} MiB x {ranks} ranks", bytes >> 20);
        println!();
        println!(
            "{case:<22} {:>11} {:>11} {:>18} {:>16} {:>8}",
            "sleep", "wake", "residual asleep", "beyond comms", "target"
        );
        // The communicators' own memory, as the peer's re-creates measured it.
        let comms_own = median(
            per_rank
                .iter()
                .flatten()
                .filter(|(m, _)| *m == Mode::Recreate)
                .map(|(_, c)| c.comms_own as f64)
                .collect(),
        ) as i64;
        // Per mode, the median wake (the peer: its re-create, and the same without upload).
        let mut wakes = Vec::new();
        let mut bare = 0.0;
        for mode in MODES {
            // Per repetition, the slowest rank; per rank, the largest residual.
            let pick = |f: fn(&Cycle) -> f64| -> f64 {
                let reps: Vec<f64> = (0..REPS)
                    .map(|rep| {
                        per_rank
                            .iter()
                            .map(|cycles| {
                                let (_, c) = cycles
                                    .iter()
                                    .filter(|(m, _)| *m == mode)
                                    .nth(rep)
                                    .expect("a cycle per rep");
                                f(c)
                            })
                            .fold(f64::MIN, f64::max)
                    })
                    .collect();
                median(reps)
            };
            let sleep = pick(|c| c.sleep);
            let wake = pick(|c| c.wake);
            let residual = pick(|c| c.residual as f64) as i64;
            // What a shallow sleep may keep besides the communicators' own memory, as a
            // share of the pool (the target: at most 1 %).
            let own = if mode.deep() { 0 } else { comms_own };
            let share = (residual - own).max(0) as f64 / bytes as f64;
            let allowed = bytes as i64 / 100 + own;
            let target = match mode {
                Mode::Recreate => "-",
                _ if residual <= allowed => "met",
                _ => "NOT met",
            };
            println!(
                "{:<22} {:>11} {:>11} {:>18} {:>15.2}% {:>8}",
                mode.name(),
                ms(sleep),
                ms(wake),
                mib(residual),
                share * 100.0,
                target
            );
            let steps: &[Step] = match mode {
                Mode::ShallowOffload | Mode::ShallowDiscard => &[],
                Mode::DeepOffload | Mode::DeepDiscard => &[
                    ("Comm::init", |c| c.init),
                    ("wake_on", |c| c.pool),
                    ("split + attach", |c| c.groups),
                ],
                Mode::Recreate => &[
                    ("Comm::init", |c| c.init),
                    ("split", |c| c.groups),
                    ("SymPool::new + attach", |c| c.pool),
                    ("alloc", |c| c.alloc),
                    ("upload", |c| c.upload),
                ],
            };
            if !steps.is_empty() {
                let steps: Vec<String> = steps
                    .iter()
                    .map(|&(name, f)| format!("{name} {}", ms(pick(f))))
                    .collect();
                println!("{:<22} {}", "", steps.join(", "));
            }
            if mode == Mode::Recreate {
                println!(
                    "{:<22} world + TP communicators' own memory: {}",
                    "",
                    mib(comms_own)
                );
                bare = pick(|c| c.wake - c.upload);
                println!("{:<22} re-create w/o upload: {}", "", ms(bare));
                println!(
                    "{:<22} the upload again, into touched memory: {}",
                    "",
                    ms(pick(|c| c.warm_upload))
                );
            }
            wakes.push((mode, wake));
        }
        let (_, recreate) = wakes[4];
        println!("re-create / wake (same memory; discard against re-create w/o upload):");
        for (mode, wake) in &wakes[..4] {
            let peer = match mode {
                Mode::ShallowOffload | Mode::DeepOffload => recreate,
                _ => bare,
            };
            println!("  {:<20} {:>6.1}x", mode.name(), peer / wake);
        }
    }
    println!();
    println!("whole bench: {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}
