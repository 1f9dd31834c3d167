//! The runtime's collective wrappers (`Comm::all_reduce` & co.): each passes its buffers,
//! count, element type and reduction through to its C function, for every element type.
//!
//! What the collectives compute for every type, op, count, rank count and path, and how they
//! fail (asymmetric offsets, mismatched calls, missing peers), is the emulator's behaviour and
//! is tested once, at its layer: `src/emu/collective/tests.rs`.

use symheap::emu::launch;
use symheap::runtime::{Comm, ReduceOp, Stream};
use symheap::{Element, Result};

use crate::harness::{DeviceBuf, Elem, EmuSession};

/// Elements per rank (and per block): more than one, so counts per rank and in total differ.
const COUNT: usize = 5;

fn fill<T: Elem>(v: i64) -> Vec<T> {
    vec![T::from_i64(v); COUNT]
}

/// Every rank's input is made of blocks of one value; the expected outputs follow from
/// `n` and the rank alone (small integers, exact in every type).
pub(crate) fn every_wrapper<T: Elem>(
    comm: &Comm,
    stream: &Stream,
    inb: &DeviceBuf,
    outb: &DeviceBuf,
) -> Result<()> {
    let (r, n) = (i64::from(comm.rank()), comm.size());
    let (c, dt, blocks) = (COUNT as u64, T::DATA_TYPE, n as usize * COUNT);
    let factorial: i64 = (1..=i64::from(n)).product();
    let sum = i64::from(n) * (i64::from(n) + 1) / 2;
    // AllReduce: rank r contributes r + 1.
    for (op, want) in [
        (ReduceOp::Sum, sum),
        (ReduceOp::Prod, factorial),
        (ReduceOp::Max, i64::from(n)),
        (ReduceOp::Min, 1),
    ] {
        inb.write(comm, 0, &fill::<T>(r + 1))?;
        // SAFETY: both buffers hold COUNT elements; synchronised before the host reads.
        unsafe { comm.all_reduce(inb.ptr(), outb.ptr(), c, dt, op, stream)? };
        comm.synchronize(stream)?;
        assert_eq!(
            outb.read::<T>(comm, 0, COUNT)?,
            fill::<T>(want),
            "AllReduce {op:?}"
        );
    }
    // ReduceScatter (max): block p of rank r's input is (p + 1) * (r + 1); rank r gets block r.
    let input: Vec<T> = (0..blocks)
        .map(|i| T::from_i64(((i / COUNT) as i64 + 1) * (r + 1)))
        .collect();
    inb.write(comm, 0, &input)?;
    // SAFETY: input holds n blocks, output one.
    unsafe { comm.reduce_scatter(inb.ptr(), outb.ptr(), c, dt, ReduceOp::Max, stream)? };
    comm.synchronize(stream)?;
    let want = (r + 1) * i64::from(n);
    assert_eq!(
        outb.read::<T>(comm, 0, COUNT)?,
        fill::<T>(want),
        "ReduceScatter"
    );
    // AllGather: rank r contributes r + 1; block p of the output is p + 1.
    inb.write(comm, 0, &fill::<T>(r + 1))?;
    // SAFETY: input holds one block, output n.
    unsafe { comm.all_gather(inb.ptr(), outb.ptr(), c, dt, stream)? };
    comm.synchronize(stream)?;
    let want: Vec<T> = (0..blocks)
        .map(|i| T::from_i64((i / COUNT) as i64 + 1))
        .collect();
    assert_eq!(outb.read::<T>(comm, 0, blocks)?, want, "AllGather");
    // AlltoAll: block p of rank r's input is r * n + p, so block p of its output is p * n + r.
    let block = |rank: i64, p: usize| rank * i64::from(n) + p as i64;
    let input: Vec<T> = (0..blocks)
        .map(|i| T::from_i64(block(r, i / COUNT)))
        .collect();
    inb.write(comm, 0, &input)?;
    // SAFETY: both buffers hold n blocks.
    unsafe { comm.all_to_all(inb.ptr(), outb.ptr(), c, dt, stream)? };
    comm.synchronize(stream)?;
    let want: Vec<T> = (0..blocks)
        .map(|i| T::from_i64(block((i / COUNT) as i64, r as usize)))
        .collect();
    assert_eq!(outb.read::<T>(comm, 0, blocks)?, want, "AlltoAll");
    // Broadcast from the last rank: rank r writes r + 1, everyone gets n.
    inb.write(comm, 0, &fill::<T>(r + 1))?;
    // SAFETY: the buffer holds COUNT elements.
    unsafe { comm.broadcast(inb.ptr(), c, dt, n - 1, stream)? };
    comm.synchronize(stream)?;
    assert_eq!(
        inb.read::<T>(comm, 0, COUNT)?,
        fill::<T>(i64::from(n)),
        "Broadcast"
    );
    comm.barrier(stream)?;
    comm.synchronize(stream)
}

#[test]
fn every_wrapper_passes_its_arguments_for_every_element_type() {
    let session = EmuSession::start();
    launch(3, |comm| {
        let stream = Stream::new(comm.runtime())?;
        let input = DeviceBuf::new(comm, 1, true)?;
        let output = DeviceBuf::new(comm, 1, true)?;
        crate::for_each_elem!(T => every_wrapper::<T>(comm, &stream, &input, &output)?);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn work_queued_after_a_copy_sees_its_result() {
    let session = EmuSession::start();
    launch(2, |comm| {
        let stream = Stream::new(comm.runtime())?;
        let source = DeviceBuf::new(comm, 1 << 18, false)?;
        let data = DeviceBuf::new(comm, 1 << 18, true)?;
        let ones = vec![1.0f32; 1 << 16];
        source.write(comm, 0, &ones)?;
        data.write(comm, 0, &vec![0.0f32; 1 << 16])?;
        // SAFETY: both buffers hold 256 KiB; synchronised below before any host access.
        unsafe {
            stream.copy_device_async(data.ptr(), source.ptr(), 1 << 18)?;
            comm.all_reduce(
                data.ptr(),
                data.ptr(),
                1 << 16,
                f32::DATA_TYPE,
                ReduceOp::Sum,
                &stream,
            )?;
        }
        comm.synchronize(&stream)?;
        let got = data.read::<f32>(comm, 0, 1 << 16)?;
        assert!(
            got.iter().all(|&x| x == 2.0),
            "the collective ran before the copy"
        );
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}
