//! SymPool on 1, 2 and 4 emulated ranks: symmetric offsets, window_get, verification,
//! typed collectives, growth / trim / OOM agreement, stream-safe reuse, no leaks.

use symheap::ReduceOp;
use symheap::sys::{ACL_ERROR_RT_INTERNAL_ERROR, ACL_ERROR_RT_MEMORY_ALLOCATION, HcclResult};
use symheap::{Error, PoolConfig, SymBlock, SymBox, SymPool, SymVec, emu};

use crate::harness::EmuSession;
use crate::support::rng::Rng;

/// Where an allocation landed: the window's order of appearance on this rank, the offset and
/// the length; `None` for an allocation that ran out of memory.
type Location = Option<(usize, u64, u64)>;

/// A random program of allocs (large enough to grow the pool and hit its limit), frees,
/// collectives and synchronisations; returns every allocation's location and checks
/// `window_get` against every live allocation after every step.
pub(crate) fn random_program(
    pool: &SymPool,
    seed: u64,
    steps: usize,
) -> symheap::Result<Vec<Location>> {
    let mut rng = Rng::new(seed);
    let mut live: Vec<SymVec<f32>> = Vec::new();
    let mut windows = Vec::new();
    let mut locations = Vec::new();
    let ranks = pool.comm().rank_count();
    for _ in 0..steps {
        match rng.below(10) {
            0..=4 => {
                let len = rng.log_uniform(1, 1 << 18) as usize;
                match SymVec::<f32>::zeroed(pool, len) {
                    Ok(v) => {
                        let window = crate::support::window_index(&mut windows, v.window());
                        locations.push(Some((window, v.offset(), len as u64)));
                        live.push(v);
                    }
                    Err(Error::OutOfMemory(_)) => locations.push(None),
                    Err(e) => return Err(e),
                }
            }
            5..=6 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                live.swap_remove(i);
            }
            7 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                pool.all_reduce_in_place(&mut live[i], ReduceOp::Sum)?;
            }
            8 => pool.synchronize()?,
            _ => {}
        }
        // window_get agrees with every live allocation (HCCL finds nothing on one rank).
        for v in &live {
            let bytes = (v.len() * 4).max(1) as u64;
            match pool.window_get(v.device_ptr(), bytes) {
                Ok(found) => assert_eq!(found, (v.window(), v.offset())),
                Err(Error::Hccl {
                    code: HcclResult::HCCL_E_NOT_FOUND,
                    ..
                }) if ranks == 1 => {}
                Err(e) => return Err(e),
            }
        }
    }
    pool.synchronize()?;
    Ok(locations)
}

/// Runs the random program on every rank; each rank's locations, stats and hash.
fn run_program(ranks: u32) -> Vec<(Vec<Location>, symheap::PoolStats, u64)> {
    emu::launch(ranks, |comm| {
        let config = PoolConfig::new(2 << 20).max_capacity(8 << 20);
        let pool = SymPool::new(comm, config)?;
        let locations = random_program(&pool, 42, 400)?;
        pool.verify_symmetric()?;
        Ok((locations, pool.stats(), pool.op_hash()))
    })
    .unwrap()
}

fn same_offsets_on_every_rank(ranks: u32) {
    let session = EmuSession::start();
    let mut runs = run_program(ranks);
    if ranks == 1 {
        // One rank has no peer to agree with: it must agree with itself on a second run.
        runs.extend(run_program(1));
    }
    let (locations, stats, _) = &runs[0];
    // The program is sized to exercise growth, the OOM path and its release of pending frees.
    assert!(stats.windows > 1 && stats.registrations > 1, "{stats:?}");
    assert!(
        stats.oom_count > 0 && locations.contains(&None),
        "{stats:?}"
    );
    for run in &runs[1..] {
        assert_eq!(run.0, *locations);
        assert_eq!(run.2, runs[0].2);
    }
    session.assert_clean();
}

#[test]
fn random_programs_give_identical_offsets_on_1_rank() {
    same_offsets_on_every_rank(1);
}

#[test]
fn random_programs_give_identical_offsets_on_2_ranks() {
    same_offsets_on_every_rank(2);
}

#[test]
fn random_programs_give_identical_offsets_on_4_ranks() {
    same_offsets_on_every_rank(4);
}

#[test]
fn one_extra_alloc_is_caught_on_every_rank() {
    let session = EmuSession::start();
    let outcomes = emu::launch(4, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
        let _a = pool.alloc(4096, 0)?;
        let _extra = if comm.rank() == 2 {
            Some(pool.alloc(512, 0)?)
        } else {
            None
        };
        Ok(pool.verify_symmetric().err().map(|e| e.to_string()))
    })
    .unwrap();
    for (rank, outcome) in outcomes.iter().enumerate() {
        let msg = outcome
            .as_deref()
            .unwrap_or_else(|| panic!("rank {rank} saw no asymmetry"));
        assert!(msg.contains("ranks [2]"), "rank {rank}: {msg}");
    }
    session.assert_clean();
}

