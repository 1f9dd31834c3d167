//! Collective bandwidth in the format of nccl-tests / hccl_test, on the embedded emulator.
//!
//! ```sh
//! cargo run --release --example coll_perf -- --op allreduce --ranks 2 --dtype fp32 \
//!     --min 1K --max 64M --memory window
//! ```
//!
//! For each size it prints `size count type redop time(us) algbw(GB/s) busbw(GB/s) #wrong`,
//! with the output checked against a host computation, and finally the host's memcpy
//! bandwidth with one thread and with two (aggregate), measured in the same run: the ceiling a
//! host emulator can approach.
//! `--memory window` registers the buffers as symmetric windows (the zero-copy path);
//! `--memory plain` leaves them unregistered, so data stages through the HCCL buffer.

use std::time::{Duration, Instant};

use half::{bf16, f16};
use symheap::launcher::{self, Job};
use symheap::runtime::{Comm, DevicePtr, Element, Mapping, ReduceOp, Stream, Window};
use symheap::{Error, Result};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Op {
    AllReduce,
    AllGather,
    ReduceScatter,
    AlltoAll,
}

#[derive(Clone, Debug)]
struct Args {
    op: Op,
    ranks: u32,
    dtype: String,
    redop: ReduceOp,
    min: u64,
    max: u64,
    iters: u32,
    warmup: u32,
    registered: bool,
    /// Ranks as processes (`--procs N`) rather than threads (`--ranks N`).
    procs: bool,
}

fn parse_size(s: &str) -> Result<u64> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| Error::InvalidArgument(format!("bad size {s}")))?;
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return Err(Error::InvalidArgument(format!("bad size unit in {s}"))),
    };
    Ok(n << shift)
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        op: Op::AllReduce,
        ranks: 2,
        dtype: "fp32".into(),
        redop: ReduceOp::Sum,
        min: 1 << 10,
        max: 64 << 20,
        iters: 20,
        warmup: 3,
        registered: true,
        procs: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| Error::InvalidArgument(format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--op" => {
                args.op = match value()?.to_ascii_lowercase().as_str() {
                    "allreduce" => Op::AllReduce,
                    "allgather" => Op::AllGather,
                    "reducescatter" => Op::ReduceScatter,
                    "alltoall" => Op::AlltoAll,
                    other => return Err(Error::InvalidArgument(format!("unknown op {other}"))),
                }
            }
            "--ranks" | "--procs" => {
                args.ranks = value()?
                    .parse()
                    .map_err(|_| Error::InvalidArgument(format!("bad {flag}")))?;
                args.procs = flag == "--procs";
            }
            "--dtype" => args.dtype = value()?,
            "--redop" => {
                args.redop = match value()?.as_str() {
                    "sum" => ReduceOp::Sum,
                    "prod" => ReduceOp::Prod,
                    "max" => ReduceOp::Max,
                    "min" => ReduceOp::Min,
                    other => return Err(Error::InvalidArgument(format!("unknown redop {other}"))),
                }
            }
            "--min" => args.min = parse_size(&value()?)?,
            "--max" => args.max = parse_size(&value()?)?,
            "--iters" => {
                args.iters = value()?
                    .parse()
                    .map_err(|_| Error::InvalidArgument("bad --iters".into()))?
            }
            "--warmup" => {
                args.warmup = value()?
                    .parse()
                    .map_err(|_| Error::InvalidArgument("bad --warmup".into()))?
            }
            "--memory" => {
                args.registered = match value()?.as_str() {
                    "window" => true,
                    "plain" => false,
                    other => {
                        return Err(Error::InvalidArgument(format!(
                            "--memory is window or plain, not {other}"
                        )));
                    }
                }
            }
            "--help" | "-h" => {
                println!(
                    "coll_perf [--op allreduce|allgather|reducescatter|alltoall] [--ranks N | --procs N] \
                     [--dtype int8|int16|int32|int64|uint8|uint16|uint32|uint64|fp16|bf16|fp32|fp64] \
                     [--redop sum|prod|max|min] [--min SIZE] [--max SIZE] [--iters N] [--warmup N] \
                     [--memory window|plain]"
                );
                std::process::exit(0);
            }
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown flag {other}; try --help"
                )));
            }
        }
    }
    if args.ranks == 0 || args.min == 0 || args.min > args.max || args.iters == 0 {
        return Err(Error::InvalidArgument(
            "need ranks >= 1, 0 < min <= max, iters >= 1".into(),
        ));
    }
    Ok(args)
}

