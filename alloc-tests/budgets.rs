//! Budgets and accounting: the pool budget and tag budgets (`PoolConfig::budget`,
//! `PoolConfig::tag_budget`) refuse alike on every rank with a report that names them and
//! change nothing; stats, the summary, snapshots and the heap map show them, and the HCCL
//! staging buffers of every communicator the pool is registered in.

use symheap::{
    AllocDesc, Budget, CommConfig, Error, OutOfMemory, PoolConfig, Runtime, Snapshot, SymPool,
    SymVec, emu,
};
use symheap_tools::heap_map;

use crate::harness::EmuSession;

const KV: AllocDesc = AllocDesc::tagged("kv-cache");

fn out_of_memory<T: std::fmt::Debug>(result: symheap::Result<T>) -> OutOfMemory {
    match result {
        Err(Error::OutOfMemory(oom)) => oom,
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}

fn invalid(config: PoolConfig) -> String {
    emu::launch(1, |comm| match SymPool::new(comm, config.clone()) {
        Err(Error::InvalidArgument(msg)) => Ok(msg),
        other => panic!("expected InvalidArgument, got {other:?}"),
    })
    .unwrap()
    .remove(0)
}

/// A tag budget refuses the allocation that would pass it, on every rank alike, with a report
/// naming the tag, its budget, what is live under it and the setting; nothing changes (the
/// heaps, their op hashes, the tag's bytes), and allocations within the budget, or of other
/// tags, still succeed at the same offsets on every rank.
#[test]
fn a_tag_budget_refuses_alike_on_every_rank_and_changes_nothing() {
    let session = EmuSession::start();
    let runs = emu::launch(2, |comm| {
        let config = PoolConfig::new(8 << 20).tag_budget("kv-cache", 1 << 20);
        let pool = SymPool::new(comm, config)?;
        let first = SymVec::<u8>::zeroed_with(&pool, 768 << 10, KV)?;
        let (hash, snapshot) = (pool.op_hash(), pool.snapshot());
        let oom = out_of_memory(SymVec::<u8>::zeroed_with(&pool, 512 << 10, KV));
        // Nothing moved but the count of refusals.
        let after = pool.snapshot();
        assert_eq!(after.windows, snapshot.windows);
        assert_eq!(after.stats.allocated, snapshot.stats.allocated);
        assert_eq!(after.stats.tags, snapshot.stats.tags);
        assert_eq!(after.stats.oom_count, snapshot.stats.oom_count + 1);
        assert_ne!(
            pool.op_hash(),
            hash,
            "the refusal is counted, alike on every rank"
        );
        // Within the budget: fits exactly. Another tag, and untagged memory: no budget.
        let second = SymVec::<u8>::zeroed_with(&pool, 256 << 10, KV)?;
        let other = SymVec::<u8>::zeroed_with(&pool, 4 << 20, AllocDesc::tagged("weights"))?;
        let untagged = SymVec::<u8>::zeroed(&pool, 1 << 20)?;
        let kv = pool.stats().tags.into_iter().find(|t| t.tag == "kv-cache");
        let kv = kv.expect("the budgeted tag is listed");
        assert_eq!(
            (kv.bytes, kv.budget, kv.blocks),
            (1 << 20, Some(1 << 20), 2)
        );
        // Bad input stays bad input, budget or not.
        let bad = pool.alloc_with(0, 0, KV).unwrap_err();
        assert!(matches!(bad, Error::InvalidArgument(_)), "{bad}");
        let bad = pool.alloc_with(4 << 20, 3, KV).unwrap_err();
        assert!(matches!(bad, Error::InvalidArgument(_)), "{bad}");
        // Full: even one byte more is refused; freeing makes room again.
        let full = out_of_memory(SymVec::<u8>::zeroed_with(&pool, 1, KV));
        assert_eq!(
            full.over_budget.as_ref().unwrap().adding,
            512,
            "granted, not asked"
        );
        drop(first);
        let third = SymVec::<u8>::zeroed_with(&pool, 512 << 10, KV)?;
        let offsets = [
            second.offset(),
            other.offset(),
            untagged.offset(),
            third.offset(),
        ];
        Ok((oom.clone(), oom.to_string(), offsets, pool.op_hash()))
    })
    .unwrap();
    let (oom, text, offsets, hash) = &runs[0];
    for run in &runs[1..] {
        assert_eq!((&run.0, &run.1, &run.2, run.3), (oom, text, offsets, *hash));
    }
    let over = oom.over_budget.as_ref().expect("a budget refused it");
    assert_eq!(over.budget, Budget::Tag("kv-cache".into()));
    assert_eq!(
        (over.limit, over.used, over.adding),
        (1 << 20, 768 << 10, 512 << 10)
    );
    assert_eq!((oom.requested, oom.configured), (512 << 10, 1 << 20));
    assert_eq!(oom.setting, "PoolConfig::tag_budget");
    for part in [
        r#"with tag "kv-cache", whose budget is 1048576 bytes (1.00 MiB)"#,
        "786432 bytes (768.00 KiB) are live under it",
        r#"raise PoolConfig::tag_budget for "kv-cache" (now 1048576 bytes, 1.00 MiB)"#,
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
    session.assert_clean();
}

/// The pool budget (`budget`, the setting `max_capacity` also sets) lets the pool grow by
/// windows up to it and refuses the growth that would pass it, for an allocation and for
/// `reserve`, alike on every rank, naming the budget.
#[test]
fn the_pool_budget_refuses_growth_past_it() {
    let session = EmuSession::start();
    assert_eq!(
        PoolConfig::new(2 << 20).budget(4 << 20),
        PoolConfig::new(2 << 20).max_capacity(4 << 20),
        "one setting, two names"
    );
    let runs = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(2 << 20).budget(4 << 20))?;
        let _a = pool.alloc(1536 << 10, 0)?;
        let _b = pool.alloc(1536 << 10, 0)?; // a second window: 4 MiB in all
        let stats = pool.stats();
        assert_eq!(
            (stats.windows, stats.reserved, stats.budget),
            (2, 4 << 20, 4 << 20)
        );
        let hash = pool.op_hash();
        let oom = out_of_memory(pool.alloc(2 << 20, 0));
        let reserve = out_of_memory(pool.reserve(2 << 20));
        assert_eq!(reserve.over_budget, oom.over_budget);
        let stats = pool.stats();
        assert_eq!((stats.windows, stats.reserved), (2, 4 << 20), "no growth");
        assert_ne!(pool.op_hash(), hash);
        // What still fits, fits.
        let _c = pool.alloc(256 << 10, 0)?;
        Ok((oom.clone(), oom.to_string(), pool.op_hash()))
    })
    .unwrap();
    let (oom, text, hash) = &runs[0];
    assert_eq!((&runs[1].0, &runs[1].1, runs[1].2), (oom, text, *hash));
    let over = oom
        .over_budget
        .as_ref()
        .expect("the pool budget refused it");
    assert_eq!(over.budget, Budget::Pool);
    assert_eq!(
        (over.limit, over.used, over.adding),
        (4 << 20, 4 << 20, 2 << 20)
    );
    assert_eq!(oom.configured, 4 << 20);
    for part in [
        "the pool budget is 4194304 bytes (4.00 MiB), its windows hold 4194304 bytes",
        "the 2097152-byte window it needs would pass it",
        "raise PoolConfig::budget (alias max_capacity; or free tensors / call synchronize) \
         (now 4194304 bytes, 4.00 MiB)",
    ] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
    session.assert_clean();
}

