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
        let again = SymVec::<f32>::zeroed(&pool, 256)?;
        assert_eq!(
            again.offset(),
            scratch_offset,
            "released when the graph dropped"
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
