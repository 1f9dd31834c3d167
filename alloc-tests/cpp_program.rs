//! A C++ program written for CANN (`alloc-tests/cpp/hccl_surface.cpp`) compiled against
//! header declarations written the way CANN's `acl/acl.h` and `hccl/hccl.h` declare them
//! (`alloc-tests/emu-cdylib/include`), linked with `-lhccl -lascendcl`, which resolve to the
//! emulator's shared library, and run: as 4 processes through the launcher, and as one process
//! that makes 4 communicators with `HcclCommInitAll`. The program checks the answer and the
//! error code of every C function of the extended surface (events timing a collective, device
//! memory from `aclrtMalloc`, the vector, rooted and point-to-point collectives on both paths,
//! the VA-range calls, sub-communicators with a window per communicator, a graph captured
//! across two streams and replayed) and exits non-zero at the first difference.

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
        "-std=c++17",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-O1",
        "-pthread",
        &include,
    ];
    crate::dlopen::compile_for_cann(
        "cpp-program",
        "c++",
        &flags,
        &root.join("cpp/hccl_surface.cpp"),
    )
}

#[test]
fn a_cpp_program_for_cann_checks_every_new_function_as_4_processes() {
    let outcome = Job::new(4, program())
        .grace(Duration::from_secs(30))
        .capture_output()
        .run()
        .unwrap();
    assert!(outcome.success(), "{}", crate::processes::failed(&outcome));
}

#[test]
fn a_cpp_program_makes_4_communicators_with_hccl_comm_init_all() {
    let output = Command::new(program())
        .args(["init-all", "4"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
