//! The pool's V collectives (`all_to_all_v`, `all_gather_v`, `reduce_scatter_v`), its
//! rooted ones (`broadcast`, `reduce`) and point-to-point `send` / `recv`: results element by
//! element against the host on 2 to 4 ranks, every bad input with its typed error and nothing
//! changed, what the op hash and strict mode make of them, and missing library entries.

use symheap::raw::{Backend, Origin};
use symheap::{
    CommConfig, Error, PoolConfig, ReduceOp, SymPool, SymVec, emu, packed_displacements,
};

use crate::harness::EmuSession;

/// What the host writes outside every region: must survive every collective.
const UNTOUCHED: i64 = -7;

/// How many elements rank `from` sends rank `to` in the AlltoAllV tests: 0 to 3, unequal
/// across pairs and directions, zero for some pairs (rank 0 to itself among them).
fn pair_count(from: usize, to: usize) -> usize {
    (from * 3 + to * 5) % 4
}

/// Element `k` of what rank `from` sends rank `to`.
fn pair_value(from: usize, to: usize, k: usize) -> i64 {
    (from * 1000 + to * 100 + k) as i64
}

/// Displacements that place regions of `counts` in reverse rank order, each after a
/// one-element gap, and the buffer length that holds them: not the packed layout, so a
/// collective that ignored the displacements would be caught.
fn scattered(counts: &[usize]) -> (Vec<usize>, usize) {
    let mut displs = vec![0; counts.len()];
    let mut next = 0;
    for p in (0..counts.len()).rev() {
        displs[p] = next + 1;
        next += 1 + counts[p];
    }
    (displs, next + 1)
}

/// The per-rank counts of the AllGatherV / ReduceScatterV tests: the same on every rank.
fn shared_counts(n: usize) -> Vec<usize> {
    (0..n).map(|p| [3, 0, 2, 1][p % 4]).collect()
}

fn all_to_all_v_on(n: u32) {
    emu::launch(n, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
        let (r, n) = (comm.rank() as usize, n as usize);
        let send_counts: Vec<usize> = (0..n).map(|p| pair_count(r, p)).collect();
        let recv_counts: Vec<usize> = (0..n).map(|p| pair_count(p, r)).collect();
        let (send_displs, _) = scattered(&send_counts);
        let (recv_displs, _) = scattered(&recv_counts);
        // Buffers as long on every rank (the pool needs the same allocations everywhere):
        // long enough for any rank's layout.
        let longest = |side: fn(usize, usize) -> usize| {
            (0..n)
                .map(|q| scattered(&(0..n).map(|p| side(q, p)).collect::<Vec<_>>()).1)
                .max()
                .unwrap()
        };
        let (in_len, out_len) = (longest(pair_count), longest(|q, p| pair_count(p, q)));
        let mut host_in = vec![UNTOUCHED; in_len];
        for p in 0..n {
            for k in 0..send_counts[p] {
                host_in[send_displs[p] + k] = pair_value(r, p, k);
            }
        }
        let mut want = vec![UNTOUCHED; out_len];
        for p in 0..n {
            for k in 0..recv_counts[p] {
                want[recv_displs[p] + k] = pair_value(p, r, k);
            }
        }
        let input = SymVec::from_host(&pool, &host_in)?;
        // Twice, the second time into a buffer that already holds the answer's complement,
        // so a stale result cannot pass.
        let mut output = SymVec::from_host(&pool, &vec![UNTOUCHED; out_len])?;
        for _ in 0..2 {
            pool.all_to_all_v(
                &input,
                &send_counts,
                &send_displs,
                &mut output,
                &recv_counts,
                &recv_displs,
            )?;
            assert_eq!(output.to_host()?, want, "rank {r} of {n}");
            output.copy_from_host(&vec![UNTOUCHED; out_len])?;
        }
        // As f32, packed, with every rank sending every peer the same amount.
        let counts = vec![2; n];
        let displs = packed_displacements(&counts);
        let mine: Vec<f32> = (0..2 * n).map(|i| (r * 10 + i) as f32).collect();
        let input = SymVec::from_host(&pool, &mine)?;
        let mut output = SymVec::<f32>::zeroed(&pool, 2 * n)?;
        pool.all_to_all_v(&input, &counts, &displs, &mut output, &counts, &displs)?;
        let want: Vec<f32> = (0..n)
            .flat_map(|p| (0..2).map(move |k| (p * 10 + 2 * r + k) as f32))
            .collect();
        assert_eq!(output.to_host()?, want, "rank {r} of {n}, f32");
        pool.verify_symmetric()
    })
    .unwrap();
}

