//! A failing rank ends the job in seconds: a rank that panics between collectives, or whose
//! pool is poisoned, drops its pool without a collective step, so its peers find it gone
//! instead of waiting for the exec timeout.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use symheap::raw::{Mapping, Window};
use symheap::{
    Comm, CommConfig, Element, Error, PoolConfig, ReduceOp, Runtime, Stream, SymPool, SymVec, emu,
};

use crate::harness::EmuSession;

/// One step of the loop: a tensor from the host, summed in place, synchronised.
fn step(pool: &SymPool) -> symheap::Result<()> {
    let mut v = SymVec::from_host(pool, &[1.0f32; 256])?;
    pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
    pool.synchronize()
}

/// Rank 2 of 4 panics at step 5 while the others go on to step 6: with the default 120 s
/// exec timeout, the job ends in seconds and `launch` names rank 2.
#[test]
fn a_rank_that_panics_between_collectives_ends_the_job_in_seconds() {
    let session = EmuSession::start();
    let started = Instant::now();
    let err = emu::launch(4, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        for n in 0..10 {
            if comm.rank() == 2 && n == 5 {
                panic!("rank 2 gives up at step 5");
            }
            step(&pool)?;
        }
        Ok(())
    })
    .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&err, Error::Panicked { rank: 2, message } if message.contains("step 5")),
        "{err}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}: {err}");
    session.assert_clean();
}

/// Rank 0's AllReduce times out (rank 1 is elsewhere for 4 s), which poisons its pool;
/// dropping that pool then takes no second timeout, although rank 1 only comes to its own
/// pool's drop later.
#[test]
fn dropping_a_poisoned_pool_waits_for_no_peer() {
    let session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    let config = CommConfig::new().exec_timeout_secs(2);
    let drops = emu::launch_with(&rt, 2, &config, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        if comm.rank() == 1 {
            std::thread::sleep(Duration::from_secs(4));
            return Ok(None);
        }
        let err = step(&pool).unwrap_err();
        assert!(err.to_string().contains("HCCL_E_TIMEOUT"), "{err}");
        let started = Instant::now();
        drop(pool);
        Ok(Some(started.elapsed()))
    })
    .unwrap();
    let took = drops[0].expect("rank 0 timed out");
    assert!(
        took < Duration::from_secs(1),
        "dropping the poisoned pool took {took:?}"
    );
    // Rank 1's own drop found rank 0 gone: its windows went here alone, as HCCL's
    // deregistration needs no peer, with nothing to record.
    assert!(rt.take_drop_errors().is_empty());
    session.assert_clean();
}

/// Ranks 0 and 1 wait for rank 2, which never comes, in a collective and in a window
/// registration; rank 1 starts 300 ms after rank 0, so rank 0 gives up first. Both name rank
/// 2, and only rank 2 (a rank that came and gave up is not missing).
#[test]
fn a_timeout_names_exactly_the_ranks_that_never_came() {
    let session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    let config = CommConfig::new().exec_timeout_secs(1);
    for registration in [false, true] {
        let started = Instant::now();
        let texts = emu::launch_with(&rt, 3, &config, |comm| {
            match comm.rank() {
                2 => {
                    std::thread::sleep(Duration::from_millis(2500));
                    return Ok(String::new());
                }
                1 => std::thread::sleep(Duration::from_millis(300)),
                _ => {}
            }
            let err = if registration {
                Window::allocate(comm, 1).map(drop).unwrap_err()
            } else {
                let stream = Stream::new(comm.runtime())?;
                comm.barrier(&stream)
                    .and_then(|()| comm.synchronize(&stream))
                    .unwrap_err()
            };
            // Nobody destroys its communicator before both have timed out: that would be
            // another error ("destroyed their communicator").
            std::thread::sleep(Duration::from_millis(2500).saturating_sub(started.elapsed()));
            Ok(err.to_string())
        })
        .unwrap();
        for text in &texts[..2] {
            assert!(
                text.contains("for ranks [2]"),
                "registration {registration}: {text}"
            );
        }
    }
    session.assert_clean();
}

