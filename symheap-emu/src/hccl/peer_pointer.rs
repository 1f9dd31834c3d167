//! `HcclSymWinGetPeerPointer`: where a peer's copy of a window's byte is, for device code.
//!
//! On an A3 the call exists only on the device (AI CPU kernels; hicann/hcomm
//! `src/legacy/ascend910/framework/device/framework/aicpu_symmetric_memory.cc`, and
//! `docs/zh/api_ref/comm_mgr_c/HcclSymWinGetPeerPointer.md`: "supported on the device side
//! only", "only in AI CPU expansion"). The emulator's device code is a host function queued on
//! a stream (`aclrtLaunchHostFunc`, run by the stream's thread), so the call answers there, and
//! gives the address at which this rank's heap maps `peerRank`'s byte `offset` of the window:
//! `heapBase + peerRank * stride + slot + offset`, as HCCL's `baseVa + peerRank * stride +
//! offset`. Writes through it land in the peer's memory.
//!
//! Its checks, in HCCL's order: a NULL window or `ptr` `HCCL_E_PTR`; `peerRank` not below the
//! window's rank count, or `offset` not inside the window (the whole allocation that was
//! registered), `HCCL_E_PARA`. Where the emulator adds checks: a handle that is not a live
//! window is `HCCL_E_PARA` (HCCL's device code trusts it); a communicator not in AI CPU
//! expansion is `HCCL_E_NOT_SUPPORT` (the doc's constraint; HCCL's kernel never runs
//! there); and a caller that is not running a host function on a stream (a plain host thread,
//! where libhccl has no such symbol at all) is `HCCL_E_NOT_SUPPORT`, with a message saying to
//! call it from a host function.

use crate::sys::HcclResult;

use crate::acl::host_func;
use crate::base::errors::{HcclRes, hccl_fail, para};
use crate::base::handle::WindowHandle;
use crate::base::lock::lock;
use crate::hccl::expansion::Expansion;
use crate::hccl::registration;

/// `HcclSymWinGetPeerPointer(winHandle, offset, peerRank)` (after the NULL checks): the
/// address of `peerRank`'s byte `offset` of the window in this rank's heap.
pub(crate) fn peer_pointer(handle: WindowHandle, offset: usize, peer: u32) -> HcclRes<usize> {
    let comm = registration::owner(handle)?;
    let window = lock(&comm.windows)
        .iter()
        .find(|w| w.handle() == handle)
        .cloned();
    let Some(window) = window else {
        return para(format!("{handle:#x} is not a live window"));
    };
    if peer >= comm.n {
        return para(format!(
            "peerRank {peer} is not below the window's rank count {}",
            comm.n
        ));
    }
    if offset >= window.size {
        return para(format!(
            "offset {offset} is not inside the window's {} bytes",
            window.size
        ));
    }
    if comm.expansion != Expansion::AiCpu {
        return hccl_fail(
            HcclResult::HCCL_E_NOT_SUPPORT,
            format!(
                "the communicator's collectives are not expanded on the AI CPU ({:?}): \
                 HcclSymWinGetPeerPointer is supported only in AI CPU expansion",
                comm.expansion
            ),
        );
    }
    if !host_func::running() {
        return hccl_fail(
            HcclResult::HCCL_E_NOT_SUPPORT,
            "HcclSymWinGetPeerPointer is device-side only: on the emulator, call it from a host \
             function queued on a stream (aclrtLaunchHostFunc), the emulator's device code",
        );
    }
    Ok(window.peer_addr(peer, offset))
}

#[cfg(test)]
mod tests {
    use std::ffi::c_void;
    use std::ptr::null_mut;

    use crate::GRANULARITY;
    use crate::sys::{HcclCommSymWindow, HcclResult};
    use crate::testutil::{
        DevBuf, Rank, acl, deregister, hccl, hok, ok, register, run_ranks, test_config,
    };

    /// What a host function asked of `HcclSymWinGetPeerPointer` and got.
    struct Probe {
        win: HcclCommSymWindow,
        offset: usize,
        peer: u32,
        code: HcclResult,
        ptr: *mut c_void,
    }

    /// The host function: asks for the peer pointer.
    unsafe extern "C" fn probe(arg: *mut c_void) {
        // SAFETY: `arg` is the `Probe` of `ask`, alive until its stream is synchronized.
        let p = unsafe { &mut *arg.cast::<Probe>() };
        let get = hccl().HcclSymWinGetPeerPointer.expect("filled");
        // SAFETY: valid out-pointer.
        p.code = unsafe { get(p.win, p.offset, p.peer, &mut p.ptr) };
    }

    fn ask(r: &Rank, win: HcclCommSymWindow, offset: usize, peer: u32) -> (HcclResult, usize) {
        let mut p = Probe {
            win,
            offset,
            peer,
            code: HcclResult::HCCL_E_RESERVED,
            ptr: null_mut(),
        };
        let arg = (&raw mut p).cast::<c_void>();
        let launch = acl().aclrtLaunchHostFunc.expect("filled");
        // SAFETY: `p` outlives the host function: the stream is synchronized before returning.
        ok(unsafe { launch(r.stream, Some(probe), arg) });
        ok(r.sync());
        (p.code, p.ptr as usize)
    }

    /// In AI CPU expansion a host function gets the address of the peer's byte in this rank's
    /// heap (one stride per rank apart, the same slot); in host or AIV expansion it is refused,
    /// and so is a plain host thread in any mode.
    #[test]
    fn only_device_code_of_an_ai_cpu_communicator_gets_peer_pointers() {
        let _guard = crate::test_lock();
        let get = hccl().HcclSymWinGetPeerPointer.expect("filled");
        for (mode, allowed) in [(2, true), (1, false), (3, false)] {
            let mut config = test_config();
            config.hcclOpExpansionMode = mode;
            config.hcclSymWinMaxMemSizePerRank = 1;
            run_ranks(2, &config, |r| {
                let buf = DevBuf::new(r.rank, GRANULARITY);
                let win = register(r, &buf);
                let mut ptr = null_mut();
                // SAFETY: valid out-pointer.
                let host = unsafe { get(win, 0, 0, &mut ptr) };
                assert_eq!(host, HcclResult::HCCL_E_NOT_SUPPORT, "mode {mode}");
                let (code0, at0) = ask(r, win, 64, 0);
                let (code1, at1) = ask(r, win, 64, 1);
                if allowed {
                    hok(code0);
                    hok(code1);
                    assert_eq!(at1 - at0, 1 << 30, "one stride (1 GiB) per rank");
                    assert_eq!(ask(r, win, GRANULARITY, 0).0, HcclResult::HCCL_E_PARA);
                    assert_eq!(ask(r, win, 0, 2).0, HcclResult::HCCL_E_PARA);
                } else {
                    assert_eq!(code0, HcclResult::HCCL_E_NOT_SUPPORT, "mode {mode}");
                }
                deregister(win);
                buf.free();
            });
        }
    }
}