/// Host-side arithmetic for checking results: values stay small so every type is exact.
trait Num: Element + PartialEq {
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    const NAME: &'static str;
}

macro_rules! num {
    ($($t:ty, $name:literal, $from:expr, $to:expr;)*) => {$(
        impl Num for $t {
            fn from_f64(v: f64) -> Self { $from(v) }
            fn to_f64(self) -> f64 { $to(self) }
            const NAME: &'static str = $name;
        }
    )*};
}

num! {
    i8, "int8", |v| v as i8, |v| v as f64;
    i16, "int16", |v| v as i16, |v| v as f64;
    i32, "int32", |v| v as i32, |v| v as f64;
    i64, "int64", |v| v as i64, |v| v as f64;
    u8, "uint8", |v| v as u8, |v| v as f64;
    u16, "uint16", |v| v as u16, |v| v as f64;
    u32, "uint32", |v| v as u32, |v| v as f64;
    u64, "uint64", |v| v as u64, |v| v as f64;
    f16, "fp16", f16::from_f64, f16::to_f64;
    bf16, "bf16", bf16::from_f64, bf16::to_f64;
    f32, "fp32", |v| v as f32, |v: f32| v as f64;
    f64, "fp64", |v| v, |v| v;
}

/// Input element `i` of `rank`: small values whose sums and products are exact in every type.
fn input(op: ReduceOp, rank: u32, i: usize) -> f64 {
    match op {
        ReduceOp::Prod if rank == 0 => (1 + i % 2) as f64,
        ReduceOp::Prod => 1.0,
        _ => ((rank as usize + i) % 3) as f64,
    }
}

fn combine(op: ReduceOp, a: f64, b: f64) -> f64 {
    match op {
        ReduceOp::Sum => a + b,
        ReduceOp::Prod => a * b,
        ReduceOp::Max => a.max(b),
        ReduceOp::Min => a.min(b),
    }
}

/// Device memory for one buffer: registered as a window or not.
enum Buffer {
    Registered(Window),
    Plain(Mapping),
}

impl Buffer {
    fn new(comm: &Comm, bytes: u64, registered: bool) -> Result<Self> {
        if registered {
            return Window::allocate(comm, bytes).map(Buffer::Registered);
        }
        let rt = comm.runtime();
        let size = rt.round_to_granularity(bytes, comm.device())?;
        Mapping::allocate(rt, size, comm.device()).map(Buffer::Plain)
    }

    fn ptr(&self) -> DevicePtr {
        match self {
            Buffer::Registered(window) => window.ptr(),
            Buffer::Plain(mapping) => mapping.ptr(),
        }
    }
}

/// Elements per rank in (input, output) for a collective of `count` elements per block.
fn lengths(op: Op, n: usize, count: usize) -> (usize, usize) {
    match op {
        Op::AllReduce => (count, count),
        Op::AllGather => (count, count * n),
        Op::ReduceScatter => (count * n, count),
        Op::AlltoAll => (count * n, count * n),
    }
}

fn expected(op: Op, redop: ReduceOp, n: u32, rank: u32, count: usize) -> Vec<f64> {
    let reduced = |i: usize| {
        (1..n).fold(input(redop, 0, i), |acc, r| {
            combine(redop, acc, input(redop, r, i))
        })
    };
    match op {
        Op::AllReduce => (0..count).map(reduced).collect(),
        Op::ReduceScatter => (0..count)
            .map(|i| reduced(rank as usize * count + i))
            .collect(),
        Op::AllGather => (0..n)
            .flat_map(|p| (0..count).map(move |i| input(redop, p, i)))
            .collect(),
        Op::AlltoAll => (0..n)
            .flat_map(|p| (0..count).map(move |i| input(redop, p, rank as usize * count + i)))
            .collect(),
    }
}

