//! Collective bandwidth in the layout of nccl-tests, on the embedded emulator.
//!
//! ```sh
//! cargo run --release --example coll_perf -- -b 1K -e 64M -f 2 -d float -o sum --ranks 2
//! cargo run --release --example coll_perf -- --op alltoallv --procs 4 -b 64K -e 16M
//! ```
//!
//! The flags are nccl-tests' where it has them: `-b/--minbytes`, `-e/--maxbytes`,
//! `-f/--stepfactor` (multiply the size by this each row), `-i/--stepbytes` (add this instead;
//! used when no factor above 1 is given), `-n/--iters`, `-w/--warmup_iters`, `-o/--op` (the
//! reduction: sum, prod, max, min), `-d/--datatype` (nccl-tests' names: int8, uint8, int32,
//! uint32, int64, uint64, half, bfloat16, float, double; and int16, uint16, fp16, bf16, fp32,
//! fp64), `-r/--root` (of Reduce), `-c/--check` (0 skips validation). nccl-tests picks the
//! collective by program; here `--coll` does: allreduce (default), allgather, reducescatter,
//! alltoall, alltoallv, allgatherv, reducescatterv, reduce. `-o/--op` also accepts a collective
//! name, as this program's `--op` always has. Older long flags still work: `--min`, `--max`,
//! `--iters`, `--warmup`, `--dtype`, `--redop`. Ranks: `--ranks N` (threads of this process)
//! or `--procs N` (processes); `--memory window` registers the buffers as symmetric windows
//! (the zero-copy path, default), `--memory plain` leaves them unregistered, so data stages
//! through the HCCL buffer. The defaults differ from nccl-tests' (`-b 32M -e 32M -i 1M`):
//! `-b 1K -e 64M -f 2`, a sweep.
//!
//! Output, as nccl-tests prints it: a header line with the run's parameters, one line per
//! rank with its pid and device, then per size the out-of-place and in-place column groups
//! `time algbw busbw #wrong`, and closing lines with the count of wrong values and the average
//! bus bandwidth. Then, after the table, the host's memcpy bandwidth with one thread and with
//! two (aggregate), measured in the same run: the ceiling a host emulator can approach.
//!
//! - `size` is the larger of one rank's input and output in bytes, `count` that in elements.
//! - `time` is the average over ranks of each rank's mean time per operation (nccl-tests'
//!   default `-a 1`); `algbw = size / time`; `busbw = algbw * factor`, with nccl-tests'
//!   factors (its `PERFORMANCE.md`): AllReduce `2(n-1)/n`; AllGather, ReduceScatter, AlltoAll
//!   and their vector forms `(n-1)/n`; Reduce 1. For AlltoAllV that is `(n-1)/n` of the total
//!   bytes, as nccl-tests counts AlltoAll (the split below keeps every rank's total the same).
//!   For the uneven splits the factor is nominal: the share a rank keeps for itself is not
//!   `1/n` (with 4 ranks, AlltoAllV's ranks keep 1, 3, 1 and 3 tenths), so the bytes that
//!   really cross the links differ a little from `busbw`.
//! - `#wrong` counts the output elements, on every rank, that differ from a host computation
//!   (after a fresh input, one more operation), and is `N/A` with `-c 0`.
//! - In-place columns are measured where HCCL allows the output to be the input (AllReduce);
//!   every other collective shows `N/A` there: HCCL requires `recvBuf != sendBuf` for the
//!   V collectives and documents no in-place form for the others.
//!
//! The V collectives split the size unevenly. With `W = n(n+1)/2` and a unit
//! `u = max(1, elements / W)`: AlltoAllV's rank `r` sends peer `p` `u * ((r + p) % n + 1)`
//! elements (shares 1 to n of W, different for every pair, and every rank sends and receives
//! `u * W` in all); AllGatherV's rank `p` contributes, and ReduceScatterV's rank `p` receives,
//! `u * (p + 1)`. Displacements are packed.

use std::time::{Duration, Instant};

use half::{bf16, f16};
use symheap::raw::{DevicePtr, Mapping, Window};
use symheap::{Comm, Element, ReduceOp, Stream};
use symheap::{Error, Result};
use symheap_tools::launcher::{self, Job};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Coll {
    AllReduce,
    AllGather,
    ReduceScatter,
    AlltoAll,
    AlltoAllV,
    AllGatherV,
    ReduceScatterV,
    Reduce,
}

