//! Helpers for the emulator's unit tests: they call the C entry points through the tables,
//! as the layers above do.

use std::ffi::{CStr, c_void};
use std::ptr::null_mut;

use crate::sys::{
    ACL_SUCCESS, AclApi, HcclApi, HcclComm, HcclCommConfig, HcclCommSymWindow, HcclResult,
    HcclRootInfo, aclError, aclrtDrvMemHandle, aclrtPhysicalMemProp, aclrtStream,
};

use crate::abi::exports::acl_api;

/// The ACL table.
pub(crate) fn acl() -> AclApi {
    acl_api()
}

/// The calling thread's recent error message, or "".
pub(crate) fn recent() -> String {
    let get = acl()
        .aclGetRecentErrMsg
        .expect("emulator fills every entry");
    // SAFETY: the emulator returns null or a C string valid until the next call.
    let ptr = unsafe { get() };
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: non-null, NUL-terminated.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

/// Asserts an ACL call succeeded, showing the recorded message otherwise.
#[track_caller]
pub(crate) fn ok(code: aclError) {
    assert_eq!(code, ACL_SUCCESS, "ACL call failed: {}", recent());
}

/// Asserts an HCCL call succeeded, showing the recorded message otherwise.
#[track_caller]
pub(crate) fn hok(code: HcclResult) {
    assert_eq!(
        code,
        HcclResult::HCCL_SUCCESS,
        "HCCL call failed: {}",
        recent()
    );
}

/// The HCCL table.
pub(crate) fn hccl() -> HcclApi {
    crate::abi::exports::hccl_api()
}

/// Asserts the emulator holds nothing: no live object, stream thread or memfd.
#[track_caller]
pub(crate) fn assert_clean() {
    if let Err(left) = crate::base::counters::check_released() {
        panic!("{left}");
    }
}

/// Free bytes of the calling thread's device, as `aclrtGetMemInfo` reports them.
#[track_caller]
pub(crate) fn free_here() -> usize {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers.
    ok(unsafe {
        (acl().aclrtGetMemInfo)(
            crate::sys::aclrtMemAttr::ACL_HBM_MEM_HUGE,
            &mut free,
            &mut total,
        )
    });
    free
}

/// Free bytes of `device`, asked from a thread of its own bound to it.
pub(crate) fn free_on(device: u32) -> usize {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: plain device binding, undone below.
            ok(unsafe { (acl().aclrtSetDevice)(device as i32) });
            let free = free_here();
            // SAFETY: as above.
            ok(unsafe { (acl().aclrtResetDevice)(device as i32) });
            free
        })
        .join()
        .unwrap()
    })
}

/// Device memory made the documented way: reserve, allocate physical memory, map.
pub(crate) struct DevBuf {
    pub(crate) ptr: *mut c_void,
    pub(crate) size: usize,
    pub(crate) phys: aclrtDrvMemHandle,
}

// SAFETY: the pointers are device addresses and handles, only passed back to the emulator.
unsafe impl Send for DevBuf {}
// SAFETY: as above; the value is never used to access memory through `&self`.
unsafe impl Sync for DevBuf {}

impl DevBuf {
    /// `size` bytes (a granularity multiple) on `device`.
    pub(crate) fn new(device: u32, size: usize) -> Self {
        let acl = acl();
        let mut ptr = std::ptr::null_mut();
        let mut phys = std::ptr::null_mut();
        let prop = aclrtPhysicalMemProp::device_huge(device);
        // SAFETY: valid out-pointers and property struct.
        unsafe {
            ok((acl.aclrtReserveMemAddress)(
                &mut ptr,
                size,
                0,
                std::ptr::null_mut(),
                1,
            ));
            ok((acl.aclrtMallocPhysical)(&mut phys, size, &prop, 0));
            ok((acl.aclrtMapMem)(ptr, size, 0, phys, 0));
        }
        DevBuf { ptr, size, phys }
    }

    /// The address `offset` bytes in.
    pub(crate) fn at(&self, offset: usize) -> *mut c_void {
        self.ptr.wrapping_byte_add(offset)
    }

