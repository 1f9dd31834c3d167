//! Sleep and wake ([`SymPool::sleep`], [`SymPool::wake`], [`SymPool::wake_on`]).

use symheap::{
    AllocDesc, Comm, CommConfig, Error, GroupSizes, ParallelGroups, PoolConfig, ReduceOp,
    SleepPlan, Stream, SymPool, SymVec, emu,
};

use crate::harness::EmuSession;

/// A world of 4 as TP pairs, DP pairs and one EP group of all 4.
const GRID: GroupSizes = GroupSizes {
    tp: 2,
    dp: 2,
    ep: 4,
};

/// Every rank's answer must be the same.
fn all_equal<T: PartialEq + std::fmt::Debug>(values: &[T]) {
    assert!(
        values.windows(2).all(|w| w[0] == w[1]),
        "ranks differ: {values:?}"
    );
}

#[test]
fn a_sleep_keeps_every_offset_and_a_wake_restores_what_it_offloaded() {
    let session = EmuSession::start();
    let hashes = emu::launch(2, |comm| {
        let (free_before, _) = comm.runtime().mem_info()?;
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let rank = comm.rank() as f32;
        let weights =
            SymVec::from_host_with(&pool, &[rank + 0.5; 1000], AllocDesc::tagged("weights"))?;
        let mut kv = SymVec::from_host_with(&pool, &[9.0f32; 3000], AllocDesc::tagged("kv"))?;
        let dropped = SymVec::from_host_with(&pool, &[1u8; 100], AllocDesc::tagged("kv"))?;
        let places = [
            (weights.offset(), weights.device_ptr()),
            (kv.offset(), kv.device_ptr()),
        ];
        let (free_awake, _) = comm.runtime().mem_info()?;

        let report = pool.sleep(&SleepPlan::new().offload("weights"))?;
        assert!(pool.is_asleep());
        assert_eq!(report.offloaded_blocks, 1);
        assert_eq!(report.offloaded_bytes, 4096); // 4000 bytes in 512-byte granules
        assert_eq!(report.released_bytes, 4 << 20);
        let (free_asleep, _) = comm.runtime().mem_info()?;
        // The segment and the agreements' scratch granule: all the pool took.
        assert_eq!(free_asleep - free_awake, 6 << 20);
        assert_eq!(
            free_asleep, free_before,
            "nothing is left but the communicator's"
        );
        let stats = pool.stats().sleep;
        assert!(stats.asleep && stats.last_sleep.is_some() && stats.last_wake.is_none());
        assert_eq!((stats.offloaded_bytes, stats.sleeps), (4096, 1));

        // Everything that needs the memory is refused at once, saying why.
        let asleep = |e: Error| assert!(matches!(e, Error::Asleep(_)), "{e}");
        asleep(weights.to_host().unwrap_err());
        asleep(kv.host().unwrap_err());
        asleep(kv.copy_from_host(&[0.0; 3000]).unwrap_err());
        asleep(
            pool.all_reduce_in_place(&mut kv, ReduceOp::Sum)
                .unwrap_err(),
        );
        asleep(pool.alloc(64, 0).unwrap_err());
        asleep(pool.reserve(64 << 20).unwrap_err());
        asleep(pool.verify_symmetric().unwrap_err());
        let message = pool.trim().unwrap_err().to_string();
        assert!(message.contains("the pool is asleep"), "{message}");
        // Dropping an owner works, and so does synchronize.
        drop(dropped);
        pool.synchronize()?;

        let woke = pool.wake()?;
        assert!(!pool.is_asleep());
        assert_eq!((woke.mapped_bytes, woke.restored_bytes), (4 << 20, 4096));
        assert_eq!(
            places,
            [
                (weights.offset(), weights.device_ptr()),
                (kv.offset(), kv.device_ptr())
            ]
        );
        assert_eq!(weights.to_host()?, vec![rank + 0.5; 1000]);
        // New handles, and the blocks know them.
        for (ptr, len, window, offset) in [
            (
                weights.device_ptr(),
                4000,
                weights.window(),
                weights.offset(),
            ),
            (kv.device_ptr(), 12000, kv.window(), kv.offset()),
        ] {
            assert_eq!(pool.window_get(ptr, len)?, (window, offset));
        }
        // The memory works: a collective on the discarded block, then a check of symmetry.
        kv.copy_from_host(&[rank; 3000])?;
        pool.all_reduce_in_place(&mut kv, ReduceOp::Sum)?;
        assert_eq!(kv.to_host()?, vec![1.0; 3000]);
        pool.verify_symmetric()?;
        let stats = pool.stats();
        assert_eq!(
            stats.registrations, 2,
            "one registration at creation, one at wake"
        );
        Ok(pool.op_hash())
    })
    .unwrap();
    all_equal(&hashes);
    session.assert_clean();
}

