//! `SymVec` and `SymBox`: typed device buffers carved from one registered window.
//!
//! ```sh
//! cargo run --release --example 01_sym_vec
//! ```

use symheap::{PoolConfig, Result, SymBox, SymPool, SymVec, emu};

fn main() -> Result<()> {
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(16 << 20))?;

        // A tensor's storage: same offset in the window on every rank.
        let mut weights = SymVec::<f32>::zeroed(&pool, 1024)?;
        weights.copy_from_host(&vec![0.5; 1024])?;
        let bias = SymVec::from_host(&pool, &[1i32, 2, 3])?;
        let mut step = SymBox::new(&pool, 0u64)?;
        step.set(step.get()? + 1)?;

        if comm.rank() == 0 {
            println!(
                "weights: window {:?} offset {}",
                weights.window(),
                weights.offset()
            );
            println!(
                "bias:    window {:?} offset {} = {:?}",
                bias.window(),
                bias.offset(),
                bias.to_host()?
            );
            println!("step:    {}", step.get()?);
            // The pool answers HcclCommSymWinGet for its own blocks with their own pair.
            let found = pool.window_get(weights.device_ptr(), 4096)?;
            println!("HcclCommSymWinGet(weights) = {found:?}");
        }
        Ok(())
    })?;
    Ok(())
}
