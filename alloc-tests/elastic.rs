//! A job that survives a lost rank: ranks as processes under the elastic launcher, one of
//! them SIGKILLed at a random moment (in a collective, a host copy, an allocation: wherever
//! the delay lands); and ranks as threads, one of them vanishing at a random point of a step
//! (`emu::testing::vanish`, the stand-in for a kill). The survivors read the launcher's
//! record of the loss, form their world (`Survivors::shrink`), move their pool to it
//! (`SymPool::shrink`) and go on: every tensor kept across the loss must hold what it held,
//! and every step after it must give the survivors' sum.

use std::time::Duration;

use symheap::{Comm, CommConfig, PoolConfig, ReduceOp, Runtime, Survivors, SymPool, SymVec};

use crate::harness::EmuSession;
use crate::processes::{failed, placement, rank_job_in};

/// Steps every rank runs; each sleeps [`STEP_PAUSE`], so the job lasts long enough for the
/// victim's delay to land inside it.
const STEPS: u32 = 120;
const STEP_PAUSE: Duration = Duration::from_millis(4);
/// Elements of the tensors.
const LEN: usize = 2048;

/// The variables the parent test sets: who dies, and when after its pool was made.
const VICTIM: &str = "SYMHEAP_TEST_VICTIM";
const DELAY_MS: &str = "SYMHEAP_TEST_DELAY_MS";

fn env_u32(name: &str) -> u32 {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is set by the parent test"))
        .parse()
        .unwrap_or_else(|_| panic!("{name} is a number"))
}

/// What launch rank `r` keeps in its pool across the loss.
fn pattern(r: u32) -> Vec<f32> {
    (0..LEN).map(|i| (r * 10_000 + i as u32) as f32).collect()
}

/// One step: every rank contributes its launch rank + 1 (and the step), the sum is checked
/// against the current world's, and added into `acc`.
fn step(
    pool: &SymPool,
    world: &Survivors,
    me: u32,
    n: u32,
    acc: &mut SymVec<f32>,
) -> symheap::Result<()> {
    if n % 10 == 5 {
        // A bigger tensor than any free space: the pool grows, registering a new window.
        drop(SymVec::<u8>::zeroed(pool, (n as usize / 10 + 1) << 20)?);
    }
    let mut v = SymVec::from_host(pool, &vec![(me + 1 + n) as f32; LEN])?;
    pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
    let got = v.to_host()?;
    let want: u32 = world.launch_ranks().iter().map(|&r| r + 1 + n).sum();
    assert!(
        got.iter().all(|&x| x == want as f32),
        "step {n}: {} instead of {want} in world {:?}",
        got[0],
        world.launch_ranks()
    );
    pool.all_reduce(&v, acc, ReduceOp::Max)?;
    pool.synchronize()?;
    std::thread::sleep(STEP_PAUSE);
    Ok(())
}

