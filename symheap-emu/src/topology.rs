//! Nodes and SuperPoDs: where the emulator puts a rank. A process is on emulated node
//! `SYMHEAP_EMU_NODE` (default 0), and device ids are per node, as on a real cluster, so a
//! job of many nodes runs on one machine with every process on device = its local rank. A
//! SuperPoD is `SYMHEAP_EMU_NODES_PER_SUPERPOD` nodes (default 24, a CloudMatrix384);
//! symmetric windows work only within one, and collectives of a communicator that spans
//! SuperPoDs stage (see the [emulator's choices](crate)).
//!
//! Ranks that are threads of one process each take their own node with
//! [`set_thread_node`] before `aclrtSetDevice`.

pub use crate::acl::node::{
    MAX_NODES, NODE_ENV, NODES_PER_SUPERPOD_ENV, Place, clear_thread_node, set_thread_node,
};
