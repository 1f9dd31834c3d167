//! The collective matrix on the emulator: every collective, dtype and op, on 1, 2, 3, 4 and 8
//! ranks, on registered windows (the symmetric path) and on plain memory (the staging path),
//! against host-computed results.

use symheap::emu::launch;
use symheap::runtime::{Comm, ReduceOp, Stream};
use symheap::{Error, Result};

use symheap::runtime::Element;

use crate::harness::{DeviceBuf, Elem, EmuSession, inputs, reduce, value};

const OPS: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];
/// Element counts: one, odd, and odd and not a multiple of any rank count used.
const COUNTS: [usize; 3] = [1, 7, 1003];
/// Bytes per buffer: fits the largest AlltoAll (8 ranks x 1003 x 8 bytes).
const BUF_BYTES: u64 = 2 << 20;

struct Bufs {
    input: DeviceBuf,
    output: DeviceBuf,
}

fn check_all<T: Elem>(comm: &Comm, stream: &Stream, bufs: &Bufs) -> Result<()> {
    let (r, n) = (comm.rank(), comm.size());
    let (inb, outb) = (&bufs.input, &bufs.output);
    let dt = T::DATA_TYPE;
    for &count in &COUNTS {
        let c = count as u64;
        for op in OPS {
            // AllReduce, out of place and in place.
            let all = inputs::<T>(n, count, 1);
            inb.write(comm, 0, &all[r as usize])?;
            // SAFETY: both buffers hold `count` elements; synchronised before the host reads.
            unsafe { comm.all_reduce(inb.ptr(), outb.ptr(), c, dt, op, stream)? };
            comm.synchronize(stream)?;
            assert_eq!(
                outb.read::<T>(comm, 0, count)?,
                reduce(&all, op),
                "AllReduce {op:?} {count}"
            );
            // SAFETY: as above, in place.
            unsafe { comm.all_reduce(inb.ptr(), inb.ptr(), c, dt, op, stream)? };
            comm.synchronize(stream)?;
            assert_eq!(
                inb.read::<T>(comm, 0, count)?,
                reduce(&all, op),
                "in-place AllReduce"
            );

            // ReduceScatter: each rank gets block r of the reduction of n blocks.
            let all = inputs::<T>(n, count * n as usize, 2);
            inb.write(comm, 0, &all[r as usize])?;
            // SAFETY: input holds n * count elements, output count.
            unsafe { comm.reduce_scatter(inb.ptr(), outb.ptr(), c, dt, op, stream)? };
            comm.synchronize(stream)?;
            let full = reduce(&all, op);
            let mine = &full[r as usize * count..(r as usize + 1) * count];
            assert_eq!(
                outb.read::<T>(comm, 0, count)?,
                mine,
                "ReduceScatter {op:?} {count}"
            );
        }

        // AllGather: rank order concatenation.
        let all = inputs::<T>(n, count, 3);
        inb.write(comm, 0, &all[r as usize])?;
        // SAFETY: input holds count elements, output n * count.
        unsafe { comm.all_gather(inb.ptr(), outb.ptr(), c, dt, stream)? };
        comm.synchronize(stream)?;
        assert_eq!(
            outb.read::<T>(comm, 0, count * n as usize)?,
            all.concat(),
            "AllGather {count}"
        );

        // AlltoAll: block p of my output is block r of rank p's input.
        let all = inputs::<T>(n, count * n as usize, 4);
        inb.write(comm, 0, &all[r as usize])?;
        // SAFETY: both buffers hold n blocks of count elements.
        unsafe { comm.all_to_all(inb.ptr(), outb.ptr(), c, dt, stream)? };
        comm.synchronize(stream)?;
        let expected: Vec<T> = (0..n as usize)
            .flat_map(|p| all[p][r as usize * count..(r as usize + 1) * count].to_vec())
            .collect();
        assert_eq!(
            outb.read::<T>(comm, 0, count * n as usize)?,
            expected,
            "AlltoAll {count}"
        );

        // Broadcast from the last rank.
        let root = n - 1;
        let mine: Vec<T> = (0..count).map(|i| value(r, i, 5)).collect();
        inb.write(comm, 0, &mine)?;
        // SAFETY: the buffer holds count elements.
        unsafe { comm.broadcast(inb.ptr(), c, dt, root, stream)? };
        comm.synchronize(stream)?;
        let from_root: Vec<T> = (0..count).map(|i| value(root, i, 5)).collect();
        assert_eq!(
            inb.read::<T>(comm, 0, count)?,
            from_root,
            "Broadcast {count}"
        );
    }
    comm.barrier(stream)?;
    comm.synchronize(stream)
}