#[test]
fn all_to_all_v_matches_the_host_on_2_3_and_4_ranks() {
    let session = EmuSession::start();
    for n in [2, 3, 4] {
        all_to_all_v_on(n);
    }
    session.assert_clean();
}

fn all_gather_v_on(n: u32) {
    emu::launch(n, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
        let (r, n) = (comm.rank() as usize, n as usize);
        let counts = shared_counts(n);
        let (displs, out_len) = scattered(&counts);
        // An input as long on every rank; this rank's part is its first counts[r] elements.
        let longest = *counts.iter().max().unwrap();
        let mine: Vec<i32> = (0..longest).map(|k| (r * 100 + k) as i32).collect();
        let input = SymVec::from_host(&pool, &mine)?;
        let mut output = SymVec::from_host(&pool, &vec![UNTOUCHED as i32; out_len])?;
        pool.all_gather_v(&input, &mut output, &counts, &displs)?;
        let mut want = vec![UNTOUCHED as i32; out_len];
        for p in 0..n {
            for k in 0..counts[p] {
                want[displs[p] + k] = (p * 100 + k) as i32;
            }
        }
        assert_eq!(output.to_host()?, want, "rank {r} of {n}");
        pool.verify_symmetric()
    })
    .unwrap();
}

#[test]
fn all_gather_v_matches_the_host_on_2_3_and_4_ranks() {
    let session = EmuSession::start();
    for n in [2, 3, 4] {
        all_gather_v_on(n);
    }
    session.assert_clean();
}

fn reduce_scatter_v_on(n: u32) {
    emu::launch(n, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
        let (r, n) = (comm.rank() as usize, n as usize);
        let counts = shared_counts(n);
        // Overlapping blocks: block p starts at element p (they are only read).
        let displs: Vec<usize> = (0..n).collect();
        let len = n + 3;
        let value = |rank: usize, i: usize| (rank * 10 + i) as i64;
        let mine: Vec<i64> = (0..len).map(|i| value(r, i)).collect();
        let input = SymVec::from_host(&pool, &mine)?;
        // An output as long on every rank; this rank's block lands in its first elements.
        let longest = *counts.iter().max().unwrap();
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
            let mut output = SymVec::from_host(&pool, &vec![UNTOUCHED; longest])?;
            pool.reduce_scatter_v(&input, &counts, &displs, &mut output, op)?;
            let want: Vec<i64> = (0..longest)
                .map(|k| {
                    let column = (0..n).map(|p| value(p, displs[r] + k));
                    match op {
                        _ if k >= counts[r] => UNTOUCHED,
                        ReduceOp::Sum => column.sum(),
                        ReduceOp::Max => column.max().unwrap(),
                        _ => column.min().unwrap(),
                    }
                })
                .collect();
            assert_eq!(output.to_host()?, want, "rank {r} of {n}, {op:?}");
        }
        pool.verify_symmetric()
    })
    .unwrap();
}

#[test]
fn reduce_scatter_v_matches_the_host_on_2_3_and_4_ranks() {
    let session = EmuSession::start();
    for n in [2, 3, 4] {
        reduce_scatter_v_on(n);
    }
    session.assert_clean();
}

#[test]
fn broadcast_matches_the_host_on_2_3_and_4_ranks() {
    let session = EmuSession::start();
    for n in [2u32, 3, 4] {
        emu::launch(n, |comm| {
            let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
            let r = comm.rank();
            for root in [0, n - 1] {
                let mine: Vec<u16> = (0..7).map(|i| (r * 100 + i) as u16).collect();
                let mut data = SymVec::from_host(&pool, &mine)?;
                pool.broadcast(&mut data, root)?;
                let want: Vec<u16> = (0..7).map(|i| (root * 100 + i) as u16).collect();
                assert_eq!(data.to_host()?, want, "rank {r} of {n}, root {root}");
            }
            pool.verify_symmetric()
        })
        .unwrap();
    }
    session.assert_clean();
}

