//! Stream-ordered reuse and collectives on the caller's streams ([`SymPool::on`], [`Event`]).

use std::time::Duration;

use symheap::{Error, Event, PoolConfig, ReduceOp, Stream, SymPool, SymVec, emu};

use crate::harness::EmuSession;
use crate::support::rng::Rng;

#[test]
fn a_block_freed_after_a_collective_is_handed_out_again_at_once_and_reads_right() {
    let session = EmuSession::start();
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let mut v = SymVec::from_host(&pool, &[1.0f32; 1024])?;
        let offset = v.offset();
        pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
        drop(v); // the AllReduce may still be running: freed in stream order
        assert_eq!(pool.stats().pending_frees, 0);
        let w = SymVec::<f32>::zeroed(&pool, 1024)?;
        assert_eq!(w.offset(), offset, "not reused at once");
        // Zeroed after the AllReduce, in stream order: never its result.
        assert_eq!(w.to_host()?, vec![0.0; 1024]);
        let mut x = SymVec::from_host(&pool, &[2.0f32; 1024])?;
        pool.all_reduce_in_place(&mut x, ReduceOp::Sum)?;
        assert_eq!(x.to_host()?, vec![4.0; 1024]);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

/// Rank 0 frees a buffer while a collective on its side stream still waits for rank 1, and
/// gets the memory again at once for the pool's stream: the pool makes its stream wait for
/// the side stream first, so the zeroing comes after the collective's write, not before.
#[test]
fn memory_freed_by_another_streams_queued_work_is_reused_after_it() {
    let session = EmuSession::start();
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let side = Stream::new(comm.runtime())?;
        let on_side = pool.on(&side);
        let mut v = SymVec::from_host(&pool, &[1.0f32; 4096])?;
        if comm.rank() == 1 {
            std::thread::sleep(Duration::from_millis(200));
        }
        on_side.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
        let offset = v.offset();
        drop(v);
        let w = SymVec::<f32>::zeroed(&pool, 4096)?;
        assert_eq!(w.offset(), offset);
        // Both streams done: whichever wrote last decides what `w` holds.
        side.synchronize()?;
        assert_eq!(
            w.to_host()?,
            vec![0.0; 4096],
            "zeroed before the reduction wrote"
        );
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn events_order_a_compute_stream_before_the_pools_stream_and_copies_run_on_either() {
    let session = EmuSession::start();
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let compute = Stream::new(comm.runtime())?;
        let on_compute = pool.on(&compute);
        let a = SymVec::from_host(&pool, &[comm.rank() as f32 + 1.0; 256])?;
        let mut b = SymVec::<f32>::zeroed(&on_compute, 256)?;
        on_compute.copy(&a, &mut b)?;
        let copied = Event::new(comm.runtime())?;
        copied.record(&compute)?;
        pool.stream().wait(&copied)?;
        pool.all_reduce_in_place(&mut b, ReduceOp::Sum)?;
        assert_eq!(b.to_host()?, vec![3.0; 256]);
        let mut c = SymVec::<f32>::zeroed(&pool, 256)?;
        c.copy_from(&b)?;
        assert_eq!(c.to_host()?, vec![3.0; 256]);
        let e = pool.copy(&a, &mut SymVec::zeroed(&pool, 3)?).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

/// Collectives of one communicator on three streams with no event between them, as
/// `SymPool::on` makes easy to write: the pool's communicator orders each after the one
/// before (HCCL does not, and the emulator refuses the call otherwise). Rank 1 comes late, so
/// on rank 0 each collective is still queued when the next is called.
#[test]
fn a_communicators_collectives_on_several_streams_run_in_call_order() {
    let session = EmuSession::start();
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let (a, b) = (Stream::new(comm.runtime())?, Stream::new(comm.runtime())?);
        let pools = [pool.clone(), pool.on(&a), pool.on(&b)];
        let mut v = SymVec::from_host(&pool, &[1.0f32; 256])?;
        pool.synchronize()?;
        if comm.rank() == 1 {
            std::thread::sleep(Duration::from_millis(100));
        }
        // Each step doubles `v` on every rank: the steps must run in call order.
        for step in 0..12 {
            pools[step % 3].all_reduce_in_place(&mut v, ReduceOp::Sum)?;
        }
        for s in [&a, &b] {
            s.synchronize()?;
        }
        assert_eq!(v.to_host()?, vec![4096.0; 256]);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

/// `steps` random steps on two streams that never synchronize, as a worker runs them: the
/// pool's stream computes (device copies), a communication stream runs the collectives
/// (HCCL runs one communicator's collectives in one order, so one stream takes them all), and
/// events order the two where a buffer passes from one to the other. Frees hand memory to
/// either stream; every read checks the buffer's values. The placement digest and the
/// largest fragmentation seen.
fn two_stream_program(pool: &SymPool, steps: usize) -> symheap::Result<(u64, f64)> {
    let rt = pool.runtime().clone();
    let comm_stream = Stream::new(&rt)?;
    let streams = [pool.clone(), pool.on(&comm_stream)];
    let ranks = pool.comm().rank_count() as f32;
    let me = pool.comm().rank() as f32;
    let mut rng = Rng::new(3);
    // (buffer, the stream that last wrote it, base, slope): it holds `base + rank * slope`.
    let mut live: Vec<(SymVec<f32>, usize, f32, f32)> = Vec::new();
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    let mut worst = 0.0f64;
    // Makes stream `to` wait for the work queued on stream `from` so far.
    let order = |from: usize, to: usize| -> symheap::Result<()> {
        if from != to {
            let e = Event::new(&rt)?;
            e.record(streams[from].stream())?;
            streams[to].stream().wait(&e)?;
        }
        Ok(())
    };
    for step in 0..steps {
        match rng.below(7) {
            0 | 1 => {
                let len = rng.log_uniform(16, 1 << 15) as usize;
                let s = rng.below(2) as usize;
                let v = SymVec::from_host(&streams[s], &vec![me + 1.0; len])?;
                for w in [v.offset(), len as u64, s as u64] {
                    digest = (digest ^ w).wrapping_mul(0x0000_0100_0000_01b3);
                }
                live.push((v, s, 1.0, 1.0));
            }
            2 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                live.swap_remove(i);
            }
            3 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                let (v, writer, base, slope) = &mut live[i];
                order(*writer, 1)?;
                streams[1].all_reduce_in_place(v, ReduceOp::Sum)?;
                *base = ranks * *base + *slope * ranks * (ranks - 1.0) / 2.0;
                *slope = 0.0;
                *writer = 1;
            }
            4 if !live.is_empty() => {
                // A device copy on the pool's stream into a fresh buffer.
                let i = rng.below(live.len() as u64) as usize;
                let (src, writer, base, slope) = (&live[i].0, live[i].1, live[i].2, live[i].3);
                let mut dst = SymVec::<f32>::zeroed(&streams[0], src.len())?;
                order(writer, 0)?;
                streams[0].copy(src, &mut dst)?;
                live.push((dst, 0, base, slope));
            }
            5 if !live.is_empty() && step % 8 == 0 => {
                let i = rng.below(live.len() as u64) as usize;
                let (v, _, base, slope) = &live[i];
                let want = base + me * slope;
                let got = v.to_host()?;
                assert!(
                    got.iter().all(|&x| x == want),
                    "stale read: {want} != {}",
                    got[0]
                );
            }
            _ => {}
        }
        worst = worst.max(pool.stats().fragmentation);
    }
    Ok((digest, worst))
}

#[test]
fn two_streams_for_10000_steps_without_synchronize_place_alike_and_read_fresh_values() {
    let session = EmuSession::start();
    let runs = emu::launch(4, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20).max_capacity(64 << 20))?;
        let (digest, worst) = two_stream_program(&pool, 10_000)?;
        let stats = pool.stats();
        Ok((digest, worst, stats.pending_frees, stats.windows))
    })
    .unwrap();
    for (digest, _, pending, windows) in &runs {
        assert_eq!(*digest, runs[0].0);
        assert_eq!(*pending, 0);
        // It grew while the communication stream had collectives queued.
        assert!(*windows > 1);
    }
    session.assert_clean();
}
