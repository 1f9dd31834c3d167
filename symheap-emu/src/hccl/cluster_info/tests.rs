//! Rank-table communicators through the C entry points, with threads as ranks.

use std::ffi::{CString, c_char};
use std::path::{Path, PathBuf};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use crate::sys::*;
use crate::testutil::{DevBuf, acl, assert_clean, hccl, hok, ok, recent, test_config};
use crate::{GRANULARITY as G, test_lock};

/// A directory of its own for one test's files, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(test: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("symheap-rt-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A table of one server (named `server`, so each test's job meets apart from the others')
/// with devices `0..n`, rank r on device r.
fn one_server(server: &str, n: u32) -> String {
    let devices: Vec<String> = (0..n)
        .map(|d| format!(r#"{{"device_id": "{d}", "device_ip": "10.9.0.{d}", "rank_id": "{d}"}}"#))
        .collect();
    format!(
        r#"{{"status": "completed", "version": "1.0", "server_count": "1",
             "server_list": [{{"server_id": "{server}", "device": [{}]}}]}}"#,
        devices.join(",\n")
    )
}

/// `HcclCommInitClusterInfoConfig(path, rank, config)`, or `HcclCommInitClusterInfo` without
/// a config.
fn init(path: &Path, rank: u32, config: Option<&HcclCommConfig>) -> Result<HcclComm, HcclResult> {
    let c_path = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut comm = null_mut();
    let code = match config {
        // SAFETY: a C string, a config and an out-pointer, all valid.
        Some(c) => unsafe {
            let mut c = *c;
            (hccl().HcclCommInitClusterInfoConfig.expect("filled"))(
                c_path.as_ptr(),
                rank,
                &mut c,
                &mut comm,
            )
        },
        // SAFETY: as above.
        None => unsafe {
            (hccl().HcclCommInitClusterInfo.expect("filled"))(c_path.as_ptr(), rank, &mut comm)
        },
    };
    match code {
        HcclResult::HCCL_SUCCESS => Ok(comm),
        code => Err(code),
    }
}

fn destroy(comm: HcclComm) {
    // SAFETY: a live communicator, destroyed once.
    hok(unsafe { (hccl().HcclCommDestroy)(comm) });
}

fn set_device(d: i32) {
    // SAFETY: no pointers.
    ok(unsafe { (acl().aclrtSetDevice)(d) });
}

fn reset_device(d: i32) {
    // SAFETY: no pointers.
    ok(unsafe { (acl().aclrtResetDevice)(d) });
}

/// The code of a failed init, with its message.
#[track_caller]
fn fails(r: Result<HcclComm, HcclResult>) -> (HcclResult, String) {
    match r {
        Ok(comm) => {
            destroy(comm);
            panic!("the init succeeded");
        }
        Err(code) => (code, recent()),
    }
}