#[test]
fn a_rank_that_cannot_sleep_stops_every_rank_and_changes_nothing() {
    let session = EmuSession::start();
    let results = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let v = SymVec::from_host(&pool, &[3u32; 64])?;
        let view = (comm.rank() == 1).then(|| v.host()).transpose()?;
        let refused = pool.sleep(&SleepPlan::new()).unwrap_err().to_string();
        drop(view);
        assert!(!pool.is_asleep());
        assert_eq!(v.to_host()?, vec![3; 64], "nothing was released");
        // With the view gone, both sleep.
        pool.sleep(&SleepPlan::new())?;
        pool.wake()?;
        Ok(refused)
    })
    .unwrap();
    assert!(results[1].contains("host view"), "{}", results[1]);
    assert!(results[0].contains("rank(s) [1]"), "{}", results[0]);
    session.assert_clean();
}

#[test]
fn a_graph_captured_before_a_sleep_must_be_captured_again() {
    let session = EmuSession::start();
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let stream = Stream::new(comm.runtime())?;
        let mut x = SymVec::from_host_with(&pool, &[1.0f32; 32], AllocDesc::tagged("x"))?;
        let graph = pool.capture(&stream, |s| s.all_reduce_in_place(&mut x, ReduceOp::Sum))?;
        graph.replay(&stream)?;
        pool.sleep(&SleepPlan::new().offload("x"))?;
        let asleep = graph.replay(&stream).unwrap_err();
        assert!(matches!(asleep, Error::Asleep(_)), "{asleep}");
        pool.wake()?;
        let stale = graph.replay(&stream).unwrap_err().to_string();
        assert!(stale.contains("capture it again"), "{stale}");
        assert_eq!(
            x.to_host()?,
            vec![2.0; 32],
            "the replay before the sleep, kept"
        );
        drop(graph);
        let graph = pool.capture(&stream, |s| s.all_reduce_in_place(&mut x, ReduceOp::Sum))?;
        graph.replay(&stream)?;
        assert_eq!(x.to_host()?, vec![4.0; 32]);
        // A sleep cannot run inside a capture.
        let inside = pool.capture(&stream, |s| s.sleep(&SleepPlan::new()).map(drop));
        let inside = inside.unwrap_err().to_string();
        assert!(inside.contains("captures a graph"), "{inside}");
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn a_deep_sleep_releases_the_communicators_and_wakes_on_a_new_world() {
    let session = EmuSession::start();
    let hashes = emu::launch(4, |comm| {
        let rt = comm.runtime().clone();
        let groups = ParallelGroups::new(comm, GRID)?;
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        pool.attach(groups.tp())?;
        let rank = comm.rank() as f32;
        let mut w = SymVec::from_host_with(&pool, &[rank; 256], AllocDesc::tagged("weights"))?;
        let offset = w.offset();
        let root = comm.fresh_root_info()?;
        let (free_before, _) = rt.mem_info()?;
        drop(groups); // the unattached groups of the world go first, as HCCL destroys them
        let report = pool.sleep(&SleepPlan::new().offload("weights").release_communicators())?;
        assert_eq!(report.communicators_released, 2);
        assert_eq!(report.windows_deregistered, 2);
        assert!(comm.is_released());
        let (free_asleep, _) = rt.mem_info()?;
        assert!(free_asleep >= free_before + (4 << 20));
        // The old communicator refuses collectives, saying why.
        let stale = pool.all_reduce_in_place(&mut w, ReduceOp::Sum).unwrap_err();
        assert!(matches!(stale, Error::Asleep(_)), "{stale}");
        let refused = pool.wake().unwrap_err().to_string();
        assert!(refused.contains("wake_on"), "{refused}");

        let world = Comm::init(&rt, 4, &root, comm.rank(), &CommConfig::new())?;
        pool.wake_on(&world)?;
        assert_eq!(w.offset(), offset);
        assert_eq!(w.to_host()?, vec![rank; 256]);
        assert!(pool.comm().same_as(&world));
        let groups = ParallelGroups::new(&world, GRID)?;
        pool.attach(groups.tp())?;
        let tp = pool.on_group(groups.tp())?;
        tp.all_reduce_in_place(&mut w, ReduceOp::Sum)?;
        let pair = (world.rank() & !1) as f32;
        assert_eq!(w.to_host()?, vec![2.0 * pair + 1.0; 256]);
        assert_eq!(tp.window_get(w.device_ptr(), 1024)?.1, offset);
        pool.verify_symmetric()?;
        Ok(pool.op_hash())
    })
    .unwrap();
    all_equal(&hashes);
    session.assert_clean();
}

#[test]
fn discarded_blocks_come_back_zeroed_when_the_plan_asks() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let kv = SymVec::from_host(&pool, &[7u16; 500])?;
        pool.sleep(&SleepPlan::new().zero_discarded())?;
        pool.wake()?;
        assert_eq!(kv.to_host()?, vec![0; 500]);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

/// What a long-running process must not accumulate: its resident memory, descriptors and
/// threads, from `/proc/self`.
fn process_footprint() -> (u64, usize, usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let count = |dir| std::fs::read_dir(dir).unwrap().count();
    (rss_kib, count("/proc/self/fd"), count("/proc/self/task"))
}

/// Runs in a process of its own: the other tests of this binary open descriptors, start
/// threads and take memory at moments of their own.
#[test]
fn a_hundred_sleeps_shallow_and_deep_leave_no_growth_in_memory_descriptors_threads_or_objects() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let run = std::process::Command::new(&exe)
        .args(["sleep::a_hundred_sleeps_alone", "--exact", "--ignored"])
        .args(["--nocapture", "--test-threads=1"])
        .output()
        .expect("the test binary starts");
    assert!(
        run.status.success(),
        "{}\n{}{}",
        run.status,
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
#[ignore = "run by a_hundred_sleeps_shallow_and_deep_leave_no_growth_..., in a process of its own"]
fn a_hundred_sleeps_alone() {
    let session = EmuSession::start();
    // One rank: the emulator's counters are the process's, and a second rank's agreement
    // makes a stream of its own at moments of its own.
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20).max_capacity(16 << 20))?;
        let weights = SymVec::from_host_with(&pool, &[5u64; 512], AllocDesc::tagged("weights"))?;
        let _grown = pool.alloc(6 << 20, 0)?; // a second segment
        let plan = SleepPlan::new().offload("weights");
        let cycle = |n: usize| -> symheap::Result<_> {
            if n.is_multiple_of(2) {
                pool.sleep(&plan)?;
                let (asleep, _) = comm.runtime().mem_info()?;
                pool.wake()?;
                Ok(asleep)
            } else {
                let root = pool.comm().fresh_root_info()?;
                pool.sleep(&plan.clone().release_communicators())?;
                let (asleep, _) = comm.runtime().mem_info()?;
                let world = Comm::init(comm.runtime(), 1, &root, 0, &CommConfig::new())?;
                pool.wake_on(&world)?;
                Ok(asleep)
            }
        };
        let state = |asleep: [u64; 2]| -> symheap::Result<_> {
            assert_eq!(weights.to_host()?, vec![5; 512]);
            let (awake, _) = comm.runtime().mem_info()?;
            let c = emu::testing::counters();
            let objects = [
                c.reservations,
                c.physical_allocations,
                c.mappings,
                c.windows,
                c.streams,
                c.comms,
                c.events,
                c.host_allocations,
            ];
            Ok((asleep, awake, objects))
        };
        let mut warm = None;
        for n in 0..100 {
            let asleep = [cycle(2 * n)?, cycle(2 * n + 1)?];
            if n == 9 {
                warm = Some((state(asleep)?, process_footprint()));
            }
            if n == 99 {
                let (before, (rss, fds, threads)) = warm.unwrap();
                assert_eq!(state(asleep)?, before);
                let (rss_now, fds_now, threads_now) = process_footprint();
                assert_eq!((fds_now, threads_now), (fds, threads));
                // The allocator's own slack aside: no megabytes per cycle.
                assert!(rss_now < rss + 4096, "{rss} KiB -> {rss_now} KiB");
            }
        }
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn ranks_that_slept_with_different_plans_are_caught_by_verify_symmetric() {
    let session = EmuSession::start();
    let verdicts = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let _w = SymVec::from_host_with(&pool, &[1u8; 64], AllocDesc::tagged("w"))?;
        let plan = match comm.rank() {
            0 => SleepPlan::new(),
            _ => SleepPlan::new().offload("w"),
        };
        pool.sleep(&plan)?;
        pool.wake()?;
        Ok(pool.verify_symmetric().map_err(|e| e.to_string()))
    })
    .unwrap();
    for verdict in verdicts {
        let message = verdict.unwrap_err();
        assert!(message.contains("not symmetric"), "{message}");
    }
    session.assert_clean();
}

