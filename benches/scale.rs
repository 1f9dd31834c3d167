//! Costs against the rank count (`cargo bench --bench scale`): communicator init, one window
//! registration, a 1 KiB and a 1 MiB AllReduce, the pool's host overhead per collective, and
//! memory per rank, at 4, 16, 64, 128 and 384 ranks. Ranks are processes started through the
//! launcher as nodes of 16 (`symheap-run --nnodes N --nproc-per-node 16`; 4 ranks are one node
//! of 4): this bench re-runs itself as the ranks. Then the same as threads of one process, on
//! nodes of 16 too (`symheap::emu::launch_nodes`).
//!
//! `SCALE_RANKS=4,16` picks the counts (default `4,16,64,128,384`), `SCALE_ITERS=N` the
//! iterations of each timed collective (default 10; the 1 MiB AllReduce runs a third as many,
//! at least 2), `SCALE_THREADS=0` skips the threads, `SCALE_WARM_GIB=N` touches N GiB before
//! each job (see [`warm_memory`]). Each figure is the median over the ranks
//! of each rank's own median over the iterations:
//!
//! - `init`: `HcclCommInitRootInfo` of a world communicator, timed from a barrier on the job's
//!   first communicator (whose own init, `Comm::from_env`, waits for the launcher to start
//!   every process, so it measures the launch, not the init), rank 0 passing the root info to
//!   the others through a pooled AllReduce;
//! - `register`: `SymPool::new` of a 4 MiB pool: reserve the symmetric address space, map the
//!   memory, register the window (`HcclCommSymWinRegister`), every rank's memory mapped into
//!   every rank's heap;
//! - `1 KiB` / `1 MiB`: one pooled AllReduce (sum, fp32) and the stream synchronisation after
//!   it: the time every rank waits for the slowest;
//! - `pool overhead`: the host time of the pool's `all_reduce` call (1 KiB) minus the host time
//!   of the same raw `HcclAllReduce` call on the same buffers and stream: what the pool adds
//!   per collective (checks, bookkeeping, the enqueue), without the collective itself;
//! - `register faults`: the minor page faults of `register` per rank (the warm-up collective
//!   first touches every peer's window): work counted, so its growth shows even where CPU
//!   times are noisy (on this virtual machine a fault that needs a fresh page costs up to 3x
//!   more when the host has not backed the page yet);
//! - `RSS` / `PSS`: `/proc/self/smaps_rollup` at the end. The emulated device memory is shared
//!   memfd pages mapped into every rank's heap: RSS counts each rank's view of its peers'
//!   pages in full, PSS shares them out, so PSS summed over the ranks is what the job takes.
//!
//! The growth column is `log(cost(n) / cost(m)) / log(n / m)` against the previous count `m`:
//! 0 for a cost that stays flat, 1 for one that grows linearly with the ranks. Each cost here
//! is per rank, so the bound is 1 ("every cost per rank grows at most linearly").

use std::time::{Duration, Instant};

use symheap::{Comm, CommConfig, PoolConfig, ReduceOp, Result, RootInfo, Runtime, Stream};
use symheap::{SymPool, SymVec};
use symheap_tools::launcher::{self, Job};

/// Ranks per emulated node: an A3 node's NPUs.
const NODE: u32 = 16;
/// The figures each rank reports, in the order of its `SCALE` line: each time as the wall
/// time a rank waits and as the CPU time it costs per rank.
const COLUMNS: [&str; 12] = [
    "init ms",
    "init CPU ms",
    "register ms",
    "register CPU ms",
    "register faults",
    "1 KiB us",
    "1 KiB CPU us",
    "1 MiB ms",
    "1 MiB CPU ms",
    "pool overhead us",
    "RSS MiB",
    "PSS MiB",
];

/// The columns whose growth must stay at most linear: the costs per rank (CPU time, memory).
/// Wall times on 2 cores grow by one more power: n ranks' work shares 2 cores.
const BOUNDED: [usize; 7] = [1, 3, 4, 6, 8, 10, 11];

/// What one rank measured, in [`COLUMNS`]' order.
type Sample = [f64; 12];

/// A wall time and the CPU time per rank it took, in seconds, and the page faults per rank.
#[derive(Clone, Copy)]
struct Cost {
    wall: f64,
    cpu: f64,
    faults: f64,
}

/// This process's CPU time (every thread: the rank's, its stream's, the rendezvous hub's).
fn process_cpu() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec this function owns.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// This process's minor page faults: a count of work that, unlike CPU time, does not depend
/// on what else the machine runs meanwhile (a fault's own cost does).
fn process_faults() -> f64 {
    // SAFETY: getrusage writes one rusage this function owns; all zeroes is a valid one.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_minflt as f64
}

