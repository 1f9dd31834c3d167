//! The V collectives (and the rooted Reduce / Scatter's special cases) through the C entry
//! points, with threads as ranks; and the array checks on their own.

use std::ffi::c_void;
use std::ptr::{null, null_mut};

use super::*;
use crate::hccl::collective::tests::{FAILED, OPS, PARA, PTR, TYPES, encode, fold, size_of, value};
use crate::sys::*;
use crate::testutil::{
    DevBuf, Rank, acl, assert_clean, deregister, hccl, hok, ok, recent, register, run_ranks,
    test_config,
};
use crate::{GRANULARITY as G, test_lock};
use symheap_types::Collective;

const F32: HcclDataType = HcclDataType::HCCL_DATA_TYPE_FP32;
const I32: HcclDataType = HcclDataType::HCCL_DATA_TYPE_INT32;
const SUM: HcclReduceOp = HcclReduceOp::HCCL_REDUCE_SUM;
const OK: HcclResult = HcclResult::HCCL_SUCCESS;

/// A V collective's arguments as one rank passes them (unused arrays empty).
#[derive(Clone, Default)]
struct Args {
    send_count: u64,
    recv_count: u64,
    /// AllGatherV's recvCounts / recvDispls, ReduceScatterV's sendCounts / sendDispls,
    /// AlltoAllV's sendCounts / sdispls.
    counts: Vec<u64>,
    displs: Vec<u64>,
    /// AlltoAllV's recvCounts / rdispls (for AlltoAllVC, what the matrix implies).
    recv_counts: Vec<u64>,
    recv_displs: Vec<u64>,
    /// AlltoAllVC's sendCountMatrix.
    matrix: Vec<u64>,
}

/// Calls V collective `kind` through the HCCL table with `a`'s arrays.
fn call_v(
    r: &Rank,
    kind: Collective,
    send: *mut c_void,
    recv: *mut c_void,
    a: &Args,
    t: HcclDataType,
    op: HcclReduceOp,
) -> HcclResult {
    let h = hccl();
    let p = |v: &Vec<u64>| v.as_ptr().cast::<c_void>();
    // SAFETY: the arrays live across the call; the emulator validates the rest.
    unsafe {
        match kind {
            Collective::AllGatherV => (h.HcclAllGatherV.unwrap())(
                send,
                a.send_count,
                recv,
                p(&a.counts),
                p(&a.displs),
                t,
                r.comm,
                r.stream,
            ),
            Collective::ReduceScatterV => (h.HcclReduceScatterV.unwrap())(
                send,
                p(&a.counts),
                p(&a.displs),
                recv,
                a.recv_count,
                t,
                op,
                r.comm,
                r.stream,
            ),
            Collective::AlltoAllVC => {
                (h.HcclAlltoAllVC.unwrap())(send, p(&a.matrix), t, recv, t, r.comm, r.stream)
            }
            _ => (h.HcclAlltoAllV.unwrap())(
                send,
                p(&a.counts),
                p(&a.displs),
                t,
                recv,
                p(&a.recv_counts),
                p(&a.recv_displs),
                t,
                r.comm,
                r.stream,
            ),
        }
    }
}

/// Displacements of blocks of `counts` laid out in reverse rank order with `gap` elements
/// between them (so displacements are neither sorted nor contiguous), and the extent.
fn reversed(counts: &[u64], gap: u64) -> (Vec<u64>, u64) {
    let mut displs = vec![0; counts.len()];
    let mut at = 0;
    for k in (0..counts.len()).rev() {
        displs[k] = at;
        at += counts[k] + gap;
    }
    (displs, at)
}

/// Elements rank `k` sends rank `j` in the imbalanced tests: zeros included, scaled by `unit`.
fn pair(k: usize, j: usize, unit: u64) -> u64 {
    ((k * 3 + j * 5 + 1) % 4) as u64 * unit
}

/// Rank `k`'s AllGatherV contribution / ReduceScatterV's block for rank `k`: rank 2 has none.
fn single(k: usize, unit: u64) -> u64 {
    ((k * 7 + 2) % 4) as u64 * unit
}