#[test]
fn strict_pools_refuse_collectives_after_asymmetric_calls() {
    let session = EmuSession::start();
    let outcomes = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20).strict_symmetry(true))?;
        let mut v = SymVec::from_host(&pool, &[1.0f32; 8])?;
        pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
        assert_eq!(v.to_host()?, [2.0; 8]);
        let _extra = if comm.rank() == 0 {
            Some(pool.alloc(512, 0)?)
        } else {
            None
        };
        Ok(pool.all_reduce_in_place(&mut v, ReduceOp::Sum).err())
    })
    .unwrap();
    for outcome in outcomes {
        assert!(matches!(outcome, Some(Error::Asymmetric(_))), "{outcome:?}");
    }
    session.assert_clean();
}

#[test]
fn a_skipped_or_different_collective_is_caught_before_it_runs() {
    let session = EmuSession::start();
    for case in ["skipped", "different op"] {
        let outcomes = emu::launch(2, |comm| {
            let pool = SymPool::new(comm, PoolConfig::new(8 << 20).strict_symmetry(true))?;
            let mut x = SymVec::from_host(&pool, &[1.0f32; 8])?;
            let mut y = SymVec::from_host(&pool, &[1.0f32; 8])?;
            let op = if case == "different op" && comm.rank() == 1 {
                ReduceOp::Max
            } else {
                ReduceOp::Sum
            };
            // Rank 1 skips the collective on x and goes on to y.
            let first = if case == "skipped" && comm.rank() == 1 {
                &mut y
            } else {
                &mut x
            };
            Ok(pool.all_reduce_in_place(first, op).err())
        })
        .unwrap();
        for outcome in outcomes {
            assert!(
                matches!(outcome, Some(Error::Asymmetric(_))),
                "{case}: {outcome:?}"
            );
        }
    }
    session.assert_clean();
}

#[test]
fn collectives_are_part_of_the_op_hash() {
    let session = EmuSession::start();
    let hashes = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
        let mut v = SymVec::from_host(&pool, &[1.0f32; 8])?;
        let before = pool.op_hash();
        pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
        let after_sum = pool.op_hash();
        pool.all_reduce_in_place(&mut v, ReduceOp::Max)?;
        pool.synchronize()?;
        Ok([before, after_sum, pool.op_hash()])
    })
    .unwrap();
    assert_eq!(hashes[0], hashes[1], "equal on every rank");
    let [before, after_sum, after_max] = hashes[0];
    assert!(
        before != after_sum && after_sum != after_max,
        "{:x?}",
        hashes[0]
    );
    session.assert_clean();
}

