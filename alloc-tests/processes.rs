//! Ranks as processes, as every real deployment runs them: this test binary re-runs itself
//! through the launcher as N processes, each of which runs one of the `rank_*` tests below
//! (ignored in a normal run) as its rank and joins with `Comm::from_env`.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use symheap::raw::Window;
use symheap::sys::HcclResult;
use symheap::{AllocDesc, RootInfo, SleepPlan};
use symheap::{Comm, CommConfig, Error, PoolConfig, Runtime, Stream, SymPool, SymVec};
use symheap_tools::launcher::{Job, Outcome};

use crate::collectives::{every_vector_wrapper, every_wrapper};
use crate::harness::DeviceBuf;
use crate::pool::random_program;

/// Runs the test `rank_test` of this binary as `ranks` processes.
fn as_processes(ranks: u32, rank_test: &str) -> Outcome {
    rank_job(ranks, rank_test).run().expect("the ranks start")
}

/// The job that runs the test `rank_test` of this binary as `ranks` processes.
fn rank_job(ranks: u32, rank_test: &str) -> Job {
    rank_job_in("processes", ranks, rank_test)
}

/// The job that runs the test `module::rank_test` of this binary as `ranks` processes.
pub(crate) fn rank_job_in(module: &str, ranks: u32, rank_test: &str) -> Job {
    rank_job_on_nodes(module, 1, ranks, rank_test)
}

/// [`rank_job_in`] as `nodes` emulated nodes of `per_node` ranks each
/// (`symheap-run --nnodes nodes --nproc-per-node per_node`).
pub(crate) fn rank_job_on_nodes(module: &str, nodes: u32, per_node: u32, rank_test: &str) -> Job {
    let exe = std::env::current_exe().expect("the test binary's path");
    let name = format!("{module}::{rank_test}");
    Job::on_nodes(nodes, per_node, exe)
        .args([name.as_str(), "--exact", "--ignored", "--nocapture"])
        .arg("--test-threads=1")
        .grace(Duration::from_secs(20))
        .capture_output()
}

#[track_caller]
fn assert_success(outcome: &Outcome) {
    assert!(outcome.success(), "{}", failed(outcome));
}

/// What a failed job says: who failed, then every rank's output (which a test keeps to
/// itself while the job succeeds).
pub(crate) fn failed(outcome: &Outcome) -> String {
    format!(
        "{}\nthe ranks' output:\n{}",
        outcome.summary(),
        outcome.output
    )
}

/// This process's rank: only a parent above starts these tests.
pub(crate) fn placement() -> u32 {
    let rank = std::env::var("SYMHEAP_RANK")
        .expect("a rank test runs as one rank of its parent test, which sets SYMHEAP_RANK");
    rank.parse().expect("SYMHEAP_RANK is a number")
}

/// The emulator, and this process's communicator from the environment.
fn join() -> (Runtime, Comm) {
    let rt = Runtime::emulated().unwrap();
    let config = CommConfig::new().exec_timeout_secs(60);
    let comm = Comm::from_env(&rt, config).unwrap();
    (rt, comm)
}

/// Every wrapper on every element type, on registered (symmetric path) and plain (staged
/// path) buffers, checked against host results.
fn every_collective(comm: &Comm) -> symheap::Result<()> {
    let stream = Stream::new(comm.runtime())?;
    for registered in [true, false] {
        let input = DeviceBuf::new(comm, 1, registered)?;
        let output = DeviceBuf::new(comm, 1, registered)?;
        crate::for_each_elem!(T => every_wrapper::<T>(comm, &stream, &input, &output)?);
    }
    Ok(())
}

/// Runs `ranks_here` ranks' worth of [`every_collective`] in `run` and checks the path they
/// took: per element type, four AllReduces, ReduceScatter, AllGather and AlltoAll on the
/// registered buffers are symmetric; everything else stages.
fn checking_paths(ranks_here: u64, run: impl FnOnce()) {
    let before = symheap::emu::testing::counters();
    run();
    let after = symheap::emu::testing::counters();
    let symmetric = after.symmetric_collectives - before.symmetric_collectives;
    assert_eq!(symmetric, ranks_here * 12 * 7);
    assert!(after.staged_collectives > before.staged_collectives);
}

