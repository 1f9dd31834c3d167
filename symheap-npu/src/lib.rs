//! torch_npu's pluggable allocator as a C library (`libsymheap_npu.so`): every tensor's device
//! memory comes from symmetric segments that symheap's deterministic heap carves, and that are
//! registered as windows of the process group's communicator, so every HCCL collective on a
//! tensor takes the symmetric path with no registration on the hot path.
//!
//! torch_npu loads the library with `torch_npu.npu.memory.NPUPluggableAllocator(path,
//! "symheap_npu_malloc", "symheap_npu_free")` and calls, through function pointers:
//!
//! | export | torch_npu's hook | what it does |
//! |---|---|---|
//! | [`symheap_npu_malloc`] | `alloc(ssize_t size, int device, aclrtStream)` | a block of a segment; a new segment (registered, after an agreement) where none holds it |
//! | [`symheap_npu_free`] | `free(void*, size_t, int device, aclrtStream)` | back to the heap at once; stream-ordered reuse |
//! | [`symheap_npu_init`] | `set_init_fn`: `init(int)` (torch_npu passes the device count) | loads CANN |
//! | [`symheap_npu_reset`] | `set_reset_fn`: `reset(bool)` (`empty_cache`) | releases idle segments registered nowhere |
//! | [`symheap_npu_set_memory_fraction`] | `set_memory_fraction_fn` | caps the segments at a fraction of the device |
//! | [`symheap_npu_reset_peak`] | `set_reset_peak_status_fn` | restarts the peak statistic |
//!
//! and the process calls [`symheap_npu_attach`] once with the process group's `HcclComm`:
//! every segment made so far, and every later one, is then a window of it. Also:
//! [`symheap_npu_check`], [`symheap_npu_detach`], [`symheap_npu_stats`] and
//! [`symheap_npu_last_error`]. The C declarations are in `include/symheap_npu.h`.
//!
//! # Symmetry
//! Ranks that make the same calls (sizes, order) get the same segments and offsets: the heap
//! decides from the calls alone. Every collective step (attach, each later new segment,
//! `symheap_npu_check`) first gathers every rank's call count and a fingerprint folded from
//! its calls, and refuses on every rank alike when some rank differs from rank 0, with an
//! error naming the ranks (`ranks [2] made different allocation calls from rank 0 (...)`).
//!
//! # Configuration (read at the first call)
//! - `SYMHEAP_NPU_SEGMENT_BYTES`: the size of a segment (default 256 MiB, rounded up to the
//!   device granularity); a larger request gets a segment of its own size. Digits, optionally
//!   followed by `K`, `M`, `G` or `T` (binary units).
//! - `SYMHEAP_NPU_LIMIT_BYTES`: the most bytes all segments may hold together (default: no
//!   limit but the device's); `symheap_npu_set_memory_fraction` lowers it further.
//! - CANN is loaded by `symheap::raw::load`: `SYMHEAP_HCCL_LIB`, `SYMHEAP_ACL_LIB`,
//!   `ASCEND_HOME_PATH`, `ASCEND_TOOLKIT_HOME`, then the dynamic linker's search.
//!
//! # Errors
//! No export panics or unwinds into C: each runs inside `catch_unwind`. A failed call returns
//! NULL (`malloc`), an `HcclResult` error (`attach`, `check`, `detach`), -1 (`stats`), or
//! nothing (the hooks without a result), and leaves its message for
//! [`symheap_npu_last_error`] on the calling thread. A panic inside leaves the allocator
//! refusing every later call (its state may be half-changed).

pub mod agreement;
pub mod allocator;
pub mod config;
pub mod error;
pub mod fences;

use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use symheap::sys::{HcclComm, HcclResult, aclrtStream};

use crate::allocator::Allocator;
use crate::error::{Failure, Outcome};

/// The process's allocator, made (and CANN loaded) at the first call that needs it.
static ALLOCATOR: Mutex<Option<Allocator>> = Mutex::new(None);

thread_local! {
    /// The calling thread's last error message.
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Runs `f` on the allocator, under its lock, inside `catch_unwind`; a failure's message
/// (`what`: ...) becomes the thread's last error.
fn with_allocator<T>(
    what: &str,
    f: impl FnOnce(&mut Allocator) -> Outcome<T>,
) -> Result<T, HcclResult> {
    let result = catch_unwind(AssertUnwindSafe(|| {
        let mut guard = ALLOCATOR.lock().map_err(|_| {
            Failure::new(
                HcclResult::HCCL_E_INTERNAL,
                "an earlier call panicked inside symheap-npu; the allocator refuses every call",
            )
        })?;
        let allocator = match guard.as_mut() {
            Some(allocator) => allocator,
            None => guard.insert(Allocator::load()?),
        };
        f(allocator)
    }));
    let failure = match result {
        Ok(Ok(value)) => return Ok(value),
        Ok(Err(failure)) => failure,
        Err(panic) => {
            let text = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            Failure::new(HcclResult::HCCL_E_INTERNAL, format!("panicked: {text}"))
        }
    };
    set_last_error(&format!("{what}: {}", failure.message));
    Err(failure.code)
}

fn set_last_error(message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    let _ = catch_unwind(|| LAST_ERROR.with(|e| *e.borrow_mut() = Some(text)));
}

/// `size` bytes of device memory on `device` for work on `stream` (torch_npu's `alloc`).
/// NULL for size 0, or on failure (see [`symheap_npu_last_error`]).
///
/// The block is 512-byte aligned, inside a segment; once a communicator is attached, inside
/// one of its windows. A new segment, where no segment holds the request, is registered in
/// every attached communicator: a collective step, which every rank must reach at the same
/// call (it does when every rank makes the same calls).
///
/// # Safety
/// `stream` is a live stream of `device` (or null, the default stream).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symheap_npu_malloc(
    size: isize,
    device: c_int,
    stream: aclrtStream,
) -> *mut c_void {
    // SAFETY: the caller's contract.
    with_allocator("symheap_npu_malloc", |a| unsafe {
        a.malloc(size, device, stream)
    })
    .unwrap_or(std::ptr::null_mut())
}

