#![doc = include_str!("../README.md")]

mod allocator;
mod buffer;
pub mod dlpack;
#[cfg(feature = "emulator")]
pub mod emu;
mod error;
mod host_view;
mod ops;
mod path_rules;
mod pool;
pub mod raw;
mod runtime;
mod storage;
mod sym_box;
mod sym_slice;
mod sym_vec;
/// The pure, deterministic offset allocator that places every block of the pool: the
/// `symheap-heap` crate, re-exported so that `symheap::heap::Heap` keeps working. It depends on
/// nothing of symheap's and has no `unsafe`; its [`HeapError`](heap::HeapError) becomes an
/// [`Error`] through `From` (`InvalidArgument` as it is, `OutOfSpace` as
/// [`Error::OutOfMemory`]).
pub use symheap_heap as heap;
/// The C types of HCCL and ACL and the function tables (the `symheap-sys` crate).
pub use symheap_sys as sys;

pub use allocator::SymAllocator;
/// The `allocator-api2` crate that [`SymAllocator`] implements `Allocator` of: use this
/// re-export (`symheap::allocator_api2::vec::Vec`) rather than a separate dependency, whose
/// version might differ.
pub use allocator_api2;
pub use buffer::{Buffer, BufferMut};
pub use error::{Budget, Error, OutOfMemory, OverBudget, Result};
/// The `half` crate, whose `f16` and `bf16` are element types of the pool: use this
/// re-export (`symheap::half::bf16`) rather than a separate dependency, whose version might
/// differ.
pub use half;
pub use host_view::{HostView, HostViewMut};
pub use ops::packed_displacements;
pub use pool::{
    AllocDesc, CollectiveStats, CommStats, PoolConfig, PoolStats, Region, RegionState,
    ShrinkReport, SleepPlan, SleepReport, SleepStats, Snapshot, SymBlock, SymGraph, SymPool,
    TagStats, WakeReport, WindowMap,
};
pub use runtime::GroupSizes;
pub use runtime::RankTablePlacement;
pub use runtime::{
    Comm, CommConfig, Element, Event, Graph, ParallelGroups, Placement, RootInfo, Runtime, Stream,
    Survivors,
};
pub use storage::{StorageView, SymStorage};
pub use sym_box::SymBox;
pub use sym_slice::{SymSlice, SymSliceMut};
pub use sym_vec::SymVec;
/// The shared vocabulary (the `symheap-types` crate): which operation, reduction and element
/// type, which path a collective takes and why it stages.
pub use symheap_types::{Collective, CollectivePath, DataType, ReduceOp, Staged};