#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_of_matrix() {
    let _ = placement();
    let (_rt, comm) = join();
    checking_paths(1, || every_collective(&comm).unwrap());
}

#[test]
fn the_collective_matrix_in_2_processes() {
    assert_success(&as_processes(2, "rank_of_matrix"));
}

#[test]
fn the_collective_matrix_in_4_processes() {
    assert_success(&as_processes(4, "rank_of_matrix"));
}

#[test]
fn the_collective_matrix_in_8_processes() {
    assert_success(&as_processes(8, "rank_of_matrix"));
}

#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_of_vector_matrix() {
    let _ = placement();
    let (_rt, comm) = join();
    let stream = Stream::new(comm.runtime()).unwrap();
    for registered in [true, false] {
        let input = DeviceBuf::new(&comm, 1, registered).unwrap();
        let output = DeviceBuf::new(&comm, 1, registered).unwrap();
        crate::for_each_elem!(T => every_vector_wrapper::<T>(&comm, &stream, &input, &output).unwrap());
    }
}

/// The wrappers of issue 9 (V collectives, Reduce, Scatter, point-to-point) on ranks as
/// processes, on registered and plain buffers.
#[test]
fn the_vector_collective_matrix_in_3_processes() {
    assert_success(&as_processes(3, "rank_of_vector_matrix"));
}

/// Point-to-point between processes: a ring `HcclBatchSendRecv` staged through the sender's
/// staging area, then one whose sends come from a window, which the receiver reads straight
/// out of its heap mapping of the sender's memory.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_of_point_to_point() {
    use symheap::sys::{HcclDataType, HcclSendRecvItem, HcclSendRecvType};
    let _ = placement();
    let (_rt, comm) = join();
    let stream = Stream::new(comm.runtime()).unwrap();
    let (rank, n) = (comm.rank(), comm.rank_count());
    let (next, prev) = ((rank + 1) % n, (rank + n - 1) % n);
    let count = 300_001usize;
    let bytes = (count * 4) as u64;
    let value =
        |r: u32, tag: i32, i: usize| (i as i32).wrapping_mul(13) ^ (r as i32 * 100_003 + tag);
    let data = |r: u32, tag: i32| (0..count).map(|i| value(r, tag, i)).collect::<Vec<i32>>();
    let plain = DeviceBuf::new(&comm, 2 * bytes, false).unwrap();
    let window = DeviceBuf::new(&comm, bytes, true).unwrap();
    plain.write(&comm, 0, &data(rank, 1)).unwrap();
    window.write(&comm, 0, &data(rank, 2)).unwrap();
    let before = symheap::emu::testing::counters();
    let bsr = symheap::emu::hccl_api().HcclBatchSendRecv.unwrap();
    let i32_type = HcclDataType::HCCL_DATA_TYPE_INT32;
    let item = |kind, buf: symheap::raw::DevicePtr, peer| HcclSendRecvItem {
        sendRecvType: kind,
        buf: buf.as_raw(),
        count: count as u64,
        dataType: i32_type,
        remoteRank: peer,
    };
    for from in [plain.ptr(), window.ptr()] {
        let mut items = [
            item(HcclSendRecvType::HCCL_SEND, from, next),
            item(
                HcclSendRecvType::HCCL_RECV,
                plain.ptr().byte_add(bytes),
                prev,
            ),
        ];
        // SAFETY: two items over device buffers of this rank; live communicator and stream.
        let code = unsafe { bsr(items.as_mut_ptr(), 2, comm.as_raw(), stream.as_raw()) };
        assert_eq!(code, HcclResult::HCCL_SUCCESS);
        stream.synchronize().unwrap();
        let tag = if from == plain.ptr() { 1 } else { 2 };
        let got = plain.read::<i32>(&comm, bytes, count).unwrap();
        for (i, &v) in got.iter().enumerate() {
            assert_eq!(v, value(prev, tag, i), "element {i} from rank {prev}");
        }
    }
    let after = symheap::emu::testing::counters();
    assert_eq!(after.staged_receives - before.staged_receives, 1);
    assert_eq!(after.direct_receives - before.direct_receives, 1);
}

