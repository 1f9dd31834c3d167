//! Export: a pooled tensor as a [`DLManagedTensorVersioned`] ([`DlpackTensor`]), whose
//! context keeps the storage, and with it the pool, alive until the consumer's deleter runs.

use std::ffi::c_void;
use std::panic::AssertUnwindSafe;
use std::ptr::NonNull;
use std::sync::Arc;

use super::ffi::{
    DLDataType, DLDataTypeCode, DLDeleter, DLDevice, DLDeviceType, DLManagedTensorVersioned,
    DLPackVersion, DLTensor,
};
use crate::host_view::open_token;
use crate::pool::HostViewToken;
use crate::runtime::Element;
use crate::storage::SymStorage;
use crate::sym_vec::SymVec;
use crate::{DataType, Error, Result};

/// Which device an export names ([`DLDevice`]). The memory is the same; what differs is
/// which consumers read it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeviceKind {
    /// Where device memory is host memory (the emulator), `kDLCPU` with device id 0, so
    /// that host consumers (NumPy, `ndarray`) read it; elsewhere `kDLAscend` with the
    /// pool's device.
    #[default]
    Auto,
    /// `kDLAscend` (21) with the pool's device, on every runtime.
    Ascend,
    /// `kDLExtDev` (12) with the pool's device, on every runtime: what `torch_npu` exchanges
    /// NPU tensors as today.
    ExtDev,
}

/// What a symheap export's context owns, besides the managed tensor beside it: the storage
/// (which holds its block, which holds the pool), the layout, and for a host export the
/// host view that keeps the pool from writing the memory under the consumer.
pub(super) struct Owner {
    pub(super) storage: Arc<SymStorage>,
    /// The first element, counted in elements of `data_type`.
    pub(super) start: usize,
    pub(super) shape: Box<[i64]>,
    pub(super) strides: Box<[i64]>,
    pub(super) data_type: DataType,
    /// Held for a `kDLCPU` export: the consumer reads the memory from the host.
    _host_view: Option<HostViewToken>,
}

// The deleter may run on any thread: what it drops must be sendable there.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Owner>();
};

/// One export: the managed tensor first, so that a pointer to it is a pointer to the whole.
#[repr(C)]
pub(super) struct Export {
    managed: DLManagedTensorVersioned,
    owner: Owner,
}

/// The deleter of every symheap export: frees the [`Export`], dropping its storage (the
/// block goes back to its pool once no one else holds it). Never unwinds into the caller.
///
/// # Safety
/// `managed` is null, or a tensor exported by symheap that no one uses or frees afterwards.
unsafe extern "C" fn delete_export(managed: *mut DLManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    let freed = std::panic::catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's contract: `managed` is the first field of an `Export` that
        // `export_as` leaked from a box, and no one uses it again.
        drop(unsafe { Box::from_raw(managed.cast::<Export>()) });
    }));
    // A panic while dropping the storage was reported by the panic hook; its payload is not
    // dropped here, where a second panic could escape into C.
    if let Err(payload) = freed {
        std::mem::forget(payload);
    }
}

/// Whether `deleter` is symheap's, so that the tensor it frees is an [`Export`].
fn is_ours(deleter: Option<DLDeleter>) -> bool {
    deleter.is_some_and(|d| std::ptr::fn_addr_eq(d, delete_export as DLDeleter))
}

/// Takes back a tensor that symheap exported: its owner, once the managed tensor is freed;
/// `None` for any other tensor, which stays the caller's.
///
/// # Safety
/// `managed` points to a readable `DLManagedTensorVersioned` whose ownership the caller
/// holds (and gives up if this returns `Some`).
pub(super) unsafe fn take(managed: NonNull<DLManagedTensorVersioned>) -> Option<Owner> {
    // SAFETY: readable, by the caller's contract; `deleter` keeps its place in every 1.x.
    let deleter = unsafe { managed.as_ref() }.deleter;
    if !is_ours(deleter) {
        return None;
    }
    // SAFETY: symheap's deleter, so an `Export` leaked from a box, now the caller's to free.
    let export = unsafe { Box::from_raw(managed.as_ptr().cast::<Export>()) };
    Some(export.owner)
}

