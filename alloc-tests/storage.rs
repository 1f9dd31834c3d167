//! The storage layer for tensor libraries: [`SymStorage`] and its views, and a tensor type
//! defined here, outside the crate, passed to every pool operation through [`Buffer`] and
//! [`BufferMut`] with no `unsafe`.

use std::sync::Arc;

use symheap::half::bf16;
use symheap::{
    Buffer, BufferMut, Error, PoolConfig, ReduceOp, SymBlock, SymPool, SymStorage, SymVec, emu,
};

use crate::harness::EmuSession;

/// A tensor library's tensor: a contiguous run of `len` elements from element `start` of
/// shared storage.
#[derive(Clone)]
struct Tensor {
    storage: Arc<SymStorage>,
    start: usize,
    len: usize,
}

impl Buffer<f32> for Tensor {
    fn alloc(&self) -> &SymBlock {
        self.storage.alloc()
    }
    fn start(&self) -> usize {
        self.start
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl BufferMut<f32> for Tensor {}

/// How a test makes and reads buffers, so that one sequence of calls runs on tensors and on
/// `SymVec`s alike.
trait Kind {
    type B: BufferMut<f32>;
    fn make(pool: &SymPool, data: &[f32]) -> symheap::Result<Self::B>;
    fn read(b: &Self::B) -> symheap::Result<Vec<f32>>;
}

struct Vecs;
impl Kind for Vecs {
    type B = SymVec<f32>;
    fn make(pool: &SymPool, data: &[f32]) -> symheap::Result<SymVec<f32>> {
        SymVec::from_host(pool, data)
    }
    fn read(b: &SymVec<f32>) -> symheap::Result<Vec<f32>> {
        b.to_host()
    }
}

struct Tensors;
impl Kind for Tensors {
    type B = Tensor;
    fn make(pool: &SymPool, data: &[f32]) -> symheap::Result<Tensor> {
        let storage = Arc::new(SymStorage::from_host(pool, data)?);
        Ok(Tensor {
            storage,
            start: 0,
            len: data.len(),
        })
    }
    fn read(b: &Tensor) -> symheap::Result<Vec<f32>> {
        b.storage.view::<f32>(b.start, b.len)?.to_host()
    }
}

/// Every pool collective, a send and receive, and a copy, on two ranks; what each wrote,
/// then the op hash and the path record.
fn every_operation<K: Kind>(
    pool: &SymPool,
    rank: u32,
) -> symheap::Result<(Vec<Vec<f32>>, u64, String)> {
    let n = 4;
    let r = rank as f32;
    let a = K::make(pool, &[r + 1.0, r + 2.0, r + 3.0, r + 4.0])?;
    let zeros = |len: usize| K::make(pool, &vec![0.0; len]);
    let (mut sum, mut gathered, mut scattered) = (zeros(n)?, zeros(2 * n)?, zeros(n)?);
    let (mut swapped, mut rooted, mut gathered_v) = (zeros(n)?, zeros(n)?, zeros(2 * n)?);
    let (mut scattered_v, mut swapped_v, mut received) = (zeros(n)?, zeros(n)?, zeros(n)?);
    let (mut copied, mut in_place, mut broadcast) =
        (zeros(n)?, K::make(pool, &[r; 4])?, K::make(pool, &[r; 4])?);
    pool.all_reduce(&a, &mut sum, ReduceOp::Sum)?;
    pool.all_reduce_in_place(&mut in_place, ReduceOp::Max)?;
    pool.all_gather(&a, &mut gathered)?;
    pool.reduce_scatter(&gathered, &mut scattered, ReduceOp::Sum)?;
    pool.all_to_all(&a, &mut swapped)?;
    pool.broadcast(&mut broadcast, 1)?;
    pool.reduce(&a, &mut rooted, ReduceOp::Sum, 0)?;
    pool.all_gather_v(&a, &mut gathered_v, &[n, n], &[0, n])?;
    pool.reduce_scatter_v(&gathered, &[n, n], &[0, n], &mut scattered_v, ReduceOp::Sum)?;
    pool.all_to_all_v(&a, &[2, 2], &[0, 2], &mut swapped_v, &[2, 2], &[0, 2])?;
    match rank {
        0 => pool.send(&a, 1)?,
        _ => pool.recv(&mut received, 0)?,
    }
    pool.copy(&a, &mut copied)?;
    let outputs = [
        &sum,
        &in_place,
        &gathered,
        &scattered,
        &swapped,
        &broadcast,
        &rooted,
        &gathered_v,
        &scattered_v,
        &swapped_v,
        &received,
        &copied,
    ];
    let values = outputs
        .iter()
        .map(|b| K::read(b))
        .collect::<symheap::Result<_>>()?;
    let paths = format!("{:?}", pool.stats().collectives);
    Ok((values, pool.op_hash(), paths))
}

#[test]
fn a_tensor_type_defined_outside_the_crate_runs_every_operation_as_sym_vecs_do() {
    let session = EmuSession::start();
    let run = |strict: bool| {
        emu::launch(2, move |comm| {
            let config = PoolConfig::new(4 << 20).strict_symmetry(strict);
            let vecs = every_operation::<Vecs>(&SymPool::new(comm, config.clone())?, comm.rank())?;
            let tensors = every_operation::<Tensors>(&SymPool::new(comm, config)?, comm.rank())?;
            Ok((vecs, tensors))
        })
        .unwrap()
    };
    for strict in [false, true] {
        let ranks = run(strict);
        for (vecs, tensors) in &ranks {
            // The same results, the same op hash (the same calls in the same places), and the
            // same path record.
            assert_eq!(vecs, tensors);
        }
        let sums = &ranks[0].1.0;
        assert_eq!(sums[0], [3.0, 5.0, 7.0, 9.0]);
        assert_eq!(sums[10], [0.0; 4]); // rank 0 sent, received nothing
        assert_eq!(ranks[1].1.0[10], [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(ranks[0].1.1, ranks[1].1.1);
    }
    session.assert_clean();
}

#[test]
fn strict_mode_stops_a_tensor_collective_after_a_rank_allocated_more() {
    let session = EmuSession::start();
    let errors = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20).strict_symmetry(true))?;
        if comm.rank() == 1 {
            let _extra = SymStorage::uninit(&pool, 64)?;
        }
        let mut t = Tensors::make(&pool, &[1.0; 4])?;
        let e = pool.all_reduce_in_place(&mut t, ReduceOp::Sum).unwrap_err();
        Ok(e)
    })
    .unwrap();
    for e in errors {
        assert!(matches!(e, Error::Asymmetric(_)), "{e}");
        assert!(e.to_string().contains("ranks [1]"), "{e}");
    }
    session.assert_clean();
}