#[test]
fn point_to_point_between_4_processes() {
    assert_success(&as_processes(4, "rank_of_point_to_point"));
}

/// Two processes of two rank threads each: process `p`'s thread `t` is rank `2p + t` of 4.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_pair_of_mixed() {
    let process = placement();
    let rt = Runtime::emulated().unwrap();
    let file = PathBuf::from(std::env::var_os("SYMHEAP_ROOT_INFO").unwrap());
    let root = if process == 0 {
        let root = RootInfo::new(&rt).unwrap();
        root.publish(&file).unwrap();
        root
    } else {
        RootInfo::wait_for(&file, Duration::from_secs(60)).unwrap()
    };
    checking_paths(2, || {
        std::thread::scope(|s| {
            let threads: Vec<_> = (0..2)
                .map(|t| {
                    let (rt, root) = (&rt, &root);
                    s.spawn(move || {
                        let rank = 2 * process + t;
                        rt.set_device(rank).unwrap();
                        let comm = Comm::init(rt, 4, root, rank, &CommConfig::new()).unwrap();
                        every_collective(&comm).unwrap();
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        })
    });
}

#[test]
fn the_collective_matrix_in_2_processes_of_2_threads() {
    assert_success(&as_processes(2, "rank_pair_of_mixed"));
}

#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_of_pool_program() {
    let rank = placement();
    let (_rt, comm) = join();
    let pool = SymPool::new(&comm, PoolConfig::new(2 << 20).max_capacity(8 << 20)).unwrap();
    let placements = random_program(&pool, 42, 400).unwrap();
    pool.verify_symmetric().unwrap();
    // Every rank placed every allocation at the same offset: gather a digest of them.
    let digest = placements.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, p| {
        let (w, o, l) = p.unwrap_or((usize::MAX, u64::MAX, u64::MAX));
        [w as u64, o, l]
            .iter()
            .fold(h, |h, &x| (h ^ x).wrapping_mul(0x0100_0000_01b3))
    });
    let mine = SymVec::from_host(&pool, &[digest]).unwrap();
    let mut all = SymVec::<u64>::zeroed(&pool, comm.rank_count() as usize).unwrap();
    pool.all_gather(&mine, &mut all).unwrap();
    let all = all.to_host().unwrap();
    assert!(
        all.iter().all(|&d| d == digest),
        "placements differ: {all:x?}"
    );
    // One extra allocation on rank 1 is caught on every rank, naming rank 1.
    let _extra = (rank == 1).then(|| pool.alloc(4096, 0).unwrap());
    let err = pool.verify_symmetric().unwrap_err();
    assert!(
        matches!(&err, Error::Asymmetric(msg) if msg.contains("[1]")),
        "{err}"
    );
}

#[test]
fn a_pool_program_gives_identical_offsets_in_4_processes() {
    assert_success(&as_processes(4, "rank_of_pool_program"));
}

/// The rendezvous sockets (`@symheap-emu-PID-...`) that processes `pids` made and that
/// still exist.
fn rendezvous_sockets_of(pids: &[u32]) -> Vec<String> {
    let prefixes: Vec<String> = pids
        .iter()
        .map(|pid| format!("@symheap-emu-{pid:x}-"))
        .collect();
    std::fs::read_to_string("/proc/net/unix")
        .expect("procfs")
        .lines()
        .filter_map(|line| line.split_whitespace().nth(7))
        .filter(|name| prefixes.iter().any(|p| name.starts_with(p)))
        .map(str::to_owned)
        .collect()
}

/// Rank `victim` of 3 is killed (SIGKILL) while its peers wait for it in `rank_test`; the
/// ranks check that they failed fast naming it, and this test that nothing outlived the
/// processes.
fn killed_rank(rank_test: &str, victim: u32) {
    let started = Instant::now();
    let job = rank_job(3, rank_test).env("SYMHEAP_TEST_VICTIM", victim.to_string());
    let outcome = job.run().unwrap();
    for (rank, status) in outcome.statuses.iter().enumerate() {
        if rank as u32 == victim {
            assert_eq!(status.signal(), Some(9), "{}", failed(&outcome));
        } else {
            assert!(status.success(), "{}", failed(&outcome));
        }
    }
    assert_eq!(outcome.first_failure, Some(victim));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(rendezvous_sockets_of(&outcome.pids), Vec::<String>::new());
    let shm: Vec<_> = std::fs::read_dir("/dev/shm")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        !shm.iter().any(|n| n.to_string_lossy().contains("symheap")),
        "{shm:?}"
    );
}