/// The ranks that share this process's CPU time: 1 for a rank process, all of them for
/// threads (every thread runs the same collective at the same time, so the process's CPU
/// time over one is every rank's).
static SHARERS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// Times `f`: its wall time and the CPU time per rank it took.
fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, Cost)> {
    let (wall, cpu, faults) = (Instant::now(), process_cpu(), process_faults());
    let value = f()?;
    let sharers = f64::from(SHARERS.load(std::sync::atomic::Ordering::Relaxed));
    let cost = Cost {
        wall: wall.elapsed().as_secs_f64(),
        cpu: (process_cpu() - cpu) / sharers,
        faults: (process_faults() - faults) / sharers,
    };
    Ok((value, cost))
}

/// The median cost of `iters` runs of `f`, wall, CPU and faults apart.
fn median_cost_of(iters: usize, mut f: impl FnMut() -> Result<Cost>) -> Result<Cost> {
    let costs = (0..iters).map(|_| f()).collect::<Result<Vec<_>>>()?;
    let mut wall: Vec<f64> = costs.iter().map(|c| c.wall).collect();
    let mut cpu: Vec<f64> = costs.iter().map(|c| c.cpu).collect();
    let mut faults: Vec<f64> = costs.iter().map(|c| c.faults).collect();
    Ok(Cost {
        wall: median(&mut wall),
        cpu: median(&mut cpu),
        faults: median(&mut faults),
    })
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The median of `iters` runs of `f`, each timed by what `f` returns.
fn median_of(iters: usize, mut f: impl FnMut() -> Result<Duration>) -> Result<f64> {
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        times.push(f()?.as_secs_f64());
    }
    Ok(median(&mut times))
}

/// `Rss` and `Pss` of this process, in MiB.
fn memory() -> (f64, f64) {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    let field = |name: &str| {
        rollup
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<f64>().ok())
            .map_or(f64::NAN, |kib| kib / 1024.0)
    };
    (field("Rss:"), field("Pss:"))
}

/// A timed AllReduce of `len` fp32 on the pool, synchronised.
fn timed_all_reduce(pool: &SymPool, input: &SymVec<f32>, output: &mut SymVec<f32>) -> Result<Cost> {
    let ((), cost) = timed(|| {
        pool.all_reduce(input, output, ReduceOp::Sum)?;
        pool.synchronize()
    })?;
    Ok(cost)
}

/// A world communicator made anew (`HcclCommInitRootInfo`), timed from a barrier: rank 0's
/// root info reaches the others through an AllReduce on `pool` (everyone else adds zeros).
fn timed_init(comm: &Comm, pool: &SymPool, stream: &Stream) -> Result<Cost> {
    let rt = comm.runtime();
    let root = (comm.rank() == 0).then(|| RootInfo::new(rt)).transpose()?;
    let bytes: Vec<i32> = match &root {
        Some(root) => root.as_bytes().iter().map(|&b| i32::from(b)).collect(),
        None => vec![0; symheap::sys::HCCL_ROOT_INFO_BYTES],
    };
    let input = SymVec::from_host(pool, &bytes)?;
    let mut output = SymVec::<i32>::zeroed(pool, bytes.len())?;
    pool.all_reduce(&input, &mut output, ReduceOp::Sum)?;
    let bytes: Vec<u8> = output.to_host()?.iter().map(|&b| b as u8).collect();
    let root = RootInfo::from_bytes(&bytes)?;
    comm.barrier(stream)?;
    comm.synchronize(stream)?;
    let config = CommConfig::new().exec_timeout_secs(600);
    let (world, cost) = timed(|| Comm::init(rt, comm.rank_count(), &root, comm.rank(), &config))?;
    drop(world);
    Ok(cost)
}

