//! Collectives and copies on views of pooled buffers ([`SymSlice`], [`SymSliceMut`]).

use symheap::{Error, PoolConfig, ReduceOp, SymPool, SymVec, emu};

use crate::harness::EmuSession;

#[test]
fn collectives_run_on_slices_and_leave_the_rest_alone() {
    let session = EmuSession::start();
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let r = comm.rank() as f32;
        // A gradient bucket: reduce elements 2..6 of 8 in place, through a mutable view.
        let mut grads = SymVec::from_host(&pool, &[r + 1.0; 8])?;
        pool.all_reduce_in_place(&mut grads.slice_mut(2..6)?, ReduceOp::Sum)?;
        assert_eq!(
            grads.to_host()?,
            [r + 1.0, r + 1.0, 3.0, 3.0, 3.0, 3.0, r + 1.0, r + 1.0]
        );
        // An AllGather from one half of a buffer into a view of another.
        let src = SymVec::from_host(&pool, &[r, r, 9.0, 9.0])?;
        let mut out = SymVec::<f32>::zeroed(&pool, 6)?;
        pool.all_gather(&src.slice(..2)?, &mut out.slice_mut(1..5)?)?;
        assert_eq!(out.to_host()?, [0.0, 0.0, 0.0, 1.0, 1.0, 0.0]);
        // Two disjoint views of one vector: one read, the other written.
        let mut both = SymVec::from_host(&pool, &[r + 1.0, r + 1.0, 0.0, 0.0])?;
        let (left, mut right) = both.split_at_mut(2)?;
        pool.all_reduce(&left, &mut right, ReduceOp::Max)?;
        assert_eq!(right.to_host()?, [2.0, 2.0]);
        assert_eq!(both.to_host()?, [r + 1.0, r + 1.0, 2.0, 2.0]);
        // A device copy between views.
        let mut dst = SymVec::<f32>::zeroed(&pool, 3)?;
        pool.copy(&grads.slice(5..8)?, &mut dst)?;
        assert_eq!(dst.to_host()?, [3.0, r + 1.0, r + 1.0]);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn views_are_bounds_checked_and_lengths_checked_like_whole_buffers() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let mut v = SymVec::<f32>::zeroed(&pool, 8)?;
        for bad in [v.slice(4..9).err(), v.slice(9..).err(), v.slice(..=8).err()] {
            assert!(matches!(bad, Some(Error::InvalidArgument(_))), "{bad:?}");
        }
        assert!(v.split_at_mut(9).is_err());
        assert_eq!(v.slice(8..)?.len(), 0);
        let w = SymVec::<f32>::zeroed(&pool, 8)?;
        let e = pool
            .all_reduce(&w.slice(..3)?, &mut v.slice_mut(..4)?, ReduceOp::Sum)
            .unwrap_err();
        assert!(e.to_string().contains("expected 3"), "{e}");
        // A view of another pool's buffer is refused as the buffer would be.
        let other = SymPool::new(comm, PoolConfig::new(2 << 20))?;
        let foreign = SymVec::<f32>::zeroed(&other, 8)?;
        let e = pool
            .all_reduce(&foreign.slice(..4)?, &mut v.slice_mut(..4)?, ReduceOp::Sum)
            .unwrap_err();
        assert!(e.to_string().contains("another pool"), "{e}");
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn the_op_hash_tells_apart_collectives_on_different_ranges_of_one_buffer() {
    let session = EmuSession::start();
    let outcomes = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20).strict_symmetry(true))?;
        let mut v = SymVec::<f32>::zeroed(&pool, 8)?;
        // The same call on every rank but for the range: rank 1 reduces 4..8. Strict mode
        // compares this very call's hash first, so neither rank enqueues it.
        let at = 4 * comm.rank() as usize;
        let refused = pool.all_reduce_in_place(&mut v.slice_mut(at..at + 4)?, ReduceOp::Sum);
        Ok((pool.op_hash(), matches!(refused, Err(Error::Asymmetric(_)))))
    })
    .unwrap();
    assert_ne!(outcomes[0].0, outcomes[1].0);
    assert!(outcomes.iter().all(|&(_, refused)| refused), "{outcomes:?}");
    session.assert_clean();
}
