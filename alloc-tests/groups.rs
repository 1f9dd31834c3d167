//! Parallel groups: sub-communicators split from one world ([`Comm::split`],
//! [`ParallelGroups`]), collectives on each, and one pool attached to several of them.

use std::time::{Duration, Instant};

use symheap::{
    Comm, CommConfig, Error, GroupSizes, ParallelGroups, PoolConfig, ReduceOp, Stream, SymPool,
    SymVec, emu,
};

use crate::collectives::every_wrapper;
use crate::harness::{DeviceBuf, EmuSession};
use crate::processes::{failed, placement, rank_job_in};
use crate::support::rng::Rng;

/// A world of 4 as TP pairs, DP pairs and one EP group of all 4.
const GRID: GroupSizes = GroupSizes {
    tp: 2,
    dp: 2,
    ep: 4,
};

/// How `InvalidArgument` with `why` displays.
fn bad_sizes(why: &str) -> String {
    Error::InvalidArgument(format!("ParallelGroups: {why}")).to_string()
}

fn invalid(r: symheap::Result<Comm>) -> String {
    match r {
        Err(Error::InvalidArgument(why)) => why,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn split_refuses_bad_rank_lists_and_sub_communicators_and_groups_check_their_sizes() {
    let session = EmuSession::start();
    emu::launch(4, |world| {
        let c = CommConfig::new();
        let r = world.rank();
        assert!(invalid(world.split(&[], 1, &c)).contains("no ranks"));
        assert!(invalid(world.split(&[r, r], 1, &c)).contains("twice"));
        assert!(invalid(world.split(&[r, 4], 1, &c)).contains("not below"));
        assert!(invalid(world.split(&[(r + 1) % 4], 1, &c)).contains("not among"));
        assert!(invalid(world.split(&[r], 0xFFFF_FFFF, &c)).contains("not a member"));
        let alone = world.split(&[r], u64::from(r), &c)?;
        assert_eq!((alone.rank(), alone.rank_count()), (0, 1));
        assert!(alone.parent().unwrap().same_as(world));
        assert!(invalid(alone.split(&[0], 1, &c)).contains("only a global"));
        // Each rule, alone broken, names the sizes and the rule.
        let sizes = |tp, dp, ep| GroupSizes { tp, dp, ep };
        for (bad, rule) in [
            (sizes(0, 4, 4), "tp is 0; every size must be at least 1"),
            (sizes(4, 0, 4), "dp is 0; every size must be at least 1"),
            (sizes(2, 2, 0), "ep is 0; every size must be at least 1"),
            (
                sizes(2, 4, 4),
                "tp x dp = 2 x 4 = 8 is not the world's 4 ranks",
            ),
            (
                sizes(3, 1, 3),
                "tp x dp = 3 x 1 = 3 is not the world's 4 ranks",
            ),
            (
                sizes(4, 2, 4),
                "tp x dp = 4 x 2 = 8 is not the world's 4 ranks",
            ),
            (
                sizes(2, 2, 1),
                "tp = 2 does not divide ep = 1 (an EP group holds whole TP groups)",
            ),
            (
                sizes(2, 2, 3),
                "tp = 2 does not divide ep = 3 (an EP group holds whole TP groups)",
            ),
            (sizes(1, 4, 3), "ep = 3 does not divide the world's 4 ranks"),
            (sizes(2, 2, 8), "ep = 8 does not divide the world's 4 ranks"),
        ] {
            let GroupSizes { tp, dp, ep } = bad;
            let named = format!("tp = {tp}, dp = {dp}, ep = {ep} on a world of 4 ranks: {rule}");
            assert_eq!(bad.check(4).unwrap_err().to_string(), bad_sizes(&named));
            match ParallelGroups::new(world, bad) {
                Err(Error::InvalidArgument(why)) => assert!(why.ends_with(&named), "{why}"),
                other => panic!("{bad:?}: expected InvalidArgument, got {other:?}"),
            }
        }
        // A rank count that overflows u32 when multiplied is no product of 4.
        let huge = sizes(1 << 16, 1 << 16, 1 << 16);
        assert!(
            huge.check(4)
                .unwrap_err()
                .to_string()
                .contains("= 4294967296 is not")
        );
        // Every layout of 4 that fits: the group sizes come out as asked.
        let stream = Stream::new(world.runtime())?;
        for ok in [
            sizes(1, 4, 1),
            sizes(1, 4, 4),
            sizes(2, 2, 2),
            sizes(2, 2, 4),
            sizes(4, 1, 4),
        ] {
            let groups = ParallelGroups::new(world, ok)?;
            assert_eq!(groups.sizes(), ok);
            let counts = [groups.tp(), groups.dp(), groups.ep()].map(|g| g.rank_count());
            assert_eq!(counts, [ok.tp, ok.dp, ok.ep], "{ok:?}");
            // Group ids depend on the group's place, not the layout: the next layout reuses
            // them for other members, so every rank's groups go before any rank splits anew.
            drop(groups);
            world.barrier(&stream)?;
            world.synchronize(&stream)?;
        }
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

/// Every wrapper on every element type on `group`, on buffers registered in it (symmetric)
/// and plain ones (staged), checked against host results.
fn every_collective_on(group: &Comm) -> symheap::Result<()> {
    let stream = Stream::new(group.runtime())?;
    for registered in [true, false] {
        let input = DeviceBuf::new(group, 1, registered)?;
        let output = DeviceBuf::new(group, 1, registered)?;
        crate::for_each_elem!(T => every_wrapper::<T>(group, &stream, &input, &output)?);
    }
    Ok(())
}

/// A world of 4 as TP pairs, DP pairs and the world: every collective on each group.
fn every_group(world: &Comm) -> symheap::Result<()> {
    let groups = ParallelGroups::new(world, GRID)?;
    let r = world.rank();
    assert_eq!(groups.tp().global_ranks(), [r & !1, r | 1]);
    assert_eq!(groups.dp().global_ranks(), [r & 1, (r & 1) + 2]);
    assert!(groups.ep().same_as(world));
    assert_eq!(groups.sub_groups().len(), 2);
    assert!(groups.tp().name()?.starts_with(&world.name()?));
    for g in [groups.tp(), groups.dp(), world] {
        every_collective_on(g)?;
    }
    Ok(())
}

#[test]
fn every_collective_runs_on_every_group_of_4_threads() {
    let session = EmuSession::start();
    emu::launch(4, every_group).unwrap();
    session.assert_clean();
}

#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_of_groups() {
    let _ = placement();
    let rt = symheap::Runtime::emulated().unwrap();
    let world = Comm::from_env(&rt, CommConfig::new().exec_timeout_secs(60)).unwrap();
    every_group(&world).unwrap();
}

#[test]
fn every_collective_runs_on_every_group_of_4_processes() {
    let outcome = rank_job_in("groups", 4, "rank_of_groups").run().unwrap();
    assert!(outcome.success(), "{}", failed(&outcome));
}

/// Which communicator a random step's collective runs on.
fn pick<'a>(rng: &mut Rng, views: &'a [SymPool; 3]) -> &'a SymPool {
    &views[rng.below(3) as usize]
}

/// `steps` random steps on a world pool attached to TP and DP pairs: allocations large
/// enough to grow it (which registers in all three), frees, all-reduces and all-gathers on
/// a random group (the same choice on every rank: one seed), synchronizes. Every 64th
/// collective's values are checked. Returns the placement digest and the op hash.
fn attached_program(world: &Comm, steps: usize) -> symheap::Result<(u64, u64, symheap::PoolStats)> {
    let groups = ParallelGroups::new(world, GRID)?;
    let pool = SymPool::new(world, PoolConfig::new(2 << 20).max_capacity(16 << 20))?;
    pool.attach(groups.tp())?;
    let e = pool.attach(groups.tp()).unwrap_err();
    assert!(e.to_string().contains("attached already"), "{e}");
    pool.attach(groups.dp())?;
    let views = [
        pool.clone(),
        pool.on_group(groups.tp())?,
        pool.on_group(groups.dp())?,
    ];
    let mut rng = Rng::new(7);
    let mut live: Vec<SymVec<f32>> = Vec::new();
    let mut windows = Vec::new();
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    let mut collectives = 0u64;
    for _ in 0..steps {
        match rng.below(8) {
            0..=2 => {
                let len = rng.log_uniform(1, 1 << 16) as usize;
                match SymVec::<f32>::zeroed(&pool, len) {
                    Ok(v) => {
                        let window = crate::support::window_index(&mut windows, v.window());
                        for word in [window as u64, v.offset(), len as u64] {
                            digest = (digest ^ word).wrapping_mul(0x0000_0100_0000_01b3);
                        }
                        live.push(v);
                    }
                    Err(Error::OutOfMemory(_)) => digest = digest.rotate_left(1),
                    Err(e) => return Err(e),
                }
            }
            3..=4 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                live.swap_remove(i);
            }
            5 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                let view = pick(&mut rng, &views);
                collectives += 1;
                if collectives.is_multiple_of(64) {
                    check_all_reduce(view, &mut live[i])?;
                } else {
                    view.all_reduce_in_place(&mut live[i], ReduceOp::Max)?;
                }
            }
            6 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                let view = pick(&mut rng, &views);
                // An all-gather of the vector's first element into a fresh buffer.
                let one = SymVec::<f32>::zeroed(&pool, 1)?;
                let mut all = SymVec::<f32>::zeroed(&pool, view.group().rank_count() as usize)?;
                view.all_gather(&one, &mut all)?;
                drop(live.swap_remove(i));
            }
            7 => pool.synchronize()?,
            _ => {}
        }
        // Every live block is in each group's window at the same offset.
        if let Some(v) = live.last() {
            for view in &views[1..] {
                let (_, offset) = view.window_get(v.device_ptr(), 4)?;
                assert_eq!(offset, v.offset());
            }
        }
    }
    pool.synchronize()?;
    pool.verify_symmetric()?;
    let grown = pool.stats();
    // Trim deregisters idle windows in every communicator, then the pool still runs on each.
    drop(live);
    pool.trim()?;
    let trimmed = pool.stats();
    assert!(trimmed.windows < grown.windows, "{trimmed:?}");
    assert!(
        trimmed
            .communicators
            .iter()
            .all(|c| c.windows == trimmed.windows)
    );
    for view in &views {
        check_all_reduce(view, &mut SymVec::<f32>::zeroed(&pool, 8)?)?;
    }
    // The heap map shows every rank's communicators.
    let map = symheap_tools::heap_map::render(&[pool.snapshot()]);
    assert!(
        map.contains("Communicators") && map.contains("_sub_"),
        "no communicators"
    );
    Ok((digest, pool.op_hash(), grown))
}