/// Rank 2 of 4 returns an error at step 5: dropping its pool deregisters its window (a window
/// exchange) while the others wait for it in step 6's AllReduce. The emulator sees that
/// deadlock, so the job ends in seconds with the default 120 s exec timeout, and `launch`
/// reports rank 2's own error.
#[test]
fn a_rank_that_returns_an_error_between_collectives_ends_the_job_in_seconds() {
    let session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    let started = Instant::now();
    let err = emu::launch_with(&rt, 4, &CommConfig::new(), |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        for n in 0..10 {
            if comm.rank() == 2 && n == 5 {
                return Err(Error::InvalidArgument("rank 2 gives up at step 5".into()));
            }
            step(&pool)?;
        }
        Ok(())
    })
    .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&err, Error::Rank { rank: 2, .. }) && err.to_string().contains("step 5"),
        "{err}"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}: {err}");
    // Rank 2's pool recorded why its deregistration failed: who waited where.
    let drops: Vec<String> = rt
        .take_drop_errors()
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert!(
        drops
            .iter()
            .any(|e| e.contains("deadlock") && e.contains("rank 2 in window exchange")),
        "{drops:?}"
    );
    session.assert_clean();
}

/// The two deadlocks of different steps: one rank deregisters a window while three run a
/// collective, and one rank calls AllGather while three call AllReduce. Every rank fails in
/// seconds; in the first, every rank says who waits where, alike.
#[test]
fn deadlocks_across_different_steps_fail_every_rank_at_once() {
    let session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    let started = Instant::now();
    let outcomes = emu::launch_with(&rt, 4, &CommConfig::new(), |comm| {
        let window = Window::allocate(comm, 1)?;
        let stream = Stream::new(comm.runtime())?;
        if comm.rank() == 3 {
            return Ok(window.deregister().map_err(|e| e.to_string()));
        }
        let waited = comm
            .barrier(&stream)
            .and_then(|()| comm.synchronize(&stream));
        drop(window);
        Ok(waited.map_err(|e| e.to_string()))
    })
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let deregistered = outcomes[3].as_ref().unwrap_err();
    assert!(
        deregistered.contains("deadlock")
            && deregistered.contains("rank 3 in window exchange")
            && deregistered.contains("rank 0 in collective"),
        "{deregistered}"
    );
    let who_waits_where = |text: &str| text.split_once("deadlock: ").map(|(_, w)| w.to_owned());
    for waited in &outcomes[..3] {
        let err = waited.as_ref().unwrap_err();
        assert_eq!(who_waits_where(err), who_waits_where(deregistered), "{err}");
    }
    let _ = rt.take_drop_errors();
    // AllGather on rank 0, AllReduce on the others: one step, different calls.
    let started = Instant::now();
    let outcomes = emu::launch_with(&rt, 4, &CommConfig::new(), |comm| {
        let stream = Stream::new(comm.runtime())?;
        let buf = crate::harness::DeviceBuf::new(comm, 1 << 20, false)?;
        let (ptr, n) = (buf.ptr(), 16);
        // SAFETY: the buffer holds 1 MiB, far more than either call touches.
        let called = unsafe {
            if comm.rank() == 0 {
                comm.raw()
                    .all_gather(ptr, ptr.byte_add(4096), n, f32::DATA_TYPE.into(), &stream)
            } else {
                comm.raw()
                    .all_reduce(ptr, ptr, n, f32::DATA_TYPE.into(), ReduceOp::Sum, &stream)
            }
        };
        Ok(called
            .and_then(|()| comm.synchronize(&stream))
            .map_err(|e| e.to_string()))
    })
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    for outcome in &outcomes {
        assert!(outcome.is_err(), "{outcome:?}");
    }
    let _ = rt.take_drop_errors();
    session.assert_clean();
}