#[test]
fn typed_collectives_match_the_host() {
    let session = EmuSession::start();
    emu::launch(4, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
        let (r, n) = (comm.rank() as i64, 4usize);
        let mine: Vec<i64> = (0..12).map(|i| i * 10 + r).collect();
        let all: Vec<Vec<i64>> = (0..4)
            .map(|p| (0..12).map(|i| i * 10 + p).collect())
            .collect();
        let input = SymVec::from_host(&pool, &mine)?;

        let mut sum = SymVec::<i64>::zeroed(&pool, 12)?;
        pool.all_reduce(&input, &mut sum, ReduceOp::Sum)?;
        let want: Vec<i64> = (0..12).map(|i| all.iter().map(|v| v[i]).sum()).collect();
        assert_eq!(sum.to_host()?, want);

        let mut max = SymVec::from_host(&pool, &mine)?;
        pool.all_reduce_in_place(&mut max, ReduceOp::Max)?;
        assert_eq!(max.to_host()?, all[3]);

        let mut gathered = SymVec::<i64>::zeroed(&pool, 12 * n)?;
        pool.all_gather(&input, &mut gathered)?;
        assert_eq!(gathered.to_host()?, all.concat());

        let mut scattered = SymVec::<i64>::zeroed(&pool, 3)?;
        pool.reduce_scatter(&input, &mut scattered, ReduceOp::Sum)?;
        assert_eq!(scattered.to_host()?, want[r as usize * 3..][..3]);

        let mut exchanged = SymVec::<i64>::zeroed(&pool, 12)?;
        pool.all_to_all(&input, &mut exchanged)?;
        let expect: Vec<i64> = (0..n)
            .flat_map(|p| all[p][r as usize * 3..][..3].to_vec())
            .collect();
        assert_eq!(exchanged.to_host()?, expect);

        let mut scalar = SymBox::new(&pool, half::bf16::from_f32(1.5))?;
        pool.all_reduce_in_place(scalar.as_vec_mut(), ReduceOp::Sum)?;
        assert_eq!(scalar.get()?, half::bf16::from_f32(6.0));
        scalar.set(half::bf16::ONE)?;
        assert_eq!(scalar.get()?, half::bf16::ONE);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

/// Every bad input the pool and its typed layer can be given, each with the error it must
/// get; none changes the pool's accounting, and a collective still lines up afterwards.
#[test]
fn bad_inputs_get_typed_errors_and_change_nothing() {
    type Case<'a> = (&'a str, Box<dyn Fn() -> symheap::Result<()> + 'a>);
    let session = EmuSession::start();
    let counts = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let other = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let six = SymVec::<f32>::zeroed(&pool, 6)?;
        let five = std::cell::RefCell::new(SymVec::<f32>::zeroed(&pool, 5)?);
        let five_out = std::cell::RefCell::new(SymVec::<f32>::zeroed(&pool, 5)?);
        let foreign = std::cell::RefCell::new(SymVec::<f32>::zeroed(&other, 6)?);
        let sum = ReduceOp::Sum;
        let invalid: Vec<Case> = vec![
            ("alloc of 0 bytes", Box::new(|| pool.alloc(0, 0).map(drop))),
            ("alignment 3", Box::new(|| pool.alloc(512, 3).map(drop))),
            (
                "alignment 2^63",
                Box::new(|| pool.alloc(512, 1 << 63).map(drop)),
            ),
            (
                "alignment above the device's",
                Box::new(|| pool.alloc(512, 4 << 20).map(drop)),
            ),
            (
                "overflowing size",
                Box::new(|| pool.alloc(u64::MAX, 0).map(drop)),
            ),
            (
                "overflowing SymVec",
                Box::new(|| SymVec::<f32>::zeroed(&pool, usize::MAX).map(drop)),
            ),
            (
                "capacity 0",
                Box::new(|| SymPool::new(comm, PoolConfig::new(0)).map(drop)),
            ),
            (
                "granularity 768",
                Box::new(|| {
                    SymPool::new(comm, PoolConfig::new(4 << 20).granularity(768)).map(drop)
                }),
            ),
            (
                "granularity 0",
                Box::new(|| SymPool::new(comm, PoolConfig::new(4 << 20).granularity(0)).map(drop)),
            ),
            (
                "max_capacity below capacity",
                Box::new(|| {
                    SymPool::new(comm, PoolConfig::new(4 << 20).max_capacity(1 << 20)).map(drop)
                }),
            ),
            (
                "private_capacity 0",
                Box::new(|| {
                    SymPool::new(comm, PoolConfig::new(4 << 20).private_capacity(0)).map(drop)
                }),
            ),
            (
                "all_reduce, lengths differ",
                Box::new(|| pool.all_reduce(&six, &mut *five.borrow_mut(), sum)),
            ),
            (
                "all_reduce, foreign output",
                Box::new(|| pool.all_reduce(&six, &mut *foreign.borrow_mut(), sum)),
            ),
            (
                "all_reduce, foreign input",
                Box::new(|| pool.all_reduce(&*foreign.borrow(), &mut *five.borrow_mut(), sum)),
            ),
            (
                "all_reduce_in_place, foreign",
                Box::new(|| pool.all_reduce_in_place(&mut *foreign.borrow_mut(), sum)),
            ),
            (
                "all_gather, output length",
                Box::new(|| pool.all_gather(&six, &mut *five.borrow_mut())),
            ),
            (
                "all_gather, foreign output",
                Box::new(|| pool.all_gather(&*five.borrow(), &mut *foreign.borrow_mut())),
            ),
            (
                "reduce_scatter, input length",
                Box::new(|| pool.reduce_scatter(&six, &mut *five.borrow_mut(), sum)),
            ),
            (
                "reduce_scatter, foreign input",
                Box::new(|| pool.reduce_scatter(&*foreign.borrow(), &mut *five.borrow_mut(), sum)),
            ),
            (
                "all_to_all, lengths differ",
                Box::new(|| pool.all_to_all(&six, &mut *five.borrow_mut())),
            ),
            (
                "all_to_all, not divisible",
                Box::new(|| pool.all_to_all(&*five.borrow(), &mut *five_out.borrow_mut())),
            ),
            (
                "copy_from_host, length",
                Box::new(|| five.borrow_mut().copy_from_host(&[1.0; 6])),
            ),
            (
                "from another device",
                Box::new(|| {
                    comm.runtime().set_device(comm.device() + 8)?;
                    let made = SymPool::new(comm, PoolConfig::new(4 << 20)).map(drop);
                    comm.runtime().set_device(comm.device())?;
                    made
                }),
            ),
        ];
        for (what, call) in &invalid {
            let before = pool.stats();
            let got = call();
            assert!(
                matches!(got, Err(Error::InvalidArgument(_))),
                "{what}: {got:?}"
            );
            assert_eq!(pool.stats(), before, "{what}");
        }
        let before = pool.stats();
        let too_big = pool.alloc(64 << 20, 0);
        assert!(matches!(too_big, Err(Error::OutOfMemory(_))), "{too_big:?}");
        let mut host = [0u8; 64];
        let host_ptr = symheap::raw::DevicePtr::from_raw(host.as_mut_ptr().cast());
        let not_in_a_window = pool.window_get(host_ptr, 1);
        assert!(matches!(
            not_in_a_window,
            Err(Error::Hccl {
                code: HcclResult::HCCL_E_NOT_FOUND,
                ..
            })
        ));
        assert_eq!(pool.stats().allocated, before.allocated);
        // Nothing above reached the stream: a real collective still lines up on both ranks.
        pool.all_reduce_in_place(&mut *five.borrow_mut(), sum)?;
        pool.verify_symmetric()?;
        Ok(invalid.len() + 2)
    })
    .unwrap();
    println!("{} bad pool inputs", counts[0]);
    session.assert_clean();
}