/// A pooled tensor exported as a DLPack 1.x [`DLManagedTensorVersioned`], which this value
/// owns: dropping it runs the deleter; [`into_raw`](Self::into_raw) hands it to a consumer,
/// who runs the deleter when done. Until then the tensor keeps its storage, and so its
/// pool's memory, alive, even once every other handle to the pool is gone.
///
/// Made by [`export`], [`export_vec`] or [`StridedView::export`](super::StridedView::export).
///
/// # Examples
/// ```
/// use symheap::dlpack::{self, DLDeviceType, DeviceKind};
/// use symheap::{PoolConfig, SymPool, SymVec, emu};
///
/// emu::launch(1, |comm| {
///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
///     let tensor = dlpack::export_vec(SymVec::from_host(&pool, &[1.0f32, 2.0])?, DeviceKind::Auto)?;
///     assert_eq!(tensor.device().device_type, DLDeviceType::CPU); // the emulator
///     assert_eq!((tensor.shape(), tensor.strides()), (&[2i64][..], &[1i64][..]));
///     // A C consumer takes the pointer and calls its deleter when done.
///     let raw = tensor.into_raw();
///     // SAFETY: `raw` is ours, deleted once.
///     unsafe { ((*raw).deleter.unwrap())(raw) };
///     Ok(())
/// })?;
/// # Ok::<(), symheap::Error>(())
/// ```
pub struct DlpackTensor {
    managed: NonNull<DLManagedTensorVersioned>,
}

// SAFETY: the tensor owns its `Export` alone: the raw pointers in it point into that export's
// own boxes or at pooled memory that its storage keeps alive, and everything it owns is
// `Send + Sync` (checked above); the deleter may run on any thread.
unsafe impl Send for DlpackTensor {}
// SAFETY: `&DlpackTensor` only reads the export, which nothing writes while it is owned here.
unsafe impl Sync for DlpackTensor {}

impl DlpackTensor {
    fn export(&self) -> &Export {
        // SAFETY: `managed` is the first field of an `Export` that this value owns.
        unsafe { self.managed.cast::<Export>().as_ref() }
    }

    /// The managed tensor, as a consumer will see it.
    pub fn managed(&self) -> &DLManagedTensorVersioned {
        &self.export().managed
    }

    /// The device it names.
    pub fn device(&self) -> DLDevice {
        self.managed().dl_tensor.device
    }

    /// The element type.
    pub fn dtype(&self) -> DLDataType {
        self.managed().dl_tensor.dtype
    }

    /// The extents.
    pub fn shape(&self) -> &[i64] {
        &self.export().owner.shape
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[i64] {
        &self.export().owner.strides
    }

    /// The managed tensor, still owned by this value.
    pub fn as_ptr(&self) -> *mut DLManagedTensorVersioned {
        self.managed.as_ptr()
    }

    /// Hands the managed tensor over (to a consumer, or to [`import`](super::import)): its
    /// owner must call its deleter once, from any thread.
    pub fn into_raw(self) -> *mut DLManagedTensorVersioned {
        let raw = self.managed.as_ptr();
        std::mem::forget(self);
        raw
    }

    /// Takes back what this export owns, without running the deleter.
    pub(super) fn into_owner(self) -> Owner {
        let raw = self.into_raw();
        // SAFETY: `raw` is the first field of an `Export` leaked from a box, which this
        // value owned and handed over just now.
        unsafe { Box::from_raw(raw.cast::<Export>()) }.owner
    }
}

impl Drop for DlpackTensor {
    fn drop(&mut self) {
        // SAFETY: an export this value owns, which no one uses after.
        unsafe { delete_export(self.managed.as_ptr()) }
    }
}

impl std::fmt::Debug for DlpackTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let owner = &self.export().owner;
        f.debug_struct("DlpackTensor")
            .field("device", &self.device())
            .field("data_type", &owner.data_type)
            .field("start", &owner.start)
            .field("shape", &owner.shape)
            .field("strides", &owner.strides)
            .finish_non_exhaustive()
    }
}