/// Collectives per element type in `check_all` that can take the symmetric path (everything
/// but Broadcast and the final Barrier, which always stage).
const SYMMETRIC_PER_TYPE: u64 = COUNTS.len() as u64 * (OPS.len() as u64 * 3 + 2);
const ELEMENT_TYPES: u64 = 12;

fn matrix(ranks: u32) {
    let session = EmuSession::start();
    for registered in [true, false] {
        let before = symheap::emu::counters();
        launch(ranks, |comm| {
            let stream = Stream::new(comm.runtime())?;
            let bufs = Bufs {
                input: DeviceBuf::new(comm, BUF_BYTES, registered)?,
                output: DeviceBuf::new(comm, BUF_BYTES, registered)?,
            };
            crate::for_each_elem!(T => check_all::<T>(comm, &stream, &bufs)?);
            Ok(())
        })
        .unwrap();
        // The path really taken: zero-copy on windows (except on one rank, where HCCL finds no
        // window), staged otherwise.
        let symmetric =
            symheap::emu::counters().symmetric_collectives - before.symmetric_collectives;
        let expected = if registered && ranks > 1 {
            u64::from(ranks) * ELEMENT_TYPES * SYMMETRIC_PER_TYPE
        } else {
            0
        };
        assert_eq!(symmetric, expected, "registered: {registered}");
    }
    session.assert_clean();
}

#[test]
fn matrix_1_rank() {
    matrix(1);
}

#[test]
fn matrix_2_ranks() {
    matrix(2);
}

#[test]
fn matrix_3_ranks() {
    matrix(3);
}

#[test]
fn matrix_4_ranks() {
    matrix(4);
}

#[test]
fn matrix_8_ranks() {
    matrix(8);
}

#[test]
fn asymmetric_offsets_fail_on_every_rank() {
    let session = EmuSession::start();
    let errors = launch(2, |comm| {
        let stream = Stream::new(comm.runtime())?;
        let buf = DeviceBuf::new(comm, BUF_BYTES, true)?;
        // Rank 1 uses its buffer 512 bytes further in than rank 0 does.
        let at = 512 * u64::from(comm.rank());
        let ptr = buf.ptr().byte_add(at);
        // SAFETY: 16 floats fit at either offset; synchronised below.
        unsafe { comm.all_reduce(ptr, ptr, 16, f32::DATA_TYPE, ReduceOp::Sum, &stream)? };
        Ok(comm.synchronize(&stream).err().map(|e| e.to_string()))
    })
    .unwrap();
    for (rank, err) in errors.iter().enumerate() {
        let err = err
            .as_deref()
            .unwrap_or_else(|| panic!("rank {rank} accepted asymmetric offsets"));
        assert!(err.contains("HCCL_E_PARA (1)"), "rank {rank}: {err}");
        assert!(
            err.contains("rank 1") && err.contains("offset 0x200"),
            "rank {rank} message does not name the ranks and offsets: {err}"
        );
    }
    session.assert_clean();
}

#[test]
fn a_missing_peer_times_out_instead_of_hanging() {
    let session = EmuSession::start();
    let config = symheap::runtime::CommConfig::new().exec_timeout_secs(1);
    let rt = symheap::Runtime::emulated().unwrap();
    let started = std::time::Instant::now();
    let outcome = symheap::emu::launch_with(&rt, 2, &config, |comm| {
        let stream = Stream::new(comm.runtime())?;
        let buf = DeviceBuf::new(comm, BUF_BYTES, false)?;
        if comm.rank() == 1 {
            return Ok(None); // never joins the collective
        }
        // SAFETY: 16 floats fit; synchronised below.
        unsafe {
            comm.all_reduce(
                buf.ptr(),
                buf.ptr(),
                16,
                f32::DATA_TYPE,
                ReduceOp::Sum,
                &stream,
            )?
        };
        Ok(comm.synchronize(&stream).err())
    })
    .unwrap();
    let err = outcome[0].as_ref().expect("rank 0 must fail");
    assert!(
        matches!(err, Error::Hccl { code: 9, .. }),
        "expected HCCL_E_TIMEOUT, got {err}"
    );
    assert!(
        started.elapsed().as_secs() < 30,
        "took {:?}",
        started.elapsed()
    );
    session.assert_clean();
}

#[test]
fn work_queued_after_a_copy_sees_its_result() {
    let session = EmuSession::start();
    launch(2, |comm| {
        let stream = Stream::new(comm.runtime())?;
        let source = DeviceBuf::new(comm, BUF_BYTES, false)?;
        let data = DeviceBuf::new(comm, BUF_BYTES, true)?;
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