/// One rank's arguments for `kind` on `n` ranks, blocks of about `unit` elements, and the
/// number of elements its input and output span.
fn args_for(kind: Collective, n: usize, me: usize, unit: u64) -> (Args, usize, usize) {
    match kind {
        Collective::AllGatherV => {
            let counts: Vec<u64> = (0..n).map(|k| single(k, unit)).collect();
            let (displs, extent) = reversed(&counts, 5);
            let a = Args {
                send_count: counts[me],
                counts,
                displs,
                ..Args::default()
            };
            (a.clone(), a.send_count as usize, extent as usize)
        }
        Collective::ReduceScatterV => {
            let counts: Vec<u64> = (0..n).map(|k| single(k, unit)).collect();
            let (displs, extent) = reversed(&counts, 3);
            let a = Args {
                recv_count: counts[me],
                counts,
                displs,
                ..Args::default()
            };
            (a.clone(), extent as usize, a.recv_count as usize)
        }
        Collective::AlltoAllVC => {
            // Packed in rank order on both sides, as the matrix form lays them out.
            let prefix = |counts: &[u64]| -> Vec<u64> {
                (0..counts.len())
                    .map(|k| counts[..k].iter().sum())
                    .collect()
            };
            let counts: Vec<u64> = (0..n).map(|j| pair(me, j, unit)).collect();
            let recv_counts: Vec<u64> = (0..n).map(|k| pair(k, me, unit)).collect();
            let a = Args {
                displs: prefix(&counts),
                recv_displs: prefix(&recv_counts),
                matrix: (0..n * n).map(|i| pair(i / n, i % n, unit)).collect(),
                counts,
                recv_counts,
                ..Args::default()
            };
            let extents = (
                a.counts.iter().sum::<u64>(),
                a.recv_counts.iter().sum::<u64>(),
            );
            (a, extents.0 as usize, extents.1 as usize)
        }
        _ => {
            let counts: Vec<u64> = (0..n).map(|j| pair(me, j, unit)).collect();
            let (displs, in_extent) = reversed(&counts, 3);
            let recv_counts: Vec<u64> = (0..n).map(|k| pair(k, me, unit)).collect();
            // Forward order, 2 elements apart.
            let recv_displs: Vec<u64> = (0..n)
                .map(|k| recv_counts[..k].iter().map(|c| c + 2).sum())
                .collect();
            let out_extent = recv_counts.iter().map(|c| c + 2).sum::<u64>();
            let a = Args {
                counts,
                displs,
                recv_counts,
                recv_displs,
                ..Args::default()
            };
            (a, in_extent as usize, out_extent as usize)
        }
    }
}

/// Runs `kind` with `t` / `op` on every rank with the imbalanced arguments of [`args_for`]
/// (input at 0 of `buf`, output at `out`), and checks every element of the output extent
/// against the host reference, gaps (left as 0xEE) included.
#[allow(clippy::too_many_arguments)]
fn check_v(
    r: &Rank,
    buf: &DevBuf,
    out: usize,
    kind: Collective,
    t: HcclDataType,
    op: HcclReduceOp,
    unit: u64,
) {
    let (n, me) = (r.n as usize, r.rank as usize);
    let (a, in_elems, out_elems) = args_for(kind, n, me, unit);
    let es = size_of(t);
    buf.write(0, &encode(t, (0..in_elems).map(|i| value(t, me as u32, i))));
    let len = (out_elems + 8) * es;
    // SAFETY: device range validated by the emulator.
    ok(unsafe { (acl().aclrtMemset)(buf.at(out), len, 0xEE, len) });
    hok(call_v(r, kind, buf.ptr, buf.at(out), &a, t, op));
    ok(r.sync());
    // The expected output, element by element: None where nothing is written.
    let mut want: Vec<Option<f64>> = vec![None; out_elems + 8];
    match kind {
        Collective::AllGatherV => {
            for k in 0..n {
                for i in 0..a.counts[k] as usize {
                    want[a.displs[k] as usize + i] = Some(value(t, k as u32, i));
                }
            }
        }
        Collective::ReduceScatterV => {
            let at = a.displs[me] as usize;
            for (i, w) in want.iter_mut().take(a.recv_count as usize).enumerate() {
                *w = Some(fold(op, (0..r.n).map(|k| value(t, k, at + i))));
            }
        }
        _ => {
            for k in 0..n {
                // Where rank k's block for this rank starts in rank k's input.
                let (theirs, _, _) = args_for(kind, n, k, unit);
                let from = theirs.displs[me] as usize;
                for i in 0..a.recv_counts[k] as usize {
                    let v = value(t, k as u32, from + i);
                    want[a.recv_displs[k] as usize + i] = Some(v);
                }
            }
        }
    }
    let got = buf.read::<u8>(out, len);
    for (i, w) in want.iter().enumerate() {
        let expected = match w {
            Some(v) => encode(t, [*v]),
            None => vec![0xEE; es],
        };
        assert_eq!(
            &got[i * es..(i + 1) * es],
            &expected[..],
            "{} type {} op {} rank {me} of {n}: element {i}",
            kind.c_name(),
            t.0,
            op.0
        );
    }
}