/// A budget of 0, a pool budget below the capacity, a tag given two budgets and a budget on
/// the pool's own tag are bad configurations, refused before anything is made.
#[test]
fn bad_budgets_are_invalid_arguments() {
    let session = EmuSession::start();
    let base = || PoolConfig::new(4 << 20);
    assert!(invalid(base().budget(0)).contains("must be non-zero"));
    let below = invalid(base().budget(1 << 20));
    assert!(
        below.contains("pool budget") && below.contains("below the capacity"),
        "{below}"
    );
    assert!(invalid(base().tag_budget("kv-cache", 0)).contains(r#"tag "kv-cache" must be"#));
    let twice = invalid(
        base()
            .tag_budget("kv-cache", 1 << 20)
            .tag_budget("kv-cache", 1 << 21),
    );
    assert!(twice.contains("given a budget twice"), "{twice}");
    assert!(invalid(base().tag_budget("symheap", 1 << 20)).contains("pool's own"));
    session.assert_clean();
}

/// Snapshots of a budgeted pool attached to a group whose communicator has other HCCL
/// buffers, on two ranks.
fn budgeted_snapshots() -> Vec<Snapshot> {
    let rt = Runtime::emulated().unwrap();
    let world = CommConfig::new().buffer_size_mb(16);
    emu::launch_with(&rt, 2, &world, |comm| {
        let config = PoolConfig::new(4 << 20)
            .budget(8 << 20)
            .tag_budget("kv-cache", 2 << 20)
            .tag_budget("activations", 1 << 20);
        let pool = SymPool::new(comm, config)?;
        let before = pool.stats();
        let tags: Vec<_> = before
            .tags
            .iter()
            .map(|t| (t.tag.as_str(), t.budget))
            .collect();
        assert_eq!(
            tags,
            [
                ("symheap", None),
                ("kv-cache", Some(2 << 20)),
                ("activations", Some(1 << 20))
            ],
            "budgeted tags are listed before their first allocation"
        );
        let group = comm.split(&[0, 1], 7, &CommConfig::new().buffer_size_mb(8))?;
        pool.attach(&group)?;
        let _kv = SymVec::<u8>::zeroed_with(&pool, 1 << 20, KV)?;
        let _w = SymVec::<u8>::zeroed_with(&pool, 512 << 10, AllocDesc::tagged("weights"))?;
        let snapshot = pool.snapshot();
        let summary = pool.memory_summary();
        for part in [
            "of budget 8.00 MiB",
            "hccl bufs",
            "50.00 MiB",
            "budget",
            "2.00 MiB",
        ] {
            assert!(summary.contains(part), "{part:?} not in\n{summary}");
        }
        let kv_line = summary.lines().find(|l| l.starts_with("kv-cache")).unwrap();
        // Allocated, peak, budget, resident, offloadable.
        let columns: Vec<&str> = kv_line
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(
            columns[columns.len() - 3..],
            ["2.00 MiB", "1.00 MiB", "0 B"],
            "{kv_line}"
        );
        let weights_line = summary.lines().find(|l| l.starts_with("weights")).unwrap();
        assert!(weights_line.contains(" - "), "{weights_line}");
        drop(pool);
        Ok(snapshot)
    })
    .unwrap()
}

/// Stats, the summary and snapshots show the pool budget, each tag's budget beside its live
/// bytes, and each communicator's HCCL buffers (`2 x hcclBufferSize` MiB + 1 MiB, 200 MiB each by
/// default); snapshots still round-trip through JSON, and ones written before these fields
/// still load.
#[test]
fn stats_summary_and_snapshots_show_budgets_and_hccl_buffers() {
    let session = EmuSession::start();
    assert_eq!(CommConfig::new().buffer_bytes(), 401 << 20);
    let default = emu::launch(1, |comm| {
        // What the stats say HCCL holds is what the device lost when the communicator came.
        let (free_before, _) = comm.runtime().mem_info()?;
        let config = CommConfig::new().buffer_size_mb(8);
        let group = comm.split(&[0], 1, &config)?;
        let (free_after, _) = comm.runtime().mem_info()?;
        assert_eq!(
            free_before - free_after,
            config.buffer_bytes() + 32,
            "32 bytes of padding"
        );
        drop(group);
        Ok(SymPool::new(comm, PoolConfig::new(2 << 20))?.stats())
    })
    .unwrap();
    assert_eq!(default[0].communicators[0].hccl_buffer_bytes, 401 << 20);
    assert_eq!(
        default[0].budget,
        2 << 20,
        "the budget defaults to the capacity"
    );
    let snapshots = budgeted_snapshots();
    assert_eq!(snapshots[0].op_hash, snapshots[1].op_hash);
    for s in &snapshots {
        let st = &s.stats;
        assert_eq!(st.budget, 8 << 20);
        let comms: Vec<u64> = st
            .communicators
            .iter()
            .map(|c| c.hccl_buffer_bytes)
            .collect();
        assert_eq!(comms, [33 << 20, 17 << 20]);
        assert_eq!(st.hccl_buffer_bytes(), 50 << 20);
        let kv = st.tags.iter().find(|t| t.tag == "kv-cache").unwrap();
        assert_eq!((kv.bytes, kv.budget), (1 << 20, Some(2 << 20)));
        let act = st.tags.iter().find(|t| t.tag == "activations").unwrap();
        assert_eq!((act.bytes, act.blocks, act.budget), (0, 0, Some(1 << 20)));
        let weights = st.tags.iter().find(|t| t.tag == "weights").unwrap();
        assert_eq!(weights.budget, None);
        let shown = st.to_string();
        assert!(shown.contains("of budget 8.00 MiB"), "{shown}");
        assert!(shown.contains("17.00 MiB HCCL buffers"), "{shown}");

        let json = s.to_json();
        assert_eq!(&Snapshot::from_json(&json).unwrap(), s, "{json}");
        // Written before budgets and HCCL buffers were reported: those fields absent.
        let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
        strip(&mut value, &["budget", "hccl_buffer_bytes"]);
        let old = value.to_string();
        assert_ne!(old, json);
        let old = Snapshot::from_json(&old).unwrap_or_else(|e| panic!("{e}\n{old}"));
        assert_eq!(old.stats.budget, 0);
        assert!(old.stats.tags.iter().all(|t| t.budget.is_none()));
        assert_eq!(old.stats.hccl_buffer_bytes(), 0);
        assert_eq!(old.windows, s.windows);
        // A snapshot written before budgets shows none.
        assert!(!old.stats.to_string().contains("of budget"));
    }
    session.assert_clean();
}

/// Removes every key in `keys` from `value`, at every depth.
fn strip(value: &mut serde_json::Value, keys: &[&str]) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|k, _| !keys.contains(&k.as_str()));
            map.values_mut().for_each(|v| strip(v, keys));
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| strip(v, keys)),
        _ => {}
    }
}

/// The heap map shows the pool budget, each tag's budget beside its live bytes, and the HCCL
/// buffers per rank and per communicator.
#[test]
fn the_heap_map_shows_budgets_and_hccl_buffers() {
    let session = EmuSession::start();
    let html = heap_map::render(&budgeted_snapshots());
    for part in [
        "<th>budget</th>",
        "<td>8 MiB</td>",
        "1 MiB in 1 block of budget 2 MiB",
        "0 B in 0 blocks of budget 1 MiB",
        "<th>HCCL buffers</th>",
        "<td>50 MiB</td>",
        "<td>17 MiB</td>",
    ] {
        assert!(html.contains(part), "{part:?} not in the page");
    }
    session.assert_clean();
}