/// Gives back `ptr` (torch_npu's `free`), which work queued on `stream` may still use. Its
/// memory is handed out again in program order; a user on another stream waits for that
/// work on the device first. `size` and `device` are as torch_npu recorded them (unused).
///
/// # Safety
/// `ptr` is NULL or came from [`symheap_npu_malloc`] and is freed once; `stream` is live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symheap_npu_free(
    ptr: *mut c_void,
    size: usize,
    device: c_int,
    stream: aclrtStream,
) {
    let _ = (size, device);
    // SAFETY: the caller's contract.
    let _ = with_allocator("symheap_npu_free", |a| unsafe { a.free(ptr, stream) });
}

/// torch_npu's init hook (it passes the device count): loads CANN and reads the settings.
#[unsafe(no_mangle)]
pub extern "C" fn symheap_npu_init(device_count: c_int) {
    let _ = device_count;
    let _ = with_allocator("symheap_npu_init", |_| Ok(()));
}

/// torch_npu's reset hook (`empty_cache`; the flag is its `check_error`): releases the
/// segments that hold no block and are registered in no communicator. Registered segments
/// stay until the process ends (releasing one would be a collective step).
#[unsafe(no_mangle)]
pub extern "C" fn symheap_npu_reset(check_error: bool) {
    let _ = check_error;
    let _ = with_allocator("symheap_npu_reset", |a| a.release_cached());
}

/// torch_npu's memory-fraction hook: the segments together may hold at most `fraction` of
/// the device's memory (`aclrtGetMemInfo`'s total) from now on; a growth past it fails.
#[unsafe(no_mangle)]
pub extern "C" fn symheap_npu_set_memory_fraction(fraction: f64, device: c_int) {
    let _ = with_allocator("symheap_npu_set_memory_fraction", |a| {
        a.set_memory_fraction(fraction, device)
    });
}

/// torch_npu's reset-peak hook: the peak of allocated bytes starts over from what is
/// allocated now.
#[unsafe(no_mangle)]
pub extern "C" fn symheap_npu_reset_peak(device: c_int) {
    let _ = device;
    let _ = with_allocator("symheap_npu_reset_peak", |a| {
        a.reset_peak();
        Ok(())
    });
}

/// Registers every segment as a window of `comm` (an existing communicator, such as the one
/// torch_npu's process group made; it is not destroyed here), and every later segment too.
/// Collective: every rank calls it at the same point. It first checks that every rank made
/// the same allocator calls so far, and fails on every rank alike if not. Attaching the same
/// communicator again does nothing.
///
/// # Safety
/// `comm` is a live communicator of the loaded libraries, and stays live while attached (see
/// [`symheap_npu_detach`]) or until the process ends.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symheap_npu_attach(comm: HcclComm) -> HcclResult {
    // SAFETY: the caller's contract.
    code(with_allocator("symheap_npu_attach", |a| unsafe {
        a.attach(comm)
    }))
}

/// Deregisters every segment from `comm` (collective) and forgets it: before destroying a
/// communicator while the process goes on allocating.
///
/// # Safety
/// `comm` is live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symheap_npu_detach(comm: HcclComm) -> HcclResult {
    // SAFETY: the caller's contract.
    code(with_allocator("symheap_npu_detach", |a| unsafe {
        a.detach(comm)
    }))
}

/// Compares every rank's allocator calls on every attached communicator (collective), as
/// attach and every growth do: `HCCL_E_INTERNAL` naming the ranks that differ from rank 0.
#[unsafe(no_mangle)]
pub extern "C" fn symheap_npu_check() -> HcclResult {
    code(with_allocator("symheap_npu_check", |a| a.check()))
}

/// The allocator's counters (the C struct `symheap_npu_stats_t`).
pub use crate::allocator::Stats as SymheapNpuStats;

/// Writes the counters to `out`: 0, or -1 for a null `out` or a failure.
///
/// # Safety
/// `out` is NULL or valid for writing one `symheap_npu_stats_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symheap_npu_stats(out: *mut SymheapNpuStats) -> c_int {
    if out.is_null() {
        set_last_error("symheap_npu_stats: out is null");
        return -1;
    }
    match with_allocator("symheap_npu_stats", |a| Ok(a.stats())) {
        Ok(stats) => {
            // SAFETY: non-null, and valid for a write by the caller's contract.
            unsafe { out.write(stats) };
            0
        }
        Err(_) => -1,
    }
}

/// The calling thread's last error message, or NULL if none: valid until the thread's next
/// call into this library.
#[unsafe(no_mangle)]
pub extern "C" fn symheap_npu_last_error() -> *const c_char {
    catch_unwind(|| {
        LAST_ERROR.with(|e| e.borrow().as_ref().map_or(std::ptr::null(), |s| s.as_ptr()))
    })
    .unwrap_or(std::ptr::null())
}

fn code(result: Result<(), HcclResult>) -> HcclResult {
    match result {
        Ok(()) => HcclResult::HCCL_SUCCESS,
        Err(code) => code,
    }
}
