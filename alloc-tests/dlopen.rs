//! The dynamic-loading path: the emulator built as a shared library, opened with
//! `symheap::raw::load_from` exactly as the real `libhccl.so` / `libascendcl.so` would be.

use std::path::{Path, PathBuf};
use std::process::Command;

use symheap::raw::Backend;
use symheap::{CommConfig, ReduceOp, Stream};

use symheap::Element;

use crate::harness::{DeviceBuf, EmuSession};

/// Builds `alloc-tests/emu-cdylib` (in its own target directory, so the outer cargo's lock is
/// never contended) and returns the path of the shared library.
pub(crate) fn build_emulator_cdylib() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target_dir = root.join("target").join("emu-cdylib");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(&root)
        .args([
            "build",
            "--quiet",
            "-p",
            "symheap-emu-cdylib",
            "--target-dir",
        ])
        .arg(&target_dir);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let status = cmd.status().expect("running cargo");
    assert!(status.success(), "building the emulator cdylib failed");
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let lib = target_dir.join(profile).join("libsymheap_emu_cdylib.so");
    assert!(lib.exists(), "{} was not built", lib.display());
    lib
}

/// Compiles the C or C++ program for CANN at `source` with `compiler` and `flags`, linked with
/// `-lhccl -lascendcl` against the emulator's shared library, and returns the program's path.
///
/// The program is built in a directory named `dir_name` beside that library, in which
/// `libhccl.so` and `libascendcl.so` link to it; the program finds them there at run time.
pub(crate) fn compile_for_cann(
    dir_name: &str,
    compiler: &str,
    flags: &[&str],
    source: &Path,
) -> PathBuf {
    compile_for_cann_with(dir_name, compiler, flags, source, &[])
}

/// [`compile_for_cann`], also linked with each shared library of `libraries` (`libNAME.so`
/// files): linked to by name beside the program, given to the linker after the program's
/// source as `-lNAME`, found there at run time.
pub(crate) fn compile_for_cann_with(
    dir_name: &str,
    compiler: &str,
    flags: &[&str],
    source: &Path,
    libraries: &[PathBuf],
) -> PathBuf {
    let library = build_emulator_cdylib();
    let dir = library.parent().unwrap().join(dir_name);
    std::fs::create_dir_all(&dir).unwrap();
    for lib in ["libhccl.so", "libascendcl.so"] {
        let link = dir.join(lib);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&library, &link).unwrap();
    }
    let mut extra = Vec::new();
    for lib in libraries {
        let file = lib.file_name().unwrap();
        let link = dir.join(file);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(lib, &link).unwrap();
        let name = file.to_str().unwrap();
        let name = name
            .strip_prefix("lib")
            .unwrap()
            .strip_suffix(".so")
            .unwrap();
        extra.push(format!("-l{name}"));
    }
    let program = dir.join(source.file_stem().unwrap());
    let output = Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&program)
        .arg(source)
        .arg("-L")
        .arg(&dir)
        .args(&extra)
        .args(["-lhccl", "-lascendcl"])
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .unwrap_or_else(|e| panic!("running the compiler {compiler}: {e}"));
    assert!(
        output.status.success(),
        "compiling {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    program
}

#[test]
fn allreduce_through_the_dlopened_emulator() {
    let lib = build_emulator_cdylib();
    // SAFETY: the emulator's cdylib exports the CANN C functions with their prototypes.
    let rt = unsafe { symheap::raw::load_from(&lib, &lib) }.unwrap();
    assert!(matches!(rt.backend(), Backend::Loaded { .. }));
    // The library has its own copy of the emulator's state; the lock still keeps this test
    // away from the in-process counters' readers while it runs.
    let session = EmuSession::start();
    let sums = symheap::emu::launch_with(&rt, 2, &CommConfig::new(), |comm| {
        let stream = Stream::new(comm.runtime())?;
        let buf = DeviceBuf::new(comm, 4 << 20, true)?;
        let mine: Vec<f32> = (0..1000).map(|i| (i * (comm.rank() + 1)) as f32).collect();
        buf.write(comm, 0, &mine)?;
        // SAFETY: the window holds 1000 floats; synchronised before the host reads.
        unsafe {
            comm.raw().all_reduce(
                buf.ptr(),
                buf.ptr(),
                1000,
                f32::DATA_TYPE.into(),
                ReduceOp::Sum,
                &stream,
            )?
        };
        comm.synchronize(&stream)?;
        buf.read::<f32>(comm, 0, 1000)
    })
    .unwrap();
    let expected: Vec<f32> = (0..1000).map(|i| (i * 3) as f32).collect();
    assert_eq!(sums, [expected.clone(), expected]);
    session.assert_clean();
}