#[test]
fn growth_trim_and_oom_agree_across_ranks() {
    let session = EmuSession::start();
    let mib = 1u64 << 20;
    let reports = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(2 * mib).max_capacity(6 * mib))?;
        let a = pool.alloc(mib, 0)?;
        let b = pool.alloc(mib + 512, 0)?; // no room beside `a` and the check block: grows
        let grown = pool.stats();
        assert_eq!((grown.windows, grown.registrations), (2, 2));
        assert_ne!(a.window(), b.window(), "a block never spans two windows");
        let oom = pool.alloc(3 * mib, 0).unwrap_err(); // 2 MiB of room left: no
        assert!(matches!(oom, Error::OutOfMemory(_)));
        pool.reserve(2 * mib)?; // grows to the 6 MiB limit ahead of time
        assert_eq!(pool.stats().registrations, 3);
        assert!(pool.reserve(2 * mib).is_ok(), "already fits: no growth");
        drop(b);
        let released = pool.trim()?;
        let stats = pool.stats();
        Ok((
            oom.to_string(),
            stats.oom_count,
            released,
            stats.windows,
            stats.registrations,
            pool.op_hash(),
        ))
    })
    .unwrap();
    assert_eq!(reports[0], reports[1], "ranks disagree");
    let (oom, oom_count, released, windows, registrations, _) = &reports[0];
    assert!(
        oom.contains("out of memory") && oom.contains("max_capacity"),
        "{oom}"
    );
    assert!(
        oom.contains(&format!("asked for {} bytes", 3 * mib)),
        "{oom}"
    );
    assert_eq!(
        (*oom_count, *released, *windows, *registrations),
        (1, 4 * mib, 1, 3)
    );
    session.assert_clean();
}

