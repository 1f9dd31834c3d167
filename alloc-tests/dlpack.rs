//! DLPack ([`symheap::dlpack`]): pooled tensors handed to a consumer no one here wrote
//! (`dlpark`, into `ndarray` views) and back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use dlpark::allocation::dynamic;
use dlpark::{Managed, TryFromDlpack};
use ndarray::{Array2, ArrayViewD, arr1, s};
use symheap::dlpack::{
    self, DLDataTypeCode, DLDeviceType, DLManagedTensorVersioned, DeviceKind, DlpackTensor,
};
use symheap::{DataType, Error, PoolConfig, ReduceOp, SymPool, SymStorage, SymVec, emu};

use crate::harness::EmuSession;

/// dlpark's owner of a versioned managed tensor.
type Consumer = Managed<dlpark::ffi::DLManagedTensorVersioned>;

/// Hands an exported tensor to dlpark, as a C consumer would get it: a raw pointer.
fn hand_to_dlpark(tensor: DlpackTensor) -> Consumer {
    let raw = tensor.into_raw();
    // SAFETY: a fresh DLPack 1.x managed tensor from symheap, whose ownership passes to
    // dlpark (its layout is the C one, which both crates pin).
    unsafe { Consumer::from_raw(raw.cast()) }.expect("dlpark takes a symheap tensor")
}

/// Storage of a 4 x 6 f32 matrix, element `i` of rank `r` holding `100 r + i`.
fn matrix(pool: &SymPool, rank: u32) -> symheap::Result<SymStorage> {
    let values: Vec<f32> = (0..24).map(|i| 100.0 * rank as f32 + i as f32).collect();
    SymStorage::from_host(pool, &values)
}