#[test]
fn reduce_matches_the_host_on_2_3_and_4_ranks() {
    let session = EmuSession::start();
    for n in [2u32, 3, 4] {
        emu::launch(n, |comm| {
            let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
            let r = comm.rank() as i64;
            let value = |rank: i64, i: i64| (rank + 1) * (i + 1);
            let mine: Vec<f64> = (0..6).map(|i| value(r, i) as f64).collect();
            let input = SymVec::from_host(&pool, &mine)?;
            for (op, root) in [
                (ReduceOp::Sum, n - 1),
                (ReduceOp::Prod, 0),
                (ReduceOp::Max, 1),
            ] {
                let mut output = SymVec::from_host(&pool, &[UNTOUCHED as f64; 6])?;
                pool.reduce(&input, &mut output, op, root)?;
                let want: Vec<f64> = if comm.rank() == root {
                    (0..6)
                        .map(|i| {
                            let column = (0..i64::from(n)).map(|p| value(p, i));
                            match op {
                                ReduceOp::Sum => column.sum::<i64>() as f64,
                                ReduceOp::Prod => column.product::<i64>() as f64,
                                _ => column.max().unwrap() as f64,
                            }
                        })
                        .collect()
                } else {
                    vec![UNTOUCHED as f64; 6]
                };
                assert_eq!(output.to_host()?, want, "rank {r} of {n}, {op:?} to {root}");
            }
            pool.verify_symmetric()
        })
        .unwrap();
    }
    session.assert_clean();
}

/// A ring: every rank sends its buffer to the next and receives the previous one's. Even
/// ranks send first, odd ranks receive first, so no cycle of waits forms.
#[test]
fn send_and_recv_match_the_host_on_2_3_and_4_ranks() {
    let session = EmuSession::start();
    for n in [2u32, 3, 4] {
        emu::launch(n, |comm| {
            let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
            let r = comm.rank();
            let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
            let mine = SymVec::from_host(&pool, &[(r * 11) as i8; 9])?;
            let mut got = SymVec::<i8>::zeroed(&pool, 9)?;
            for _ in 0..3 {
                if r % 2 == 0 {
                    pool.send(&mine, next)?;
                    pool.recv(&mut got, prev)?;
                } else {
                    pool.recv(&mut got, prev)?;
                    pool.send(&mine, next)?;
                }
                assert_eq!(got.to_host()?, [(prev * 11) as i8; 9], "rank {r} of {n}");
                got.copy_from_host(&[0; 9])?;
            }
            pool.verify_symmetric()
        })
        .unwrap();
    }
    session.assert_clean();
}

/// Only two of three ranks take part in a transfer: it must not count in the op hash, nor
/// run strict mode's check (a collective the third rank never joins).
#[test]
fn point_to_point_leaves_the_op_hash_and_strict_mode_alone() {
    let session = EmuSession::start();
    let hashes = emu::launch(3, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20).strict_symmetry(true))?;
        let mut v = SymVec::from_host(&pool, &[comm.rank() as f32; 5])?;
        let before = pool.op_hash();
        match comm.rank() {
            0 => pool.send(&v, 1)?,
            1 => pool.recv(&mut v, 0)?,
            _ => {}
        }
        assert_eq!(pool.op_hash(), before);
        // The next collective's strict check passes on every rank.
        pool.all_reduce_in_place(&mut v, ReduceOp::Sum)?;
        assert_eq!(v.to_host()?, [2.0; 5]); // 0 + 0 + 2
        pool.verify_symmetric()?;
        Ok(pool.op_hash())
    })
    .unwrap();
    assert!(hashes.iter().all(|&h| h == hashes[0]));
    session.assert_clean();
}