/// Rank `victim` kills itself after a moment; the others check how fast, and how, they failed.
fn die_or_fail_fast(
    comm: &Comm,
    victim: u32,
    wait_for_victim: impl FnOnce() -> symheap::Result<()>,
) {
    if comm.rank() == victim {
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: raising a signal has no memory-safety preconditions; SIGKILL ends us here.
        unsafe { libc::raise(libc::SIGKILL) };
        unreachable!("SIGKILL returned");
    }
    let started = Instant::now();
    let err = wait_for_victim().unwrap_err();
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_millis(300) + Duration::from_secs(2),
        "{waited:?}"
    );
    let text = err.to_string();
    let named = format!("[{victim}]");
    assert!(text.contains(&named) && text.contains("killed"), "{text}");
    eprintln!(
        "rank {} failed {waited:?} after it began waiting: {text}",
        comm.rank()
    );
}

/// The rank a `rank_killed_*` test kills: its parent says which.
fn victim() -> u32 {
    let victim = std::env::var("SYMHEAP_TEST_VICTIM").expect("set by the parent test");
    victim.parse().unwrap()
}

#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_killed_in_a_collective() {
    let _ = placement();
    let victim = victim();
    let (rt, comm) = join();
    let stream = Stream::new(&rt).unwrap();
    let buf = DeviceBuf::new(&comm, 1, true).unwrap();
    let all_reduce = || {
        // SAFETY: 16 floats fit the buffer; synchronised before anything reads it.
        unsafe {
            comm.raw().all_reduce(
                buf.ptr(),
                buf.ptr(),
                16,
                symheap::sys::HcclDataType::HCCL_DATA_TYPE_FP32,
                symheap::ReduceOp::Sum,
                &stream,
            )?
        };
        comm.synchronize(&stream)
    };
    die_or_fail_fast(&comm, victim, all_reduce);
    // Later calls fail at once.
    let started = Instant::now();
    let err = all_reduce().unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "{err}");
    // With a dead peer the window is deregistered here alone, as HCCL's deregistration
    // needs no peer: nothing to record.
    let windows = symheap::emu::testing::counters().windows;
    drop(buf);
    assert!(rt.take_drop_errors().is_empty());
    assert_eq!(symheap::emu::testing::counters().windows, windows - 1);
}

#[test]
fn a_rank_killed_in_a_collective_fails_its_peers_within_2_seconds() {
    killed_rank("rank_killed_in_a_collective", 2);
}

/// Rank 0's process also runs the rendezvous hub (it called `HcclGetRootInfo`): losing it ends
/// the communicator for everyone, and the others say which rank went.
#[test]
fn a_killed_rank_0_which_hosts_the_rendezvous_fails_its_peers_within_2_seconds() {
    killed_rank("rank_killed_in_a_collective", 0);
}