#[test]
fn a_reduced_tensor_reaches_ndarray_through_dlpark_and_keeps_its_pool_alive() {
    let session = EmuSession::start();
    let ranks = 2;
    emu::launch(ranks, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let storage = Arc::new(matrix(&pool, comm.rank())?);
        pool.all_reduce_in_place(&mut storage.view_all::<f32>()?, ReduceOp::Sum)?;
        // The host reference: the sum over ranks, then columns 1 and 3 of rows 0..3.
        let summed: Vec<f32> = (0..24).map(|i| 100.0 + 2.0 * i as f32).collect();
        let summed = Array2::from_shape_vec((4, 6), summed).unwrap();
        let expected = summed.slice(s![0..3, 1..5;2]).into_dyn().to_owned();

        // A strided 3 x 2 view from element 1: row stride 6, column stride 2.
        let tensor = dlpack::export::<f32>(
            Arc::clone(&storage),
            1,
            &[3, 2],
            Some(&[6, 2]),
            DeviceKind::Auto,
        )?;
        let alive = Arc::downgrade(&storage);
        // The producer lets go of everything before the consumer is done.
        drop(storage);
        drop(pool);
        let consumer = hand_to_dlpark(tensor);
        // SAFETY: the tensor is host-addressable (kDLCPU on the emulator) and symheap keeps
        // it alive and unwritten while `consumer` lives.
        let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&consumer, ()) }.unwrap();
        assert_eq!(view.shape(), [3, 2]);
        assert_eq!(view, expected);
        assert!(alive.upgrade().is_some(), "the consumer keeps the storage");
        drop(view);
        drop(consumer);
        assert!(alive.upgrade().is_none(), "the deleter frees the storage");
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn the_consumer_hands_a_tensor_back_and_import_finds_its_storage_and_view() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let storage = Arc::new(matrix(&pool, 0)?);
        let tensor = dlpack::export::<f32>(
            Arc::clone(&storage),
            7,
            &[2, 2],
            Some(&[6, 1]),
            DeviceKind::Auto,
        )?;
        let consumer = hand_to_dlpark(tensor);
        // SAFETY: as in the test above.
        let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&consumer, ()) }.unwrap();
        assert_eq!(
            view.iter().copied().collect::<Vec<_>>(),
            [7.0, 8.0, 13.0, 14.0]
        );
        drop(view);
        // While a host consumer holds it, the pool refuses work that writes the storage.
        let refused = pool.all_reduce_in_place(&mut storage.view_all::<f32>()?, ReduceOp::Sum);
        assert!(
            matches!(&refused, Err(Error::InvalidArgument(m)) if m.contains("host view")),
            "{refused:?}"
        );

        // Back: the raw pointer the consumer gives up, recognised as symheap's.
        // SAFETY: dlpark hands over its sole owner of a managed tensor.
        let back = unsafe { dlpack::import(consumer.into_raw().cast()) }?;
        assert!(Arc::ptr_eq(back.storage(), &storage));
        assert_eq!(back.start(), 7);
        assert_eq!(back.shape(), [2, 2]);
        assert_eq!(back.strides(), [6, 1]);
        assert_eq!(back.data_type(), DataType::F32);
        // Not compact: no contiguous view of it.
        assert!(matches!(back.view::<f32>(), Err(Error::InvalidArgument(_))));
        // The consumer is gone: collectives write the storage again.
        pool.all_reduce_in_place(&mut storage.view_all::<f32>()?, ReduceOp::Sum)?;

        // Out again and back, through the view.
        let consumer = hand_to_dlpark(back.export(DeviceKind::Auto)?);
        // SAFETY: as above.
        let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&consumer, ()) }.unwrap();
        assert_eq!(view[[1, 1]], 14.0);
        drop(view);
        drop(consumer);

        // A compact tensor comes back as a view the collectives take.
        let tensor =
            dlpack::export::<f32>(Arc::clone(&storage), 6, &[2, 3], None, DeviceKind::Auto)?;
        assert_eq!(tensor.strides(), [3, 1]);
        // SAFETY: `into_raw` hands over the sole owner.
        let back = unsafe { dlpack::import(tensor.into_raw()) }?;
        let compact = back.view::<f32>()?;
        assert_eq!((compact.start(), compact.len()), (6, 6));
        pool.all_reduce_in_place(&mut back.view::<f32>()?, ReduceOp::Max)?;
        assert_eq!(compact.to_host()?, [6.0, 7.0, 8.0, 9.0, 10.0, 11.0]);
        assert!(matches!(back.view::<i32>(), Err(Error::InvalidArgument(_))));
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn a_foreign_dlpack_tensor_is_refused_and_stays_the_callers() {
    let initialized: dynamic::Initialized<dlpark::ffi::DLManagedTensorVersioned> =
        Box::new(arr1(&[1.0f32, 2.0, 3.0])).try_into().unwrap();
    // SAFETY: dlpark's own tensor, finished once.
    let foreign: Consumer = unsafe { initialized.finish() };
    let raw = foreign.into_raw();
    // SAFETY: a valid managed tensor that this test owns.
    let refused = unsafe { dlpack::import(raw.cast::<DLManagedTensorVersioned>()) };
    let Err(Error::InvalidArgument(message)) = refused else {
        panic!("a foreign tensor was taken: {refused:?}");
    };
    assert!(message.contains("not exported by symheap"), "{message}");
    // Still the caller's, untouched: dlpark takes it back and frees it.
    // SAFETY: `import` refused it, so ownership stayed here.
    let foreign = unsafe { Consumer::from_raw(raw) }.unwrap();
    // SAFETY: dlpark's own CPU tensor, alive.
    let view = unsafe { ArrayViewD::<f32>::try_from_dlpack(&foreign, ()) }.unwrap();
    assert_eq!(view.as_slice().unwrap(), [1.0, 2.0, 3.0]);
    // SAFETY: a null pointer is refused before anything is read.
    let null = unsafe { dlpack::import(std::ptr::null_mut()) };
    assert!(matches!(null, Err(Error::InvalidArgument(_))), "{null:?}");
}

/// The deleter that symheap set, and how often the wrapper below ran it.
static DELETER: OnceLock<unsafe extern "C" fn(*mut DLManagedTensorVersioned)> = OnceLock::new();
static DELETES: AtomicUsize = AtomicUsize::new(0);

/// Counts a call of the deleter, then runs symheap's.
unsafe extern "C" fn counting_deleter(managed: *mut DLManagedTensorVersioned) {
    DELETES.fetch_add(1, Ordering::SeqCst);
    let deleter = DELETER.get().expect("the test set the deleter");
    // SAFETY: the caller's contract: `managed` is symheap's tensor, deleted once.
    unsafe { deleter(managed) }
}

