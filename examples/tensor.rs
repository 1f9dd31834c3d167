//! A minimal strided tensor type of one's own on symheap's storage layer, and a
//! tensor-parallel MLP step on it, with no `unsafe`.
//!
//! `Tensor { storage, offset, shape, strides }` keeps its storage behind an `Arc`, as tensor
//! libraries do; views (a permutation, here) share it. A dense tensor is handed to the pool's
//! collectives through symheap's `Buffer` / `BufferMut` traits, so every collective keeps the
//! pool's checks, op hash and records. Two ranks split the MLP `z = (x W1ᵀ) W2ᵀ`: W1 by rows
//! (column parallel), W2 by columns (row parallel); the partial outputs are summed with an
//! AllReduce, and the hidden activations gathered into a strided view. Every value is checked
//! against the same step computed on the host.
//!
//! Run: `cargo run --example tensor`.

use std::sync::Arc;

use symheap::{
    Buffer, BufferMut, Error, PoolConfig, ReduceOp, Result, SymBlock, SymPool, SymStorage, emu,
};

/// A strided f32 tensor over shared pooled storage (offsets and strides in elements).
#[derive(Clone)]
struct Tensor {
    storage: Arc<SymStorage>,
    offset: usize,
    shape: Vec<usize>,
    strides: Vec<usize>,
}

/// Row-major strides of `shape`.
fn dense_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

impl Tensor {
    fn from_host(pool: &SymPool, data: &[f32], shape: &[usize]) -> Result<Tensor> {
        assert_eq!(data.len(), shape.iter().product::<usize>());
        Ok(Tensor {
            storage: Arc::new(SymStorage::from_host(pool, data)?),
            offset: 0,
            shape: shape.to_vec(),
            strides: dense_strides(shape),
        })
    }

    /// Uninitialised: a collective's output.
    fn empty(pool: &SymPool, shape: &[usize]) -> Result<Tensor> {
        let numel: usize = shape.iter().product();
        Ok(Tensor {
            storage: Arc::new(SymStorage::uninit(pool, numel * 4)?),
            offset: 0,
            shape: shape.to_vec(),
            strides: dense_strides(shape),
        })
    }

    fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The same storage with dimensions reordered: no copy.
    fn permute(&self, order: &[usize]) -> Tensor {
        Tensor {
            storage: self.storage.clone(),
            offset: self.offset,
            shape: order.iter().map(|&d| self.shape[d]).collect(),
            strides: order.iter().map(|&d| self.strides[d]).collect(),
        }
    }

    /// The same storage seen with another shape (the tensor must be dense).
    fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        self.dense()?;
        Ok(Tensor {
            shape: shape.to_vec(),
            strides: dense_strides(shape),
            ..self.clone()
        })
    }

    /// The tensor as a buffer the pool's collectives take: only a dense one is.
    fn dense(&self) -> Result<Dense<'_>> {
        if self.strides == dense_strides(&self.shape) {
            Ok(Dense(self))
        } else {
            Err(Error::InvalidArgument(
                "a collective needs a dense tensor".into(),
            ))
        }
    }

    /// The elements in logical (row-major) order, read through the strides.
    fn to_host(&self) -> Result<Vec<f32>> {
        let all = self.storage.to_host::<f32>()?;
        let mut out = Vec::with_capacity(self.numel());
        let mut index = vec![0; self.shape.len()];
        for _ in 0..self.numel() {
            let at: usize = index.iter().zip(&self.strides).map(|(i, s)| i * s).sum();
            out.push(all[self.offset + at]);
            for d in (0..index.len()).rev() {
                index[d] += 1;
                if index[d] < self.shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        Ok(out)
    }
}

/// A dense tensor, as symheap's collectives see it.
struct Dense<'a>(&'a Tensor);

impl Buffer<f32> for Dense<'_> {
    fn alloc(&self) -> &SymBlock {
        self.0.storage.alloc()
    }
    fn start(&self) -> usize {
        self.0.offset
    }
    fn len(&self) -> usize {
        self.0.numel()
    }
}

// The storage is shared; the step below orders its own work on the pool's stream.
impl BufferMut<f32> for Dense<'_> {}

/// `a [m, k] · bᵀ` for `b [n, k]`, row-major, on the host (the "kernel" of this example).
fn matmul_t(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    (0..m * n)
        .map(|i| (0..k).map(|j| a[i / n * k + j] * b[i % n * k + j]).sum())
        .collect()
}

const TP: usize = 2;
/// Batch, model and hidden sizes.
const B: usize = 2;
const H: usize = 4;
const F: usize = 6;

fn weights() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let x = (0..B * H).map(|i| i as f32 * 0.5 - 1.0).collect();
    let w1 = (0..F * H).map(|i| ((i * 7) % 5) as f32 - 2.0).collect();
    let w2 = (0..H * F).map(|i| ((i * 3) % 4) as f32 - 1.5).collect();
    (x, w1, w2)
}

fn main() -> Result<()> {
    let (x, w1, w2) = weights();
    let f = F / TP;
    let results = emu::launch(TP as u32, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
        let r = comm.rank() as usize;
        // This rank's shards: rows r*f.. of W1, columns r*f.. of W2.
        let w1_shard = &w1[r * f * H..(r + 1) * f * H];
        let w2_shard: Vec<f32> = (0..H)
            .flat_map(|row| w2[row * F + r * f..row * F + (r + 1) * f].to_vec())
            .collect();
        // Column parallel: this rank's slice of the hidden activations.
        let hidden = matmul_t(&x, w1_shard, B, H, f);
        let hidden_t = Tensor::from_host(&pool, &hidden, &[B, f])?;
        // Row parallel: a partial output, summed across ranks in place.
        let partial = matmul_t(&hidden, &w2_shard, B, f, H);
        let out = Tensor::from_host(&pool, &partial, &[B, H])?;
        pool.all_reduce_in_place(&mut out.dense()?, ReduceOp::Sum)?;
        // The full hidden activations: gathered as [TP, B, f] (rank order), then seen as
        // [B, TP, f] by a permutation (strided, no copy) to compare with the host's [B, F].
        let gathered = Tensor::empty(&pool, &[TP, B, f])?;
        pool.all_gather(&hidden_t.dense()?, &mut gathered.dense()?)?;
        let hidden_full = gathered.permute(&[1, 0, 2]);
        assert!(hidden_full.dense().is_err(), "a permuted view is strided");
        let flat = gathered.reshape(&[TP * B * f])?;
        assert_eq!(flat.numel(), TP * B * f);
        pool.verify_symmetric()?;
        Ok((
            out.to_host()?,
            hidden_full.to_host()?,
            pool.stats().symmetric_and_staged(),
        ))
    })?;
    let hidden = matmul_t(&x, &w1, B, H, F);
    let want = matmul_t(&hidden, &w2, B, F, H);
    for (rank, (out, hidden_full, collectives)) in results.iter().enumerate() {
        assert_eq!(
            out, &want,
            "rank {rank}: the TP step differs from the host's"
        );
        assert_eq!(
            hidden_full, &hidden,
            "rank {rank}: the gathered activations differ"
        );
        println!(
            "rank {rank}: output {out:?} matches the host; collectives (symmetric, staged): \
             {collectives:?}"
        );
    }
    println!("tensor: a strided tensor type of its own ran a TP step through the pool");
    Ok(())
}