/// The V collectives enter the op hash (each one differently), and the arrays that must
/// be the same on every rank are part of it: a rank that passes other ones is caught in
/// strict mode before anything runs.
#[test]
fn vector_collectives_enter_the_op_hash_and_strict_mode_checks_their_shared_arrays() {
    let session = EmuSession::start();
    let outcomes = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20).strict_symmetry(true))?;
        let r = comm.rank() as usize;
        let input = SymVec::from_host(&pool, &[1u32; 2])?;
        let mut output = SymVec::<u32>::zeroed(&pool, 8)?;
        // Rank 1 places the regions elsewhere: valid locally, but not the same arrays.
        let displs = if r == 0 { [0, 2] } else { [4, 6] };
        let got = pool.all_gather_v(&input, &mut output, &[2, 2], &displs);
        // Nothing ran: the output is still zero everywhere.
        assert_eq!(output.to_host()?, [0; 8]);
        Ok(got.err())
    })
    .unwrap();
    for outcome in outcomes {
        assert!(matches!(outcome, Some(Error::Asymmetric(_))), "{outcome:?}");
    }
    // Broadcasts from different roots hash differently.
    let hashes = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
        let mut output = SymVec::<u32>::zeroed(&pool, 4)?;
        let mut seen = vec![pool.op_hash()];
        pool.broadcast(&mut output, 0)?;
        seen.push(pool.op_hash());
        pool.broadcast(&mut output, 1)?;
        seen.push(pool.op_hash());
        pool.synchronize()?;
        Ok(seen)
    })
    .unwrap();
    assert_eq!(hashes[0], hashes[1]);
    let seen = &hashes[0];
    assert!(seen[0] != seen[1] && seen[1] != seen[2], "{seen:x?}");
    session.assert_clean();
}

/// Each V collective moves the op hash, differently by kind and by the arrays every rank
/// passes alike, and equally on every rank (AlltoAllV's per-rank arrays are not folded).
#[test]
fn vector_collectives_hash_by_kind_and_shared_arrays() {
    let session = EmuSession::start();
    let hashes = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(8 << 20))?;
        let r = comm.rank() as usize;
        let input = SymVec::from_host(&pool, &[1u32; 2])?;
        let mut output = SymVec::<u32>::zeroed(&pool, 8)?;
        let mut two = SymVec::<u32>::zeroed(&pool, 2)?;
        let mut three = SymVec::<u32>::zeroed(&pool, 3)?;
        let mut seen = vec![pool.op_hash()];
        for displs in [[0, 2], [4, 6]] {
            pool.all_gather_v(&input, &mut output, &[2, 2], &displs)?;
            seen.push(pool.op_hash());
        }
        pool.reduce_scatter_v(&output, &[2, 2], &[0, 2], &mut two, ReduceOp::Sum)?;
        seen.push(pool.op_hash());
        // Rank r sends r + 1 elements to each peer: per-rank arrays, not folded.
        let send = [r + 1; 2];
        let recv = [1, 2];
        pool.all_to_all_v(&output, &send, &[0, 4], &mut three, &recv, &[0, 1])?;
        seen.push(pool.op_hash());
        pool.synchronize()?;
        Ok(seen)
    })
    .unwrap();
    assert_eq!(hashes[0], hashes[1], "equal on every rank");
    let seen = &hashes[0];
    for i in 1..seen.len() {
        assert!(!seen[..i].contains(&seen[i]), "{seen:x?}");
    }
    session.assert_clean();
}