const KINDS: [Collective; 4] = [
    Collective::AllGatherV,
    Collective::ReduceScatterV,
    Collective::AlltoAllV,
    Collective::AlltoAllVC,
];

/// Every V collective, type and op, with imbalanced counts (zeros included) and scattered
/// displacements, on 1, 2, 3 and 5 ranks, on plain and registered buffers (both stage).
#[test]
fn v_collectives_match_the_host_reference() {
    let _g = test_lock();
    for n in [1u32, 2, 3, 5] {
        for symmetric in [false, true] {
            let runs = crate::testing::counters().symmetric_collectives;
            let done = run_ranks(n, &test_config(), |r| {
                let buf = DevBuf::new(r.rank, 2 * G);
                let win = symmetric.then(|| register(r, &buf));
                let mut done = 0u64;
                for t in TYPES {
                    for kind in KINDS {
                        let ops: &[HcclReduceOp] = match kind {
                            Collective::ReduceScatterV => &OPS,
                            _ => &[SUM],
                        };
                        for &op in ops {
                            check_v(r, &buf, G, kind, t, op, 37);
                            done += 1;
                        }
                    }
                }
                if let Some(w) = win {
                    deregister(w);
                }
                buf.free();
                done
            });
            let took = crate::testing::counters().symmetric_collectives - runs;
            // HCCL uses windows for none of them, registered or not.
            assert_eq!(took, 0, "symmetric path on {n} ranks");
            assert!(done.iter().all(|&d| d > 0));
        }
    }
    assert_clean();
}

/// Imbalanced data far larger than a 1 MiB staging buffer goes through it in rounds, the same
/// number on every rank although some ranks have nothing to move in most of them.
#[test]
fn v_collectives_chunk_through_a_small_staging_buffer() {
    let _g = test_lock();
    let mut cfg = test_config();
    cfg.hcclBufferSize = 1;
    run_ranks(3, &cfg, |r| {
        let buf = DevBuf::new(r.rank, 8 * G);
        let out = 4 * G;
        check_v(r, &buf, out, Collective::AllGatherV, I32, SUM, 130_001);
        let max = HcclReduceOp::HCCL_REDUCE_MAX;
        check_v(r, &buf, out, Collective::ReduceScatterV, I32, max, 60_013);
        check_v(r, &buf, out, Collective::AlltoAllV, I32, SUM, 60_017);
        buf.free();
    });
    assert_clean();
}

/// 16 ranks (as many as the emulator has devices by default): the arrays (2n or 3n words, 28
/// to a step) take two steps on the board.
#[test]
fn v_collectives_exchange_arrays_in_several_steps() {
    let _g = test_lock();
    let mut cfg = test_config();
    cfg.hcclBufferSize = 1;
    run_ranks(16, &cfg, |r| {
        let buf = DevBuf::new(r.rank, 2 * G);
        for kind in KINDS {
            check_v(r, &buf, G, kind, F32, SUM, 9);
        }
        buf.free();
    });
    assert_clean();
}

/// A rank whose AlltoAllV arrays are all zero still meets its peers (they would time out
/// otherwise), on both paths.
#[test]
fn an_alltoallv_rank_with_nothing_to_move_still_takes_part() {
    let _g = test_lock();
    for symmetric in [false, true] {
        run_ranks(3, &test_config(), |r| {
            let buf = DevBuf::new(r.rank, 2 * G);
            let win = symmetric.then(|| register(r, &buf));
            // Ranks 0 and 1 swap 4 elements; rank 2 neither sends nor receives.
            let me = r.rank as usize;
            let mut counts = vec![0u64; 3];
            if me < 2 {
                counts[1 - me] = 4;
            }
            let a = Args {
                counts: counts.clone(),
                displs: vec![0; 3],
                recv_counts: counts,
                recv_displs: vec![0; 3],
                ..Args::default()
            };
            buf.write(0, &[me as f32 + 1.0; 4]);
            buf.write(G, &[0f32; 4]);
            hok(call_v(
                r,
                Collective::AlltoAllV,
                buf.ptr,
                buf.at(G),
                &a,
                F32,
                SUM,
            ));
            ok(r.sync());
            let want = match me {
                0 => 2.0,
                1 => 1.0,
                _ => 0.0,
            };
            assert_eq!(buf.read::<f32>(G, 4), vec![want; 4]);
            if let Some(w) = win {
                deregister(w);
            }
            buf.free();
        });
    }
    assert_clean();
}

