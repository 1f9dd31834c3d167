//! The safe runtime over the emulator: errors keep their code and call, an injected failure
//! surfaces as an error without leaking, and errors in `Drop` are recorded. (The pool's
//! failure paths are tested in `pool.rs`.)

use std::time::Duration;
use symheap::raw::{Backend, Origin};
use symheap::sys::{
    ACL_ERROR_RT_INTERNAL_ERROR, ACL_ERROR_RT_MEMORY_ALLOCATION, ACL_SUCCESS, HcclResult,
};
use symheap::{Comm, CommConfig, RootInfo, Stream};

use symheap::{AllocDesc, Error, PoolConfig, ReduceOp, Runtime, SymPool, SymVec};

use crate::harness::{DeviceBuf, EmuSession};

#[test]
fn an_injected_failure_is_reported_with_its_call_and_code_and_nothing_leaks() {
    let session = EmuSession::start();
    let err = symheap::emu::launch(1, |comm| {
        symheap::emu::testing::inject_failure("aclrtMapMem", 1, ACL_ERROR_RT_MEMORY_ALLOCATION);
        DeviceBuf::new(comm, 4 << 20, false).map(|_| ())
    })
    .unwrap_err();
    let Error::Rank { rank: 0, source } = err else {
        panic!("expected a rank error, got {err}");
    };
    assert!(
        matches!(
            *source,
            Error::Acl {
                call: "aclrtMapMem",
                code: ACL_ERROR_RT_MEMORY_ALLOCATION,
                ..
            }
        ),
        "{source}"
    );
    session.assert_clean();
}

#[test]
fn hccl_errors_carry_the_library_text() {
    let session = EmuSession::start();
    let err = symheap::emu::launch(1, |comm| {
        symheap::emu::testing::inject_failure(
            "HcclCommSymWinRegister",
            1,
            HcclResult::HCCL_E_MEMORY.0,
        );
        DeviceBuf::new(comm, 4 << 20, true).map(|_| ())
    })
    .unwrap_err();
    let Error::Rank { source, .. } = err else {
        panic!("expected a rank error, got {err}");
    };
    let Error::Hccl {
        call,
        code,
        message,
    } = *source
    else {
        panic!("expected an HCCL error, got {source}");
    };
    assert_eq!(
        (call, code),
        ("HcclCommSymWinRegister", HcclResult::HCCL_E_MEMORY)
    );
    assert!(!message.is_empty());
    session.assert_clean();
}

#[test]
fn errors_in_drop_are_recorded_not_panicked() {
    let session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    rt.set_device(0).unwrap();
    let stream = Stream::new(&rt).unwrap();
    let raw = stream.as_raw();
    symheap::emu::testing::inject_failure("aclrtDestroyStream", 1, ACL_ERROR_RT_INTERNAL_ERROR);
    drop(stream);
    let errors = rt.take_drop_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(matches!(
        errors[0],
        Error::Acl {
            call: "aclrtDestroyStream",
            code: ACL_ERROR_RT_INTERNAL_ERROR,
            ..
        }
    ));
    assert!(rt.take_drop_errors().is_empty(), "errors are taken once");
    // The injected failure left the stream alive: destroy it for real.
    // SAFETY: `raw` is the live stream whose destruction was made to fail.
    let code = unsafe { (symheap::emu::acl_api().aclrtDestroyStream)(raw) };
    assert_eq!(code, ACL_SUCCESS);
    session.assert_clean();
}