/// An all-reduce (sum) on `view`'s group, checked: each rank contributes its world rank + 1.
fn check_all_reduce(view: &SymPool, v: &mut SymVec<f32>) -> symheap::Result<()> {
    let me = view.comm().rank() as f32 + 1.0;
    v.copy_from_host(&vec![me; v.len()])?;
    view.all_reduce_in_place(v, ReduceOp::Sum)?;
    let want: f32 = view
        .group()
        .global_ranks()
        .iter()
        .map(|&g| g as f32 + 1.0)
        .sum();
    let got = v.to_host()?;
    assert!(got.iter().all(|&x| x == want), "{want} != {:?}", &got[..1]);
    Ok(())
}

#[test]
fn one_pool_attached_to_tp_and_dp_groups_places_alike_on_every_rank_for_10000_steps() {
    let session = EmuSession::start();
    let runs = emu::launch(4, |world| attached_program(world, 10_000)).unwrap();
    let (digest, hash, stats) = &runs[0];
    for (d, h, _) in &runs {
        assert_eq!((d, h), (digest, hash));
    }
    // It grew (registering each new window in all three communicators) and ran on each.
    assert!(stats.windows > 1, "{stats:?}");
    let comms = &stats.communicators;
    assert_eq!(comms.len(), 3);
    assert!(
        comms
            .iter()
            .all(|c| c.registrations == stats.windows as u64)
    );
    assert_eq!(stats.registrations, 3 * stats.windows as u64);
    assert!(
        comms.iter().all(|c| c.symmetric > 100 && c.staged == 0),
        "{comms:?}"
    );
    assert!(format!("{stats}").contains("comms"));
    session.assert_clean();
}