/// Exports elements of `T` in `storage` as a DLPack tensor: element `i` (a multi-index over
/// `shape`) is element `start + sum(i[d] * strides[d])` of the storage, counted in `T`s.
/// `strides` are in elements, `None` for compact row-major; negative and zero strides are
/// allowed. Every element the layout reaches must lie in the storage.
///
/// The tensor keeps `storage` alive until its deleter runs, and with it the block and the
/// pool's memory, even once the pool's handles are gone. It is writable (flags 0) under
/// the rules of [`BufferMut`](crate::BufferMut): the library orders the consumer's work and
/// the pool's. Export first waits for queued work on the storage, so the consumer sees its
/// results. A `kDLCPU` export ([`DeviceKind::Auto`] on the emulator) also counts as a
/// [host view](crate::HostView) while it lives: the pool refuses work that writes the
/// storage, and does not sleep.
///
/// # Errors
/// [`Error::InvalidArgument`] for a negative extent, strides of another length than
/// `shape`, a reachable element outside the storage or an overflow, more than `i32::MAX`
/// dimensions; [`Error::NotHostAddressable`], [`Error::Asleep`], [`Error::Poisoned`] and
/// the runtime's error, from waiting for the storage.
///
/// # Examples
/// Columns 0 and 2 of a 2 x 3 matrix, reduced across ranks first:
/// ```
/// use std::sync::Arc;
/// use symheap::dlpack::{self, DeviceKind};
/// use symheap::{PoolConfig, ReduceOp, SymPool, SymStorage, emu};
///
/// emu::launch(2, |comm| {
///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
///     let storage = Arc::new(SymStorage::from_host(&pool, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?);
///     pool.all_reduce_in_place(&mut storage.view_all::<f32>()?, ReduceOp::Sum)?;
///     let tensor = dlpack::export::<f32>(storage, 0, &[2, 2], Some(&[3, 2]), DeviceKind::Auto)?;
///     drop(pool); // the tensor keeps the memory
///     let t = &tensor.managed().dl_tensor;
///     // SAFETY: a kDLCPU tensor (the emulator): element [1, 1] is at 1 * 3 + 1 * 2.
///     let x = unsafe { *t.data.cast::<f32>().add(t.byte_offset as usize / 4 + 5) };
///     assert_eq!(x, 12.0);
///     Ok(())
/// })?;
/// # Ok::<(), symheap::Error>(())
/// ```
pub fn export<T: Element>(
    storage: Arc<SymStorage>,
    start: usize,
    shape: &[i64],
    strides: Option<&[i64]>,
    device: DeviceKind,
) -> Result<DlpackTensor> {
    export_as(storage, T::DATA_TYPE, start, shape, strides, device)
}

/// Exports a whole [`SymVec`] as a 1-D DLPack tensor, which owns it from then on (see
/// [`export`]). On an error the vector goes back to its pool.
///
/// # Errors
/// As for [`export`].
///
/// # Examples
/// ```
/// use symheap::dlpack::{self, DLDataTypeCode, DeviceKind};
/// use symheap::{PoolConfig, SymPool, SymVec, emu};
///
/// emu::launch(1, |comm| {
///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
///     let tensor = dlpack::export_vec(SymVec::<i64>::zeroed(&pool, 5)?, DeviceKind::Auto)?;
///     assert_eq!((tensor.dtype().code, tensor.dtype().bits), (DLDataTypeCode::INT, 64));
///     assert_eq!(tensor.shape(), [5]);
///     Ok(())
/// })?;
/// # Ok::<(), symheap::Error>(())
/// ```
pub fn export_vec<T: Element>(vec: SymVec<T>, device: DeviceKind) -> Result<DlpackTensor> {
    let len = i64::try_from(vec.len())
        .map_err(|_| Error::invalid(format!("export of {} elements", vec.len())))?;
    export::<T>(Arc::new(SymStorage::from(vec)), 0, &[len], None, device)
}