/// Arrays that must match across ranks but do not fail on every rank, naming the difference;
/// the communicator works afterwards.
#[test]
fn mismatched_arrays_fail_on_every_rank() {
    let _g = test_lock();
    let msgs = run_ranks(3, &test_config(), |r| {
        let buf = DevBuf::new(r.rank, 2 * G);
        let me = r.rank as usize;
        let run = |kind, a: &Args| {
            hok(call_v(r, kind, buf.ptr, buf.at(G), a, F32, SUM));
            assert_eq!(r.sync(), FAILED);
            recent()
        };
        // AllGatherV: rank 1 puts rank 2's block elsewhere.
        let mut ag = Args {
            send_count: 4,
            counts: vec![4; 3],
            displs: vec![0, 4, 8],
            ..Args::default()
        };
        if me == 1 {
            ag.displs[2] = 12;
        }
        let first = run(Collective::AllGatherV, &ag);
        // ReduceScatterV: rank 2 gives rank 0 a different count (its own entry is consistent).
        let mut rs = Args {
            recv_count: 4,
            counts: vec![4; 3],
            displs: vec![0, 4, 8],
            ..Args::default()
        };
        if me == 2 {
            rs.counts[0] = 3;
        }
        let second = run(Collective::ReduceScatterV, &rs);
        // AlltoAllV: rank 0 sends rank 2 five elements, rank 2 expects four.
        let mut counts = vec![4u64; 3];
        if me == 0 {
            counts[2] = 5;
        }
        let a2a = Args {
            counts,
            displs: vec![0, 8, 16],
            recv_counts: vec![4; 3],
            recv_displs: vec![0, 8, 16],
            ..Args::default()
        };
        let third = run(Collective::AlltoAllV, &a2a);
        // Still usable.
        check_v(r, &buf, G, Collective::AlltoAllV, F32, SUM, 3);
        buf.free();
        (first, second, third)
    });
    for (first, second, third) in msgs {
        assert!(
            first.contains("HcclAllGatherV needs the same recvCounts and recvDispls")
                && first.contains("rank 0 has recvDispls[2] = 8, rank 1 has recvDispls[2] = 12"),
            "{first}"
        );
        assert!(
            second.contains("rank 0 has sendCounts[0] = 4, rank 2 has sendCounts[0] = 3"),
            "{second}"
        );
        assert!(
            third.contains("rank 0 sends 5 elements to rank 2")
                && third.contains("rank 2 expects 4 from rank 0"),
            "{third}"
        );
    }
    assert_clean();
}