#[test]
fn attach_refuses_what_is_not_a_sub_communicator_of_the_pool() {
    let session = EmuSession::start();
    emu::launch(2, |world| {
        let pool = SymPool::new(world, PoolConfig::new(2 << 20))?;
        let e = pool.attach(world).unwrap_err();
        assert!(e.to_string().contains("own communicator"), "{e}");
        let pair = world.split(&[0, 1], 1, &CommConfig::new())?;
        // A pool made on the sub-communicator itself is a pool like any other.
        let own = SymPool::new(&pair, PoolConfig::new(2 << 20))?;
        let e = own.attach(world).unwrap_err();
        assert!(e.to_string().contains("split from the pool's"), "{e}");
        let e = pool.on_group(&pair).unwrap_err();
        assert!(e.to_string().contains("not attached"), "{e}");
        pool.attach(&pair)?;
        let mut v = SymVec::from_host(&own, &[1.0f32; 4])?;
        own.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
        assert_eq!(v.to_host()?, [2.0; 4]);
        // The pair's pool is registered in the pair alone: on the world its memory stages,
        // as the world finds no window of its own there.
        let (p, len) = (v.device_ptr(), 16);
        let kind = symheap::Collective::AllReduce;
        assert_eq!(
            pair.path(kind, p, len, p, len)?,
            symheap::CollectivePath::Symmetric
        );
        let staged = symheap::CollectivePath::Staged(symheap::Staged::NotInWindow);
        assert_eq!(world.path(kind, p, len, p, len)?, staged);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

/// TP pairs {0,1} and {2,3}; rank 2 is killed while rank 3 waits for it in a TP all-reduce.
/// Rank 3 fails within 2 s naming it (its rank in the pair, 0); the pair {0,1} does not
/// depend on it and keeps reducing.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_of_killed_tp_peer() {
    let _ = placement();
    let rt = symheap::Runtime::emulated().unwrap();
    let world = Comm::from_env(&rt, CommConfig::new().exec_timeout_secs(60)).unwrap();
    let groups = ParallelGroups::new(&world, GRID).unwrap();
    let tp = groups.tp();
    let stream = Stream::new(&rt).unwrap();
    let buf = DeviceBuf::new(tp, 1, true).unwrap();
    let all_reduce = || {
        // SAFETY: 16 floats fit the buffer; synchronised before anything reads it.
        unsafe {
            tp.raw().all_reduce(
                buf.ptr(),
                buf.ptr(),
                16,
                symheap::sys::HcclDataType::HCCL_DATA_TYPE_FP32,
                ReduceOp::Sum,
                &stream,
            )?
        };
        tp.synchronize(&stream)
    };
    match world.rank() {
        2 => {
            std::thread::sleep(Duration::from_millis(300));
            // SAFETY: raising a signal has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        3 => {
            let started = Instant::now();
            let err = all_reduce().unwrap_err().to_string();
            let waited = started.elapsed();
            assert!(waited < Duration::from_millis(2300), "{waited:?}");
            assert!(err.contains("[0]") && err.contains("killed"), "{err}");
            // With its peer gone the window is deregistered here alone, as HCCL's
            // deregistration needs no peer: nothing to record.
            let windows = symheap::emu::testing::counters().windows;
            drop(buf);
            assert!(rt.take_drop_errors().is_empty());
            assert_eq!(symheap::emu::testing::counters().windows, windows - 1);
        }
        _ => {
            for _ in 0..50 {
                all_reduce().unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
            drop(buf);
        }
    }
}

#[test]
fn a_rank_killed_while_its_tp_peer_waits_fails_that_peer_alone_within_2_seconds() {
    let outcome = rank_job_in("groups", 4, "rank_of_killed_tp_peer")
        .run()
        .unwrap();
    for (rank, status) in outcome.statuses.iter().enumerate() {
        match rank {
            2 => assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(status),
                Some(9),
                "{}",
                failed(&outcome)
            ),
            _ => assert!(status.success(), "rank {rank}: {}", failed(&outcome)),
        }
    }
    assert_eq!(outcome.first_failure, Some(2), "{}", failed(&outcome));
}

/// A world of 4 with TP pairs {0,1} {2,3}, one pool on it attached to the pairs with 1 MiB of
/// its 2 in use, and a growth that `inject` (given the rank) makes fail: the pool, its TP
/// view, the growth's error, and how long it took. The first block stays allocated.
fn failed_growth(
    inject: impl FnOnce(u32),
) -> (Comm, SymPool, SymPool, SymVec<f32>, Error, Duration) {
    let rt = symheap::Runtime::emulated().unwrap();
    let world = Comm::from_env(&rt, CommConfig::new().exec_timeout_secs(2)).unwrap();
    let groups = ParallelGroups::new(&world, GRID).unwrap();
    let pool = SymPool::new(&world, PoolConfig::new(2 << 20).max_capacity(8 << 20)).unwrap();
    pool.attach(groups.tp()).unwrap();
    let tp = pool.on_group(groups.tp()).unwrap();
    let first = SymVec::<f32>::zeroed(&pool, 1 << 18).unwrap();
    inject(world.rank());
    let started = Instant::now();
    let err = SymVec::<f32>::zeroed(&pool, 1 << 19).unwrap_err();
    emu::testing::clear_injected_failures();
    let took = started.elapsed();
    assert_eq!(
        pool.stats().windows,
        1,
        "a window of the failed growth is left: {err}"
    );
    (world, pool, tp, first, err, took)
}

/// After a failed growth: AllReduces on the world and in the pair, then a growth whose
/// window works in the pair, all checked.
fn goes_on(pool: &SymPool, tp: &SymPool) -> symheap::Result<()> {
    for (view, ranks) in [(pool, 4.0), (tp, 2.0)] {
        let mut v = SymVec::from_host(pool, &[1.0f32; 256])?;
        view.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
        assert_eq!(v.to_host()?, vec![ranks; 256]);
    }
    let mut grown = SymVec::from_host(pool, &[1.0f32; 1 << 19])?;
    tp.all_reduce_in_place(&mut grown, ReduceOp::Sum)?;
    assert_eq!(grown.to_host()?[..4], [2.0; 4]);
    assert_eq!(pool.stats().windows, 2);
    Ok(())
}

/// Growth registers the new window in the world, then in the pair: rank 2's second
/// registration fails. Rank 3 waits in its own until the exec timeout, so the agreement that
/// follows holds or breaks off by a few milliseconds. Either way every rank's growth fails
/// within a few timeouts, and then the pool goes on (the agreement held: every rank knows) or
/// is poisoned with the cause (it broke off: the ranks are steps apart), never starting a
/// collective its peers will not join.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_of_registration_failure() {
    let _ = placement();
    let (world, pool, tp, first, err, took) = failed_growth(|rank| {
        if rank == 2 {
            emu::testing::inject_failure("HcclCommSymWinRegister", 2, 7);
        }
    });
    assert!(took < Duration::from_secs(8), "{err}");
    if world.rank() == 2 {
        assert!(err.to_string().contains("injected failure"), "{err}");
    }
    match goes_on(&pool, &tp) {
        Ok(()) => {}
        Err(Error::Poisoned(cause)) => {
            let cause = cause.to_string();
            assert!(cause.contains("HcclCommSymWinRegister") || cause.contains("HcclAllGather"));
        }
        Err(e) => panic!("rank {}: neither poisoned nor going on: {e}", world.rank()),
    }
    drop(first);
}

/// Every rank's registration in its pair fails at once: an agreed failure, and the pool goes
/// on.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_of_registration_failing_everywhere() {
    let _ = placement();
    let (_world, pool, tp, first, err, took) = failed_growth(|_| {
        emu::testing::inject_failure("HcclCommSymWinRegister", 2, 7);
    });
    // No rank waited for a peer (that would take the 2 s exec timeout).
    assert!(took < Duration::from_millis(1900), "{took:?}: {err}");
    assert!(err.to_string().contains("injected failure"), "{err}");
    goes_on(&pool, &tp).unwrap();
    drop(first);
}

/// Rank 1's AllGather of the registration agreement fails: the agreement breaks off on every
/// rank (the others time out waiting for it), and every pool is poisoned with its cause.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_of_broken_registration_agreement() {
    let _ = placement();
    let (world, pool, tp, first, err, took) = failed_growth(|rank| {
        if rank == 1 {
            // The growth's AllGathers: the memory agreement, then the registration's.
            emu::testing::inject_failure("HcclAllGather", 2, 5);
        }
    });
    assert!(took < Duration::from_secs(5), "{err}");
    match goes_on(&pool, &tp) {
        Err(Error::Poisoned(cause)) => assert!(cause.to_string().contains("HcclAllGather")),
        other => panic!("rank {}: not poisoned: {other:?}", world.rank()),
    }
    drop(first);
}

#[test]
fn a_failed_group_registration_fails_the_growth_everywhere_and_poisons_only_where_ranks_disagree() {
    for rank_test in [
        "rank_of_registration_failure",
        "rank_of_registration_failing_everywhere",
        "rank_of_broken_registration_agreement",
    ] {
        let outcome = rank_job_in("groups", 4, rank_test).run().unwrap();
        assert!(outcome.success(), "{rank_test}: {}", failed(&outcome));
    }
}