#[test]
fn a_shallow_sleep_keeps_the_attached_groups_and_registers_every_segment_in_them_again() {
    let session = EmuSession::start();
    let hashes = emu::launch(4, |comm| {
        let groups = ParallelGroups::new(comm, GRID)?;
        let config = PoolConfig::new(2 << 20).max_capacity(8 << 20);
        let pool = SymPool::new(comm, config)?;
        pool.attach(groups.tp())?;
        let rank = comm.rank() as f32;
        let mut small = SymVec::from_host_with(&pool, &[rank; 64], AllocDesc::tagged("w"))?;
        // Grows the pool: a second segment, registered in the world and the TP pair.
        let mut big = SymVec::from_host_with(&pool, &[1.0f32; 600_000], AllocDesc::tagged("w"))?;
        assert_eq!(pool.stats().windows, 2);
        let report = pool.sleep(&SleepPlan::new().offload("w"))?;
        assert_eq!(report.windows_deregistered, 4);
        let woke = pool.wake()?;
        assert_eq!(woke.registrations, 4);
        let tp = pool.on_group(groups.tp())?;
        for v in [&small, &big] {
            let len = v.len() as u64 * 4;
            assert_eq!(tp.window_get(v.device_ptr(), len)?.1, v.offset());
            assert_eq!(
                pool.window_get(v.device_ptr(), len)?,
                (v.window(), v.offset())
            );
        }
        tp.all_reduce_in_place(&mut small, ReduceOp::Sum)?;
        tp.all_reduce_in_place(&mut big, ReduceOp::Sum)?;
        let pair = (comm.rank() & !1) as f32;
        assert_eq!(small.to_host()?, vec![2.0 * pair + 1.0; 64]);
        assert_eq!(big.to_host()?, vec![2.0; 600_000]);
        let stats = pool.stats();
        assert_eq!(
            stats.communicators[1].registrations, 4,
            "2 at growth and attach, 2 at wake"
        );
        pool.verify_symmetric()?;
        Ok(pool.op_hash())
    })
    .unwrap();
    all_equal(&hashes);
    session.assert_clean();
}