/// [`export`] with the element type as a value.
pub(super) fn export_as(
    storage: Arc<SymStorage>,
    data_type: DataType,
    start: usize,
    shape: &[i64],
    strides: Option<&[i64]>,
    device: DeviceKind,
) -> Result<DlpackTensor> {
    let elem_bytes = data_type.size();
    let elements = storage.len() / elem_bytes;
    let (strides, empty) = check_layout(elements, start, shape, strides)
        .map_err(|why| Error::invalid(format!("DLPack export of {data_type:?}: {why}")))?;
    let ndim = i32::try_from(shape.len())
        .map_err(|_| Error::invalid(format!("DLPack export of {} dimensions", shape.len())))?;
    let block = storage.alloc();
    let pool = block.pool();
    let device_id = i32::try_from(pool.device())
        .map_err(|_| Error::invalid(format!("device {} has no DLPack id", pool.device())))?;
    let device = match device {
        DeviceKind::Auto if pool.runtime().is_host_addressable() => DLDevice {
            device_type: DLDeviceType::CPU,
            device_id: 0,
        },
        DeviceKind::Auto | DeviceKind::Ascend => DLDevice {
            device_type: DLDeviceType::ASCEND,
            device_id,
        },
        DeviceKind::ExtDev => DLDevice {
            device_type: DLDeviceType::EXT_DEV,
            device_id,
        },
    };
    // The consumer sees the results of queued work; a host consumer reads under a host view.
    let host_view = if device.device_type == DLDeviceType::CPU {
        Some(open_token(block)?)
    } else {
        block.access_idle(|| Ok(()))?;
        None
    };
    // A tensor of no element points at nothing, as DLPack asks.
    let (data, byte_offset) = if empty {
        (std::ptr::null_mut(), 0)
    } else {
        (block.device_ptr().as_raw(), (start * elem_bytes) as u64)
    };
    let mut owner = Owner {
        start,
        shape: shape.into(),
        strides: strides.into(),
        data_type,
        storage,
        _host_view: host_view,
    };
    let array = |a: &mut Box<[i64]>| {
        if a.is_empty() {
            std::ptr::null_mut()
        } else {
            a.as_mut_ptr()
        }
    };
    let dl_tensor = DLTensor {
        data,
        device,
        ndim,
        dtype: dl_data_type(data_type),
        shape: array(&mut owner.shape),
        strides: array(&mut owner.strides),
        byte_offset,
    };
    let export = Box::into_raw(Box::new(Export {
        managed: DLManagedTensorVersioned {
            version: DLPackVersion::CURRENT,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_export),
            flags: 0,
            dl_tensor,
        },
        owner,
    }));
    // SAFETY: `export` was just leaked from a box, so it is valid and not null.
    unsafe { (*export).managed.manager_ctx = export.cast::<c_void>() };
    Ok(DlpackTensor {
        // SAFETY: from `Box::into_raw`, never null.
        managed: unsafe { NonNull::new_unchecked(export.cast()) },
    })
}

/// The DLPack type of an element type.
fn dl_data_type(data_type: DataType) -> DLDataType {
    let code = match data_type {
        DataType::I8 | DataType::I16 | DataType::I32 | DataType::I64 => DLDataTypeCode::INT,
        DataType::U8 | DataType::U16 | DataType::U32 | DataType::U64 => DLDataTypeCode::UINT,
        DataType::F16 | DataType::F32 | DataType::F64 => DLDataTypeCode::FLOAT,
        DataType::BF16 => DLDataTypeCode::BFLOAT,
    };
    DLDataType {
        code,
        bits: (data_type.size() * 8) as u8,
        lanes: 1,
    }
}