#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_killed_in_a_registration() {
    let _ = placement();
    let (rt, comm) = join();
    // `Window::register` itself (`Window::allocate` agrees on the memory first, a collective
    // of its own): the peers wait in the registration's exchange.
    let register = || {
        let size = rt.round_to_granularity(1, comm.device())?;
        let mapping =
            std::sync::Arc::new(symheap::raw::Mapping::allocate(&rt, size, comm.device())?);
        Window::register(&comm, &mapping).map(drop)
    };
    die_or_fail_fast(&comm, victim(), register);
    let err = register().unwrap_err();
    assert!(
        matches!(
            err,
            Error::Hccl {
                code: HcclResult::HCCL_E_TCP_TRANSFER,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_rank_killed_in_a_registration_fails_its_peers_within_2_seconds() {
    killed_rank("rank_killed_in_a_registration", 2);
}

/// One rank of a pool that sleeps shallow and deep as processes: every byte the pool took
/// comes back to the device while it sleeps (the peers' imports of it gone too), the
/// communicators' as well in a deep sleep, and the weights come back on wake.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_of_a_sleeping_pool() {
    let _ = placement();
    let (rt, comm) = join();
    let free = || rt.mem_info().unwrap().0;
    let before_pool = free();
    // The communicator's own bytes, measured on a twin made from a fresh root info.
    let root = comm.fresh_root_info().unwrap();
    let with = free();
    let twin = Comm::init(
        &rt,
        comm.rank_count(),
        &root,
        comm.rank(),
        &CommConfig::new(),
    );
    let comm_bytes = with - free();
    drop(twin.unwrap());
    let before_comm = before_pool + comm_bytes;
    let (pool, weights) = sleepy_pool(&comm);
    pool.sleep(&SleepPlan::new().offload("weights")).unwrap();
    assert_eq!(free(), before_pool, "rank {}: a shallow sleep", comm.rank());
    pool.wake().unwrap();
    assert_eq!(weights.to_host().unwrap(), vec![1; 64]);
    let root = comm.fresh_root_info().unwrap();
    let plan = SleepPlan::new().offload("weights").release_communicators();
    pool.sleep(&plan).unwrap();
    assert_eq!(free(), before_comm, "rank {}: a deep sleep", comm.rank());
    let world = Comm::init(
        &rt,
        comm.rank_count(),
        &root,
        comm.rank(),
        &CommConfig::new(),
    );
    pool.wake_on(&world.unwrap()).unwrap();
    assert_eq!(weights.to_host().unwrap(), vec![1; 64]);
    pool.verify_symmetric().unwrap();
}

#[test]
fn a_pool_sleeps_and_wakes_as_3_processes_and_gives_back_every_byte() {
    assert_success(&rank_job(3, "rank_of_a_sleeping_pool").run().unwrap());
}

/// A pool whose `weights` a sleep offloads.
fn sleepy_pool(comm: &Comm) -> (SymPool, SymVec<u8>) {
    let pool = SymPool::new(comm, PoolConfig::new(4 << 20)).unwrap();
    let weights = SymVec::from_host_with(&pool, &[1; 64], AllocDesc::tagged("weights")).unwrap();
    (pool, weights)
}

#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_killed_in_a_sleep() {
    let _ = placement();
    let (_rt, comm) = join();
    let (pool, _weights) = sleepy_pool(&comm);
    let plan = SleepPlan::new().offload("weights");
    die_or_fail_fast(&comm, victim(), || pool.sleep(&plan).map(drop));
    // Nothing was released: the peers stay awake (their memory mapped) and say why later.
    assert!(!pool.is_asleep());
}

#[test]
fn a_rank_killed_in_a_sleep_fails_its_peers_within_2_seconds() {
    killed_rank("rank_killed_in_a_sleep", 1);
}

#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_killed_in_a_wake() {
    let _ = placement();
    let (_rt, comm) = join();
    let (pool, weights) = sleepy_pool(&comm);
    pool.sleep(&SleepPlan::new().offload("weights")).unwrap();
    die_or_fail_fast(&comm, victim(), || pool.wake().map(drop));
    // Still asleep, and saying so.
    assert!(matches!(weights.to_host(), Err(Error::Asleep(_))));
}

#[test]
fn a_rank_killed_in_a_wake_fails_its_peers_within_2_seconds() {
    killed_rank("rank_killed_in_a_wake", 2);
}