#[test]
fn registrations_stay_flat_over_a_thousand_steps() {
    let session = EmuSession::start();
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
        let before = pool.stats().registrations;
        for step in 0..1000 {
            let mut x = SymVec::<f32>::zeroed(&pool, 64 + step % 7)?;
            let _scratch: SymBlock = pool.alloc(4096, 0)?;
            pool.all_reduce_in_place(&mut x, ReduceOp::Sum)?;
            pool.synchronize()?;
        }
        let stats = pool.stats();
        assert_eq!(stats.registrations, before);
        assert_eq!(stats.alloc_count, 2001); // and the pool's own block
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn with_deferred_reuse_a_block_in_use_by_queued_work_is_not_reused_before_synchronize() {
    let session = EmuSession::start();
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20).deferred_reuse(true))?;
        let mut v = SymVec::<f32>::zeroed(&pool, 1024)?;
        let offset = v.offset();
        pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
        drop(v); // the AllReduce may still be running
        assert_eq!(pool.stats().pending_frees, 1);
        let w = SymVec::<f32>::zeroed(&pool, 1024)?;
        assert_ne!(w.offset(), offset, "reused while queued work may touch it");
        drop(w); // never used by queued work: back to the heap at once
        pool.synchronize()?;
        assert_eq!(pool.stats().pending_frees, 0);
        let again = SymVec::<f32>::zeroed(&pool, 1024)?;
        assert_eq!(
            again.offset(),
            offset,
            "released in program order at synchronize"
        );
        // A block recorded on another stream waits for that stream too.
        let side = symheap::Stream::new(comm.runtime())?;
        again.record_stream(&side);
        drop(again);
        assert_eq!(pool.stats().pending_frees, 1);
        pool.synchronize()?;
        assert_eq!(pool.stats().pending_frees, 0);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn the_allocator_api2_adapter_backs_a_vec() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let before = pool.stats();
        {
            let mut v = allocator_api2::vec::Vec::new_in(pool.allocator()?);
            for i in 0..10_000u32 {
                v.push(i); // grows through allocate / deallocate
            }
            assert_eq!(v.iter().map(|&x| u64::from(x)).sum::<u64>(), 49_995_000);
            let during = pool.stats();
            assert!(during.private_allocated >= 40_000, "{during:?}");
            assert_eq!(
                during.allocated, before.allocated,
                "nothing from the windows"
            );
            assert_eq!(
                during.private_reserved,
                2 << 20,
                "an eighth of 4 MiB, rounded up"
            );
        }
        assert_eq!(pool.stats().private_allocated, 0, "every block came back");
        assert_eq!(pool.runtime().take_drop_errors().len(), 0);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn containers_that_grow_differently_per_rank_leave_symmetric_locations_alone() {
    let session = EmuSession::start();
    let results = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20).strict_symmetry(true))?;
        let mut scratch = allocator_api2::vec::Vec::new_in(pool.allocator()?);
        let before = pool.op_hash();
        // Rank-dependent growth: 50 000 or 100 000 elements.
        for i in 0..50_000 * (u64::from(comm.rank()) + 1) {
            scratch.push(i);
        }
        assert_eq!(
            pool.op_hash(),
            before,
            "container growth is private to the rank"
        );
        let mut v = SymVec::from_host(&pool, &[comm.rank() as f32 + 1.0; 64])?;
        pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
        drop(scratch);
        pool.verify_symmetric()?;
        Ok((v.offset(), v.to_host()?))
    })
    .unwrap();
    assert_eq!(results[0].0, results[1].0, "same offset on both ranks");
    for (_, values) in results {
        assert_eq!(values, [3.0; 64]);
    }
    session.assert_clean();
}

#[test]
fn a_failed_step_of_pool_creation_undoes_everything() {
    let session = EmuSession::start();
    for call in [
        "aclrtReserveMemAddress",
        "aclrtMallocPhysical",
        "aclrtMapMem",
        "HcclCommSymWinRegister",
        "HcclAllGather",
        "aclrtCreateStream",
    ] {
        let err = emu::launch(1, |comm| {
            emu::testing::inject_failure(call, 1, 1);
            SymPool::new(comm, PoolConfig::new(4 << 20)).map(|_| ())
        })
        .unwrap_err();
        assert!(err.to_string().contains(call), "{call}: {err}");
        session.assert_clean();
    }
}

#[test]
fn failed_growth_leaves_a_working_pool() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(2 << 20).max_capacity(8 << 20))?;
        emu::testing::inject_failure("aclrtMallocPhysical", 1, ACL_ERROR_RT_MEMORY_ALLOCATION);
        let err = pool.alloc(3 << 20, 0).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Acl {
                    call: "aclrtMallocPhysical",
                    code: ACL_ERROR_RT_MEMORY_ALLOCATION,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(pool.stats().windows, 1);
        let grown = pool.alloc(3 << 20, 0)?; // the next try grows
        assert_eq!(pool.stats().windows, 2);
        drop(grown);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn a_window_that_fails_to_deregister_is_freed_with_its_communicator() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(2 << 20).max_capacity(8 << 20))?;
        drop(pool.alloc(3 << 20, 0)?); // grows, then is free
        emu::testing::inject_failure("HcclCommSymWinDeregister", 1, HcclResult::HCCL_E_INTERNAL.0);
        let err = pool.trim().unwrap_err();
        assert!(
            matches!(
                err,
                Error::Hccl {
                    call: "HcclCommSymWinDeregister",
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(pool.stats().windows, 1);
        // And on drop: the error is recorded, not panicked.
        emu::testing::inject_failure("HcclCommSymWinDeregister", 1, HcclResult::HCCL_E_INTERNAL.0);
        let rt = comm.runtime().clone();
        drop(pool);
        assert_eq!(rt.take_drop_errors().len(), 1);
        Ok(())
    })
    .unwrap();
    // Both windows' memory was released when the communicator was destroyed.
    session.assert_clean();
}