impl Coll {
    const ALL: [(&'static str, Coll); 8] = [
        ("allreduce", Coll::AllReduce),
        ("allgather", Coll::AllGather),
        ("reducescatter", Coll::ReduceScatter),
        ("alltoall", Coll::AlltoAll),
        ("alltoallv", Coll::AlltoAllV),
        ("allgatherv", Coll::AllGatherV),
        ("reducescatterv", Coll::ReduceScatterV),
        ("reduce", Coll::Reduce),
    ];

    fn parse(name: &str) -> Option<Coll> {
        let name = name.to_ascii_lowercase().replace(['_', '-'], "");
        Coll::ALL.iter().find(|(n, _)| *n == name).map(|&(_, c)| c)
    }

    fn name(self) -> &'static str {
        Coll::ALL.iter().find(|(_, c)| *c == self).unwrap().0
    }

    /// Whether the collective reduces (so its inputs must keep reductions exact).
    fn reduces(self) -> bool {
        matches!(
            self,
            Coll::AllReduce | Coll::ReduceScatter | Coll::ReduceScatterV | Coll::Reduce
        )
    }

    /// Whether HCCL reads windows for it (`IsSupportSymmetricMemory`): the others stage even
    /// on window memory.
    fn may_be_symmetric(self) -> bool {
        matches!(
            self,
            Coll::AllReduce | Coll::AllGather | Coll::ReduceScatter | Coll::AlltoAll
        )
    }

    /// Whether HCCL allows the output to be the input.
    fn has_in_place(self) -> bool {
        self == Coll::AllReduce
    }

    /// nccl-tests' bus-bandwidth factor: what each rank must move relative to the data size.
    fn bus_factor(self, n: u32) -> f64 {
        let n = f64::from(n);
        match self {
            Coll::AllReduce => 2.0 * (n - 1.0) / n,
            Coll::Reduce => 1.0,
            _ => (n - 1.0) / n,
        }
    }
}

fn parse_redop(name: &str) -> Option<ReduceOp> {
    match name {
        "sum" => Some(ReduceOp::Sum),
        "prod" => Some(ReduceOp::Prod),
        "max" => Some(ReduceOp::Max),
        "min" => Some(ReduceOp::Min),
        _ => None,
    }
}

#[derive(Clone, Debug)]
struct Args {
    coll: Coll,
    ranks: u32,
    dtype: String,
    redop: ReduceOp,
    root: u32,
    min: u64,
    max: u64,
    /// Multiply the size by this each row, when above 1; else add `step_bytes`.
    factor: u64,
    step_bytes: u64,
    iters: u32,
    warmup: u32,
    check: bool,
    registered: bool,
    /// Ranks as processes (`--procs N`) rather than threads (`--ranks N`).
    procs: bool,
}

const HELP: &str = "coll_perf [--coll COLL] [-b/--minbytes SIZE] [-e/--maxbytes SIZE] \
[-f/--stepfactor N] [-i/--stepbytes SIZE] [-n/--iters N] [-w/--warmup_iters N] \
[-o/--op sum|prod|max|min|COLL] [-d/--datatype TYPE] [-r/--root N] [-c/--check 0|1] \
[--ranks N | --procs N] [--memory window|plain]
COLL: allreduce allgather reducescatter alltoall alltoallv allgatherv reducescatterv reduce
TYPE: int8 uint8 int16 uint16 int32 uint32 int64 uint64 half/fp16 bfloat16/bf16 float/fp32 double/fp64";

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
    n.checked_mul(1 << shift)
        .ok_or_else(|| Error::InvalidArgument(format!("size {s} overflows")))
}

