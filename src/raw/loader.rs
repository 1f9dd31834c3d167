//! Finding and opening the real CANN libraries.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use libloading::Library;

use crate::runtime::Runtime;
use crate::runtime::{Backend, Origin};
use crate::sys::{AclApi, FnTable, HcclApi};
use crate::{Error, Result};

/// The conventional install location when no environment variable says otherwise.
const DEFAULT_LIB_DIR: &str = "/usr/local/Ascend/ascend-toolkit/latest/lib64";

/// One library to look for: its primary file name and the extra libraries its symbols may live
/// in (CANN 9.x moved communicator management into `libhcomm.so`, the runtime into
/// `libacl_rt.so`).
struct Wanted {
    label: &'static str,
    primary: &'static str,
    fallback: &'static str,
    env: &'static str,
}

const HCCL: Wanted = Wanted {
    label: "HCCL",
    primary: "libhccl.so",
    fallback: "libhcomm.so",
    env: "SYMHEAP_HCCL_LIB",
};

const ACL: Wanted = Wanted {
    label: "ACL",
    primary: "libascendcl.so",
    fallback: "libacl_rt.so",
    env: "SYMHEAP_ACL_LIB",
};

/// Where to look, read from the environment once.
pub(super) struct SearchPaths {
    hccl_override: Option<PathBuf>,
    acl_override: Option<PathBuf>,
    dirs: Vec<PathBuf>,
}

impl SearchPaths {
    fn from_env() -> Self {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let mut dirs: Vec<PathBuf> = ["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"]
            .into_iter()
            .filter_map(var)
            .map(|home| Path::new(&home).join("lib64"))
            .collect();
        dirs.push(PathBuf::from(DEFAULT_LIB_DIR));
        SearchPaths {
            hccl_override: var(HCCL.env).map(PathBuf::from),
            acl_override: var(ACL.env).map(PathBuf::from),
            dirs,
        }
    }

    /// Every candidate for `wanted`, in order: the override, each directory (primary, then
    /// fallback), then the bare names through the dynamic linker's own search.
    fn candidates(&self, wanted: &Wanted, override_path: &Option<PathBuf>) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = override_path.iter().cloned().collect();
        for dir in &self.dirs {
            out.push(dir.join(wanted.primary));
            out.push(dir.join(wanted.fallback));
        }
        out.push(PathBuf::from(wanted.primary));
        out.push(PathBuf::from(wanted.fallback));
        out
    }
}

/// Loads the real CANN libraries.
///
/// Looks for `libascendcl.so` and `libhccl.so` in this order: the files named by
/// `SYMHEAP_ACL_LIB` / `SYMHEAP_HCCL_LIB`; then `$ASCEND_HOME_PATH/lib64`,
/// `$ASCEND_TOOLKIT_HOME/lib64` and `/usr/local/Ascend/ascend-toolkit/latest/lib64`; then
/// the plain names through the dynamic linker (`LD_LIBRARY_PATH`, the cache). CANN 9.x's
/// `libacl_rt.so` and `libhcomm.so` are tried beside each, and symbols missing from
/// `libhccl.so` are looked up in `libhcomm.so` too. Calls `aclInit`.
///
/// # Errors
/// [`Error::Load`] listing every path tried and why each failed (the loader's own reason:
/// not found, a missing dependency, a required symbol missing, ...). Never panics.
///
/// # Safety
/// As [`load_from`], for whichever libraries these paths find: opening a library
/// runs its code, and a library that exports the CANN names with other prototypes would
/// make calls through them undefined behaviour.
pub unsafe fn load() -> Result<Runtime> {
    // SAFETY: the caller's contract.
    unsafe { load_with(&SearchPaths::from_env()) }
}

/// Loads HCCL and ACL from the given files (the emulator's cdylib, a specific CANN install).
///
/// # Errors
/// [`Error::Load`] if either file cannot be opened or lacks a required symbol.
///
/// # Safety
/// - Opening the libraries runs their initialisers: they must be trusted code.
/// - Every symbol they export under a name of [`crate::sys::HcclApi`] /
///   [`crate::sys::AclApi`] must be that C function with exactly its prototype (the real
///   CANN libraries, or a library built to their ABI such as the emulator's cdylib); a
///   library exporting those names as data or with other signatures makes every later
///   call undefined behaviour.
///
/// Safe code cannot load a library:
/// ```compile_fail
/// let rt = symheap::raw::load_from("libhccl.so", "libascendcl.so");
/// ```
pub unsafe fn load_from(
    hccl_path: impl AsRef<Path>,
    acl_path: impl AsRef<Path>,
) -> Result<Runtime> {
    // SAFETY: the caller's contract.
    let acl = unsafe { open_first(&ACL, &[acl_path.as_ref().to_path_buf()]) }?;
    // SAFETY: the caller's contract.
    let hccl = unsafe { open_first(&HCCL, &[hccl_path.as_ref().to_path_buf()]) }?;
    finish(acl, hccl)
}

/// [`load`] over `paths`.
///
/// # Safety
/// As [`load`].
pub(super) unsafe fn load_with(paths: &SearchPaths) -> Result<Runtime> {
    // ACL first: libhccl.so links against it.
    // SAFETY: the caller's contract.
    let acl = unsafe { open_first(&ACL, &paths.candidates(&ACL, &paths.acl_override)) }?;
    // SAFETY: the caller's contract.
    let hccl = unsafe { open_first(&HCCL, &paths.candidates(&HCCL, &paths.hccl_override)) }?;
    finish(acl, hccl)
}