/// Everything one rank measures, on its communicator `comm`.
fn measure(comm: &Comm, iters: usize) -> Result<Sample> {
    let (pool, register) =
        timed(|| SymPool::new(comm, PoolConfig::new(4 << 20).max_capacity(4 << 20)))?;
    let stream = Stream::new(comm.runtime())?;
    let init = timed_init(comm, &pool, &stream)?;
    let ones = |len: usize| SymVec::from_host(&pool, &vec![1.0f32; len]);
    let (small_in, mut small_out) = (ones(256)?, SymVec::<f32>::zeroed(&pool, 256)?);
    let (big_in, mut big_out) = (ones(1 << 18)?, SymVec::<f32>::zeroed(&pool, 1 << 18)?);
    // Warm up, and check: every element is the rank count.
    timed_all_reduce(&pool, &small_in, &mut small_out)?;
    timed_all_reduce(&pool, &big_in, &mut big_out)?;
    let want = comm.rank_count() as f32;
    for out in [small_out.to_host()?, big_out.to_host()?] {
        if out.iter().any(|&x| x != want) {
            return Err(symheap::Error::InvalidArgument(format!(
                "rank {}: AllReduce of ones gave other than {want}",
                comm.rank()
            )));
        }
    }
    let small = median_cost_of(iters, || timed_all_reduce(&pool, &small_in, &mut small_out))?;
    let big = median_cost_of((iters / 3).max(2), || {
        timed_all_reduce(&pool, &big_in, &mut big_out)
    })?;
    let pooled_call = median_of(iters, || {
        let started = Instant::now();
        pool.all_reduce(&small_in, &mut small_out, ReduceOp::Sum)?;
        let took = started.elapsed();
        pool.synchronize()?;
        Ok(took)
    })?;
    let raw_call = median_of(iters, || {
        let started = Instant::now();
        // SAFETY: both are live pool blocks of 256 fp32, kept alive (and unused otherwise)
        // until the synchronisation below has run the collective.
        unsafe {
            comm.raw().all_reduce(
                small_in.device_ptr(),
                small_out.device_ptr(),
                256,
                <f32 as symheap::Element>::DATA_TYPE.into(),
                ReduceOp::Sum,
                pool.stream(),
            )
        }?;
        let took = started.elapsed();
        pool.stream().synchronize()?;
        Ok(took)
    })?;
    let (rss, pss) = memory();
    let sharers = f64::from(SHARERS.load(std::sync::atomic::Ordering::Relaxed));
    Ok([
        init.wall * 1e3,
        init.cpu * 1e3,
        register.wall * 1e3,
        register.cpu * 1e3,
        register.faults,
        small.wall * 1e6,
        small.cpu * 1e6,
        big.wall * 1e3,
        big.cpu * 1e3,
        (pooled_call - raw_call) * 1e6,
        rss / sharers,
        pss / sharers,
    ])
}

fn iters() -> usize {
    std::env::var("SCALE_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(10)
}

/// One rank of a process job: measures, prints its `SCALE` line.
fn rank() -> Result<()> {
    let rt = Runtime::emulated()?;
    let comm = Comm::from_env(&rt, CommConfig::new().exec_timeout_secs(600))?;
    let sample = measure(&comm, iters())?;
    let fields: Vec<String> = sample.iter().map(|v| format!("{v:.3}")).collect();
    println!("SCALE {}", fields.join(" "));
    Ok(())
}

/// The medians over the ranks of each column of `samples`.
fn medians(samples: &[Sample]) -> Sample {
    let mut out = [f64::NAN; 12];
    for (c, slot) in out.iter_mut().enumerate() {
        let mut column: Vec<f64> = samples.iter().map(|s| s[c]).collect();
        *slot = median(&mut column);
    }
    out
}

/// `ranks` processes as nodes of [`NODE`] (one smaller node below that): every rank's sample,
/// and the seconds the job took.
fn as_processes(ranks: u32) -> std::result::Result<(Vec<Sample>, f64), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let per_node = ranks.min(NODE);
    if !ranks.is_multiple_of(per_node) {
        return Err(format!("{ranks} ranks are not nodes of {NODE}"));
    }
    let started = Instant::now();
    let outcome = Job::on_nodes(ranks / per_node, per_node, exe)
        .arg("--scale-rank")
        .grace(Duration::from_secs(30))
        .capture_output()
        .run()
        .map_err(|e| e.to_string())?;
    let took = started.elapsed().as_secs_f64();
    if !outcome.success() {
        let tail: Vec<&str> = outcome.output.lines().rev().take(20).collect();
        return Err(format!("{}\n{}", outcome.summary(), tail.join("\n")));
    }
    let samples = parse_samples(&outcome.output);
    if samples.len() != ranks as usize {
        return Err(format!("{} of {ranks} ranks reported", samples.len()));
    }
    Ok((samples, took))
}

/// The `SCALE` lines of a job's output.
fn parse_samples(output: &str) -> Vec<Sample> {
    output
        .lines()
        .filter_map(|line| line.split_once("] SCALE ").map(|(_, rest)| rest))
        .filter_map(|rest| {
            let values: Vec<f64> = rest
                .split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect();
            values.try_into().ok()
        })
        .collect()
}