fn parse_number<N: std::str::FromStr>(flag: &str, value: &str) -> Result<N> {
    value
        .parse()
        .map_err(|_| Error::InvalidArgument(format!("bad {flag} {value}")))
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        coll: Coll::AllReduce,
        ranks: 2,
        dtype: "float".into(),
        redop: ReduceOp::Sum,
        root: 0,
        min: 1 << 10,
        max: 64 << 20,
        factor: 2,
        step_bytes: 1 << 20,
        iters: 20,
        warmup: 5,
        check: true,
        registered: true,
        procs: false,
    };
    let (mut factor, mut step_bytes) = (None, None);
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        // `--flag=value` as well as `--flag value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| Error::InvalidArgument(format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--coll" => {
                let v = value()?;
                args.coll = Coll::parse(&v)
                    .ok_or_else(|| Error::InvalidArgument(format!("unknown collective {v}")))?;
            }
            "-o" | "--op" => {
                let v = value()?;
                if let Some(op) = parse_redop(&v) {
                    args.redop = op;
                } else if let Some(coll) = Coll::parse(&v) {
                    args.coll = coll;
                } else {
                    return Err(Error::InvalidArgument(format!(
                        "{flag} is a reduction (sum, prod, max, min) or a collective, not {v}"
                    )));
                }
            }
            "--redop" => {
                let v = value()?;
                args.redop = parse_redop(&v)
                    .ok_or_else(|| Error::InvalidArgument(format!("unknown reduction {v}")))?;
            }
            "--ranks" | "--procs" => {
                args.ranks = parse_number(&flag, &value()?)?;
                args.procs = flag == "--procs";
            }
            "-d" | "--datatype" | "--dtype" => args.dtype = value()?,
            "-b" | "--minbytes" | "--min" => args.min = parse_size(&value()?)?,
            "-e" | "--maxbytes" | "--max" => args.max = parse_size(&value()?)?,
            "-f" | "--stepfactor" => factor = Some(parse_number(&flag, &value()?)?),
            "-i" | "--stepbytes" => step_bytes = Some(parse_size(&value()?)?),
            "-n" | "--iters" => args.iters = parse_number(&flag, &value()?)?,
            "-w" | "--warmup_iters" | "--warmup" => args.warmup = parse_number(&flag, &value()?)?,
            "-r" | "--root" => args.root = parse_number(&flag, &value()?)?,
            "-c" | "--check" => args.check = parse_number::<u32>(&flag, &value()?)? != 0,
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
                println!("{HELP}");
                std::process::exit(0);
            }
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown flag {other}; try --help"
                )));
            }
        }
    }
    // As nccl-tests: a factor above 1 multiplies; otherwise (or with only -i given) the step
    // bytes are added.
    match (factor, step_bytes) {
        (Some(f), _) if f > 1 => args.factor = f,
        (None, None) => {}
        (_, bytes) => {
            args.factor = 1;
            args.step_bytes = bytes.unwrap_or(args.step_bytes);
        }
    }
    if args.ranks == 0
        || args.min == 0
        || args.min > args.max
        || args.iters == 0
        || (args.factor <= 1 && args.step_bytes == 0)
    {
        return Err(Error::InvalidArgument(
            "need ranks >= 1, 0 < minbytes <= maxbytes, iters >= 1, stepbytes >= 1".into(),
        ));
    }
    if args.root >= args.ranks {
        return Err(Error::InvalidArgument(format!(
            "root {} is not one of the {} ranks",
            args.root, args.ranks
        )));
    }
    Ok(args)
}

/// Host-side arithmetic for checking results: values stay small so every type is exact.
trait Num: Element + PartialEq {
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    /// The name nccl-tests prints.
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
    f16, "half", f16::from_f64, f16::to_f64;
    bf16, "bfloat16", bf16::from_f64, bf16::to_f64;
    f32, "float", |v| v as f32, |v: f32| v as f64;
    f64, "double", |v| v, |v| v;
}