/// Every bad argument of the new calls, each with its typed error naming the fault; none
/// changes the stats or the op hash, and a collective still lines up afterwards.
#[test]
fn bad_vector_inputs_get_typed_errors_and_change_nothing() {
    type Case<'a> = (&'a str, &'a str, Box<dyn Fn() -> symheap::Result<()> + 'a>);
    let session = EmuSession::start();
    let counts = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let other = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let me = comm.rank() as usize;
        let four = SymVec::<f32>::zeroed(&pool, 4)?;
        let short = std::cell::RefCell::new(SymVec::<f32>::zeroed(&pool, 2)?);
        // This rank's part is 3 elements, its peer's 1: valid regions of `four`.
        let (mut mine_big, big_displs) = ([1usize, 1], if me == 0 { [0, 3] } else { [0, 1] });
        mine_big[me] = 3;
        let out = std::cell::RefCell::new(SymVec::<f32>::zeroed(&pool, 4)?);
        let foreign = std::cell::RefCell::new(SymVec::<f32>::zeroed(&other, 4)?);
        let (two, packed) = ([2usize, 2], [0usize, 2]);
        // Rank r sends itself 2 elements, and receives 2 from itself: valid on every rank.
        let a2av = |sc: &[usize], sd: &[usize], rc: &[usize], rd: &[usize]| {
            pool.all_to_all_v(&four, sc, sd, &mut *out.borrow_mut(), rc, rd)
        };
        let mut own_mismatch = [2usize, 2];
        own_mismatch[me] = 1;
        let sum = ReduceOp::Sum;
        let cases: Vec<Case> = vec![
            (
                "all_to_all_v, short send counts",
                "send counts has 1 entries",
                Box::new(|| a2av(&[4], &packed, &two, &packed)),
            ),
            (
                "all_to_all_v, long send displacements",
                "send displacements has 3 entries",
                Box::new(|| a2av(&two, &[0, 2, 4], &two, &packed)),
            ),
            (
                "all_to_all_v, short receive counts",
                "receive counts has 1 entries",
                Box::new(|| a2av(&two, &packed, &[2], &packed)),
            ),
            (
                "all_to_all_v, short receive displacements",
                "receive displacements has 0 entries",
                Box::new(|| a2av(&two, &packed, &two, &[])),
            ),
            (
                "all_to_all_v, send region past the input",
                "send region of rank 1 is elements 3..5, past the 4",
                Box::new(|| a2av(&two, &[0, 3], &two, &packed)),
            ),
            (
                "all_to_all_v, receive region past the output",
                "receive region of rank 0 is elements 4..6, past the 4",
                Box::new(|| a2av(&two, &packed, &two, &[4, 0])),
            ),
            (
                "all_to_all_v, overflowing displacement",
                "overflows",
                Box::new(|| a2av(&two, &[0, usize::MAX], &two, &packed)),
            ),
            (
                "all_to_all_v, overlapping receive regions",
                "receive regions of ranks 0 (0..2) and 1 (1..3) overlap",
                Box::new(|| a2av(&two, &packed, &two, &[0, 1])),
            ),
            (
                "all_to_all_v, own send and receive counts differ",
                "sends itself",
                Box::new(|| a2av(&own_mismatch, &packed, &two, &packed)),
            ),
            (
                "all_to_all_v, foreign output",
                "another pool",
                Box::new(|| {
                    pool.all_to_all_v(
                        &four,
                        &two,
                        &packed,
                        &mut *foreign.borrow_mut(),
                        &two,
                        &packed,
                    )
                }),
            ),
            (
                "all_gather_v, short counts",
                "receive counts has 1 entries",
                Box::new(|| pool.all_gather_v(&four, &mut *out.borrow_mut(), &[4], &packed)),
            ),
            (
                "all_gather_v, region past the output",
                "past the 4",
                Box::new(|| pool.all_gather_v(&four, &mut *out.borrow_mut(), &[4, 4], &[0, 4])),
            ),
            (
                "all_gather_v, overlapping regions",
                "overlap",
                Box::new(|| pool.all_gather_v(&four, &mut *out.borrow_mut(), &two, &[1, 0])),
            ),
            (
                "all_gather_v, input shorter than its own count",
                "input has 2 elements, fewer than this rank's recv_counts",
                Box::new(|| {
                    pool.all_gather_v(
                        &*short.borrow(),
                        &mut *out.borrow_mut(),
                        &mine_big,
                        &big_displs,
                    )
                }),
            ),
            (
                "all_gather_v, foreign input",
                "another pool",
                Box::new(|| {
                    pool.all_gather_v(&*foreign.borrow(), &mut *out.borrow_mut(), &two, &packed)
                }),
            ),
            (
                "reduce_scatter_v, long displacements",
                "send displacements has 3 entries",
                Box::new(|| {
                    pool.reduce_scatter_v(&four, &two, &[0, 1, 2], &mut *out.borrow_mut(), sum)
                }),
            ),
            (
                "reduce_scatter_v, block past the input",
                "send region of rank 1 is elements 3..5",
                Box::new(|| {
                    pool.reduce_scatter_v(&four, &two, &[0, 3], &mut *out.borrow_mut(), sum)
                }),
            ),
            (
                "reduce_scatter_v, overflowing count",
                "overflows",
                Box::new(|| {
                    pool.reduce_scatter_v(
                        &four,
                        &[usize::MAX, 4],
                        &[1, 0],
                        &mut *out.borrow_mut(),
                        sum,
                    )
                }),
            ),
            (
                "reduce_scatter_v, output shorter than its own count",
                "output has 2 elements, fewer than this rank's send_counts",
                Box::new(|| {
                    pool.reduce_scatter_v(&four, &[3, 3], &[0, 1], &mut *short.borrow_mut(), sum)
                }),
            ),
            (
                "reduce_scatter_v, foreign output",
                "another pool",
                Box::new(|| {
                    pool.reduce_scatter_v(&four, &two, &packed, &mut *foreign.borrow_mut(), sum)
                }),
            ),
            (
                "broadcast, root out of range",
                "root 2 is not a rank",
                Box::new(|| pool.broadcast(&mut *out.borrow_mut(), 2)),
            ),
            (
                "broadcast, root u32::MAX",
                "is not a rank",
                Box::new(|| pool.broadcast(&mut *out.borrow_mut(), u32::MAX)),
            ),
            (
                "broadcast, foreign",
                "another pool",
                Box::new(|| pool.broadcast(&mut *foreign.borrow_mut(), 0)),
            ),
            (
                "reduce, root out of range",
                "root 5 is not a rank",
                Box::new(|| pool.reduce(&four, &mut *out.borrow_mut(), sum, 5)),
            ),
            (
                "reduce, lengths differ",
                "output has 4 elements, expected 2",
                Box::new(|| pool.reduce(&*short.borrow(), &mut *out.borrow_mut(), sum, 0)),
            ),
            (
                "reduce, foreign input",
                "another pool",
                Box::new(|| pool.reduce(&*foreign.borrow(), &mut *out.borrow_mut(), sum, 0)),
            ),
            (
                "send, peer out of range",
                "peer 2 is not a rank",
                Box::new(|| pool.send(&four, 2)),
            ),
            (
                "send, to itself",
                "is this rank",
                Box::new(|| pool.send(&four, me as u32)),
            ),
            (
                "send, foreign",
                "another pool",
                Box::new(|| pool.send(&*foreign.borrow(), 1 - me as u32)),
            ),
            (
                "recv, peer out of range",
                "peer 9 is not a rank",
                Box::new(|| pool.recv(&mut *out.borrow_mut(), 9)),
            ),
            (
                "recv, from itself",
                "is this rank",
                Box::new(|| pool.recv(&mut *out.borrow_mut(), me as u32)),
            ),
        ];
        for (what, says, call) in &cases {
            let (stats, hash) = (pool.stats(), pool.op_hash());
            let got = call();
            assert!(
                matches!(&got, Err(Error::InvalidArgument(m)) if m.contains(says)),
                "{what}: {got:?}"
            );
            assert_eq!(pool.stats(), stats, "{what}");
            assert_eq!(pool.op_hash(), hash, "{what}");
        }
        // Nothing above reached the stream: a collective still lines up on both ranks.
        pool.all_reduce_in_place(&mut *out.borrow_mut(), sum)?;
        pool.verify_symmetric()?;
        Ok(cases.len())
    })
    .unwrap();
    println!("{} bad vector-collective inputs", counts[0]);
    session.assert_clean();
}

