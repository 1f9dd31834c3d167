//! The pluggable allocator for torch_npu (`symheap-npu`, built as `libsymheap_npu.so`) called
//! from C exactly as torch_npu calls it (`alloc-tests/c/npu_allocator.c`), as 4 processes
//! through the launcher: tensors before and after the communicator, each found in one of its
//! windows at the same offset on every rank and reduced with `HcclAllReduce`, stream-ordered
//! reuse across two streams, 1000 rounds without a registration; and one rank's extra call
//! refused, with the same clear error on every rank, at attach and at a later growth.
//!
//! The library loads `libhccl.so` / `libascendcl.so` at run time through symheap's loader;
//! the program is linked with the emulator's library under those names, so both use the one
//! emulator of the process.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use symheap_tools::launcher::{Job, Outcome};

/// Builds `symheap-npu` (beside the emulator's library, in that library's target directory)
/// and returns the path of `libsymheap_npu.so`.
fn build_npu_library() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target_dir = root.join("target").join("emu-cdylib");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(&root)
        .args(["build", "--quiet", "-p", "symheap-npu", "--target-dir"])
        .arg(&target_dir);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let status = cmd.status().expect("running cargo");
    assert!(status.success(), "building symheap-npu failed");
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let lib = target_dir.join(profile).join("libsymheap_npu.so");
    assert!(lib.exists(), "{} was not built", lib.display());
    lib
}

/// Compiles the program once per test process and returns its path.
fn program() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("alloc-tests");
            let include = format!("-I{}", root.join("emu-cdylib/include").display());
            let header = root.join("../symheap-npu/include");
            let header = format!("-I{}", header.display());
            let flags = [
                "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", &include, &header,
            ];
            crate::dlopen::compile_for_cann_with(
                "npu-allocator",
                "cc",
                &flags,
                &root.join("c/npu_allocator.c"),
                &[build_npu_library()],
            )
        })
        .clone()
}

/// Runs the program's `mode` as 4 ranks, with 8 MiB segments. The library finds
/// `libascendcl.so` and `libhccl.so` on `LD_LIBRARY_PATH`, as on a CANN install (its
/// `set_env.sh` puts `lib64` there): here the program's directory, where both names link to
/// the emulator's library that the program is linked with, so the dynamic linker hands the
/// library that very object (the program's link may name only one of the two).
fn run(mode: &str) -> Outcome {
    let program = program();
    Job::new(4, &program)
        .arg(mode)
        .env("LD_LIBRARY_PATH", program.parent().unwrap())
        .env("SYMHEAP_NPU_SEGMENT_BYTES", (8u64 << 20).to_string())
        .grace(Duration::from_secs(30))
        .capture_output()
        .run()
        .unwrap()
}

#[test]
fn torch_npus_calls_get_symmetric_windowed_memory_as_4_processes() {
    let outcome = run("main");
    assert!(outcome.success(), "{}", crate::processes::failed(&outcome));
}

#[test]
fn an_extra_malloc_before_attach_is_refused_on_every_rank() {
    let outcome = run("diverge-attach");
    assert!(outcome.success(), "{}", crate::processes::failed(&outcome));
}

#[test]
fn an_extra_malloc_after_attach_fails_the_next_growth_on_every_rank() {
    let outcome = run("diverge-grow");
    assert!(outcome.success(), "{}", crate::processes::failed(&outcome));
}