/// A plain C program written for CANN (`alloc-tests/c/seed_sequence.c`: the seed documents'
/// call sequence), compiled here with the system C compiler against CANN-style declarations and
/// linked with `-lhccl -lascendcl`, which resolve to the emulator's shared library, runs as 4
/// processes through the launcher.
#[test]
fn a_c_program_for_cann_runs_unchanged_as_4_processes() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("alloc-tests");
    let source = root.join("c/seed_sequence.c");
    let include = format!("-I{}", root.join("emu-cdylib/include").display());
    let flags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", &include];
    let program = crate::dlopen::compile_for_cann("c-program", "cc", &flags, &source);
    let outcome = Job::new(4, &program)
        .grace(Duration::from_secs(20))
        .capture_output()
        .run()
        .unwrap();
    assert_success(&outcome);
}

/// Every rank's last collective host call succeeds although rank 0, whose process hosts the
/// rendezvous, ends as soon as it has its own answer.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_that_deregisters_and_ends() {
    let _ = placement();
    let (_rt, comm) = join();
    let window = Window::allocate(&comm, 1).unwrap();
    window.deregister().unwrap();
}

#[test]
fn ranks_get_their_answers_although_the_hosting_rank_ends_first() {
    // The window of a lost answer is narrow: run the job a few times.
    for _ in 0..5 {
        assert_success(&as_processes(4, "rank_that_deregisters_and_ends"));
    }
}

/// Rank 0 waits in a barrier that rank 1 joins only after 4 s; with `HCCL_EXEC_TIMEOUT=1`
/// (and no timeout in the config) rank 0 fails with a timeout after about a second.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_waiting_under_hccl_exec_timeout() {
    let rank = placement();
    let rt = Runtime::emulated().unwrap();
    let comm = Comm::from_env(&rt, CommConfig::new()).unwrap();
    if rank == 1 {
        std::thread::sleep(Duration::from_secs(4));
        return;
    }
    let stream = Stream::new(&rt).unwrap();
    let started = Instant::now();
    let err = comm
        .barrier(&stream)
        .and_then(|()| comm.synchronize(&stream))
        .unwrap_err();
    let waited = started.elapsed();
    let text = err.to_string();
    assert!(text.contains("HCCL_E_TIMEOUT"), "{text}");
    assert!(waited < Duration::from_secs(3), "waited {waited:?}: {text}");
}

#[test]
fn hccl_exec_timeout_sets_the_emulators_exec_timeout() {
    let job = rank_job(2, "rank_waiting_under_hccl_exec_timeout")
        .env("HCCL_EXEC_TIMEOUT", "1")
        .env_remove("SYMHEAP_EMU_EXEC_TIMEOUT_SECS");
    assert_success(&job.run().unwrap());
}

/// Init refuses an `HCCL_EXEC_TIMEOUT` or `HCCL_CONNECT_TIMEOUT` that CANN refuses.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_with_a_bad_timeout_variable() {
    let _ = placement();
    let rt = Runtime::emulated().unwrap();
    let err = Comm::from_env(&rt, CommConfig::new()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("HCCL_E_PARA") && text.contains("_TIMEOUT"),
        "{text}"
    );
}

#[test]
fn init_refuses_timeout_variables_cann_refuses() {
    for (var, value) in [
        ("HCCL_EXEC_TIMEOUT", "1.234"),
        ("HCCL_CONNECT_TIMEOUT", "60"),
    ] {
        let job = rank_job(2, "rank_with_a_bad_timeout_variable")
            .env(var, value)
            .env_remove("SYMHEAP_EMU_EXEC_TIMEOUT_SECS");
        assert_success(&job.run().unwrap());
    }
}

