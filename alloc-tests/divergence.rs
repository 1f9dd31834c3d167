//! Ranks that made different pool calls: what the user is told, in default and strict mode.

use symheap::{AllocDesc, Error, PoolConfig, ReduceOp, SymPool, SymVec, emu};

use crate::harness::EmuSession;

/// Four ranks; rank 2 allocates one extra buffer (4096 B, tagged "kv") before the first
/// collective, then every rank all-reduces a fresh vector. Each rank's error, as displayed.
fn extra_allocation_before_the_first_collective(strict: bool) -> Vec<String> {
    let session = EmuSession::start();
    let outcomes = emu::launch(4, |comm| {
        let config = PoolConfig::new(8 << 20).strict_symmetry(strict);
        let pool = SymPool::new(comm, config)?;
        let _weights = SymVec::from_host_with(&pool, &[1.0f32; 256], AllocDesc::tagged("w"))?;
        let _extra = if comm.rank() == 2 {
            Some(pool.alloc_with(4096, 0, AllocDesc::tagged("kv"))?)
        } else {
            None
        };
        let mut x = SymVec::from_host(&pool, &[1.0f32; 1024])?;
        let e = match pool.all_reduce_in_place(&mut x, ReduceOp::Sum) {
            Err(e) => e,
            Ok(()) => pool
                .synchronize()
                .expect_err("the extra allocation is caught"),
        };
        assert!(
            matches!(e, Error::Asymmetric(_) | Error::Collective { .. }),
            "{e:?}"
        );
        Ok(e.to_string())
    })
    .unwrap();
    session.assert_clean();
    outcomes
}

/// What every rank is told, in both modes: rank 2's extra allocation, and what rank 0 did at
/// that point (allocated the vector).
const NAMED: &str = "rank 2's allocation #2 (4096 B, tag \"kv\") has no match on rank 0, whose \
                     call there is allocation #2 (4096 B, align 4, untagged)";

#[test]
fn an_extra_allocation_is_named_in_strict_mode() {
    for (rank, e) in extra_allocation_before_the_first_collective(true)
        .iter()
        .enumerate()
    {
        println!("strict, rank {rank}: {e}");
        assert!(
            e.contains("ranks [2] made different pool calls"),
            "rank {rank}: {e}"
        );
        assert!(e.contains(NAMED), "rank {rank}: {e}");
    }
}

#[test]
fn an_extra_allocation_is_named_by_default() {
    for (rank, e) in extra_allocation_before_the_first_collective(false)
        .iter()
        .enumerate()
    {
        println!("default, rank {rank}: {e}");
        assert!(
            e.contains("ranks [2] made different pool calls"),
            "rank {rank}: {e}"
        );
        assert!(e.contains(NAMED), "rank {rank}: {e}");
        // The emulator's refusal stays, after the calls.
        assert!(e.contains("asymmetric buffers"), "rank {rank}: {e}");
    }
}