#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_of_an_elastic_job() {
    let me = placement();
    let (victim, delay) = (env_u32(VICTIM), env_u32(DELAY_MS));
    let rt = Runtime::emulated().unwrap();
    let config = CommConfig::new().exec_timeout_secs(60);
    let mut comm: Comm = Comm::from_env(&rt, config.clone()).unwrap();
    let mut world = Survivors::from_env()
        .unwrap()
        .expect("the elastic launcher sets SYMHEAP_ELASTIC_DIR");
    let pool = SymPool::new(&comm, PoolConfig::new(4 << 20).max_capacity(256 << 20)).unwrap();
    let kept = SymVec::from_host(&pool, &pattern(me)).unwrap();
    let mut acc = SymVec::<f32>::zeroed(&pool, LEN).unwrap();
    pool.synchronize().unwrap();
    if me == victim {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(u64::from(delay)));
            // SAFETY: raise only sends a signal to this process.
            unsafe { libc::raise(libc::SIGKILL) };
        });
    }
    let mut n = 0;
    let mut shrinks = 0;
    while n < STEPS {
        match step(&pool, &world, me, n, &mut acc) {
            Ok(()) => n += 1,
            Err(e) => {
                eprintln!("rank {me}: step {n} failed, shrinking: {e}");
                comm = world.shrink(&rt, &config).unwrap();
                let report = pool.shrink(&comm).unwrap();
                assert_eq!(report.ranks_after, comm.rank_count());
                assert_eq!(kept.to_host().unwrap(), pattern(me), "kept across the loss");
                // The old world is gone with its windows: only the survivors' is left.
                let live = symheap::emu::testing::counters();
                assert_eq!(live.comms, 1, "communicators left after the shrink");
                assert_eq!(live.windows, report.registrations as u64, "windows left");
                if acc.is_unspecified() {
                    // The loss cut the step that wrote it short: the survivors start it anew.
                    acc.copy_from_host(&vec![0.0; LEN]).unwrap();
                }
                shrinks += 1;
            }
        }
        if me == victim && n == STEPS - 1 {
            // The victim never finishes: its killer is on the way.
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
    assert_eq!(shrinks, 1, "one loss, one shrink");
    println!(
        "survived: launch rank {me} is rank {} of {} after {n} steps",
        comm.rank(),
        comm.rank_count()
    );
}

/// Runs one elastic job of `ranks` processes whose `victim` dies `delay_ms` after its pool
/// was made, and checks that the survivors went on.
fn survive(ranks: u32, victim: u32, delay_ms: u32) {
    let outcome = rank_job_in("elastic", ranks, "rank_of_an_elastic_job")
        .elastic()
        .env(VICTIM, victim.to_string())
        .env(DELAY_MS, delay_ms.to_string())
        .run()
        .expect("the ranks start");
    assert!(outcome.success(), "{}", failed(&outcome));
    let lost: Vec<u32> = outcome
        .losses
        .iter()
        .flat_map(|l| l.launch_ranks())
        .collect();
    assert_eq!(lost, [victim], "{}", failed(&outcome));
    let survived = outcome.output.matches("survived:").count();
    assert_eq!(survived, ranks as usize - 1, "{}", failed(&outcome));
}

/// A few seeded runs in the normal suite: the victim and its moment vary.
#[test]
fn a_rank_killed_at_a_random_moment_is_survived_by_4_processes() {
    for seed in [1u32, 2, 3] {
        let (victim, delay) = random_kill(seed, 4);
        survive(4, victim, delay);
    }
}

/// The check: 100 runs, each killing a rank at a random moment.
#[test]
#[ignore = "100 jobs, a few minutes: cargo test --release --test alloc-tests elastic -- --ignored"]
fn a_hundred_random_kills_are_survived() {
    for seed in 0..100 {
        let (victim, delay) = random_kill(seed, 4);
        survive(4, victim, delay);
    }
}

/// Which of `ranks` dies, and when (ms after its pool was made), for run `seed`: spread over
/// the job's steps (about 120 x 4 ms and more).
fn random_kill(seed: u32, ranks: u32) -> (u32, u32) {
    let mixed = seed.wrapping_mul(0x9e37_79b9).rotate_left(13) ^ 0x5bd1_e995;
    (mixed % ranks, (mixed >> 8) % 400)
}

/// Where a thread rank vanishes in its step.
#[derive(Clone, Copy, Debug)]
enum KillPoint {
    /// Before the step's first call.
    BeforeStep,
    /// With the AllReduce queued: its stream is in the collective.
    InCollective,
    /// After the step's host copy.
    AfterCopy,
    /// While the pool grows: another thread makes the rank vanish during the registration.
    InGrowth,
}

/// One thread job of `ranks`: `victim` vanishes at `point` of step `at`, writes the loss
/// record as the elastic launcher would, and ends; the others shrink and finish every step.
fn survive_as_threads(ranks: u32, victim: u32, at: u32, point: KillPoint) {
    let session = EmuSession::start();
    let dir = std::env::temp_dir().join(format!(
        "symheap-elastic-threads-{}-{victim}-{at}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = CommConfig::new().exec_timeout_secs(60);
    let outcome = symheap::emu::launch(ranks, |comm| {
        let me = comm.rank();
        let rt = comm.runtime().clone();
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20).max_capacity(256 << 20))?;
        let kept = SymVec::from_host(&pool, &pattern(me))?;
        let mut acc = SymVec::<f32>::zeroed(&pool, LEN)?;
        pool.synchronize()?;
        let mut world = Survivors::new(&dir, ranks, me);
        let mut current: Option<Comm> = None;
        let vanish = |comm: &Comm| {
            assert_eq!(
                symheap::emu::testing::vanish(comm.as_raw()),
                symheap::sys::HcclResult::HCCL_SUCCESS
            );
            let record = dir.join(".lost-1.tmp");
            std::fs::write(&record, format!("{victim}\n")).unwrap();
            std::fs::rename(&record, dir.join("lost-1")).unwrap();
        };
        let mut n = 0;
        let mut shrinks = 0;
        while n < 40 {
            let dying = me == victim && n == at;
            let mut run = || -> symheap::Result<()> {
                if dying && matches!(point, KillPoint::BeforeStep) {
                    vanish(comm);
                }
                if n % 10 == 5 || (dying && matches!(point, KillPoint::InGrowth)) {
                    // A bigger tensor than any free space: the pool grows, registering a
                    // new window (during which the victim may vanish).
                    let grow = || SymVec::<u8>::zeroed(&pool, (n as usize / 10 + 1) << 20);
                    let grown = match dying && matches!(point, KillPoint::InGrowth) {
                        true => std::thread::scope(|s| {
                            s.spawn(|| {
                                std::thread::sleep(Duration::from_micros(u64::from(n) * 50));
                                vanish(comm);
                            });
                            grow()
                        }),
                        false => grow(),
                    };
                    drop(grown?);
                }
                let mut v = SymVec::from_host(&pool, &vec![(me + 1 + n) as f32; LEN])?;
                pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
                if dying && matches!(point, KillPoint::InCollective) {
                    vanish(comm);
                }
                let got = v.to_host()?;
                if dying && matches!(point, KillPoint::AfterCopy) {
                    vanish(comm);
                }
                let want: u32 = world.launch_ranks().iter().map(|&r| r + 1 + n).sum();
                assert!(
                    got.iter().all(|&x| x == want as f32),
                    "step {n}: {}",
                    got[0]
                );
                pool.all_reduce(&v, &mut acc, ReduceOp::Max)?;
                pool.synchronize()
            };
            let stepped = run();
            if dying {
                // Killed: whatever the step returned, this rank is gone.
                return Ok(None);
            }
            match stepped {
                Ok(()) => n += 1,
                Err(_) => {
                    let survivors = world.shrink(&rt, &config)?;
                    pool.shrink(&survivors)?;
                    assert_eq!(kept.to_host()?, pattern(me), "kept across the loss");
                    if acc.is_unspecified() {
                        acc.copy_from_host(&vec![0.0; LEN])?;
                    }
                    current = Some(survivors);
                    shrinks += 1;
                }
            }
        }
        drop((kept, acc, pool));
        Ok(Some((shrinks, current.map(|c| c.rank_count()))))
    });
    let _ = std::fs::remove_dir_all(&dir);
    let outcome = outcome.unwrap_or_else(|e| panic!("victim {victim} at {at} {point:?}: {e}"));
    for (r, o) in outcome.iter().enumerate() {
        match r as u32 == victim {
            true => assert_eq!(*o, None),
            false => assert_eq!(*o, Some((1, Some(ranks - 1))), "rank {r}"),
        }
    }
    session.assert_clean();
}

#[test]
fn a_thread_rank_vanishing_anywhere_in_a_step_is_survived() {
    for (seed, point) in [
        (1, KillPoint::BeforeStep),
        (2, KillPoint::InCollective),
        (3, KillPoint::AfterCopy),
        (4, KillPoint::InGrowth),
    ] {
        let (victim, delay) = random_kill(seed, 4);
        survive_as_threads(4, victim, delay % 40, point);
    }
}

/// The check, as threads: 100 runs, the victim, its step and its point varied.
#[test]
#[ignore = "100 thread jobs: cargo test --release --test alloc-tests elastic -- --ignored"]
fn a_hundred_vanishing_thread_ranks_are_survived() {
    let points = [
        KillPoint::BeforeStep,
        KillPoint::InCollective,
        KillPoint::AfterCopy,
        KillPoint::InGrowth,
    ];
    for seed in 0..100u32 {
        let (victim, delay) = random_kill(seed, 4);
        survive_as_threads(4, victim, delay % 40, points[seed as usize % 4]);
    }
}

/// A tensor that a collective cut short by the loss was writing says so, and is refused on
/// the host until written again; a tensor no such work used reads as it was.
#[test]
fn a_tensor_in_flight_at_the_loss_is_marked_and_refused_until_written() {
    let session = EmuSession::start();
    let dir = std::env::temp_dir().join(format!("symheap-elastic-marked-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("lost-1"), "2\n").unwrap();
    let outcome = symheap::emu::launch(3, |comm| {
        let me = comm.rank();
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let kept = SymVec::from_host(&pool, &pattern(me))?;
        let input = SymVec::from_host(&pool, &vec![1.0f32; LEN])?;
        let mut output = SymVec::<f32>::zeroed(&pool, LEN)?;
        pool.synchronize()?;
        if me == 2 {
            assert_eq!(
                symheap::emu::testing::vanish(comm.as_raw()),
                symheap::sys::HcclResult::HCCL_SUCCESS
            );
            return Ok(None);
        }
        let cut_short = pool
            .all_reduce(&input, &mut output, ReduceOp::Sum)
            .and_then(|()| pool.synchronize());
        assert!(cut_short.is_err(), "rank 2 never came");
        let survivors = Survivors::new(&dir, 3, me).shrink(comm.runtime(), &CommConfig::new())?;
        let report = pool.shrink(&survivors)?;
        assert!(report.interrupted_work);
        assert!(output.is_unspecified() && input.is_unspecified());
        assert!(!kept.is_unspecified());
        let refused = output.to_host().unwrap_err().to_string();
        assert!(
            refused.contains("unspecified until written again"),
            "{refused}"
        );
        assert_eq!(kept.to_host()?, pattern(me));
        output.copy_from_host(&vec![5.0; LEN])?;
        assert!(!output.is_unspecified());
        assert_eq!(output.to_host()?, vec![5.0; LEN]);
        Ok(Some(report.ranks_after))
    });
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(outcome.unwrap(), [Some(2), Some(2), None]);
    session.assert_clean();
}
