//! The HCCL functions of CANN's 2026 headers through the C ABI: a C program written for CANN
//! (`alloc-tests/c/hccl_group_calls.c`), compiled with `-Wall -Wextra -Werror` against the
//! emulator's headers (`alloc-tests/emu-cdylib/include`, as `install.sh` lays them out) and
//! linked with `-lhccl -lascendcl`, checks the answers and error codes of `HcclGroupStart` /
//! `HcclGroupEnd` / `HcclGroupStatusGet` (a ring of sends and receives and collectives issued
//! in different orders, each in one group), `HcclCommGetHandleWithName`, `HcclSetConfig` /
//! `HcclGetConfig` and `HcclSymWinGetPeerPointer` (a host function on a stream writing into the
//! next rank's window): as 4 processes, and as one thread driving 4 ranks of one process (a
//! ring and an AllReduce over every rank, and 4 communicators made and destroyed, each in one
//! group).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use symheap_tools::launcher::Job;

/// Compiles the program once per test process (both tests share it) and returns its path.
fn program() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(compile).clone()
}

fn compile() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("alloc-tests");
    let include = format!("-I{}", root.join("emu-cdylib/include").display());
    let flags = [
        "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-pthread", &include,
    ];
    crate::dlopen::compile_for_cann(
        "group-calls",
        "cc",
        &flags,
        &root.join("c/hccl_group_calls.c"),
    )
}

#[test]
fn a_c_program_checks_group_calls_names_config_and_peer_pointers_as_4_processes() {
    let outcome = Job::new(4, program())
        // The program checks HcclSetConfig / HcclGetConfig with the variable unset (set, it
        // wins over HcclSetConfig).
        .env_remove("HCCL_DETERMINISTIC")
        .grace(Duration::from_secs(30))
        .capture_output()
        .run()
        .unwrap();
    assert!(outcome.success(), "{}", crate::processes::failed(&outcome));
}

#[test]
fn one_thread_drives_4_ranks_in_groups_a_ring_an_all_reduce_and_their_inits() {
    let output = Command::new(program())
        .args(["threads", "4"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
