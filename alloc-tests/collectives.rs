//! The raw layer's collectives (`RawComm::all_reduce` & co., `comm.raw()`): each passes its buffers,
//! count, element type and reduction through to its C function, for every element type.
//!
//! What the collectives compute for every type, op, count, rank count and path, and how they
//! fail (asymmetric offsets, mismatched calls, missing peers), is the emulator's behaviour and
//! is tested once, at its layer: `symheap-emu/src/hccl/collective/tests.rs`.
//! `every_vector_wrapper` does the same for the V collectives (AllGatherV, ReduceScatterV,
//! AlltoAllV).

use symheap::emu::launch;
use symheap::sys::{HcclSendRecvItem, HcclSendRecvType};
use symheap::{Comm, ReduceOp, Stream};
use symheap::{Element, Error, Result};

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
    let (r, n) = (i64::from(comm.rank()), comm.rank_count());
    let (c, dt, blocks) = (COUNT as u64, T::DATA_TYPE.into(), n as usize * COUNT);
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
        unsafe {
            comm.raw()
                .all_reduce(inb.ptr(), outb.ptr(), c, dt, op, stream)?
        };
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
    unsafe {
        comm.raw()
            .reduce_scatter(inb.ptr(), outb.ptr(), c, dt, ReduceOp::Max, stream)?
    };
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
    unsafe {
        comm.raw()
            .all_gather(inb.ptr(), outb.ptr(), c, dt, stream)?
    };
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
    unsafe {
        comm.raw()
            .all_to_all(inb.ptr(), outb.ptr(), c, dt, stream)?
    };
    comm.synchronize(stream)?;
    let want: Vec<T> = (0..blocks)
        .map(|i| T::from_i64(block((i / COUNT) as i64, r as usize)))
        .collect();
    assert_eq!(outb.read::<T>(comm, 0, blocks)?, want, "AlltoAll");
    // Broadcast from the last rank: rank r writes r + 1, everyone gets n.
    inb.write(comm, 0, &fill::<T>(r + 1))?;
    // SAFETY: the buffer holds COUNT elements.
    unsafe { comm.raw().broadcast(inb.ptr(), c, dt, n - 1, stream)? };
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
            stream
                .raw()
                .copy_device_async(data.ptr(), source.ptr(), 1 << 18)?;
            comm.raw().all_reduce(
                data.ptr(),
                data.ptr(),
                1 << 16,
                f32::DATA_TYPE.into(),
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

/// The vector, rooted and point-to-point wrappers (issue 9): each passes its arrays, counts,
/// root or peer through to its C function. Rank `r`'s inputs are small integers, exact in
/// every type; every output is checked element by element.
pub(crate) fn every_vector_wrapper<T: Elem>(
    comm: &Comm,
    stream: &Stream,
    inb: &DeviceBuf,
    outb: &DeviceBuf,
) -> Result<()> {
    let (r, n) = (comm.rank() as usize, comm.rank_count() as usize);
    let dt = T::DATA_TYPE.into();
    let of = |values: &[i64]| values.iter().map(|&v| T::from_i64(v)).collect::<Vec<T>>();
    let packed = |counts: &[u64]| {
        counts
            .iter()
            .scan(0, |next, &c| {
                *next += c;
                Some(*next - c)
            })
            .collect::<Vec<u64>>()
    };
    let sync = || comm.synchronize(stream);
    // AllGatherV: rank p contributes p + 1 elements of value p + 1.
    let counts: Vec<u64> = (1..=n as u64).collect();
    let displs = packed(&counts);
    inb.write(comm, 0, &of(&vec![r as i64 + 1; r + 1]))?;
    // SAFETY: the input holds counts[r] elements, the output their sum; synchronised below.
    unsafe {
        comm.raw().all_gather_v(
            inb.ptr(),
            counts[r],
            outb.ptr(),
            &counts,
            &displs,
            dt,
            stream,
        )?
    };
    sync()?;
    let want: Vec<i64> = (0..n).flat_map(|p| vec![p as i64 + 1; p + 1]).collect();
    let total = want.len();
    assert_eq!(outb.read::<T>(comm, 0, total)?, of(&want), "AllGatherV");
    // ReduceScatterV (sum): element i of rank p's input is i + p; rank r gets its block.
    let input: Vec<i64> = (0..total as i64).map(|i| i + r as i64).collect();
    inb.write(comm, 0, &of(&input))?;
    // SAFETY: the input holds the sum of counts, the output counts[r].
    unsafe {
        comm.raw().reduce_scatter_v(
            inb.ptr(),
            &counts,
            &displs,
            outb.ptr(),
            counts[r],
            dt,
            ReduceOp::Sum,
            stream,
        )?
    };
    sync()?;
    let nn = n as i64;
    let want: Vec<i64> = (0..counts[r] as i64)
        .map(|k| nn * (displs[r] as i64 + k) + nn * (nn - 1) / 2)
        .collect();
    assert_eq!(
        outb.read::<T>(comm, 0, want.len())?,
        of(&want),
        "ReduceScatterV"
    );
    // AlltoAllV: rank a sends rank b (2a + b) % n + 1 elements, element k being 10a + 3b + k.
    let count = |a: usize, b: usize| ((2 * a + b) % n + 1) as u64;
    let value = |a: usize, b: usize, k: u64| (10 * a + 3 * b) as i64 + k as i64;
    let send_counts: Vec<u64> = (0..n).map(|p| count(r, p)).collect();
    let recv_counts: Vec<u64> = (0..n).map(|p| count(p, r)).collect();
    let (sd, rd) = (packed(&send_counts), packed(&recv_counts));
    let input: Vec<i64> = (0..n)
        .flat_map(|p| (0..send_counts[p]).map(move |k| value(r, p, k)))
        .collect();
    inb.write(comm, 0, &of(&input))?;
    // SAFETY: both buffers hold the sums of their counts.
    unsafe {
        comm.raw().all_to_all_v(
            inb.ptr(),
            &send_counts,
            &sd,
            outb.ptr(),
            &recv_counts,
            &rd,
            dt,
            stream,
        )?
    };
    sync()?;
    let want: Vec<i64> = (0..n)
        .flat_map(|p| (0..recv_counts[p]).map(move |k| value(p, r, k)))
        .collect();
    assert_eq!(outb.read::<T>(comm, 0, want.len())?, of(&want), "AlltoAllV");
    // Reduce (sum) to rank 1: rank p contributes p + 1.
    inb.write(comm, 0, &fill::<T>(r as i64 + 1))?;
    outb.write(comm, 0, &fill::<T>(0))?;
    // SAFETY: both buffers hold COUNT elements.
    unsafe {
        comm.raw().reduce(
            inb.ptr(),
            outb.ptr(),
            COUNT as u64,
            dt,
            ReduceOp::Sum,
            1,
            stream,
        )?
    };
    sync()?;
    let want = if r == 1 { nn * (nn + 1) / 2 } else { 0 };
    assert_eq!(outb.read::<T>(comm, 0, COUNT)?, fill::<T>(want), "Reduce");
    // Scatter from the last rank: block p of its input is p + 1.
    let input: Vec<i64> = (0..n * COUNT).map(|i| (i / COUNT) as i64 + 1).collect();
    inb.write(comm, 0, &of(&input))?;
    // SAFETY: the input holds n blocks, the output one.
    unsafe {
        comm.raw().scatter(
            inb.ptr(),
            outb.ptr(),
            COUNT as u64,
            dt,
            n as u32 - 1,
            stream,
        )?
    };
    sync()?;
    assert_eq!(
        outb.read::<T>(comm, 0, COUNT)?,
        fill::<T>(r as i64 + 1),
        "Scatter"
    );
    // A ring of Send / Recv (even ranks send first), then one of BatchSendRecv: rank p sends
    // p + 1 to the next rank.
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    inb.write(comm, 0, &fill::<T>(r as i64 + 1))?;
    outb.write(comm, 0, &fill::<T>(0))?;
    let c = COUNT as u64;
    // SAFETY: both buffers hold COUNT elements.
    unsafe {
        if r % 2 == 0 {
            comm.raw().send(inb.ptr(), c, dt, next as u32, stream)?;
            comm.raw().recv(outb.ptr(), c, dt, prev as u32, stream)?;
        } else {
            comm.raw().recv(outb.ptr(), c, dt, prev as u32, stream)?;
            comm.raw().send(inb.ptr(), c, dt, next as u32, stream)?;
        }
    }
    sync()?;
    let want = fill::<T>(prev as i64 + 1);
    assert_eq!(outb.read::<T>(comm, 0, COUNT)?, want, "Send/Recv");
    outb.write(comm, 0, &fill::<T>(0))?;
    let item = |kind, buf: &DeviceBuf, peer: usize| HcclSendRecvItem {
        sendRecvType: kind,
        buf: buf.ptr().as_raw(),
        count: c,
        dataType: dt,
        remoteRank: peer as u32,
    };
    let items = [
        item(HcclSendRecvType::HCCL_RECV, outb, prev),
        item(HcclSendRecvType::HCCL_SEND, inb, next),
    ];
    // SAFETY: each item's buffer holds COUNT elements.
    unsafe { comm.raw().batch_send_recv(&items, stream)? };
    sync()?;
    assert_eq!(outb.read::<T>(comm, 0, COUNT)?, want, "BatchSendRecv");
    comm.barrier(stream)?;
    sync()
}

#[test]
fn every_vector_and_point_to_point_wrapper_passes_its_arguments_for_every_element_type() {
    let session = EmuSession::start();
    for registered in [true, false] {
        launch(3, |comm| {
            let stream = Stream::new(comm.runtime())?;
            let input = DeviceBuf::new(comm, 1, registered)?;
            let output = DeviceBuf::new(comm, 1, registered)?;
            crate::for_each_elem!(T => every_vector_wrapper::<T>(comm, &stream, &input, &output)?);
            Ok(())
        })
        .unwrap();
    }
    session.assert_clean();
}

/// The C functions read one count and one displacement per rank: a shorter or longer array is
/// refused before the call, naming the array.
#[test]
fn per_rank_arrays_of_the_wrong_length_are_refused_before_the_call() {
    let session = EmuSession::start();
    launch(2, |comm| {
        let stream = Stream::new(comm.runtime())?;
        let buf = DeviceBuf::new(comm, 1, true)?;
        let (p, dt) = (buf.ptr(), f32::DATA_TYPE.into());
        let (two, three): (&[u64], &[u64]) = (&[1, 1], &[1, 1, 1]);
        // SAFETY: refused before any C call.
        let got = unsafe {
            [
                (
                    "recvDispls",
                    comm.raw().all_gather_v(p, 1, p, two, three, dt, &stream),
                ),
                (
                    "sendCounts",
                    comm.raw()
                        .reduce_scatter_v(p, &[], two, p, 1, dt, ReduceOp::Sum, &stream),
                ),
                (
                    "rdispls",
                    comm.raw()
                        .all_to_all_v(p, two, two, p, two, &two[..1], dt, &stream),
                ),
            ]
        };
        for (name, result) in got {
            assert!(
                matches!(&result, Err(Error::InvalidArgument(m)) if m.contains(name)),
                "{name}: {result:?}"
            );
        }
        // Nothing was enqueued: a collective still lines up.
        comm.barrier(&stream)?;
        comm.synchronize(&stream)
    })
    .unwrap();
    session.assert_clean();
}
