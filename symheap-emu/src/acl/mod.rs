//! The ACL runtime: devices, `aclInit` / `aclFinalize`, device (virtual and physical) memory,
//! host memory, streams, host functions, events and copies.

pub(crate) mod copy;
pub(crate) mod device;
pub(crate) mod event;
pub(crate) mod graph;
pub(crate) mod host;
pub(crate) mod host_func;
pub(crate) mod init;
pub(crate) mod memory;
pub(crate) mod node;
pub(crate) mod order;
pub(crate) mod profiling;
pub(crate) mod stream;
