//! HCCL: communicators (with their sub-communicators' names and the exchange of a collective
//! host call), symmetric heaps and windows and their registration, the zero-copy
//! memory ranges, and the collectives (a checked call, its rendezvous steps, the staged and
//! symmetric algorithms, the V collectives' layouts) and point-to-point transfers.

pub(crate) mod cluster_info;
pub(crate) mod collective;
pub(crate) mod comm;
pub(crate) mod config;
pub(crate) mod expansion;
pub(crate) mod hcomm_mem;
pub(crate) mod host_call;
pub(crate) mod job;
pub(crate) mod memory_range;
pub(crate) mod names;
pub(crate) mod p2p;
pub(crate) mod peer_pointer;
pub(crate) mod rank_table;
pub(crate) mod registration;
pub(crate) mod self_hosted;
pub(crate) mod staged;
pub(crate) mod steps;
pub(crate) mod sub_comm;
pub(crate) mod symmetric;
pub(crate) mod topology;
pub(crate) mod v_layout;
pub(crate) mod window;
