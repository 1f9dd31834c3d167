#![doc = include_str!("../README.md")]

mod allocator;
pub mod emu;
mod error;
pub mod heap;
mod pool;
pub mod runtime;
mod sym_box;
mod sym_vec;
pub mod sys;

pub use allocator::SymAllocator;
pub use error::{Error, OutOfMemory, Result};
pub use pool::{PoolConfig, PoolStats, SymAlloc, SymPool};
pub use runtime::{DevicePtr, Element, Runtime, WindowHandle};
pub use sym_box::SymBox;
pub use sym_vec::SymVec;
