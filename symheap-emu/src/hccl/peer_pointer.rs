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