/// A buffer whose methods say more than its block holds.
struct Overreaching(Tensor);

impl Buffer<f32> for Overreaching {
    fn alloc(&self) -> &SymBlock {
        self.0.alloc()
    }
    fn start(&self) -> usize {
        self.0.start
    }
    fn len(&self) -> usize {
        self.0.len + self.0.storage.alloc().capacity() as usize
    }
}

impl BufferMut<f32> for Overreaching {}

#[test]
fn a_buffer_that_overruns_its_block_is_refused_before_anything_runs() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let t = Tensors::make(&pool, &[1.0; 4])?;
        let hash = pool.op_hash();
        let mut bad = Overreaching(t.clone());
        for e in [
            pool.all_reduce_in_place(&mut bad, ReduceOp::Sum)
                .unwrap_err(),
            pool.copy(&t, &mut bad).unwrap_err(),
            pool.copy(&bad, &mut t.clone()).unwrap_err(),
        ] {
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
            assert!(e.to_string().contains("does not fit in its block"), "{e}");
        }
        assert_eq!(pool.op_hash(), hash, "a refused call is not recorded");
        assert_eq!(Tensors::read(&t)?, [1.0; 4]);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn views_of_shared_storage_are_written_by_collectives_and_refused_while_viewed_from_the_host() {
    let session = EmuSession::start();
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let r = comm.rank() as f32;
        // One storage, two tensors over its halves, both outputs of collectives.
        let storage = Arc::new(SymStorage::zeroed(&pool, 8 * 4)?);
        let half = |start| Tensor {
            storage: storage.clone(),
            start,
            len: 4,
        };
        let (mut low, mut high) = (half(0), half(4));
        let input = Tensors::make(&pool, &[r + 1.0; 2])?;
        pool.all_gather(&input, &mut low)?;
        pool.all_reduce(&input, &mut high.clone(), ReduceOp::Sum)
            .unwrap_err(); // 2 elements into 4: lengths are checked as for SymVec
        pool.all_gather(&input, &mut high)?;
        pool.all_reduce_in_place(&mut high, ReduceOp::Sum)?;
        assert_eq!(
            storage.to_host::<f32>()?,
            [1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 4.0, 4.0]
        );
        // While a host view of the storage lives, work that writes it is refused on every
        // path (it would change memory under a Rust reference); reading it is not.
        let view = storage.host::<f32>()?;
        let e = pool
            .all_reduce_in_place(&mut low, ReduceOp::Sum)
            .unwrap_err();
        assert!(e.to_string().contains("host view"), "{e}");
        let mut out = Tensors::make(&pool, &[0.0; 4])?;
        pool.copy(&high, &mut out)?;
        assert!(pool.copy(&out, &mut low).is_err());
        assert_eq!(view[6], 4.0);
        drop(view);
        // Both ranks refused alike, so they go on in step.
        pool.all_reduce_in_place(&mut low, ReduceOp::Sum)?;
        assert_eq!(storage.view::<f32>(0, 4)?.to_host()?, [2.0, 2.0, 4.0, 4.0]);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}

#[test]
fn storage_is_seen_as_any_element_type_and_resized_with_its_contents() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let mut s = SymStorage::uninit(&pool, 12)?;
        s.copy_from_host(0, &[1.5f32, -2.0])?;
        s.copy_from_host(4, &[bf16::from_f32(3.0), bf16::from_f32(0.5)])?;
        assert_eq!(
            s.to_host::<u32>()?[..2],
            [1.5f32.to_bits(), (-2.0f32).to_bits()]
        );
        assert_eq!(
            s.view::<bf16>(4, 2)?.to_host()?,
            [bf16::from_f32(3.0), bf16::from_f32(0.5)]
        );
        // Bounds and whole elements are checked, in the element type's terms.
        for e in [
            s.view::<f32>(2, 2).err(),
            s.view::<f64>(1, 1).err(),
            s.to_host::<f64>().err(),
            s.copy_from_host(3, &[0u32; 2]).err(),
        ] {
            assert!(matches!(e, Some(Error::InvalidArgument(_))), "{e:?}");
        }
        // A resize keeps what fits; the old block is freed and reused in stream order.
        let before = pool.stats().allocated;
        s.resize(64 << 10)?;
        assert_eq!(s.len(), 64 << 10);
        assert_eq!(s.to_host::<f32>()?[..2], [1.5, -2.0]);
        s.resize(4)?;
        assert_eq!(s.to_host::<f32>()?, [1.5]);
        assert_eq!(pool.stats().allocated, before);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}