    /// Copies `data` to `offset` (host to device).
    pub(crate) fn write<T: Copy>(&self, offset: usize, data: &[T]) {
        let bytes = std::mem::size_of_val(data);
        // SAFETY: `data` is valid for `bytes`; the device side is validated by the emulator.
        ok(unsafe {
            (acl().aclrtMemcpy)(
                self.at(offset),
                self.size - offset,
                data.as_ptr().cast(),
                bytes,
                crate::sys::aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE,
            )
        });
    }

    /// Copies `len` elements from `offset` (device to host).
    pub(crate) fn read<T: Copy + Default>(&self, offset: usize, len: usize) -> Vec<T> {
        let mut out = vec![T::default(); len];
        let bytes = std::mem::size_of_val(out.as_slice());
        // SAFETY: `out` is valid for `bytes`; the device side is validated by the emulator.
        ok(unsafe {
            (acl().aclrtMemcpy)(
                out.as_mut_ptr().cast(),
                bytes,
                self.at(offset),
                bytes,
                crate::sys::aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
            )
        });
        out
    }

    /// Unmaps, frees and releases.
    pub(crate) fn free(self) {
        let acl = acl();
        // SAFETY: handles made by `new`.
        unsafe {
            ok((acl.aclrtUnmapMem)(self.ptr));
            ok((acl.aclrtFreePhysical)(self.phys));
            ok((acl.aclrtReleaseMemAddress)(self.ptr));
        }
    }
}

/// A config for tests: a short exec timeout so a failing test never waits two minutes.
pub(crate) fn test_config() -> HcclCommConfig {
    let mut c = HcclCommConfig::init();
    c.hcclExecTimeOut = 10;
    c
}

/// One rank of a test: its thread has device `rank` set, a communicator and a stream.
pub(crate) struct Rank {
    pub(crate) rank: u32,
    pub(crate) n: u32,
    pub(crate) comm: HcclComm,
    pub(crate) stream: aclrtStream,
}

impl Rank {
    /// Synchronizes the rank's stream, returning the code.
    pub(crate) fn sync(&self) -> aclError {
        // SAFETY: the stream handle is live for the rank's lifetime.
        unsafe { (acl().aclrtSynchronizeStream)(self.stream) }
    }
}

/// Runs `body` on `n` threads, one per rank, each with a device, a communicator made with
/// `config` and a stream; tears them down afterwards and returns the bodies' results.
pub(crate) fn run_ranks<R: Send>(
    n: u32,
    config: &HcclCommConfig,
    body: impl Fn(&Rank) -> R + Sync,
) -> Vec<R> {
    run_ranks_at(n, config, |rank| (0, rank as i32, None), body)
}