/// A library that opened and resolved, with the libraries its table points into.
struct Opened<T> {
    table: T,
    path: PathBuf,
    libraries: Vec<Library>,
}

fn finish(acl: Opened<AclApi>, hccl: Opened<HcclApi>) -> Result<Runtime> {
    let backend = Backend::Loaded {
        hccl: hccl.path,
        acl: acl.path,
    };
    let mut libraries = acl.libraries;
    libraries.extend(hccl.libraries);
    let origin = Origin {
        backend,
        host_addressable: false,
        keep_alive: Box::new(libraries),
    };
    // SAFETY: the tables were resolved from these libraries by name (`open_first`'s contract:
    // they export the CANN prototypes), the libraries live in `keep_alive`, and CANN's device
    // memory is not host-addressable.
    unsafe { Runtime::from_tables(hccl.table, acl.table, origin) }
}

/// Tries each candidate until one opens and resolves every required symbol.
///
/// # Safety
/// As [`load_from`], for every candidate.
unsafe fn open_first<T: FnTable>(wanted: &Wanted, candidates: &[PathBuf]) -> Result<Opened<T>> {
    let mut tried = Vec::new();
    for path in candidates {
        // SAFETY: the caller's contract.
        let lib = match unsafe { open(path) } {
            Ok(lib) => lib,
            Err(why) => {
                tried.push((path.clone(), why));
                continue;
            }
        };
        // Symbols that moved to the companion library (CANN 9.x) are looked up there too.
        // SAFETY: the caller's contract covers the companion beside a candidate.
        let companion = companion_of(path, wanted).and_then(|p| unsafe { open(&p) }.ok());
        let mut libraries = vec![lib];
        libraries.extend(companion);
        let refs: Vec<&Library> = libraries.iter().collect();
        // SAFETY: the caller promises the exported prototypes are the ones in `sys`; the
        // libraries are stored in the runtime next to the table and outlive it.
        match unsafe { T::resolve(&refs) } {
            Ok(table) => {
                return Ok(Opened {
                    table,
                    path: path.clone(),
                    libraries,
                });
            }
            Err(why) => tried.push((path.clone(), why)),
        }
    }
    Err(Error::Load {
        library: wanted.label,
        tried,
    })
}

/// The fallback library that sits beside `path`, if `path` is the primary one.
fn companion_of(path: &Path, wanted: &Wanted) -> Option<PathBuf> {
    (path.file_name() == Some(OsStr::new(wanted.primary)))
        .then(|| path.with_file_name(wanted.fallback))
}

/// Opens the library at `path`.
///
/// # Safety
/// As [`load_from`]: opening it runs its initialisers.
unsafe fn open(path: &Path) -> std::result::Result<Library, String> {
    // RTLD_NOW: a missing dependency is reported here, not at the first call.
    let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL;
    // SAFETY: the caller's contract.
    unsafe { libloading::os::unix::Library::open(Some(path), flags) }
        .map(Library::from)
        .map_err(|e| with_sources(&e))
}

/// An error's text followed by its sources' (libloading keeps `dlerror`'s text, which says
/// why a path failed, in the source).
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_libraries_list_every_path_tried() {
        let paths = SearchPaths {
            hccl_override: None,
            acl_override: Some(PathBuf::from("/nonexistent/override/libascendcl.so")),
            dirs: vec![PathBuf::from("/nonexistent/home/lib64")],
        };
        // SAFETY: none of these paths exists, so nothing is opened.
        let err = unsafe { load_with(&paths) }.unwrap_err();
        let Error::Load { library, tried } = &err else {
            panic!("expected a load error, got {err}");
        };
        assert_eq!(*library, "ACL");
        // The loader's own reason for each path, not a bare "dlopen failed".
        let reasons: Vec<&String> = tried.iter().map(|(_, why)| why).collect();
        assert!(
            reasons.iter().all(|why| why.contains("No such file")),
            "{reasons:?}"
        );
        let tried: Vec<_> = tried.iter().map(|(p, _)| p.clone()).collect();
        assert_eq!(
            tried,
            [
                "/nonexistent/override/libascendcl.so",
                "/nonexistent/home/lib64/libascendcl.so",
                "/nonexistent/home/lib64/libacl_rt.so",
                "libascendcl.so",
                "libacl_rt.so",
            ]
            .map(PathBuf::from)
        );
        let text = err.to_string();
        assert!(
            text.contains("/nonexistent/override/libascendcl.so"),
            "{text}"
        );
        // And where to point the search.
        for hint in ["SYMHEAP_ACL_LIB", "ASCEND_HOME_PATH"] {
            assert!(text.contains(hint), "{text}");
        }
    }

    #[test]
    fn a_library_without_the_symbols_is_rejected_with_the_missing_name() {
        // libc opens everywhere and exports none of the ACL symbols.
        // SAFETY: libc is trusted code, and none of its symbols is resolved under an ACL name.
        let err = unsafe { open_first::<AclApi>(&ACL, &[PathBuf::from("libc.so.6")]) }
            .err()
            .expect("libc is not ACL");
        let Error::Load { tried, .. } = err else {
            panic!("expected a load error");
        };
        assert!(tried[0].1.contains("aclInit"), "{}", tried[0].1);
    }
}