/// Enqueues one collective of `count` elements per block.
fn enqueue<T: Element>(
    args: &Args,
    comm: &Comm,
    stream: &Stream,
    inb: &Buffer,
    outb: &Buffer,
    count: u64,
) -> Result<()> {
    let dt = T::DATA_TYPE;
    // SAFETY: both buffers were sized by `lengths` for this count, and the host touches them
    // only after synchronising the stream.
    unsafe {
        match args.op {
            Op::AllReduce => comm.all_reduce(inb.ptr(), outb.ptr(), count, dt, args.redop, stream),
            Op::AllGather => comm.all_gather(inb.ptr(), outb.ptr(), count, dt, stream),
            Op::ReduceScatter => {
                comm.reduce_scatter(inb.ptr(), outb.ptr(), count, dt, args.redop, stream)
            }
            Op::AlltoAll => comm.all_to_all(inb.ptr(), outb.ptr(), count, dt, stream),
        }
    }
}

/// nccl-tests' bus-bandwidth factor: what each rank must move relative to the data size.
fn bus_factor(op: Op, n: u32) -> f64 {
    let n = f64::from(n);
    match op {
        Op::AllReduce => 2.0 * (n - 1.0) / n,
        _ => (n - 1.0) / n,
    }
}

/// Runs the measurement on `args.ranks` ranks: threads of this process, or (in a rank
/// process started by `main` with `--procs`) this process as one of them.
fn run<T: Num>(args: &Args) -> Result<()> {
    if !launcher::in_a_rank() {
        println!(
            "# symheap coll_perf: {:?} on {} emulated ranks as {}, {}, {:?}, {} memory",
            args.op,
            args.ranks,
            if args.procs { "processes" } else { "threads" },
            T::NAME,
            args.redop,
            if args.registered {
                "window (symmetric path)"
            } else {
                "plain (staging path)"
            }
        );
    }
    if launcher::in_a_rank() {
        let rt = symheap::Runtime::emulated()?;
        let comm = Comm::from_env(&rt, symheap::CommConfig::new())?;
        return measure::<T>(args, &comm);
    }
    symheap::emu::launch(args.ranks, |comm| measure::<T>(args, comm))?;
    Ok(())
}

/// One rank's part: every size, timed; rank 0 prints the rows.
fn measure<T: Num>(args: &Args, comm: &Comm) -> Result<()> {
    let n = args.ranks;
    let size_of = std::mem::size_of::<T>() as u64;
    if comm.rank() == 0 {
        println!(
            "# {:>12} {:>12} {:>7} {:>6} {:>11} {:>12} {:>12} {:>7}",
            "size", "count", "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong"
        );
    }
    let max_elems = (args.max / size_of).max(1) as usize;
    {
        let stream = Stream::new(comm.runtime())?;
        // No input or output is larger than the largest size.
        let inb = Buffer::new(comm, max_elems as u64 * size_of, args.registered)?;
        let outb = Buffer::new(comm, max_elems as u64 * size_of, args.registered)?;
        let mut size = args.min;
        while size <= args.max {
            // "size" is the total data per rank, as in nccl-tests: the larger of input and output.
            let total_elems = (size / size_of).max(1) as usize;
            let count = match args.op {
                Op::AllReduce => total_elems,
                _ => (total_elems / n as usize).max(1),
            };
            let (in_len, out_len) = lengths(args.op, n as usize, count);
            let host_in: Vec<T> = (0..in_len)
                .map(|i| T::from_f64(input(args.redop, comm.rank(), i)))
                .collect();
            // SAFETY: `inb` holds at least `in_len` elements and no work is queued on it.
            unsafe {
                comm.runtime()
                    .copy_to_device(inb.ptr(), T::slice_as_bytes(&host_in))?
            };
            for _ in 0..args.warmup {
                enqueue::<T>(args, comm, &stream, &inb, &outb, count as u64)?;
            }
            comm.barrier(&stream)?;
            comm.synchronize(&stream)?;
            let start = Instant::now();
            for _ in 0..args.iters {
                enqueue::<T>(args, comm, &stream, &inb, &outb, count as u64)?;
            }
            comm.synchronize(&stream)?;
            let per_op = start.elapsed() / args.iters;
            let mut out = vec![T::from_f64(0.0); out_len];
            // SAFETY: `outb` holds `out_len` elements; the stream is synchronised.
            unsafe {
                comm.runtime()
                    .copy_to_host(T::slice_as_bytes_mut(&mut out), outb.ptr())?
            };
            let want = expected(args.op, args.redop, n, comm.rank(), count);
            let wrong = out
                .iter()
                .zip(&want)
                .filter(|(got, want)| got.to_f64() != **want)
                .count();
            if comm.rank() == 0 {
                let bytes = (in_len.max(out_len) as u64 * size_of) as f64;
                let algbw = bytes / per_op.as_secs_f64() / 1e9;
                let redop = if matches!(args.op, Op::AllReduce | Op::ReduceScatter) {
                    format!("{:?}", args.redop).to_lowercase()
                } else {
                    "none".into()
                };
                println!(
                    "  {:>12} {:>12} {:>7} {:>6} {:>11.2} {:>12.2} {:>12.2} {:>7}",
                    bytes as u64,
                    count,
                    T::NAME,
                    redop,
                    per_op.as_secs_f64() * 1e6,
                    algbw,
                    algbw * bus_factor(args.op, n),
                    wrong
                );
            }
            size *= 2;
        }
    }
    Ok(())
}

