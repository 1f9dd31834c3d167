#![doc = include_str!("../README.md")]

mod allocator;
mod collectives;
#[cfg(feature = "emulator")]
pub mod emu;
mod error;
pub mod heap;
mod path;
mod pool;
pub mod raw;
mod runtime;
mod sym_box;
mod sym_slice;
mod sym_vec;
/// The C types of HCCL and ACL and the function tables (the `symheap-sys` crate).
pub use symheap_sys as sys;

pub use allocator::SymAllocator;
/// The `allocator-api2` crate that [`SymAllocator`] implements `Allocator` of: use this
/// re-export (`symheap::allocator_api2::vec::Vec`) rather than a separate dependency, whose
/// version might differ.
pub use allocator_api2;
pub use collectives::packed_displacements;
pub use error::{Error, OutOfMemory, Result};
pub use path::{Path, Staged};
pub use pool::{
    CollectiveStats, CommStats, PoolConfig, PoolStats, Region, RegionState, Snapshot, SymBlock,
    SymGraph, SymPool, TagStats, WindowMap,
};
pub use runtime::{
    Comm, CommConfig, Element, Event, Graph, ParallelGroups, Placement, ReduceOp, RootInfo,
    Runtime, Stream,
};
pub use sym_box::SymBox;
pub use sym_slice::{Buffer, BufferMut, SymSlice, SymSliceMut};
pub use sym_vec::SymVec;