#[test]
fn the_summary_snapshots_and_heap_map_show_the_sleep_and_the_memory_classes() {
    let session = EmuSession::start();
    let snapshots = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let _w = SymVec::from_host_with(&pool, &[1u8; 4096], AllocDesc::tagged("weights"))?;
        let _kv = SymVec::from_host_with(&pool, &[1u8; 8192], AllocDesc::tagged("kv"))?;
        pool.sleep(&SleepPlan::new().offload("weights"))?;
        let summary = pool.memory_summary();
        assert!(summary.contains("asleep"), "{summary}");
        let snapshot = pool.snapshot();
        let tags = &snapshot.stats.tags;
        let weights = tags.iter().find(|t| t.tag == "weights").unwrap();
        let kv = tags.iter().find(|t| t.tag == "kv").unwrap();
        assert_eq!(
            (
                weights.resident_bytes,
                weights.offloadable_bytes,
                weights.discardable_bytes
            ),
            (0, 4096, 0)
        );
        assert_eq!((kv.offloadable_bytes, kv.discardable_bytes), (0, 8192));
        pool.wake()?;
        let kv = pool
            .stats()
            .tags
            .into_iter()
            .find(|t| t.tag == "kv")
            .unwrap();
        assert_eq!(kv.resident_bytes, 8192);
        Ok(snapshot)
    })
    .unwrap();
    let round_trip = symheap::Snapshot::from_json(&snapshots[0].to_json()).unwrap();
    assert_eq!(round_trip, snapshots[0]);
    let html = symheap_tools::heap_map::render(&snapshots);
    assert!(html.contains("<b>asleep</b>") && html.contains("offloadable"));
    session.assert_clean();
}

#[test]
fn the_allocator_adapter_keeps_a_pool_awake_while_its_allocations_live() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let adapter = pool.allocator()?;
        let mut v = symheap::allocator_api2::vec::Vec::new_in(adapter.clone());
        v.extend_from_slice(&[1u32, 2, 3]);
        let refused = pool.sleep(&SleepPlan::new()).unwrap_err().to_string();
        assert!(refused.contains("SymPool::allocator"), "{refused}");
        drop(v);
        let private = pool.stats().private_reserved;
        assert!(private > 0);
        let report = pool.sleep(&SleepPlan::new())?;
        assert_eq!(report.released_bytes, (4 << 20) + private);
        assert_eq!(pool.stats().private_reserved, 0, "released");
        let mut asleep = symheap::allocator_api2::vec::Vec::<u8, _>::new_in(adapter.clone());
        assert!(
            asleep.try_reserve(16).is_err(),
            "no allocation while asleep"
        );
        pool.wake()?;
        let mut v = symheap::allocator_api2::vec::Vec::new_in(adapter);
        v.extend_from_slice(&[4u32, 5]);
        assert_eq!(v.iter().sum::<u32>(), 9);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}