/// The loop (a tensor from the host, summed in place, synchronised), in which rank 2
/// fails at step 5 in the way `SYMHEAP_TEST_FORM` says: it returns an error, panics, or exits.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_of_a_failing_loop() -> symheap::Result<()> {
    let rank = placement();
    let rt = Runtime::emulated()?;
    // The default exec timeout (120 s): the job must end long before it.
    let comm = Comm::from_env(&rt, CommConfig::new())?;
    let pool = SymPool::new(&comm, PoolConfig::new(4 << 20))?;
    let form = std::env::var("SYMHEAP_TEST_FORM").expect("set by the parent test");
    for n in 0..10 {
        if rank == 2 && n == 5 {
            match form.as_str() {
                "error" => return Err(Error::InvalidArgument("rank 2 gives up at step 5".into())),
                "panic" => panic!("rank 2 panics at step 5"),
                _ => std::process::exit(3),
            }
        }
        let mut v = SymVec::from_host(&pool, &[1.0f32; 256])?;
        pool.all_reduce_in_place(&mut v, symheap::ReduceOp::Sum)?;
        pool.synchronize()?;
    }
    Ok(())
}

/// All three forms end the job in seconds (the exec timeout is 120 s), rank 2 failed (with
/// its own status where it exits), and the launcher fails naming rank 2 first. Its peers fail
/// within a millisecond of rank 2's destroy (or, when it exits, of its sockets closing, which
/// the kernel does before it reports the exit) and often exit before it, so the launcher
/// names the rank they blame, not the first to exit.
#[test]
fn a_rank_that_errs_panics_or_exits_ends_a_4_process_job_in_seconds() {
    for form in ["error", "panic", "exit"] {
        let started = Instant::now();
        let outcome = rank_job(4, "rank_of_a_failing_loop")
            .env("SYMHEAP_TEST_FORM", form)
            .run()
            .unwrap();
        let took = started.elapsed();
        assert!(!outcome.success(), "{form}: {}", failed(&outcome));
        assert!(
            took < Duration::from_secs(10),
            "{form}: took {took:?}\n{}",
            failed(&outcome)
        );
        if form == "exit" {
            assert_eq!(outcome.statuses[2].code(), Some(3), "{}", failed(&outcome));
        }
        assert!(
            !outcome.statuses[2].success(),
            "{form}: {}",
            failed(&outcome)
        );
        assert_eq!(
            outcome.first_failure,
            Some(2),
            "{form}: {}",
            failed(&outcome)
        );
        assert!(
            outcome.summary().starts_with("rank 2 failed first"),
            "{form}: {}",
            outcome.summary()
        );
    }
}

/// Every rank grows its pool; rank 1's physical allocation for the new segment fails
/// (injected). No rank registers: rank 1 returns its own error, the others one naming rank 1,
/// all at once (the exec timeout is 60 s), and every pool still works afterwards.
#[test]
#[ignore = "one rank of a multi-process test"]
fn rank_whose_growth_fails() -> symheap::Result<()> {
    let rank = placement();
    let (_rt, comm) = join();
    let pool = SymPool::new(&comm, PoolConfig::new(2 << 20).max_capacity(8 << 20))?;
    if rank == 1 {
        symheap::emu::testing::inject_failure(
            "aclrtMallocPhysical",
            1,
            symheap::sys::ACL_ERROR_RT_MEMORY_ALLOCATION,
        );
    }
    let started = Instant::now();
    let err = SymVec::<u8>::zeroed(&pool, 3 << 20).unwrap_err();
    symheap::emu::testing::clear_injected_failures();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let text = err.to_string();
    match rank {
        1 => assert!(text.contains("aclrtMallocPhysical"), "{text}"),
        _ => assert!(
            matches!(err, Error::Asymmetric(_)) && text.contains("rank(s) [1] could not"),
            "{text}"
        ),
    }
    // Nothing was registered, so nothing is poisoned: the pools go on.
    let mut v = SymVec::from_host(&pool, &[1.0f32; 64])?;
    pool.all_reduce_in_place(&mut v, symheap::ReduceOp::Sum)?;
    assert_eq!(v.to_host()?, vec![comm.rank_count() as f32; 64]);
    assert_eq!(pool.stats().windows, 1);
    Ok(())
}

#[test]
fn a_rank_whose_growth_fails_fails_every_rank_at_once_and_nothing_is_lost() {
    assert_success(&as_processes(3, "rank_whose_growth_fails"));
}