/// One rank of 4 threads cannot bind its device (`aclrtSetDevice` refused, injected: the
/// second call of the four, whichever rank makes it): the other ranks do not wait for it at
/// the join (the connect timeout, 120 s by default); `launch` fails at once with that rank's
/// own error.
#[test]
fn a_thread_rank_that_fails_before_it_joins_fails_the_others_at_once() {
    let session = EmuSession::start();
    emu::testing::inject_failure(
        "aclrtSetDevice",
        2,
        symheap::sys::ACL_ERROR_RT_INVALID_DEVICEID,
    );
    let started = Instant::now();
    let err = emu::launch(4, |comm| Ok(comm.rank())).unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "took {took:?}: {err}");
    let Error::Rank { rank, source } = &err else {
        panic!("expected the failed rank's error, got {err}");
    };
    assert!(
        matches!(
            source.as_ref(),
            Error::Acl {
                call: "aclrtSetDevice",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().starts_with(&format!("rank {rank}: ")),
        "{err}"
    );
    session.assert_clean();
}

/// A rank's other host thread, late on purpose: long after the deadlock check first looks
/// (50 ms), short of any timeout.
const LATE: Duration = Duration::from_millis(500);

/// Issue 30, item 4, as one rank runs it: two host threads. On rank 0 one synchronizes a
/// barrier while the other is still on its way to a window registration; on rank 1 one
/// registers while the other is still on its way to the barrier. Real HCCL completes this
/// program (each step's peer comes after `LATE`); the deadlock check must not fail it,
/// although for a while rank 0 waits only in the collective and rank 1 only in the
/// registration. With `known`, both threads have called HCCL on the communicator before (so
/// they count as the rank's host threads); without, the registration runs on a fresh thread.
fn one_collective_beside_one_late_registration(comm: &Comm, known: bool) -> symheap::Result<()> {
    let stream = Stream::new(comm.runtime())?;
    let size = comm.runtime().round_to_granularity(1, comm.device())?;
    let mapping = Arc::new(Mapping::allocate(comm.runtime(), size, comm.device())?);
    let collective_first = comm.rank() == 0;
    let both_known = Barrier::new(2);
    let meet = || -> symheap::Result<()> {
        if known {
            comm.name()?;
            both_known.wait();
        }
        Ok(())
    };
    std::thread::scope(|s| {
        let registrar = s.spawn(|| {
            meet()?;
            if collective_first {
                std::thread::sleep(LATE);
            }
            Window::register(comm, &mapping)
        });
        meet()?;
        if !collective_first {
            std::thread::sleep(LATE);
        }
        let synced = comm
            .barrier(&stream)
            .and_then(|()| comm.synchronize(&stream));
        let window = registrar.join().expect("the registrar panicked");
        synced?;
        drop(window?);
        Ok(())
    })
}

/// [`one_collective_beside_one_late_registration`] with both threads known, as threads.
#[test]
fn a_thread_on_its_way_to_a_registration_is_no_deadlock() {
    let session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    let config = CommConfig::new().exec_timeout_secs(30);
    let started = Instant::now();
    emu::launch_with(&rt, 2, &config, |comm| {
        one_collective_beside_one_late_registration(comm, true)
    })
    .unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    session.assert_clean();
}

/// The same program as the issue wrote it, with a fresh thread for the registration: on rank
/// 0 it is spawned and sleeps while the rank's own thread synchronizes the barrier; on rank 1
/// it registers at once and the rank's own thread comes to the barrier late.
#[test]
fn a_fresh_registration_thread_beside_a_synchronizing_one_is_no_deadlock() {
    let session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    let config = CommConfig::new().exec_timeout_secs(30);
    emu::launch_with(&rt, 2, &config, |comm| {
        one_collective_beside_one_late_registration(comm, false)
    })
    .unwrap();
    session.assert_clean();
}

/// One rank of [`the_late_registration_program_completes_as_processes`] (run by it alone).
#[test]
#[ignore = "a rank of a multi-process test"]
fn rank_of_the_late_registration_program() {
    let rt = Runtime::emulated().unwrap();
    let comm = Comm::from_env(&rt, CommConfig::new().exec_timeout_secs(30)).unwrap();
    for known in [true, false] {
        one_collective_beside_one_late_registration(&comm, known).unwrap();
    }
}

/// [`one_collective_beside_one_late_registration`], both ways, with each rank a process.
#[test]
fn the_late_registration_program_completes_as_processes() {
    let outcome =
        crate::processes::rank_job_in("fail_fast", 2, "rank_of_the_late_registration_program")
            .run()
            .expect("the ranks start");
    assert!(outcome.success(), "{}", crate::processes::failed(&outcome));
}

/// A true deadlock of multi-threaded ranks, as one rank runs it: rank 0's two threads both
/// synchronize a barrier rank 1 never calls; rank 1's own thread registers a window rank 0
/// never registers, while its second thread (which has called HCCL on the communicator) is
/// still running, for `LATE`. The failure this rank's threads were told, when it came, and
/// (on rank 1) when the second thread ended.
fn a_deadlock_once_a_thread_ends(
    comm: &Comm,
) -> symheap::Result<(String, Instant, Option<Instant>)> {
    let stream = Stream::new(comm.runtime())?;
    let size = comm.runtime().round_to_granularity(1, comm.device())?;
    let mapping = Arc::new(Mapping::allocate(comm.runtime(), size, comm.device())?);
    let known = Barrier::new(2);
    let queued = Barrier::new(2);
    std::thread::scope(|s| {
        // Rank 0's: waits for the barrier too; rank 1's: runs on for a while.
        let other = s.spawn(
            || -> symheap::Result<(symheap::Result<()>, Option<Instant>)> {
                comm.name()?;
                known.wait();
                if comm.rank() == 0 {
                    queued.wait();
                    return Ok((comm.synchronize(&stream), None));
                }
                std::thread::sleep(LATE);
                Ok((Ok(()), Some(Instant::now())))
            },
        );
        comm.name()?;
        known.wait();
        let failed = if comm.rank() == 0 {
            comm.barrier(&stream)?;
            queued.wait();
            comm.synchronize(&stream).map(drop)
        } else {
            Window::register(comm, &mapping).map(drop)
        };
        let failed_at = Instant::now();
        let (other_waited, other_ended) = other.join().expect("the other thread panicked")?;
        // Of two threads synchronizing one failed stream, either may be told.
        let err = failed
            .and(other_waited)
            .expect_err("a deadlock")
            .to_string();
        Ok((err, failed_at, other_ended))
    })
}

/// What [`a_deadlock_once_a_thread_ends`] must give on rank `rank`: a deadlock, which on rank
/// 1 names who waits where and was declared only after its second thread ended.
#[track_caller]
fn check_the_deadlock_once_a_thread_ends(rank: u32, outcome: &(String, Instant, Option<Instant>)) {
    let (err, failed_at, other_ended) = outcome;
    assert!(err.contains("deadlock"), "rank {rank}: {err}");
    if rank == 1 {
        assert!(
            err.contains("rank 1 in window exchange") && err.contains("rank 0 in collective"),
            "{err}"
        );
        let other_ended = other_ended.expect("rank 1's second thread records its end");
        assert!(
            *failed_at > other_ended,
            "the deadlock was declared while rank 1 still had a running host thread"
        );
    }
}

/// A true deadlock of multi-threaded ranks is still found, but only once every host thread of
/// every rank is blocked ([`a_deadlock_once_a_thread_ends`]): nothing fails while rank 1's
/// second thread runs; once it ends, every rank fails in seconds (the exec timeout is the
/// default 120 s), saying who waits where.
#[test]
fn a_deadlock_of_multi_threaded_ranks_is_found_once_every_thread_is_blocked() {
    let session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    let started = Instant::now();
    let outcomes =
        emu::launch_with(&rt, 2, &CommConfig::new(), a_deadlock_once_a_thread_ends).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    for (rank, outcome) in outcomes.iter().enumerate() {
        check_the_deadlock_once_a_thread_ends(rank as u32, outcome);
    }
    let _ = rt.take_drop_errors();
    session.assert_clean();
}

/// One rank of [`a_deadlock_of_multi_threaded_processes_is_found`] (run by it alone).
#[test]
#[ignore = "a rank of a multi-process test"]
fn rank_of_a_deadlock_once_a_thread_ends() {
    let rt = Runtime::emulated().unwrap();
    let comm = Comm::from_env(&rt, CommConfig::new()).unwrap();
    let outcome = a_deadlock_once_a_thread_ends(&comm).unwrap();
    check_the_deadlock_once_a_thread_ends(comm.rank(), &outcome);
}

/// [`a_deadlock_once_a_thread_ends`] with each rank a process: the ranks read each other's
/// waits on the board across processes, and the job ends in seconds.
#[test]
fn a_deadlock_of_multi_threaded_processes_is_found() {
    let started = Instant::now();
    let outcome =
        crate::processes::rank_job_in("fail_fast", 2, "rank_of_a_deadlock_once_a_thread_ends")
            .run()
            .expect("the ranks start");
    assert!(outcome.success(), "{}", crate::processes::failed(&outcome));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}