/// One rank's V collectives with bad arguments: rejected when called, nothing queued.
#[test]
fn bad_v_arguments_are_rejected_synchronously() {
    let _g = test_lock();
    run_ranks(1, &test_config(), |r| {
        let h = hccl();
        let buf = DevBuf::new(0, G);
        let (p, q) = (buf.ptr, buf.at(4096));
        let one = vec![4u64];
        let zero = vec![0u64];
        let ag = |send, recv, a: &Args| call_v(r, Collective::AllGatherV, send, recv, a, F32, SUM);
        let rs = |send, recv, a: &Args, t, op| {
            call_v(r, Collective::ReduceScatterV, send, recv, a, t, op)
        };
        let a2a = |send, recv, a: &Args| call_v(r, Collective::AlltoAllV, send, recv, a, F32, SUM);
        let good_ag = Args {
            send_count: 4,
            counts: one.clone(),
            displs: zero.clone(),
            ..Args::default()
        };
        let good_rs = Args {
            recv_count: 4,
            counts: one.clone(),
            displs: zero.clone(),
            ..Args::default()
        };
        let good_a2a = Args {
            counts: one.clone(),
            displs: zero.clone(),
            recv_counts: one.clone(),
            recv_displs: zero.clone(),
            ..Args::default()
        };
        hok(ag(p, q, &good_ag));
        hok(rs(p, q, &good_rs, F32, SUM));
        hok(a2a(p, q, &good_a2a));
        ok(r.sync());
        // NULL handles and arrays.
        let (cp, zp) = (
            one.as_ptr().cast::<c_void>(),
            zero.as_ptr().cast::<c_void>(),
        );
        // SAFETY: the emulator validates every handle and pointer.
        unsafe {
            let f = h.HcclAllGatherV.unwrap();
            assert_eq!(f(p, 4, q, cp, zp, F32, null_mut(), r.stream), PTR);
            assert_eq!(f(p, 4, q, cp, zp, F32, r.comm, null_mut()), PTR);
            assert_eq!(f(p, 4, q, null(), zp, F32, r.comm, r.stream), PTR);
            assert_eq!(f(p, 4, q, cp, null(), F32, r.comm, r.stream), PTR);
            let f = h.HcclReduceScatterV.unwrap();
            assert_eq!(f(p, null(), zp, q, 4, F32, SUM, r.comm, r.stream), PTR);
            assert_eq!(f(p, cp, null(), q, 4, F32, SUM, r.comm, r.stream), PTR);
            let f = h.HcclAlltoAllV.unwrap();
            for i in 0..4 {
                let mut ptrs = [cp, zp, cp, zp];
                ptrs[i] = null();
                let [a, b, c, d] = ptrs;
                assert_eq!(f(p, a, b, F32, q, c, d, F32, r.comm, r.stream), PTR, "{i}");
            }
            let i8t = HcclDataType::HCCL_DATA_TYPE_INT8;
            assert_eq!(
                f(p, cp, zp, F32, q, cp, zp, i8t, r.comm, r.stream),
                PARA,
                "types"
            );
            assert!(
                recent().contains("sendType 4 must equal recvType 0"),
                "{}",
                recent()
            );
        }
        // NULL buffers with something to move.
        assert_eq!(ag(null_mut(), q, &good_ag), PTR);
        assert_eq!(ag(p, null_mut(), &good_ag), PTR);
        assert_eq!(rs(p, null_mut(), &good_rs, F32, SUM), PTR);
        assert_eq!(a2a(null_mut(), q, &good_a2a), PTR);
        // Types and ops.
        let int128 = HcclDataType::HCCL_DATA_TYPE_INT128;
        assert_eq!(
            call_v(r, Collective::AllGatherV, p, q, &good_ag, int128, SUM),
            PARA
        );
        assert_eq!(rs(p, q, &good_rs, F32, HcclReduceOp(7)), PARA);
        // Counts that disagree with this rank's own.
        let mut bad = good_ag.clone();
        bad.send_count = 3;
        assert_eq!(ag(p, q, &bad), PARA);
        assert!(recent().contains("recvCounts[0] = 4 must equal"));
        let mut bad = good_rs.clone();
        bad.recv_count = 3;
        assert_eq!(rs(p, q, &bad, F32, SUM), PARA);
        // Overflow, outside mapped memory, host memory.
        let mut bad = good_a2a.clone();
        bad.displs = vec![u64::MAX / 2];
        assert_eq!(a2a(p, q, &bad), PARA, "overflow");
        assert!(recent().contains("sdispls[0]"), "{}", recent());
        let mut huge = good_ag.clone();
        (huge.send_count, huge.counts) = (u64::MAX / 2, vec![u64::MAX / 2]);
        assert_eq!(ag(p, q, &huge), PARA, "overflowing count");
        assert!(
            recent().contains("sendCount 9223372036854775807 overflows"),
            "{}",
            recent()
        );
        bad.displs = vec![(G / 4) as u64 - 2];
        assert_eq!(a2a(p, q, &bad), PARA, "past the mapping");
        let mut host = [0f32; 4];
        assert_eq!(
            a2a(host.as_mut_ptr().cast(), q, &good_a2a),
            PARA,
            "host memory"
        );
        // Overlaps: send with receive, and in place (receive blocks with each other need two
        // ranks: `overlapping_receive_blocks_are_rejected`).
        let mut bad = good_a2a.clone();
        bad.recv_displs = vec![0];
        assert_eq!(a2a(p, buf.at(8), &bad), PARA, "send overlaps recv");
        assert!(recent().contains("overlaps recvBuf"), "{}", recent());
        assert_eq!(ag(p, p, &good_ag), PARA, "in place");
        // Reductions need aligned buffers.
        assert_eq!(rs(buf.at(2), q, &good_rs, F32, SUM), PARA, "unaligned");
        // Nothing to move anywhere: success at once, even with NULL buffers.
        let empty_ag = Args {
            counts: zero.clone(),
            displs: zero.clone(),
            ..Args::default()
        };
        assert_eq!(ag(null_mut(), null_mut(), &empty_ag), OK);
        let empty_rs = Args {
            counts: zero.clone(),
            displs: zero.clone(),
            ..Args::default()
        };
        assert_eq!(rs(null_mut(), null_mut(), &empty_rs, F32, SUM), OK);
        let empty_a2a = Args {
            counts: zero.clone(),
            displs: zero.clone(),
            recv_counts: zero.clone(),
            recv_displs: zero.clone(),
            ..Args::default()
        };
        assert_eq!(a2a(null_mut(), null_mut(), &empty_a2a), OK);
        ok(r.sync());
        buf.free();
    });
    assert_clean();
}