/// A library without the optional entries (an older CANN): every new call is
/// `Error::Unsupported` naming its C function, on the pool and on the communicator, and
/// changes nothing.
#[test]
fn missing_library_entries_are_unsupported_and_change_nothing() {
    let session = EmuSession::start();
    let mut hccl = emu::hccl_api();
    hccl.HcclAllGatherV = None;
    hccl.HcclReduceScatterV = None;
    hccl.HcclAlltoAllV = None;
    hccl.HcclReduce = None;
    hccl.HcclScatter = None;
    hccl.HcclSend = None;
    hccl.HcclRecv = None;
    hccl.HcclBatchSendRecv = None;
    let origin = Origin {
        backend: Backend::InProcess {
            name: "emulator without the V collectives",
        },
        host_addressable: true,
        keep_alive: Box::new(()),
    };
    // SAFETY: the emulator's functions implement the C prototypes and live forever.
    let rt = unsafe { symheap::raw::from_tables(hccl, emu::acl_api(), origin) }.unwrap();
    emu::launch_with(&rt, 2, &CommConfig::new(), |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let peer = 1 - comm.rank();
        let input = SymVec::<f32>::zeroed(&pool, 2)?;
        let mut output = SymVec::<f32>::zeroed(&pool, 2)?;
        let (ones, packed) = ([1usize, 1], [0usize, 1]);
        let one = SymVec::<f32>::zeroed(&pool, 1)?;
        let mut one_out = SymVec::<f32>::zeroed(&pool, 1)?;
        let (stats, hash) = (pool.stats(), pool.op_hash());
        let got = [
            (
                "HcclAlltoAllV",
                pool.all_to_all_v(&input, &ones, &packed, &mut output, &ones, &packed),
            ),
            (
                "HcclAllGatherV",
                pool.all_gather_v(&one, &mut output, &ones, &packed),
            ),
            (
                "HcclReduceScatterV",
                pool.reduce_scatter_v(&input, &ones, &packed, &mut one_out, ReduceOp::Sum),
            ),
            (
                "HcclReduce",
                pool.reduce(&input, &mut output, ReduceOp::Sum, 0),
            ),
            ("HcclSend", pool.send(&input, peer)),
            ("HcclRecv", pool.recv(&mut output, peer)),
        ];
        for (call, result) in got {
            assert!(
                matches!(result, Err(Error::Unsupported { call: c }) if c == call),
                "{call}: {result:?}"
            );
        }
        assert_eq!(pool.stats(), stats);
        assert_eq!(pool.op_hash(), hash, "an unsupported call is not recorded");
        // The communicator's wrappers say the same.
        let stream = symheap::Stream::new(comm.runtime())?;
        let ptr = input.device_ptr();
        let dt = <f32 as symheap::Element>::DATA_TYPE.into();
        // SAFETY: never reaches a C function: the entries are missing.
        let raw = unsafe {
            [
                (
                    "HcclScatter",
                    comm.raw().scatter(ptr, ptr, 1, dt, 0, &stream),
                ),
                (
                    "HcclBatchSendRecv",
                    comm.raw().batch_send_recv(&[], &stream),
                ),
                ("HcclSend", comm.raw().send(ptr, 1, dt, peer, &stream)),
            ]
        };
        for (call, result) in raw {
            assert!(
                matches!(result, Err(Error::Unsupported { call: c }) if c == call),
                "{call}: {result:?}"
            );
        }
        // A supported collective still lines up.
        pool.broadcast(&mut output, 0)?;
        pool.verify_symmetric()
    })
    .unwrap();
    session.assert_clean();
}