#[test]
fn a_failed_collective_poisons_the_pool() {
    let session = EmuSession::start();
    let rt = symheap::Runtime::emulated().unwrap();
    let config = symheap::CommConfig::new().exec_timeout_secs(1);
    let outcomes = emu::launch_with(&rt, 2, &config, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let mut v = SymVec::from_host(&pool, &[1.0f32; 16])?;
        if comm.rank() == 0 {
            pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?; // rank 1 never joins
            drop(v);
            assert!(matches!(
                pool.synchronize(),
                Err(Error::Collective {
                    code: HcclResult::HCCL_E_TIMEOUT,
                    ..
                })
            ));
            // Nothing more is handed out (the buffer went back in stream order before the
            // failure was seen; host access to anything reports it); the refusal carries the
            // cause as its source.
            let refused = pool.alloc(512, 0).unwrap_err();
            let cause = std::error::Error::source(&refused).and_then(|c| c.downcast_ref());
            assert!(
                matches!(cause, Some(Error::Collective { .. })),
                "{refused:?}"
            );
            assert!(matches!(pool.synchronize(), Err(Error::Poisoned(_))));
        }
        Ok(())
    });
    outcomes.unwrap();
    session.assert_clean();
}

#[test]
fn reading_a_buffer_after_a_failed_collective_poisons_the_pool() {
    let session = EmuSession::start();
    let rt = symheap::Runtime::emulated().unwrap();
    let config = symheap::CommConfig::new().exec_timeout_secs(1);
    let outcomes = emu::launch_with(&rt, 2, &config, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let mut v = SymVec::from_host(&pool, &[1.0f32; 16])?;
        let untouched = SymVec::from_host(&pool, &[2.0f32; 16])?;
        if comm.rank() == 0 {
            let side = symheap::Stream::new(comm.runtime())?;
            v.record_stream(&side);
            pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?; // rank 1 never joins
            assert!(matches!(
                v.to_host(),
                Err(Error::Collective {
                    code: HcclResult::HCCL_E_TIMEOUT,
                    ..
                })
            ));
            // The read poisoned the pool: nothing more is handed out or read ...
            assert!(matches!(v.to_host(), Err(Error::Poisoned(_))));
            assert!(matches!(untouched.to_host(), Err(Error::Poisoned(_))));
            assert!(matches!(pool.alloc(512, 0), Err(Error::Poisoned(_))));
            // ... and even a block no queued work used is never reused.
            drop(untouched);
            assert_eq!(pool.stats().pending_frees, 1);
            assert!(matches!(pool.synchronize(), Err(Error::Poisoned(_))));
        }
        Ok(())
    });
    outcomes.unwrap();
    session.assert_clean();
}

#[test]
fn pooled_collectives_take_the_symmetric_path() {
    let session = EmuSession::start();
    let before = emu::testing::counters();
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let mut v = SymVec::from_host(&pool, &[1.0f32; 64])?;
        for _ in 0..10 {
            pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
        }
        pool.synchronize()
    })
    .unwrap();
    let after = emu::testing::counters();
    // Per rank: the warm-up and ten AllReduces, all zero-copy; the agreements on the window's
    // memory before it was registered and on its registration (AllGathers of plain memory)
    // staged.
    assert_eq!(
        after.symmetric_collectives - before.symmetric_collectives,
        2 * 11
    );
    assert_eq!(after.staged_collectives - before.staged_collectives, 2 * 2);
    session.assert_clean();
}

#[test]
fn the_allocator_adapter_never_grows_the_pool() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(2 << 20).max_capacity(64 << 20))?;
        let alloc = pool.allocator()?;
        let mut v: allocator_api2::vec::Vec<u8, _> =
            allocator_api2::vec::Vec::new_in(alloc.clone());
        assert!(
            v.try_reserve(4 << 20).is_err(),
            "the private region (2 MiB) is full, and the adapter never grows the pool"
        );
        assert_eq!(pool.stats().windows, 1);
        // A pointer the pool never handed out is reported, not trusted.
        let foreign = std::ptr::NonNull::<u8>::dangling();
        // SAFETY: deliberately breaks the contract; the adapter checks every address.
        unsafe {
            allocator_api2::alloc::Allocator::deallocate(
                &alloc,
                foreign,
                std::alloc::Layout::new::<u8>(),
            )
        };
        assert_eq!(comm.runtime().take_drop_errors().len(), 1);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

