//! Import: a DLPack tensor that symheap exported, back to its storage as a [`StridedView`].

use std::ptr::NonNull;
use std::sync::Arc;

use super::export::{DeviceKind, DlpackTensor, Owner, compact_strides, export_as, take};
use super::ffi::DLManagedTensorVersioned;
use crate::runtime::Element;
use crate::storage::{StorageView, SymStorage};
use crate::{DataType, Error, Result};

/// A strided tensor over shared storage: what [`import`] gives back for a tensor that
/// symheap exported. Element `i` (a multi-index over [`shape`](Self::shape)) is element
/// `start + sum(i[d] * strides[d])` of the storage, counted in elements of
/// [`data_type`](Self::data_type); every one lies in the storage (checked at export).
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// use symheap::dlpack::{self, DeviceKind};
/// use symheap::{PoolConfig, SymPool, SymStorage, emu};
///
/// emu::launch(1, |comm| {
///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
///     let storage = Arc::new(SymStorage::from_host(&pool, &[0u8, 1, 2, 3, 4, 5])?);
///     let tensor = dlpack::export::<u8>(storage.clone(), 2, &[2, 2], None, DeviceKind::Auto)?;
///     let back = tensor.into_view();
///     assert!(Arc::ptr_eq(back.storage(), &storage));
///     assert_eq!((back.start(), back.shape(), back.strides()), (2, &[2, 2][..], &[2, 1][..]));
///     assert_eq!(back.view::<u8>()?.to_host()?, [2, 3, 4, 5]);
///     Ok(())
/// })?;
/// # Ok::<(), symheap::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct StridedView {
    storage: Arc<SymStorage>,
    start: usize,
    shape: Vec<i64>,
    strides: Vec<i64>,
    data_type: DataType,
}

impl StridedView {
    fn from_owner(owner: Owner) -> StridedView {
        StridedView {
            storage: owner.storage,
            start: owner.start,
            shape: owner.shape.into_vec(),
            strides: owner.strides.into_vec(),
            data_type: owner.data_type,
        }
    }

    /// The storage.
    pub fn storage(&self) -> &Arc<SymStorage> {
        &self.storage
    }

    /// The storage, letting go of the layout.
    pub fn into_storage(self) -> Arc<SymStorage> {
        self.storage
    }

    /// The first element's index in the storage, counted in elements of
    /// [`data_type`](Self::data_type).
    pub fn start(&self) -> usize {
        self.start
    }

    /// The extents.
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[i64] {
        &self.strides
    }

    /// The element type.
    pub fn data_type(&self) -> DataType {
        self.data_type
    }

    /// Whether the elements are compact and row-major (strides of extents of 1 aside), so
    /// that [`view`](Self::view) gives them as one run.
    pub fn is_contiguous(&self) -> bool {
        let compact = compact_strides(&self.shape);
        self.shape.contains(&0)
            || compact.is_some_and(|c| {
                self.shape
                    .iter()
                    .zip(c.iter().zip(&self.strides))
                    .all(|(&n, (c, s))| n == 1 || c == s)
            })
    }

    /// The elements as one [`StorageView`], which the pool's collectives, copies and
    /// point-to-point calls take.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `T` is the element type and the view
    /// [is contiguous](Self::is_contiguous).
    pub fn view<T: Element>(&self) -> Result<StorageView<'_, T>> {
        if T::DATA_TYPE != self.data_type {
            return Err(Error::invalid(format!(
                "a view of {:?} elements as {:?}",
                self.data_type,
                T::DATA_TYPE
            )));
        }
        if !self.is_contiguous() {
            return Err(Error::invalid(format!(
                "shape {:?} with strides {:?} is not contiguous: copy it first",
                self.shape, self.strides
            )));
        }
        // Extents are not negative, and their product fit in the storage at export.
        let len = self.shape.iter().map(|&n| n as usize).product();
        self.storage.view(self.start, len)
    }

    /// Exports the view again (see [`export`](super::export())).
    ///
    /// # Errors
    /// As for [`export`](super::export()).
    pub fn export(&self, device: DeviceKind) -> Result<DlpackTensor> {
        export_as(
            Arc::clone(&self.storage),
            self.data_type,
            self.start,
            &self.shape,
            Some(&self.strides),
            device,
        )
    }
}

impl DlpackTensor {
    /// Back to its storage and layout, without handing it to anyone.
    pub fn into_view(self) -> StridedView {
        StridedView::from_owner(self.into_owner())
    }
}

/// Takes a DLPack tensor back to its storage: for a tensor that symheap exported (its
/// deleter is symheap's), takes ownership, frees the managed tensor (ending the export's
/// [host view](crate::HostView), if it had one) and returns its storage and layout.
///
/// Only symheap's own exports are recognised. Any other tensor, even one whose data lies
/// in a pool, is refused, and stays the caller's, neither freed nor changed: the pool
/// cannot give out storage that it does not own.
///
/// # Safety
/// `managed` is null, or points to a readable `DLManagedTensorVersioned` that the caller
/// owns (a consumer's, handed back by its `into_raw`, or one from
/// [`DlpackTensor::into_raw`]); if this returns `Ok`, the caller no longer owns it and must
/// neither use nor delete it.
///
/// # Errors
/// [`Error::InvalidArgument`] for a null pointer or a tensor that symheap did not export.
///
/// # Examples
/// ```
/// use symheap::dlpack::{self, DeviceKind};
/// use symheap::{PoolConfig, SymPool, SymVec, emu};
///
/// emu::launch(1, |comm| {
///     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
///     let raw = dlpack::export_vec(SymVec::from_host(&pool, &[7i16; 3])?, DeviceKind::Auto)?
///         .into_raw();
///     // ... a consumer holds `raw`, then hands it back ...
///     // SAFETY: `raw` is a symheap export, owned here.
///     let back = unsafe { dlpack::import(raw) }?;
///     assert_eq!(back.view::<i16>()?.to_host()?, [7, 7, 7]);
///     Ok(())
/// })?;
/// # Ok::<(), symheap::Error>(())
/// ```
pub unsafe fn import(managed: *mut DLManagedTensorVersioned) -> Result<StridedView> {
    let managed =
        NonNull::new(managed).ok_or_else(|| Error::invalid("DLPack import of a null tensor"))?;
    // SAFETY: the caller's contract, passed on.
    match unsafe { take(managed) } {
        Some(owner) => Ok(StridedView::from_owner(owner)),
        None => Err(Error::invalid(
            "DLPack import: the tensor was not exported by symheap (its deleter is another \
             producer's); it stays the caller's",
        )),
    }
}