/// Two receive blocks writing the same bytes, on two ranks (rejected when called, so the
/// other rank's matching call is made bad too and nothing waits).
#[test]
fn overlapping_receive_blocks_are_rejected() {
    let _g = test_lock();
    run_ranks(2, &test_config(), |r| {
        let buf = DevBuf::new(r.rank, 2 * G);
        let a = Args {
            send_count: 4,
            counts: vec![4, 4],
            displs: vec![0, 2],
            ..Args::default()
        };
        let code = call_v(r, Collective::AllGatherV, buf.ptr, buf.at(G), &a, F32, SUM);
        assert_eq!(code, PARA);
        assert!(recent().contains("receive blocks"), "{}", recent());
        let b = Args {
            counts: vec![4, 4],
            displs: vec![0, 0],
            recv_counts: vec![4, 4],
            recv_displs: vec![4, 7],
            ..Args::default()
        };
        let code = call_v(r, Collective::AlltoAllV, buf.ptr, buf.at(G), &b, F32, SUM);
        assert_eq!(code, PARA);
        // Sending the same block to both ranks is fine (reads may overlap).
        let c = Args {
            recv_displs: vec![0, 4],
            ..b
        };
        hok(call_v(
            r,
            Collective::AlltoAllV,
            buf.ptr,
            buf.at(G),
            &c,
            F32,
            SUM,
        ));
        ok(r.sync());
        buf.free();
    });
    assert_clean();
}

/// AllGatherV where one rank contributes nothing and passes a NULL sendBuf; Reduce with
/// non-root NULL recvBuf and in place on the root; Scatter with non-root NULL sendBuf and in
/// place on the root.
#[test]
fn unused_buffers_may_be_null_and_rooted_ones_work_in_place() {
    let _g = test_lock();
    run_ranks(3, &test_config(), |r| {
        let h = hccl();
        let buf = DevBuf::new(r.rank, 2 * G);
        let me = r.rank as usize;
        let counts = vec![2u64, 0, 3];
        let a = Args {
            send_count: counts[me],
            counts,
            displs: vec![0, 2, 2],
            ..Args::default()
        };
        buf.write(0, &[me as f32 + 1.0; 3]);
        let send = if me == 1 { null_mut() } else { buf.ptr };
        hok(call_v(
            r,
            Collective::AllGatherV,
            send,
            buf.at(G),
            &a,
            F32,
            SUM,
        ));
        ok(r.sync());
        assert_eq!(buf.read::<f32>(G, 5), vec![1.0, 1.0, 3.0, 3.0, 3.0]);
        // Reduce to root 1, in place there; the others pass no recvBuf.
        buf.write(0, &[me as f32 + 1.0, 10.0]);
        let recv = if me == 1 { buf.ptr } else { null_mut() };
        // SAFETY: the emulator validates every handle and buffer.
        hok(unsafe { (h.HcclReduce.unwrap())(buf.ptr, recv, 2, F32, SUM, 1, r.comm, r.stream) });
        ok(r.sync());
        let want = if me == 1 {
            vec![6.0, 30.0]
        } else {
            vec![me as f32 + 1.0, 10.0]
        };
        assert_eq!(buf.read::<f32>(0, 2), want);
        // Scatter from root 2, whose own block stays in place; the others pass no sendBuf.
        let blocks: Vec<f32> = (0..6).map(|i| i as f32).collect();
        if me == 2 {
            buf.write(0, &blocks);
        } else {
            buf.write(0, &[-1f32; 2]);
        }
        let (send, recv) = if me == 2 {
            (buf.ptr, buf.at(4 * 2 * 2))
        } else {
            (null_mut(), buf.ptr)
        };
        // SAFETY: as above.
        hok(unsafe { (h.HcclScatter.unwrap())(send, recv, 2, F32, 2, r.comm, r.stream) });
        ok(r.sync());
        let got = buf.read::<f32>(if me == 2 { 16 } else { 0 }, 2);
        assert_eq!(got, blocks[2 * me..2 * me + 2].to_vec());
        // Root out of range, NULL root buffers.
        // SAFETY: as above.
        unsafe {
            let reduce = h.HcclReduce.unwrap();
            assert_eq!(
                reduce(buf.ptr, buf.at(G), 2, F32, SUM, 3, r.comm, r.stream),
                PARA
            );
            let scatter = h.HcclScatter.unwrap();
            assert_eq!(
                scatter(buf.ptr, buf.at(G), 2, F32, 3, r.comm, r.stream),
                PARA
            );
            if me == 0 {
                assert_eq!(
                    reduce(buf.ptr, null_mut(), 2, F32, SUM, 0, r.comm, r.stream),
                    PTR
                );
                assert_eq!(
                    scatter(null_mut(), buf.at(G), 2, F32, 0, r.comm, r.stream),
                    PTR
                );
                let bad = HcclReduceOp(9);
                assert_eq!(
                    reduce(buf.ptr, buf.at(G), 2, F32, bad, 0, r.comm, r.stream),
                    PARA
                );
            }
        }
        buf.free();
    });
    assert_clean();
}