/// `ranks` threads of this process, as nodes of 16 (fewer ranks: one node of them all).
fn as_threads(ranks: u32) -> std::result::Result<(Vec<Sample>, f64), String> {
    let started = Instant::now();
    let iters = iters();
    SHARERS.store(ranks, std::sync::atomic::Ordering::Relaxed);
    let (nodes, per_node) = match ranks % 16 {
        0 => (ranks / 16, 16),
        _ => (1, ranks),
    };
    let samples = symheap::emu::launch_nodes(nodes, per_node, |comm| measure(comm, iters))
        .map_err(|e| e.to_string())?;
    Ok((samples, started.elapsed().as_secs_f64()))
}

/// Prints the table of `rows` (rank count, medians), with each cost's growth exponent
/// against the row before.
fn table(title: &str, rows: &[(u32, Sample, f64)]) {
    println!("\n{title}\n");
    let mut header = String::from("| ranks | job s |");
    for c in COLUMNS {
        header.push_str(&format!(" {c} | growth |"));
    }
    println!("{header}");
    println!("|{}", "---:|".repeat(2 + 2 * COLUMNS.len()));
    let mut worst: Option<(f64, &str, u32)> = None;
    for (i, (ranks, sample, took)) in rows.iter().enumerate() {
        let mut line = format!("| {ranks} | {took:.1} |");
        for (c, value) in sample.iter().enumerate() {
            let growth = i.checked_sub(1).map(|p| {
                let (m, before) = (rows[p].0, rows[p].1[c]);
                (value / before).ln() / (f64::from(*ranks) / f64::from(m)).ln()
            });
            match growth {
                Some(g) if g.is_finite() => {
                    line.push_str(&format!(" {value:.3} | {g:.2} |"));
                    // Only the costs per rank must stay at most linear (see BOUNDED).
                    if BOUNDED.contains(&c) && worst.is_none_or(|(w, _, _)| g > w) {
                        worst = Some((g, COLUMNS[c], *ranks));
                    }
                }
                _ => line.push_str(&format!(" {value:.3} | |")),
            }
        }
        println!("{line}");
    }
    if let Some((g, column, ranks)) = worst {
        let verdict = if g <= 1.2 {
            "at most linear"
        } else {
            "FASTER THAN LINEAR"
        };
        println!("\nsteepest growth: {column} at {ranks} ranks, exponent {g:.2}: {verdict}");
    }
}

/// Touches and frees `SCALE_WARM_GIB` GiB (default 0) before each job. This virtual machine
/// hands freed memory back to its host (virtio-balloon free page reporting), and a page the
/// host must back again costs about 3x more to fault in (11 against 3 us here): a 384-rank job
/// makes about a GiB of fresh page tables, so without this its CPU times measure the host.
fn warm_memory() {
    let gib: usize = std::env::var("SCALE_WARM_GIB")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    if gib > 0 {
        // Non-zero, so every page is written (a zeroed allocation may stay unbacked).
        drop(std::hint::black_box(vec![1u8; gib << 30]));
    }
}

fn main() -> std::process::ExitCode {
    if launcher::in_a_rank() && std::env::args().any(|a| a == "--scale-rank") {
        return match rank() {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("scale: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let counts: Vec<u32> = std::env::var("SCALE_RANKS")
        .ok()
        .map(|v| {
            v.split(',')
                .filter_map(|n| n.trim().parse().ok())
                .filter(|&n| n > 0)
                .collect()
        })
        .unwrap_or_else(|| vec![4, 16, 64, 128, 384]);
    let threads = std::env::var("SCALE_THREADS").map_or(true, |v| v != "0");
    let mut failed = false;
    for (title, run) in [
        ("processes (nodes of 16)", as_processes as fn(u32) -> _),
        ("threads of one process", as_threads),
    ] {
        if title.starts_with("threads") && !threads {
            continue;
        }
        let mut rows = Vec::new();
        for &ranks in &counts {
            warm_memory();
            match run(ranks) {
                Ok((samples, took)) => {
                    eprintln!("{title}: {ranks} ranks done in {took:.1} s");
                    rows.push((ranks, medians(&samples), took));
                }
                Err(why) => {
                    // Threads beyond what one process may hold are a limit, not a failure.
                    eprintln!("{title}: {ranks} ranks: {why}");
                    failed |= title.starts_with("processes");
                }
            }
        }
        table(title, &rows);
    }
    if failed {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}