/// Vector collectives on pooled buffers stage, as HCCL stages them (only the pool's own
/// warm-up AllReduce is zero-copy), and with deferred reuse a buffer used by a queued vector
/// collective is not reused before the pool synchronises.
#[test]
fn vector_collectives_stage_as_hccl_does_and_defer_reuse() {
    let session = EmuSession::start();
    let before = emu::testing::counters();
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20).deferred_reuse(true))?;
        let (two, packed) = ([2usize, 2], [0usize, 2]);
        let input = SymVec::from_host(&pool, &[1.0f32; 4])?;
        let mut output = SymVec::<f32>::zeroed(&pool, 4)?;
        let offset = output.offset();
        pool.all_to_all_v(&input, &two, &packed, &mut output, &two, &packed)?;
        let mut gathered = SymVec::<f32>::zeroed(&pool, 4)?;
        let half = SymVec::from_host(&pool, &[2.0f32; 2])?;
        pool.all_gather_v(&half, &mut gathered, &two, &packed)?;
        let mut reduced = SymVec::<f32>::zeroed(&pool, 2)?;
        pool.reduce_scatter_v(&input, &two, &packed, &mut reduced, ReduceOp::Sum)?;
        drop(output); // the AlltoAllV may still be running
        assert_eq!(pool.stats().pending_frees, 1);
        let again = SymVec::<f32>::zeroed(&pool, 4)?;
        assert_ne!(
            again.offset(),
            offset,
            "reused while queued work may touch it"
        );
        pool.synchronize()?;
        assert_eq!(pool.stats().pending_frees, 0);
        assert_eq!(gathered.to_host()?, [2.0; 4]);
        assert_eq!(reduced.to_host()?, [2.0; 2]);
        Ok(())
    })
    .unwrap();
    let after = emu::testing::counters();
    // Per rank: the pool's warm-up zero-copy; the agreements on its window's memory and
    // registration and the three V collectives staged.
    assert_eq!(
        after.symmetric_collectives - before.symmetric_collectives,
        2
    );
    assert_eq!(after.staged_collectives - before.staged_collectives, 2 * 5);
    session.assert_clean();
}

