//! DLPack: pooled tensors handed to other frameworks without a copy, and back.
//!
//! [`export`] describes elements of a [`SymStorage`](crate::SymStorage) (any shape,
//! strides in elements) as a DLPack 1.x [`DLManagedTensorVersioned`], owned by a
//! [`DlpackTensor`] until [`into_raw`](DlpackTensor::into_raw) hands it to a consumer
//! (`torch.from_dlpack`, NumPy, a Rust crate such as `dlpark`). The managed tensor's context
//! holds the storage, so the pool's memory stays alive until the consumer calls the
//! deleter, whatever happened to the pool's handles meanwhile. [`export_vec`] does the
//! same for a whole [`SymVec`](crate::SymVec).
//!
//! The device it names ([`DeviceKind`]): on the emulator, whose device memory is host
//! memory, `kDLCPU`, so host consumers read it; on CANN `kDLAscend` with the pool's device,
//! or `kDLExtDev` as `torch_npu` exchanges NPU tensors today.
//!
//! [`import`] takes a tensor that symheap exported back to its storage, start and layout
//! ([`StridedView`]); a tensor from any other producer is refused and stays the caller's.
//!
//! The C types are this module's own ([`ffi`]'s, re-exported here), with their layouts
//! checked at compile time; symheap depends on no DLPack crate.
//!
//! # Examples
//! A reduced tensor out to a consumer, the pool's handle dropped, and back:
//! ```
//! use std::sync::Arc;
//! use symheap::dlpack::{self, DeviceKind};
//! use symheap::{PoolConfig, ReduceOp, SymPool, SymStorage, emu};
//!
//! emu::launch(2, |comm| {
//!     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
//!     let storage = Arc::new(SymStorage::from_host(&pool, &[1.0f32, 2.0, 3.0, 4.0])?);
//!     pool.all_reduce_in_place(&mut storage.view_all::<f32>()?, ReduceOp::Sum)?;
//!     // A 2 x 2 matrix, transposed by its strides.
//!     let tensor = dlpack::export::<f32>(storage, 0, &[2, 2], Some(&[1, 2]), DeviceKind::Auto)?;
//!     drop(pool);
//!     let raw = tensor.into_raw(); // to the consumer, who hands it back:
//!     // SAFETY: `raw` is a symheap export that this rank owns.
//!     let back = unsafe { dlpack::import(raw) }?;
//!     assert_eq!(back.strides(), [1, 2]);
//!     assert_eq!(back.storage().to_host::<f32>()?, [2.0, 4.0, 6.0, 8.0]);
//!     Ok(())
//! })?;
//! # Ok::<(), symheap::Error>(())
//! ```

mod export;
pub mod ffi;
mod import;

pub use export::{DeviceKind, DlpackTensor, export, export_vec};
pub use ffi::{
    DLDataType, DLDataTypeCode, DLDeleter, DLDevice, DLDeviceType, DLManagedTensorVersioned,
    DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY, DLPackVersion, DLTensor,
};
pub use import::{StridedView, import};
