//! Hooks for tests of the layers above: failure injection, call counts, live-object counters
//! and the leak check, the device memory limit and the wait warning. They are process-global,
//! and a real program has no use for them.

pub use crate::abi::inject::{call_counts, clear_injected_failures, count_calls, inject_failure};
pub use crate::acl::device::set_device_memory_limit;
pub use crate::acl::stream::report_failures_to_one;
pub use crate::base::counters::{Counters, check_released, counters};
pub use crate::base::patience::{WAIT_WARNING_ENV, set_wait_warning};

/// Makes the rank of communicator `comm` vanish as if its process had been killed: a stand-in
/// for `SIGKILL` where ranks are threads. The rank posts no further collective step and its
/// connection to the rendezvous closes without leaving, so its peers find it lost at once, as
/// they find a killed process. Call it for every communicator of the rank (its world and its
/// groups), then end the rank's thread; what the rank still holds may be dropped, and its
/// drops take no step with its peers. `HCCL_E_PARA` for a handle that is not a live
/// communicator.
pub fn vanish(comm: crate::sys::HcclComm) -> crate::sys::HcclResult {
    match crate::hccl::comm::lookup(crate::base::handle::CommHandle::from_c(comm)) {
        Ok(comm) => {
            comm.group.rv.vanish();
            crate::sys::HcclResult::HCCL_SUCCESS
        }
        Err(f) => f.code,
    }
}
