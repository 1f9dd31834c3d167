//! The `allocator-api2` adapter: Rust containers whose storage lives in the pool's rank-private
//! region of device memory, outside the symmetric windows, so a container that grows
//! differently on each rank never moves a `SymVec` (on runtimes where device memory is
//! host-addressable, i.e. the emulator).
//!
//! ```sh
//! cargo run --release --example 03_allocator
//! ```

use symheap::allocator_api2::vec::Vec;
use symheap::{PoolConfig, Result, SymPool, emu};

fn main() -> Result<()> {
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(16 << 20))?;
        let mut activations: Vec<f32, _> = Vec::with_capacity_in(4096, pool.allocator()?);
        activations.extend((0..4096).map(|i| i as f32 * 0.5));
        let stats = pool.stats();
        println!("sum = {}", activations.iter().sum::<f32>());
        println!(
            "{} bytes of the {}-byte private region in use; the {} window(s) hold {} bytes",
            stats.private_allocated, stats.private_reserved, stats.windows, stats.allocated
        );
        drop(activations);
        println!(
            "after drop: {} bytes of the private region in use",
            pool.stats().private_allocated
        );
        Ok(())
    })?;
    Ok(())
}