#[test]
fn the_deleter_runs_once_and_the_device_is_the_cpu_on_the_emulator() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let idle = pool.stats().allocated;
        let tensor =
            dlpack::export_vec(SymVec::from_host(&pool, &[1i32, 2, 3])?, DeviceKind::Auto)?;
        let managed = tensor.managed();
        assert_eq!((managed.version.major, managed.flags), (1, 0));
        assert_eq!(tensor.device().device_type, DLDeviceType::CPU);
        assert_eq!(tensor.device().device_id, 0);
        let dtype = tensor.dtype();
        assert_eq!(
            (dtype.code, dtype.bits, dtype.lanes),
            (DLDataTypeCode::INT, 32, 1)
        );
        assert_eq!((tensor.shape(), tensor.strides()), (&[3][..], &[1][..]));
        assert!(pool.stats().allocated > idle);
        // Dropped without being handed off: the deleter frees it.
        drop(tensor);
        assert_eq!(pool.stats().allocated, idle);

        // Handed off: the consumer's drop runs the deleter, once.
        let tensor = dlpack::export_vec(SymVec::from_host(&pool, &[5u8; 9])?, DeviceKind::Auto)?;
        let raw = tensor.into_raw();
        // SAFETY: the tensor is this test's until dlpark takes it below; the wrapper calls
        // symheap's deleter once per call.
        unsafe {
            let own = (*raw).deleter.expect("symheap sets a deleter");
            DELETER.get_or_init(|| own);
            (*raw).deleter = Some(counting_deleter);
        }
        let before = DELETES.load(Ordering::SeqCst);
        // SAFETY: as in `hand_to_dlpark`.
        let consumer = unsafe { Consumer::from_raw(raw.cast()) }.unwrap();
        // SAFETY: a kDLCPU tensor that symheap keeps alive.
        let view = unsafe { ArrayViewD::<u8>::try_from_dlpack(&consumer, ()) }.unwrap();
        assert_eq!(view.len(), 9);
        assert!(view.iter().all(|&b| b == 5));
        drop(view);
        drop(consumer);
        assert_eq!(DELETES.load(Ordering::SeqCst) - before, 1);
        assert_eq!(pool.stats().allocated, idle);

        // Where asked, the device's own type and id, as an NPU consumer expects them.
        let v = SymVec::<half::bf16>::zeroed(&pool, 4)?;
        let npu = dlpack::export_vec(v, DeviceKind::ExtDev)?;
        assert_eq!(npu.device().device_type, DLDeviceType::EXT_DEV);
        assert_eq!(npu.device().device_id, comm.device() as i32);
        assert_eq!(
            (npu.dtype().code, npu.dtype().bits),
            (DLDataTypeCode::BFLOAT, 16)
        );
        // SAFETY: symheap's own tensor, handed over by `into_raw`.
        let back = unsafe { dlpack::import(npu.into_raw()) }?;
        let ascend = back.export(DeviceKind::Ascend)?;
        assert_eq!(ascend.device().device_type, DLDeviceType::ASCEND);
        assert_eq!(ascend.device().device_type.0, 21);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

/// A start, a shape and strides.
type Layout<'a> = (usize, &'a [i64], Option<&'a [i64]>);

#[test]
fn exports_are_checked_against_the_storage() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        // 24 f32s.
        let storage = Arc::new(matrix(&pool, 0)?);
        let export = |start, shape: &[i64], strides: Option<&[i64]>| {
            dlpack::export::<f32>(
                Arc::clone(&storage),
                start,
                shape,
                strides,
                DeviceKind::Auto,
            )
        };
        let bad: [Layout; 8] = [
            (0, &[25], None),                   // past the end
            (1, &[4, 6], None),                 // the last element is past the end
            (0, &[-1], None),                   // a negative dimension
            (0, &[2, 2], Some(&[1])),           // strides of another rank
            (0, &[3], Some(&[-1])),             // before the start
            (24, &[1], None),                   // starts at the end
            (0, &[2, 2], Some(&[i64::MAX, 1])), // far past the end
            (usize::MAX, &[1], None),           // far past the end
        ];
        for (start, shape, strides) in bad {
            let e = export(start, shape, strides).unwrap_err();
            assert!(
                matches!(e, Error::InvalidArgument(_)),
                "{shape:?} {strides:?}: {e}"
            );
        }
        // In bounds: negative strides, broadcast (zero) strides, a scalar, an empty tensor.
        let reversed = export(23, &[24], Some(&[-1]))?;
        assert_eq!(reversed.strides(), [-1]);
        let row = export(0, &[3, 6], Some(&[0, 1]))?;
        assert_eq!(row.shape(), [3, 6]);
        let scalar = export(5, &[], None)?;
        assert!(scalar.shape().is_empty() && scalar.managed().dl_tensor.shape.is_null());
        let empty = export(24, &[0, 4], None)?;
        assert!(empty.managed().dl_tensor.data.is_null());
        // The same bytes as another element type: 24 f32s are 12 f64s.
        assert!(
            dlpack::export::<f64>(Arc::clone(&storage), 0, &[12], None, DeviceKind::Auto).is_ok()
        );
        drop((reversed, row, scalar, empty));
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}
