//! Graph-safe pooling ([`SymPool::capture`], [`SymGraph`]).

use std::time::Duration;

use symheap::{Error, PoolConfig, ReduceOp, Stream, SymPool, SymVec, emu};

use crate::harness::EmuSession;

#[test]
fn blocks_a_graph_uses_stay_reserved_until_it_drops_and_replays_reuse_them() {
    let session = EmuSession::start();
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let stream = Stream::new(comm.runtime())?;
        let input = SymVec::from_host(&pool, &[1.0f32; 256])?;
        let mut out = SymVec::<f32>::zeroed(&pool, 256)?;
        let mut scratch_offset = 0;
        let graph = pool.capture(&stream, |s| {
            // A temporary of the step: allocated and freed inside the capture.
            let mut tmp = SymVec::<f32>::zeroed(s, 256)?;
            scratch_offset = tmp.offset();
            s.copy(&input, &mut tmp)?;
            s.all_reduce_in_place(&mut tmp, ReduceOp::Sum)?;
            s.copy(&tmp, &mut out)?;
            Ok(())
        })?;
        // The temporary's memory is the graph's: a new block goes elsewhere.
        let other = SymVec::<f32>::zeroed(&pool, 256)?;
        assert_ne!(other.offset(), scratch_offset);
        drop(other);
        let before = pool.stats();
        for _ in 0..5 {
            graph.replay(&stream)?;
        }
        assert_eq!(out.to_host()?, vec![2.0; 256]);
        // Replays made no pool call.
        let after = pool.stats();
        assert_eq!(
            (after.alloc_count, after.collectives),
            (before.alloc_count, before.collectives)
        );
        drop(graph);
        // Released by the next synchronize (its replays and every stream done with it).
        pool.synchronize()?;
        let again = SymVec::<f32>::zeroed(&pool, 256)?;
        assert_eq!(
            again.offset(),
            scratch_offset,
            "released after the graph dropped"
        );
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn a_capture_refuses_growth_synchronize_trim_and_host_copies() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(2 << 20).max_capacity(8 << 20))?;
        let stream = Stream::new(comm.runtime())?;
        let refused = |r: symheap::Result<()>| match r {
            Err(Error::InvalidArgument(why)) => assert!(why.contains("captures a graph"), "{why}"),
            other => panic!("{other:?}"),
        };
        let graph = pool.capture(&stream, |s| {
            refused(s.alloc(4 << 20, 0).map(drop));
            refused(s.synchronize());
            refused(s.trim().map(drop));
            refused(s.verify_symmetric());
            assert!(
                SymVec::from_host(s, &[1u8; 8]).is_err(),
                "a host copy in a capture"
            );
            assert!(pool.capture(&stream, |_| Ok(())).is_err());
            Ok(())
        })?;
        drop(graph);
        // After the capture, all of it works again.
        pool.alloc(4 << 20, 0)?;
        pool.synchronize()?;
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn a_graph_keeps_its_pool_alive_so_the_destroy_order_is_always_right() {
    let session = EmuSession::start();
    let rt = symheap::Runtime::emulated().unwrap();
    emu::launch_with(&rt, 2, &symheap::CommConfig::new(), |comm| {
        let stream = Stream::new(comm.runtime())?;
        let (graph, x) = {
            let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
            let mut x = SymVec::from_host(&pool, &[1.0f32; 64])?;
            let graph = pool.capture(&stream, |s| s.all_reduce_in_place(&mut x, ReduceOp::Sum))?;
            (graph, x)
        }; // the pool handle is gone; the graph and `x` keep the pool
        graph.replay(&stream)?;
        assert_eq!(x.to_host()?, vec![2.0; 64]);
        drop(x); // held by the graph: not reused, not freed under it
        graph.replay(&stream)?;
        drop(graph); // waits for the replay, then the pool goes: windows, then communicator
        Ok(())
    })
    .unwrap();
    assert!(rt.take_drop_errors().is_empty());
    session.assert_clean();
}