#[test]
fn array_checks_on_their_own() {
    // Ranges: sorted, deduplicated, empty blocks dropped, extents from the base.
    let b = Blocks::alltoall_v(&[2, 0, 2], &[4, 9, 4], &[1, 1, 0], &[3, 0, 7]);
    let r = b.ranges(0x1000, 0x2000, 4).unwrap();
    assert_eq!(r.send, vec![(0x1010, 8)]);
    assert_eq!(r.send_extent, 24);
    assert_eq!(r.recv, vec![(0x2000, 4), (0x200c, 4)]);
    assert_eq!(r.recv_extent, 16);
    r.check_disjoint().unwrap();
    // Overflow names the block.
    let b = Blocks::alltoall_v(&[1], &[u64::MAX], &[1], &[0]);
    let e = b.ranges(0x1000, 0x2000, 4).err().unwrap();
    assert!(e.msg.contains("sdispls[0]"), "{}", e.msg);
    // Receive blocks touching end to end are fine; one byte of overlap is not.
    let b = Blocks::all_gather_v(1, &[1, 1], &[0, 1]);
    let r = b.ranges(0x1000, 0x2000, 2).unwrap();
    r.check_disjoint().unwrap();
    let r = Ranges {
        shape: Shape::AllGatherV,
        send: vec![],
        send_extent: 0,
        recv: vec![(0x2000, 3), (0x2002, 2)],
        recv_extent: 4,
    };
    assert!(r.check_disjoint().is_err());
    // Whether the whole operation is known to be empty.
    assert!(Blocks::all_gather_v(0, &[0, 0], &[0, 5]).whole_operation_is_empty());
    assert!(!Blocks::all_gather_v(0, &[0, 1], &[0, 5]).whole_operation_is_empty());
    let lone = Blocks::alltoall_v(&[0], &[0], &[0], &[0]);
    assert!(lone.whole_operation_is_empty());
    let pair = Blocks::alltoall_v(&[0, 0], &[0, 0], &[0, 0], &[0, 0]);
    assert!(!pair.whole_operation_is_empty(), "peers may still send");
    // The pairing and identity checks, on exchanged words.
    let words = |sc: [u64; 2], rc: [u64; 2]| [sc.to_vec(), vec![0, 0], rc.to_vec()].concat();
    assert!(check_pairs(&[words([1, 2], [1, 3]), words([3, 4], [2, 4])]).is_ok());
    let e = check_pairs(&[words([1, 2], [1, 3]), words([3, 4], [5, 4])]).unwrap_err();
    assert!(
        e.msg.contains("rank 0 sends 2 elements to rank 1"),
        "{}",
        e.msg
    );
    let e = check_identical(Shape::ReduceScatterV, &[vec![1, 2, 0, 1], vec![1, 2, 0, 2]]);
    assert!(
        e.unwrap_err()
            .msg
            .contains("rank 0 has sendDispls[1] = 1, rank 1 has sendDispls[1] = 2")
    );
}

/// V collectives stage even on windows (HCCL uses windows for their plain forms only), so
/// a rank whose unused sendBuf is NULL takes the same path as its peers on windows, and the
/// call works on every rank.
#[test]
fn v_collectives_stage_on_windows_even_with_a_null_unused_buffer() {
    let _g = test_lock();
    let before = crate::testing::counters();
    run_ranks(2, &test_config(), |r| {
        let buf = DevBuf::new(r.rank, 2 * G);
        let win = register(r, &buf);
        let me = r.rank as usize;
        let counts = vec![4u64, 0];
        let a = Args {
            send_count: counts[me],
            counts,
            displs: vec![0, 4],
            ..Args::default()
        };
        buf.write(0, &[1f32; 4]);
        let send = if me == 1 { null_mut() } else { buf.ptr };
        hok(call_v(
            r,
            Collective::AllGatherV,
            send,
            buf.at(G),
            &a,
            F32,
            SUM,
        ));
        ok(r.sync());
        assert_eq!(buf.read::<f32>(G, 4), vec![1.0; 4]);
        deregister(win);
        buf.free();
    });
    let after = crate::testing::counters();
    assert_eq!(after.symmetric_collectives, before.symmetric_collectives);
    assert_eq!(after.staged_collectives - before.staged_collectives, 2);
    assert_clean();
}

