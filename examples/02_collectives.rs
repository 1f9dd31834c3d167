//! Collectives on pooled memory: AllReduce, AllGather, ReduceScatter and AlltoAll on four
//! emulated ranks, with the lengths checked before any C call.
//!
//! ```sh
//! cargo run --release --example 02_collectives
//! ```

use symheap::ReduceOp;
use symheap::{PoolConfig, Result, SymPool, SymVec, emu};

fn main() -> Result<()> {
    let outputs = emu::launch(4, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(16 << 20))?;
        let rank = comm.rank() as f32;
        let input = SymVec::from_host(&pool, &[rank; 8])?;

        let mut sum = SymVec::zeroed(&pool, 8)?;
        pool.all_reduce(&input, &mut sum, ReduceOp::Sum)?;

        let mut gathered = SymVec::zeroed(&pool, 4 * 8)?;
        pool.all_gather(&input, &mut gathered)?;

        let mut scattered = SymVec::zeroed(&pool, 2)?;
        pool.reduce_scatter(&input, &mut scattered, ReduceOp::Max)?;

        let mut exchanged = SymVec::zeroed(&pool, 8)?;
        pool.all_to_all(&input, &mut exchanged)?;

        // A length mismatch is an error before anything is enqueued.
        let mut wrong = SymVec::<f32>::zeroed(&pool, 3)?;
        let err = pool.all_gather(&input, &mut wrong).unwrap_err();

        pool.synchronize()?;
        Ok((
            sum.to_host()?,
            gathered.to_host()?,
            scattered.to_host()?,
            exchanged.to_host()?,
            err.to_string(),
        ))
    })?;
    let (sum, gathered, scattered, exchanged, err) = &outputs[1];
    println!("rank 1 AllReduce(sum):     {sum:?}");
    println!("rank 1 AllGather:          {gathered:?}");
    println!("rank 1 ReduceScatter(max): {scattered:?}");
    println!("rank 1 AlltoAll:           {exchanged:?}");
    println!("a bad length:              {err}");
    Ok(())
}
