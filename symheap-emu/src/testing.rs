//! Hooks for tests of the layers above: failure injection, call counts, live-object counters
//! and the leak check, the device memory limit and the wait warning. They are process-global,
//! and a real program has no use for them.

pub use crate::abi::inject::{call_counts, clear_injected_failures, count_calls, inject_failure};
pub use crate::acl::device::set_device_memory_limit;
pub use crate::acl::stream::report_failures_to_one;
pub use crate::base::counters::{Counters, check_released, counters};
pub use crate::base::patience::{WAIT_WARNING_ENV, set_wait_warning};