/// CANN refuses `sendBuf == recvBuf` for every V collective, even when the blocks do not
/// overlap; NULL for both (nothing moves through either) stays fine.
#[test]
fn equal_send_and_recv_buffers_are_rejected() {
    let _g = test_lock();
    run_ranks(1, &test_config(), |r| {
        let buf = DevBuf::new(0, G);
        let p = buf.ptr;
        // Blocks far apart: only the equal bases are wrong.
        let ag = Args {
            send_count: 4,
            counts: vec![4],
            displs: vec![64],
            ..Args::default()
        };
        let rs = Args {
            recv_count: 4,
            counts: vec![4],
            displs: vec![64],
            ..Args::default()
        };
        let a2a = Args {
            counts: vec![4],
            displs: vec![0],
            recv_counts: vec![4],
            recv_displs: vec![64],
            ..Args::default()
        };
        for (kind, a) in [
            (Collective::AllGatherV, &ag),
            (Collective::ReduceScatterV, &rs),
            (Collective::AlltoAllV, &a2a),
        ] {
            assert_eq!(
                call_v(r, kind, p, p, a, F32, SUM),
                PARA,
                "{}",
                kind.c_name()
            );
            assert!(recent().contains("sendBuf"), "{}", recent());
        }
        let empty = Args {
            counts: vec![0],
            displs: vec![0],
            recv_counts: vec![0],
            recv_displs: vec![0],
            ..Args::default()
        };
        hok(call_v(
            r,
            Collective::AlltoAllV,
            null_mut(),
            null_mut(),
            &empty,
            F32,
            SUM,
        ));
        ok(r.sync());
        buf.free();
    });
    assert_clean();
}

/// An empty block may have any displacement that does not overflow on its own rank: the
/// address arithmetic of the later rounds (staged) and of the peer's mapping (symmetric) must
/// skip it (in a debug build, the overflow panics on the stream thread otherwise).
#[test]
fn empty_blocks_with_huge_displacements_move_nothing() {
    let _g = test_lock();
    let mut cfg = test_config();
    cfg.hcclBufferSize = 1;
    // 1 MiB staging, two sections: 131072 i32 per round, so 200_000 take two rounds.
    let count = 200_000u64;
    for symmetric in [false, true] {
        run_ranks(2, &cfg, |r| {
            let buf = DevBuf::new(r.rank, 2 * G);
            let win = symmetric.then(|| register(r, &buf));
            let (me, peer) = (r.rank as usize, 1 - r.rank as usize);
            // The largest displacement whose address does not overflow on this rank.
            let huge = |base: usize| ((usize::MAX - base) / 4 - 1) as u64;
            let (send, recv) = (buf.ptr, buf.at(G));
            let mut counts = vec![0u64; 2];
            counts[me] = count;
            let mut sd = vec![0u64; 2];
            sd[peer] = huge(send as usize);
            let mut rd = vec![0u64; 2];
            rd[peer] = huge(recv as usize);
            let a = Args {
                counts: counts.clone(),
                displs: sd.clone(),
                recv_counts: counts.clone(),
                recv_displs: rd,
                ..Args::default()
            };
            let data: Vec<i32> = (0..count as i32).map(|i| i ^ (me as i32 * 977)).collect();
            buf.write(0, &data);
            hok(call_v(r, Collective::AlltoAllV, send, recv, &a, I32, SUM));
            assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
            assert_eq!(buf.read::<i32>(G, count as usize), data);
            // ReduceScatterV: rank 1 receives nothing, its block at a huge displacement (the
            // same on every rank: user addresses stay below 2^47).
            let rs = Args {
                recv_count: [count, 0][me],
                counts: vec![count, 0],
                displs: vec![0, huge(1 << 47)],
                ..Args::default()
            };
            hok(call_v(
                r,
                Collective::ReduceScatterV,
                send,
                recv,
                &rs,
                I32,
                SUM,
            ));
            assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
            if me == 0 {
                let sum: Vec<i32> = (0..count as i32).map(|i| i.wrapping_add(i ^ 977)).collect();
                assert_eq!(buf.read::<i32>(G, count as usize), sum);
            }
            if let Some(w) = win {
                deregister(w);
            }
            buf.free();
        });
    }
    assert_clean();
}