/// Allocations are as aligned as asked, also where the pool's granularity exceeds the device's
/// (2 MiB): through `alloc`, `SymVec` and the allocator adapter, at 4 MiB and 8 MiB.
#[test]
fn allocations_keep_alignments_above_the_device_granularity() {
    use symheap::allocator_api2::alloc::{Allocator, Layout};
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        for granularity in [4u64 << 20, 8 << 20] {
            let config = PoolConfig::new(32 << 20).granularity(granularity);
            let pool = SymPool::new(comm, config)?;
            let aligned = |addr: usize| (addr as u64).is_multiple_of(granularity);
            let block = pool.alloc(4096, granularity)?;
            assert!(
                aligned(block.device_ptr().as_raw() as usize),
                "alloc at {granularity}"
            );
            let v = SymVec::<f32>::zeroed(&pool, 16)?;
            assert!(
                aligned(v.device_ptr().as_raw() as usize),
                "SymVec at {granularity}"
            );
            let layout = Layout::from_size_align(4096, granularity as usize).unwrap();
            let adapter = pool.allocator()?;
            let memory = adapter.allocate(layout).unwrap();
            assert!(
                aligned(memory.as_ptr() as *mut u8 as usize),
                "adapter at {granularity}"
            );
            // SAFETY: allocated just above by this allocator with this layout.
            unsafe { adapter.deallocate(memory.cast(), layout) };
        }
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

/// A call that synchronises the pool's stream and so sees a failed collective poisons the
/// pool, whichever call it is: here `verify_symmetric` and an `alloc` that grows the pool. A
/// read of the collective's buffer afterwards must not return the stale input.
#[test]
fn every_call_that_sees_a_failed_collective_poisons_the_pool() {
    let session = EmuSession::start();
    let rt = symheap::Runtime::emulated().unwrap();
    let config = symheap::CommConfig::new().exec_timeout_secs(1);
    for growth in [false, true] {
        let outcomes = emu::launch_with(&rt, 2, &config, |comm| {
            let pool = SymPool::new(comm, PoolConfig::new(2 << 20).max_capacity(8 << 20))?;
            let mut v = SymVec::from_host(&pool, &[1.0f32; 16])?;
            if comm.rank() == 0 {
                pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?; // rank 1 never joins
                let seen = if growth {
                    pool.alloc(3 << 20, 0).map(drop)
                } else {
                    pool.verify_symmetric()
                };
                assert!(seen.is_err(), "growth {growth}: the failure is reported");
                let read = v.to_host();
                assert!(
                    matches!(read, Err(Error::Poisoned(_))),
                    "growth {growth}: {read:?}"
                );
            }
            Ok(())
        });
        outcomes.unwrap();
    }
    session.assert_clean();
}

#[test]
fn a_failed_warm_up_of_a_new_window_poisons_the_pool_and_leaks_nothing() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(2 << 20).max_capacity(8 << 20))?;
        // Growing waits for the pool's stream, then for the agreement on the new window's
        // memory, then for its warm-up: fail that.
        emu::testing::inject_failure("aclrtSynchronizeStream", 3, ACL_ERROR_RT_INTERNAL_ERROR);
        let err = pool.alloc(3 << 20, 0).unwrap_err();
        assert!(err.to_string().contains("aclrtSynchronizeStream"), "{err}");
        let again = pool.alloc(512, 0);
        assert!(matches!(again, Err(Error::Poisoned(_))), "{again:?}");
        let rt = comm.runtime().clone();
        drop(pool);
        let errors = rt.take_drop_errors();
        assert!(errors.is_empty(), "{errors:?}");
        // The first window's warm-up, in SymPool::new (after the agreement).
        emu::testing::inject_failure("aclrtSynchronizeStream", 2, ACL_ERROR_RT_INTERNAL_ERROR);
        let err = SymPool::new(comm, PoolConfig::new(2 << 20)).unwrap_err();
        assert!(err.to_string().contains("aclrtSynchronizeStream"), "{err}");
        let errors = rt.take_drop_errors();
        assert!(errors.is_empty(), "{errors:?}");
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn trim_reports_every_failure_to_release_a_window() {
    let session = EmuSession::start();
    for call in [
        "aclrtUnmapMem",
        "aclrtReleaseMemAddress",
        "aclrtFreePhysical",
    ] {
        emu::launch(1, |comm| {
            let pool = SymPool::new(comm, PoolConfig::new(2 << 20).max_capacity(8 << 20))?;
            drop(pool.alloc(3 << 20, 0)?); // grows, then is free
            emu::testing::inject_failure(call, 1, ACL_ERROR_RT_INTERNAL_ERROR);
            let err = pool.trim().unwrap_err();
            assert!(
                matches!(err, Error::Acl { call: c, .. } if c == call),
                "{call}: {err}"
            );
            assert_eq!(pool.stats().windows, 1);
            Ok(())
        })
        .unwrap();
        // A failed unmap left the mapping with the communicator, a failed release or free
        // was tried again when its handle dropped: both succeeded the second time.
        session.assert_clean();
    }
}