#[test]
fn bad_ranks_and_root_info_are_rejected() {
    let session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    rt.set_device(0).unwrap();
    let root = RootInfo::new(&rt).unwrap();
    let err = Comm::init(&rt, 2, &root, 2, &CommConfig::new()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(RootInfo::from_bytes(&[0u8; 10]).is_err());
    let copy = RootInfo::from_bytes(&root.as_bytes()).unwrap();
    assert_eq!(copy.as_bytes(), root.as_bytes());
    session.assert_clean();
}

/// `symheap::raw::from_tables` is public: a caller can build a runtime over its own tables. Here, the
/// emulator's tables as an older CANN without the symmetric-window API would be.
#[test]
fn absent_optional_symbols_are_unsupported_errors() {
    let session = EmuSession::start();
    let mut hccl = symheap::emu::hccl_api();
    hccl.HcclCommSymWinRegister = None;
    hccl.HcclCommSymWinGet = None;
    hccl.HcclGetCommAsyncError = None;
    let origin = Origin {
        backend: Backend::InProcess {
            name: "emulator without windows",
        },
        host_addressable: true,
        keep_alive: Box::new(()),
    };
    // SAFETY: the emulator's functions implement the C prototypes and are never unloaded.
    let rt = unsafe { symheap::raw::from_tables(hccl, symheap::emu::acl_api(), origin) }.unwrap();
    symheap::emu::launch_with(&rt, 1, &CommConfig::new(), |comm| {
        let register = DeviceBuf::new(comm, 1, true).err();
        assert!(
            matches!(
                register,
                Some(Error::Unsupported {
                    call: "HcclCommSymWinRegister"
                })
            ),
            "{register:?}"
        );
        let buf = DeviceBuf::new(comm, 1, false)?;
        let get = comm.window_get(buf.ptr(), 8).unwrap_err();
        assert!(matches!(
            get,
            Error::Unsupported {
                call: "HcclCommSymWinGet"
            }
        ));
        let pending = comm.async_error().unwrap_err();
        assert!(matches!(
            pending,
            Error::Unsupported {
                call: "HcclGetCommAsyncError"
            }
        ));
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

/// A rank that panics is the one `launch` blames, with its message, even when its unwinding
/// (dropping a pool, which deregisters collectively) makes its peer time out first.
#[test]
fn launch_blames_the_rank_that_panicked() {
    let session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    let config = CommConfig::new().exec_timeout_secs(1);
    let err = symheap::emu::launch_with(&rt, 2, &config, |comm| {
        let pool = symheap::SymPool::new(comm, symheap::PoolConfig::new(4 << 20))?;
        let mut v = symheap::SymVec::from_host(&pool, &[1.0f32; 16])?;
        if comm.rank() == 1 {
            panic!("rank 1 gives up");
        }
        pool.all_reduce_in_place(&mut v, symheap::ReduceOp::Sum)?;
        pool.synchronize()
    })
    .unwrap_err();
    assert!(
        matches!(&err, Error::Panicked { rank: 1, message } if message.contains("gives up")),
        "{err}"
    );
    session.assert_clean();
}

/// A rank that returns an error before its first collective does not make its peer wait for
/// the exec timeout (120 s by default): `launch` ends as soon as the peer finds it gone.
#[test]
fn a_rank_that_fails_early_does_not_make_its_peers_wait_for_the_timeout() {
    let session = EmuSession::start();
    let start = std::time::Instant::now();
    let err = symheap::emu::launch(2, |comm| {
        if comm.rank() == 1 {
            return Err(Error::InvalidArgument("rank 1 fails early".into()));
        }
        let s = Stream::new(comm.runtime())?;
        comm.barrier(&s)?;
        comm.synchronize(&s)
    })
    .unwrap_err();
    assert!(err.to_string().contains("rank 1 fails early"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    session.assert_clean();
}

/// What `tracing` logged in this test process, captured by a global subscriber.
static LOGGED: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

struct Capture;

impl std::io::Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        LOGGED.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the capturing subscriber (once) and empties what it captured.
fn capture_logs() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let subscriber = tracing_subscriber::fmt().with_writer(|| Capture).finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
    });
    LOGGED.lock().unwrap().clear();
}

#[test]
fn a_waiting_collective_says_which_ranks_it_waits_for() {
    let session = EmuSession::start();
    capture_logs();
    symheap::emu::testing::set_wait_warning(Duration::from_millis(200));
    let sums = symheap::emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let mut v = SymVec::from_host(&pool, &[1.0f32; 4])?;
        if comm.rank() == 1 {
            std::thread::sleep(Duration::from_secs(1));
        }
        pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
        v.to_host()
    });
    symheap::emu::testing::set_wait_warning(Duration::from_secs(10));
    assert_eq!(sums.unwrap()[0], [2.0; 4], "the late rank still took part");
    let logged = String::from_utf8(LOGGED.lock().unwrap().clone()).unwrap();
    assert!(
        logged.contains("WARN") && logged.contains("on rank 0 for ranks [1]"),
        "{logged}"
    );
    session.assert_clean();
}

#[test]
fn pool_steps_are_traced_and_out_of_memory_shows_the_summary() {
    let session = EmuSession::start();
    capture_logs();
    symheap::emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(2 << 20).max_capacity(4 << 20))?;
        let grown = SymVec::<f32>::zeroed_with(&pool, 1 << 19, AllocDesc::tagged("kv-cache"))?; // 2 MiB: grows
        assert!(pool.alloc(8 << 20, 0).is_err());
        drop(grown);
        pool.trim()?;
        Ok(())
    })
    .unwrap();
    let logged = String::from_utf8(LOGGED.lock().unwrap().clone()).unwrap();
    for needle in [
        "pool created",
        "pool grew by a window",
        "out of memory",
        "kv-cache", // the summary's tag table, with the OOM warning
        "trimmed",
    ] {
        assert!(logged.contains(needle), "{needle} missing from\n{logged}");
    }
    session.assert_clean();
}

/// The allocator adapter's `AllocError` says nothing; its reason, with the setting to raise,
/// goes to the log.
#[test]
fn a_failing_allocator_adapter_logs_why_with_its_setting() {
    let session = EmuSession::start();
    capture_logs();
    symheap::emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20).private_capacity(2 << 20))?;
        let alloc = pool.allocator()?;
        let mut v: symheap::allocator_api2::vec::Vec<u8, _> =
            symheap::allocator_api2::vec::Vec::new_in(alloc);
        assert!(v.try_reserve(4 << 20).is_err());
        Ok(())
    })
    .unwrap();
    let logged = String::from_utf8(LOGGED.lock().unwrap().clone()).unwrap();
    assert!(
        logged.contains("SymAllocator::allocate failed")
            && logged.contains("PoolConfig::private_capacity (now 2097152 bytes"),
        "{logged}"
    );
    session.assert_clean();
}