#[test]
fn a_graph_dropped_while_its_replay_waits_for_a_peer_waits_for_it() {
    let session = EmuSession::start();
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let stream = Stream::new(comm.runtime())?;
        let mut x = SymVec::from_host(&pool, &[1.0f32; 64])?;
        let graph = pool.capture(&stream, |s| s.all_reduce_in_place(&mut x, ReduceOp::Sum))?;
        if comm.rank() == 1 {
            std::thread::sleep(Duration::from_millis(300));
        }
        graph.replay(&stream)?;
        drop(graph); // rank 0's replay still waits for rank 1
        assert_eq!(x.to_host()?, vec![2.0; 64]);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

/// Regressions from review: each was seen misbehaving before its fix.
#[test]
fn a_capture_refuses_host_functions_host_access_and_foreign_copies_without_poisoning() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let other = SymPool::new(comm, PoolConfig::new(2 << 20))?;
        let stream = Stream::new(comm.runtime())?;
        let mut x = SymVec::from_host(&pool, &[1.0f32; 64])?;
        let foreign = SymVec::from_host(&other, &[1.0f32; 64])?;
        let graph = pool.capture(&stream, |s| {
            s.all_reduce_in_place(&mut x, ReduceOp::Sum)?;
            // A host function would run at every replay: a once-only closure cannot.
            assert!(s.stream().launch_host_fn(|| {}).is_err());
            // Host access cannot wait for a capturing stream: refused, not a failure.
            assert!(matches!(x.to_host(), Err(Error::InvalidArgument(_))));
            // The other pool would reuse its block under the graph.
            assert!(s.copy(&foreign, &mut x).is_err());
            Ok(())
        })?;
        graph.replay(&stream)?;
        // A host view of a buffer a live graph writes is refused; a copy waits for it.
        assert!(x.host().is_err());
        assert_eq!(x.to_host()?, vec![1.0; 64]);
        drop(graph);
        assert_eq!(x.host()?[0], 1.0);
        pool.alloc(512, 0)?; // not poisoned
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn memory_a_dropped_graph_held_waits_for_other_streams_before_reuse() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let (stream, side) = (Stream::new(comm.runtime())?, Stream::new(comm.runtime())?);
        let src = SymVec::from_host(&pool, &[7.0f32; 1024])?;
        let mut x = SymVec::<f32>::zeroed(&pool, 1024)?;
        let mut at = 0;
        let graph = pool.capture(&stream, |s| {
            let mut tmp = SymVec::<f32>::zeroed(s, 1024)?;
            at = tmp.offset();
            s.copy(&src, &mut tmp)?;
            s.copy(&tmp, &mut x)
        })?;
        // A late copy on a busy side stream into a buffer, then the buffer and the graph go.
        side.launch_host_fn(|| std::thread::sleep(Duration::from_millis(200)))?;
        let mut late = SymVec::<f32>::zeroed(&pool, 1024)?;
        let late_at = late.offset();
        pool.on(&side).copy(&src, &mut late)?;
        drop(late);
        drop(graph);
        // The graph's temporary waits for the next synchronize; the late buffer may be reused
        // at once, but only after the side stream's copy (an event), so `y` reads right.
        let y = SymVec::from_host(&pool, &[1.0f32; 1024])?;
        assert_ne!(y.offset(), at);
        side.synchronize()?;
        assert_eq!(y.to_host()?, vec![1.0; 1024], "overwritten at {late_at}");
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn a_capture_that_fails_to_end_gives_back_what_it_held() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let free_before = pool.stats().largest_free;
        let (stream, side) = (Stream::new(comm.runtime())?, Stream::new(comm.runtime())?);
        let failed = pool.capture(&stream, |s| {
            let mut tmp = SymVec::<f32>::zeroed(s, 1 << 18)?;
            let joined = symheap::Event::new(comm.runtime())?;
            joined.record(s.stream())?;
            side.wait(&joined)?; // joins, and never joins back
            pool.on(&side).all_reduce_in_place(&mut tmp, ReduceOp::Sum)
        });
        assert!(failed.is_err());
        pool.synchronize()?;
        assert_eq!(pool.stats().largest_free, free_before);
        // A block used on another stream before the capture, freed inside it, is not reused
        // by the capture (that would wait for work outside it).
        let mut used = SymVec::from_host(&pool, &[1.0f32; 64])?;
        pool.on(&side)
            .all_reduce_in_place(&mut used, ReduceOp::Sum)?;
        pool.synchronize()?;
        let graph = pool.capture(&stream, |s| {
            drop(used);
            let mut fresh = SymVec::<f32>::zeroed(s, 64)?;
            s.all_reduce_in_place(&mut fresh, ReduceOp::Sum)
        })?;
        graph.replay(&stream)?;
        drop(graph);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn a_replayable_host_function_runs_at_every_replay_and_is_freed_with_its_graph() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let (stream, side) = (Stream::new(comm.runtime())?, Stream::new(comm.runtime())?);
        let calls = Arc::new(AtomicUsize::new(0));
        let counting = |calls: &Arc<AtomicUsize>| {
            let c = calls.clone();
            move || {
                c.fetch_add(1, Ordering::SeqCst);
            }
        };
        // Eager: runs once, and is freed once it ran.
        stream.launch_replayable_host_fn(counting(&calls))?;
        stream.synchronize()?;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(Arc::strong_count(&calls), 1);
        let mut x = SymVec::from_host(&pool, &[1.0f32; 64])?;
        let graph = pool.capture(&stream, |s| {
            s.stream().launch_replayable_host_fn(counting(&calls))?;
            s.all_reduce_in_place(&mut x, ReduceOp::Sum)
        })?;
        assert_eq!(calls.load(Ordering::SeqCst), 1, "captured, not run");
        for _ in 0..3 {
            graph.replay(&stream)?;
        }
        stream.synchronize()?;
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        assert_eq!(Arc::strong_count(&calls), 2, "the graph keeps it");
        drop(graph);
        assert_eq!(Arc::strong_count(&calls), 1, "freed with the graph");
        // A capture that fails to end frees what it captured.
        let failed = pool.capture(&stream, |s| {
            s.stream().launch_replayable_host_fn(counting(&calls))?;
            let joined = symheap::Event::new(comm.runtime())?;
            joined.record(s.stream())?;
            side.wait(&joined) // joins, and never joins back
        });
        assert!(failed.is_err());
        assert_eq!(
            Arc::strong_count(&calls),
            1,
            "freed with the failed capture"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn pooled_work_on_a_stream_outside_the_pools_capture_is_refused() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let (stream, side) = (Stream::new(comm.runtime())?, Stream::new(comm.runtime())?);
        let other = Stream::new(comm.runtime())?;
        let mut x = SymVec::from_host(&pool, &[1.0f32; 64])?;
        let y = SymVec::from_host(&pool, &[2.0f32; 64])?;
        let graph = pool.capture(&stream, |s| {
            // The pool's own stream and a side stream that did not join would run the work
            // now, outside the graph.
            let own = pool.all_reduce_in_place(&mut x, ReduceOp::Sum);
            assert!(matches!(own, Err(Error::InvalidArgument(m)) if m.contains("takes no part")));
            let unjoined = pool.on(&side).copy(&y, &mut x);
            assert!(
                matches!(unjoined, Err(Error::InvalidArgument(m)) if m.contains("takes no part"))
            );
            // A stream capturing a graph of its own is not the pool's capture either.
            other.begin_capture()?;
            let elsewhere = pool.on(&other).copy(&y, &mut x);
            assert!(
                matches!(elsewhere, Err(Error::InvalidArgument(m)) if m.contains("another graph"))
            );
            other.end_capture()?;
            // Joined, the side stream is part of the capture.
            let (joined, back) = (
                symheap::Event::new(comm.runtime())?,
                symheap::Event::new(comm.runtime())?,
            );
            joined.record(s.stream())?;
            side.wait(&joined)?;
            pool.on(&side).copy(&y, &mut x)?;
            back.record(&side)?;
            s.stream().wait(&back)
        })?;
        assert_eq!(
            x.to_host()?,
            vec![1.0; 64],
            "nothing ran during the capture"
        );
        graph.replay(&stream)?;
        assert_eq!(x.to_host()?, vec![2.0; 64]);
        // Outside the pool's capture, pooled work on a capturing stream would be a graph
        // whose memory the pool does not keep.
        other.begin_capture()?;
        let unknown = pool.on(&other).copy(&y, &mut x);
        assert!(matches!(unknown, Err(Error::InvalidArgument(m)) if m.contains("does not know")));
        other.end_capture()?;
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}