#[test]
fn the_ranks_of_a_table_form_one_communicator_without_a_root_info() {
    let _g = test_lock();
    let dir = Dir::new("form");
    let path = dir.file("rank_table.json", &one_server("rt-form", 4));
    let sums = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u32)
            .map(|rank| {
                let path = &path;
                s.spawn(move || {
                    set_device(rank as i32);
                    let mut config = test_config();
                    let named = rank % 2 == 0;
                    if named {
                        config.hcclCommName[..6].copy_from_slice(&b"comm_1".map(|b| b as c_char));
                    }
                    let comm = init(path, rank, Some(&config))
                        .unwrap_or_else(|c| panic!("rank {rank}: {c:?}: {}", recent()));
                    let (mut got_rank, mut size) = (0, 0);
                    let mut name = [0 as c_char; COMM_NAME_MAX_LENGTH];
                    let mut stream = null_mut();
                    let buf = DevBuf::new(rank, G);
                    buf.write(0, &[rank as f32 + 1.0; 8]);
                    // SAFETY: valid out-pointers; `buf` holds both ranges.
                    unsafe {
                        hok((hccl().HcclGetRankId)(comm, &mut got_rank));
                        hok((hccl().HcclGetRankSize)(comm, &mut size));
                        hok((hccl().HcclGetCommName.unwrap())(comm, name.as_mut_ptr()));
                        ok((acl().aclrtCreateStream)(&mut stream));
                        hok((hccl().HcclAllReduce)(
                            buf.at(0),
                            buf.at(64),
                            8,
                            HcclDataType::HCCL_DATA_TYPE_FP32,
                            HcclReduceOp::HCCL_REDUCE_SUM,
                            comm,
                            stream,
                        ));
                        ok((acl().aclrtSynchronizeStream)(stream));
                        ok((acl().aclrtDestroyStream)(stream));
                    }
                    assert_eq!((got_rank, size), (rank, 4));
                    // SAFETY: NUL-terminated by the call.
                    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
                    let want = if named { "comm_1" } else { "hccl_world_group" };
                    assert_eq!(name.to_str().unwrap(), want);
                    let sum: Vec<f32> = buf.read(64, 8);
                    buf.free();
                    destroy(comm);
                    reset_device(rank as i32);
                    sum
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    for sum in sums {
        assert_eq!(sum, vec![10.0; 8]);
    }
    assert_clean();
}

#[test]
fn the_calls_checks_come_in_canns_order_with_its_codes() {
    let _g = test_lock();
    let dir = Dir::new("checks");
    let path = dir.file("rank_table.json", &one_server("rt-checks", 2));
    let c_path = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let f = hccl().HcclCommInitClusterInfoConfig.expect("filled");
    let mut config = test_config();
    let mut comm = null_mut();
    // No device on the thread, whatever else is wrong.
    // SAFETY: NULL pointers are what is checked.
    let code = unsafe { f(std::ptr::null(), 0, null_mut(), null_mut()) };
    assert_eq!(code, HcclResult::HCCL_E_RUNTIME);
    set_device(1);
    // SAFETY: as above, and valid pointers.
    unsafe {
        assert_eq!(
            f(std::ptr::null(), 0, &mut config, &mut comm),
            HcclResult::HCCL_E_PTR
        );
        assert_eq!(
            f(c_path.as_ptr(), 0, &mut config, null_mut()),
            HcclResult::HCCL_E_PTR
        );
        assert_eq!(
            f(c_path.as_ptr(), 0, null_mut(), &mut comm),
            HcclResult::HCCL_E_PTR
        );
    }
    // Rank 0 is on device 0, this thread on device 1.
    let (c, m) = fails(init(&path, 0, Some(&config)));
    assert_eq!(c, HcclResult::HCCL_E_UNAVAIL, "{m}");
    assert!(m.contains("aclrtSetDevice(0)"), "{m}");
    let (c, m) = fails(init(&path, 2, Some(&config)));
    assert_eq!(
        (c, m.contains("has 2 ranks")),
        (HcclResult::HCCL_E_PARA, true),
        "{m}"
    );
    // Load failures are HCCL_E_INTERNAL.
    let missing = dir.0.join("missing.json");
    let (c, m) = fails(init(&missing, 1, Some(&config)));
    assert_eq!(
        (c, m.contains("missing.json")),
        (HcclResult::HCCL_E_INTERNAL, true),
        "{m}"
    );
    let not_json = dir.file("rank_table.txt", &one_server("rt-checks", 2));
    let (c, m) = fails(init(&not_json, 1, Some(&config)));
    assert_eq!(
        (c, m.contains(".json file")),
        (HcclResult::HCCL_E_INTERNAL, true),
        "{m}"
    );
    let broken = dir.file("broken.json", "{\"status\": \"completed\",");
    let (c, m) = fails(init(&broken, 1, Some(&config)));
    assert_eq!(
        (c, m.contains("not JSON")),
        (HcclResult::HCCL_E_INTERNAL, true),
        "{m}"
    );
    let a_dir = dir.0.join("dir.json");
    std::fs::create_dir(&a_dir).unwrap();
    let (c, m) = fails(init(&a_dir, 1, Some(&config)));
    assert_eq!(
        (c, m.contains("not a regular file")),
        (HcclResult::HCCL_E_INTERNAL, true),
        "{m}"
    );
    // A FIFO fails at once instead of blocking the rank.
    let fifo = dir.0.join("fifo.json");
    let c_fifo = CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0);
    let start = Instant::now();
    let (c, m) = fails(init(&fifo, 1, Some(&config)));
    assert_eq!(
        (c, m.contains("not a regular file")),
        (HcclResult::HCCL_E_INTERNAL, true),
        "{m}"
    );
    assert!(start.elapsed() < Duration::from_secs(5));
    // A bad config is refused before the file is read.
    config.hcclOpExpansionMode = 0;
    config.hcclSymWinMaxMemSizePerRank = u64::MAX;
    let (c, _) = fails(init(&missing, 1, Some(&config)));
    assert_eq!(c, HcclResult::HCCL_E_PARA);
    reset_device(1);
    assert_clean();
}

#[test]
fn a_device_takes_one_rank_table_communicator_at_a_time() {
    let _g = test_lock();
    let dir = Dir::new("repeat");
    let path = dir.file("rank_table.json", &one_server("rt-repeat", 1));
    set_device(0);
    let comm = init(&path, 0, None).unwrap_or_else(|c| panic!("{c:?}: {}", recent()));
    let (c, m) = fails(init(&path, 0, None));
    assert_eq!(
        (c, m.contains("already has")),
        (HcclResult::HCCL_E_UNAVAIL, true),
        "{m}"
    );
    destroy(comm);
    // Destroyed, the device takes one again.
    let again = init(&path, 0, None).unwrap_or_else(|c| panic!("{c:?}: {}", recent()));
    destroy(again);
    reset_device(0);
    assert_clean();
}

/// Device 0 of node 0 and device 0 of node 1 are two devices: threads playing ranks of two
/// servers, each on its node's device 0, each make their rank-table communicator.
#[test]
fn devices_of_different_nodes_each_take_a_rank_table_communicator() {
    let _g = test_lock();
    let dir = Dir::new("two-nodes");
    let server = |s: u32| {
        format!(
            r#"{{"server_id": "rt-two-nodes-{s}", "device": [{{"device_id": "0",
                 "device_ip": "10.9.1.{s}", "rank_id": "{s}"}}]}}"#
        )
    };
    let table = format!(
        r#"{{"status": "completed", "version": "1.0", "server_count": "2",
             "server_list": [{}, {}]}}"#,
        server(0),
        server(1)
    );
    let path = dir.file("rank_table.json", &table);
    std::thread::scope(|scope| {
        let ranks: Vec<_> = (0..2u32)
            .map(|rank| {
                let path = &path;
                scope.spawn(move || {
                    crate::acl::node::set_thread_node(rank, None).unwrap();
                    set_device(0);
                    let comm = init(path, rank, None);
                    let comm = comm.unwrap_or_else(|c| panic!("rank {rank}: {c:?}: {}", recent()));
                    destroy(comm);
                    reset_device(0);
                    crate::acl::node::clear_thread_node();
                })
            })
            .collect();
        for rank in ranks {
            rank.join().unwrap();
        }
    });
    assert_clean();
}

#[test]
fn a_table_is_read_again_until_its_status_is_completed() {
    let _g = test_lock();
    let dir = Dir::new("status");
    let done = one_server("rt-status", 1);
    let path = dir.file(
        "rank_table.json",
        &done.replace("completed", "initializing"),
    );
    set_device(0);
    let writer = {
        let path = path.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            // Written whole, then renamed into place, as a launcher completes a table.
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, done).unwrap();
            std::fs::rename(&tmp, &path).unwrap();
        })
    };
    let start = Instant::now();
    let comm = init(&path, 0, None).unwrap_or_else(|c| panic!("{c:?}: {}", recent()));
    assert!(start.elapsed() >= Duration::from_millis(1500));
    writer.join().unwrap();
    destroy(comm);
    reset_device(0);
    assert_clean();
}