/// Checks that every element `shape` and `strides` reach from `start` lies in
/// `[0, elements)`; returns the strides (compact row-major when `None`) and whether the
/// tensor holds no element. The reason as the error.
fn check_layout(
    elements: usize,
    start: usize,
    shape: &[i64],
    strides: Option<&[i64]>,
) -> std::result::Result<(Vec<i64>, bool), String> {
    if let Some(d) = shape.iter().position(|&n| n < 0) {
        return Err(format!("extent {} of dimension {d}", shape[d]));
    }
    let strides = match strides {
        Some(s) if s.len() != shape.len() => {
            return Err(format!(
                "{} strides for {} dimensions",
                s.len(),
                shape.len()
            ));
        }
        Some(s) => s.to_vec(),
        None => compact_strides(shape).ok_or("the compact strides overflow")?,
    };
    let empty = shape.contains(&0);
    let outside = || {
        format!(
            "shape {shape:?}, strides {strides:?} from element {start} reach outside the \
             storage's {elements} elements"
        )
    };
    if empty {
        return if start <= elements {
            Ok((strides, true))
        } else {
            Err(outside())
        };
    }
    // The lowest and highest element reached, exactly (no i64 extent or stride overflows
    // i128 in one product; a sum that would is refused).
    let (mut low, mut high) = (start as i128, start as i128);
    for (&n, &s) in shape.iter().zip(&strides) {
        let reach = (n as i128 - 1) * s as i128;
        let bound = if reach < 0 { &mut low } else { &mut high };
        *bound = bound.checked_add(reach).ok_or("the layout overflows")?;
    }
    if low < 0 || high >= elements as i128 {
        return Err(outside());
    }
    Ok((strides, false))
}

/// The strides of a compact row-major tensor of `shape`, or `None` on overflow.
pub(super) fn compact_strides(shape: &[i64]) -> Option<Vec<i64>> {
    let mut strides = vec![0; shape.len()];
    let mut step = 1i64;
    for (stride, &n) in strides.iter_mut().zip(shape).rev() {
        *stride = step;
        step = step.checked_mul(n.max(1))?;
    }
    Some(strides)
}

#[cfg(test)]
mod tests {
    use super::{check_layout, compact_strides};

    #[test]
    fn layouts_are_checked_exactly_at_the_storage_s_ends() {
        assert_eq!(compact_strides(&[2, 3, 4]), Some(vec![12, 4, 1]));
        assert_eq!(compact_strides(&[]), Some(vec![]));
        assert_eq!(compact_strides(&[i64::MAX, 2, 2]), None);
        assert_eq!(check_layout(6, 0, &[2, 3], None), Ok((vec![3, 1], false)));
        assert!(check_layout(6, 1, &[2, 3], None).is_err());
        // Backwards to element 0, and no further.
        assert!(check_layout(6, 5, &[6], Some(&[-1])).is_ok());
        assert!(check_layout(6, 4, &[6], Some(&[-1])).is_err());
        // A scalar is one element; an empty tensor none, from any start up to the end.
        assert!(check_layout(6, 5, &[], None).is_ok());
        assert!(check_layout(6, 6, &[], None).is_err());
        assert_eq!(check_layout(6, 6, &[0, 2], None), Ok((vec![2, 1], true)));
        assert!(check_layout(6, 7, &[0], None).is_err());
        assert!(check_layout(0, 0, &[1], None).is_err());
        let huge = [i64::MAX, i64::MAX, i64::MAX, i64::MAX, i64::MAX];
        assert!(check_layout(6, 0, &[2; 5], Some(&huge)).is_err());
    }
}