/// A rank's AlltoAllV send count that its peer does not expect cannot be seen by one rank
/// before the call (it is not in the op hash either): the library reports it when the
/// exchange runs, on every rank, and the pools refuse further work.
#[test]
fn a_mismatched_all_to_all_v_pair_fails_every_rank_and_poisons_the_pools() {
    let session = EmuSession::start();
    let outcomes = emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let input = SymVec::from_host(&pool, &[1.0f32; 4])?;
        let mut output = SymVec::<f32>::zeroed(&pool, 4)?;
        // Rank 0 sends rank 1 two elements; rank 1 expects one.
        let (send, recv) = if comm.rank() == 0 {
            ([1, 2], [1, 1])
        } else {
            ([1, 1], [1, 1])
        };
        pool.all_to_all_v(&input, &send, &[0, 1], &mut output, &recv, &[0, 1])?;
        let failed = pool.synchronize().unwrap_err();
        let after = pool.broadcast(&mut output, 0).unwrap_err();
        Ok((failed, after))
    })
    .unwrap();
    for (failed, after) in outcomes {
        assert!(
            matches!(
                &failed,
                Error::Collective {
                    code: symheap::sys::HcclResult::HCCL_E_PARA,
                    ..
                }
            ),
            "{failed:?}"
        );
        assert!(matches!(after, Error::Poisoned(_)), "{after:?}");
    }
    session.assert_clean();
}

/// A wrong length is blamed on the buffer that has it: for a reduce-scatter the input (whose
/// length divides by the ranks) sets the output's length, and an input that does not divide
/// is the input's fault; an all-gather's input sets its output's; an all-to-all's input must
/// divide by the ranks.
#[test]
fn a_wrong_length_blames_the_buffer_that_has_it() {
    let session = EmuSession::start();
    emu::launch(2, |comm| {
        let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
        let eight = SymVec::<f32>::zeroed(&pool, 8)?;
        let seven = SymVec::<f32>::zeroed(&pool, 7)?;
        let mut three = SymVec::<f32>::zeroed(&pool, 3)?;
        let mut sixteen = SymVec::<f32>::zeroed(&pool, 16)?;
        let mut seven_out = SymVec::<f32>::zeroed(&pool, 7)?;
        let message = |r: symheap::Result<()>| match r {
            Err(symheap::Error::InvalidArgument(why)) => why,
            other => panic!("expected InvalidArgument, got {other:?}"),
        };
        let sum = ReduceOp::Sum;
        // 8 elements over 2 ranks: the output must hold 4; it has 3.
        let why = message(pool.reduce_scatter(&eight, &mut three, sum));
        assert_eq!(
            why,
            "reduce_scatter: output has 3 elements, expected 4 (the input's 8 over 2 ranks)"
        );
        // 7 elements do not divide over 2 ranks, whatever the output.
        let why = message(pool.reduce_scatter(&seven, &mut three, sum));
        assert_eq!(
            why,
            "reduce_scatter: input has 7 elements, not a multiple of the 2 ranks"
        );
        let why = message(pool.all_gather(&eight, &mut seven_out));
        assert_eq!(
            why,
            "all_gather: output has 7 elements, expected 16 (2 ranks x the input's 8)"
        );
        let why = message(pool.all_to_all(&seven, &mut seven_out));
        assert_eq!(
            why,
            "all_to_all: input has 7 elements, not a multiple of the 2 ranks"
        );
        let why = message(pool.all_to_all(&eight, &mut sixteen));
        assert_eq!(
            why,
            "all_to_all: output has 16 elements, expected 8 (the input's)"
        );
        Ok(())
    })
    .unwrap();
    session.assert_clean();
}