/// Input element `i` of `rank`: for a reduction, small values whose sums and products are
/// exact in every type; for data movement, values that differ between ranks and positions.
fn input(coll: Coll, op: ReduceOp, rank: u32, i: usize) -> f64 {
    if !coll.reduces() {
        return ((rank as usize * 31 + i) % 97) as f64;
    }
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

fn packed(counts: &[u64]) -> Vec<u64> {
    counts
        .iter()
        .scan(0, |next, &c| {
            *next += c;
            Some(*next - c)
        })
        .collect()
}

/// One rank's part of one size: buffer lengths, the scalar count, the vector arrays.
#[derive(Debug, Default)]
struct Plan {
    in_len: usize,
    out_len: usize,
    /// The scalar count argument (per block, or in all).
    count: u64,
    send_counts: Vec<u64>,
    send_displs: Vec<u64>,
    recv_counts: Vec<u64>,
    recv_displs: Vec<u64>,
}

/// AlltoAllV's split: rank `from` sends rank `to` this many units.
fn a2av_share(from: u32, to: u32, n: u32) -> u64 {
    u64::from((from + to) % n + 1)
}

fn plan(coll: Coll, n: u32, rank: u32, elems: u64) -> Plan {
    let nu = n as usize;
    let block = (elems / u64::from(n)).max(1);
    let unit = (elems / (u64::from(n) * u64::from(n + 1) / 2)).max(1);
    let v_counts: Vec<u64> = (1..=u64::from(n)).map(|s| unit * s).collect();
    let v_total: u64 = v_counts.iter().sum();
    let mut p = Plan::default();
    match coll {
        Coll::AllReduce | Coll::Reduce => {
            p.count = elems;
            (p.in_len, p.out_len) = (elems as usize, elems as usize);
        }
        Coll::AllGather => {
            p.count = block;
            (p.in_len, p.out_len) = (block as usize, block as usize * nu);
        }
        Coll::ReduceScatter => {
            p.count = block;
            (p.in_len, p.out_len) = (block as usize * nu, block as usize);
        }
        Coll::AlltoAll => {
            p.count = block;
            (p.in_len, p.out_len) = (block as usize * nu, block as usize * nu);
        }
        Coll::AlltoAllV => {
            p.send_counts = (0..n).map(|q| unit * a2av_share(rank, q, n)).collect();
            p.recv_counts = (0..n).map(|q| unit * a2av_share(q, rank, n)).collect();
            (p.send_displs, p.recv_displs) = (packed(&p.send_counts), packed(&p.recv_counts));
            p.in_len = p.send_counts.iter().sum::<u64>() as usize;
            p.out_len = p.recv_counts.iter().sum::<u64>() as usize;
        }
        Coll::AllGatherV => {
            p.count = v_counts[rank as usize];
            (p.recv_displs, p.recv_counts) = (packed(&v_counts), v_counts);
            (p.in_len, p.out_len) = (p.count as usize, v_total as usize);
        }
        Coll::ReduceScatterV => {
            p.count = v_counts[rank as usize];
            (p.send_displs, p.send_counts) = (packed(&v_counts), v_counts);
            (p.in_len, p.out_len) = (v_total as usize, p.count as usize);
        }
    }
    p
}

/// What rank `rank`'s output must hold; `None` where it is unspecified (Reduce off the root).
fn expected(args: &Args, n: u32, rank: u32, p: &Plan) -> Option<Vec<f64>> {
    let (coll, op) = (args.coll, args.redop);
    let at = |r: u32, i: usize| input(coll, op, r, i);
    let reduced = |i: usize| (1..n).fold(at(0, i), |acc, r| combine(op, acc, at(r, i)));
    let block = p.count as usize;
    Some(match coll {
        Coll::AllReduce => (0..p.out_len).map(reduced).collect(),
        Coll::Reduce if rank != args.root => return None,
        Coll::Reduce => (0..p.out_len).map(reduced).collect(),
        Coll::ReduceScatter => (0..block)
            .map(|i| reduced(rank as usize * block + i))
            .collect(),
        Coll::AllGather => (0..n)
            .flat_map(|q| (0..block).map(move |i| at(q, i)))
            .collect(),
        Coll::AlltoAll => (0..n)
            .flat_map(|q| (0..block).map(move |i| at(q, rank as usize * block + i)))
            .collect(),
        Coll::AlltoAllV => (0..n)
            .flat_map(|q| {
                // Where rank q's block for us starts in its input.
                let unit = p.recv_counts[q as usize] / a2av_share(q, rank, n);
                let start: u64 = (0..rank).map(|t| unit * a2av_share(q, t, n)).sum();
                (0..p.recv_counts[q as usize]).map(move |k| at(q, (start + k) as usize))
            })
            .collect(),
        Coll::AllGatherV => (0..n as usize)
            .flat_map(|q| (0..p.recv_counts[q] as usize).map(move |k| at(q as u32, k)))
            .collect(),
        Coll::ReduceScatterV => {
            let start = p.send_displs[rank as usize] as usize;
            (0..block).map(|k| reduced(start + k)).collect()
        }
    })
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

    fn write<T: Element>(&self, comm: &Comm, data: &[T]) -> Result<()> {
        // SAFETY: callers size the buffer for `data` and synchronise the stream first.
        unsafe {
            comm.runtime()
                .raw()
                .copy_to_device(self.ptr(), T::slice_as_bytes(data))
        }
    }

    fn read<T: Num>(&self, comm: &Comm, len: usize) -> Result<Vec<T>> {
        let mut out = vec![T::from_f64(0.0); len];
        // SAFETY: as for `write`.
        unsafe {
            comm.runtime()
                .raw()
                .copy_to_host(T::slice_as_bytes_mut(&mut out), self.ptr())?
        };
        Ok(out)
    }
}

/// Enqueues one operation of `plan`, from `send` into `recv` (the same buffer in place).
fn enqueue<T: Element>(
    args: &Args,
    comm: &Comm,
    stream: &Stream,
    send: DevicePtr,
    recv: DevicePtr,
    p: &Plan,
) -> Result<()> {
    let (dt, op, count) = (T::DATA_TYPE.into(), args.redop, p.count);
    // SAFETY: both buffers were sized for the largest plan, and the host touches them only
    // after synchronising the stream.
    unsafe {
        match args.coll {
            Coll::AllReduce => comm.raw().all_reduce(send, recv, count, dt, op, stream),
            Coll::AllGather => comm.raw().all_gather(send, recv, count, dt, stream),
            Coll::ReduceScatter => comm.raw().reduce_scatter(send, recv, count, dt, op, stream),
            Coll::AlltoAll => comm.raw().all_to_all(send, recv, count, dt, stream),
            Coll::Reduce => comm
                .raw()
                .reduce(send, recv, count, dt, op, args.root, stream),
            Coll::AlltoAllV => comm.raw().all_to_all_v(
                send,
                &p.send_counts,
                &p.send_displs,
                recv,
                &p.recv_counts,
                &p.recv_displs,
                dt,
                stream,
            ),
            Coll::AllGatherV => comm.raw().all_gather_v(
                send,
                count,
                recv,
                &p.recv_counts,
                &p.recv_displs,
                dt,
                stream,
            ),
            Coll::ReduceScatterV => comm.raw().reduce_scatter_v(
                send,
                &p.send_counts,
                &p.send_displs,
                recv,
                count,
                dt,
                op,
                stream,
            ),
        }
    }
}

/// One column group's result on this rank: seconds per operation and wrong elements.
#[derive(Clone, Copy, Default)]
struct Measured {
    seconds: f64,
    wrong: u64,
}

/// Sums `values` over the ranks (an AllReduce of `f64`s through `buf`).
fn sum_over_ranks(comm: &Comm, stream: &Stream, buf: &Buffer, values: &[f64]) -> Result<Vec<f64>> {
    buf.write(comm, values)?;
    let n = values.len() as u64;
    // SAFETY: the buffer holds `values`; synchronised before the host reads it.
    unsafe {
        comm.raw().all_reduce(
            buf.ptr(),
            buf.ptr(),
            n,
            f64::DATA_TYPE.into(),
            ReduceOp::Sum,
            stream,
        )?
    };
    comm.synchronize(stream)?;
    buf.read::<f64>(comm, values.len())
}

/// The nccl-tests header: the run's parameters, then a line per rank.
fn print_header<T: Num>(args: &Args, comm: &Comm, stream: &Stream, scratch: &Buffer) -> Result<()> {
    let n = args.ranks;
    let mut mine = vec![0.0; 2 * n as usize];
    mine[2 * comm.rank() as usize] = f64::from(std::process::id());
    mine[2 * comm.rank() as usize + 1] = f64::from(comm.device());
    let ids = sum_over_ranks(comm, stream, scratch, &mine)?;
    if comm.rank() != 0 {
        return Ok(());
    }
    let step = if args.factor > 1 {
        format!("{}(factor)", args.factor)
    } else {
        format!("{}(bytes)", args.step_bytes)
    };
    println!(
        "# nThread 1 nGpus 1 minBytes {} maxBytes {} step: {step} warmup iters: {} iters: {} \
         agg iters: 1 validation: {} graph: 0",
        args.min,
        args.max,
        args.warmup,
        args.iters,
        u8::from(args.check)
    );
    println!(
        "# symheap coll_perf: {} on {n} emulated ranks as {}, {} memory",
        args.coll.name(),
        if args.procs { "processes" } else { "threads" },
        match (args.registered, args.coll.may_be_symmetric()) {
            (true, true) => "window (symmetric path)",
            (true, false) => "window (staging path: HCCL uses no windows for it)",
            (false, _) => "plain (staging path)",
        }
    );
    println!("#");
    println!("# Using devices");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    for r in 0..n as usize {
        println!(
            "#  Rank {r:>2} Group  0 Pid {:>6} on {:>10} device {:>2} [emulated] symheap emulator",
            ids[2 * r],
            host.trim(),
            ids[2 * r + 1]
        );
    }
    println!("#");
    println!(
        "# {:>10} {:>12} {:>8} {:>6} {:>6}   {:^29}   {:^29}",
        "", "", "", "", "", "out-of-place", "in-place"
    );
    println!(
        "# {:>10} {:>12} {:>8} {:>6} {:>6}   {:>8} {:>7} {:>7} {:>6}   {:>8} {:>7} {:>7} {:>6}",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong"
    );
    println!(
        "# {:>10} {:>12} {:>8} {:>6} {:>6}   {:>8} {:>7} {:>7} {:>6}   {:>8} {:>7} {:>7} {:>6}",
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        ""
    );
    Ok(())
}

/// Runs the measurement on `args.ranks` ranks: threads of this process, or (in a rank
/// process started by `main` with `--procs`) this process as one of them.
fn run<T: Num>(args: &Args) -> Result<()> {
    if launcher::in_a_rank() {
        let rt = symheap::Runtime::emulated()?;
        let comm = Comm::from_env(&rt, symheap::CommConfig::new())?;
        return measure::<T>(args, &comm);
    }
    symheap::emu::launch(args.ranks, |comm| measure::<T>(args, comm))?;
    Ok(())
}

/// Times `args.iters` operations (after the warm-up), then checks one on a fresh input.
fn measure_one<T: Num>(
    args: &Args,
    comm: &Comm,
    stream: &Stream,
    (inb, outb): (&Buffer, &Buffer),
    p: &Plan,
) -> Result<Measured> {
    let host_in: Vec<T> = (0..p.in_len)
        .map(|i| T::from_f64(input(args.coll, args.redop, comm.rank(), i)))
        .collect();
    let (send, recv) = (inb.ptr(), outb.ptr());
    inb.write(comm, &host_in)?;
    for _ in 0..args.warmup {
        enqueue::<T>(args, comm, stream, send, recv, p)?;
    }
    comm.barrier(stream)?;
    comm.synchronize(stream)?;
    let start = Instant::now();
    for _ in 0..args.iters {
        enqueue::<T>(args, comm, stream, send, recv, p)?;
    }
    comm.synchronize(stream)?;
    let seconds = start.elapsed().as_secs_f64() / f64::from(args.iters);
    if !args.check {
        return Ok(Measured { seconds, wrong: 0 });
    }
    // In place, the timed operations changed the input: check one on a fresh copy.
    inb.write(comm, &host_in)?;
    enqueue::<T>(args, comm, stream, send, recv, p)?;
    comm.synchronize(stream)?;
    let wrong = match expected(args, args.ranks, comm.rank(), p) {
        None => 0,
        Some(want) => {
            let got = outb.read::<T>(comm, p.out_len)?;
            got.iter()
                .zip(&want)
                .filter(|(got, want)| got.to_f64() != **want)
                .count() as u64
        }
    };
    Ok(Measured { seconds, wrong })
}

/// One rank's part: every size, timed; rank 0 prints the rows.
fn measure<T: Num>(args: &Args, comm: &Comm) -> Result<()> {
    let n = args.ranks;
    let size_of = std::mem::size_of::<T>() as u64;
    let stream = Stream::new(comm.runtime())?;
    let scratch = Buffer::new(comm, 16 * u64::from(n) + 64, true)?;
    print_header::<T>(args, comm, &stream, &scratch)?;
    // No input or output holds more than the largest size, plus the vector splits' rounding
    // up to whole units.
    let max_elems = (args.max / size_of).max(1) + u64::from(n) * u64::from(n + 1);
    let inb = Buffer::new(comm, max_elems * size_of, args.registered)?;
    let outb = Buffer::new(comm, max_elems * size_of, args.registered)?;
    let (mut wrong_total, mut busbw_sum, mut busbw_rows) = (0u64, 0.0, 0u32);
    let (mut size, mut last_bytes) = (args.min, 0);
    while size <= args.max {
        let p = plan(args.coll, n, comm.rank(), (size / size_of).max(1));
        let bytes = p.in_len.max(p.out_len) as u64 * size_of;
        let next = if args.factor > 1 {
            size.saturating_mul(args.factor)
        } else {
            size.saturating_add(args.step_bytes)
        };
        // Small sizes of the V collectives round up to whole units: one row per size.
        if bytes == last_bytes {
            size = next;
            continue;
        }
        last_bytes = bytes;
        let out_of_place = measure_one::<T>(args, comm, &stream, (&inb, &outb), &p)?;
        let in_place = if args.coll.has_in_place() {
            Some(measure_one::<T>(args, comm, &stream, (&inb, &inb), &p)?)
        } else {
            None
        };
        // nccl-tests' default (-a 1): the time averaged over ranks; wrong values summed.
        let ip = in_place.unwrap_or_default();
        let sums = sum_over_ranks(
            comm,
            &stream,
            &scratch,
            &[
                out_of_place.seconds,
                out_of_place.wrong as f64,
                ip.seconds,
                ip.wrong as f64,
            ],
        )?;
        let mut columns = Vec::new();
        for (present, seconds, wrong) in [
            (true, sums[0] / f64::from(n), sums[1] as u64),
            (in_place.is_some(), sums[2] / f64::from(n), sums[3] as u64),
        ] {
            if !present {
                columns.push(format!(
                    "{:>8} {:>7} {:>7} {:>6}",
                    "N/A", "N/A", "N/A", "N/A"
                ));
                continue;
            }
            let algbw = bytes as f64 / seconds / 1e9;
            let busbw = algbw * args.coll.bus_factor(n);
            busbw_sum += busbw;
            busbw_rows += 1;
            wrong_total += wrong;
            let wrong = if args.check {
                wrong.to_string()
            } else {
                "N/A".into()
            };
            columns.push(format!(
                "{:>8.2} {:>7.2} {:>7.2} {:>6}",
                seconds * 1e6,
                algbw,
                busbw,
                wrong
            ));
        }
        if comm.rank() == 0 {
            let redop = if args.coll.reduces() {
                format!("{:?}", args.redop).to_lowercase()
            } else {
                "none".into()
            };
            let root = if args.coll == Coll::Reduce {
                i64::from(args.root)
            } else {
                -1
            };
            println!(
                "  {bytes:>10} {:>12} {:>8} {redop:>6} {root:>6}   {}   {}",
                bytes / size_of,
                T::NAME,
                columns[0],
                columns[1]
            );
        }
        size = next;
    }
    if comm.rank() == 0 {
        let verdict = if wrong_total == 0 { "OK" } else { "FAILED" };
        println!("# Out of bounds values : {wrong_total} {verdict}");
        println!(
            "# Avg bus bandwidth    : {:.6} ",
            busbw_sum / f64::from(busbw_rows.max(1))
        );
        println!("#");
    }
    if wrong_total != 0 {
        return Err(Error::InvalidArgument(format!(
            "{wrong_total} wrong values in the results"
        )));
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

/// [`run`] for the element type `--datatype` names.
fn run_typed(args: &Args) -> Result<()> {
    match args.dtype.as_str() {
        "int8" => run::<i8>(args)?,
        "int16" => run::<i16>(args)?,
        "int32" | "int" => run::<i32>(args)?,
        "int64" => run::<i64>(args)?,
        "uint8" => run::<u8>(args)?,
        "uint16" => run::<u16>(args)?,
        "uint32" => run::<u32>(args)?,
        "uint64" => run::<u64>(args)?,
        "half" | "fp16" => run::<f16>(args)?,
        "bfloat16" | "bf16" => run::<bf16>(args)?,
        "float" | "fp32" => run::<f32>(args)?,
        "double" | "fp64" => run::<f64>(args)?,
        other => return Err(Error::InvalidArgument(format!("unknown datatype {other}"))),
    }
    Ok(())
}