#[test]
fn pooled_values_returned_from_launch_are_dropped_by_their_ranks() {
    let session = EmuSession::start();
    let rt = symheap::Runtime::emulated().unwrap();
    let config = symheap::CommConfig::new().exec_timeout_secs(2);
    let returned = emu::launch_with(&rt, 2, &config, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        SymVec::from_host(&pool, &[comm.rank() as f32; 4])
    });
    let err = returned.map(drop).unwrap_err();
    assert!(err.to_string().contains("holds its communicator"), "{err}");
    // Both ranks dropped their pool together: no deregistration waited in vain.
    let errors = rt.take_drop_errors();
    assert!(errors.is_empty(), "{errors:?}");
    session.assert_clean();
}

/// A pool's out-of-memory error names the setting to raise and its value now.
#[test]
fn out_of_memory_names_the_configured_maximum() {
    let session = EmuSession::start();
    let (oom, text) = emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(2 << 20).max_capacity(4 << 20))?;
        match pool.alloc(8 << 20, 0) {
            Err(Error::OutOfMemory(oom)) => Ok((oom.clone(), Error::OutOfMemory(oom).to_string())),
            other => panic!("expected OutOfMemory, got {other:?}"),
        }
    })
    .unwrap()
    .remove(0);
    assert_eq!((oom.configured, oom.requested), (4 << 20, 8 << 20));
    assert!(
        text.contains("raise PoolConfig::budget (alias max_capacity")
            && text.contains("(now 4194304 bytes, 4.00 MiB)"),
        "{text}"
    );
    session.assert_clean();
}

/// The pool's own record of every collective's path agrees with what the emulator did, for
/// every kind the pool runs, in AI CPU expansion (the default) and in host expansion; and
/// `SymPool::path` predicts it.
#[test]
fn the_pool_knows_the_path_of_every_collective_and_the_emulator_agrees() {
    use symheap::{Collective, CollectivePath, CommConfig, Runtime, Staged};
    let session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    for (mode, symmetric) in [(0, true), (1, false)] {
        let config = CommConfig::new()
            .exec_timeout_secs(30)
            .op_expansion_mode(mode);
        let before = emu::testing::counters();
        let stats = emu::launch_with(&rt, 2, &config, |comm| {
            let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
            let mut a = SymVec::from_host(&pool, &[1.0f32; 8])?;
            let mut b = SymVec::<f32>::zeroed(&pool, 16)?;
            let fast = match symmetric {
                true => CollectivePath::Symmetric,
                false => CollectivePath::Staged(Staged::Expansion),
            };
            assert_eq!(pool.path(Collective::AllReduce, &a, &a), fast);
            assert_eq!(
                pool.path(Collective::AlltoAllV, &a, &b),
                CollectivePath::Staged(Staged::Kind)
            );
            pool.all_reduce_in_place(&mut a, ReduceOp::Sum)?;
            pool.all_gather(&a, &mut b)?;
            pool.reduce_scatter(&b, &mut a, ReduceOp::Sum)?;
            let c = SymVec::from_host(&pool, &[2.0f32; 8])?;
            pool.all_to_all(&c, &mut a)?;
            pool.broadcast(&mut a, 0)?;
            pool.reduce(&c, &mut a, ReduceOp::Max, 1)?;
            pool.all_gather_v(&a, &mut b, &[8, 8], &[0, 8])?;
            pool.synchronize()?;
            Ok(pool.stats())
        })
        .unwrap();
        let after = emu::testing::counters();
        let (mut pool_symmetric, mut pool_staged) = (0, 0);
        for s in &stats {
            let (sym, staged) = s.symmetric_and_staged();
            assert_eq!(
                (sym, staged),
                if symmetric { (4, 3) } else { (0, 7) },
                "mode {mode}: {s}"
            );
            (pool_symmetric, pool_staged) = (pool_symmetric + sym, pool_staged + staged);
            let text = s.to_string();
            assert!(
                text.contains("x HcclBroadcast: staged (HCCL uses windows only for"),
                "{text}"
            );
        }
        // Besides the pool's collectives, per rank: its window's warm-up AllGather (symmetric
        // where the mode allows) and the agreements before and after registering it (always
        // staged).
        let warm_ups = if symmetric { (2, 4) } else { (0, 6) };
        assert_eq!(
            (
                after.symmetric_collectives - before.symmetric_collectives,
                after.staged_collectives - before.staged_collectives
            ),
            (pool_symmetric + warm_ups.0, pool_staged + warm_ups.1),
            "mode {mode}: the emulator's paths"
        );
    }
    session.assert_clean();
}
