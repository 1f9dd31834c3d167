//! Looking inside a pool: tags and per-tag stats, snapshots (exact for a known layout, and
//! through JSON), the memory summary, peaks.

use symheap::{
    AllocDesc, PoolConfig, ReduceOp, Region, RegionState, Snapshot, SymPool, SymVec, emu,
};

use crate::harness::EmuSession;

fn live(offset: u64, size: u64, tag: &str, seq: u64) -> Region {
    Region {
        offset,
        size,
        state: RegionState::Live,
        tag: Some(tag.into()),
        seq: Some(seq),
    }
}

fn free(offset: u64, size: u64) -> Region {
    Region {
        offset,
        size,
        state: RegionState::Free,
        tag: None,
        seq: None,
    }
}

#[test]
fn a_known_layout_gives_exactly_this_snapshot() {
    let session = EmuSession::start();
    let snapshot = emu::launch(1, |comm| {
        // Deferred reuse, so the block freed after a collective shows as pending.
        let pool = SymPool::new(comm, PoolConfig::new(2 << 20).deferred_reuse(true))?;
        // The pool's own 16-byte check block takes granule 0.
        let a = pool.alloc_with(1000, 0, AllocDesc::tagged("a"))?; // 512..1536
        let _b = pool.alloc_with(4096, 0, AllocDesc::tagged("b"))?; // 1536..5632
        let mut c = SymVec::<f32>::zeroed_with(&pool, 128, AllocDesc::tagged("c"))?; // 5632..6144
        drop(a); // no queued work used it: free at once
        pool.all_reduce_in_place(&mut c, ReduceOp::Sum)?;
        drop(c); // used by queued work: pending until synchronize
        Ok(pool.snapshot())
    })
    .unwrap()
    .remove(0);
    session.assert_clean();
    assert_eq!((snapshot.rank, snapshot.rank_count), (0, 1));
    assert_eq!(snapshot.windows.len(), 1);
    let window = &snapshot.windows[0];
    assert_eq!(window.size, 2 << 20);
    let pending = Region {
        state: RegionState::Pending,
        ..live(5632, 512, "c", 3)
    };
    assert_eq!(
        window.regions,
        [
            live(0, 512, "symheap", 0),
            free(512, 1024),
            live(1536, 4096, "b", 2),
            pending,
            free(6144, (2 << 20) - 6144),
        ]
    );
    let tags: Vec<_> = snapshot
        .stats
        .tags
        .iter()
        .map(|t| (t.tag.as_str(), t.blocks, t.bytes, t.peak_bytes))
        .collect();
    assert_eq!(
        tags,
        [
            ("symheap", 1, 512, 512),
            ("a", 0, 0, 1024),
            ("b", 1, 4096, 4096),
            ("c", 0, 0, 512),
        ]
    );
    assert_eq!(snapshot.stats.pending_frees, 1);
}

#[test]
fn snapshots_round_trip_through_json_exactly() {
    let session = EmuSession::start();
    let snapshots = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(2 << 20).max_capacity(8 << 20))?;
        let _w = SymVec::<f32>::zeroed_with(&pool, 1 << 20, AllocDesc::tagged("weights"))?; // grows
        let mut kv =
            SymVec::from_host_with(&pool, &[1.0f32; 300], AllocDesc::tagged("kv \"cache\" <&>"))?;
        pool.all_reduce_in_place(&mut kv, ReduceOp::Sum)?;
        drop(kv);
        Ok(pool.snapshot())
    })
    .unwrap();
    session.assert_clean();
    assert_eq!(snapshots[0].windows.len(), 2);
    assert_eq!(snapshots[0].op_hash, snapshots[1].op_hash);
    for snapshot in &snapshots {
        let json = snapshot.to_json();
        assert_eq!(&Snapshot::from_json(&json).unwrap(), snapshot, "{json}");
        // Snapshots written before the rank count had its name still load.
        let old = json.replace("\"rank_count\"", "\"world_size\"");
        assert_ne!(old, json);
        assert_eq!(&Snapshot::from_json(&old).unwrap(), snapshot, "{old}");
    }
    let err = Snapshot::from_json("{\"rank\": 0}").unwrap_err();
    assert!(err.to_string().contains("not a symheap snapshot"), "{err}");
}

#[test]
fn the_summary_and_the_peaks_account_by_tag() {
    let session = EmuSession::start();
    emu::launch(1, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let kv = SymVec::<f32>::zeroed_with(&pool, 256 << 10, AllocDesc::tagged("kv-cache"))?; // 1 MiB
        let act = SymVec::<f32>::zeroed_with(&pool, 128 << 10, AllocDesc::tagged("activations"))?;
        let summary = pool.memory_summary();
        for needle in [
            "kv-cache",
            "activations",
            "1.00 MiB",
            "512.00 KiB",
            "window",
        ] {
            assert!(summary.contains(needle), "{needle} missing from\n{summary}");
        }
        drop(act);
        let stats = pool.stats();
        assert_eq!(stats.peak_allocated, 512 + (1 << 20) + (512 << 10));
        pool.reset_peak();
        let stats = pool.stats();
        assert_eq!(stats.peak_allocated, stats.allocated);
        let activations = stats.tags.iter().find(|t| t.tag == "activations").unwrap();
        assert_eq!((activations.bytes, activations.peak_bytes), (0, 0));
        assert!(stats.to_string().contains("allocated"));
        drop(kv);
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}