/// Host memcpy bandwidth in GB/s of `threads` threads each copying `bytes` at once (their
/// aggregate): median of several rounds.
fn memcpy_bandwidth(bytes: usize, threads: usize) -> f64 {
    let mut buffers: Vec<(Vec<u8>, Vec<u8>)> = (0..threads)
        .map(|_| (vec![1u8; bytes], vec![0u8; bytes]))
        .collect();
    let round = |buffers: &mut Vec<(Vec<u8>, Vec<u8>)>| {
        let start = Instant::now();
        std::thread::scope(|scope| {
            for (src, dst) in buffers.iter_mut() {
                scope.spawn(move || dst.copy_from_slice(std::hint::black_box(src)));
            }
        });
        start.elapsed()
    };
    round(&mut buffers); // fault the pages in before timing
    let mut times: Vec<Duration> = (0..9).map(|_| round(&mut buffers)).collect();
    times.sort();
    (bytes * threads) as f64 / times[times.len() / 2].as_secs_f64() / 1e9
}

fn main() -> Result<()> {
    let args = parse_args()?;
    if args.procs && !launcher::in_a_rank() {
        // Ranks as processes: this program again, as each of them.
        let outcome = Job::this_program(args.ranks)?.run()?;
        if !outcome.success() {
            eprintln!("{}", outcome.summary());
            std::process::exit(1);
        }
    } else {
        run_typed(&args)?;
    }
    if launcher::in_a_rank() {
        return Ok(());
    }
    let bytes = args.max.min(1 << 30) as usize;
    // A 2-rank AllReduce of N bytes reads 2N and writes 2N in all, twice a memcpy of N, spread
    // over two threads: its bus bandwidth is at most half the two-thread aggregate below.
    for threads in [1, 2] {
        println!(
            "# host memcpy, {threads} thread(s) of {bytes} bytes each: {:.2} GB/s aggregate",
            memcpy_bandwidth(bytes, threads)
        );
    }
    Ok(())
}

/// [`run`] for the element type `--dtype` names.
fn run_typed(args: &Args) -> Result<()> {
    match args.dtype.as_str() {
        "int8" => run::<i8>(args)?,
        "int16" => run::<i16>(args)?,
        "int32" => run::<i32>(args)?,
        "int64" => run::<i64>(args)?,
        "uint8" => run::<u8>(args)?,
        "uint16" => run::<u16>(args)?,
        "uint32" => run::<u32>(args)?,
        "uint64" => run::<u64>(args)?,
        "fp16" => run::<f16>(args)?,
        "bf16" => run::<bf16>(args)?,
        "fp32" => run::<f32>(args)?,
        "fp64" => run::<f64>(args)?,
        other => return Err(Error::InvalidArgument(format!("unknown dtype {other}"))),
    }
    Ok(())
}