/// [`run_ranks`] with rank `r`'s thread on emulated node `at(r).0`, device `at(r).1` of that
/// node and, when `at(r).2` names one, that SuperPoD.
pub(crate) fn run_ranks_at<R: Send>(
    n: u32,
    config: &HcclCommConfig,
    at: impl Fn(u32) -> (u32, i32, Option<u32>) + Sync,
    body: impl Fn(&Rank) -> R + Sync,
) -> Vec<R> {
    let (a, h) = (acl(), hccl());
    let mut root = HcclRootInfo::default();
    // SAFETY: valid out-pointer.
    hok(unsafe { (h.HcclGetRootInfo)(&mut root) });
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let (root, body, at) = (&root, &body, &at);
                s.spawn(move || {
                    let (mut comm, mut stream) = (null_mut(), null_mut());
                    let (node, device, superpod) = at(rank);
                    crate::topology::set_thread_node(node, superpod).unwrap();
                    // SAFETY: valid pointers; handles are destroyed below.
                    unsafe {
                        ok((a.aclrtSetDevice)(device));
                        hok((h.HcclCommInitRootInfoConfig)(
                            n, root, rank, config, &mut comm,
                        ));
                        ok((a.aclrtCreateStream)(&mut stream));
                    }
                    let r = Rank {
                        rank,
                        n,
                        comm,
                        stream,
                    };
                    // Torn down by the guard even when `body` panics, so nothing of this
                    // rank leaks into later tests and its peers fail at once.
                    let _teardown = Teardown(&r);
                    body(&r)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// Destroys a test rank's stream and communicator and unbinds its device when dropped;
/// failures are asserted unless the rank is already panicking.
struct Teardown<'a>(&'a Rank);

impl Drop for Teardown<'_> {
    fn drop(&mut self) {
        let (a, h, r) = (acl(), hccl(), self.0);
        let mut device = -1;
        // SAFETY: handles made by `run_ranks`, destroyed only here; a valid out-pointer.
        let codes = unsafe {
            (
                (a.aclrtDestroyStream)(r.stream),
                (h.HcclCommDestroy)(r.comm),
                match (a.aclrtGetDevice)(&mut device) {
                    0 => (a.aclrtResetDevice)(device),
                    failed => failed,
                },
            )
        };
        if !std::thread::panicking() {
            ok(codes.0);
            hok(codes.1);
            ok(codes.2);
        }
    }
}

/// A window registered over a whole [`DevBuf`].
pub(crate) fn register(r: &Rank, buf: &DevBuf) -> HcclCommSymWindow {
    let mut win = null_mut();
    let reg = hccl().HcclCommSymWinRegister.expect("filled");
    // SAFETY: live communicator, mapped memory, valid out-pointer.
    hok(unsafe { reg(r.comm, buf.ptr, buf.size as u64, &mut win, 1) });
    win
}

/// Deregisters `win`.
pub(crate) fn deregister(win: HcclCommSymWindow) {
    let dereg = hccl().HcclCommSymWinDeregister.expect("filled");
    // SAFETY: a live window handle.
    hok(unsafe { dereg(win) });
}

/// Page-locked host memory (`aclrtMallocHost`) holding `len` values of `T`: what an async copy
/// to or from the host needs to stay queued (one of pageable memory is made synchronously).
pub(crate) struct PinnedBuf<T> {
    ptr: *mut T,
    len: usize,
}

impl<T: Copy> PinnedBuf<T> {
    /// A copy of `data` in pinned memory.
    pub(crate) fn new(data: &[T]) -> Self {
        let mut ptr = null_mut();
        let bytes = std::mem::size_of_val(data).max(1);
        // SAFETY: a valid out-pointer.
        ok(unsafe { (acl().aclrtMallocHost.expect("filled"))(&mut ptr, bytes) });
        let ptr = ptr.cast::<T>();
        // SAFETY: fresh memory of `bytes`, aligned to 64 (at least `T`'s alignment).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
        PinnedBuf {
            ptr,
            len: data.len(),
        }
    }

    /// The address, for the C calls.
    pub(crate) fn ptr(&self) -> *mut c_void {
        self.ptr.cast()
    }

    /// What the memory holds now (read it once the copies into it are synchronized).
    pub(crate) fn get(&self) -> Vec<T> {
        // SAFETY: `len` values, initialized by `new`, alive until `drop`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }.to_vec()
    }
}

impl<T> Drop for PinnedBuf<T> {
    fn drop(&mut self) {
        // SAFETY: from `aclrtMallocHost`, freed once.
        ok(unsafe { (acl().aclrtFreeHost.expect("filled"))(self.ptr.cast()) });
    }
}

/// Holds `stream` (a task that waits) until the returned sender is dropped, so work queued
/// behind it provably has not run.
pub(crate) fn gate(stream: aclrtStream) -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    crate::acl::stream::lookup(crate::base::handle::StreamHandle::from_c(stream))
        .expect("a live stream")
        .enqueue(Box::new(move || {
            let _ = rx.recv();
            Ok(())
        }))
        .expect("the stream accepts work");
    tx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        abi::inject, abi::inject::inject_failure, acl::device,
        acl::device::set_device_memory_limit, test_lock,
    };

    #[test]
    fn test_lock_resets_global_state() {
        {
            let _g = test_lock();
            inject_failure("aclrtMapMem", 3, 1);
            set_device_memory_limit(1 << 20);
        }
        let _g = test_lock();
        assert_eq!(device::memory_limit(), (64 << 30).min(device::host_ram()));
        for _ in 0..3 {
            assert_eq!(inject::take("aclrtMapMem"), None);
        }
    }

    #[test]
    fn a_panicking_rank_is_torn_down() {
        let _g = test_lock();
        let caught = std::panic::catch_unwind(|| {
            run_ranks(2, &test_config(), |r| {
                assert!(r.rank != 1, "rank 1 fails");
            })
        });
        assert!(caught.is_err());
        assert_clean();
    }
}
