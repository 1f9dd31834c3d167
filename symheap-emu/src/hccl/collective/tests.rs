//! Collectives through the C entry points, with threads as ranks.

mod order;

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use half::{bf16, f16};

use crate::sys::*;
use crate::testutil::{
    DevBuf, Rank, acl, assert_clean, deregister, gate, hccl, hok, ok, recent, register, run_ranks,
    test_config,
};
use crate::{GRANULARITY as G, abi::inject::inject_failure, test_lock};
use symheap_types::Collective;

pub(crate) const PARA: HcclResult = HcclResult::HCCL_E_PARA;
pub(crate) const PTR: HcclResult = HcclResult::HCCL_E_PTR;
pub(crate) const FAILED: aclError = ACL_ERROR_RT_INTERNAL_ERROR;

pub(crate) const TYPES: [HcclDataType; 12] = [
    HcclDataType::HCCL_DATA_TYPE_INT8,
    HcclDataType::HCCL_DATA_TYPE_INT16,
    HcclDataType::HCCL_DATA_TYPE_INT32,
    HcclDataType::HCCL_DATA_TYPE_INT64,
    HcclDataType::HCCL_DATA_TYPE_UINT8,
    HcclDataType::HCCL_DATA_TYPE_UINT16,
    HcclDataType::HCCL_DATA_TYPE_UINT32,
    HcclDataType::HCCL_DATA_TYPE_UINT64,
    HcclDataType::HCCL_DATA_TYPE_FP16,
    HcclDataType::HCCL_DATA_TYPE_BFP16,
    HcclDataType::HCCL_DATA_TYPE_FP32,
    HcclDataType::HCCL_DATA_TYPE_FP64,
];

pub(crate) const OPS: [HcclReduceOp; 4] = [
    HcclReduceOp::HCCL_REDUCE_SUM,
    HcclReduceOp::HCCL_REDUCE_PROD,
    HcclReduceOp::HCCL_REDUCE_MAX,
    HcclReduceOp::HCCL_REDUCE_MIN,
];

const F32: HcclDataType = HcclDataType::HCCL_DATA_TYPE_FP32;
const SUM: HcclReduceOp = HcclReduceOp::HCCL_REDUCE_SUM;

pub(crate) fn size_of(t: HcclDataType) -> usize {
    match t.0 {
        0 | 7 => 1,
        1 | 3 | 8 | 11 => 2,
        2 | 4 | 9 => 4,
        _ => 8,
    }
}

/// Rank `rank`'s element `i`: small integers (negative ones for signed types), so every
/// result below is exact in every type and independent of the reduction's precision.
pub(crate) fn value(t: HcclDataType, rank: u32, i: usize) -> f64 {
    let v = ((i * 7 + rank as usize * 3) % 5) as f64;
    if matches!(t.0, 6..=9) {
        v + 1.0
    } else {
        v - 2.0
    }
}

/// The values in type `t`. Integers wrap as the emulator's do: the exact value (every test
/// value and result is an integer well inside f64's exact range) truncated to the type.
pub(crate) fn encode(t: HcclDataType, vals: impl IntoIterator<Item = f64>) -> Vec<u8> {
    let mut out = Vec::new();
    for v in vals {
        let int = v as i64;
        match t.0 {
            0 => out.extend((int as i8).to_le_bytes()),
            1 => out.extend((int as i16).to_le_bytes()),
            2 => out.extend((int as i32).to_le_bytes()),
            5 => out.extend(int.to_le_bytes()),
            7 => out.extend((int as u8).to_le_bytes()),
            8 => out.extend((int as u16).to_le_bytes()),
            9 => out.extend((int as u32).to_le_bytes()),
            6 => out.extend((int as u64).to_le_bytes()),
            3 => out.extend(f16::from_f64(v).to_le_bytes()),
            11 => out.extend(bf16::from_f64(v).to_le_bytes()),
            4 => out.extend((v as f32).to_le_bytes()),
            _ => out.extend(v.to_le_bytes()),
        }
    }
    out
}

/// The host reference: a left fold in rank order.
pub(crate) fn fold(op: HcclReduceOp, vals: impl Iterator<Item = f64>) -> f64 {
    vals.reduce(|a, b| match op {
        HcclReduceOp::HCCL_REDUCE_SUM => a + b,
        HcclReduceOp::HCCL_REDUCE_PROD => a * b,
        HcclReduceOp::HCCL_REDUCE_MAX => a.max(b),
        _ => a.min(b),
    })
    .unwrap()
}

/// Calls collective `kind` through the HCCL table.
#[allow(clippy::too_many_arguments)]
fn call(
    r: &Rank,
    kind: Collective,
    send: *mut c_void,
    recv: *mut c_void,
    count: u64,
    t: HcclDataType,
    op: HcclReduceOp,
    root: u32,
) -> HcclResult {
    let h = hccl();
    // SAFETY: the emulator validates buffers and handles.
    unsafe {
        match kind {
            Collective::AllReduce => (h.HcclAllReduce)(send, recv, count, t, op, r.comm, r.stream),
            Collective::AllGather => (h.HcclAllGather)(send, recv, count, t, r.comm, r.stream),
            Collective::ReduceScatter => {
                (h.HcclReduceScatter)(send, recv, count, t, op, r.comm, r.stream)
            }
            Collective::AlltoAll => {
                (h.HcclAlltoAll)(send, count, t, recv, count, t, r.comm, r.stream)
            }
            Collective::Broadcast => (h.HcclBroadcast)(send, count, t, root, r.comm, r.stream),
            Collective::Barrier => (h.HcclBarrier)(r.comm, r.stream),
            Collective::Reduce => {
                (h.HcclReduce.unwrap())(send, recv, count, t, op, root, r.comm, r.stream)
            }
            Collective::Scatter => {
                (h.HcclScatter.unwrap())(send, recv, count, t, root, r.comm, r.stream)
            }
            Collective::AllGatherV
            | Collective::ReduceScatterV
            | Collective::AlltoAllV
            | Collective::AlltoAllVC => {
                unreachable!("the V collectives' tests call them with their arrays")
            }
            Collective::Send | Collective::Recv => {
                unreachable!("the point-to-point tests call them with their peers")
            }
        }
    }
}

/// Runs `kind` with `t` / `op` on `count` elements through `buf` (input at 0, output at
/// `out`) and checks every rank's result against the host reference.
#[allow(clippy::too_many_arguments)]
fn check_one(
    r: &Rank,
    buf: &DevBuf,
    out: usize,
    kind: Collective,
    t: HcclDataType,
    op: HcclReduceOp,
    count: usize,
) {
    let (n, me) = (r.n as usize, r.rank);
    let root = r.n - 1;
    let in_elems = match kind {
        Collective::ReduceScatter | Collective::AlltoAll | Collective::Scatter => n * count,
        _ => count,
    };
    buf.write(0, &encode(t, (0..in_elems).map(|i| value(t, me, i))));
    let (send, recv) = if kind == Collective::Broadcast {
        (buf.ptr, buf.ptr)
    } else {
        let rest = buf.size - out;
        // SAFETY: device range validated by the emulator.
        ok(unsafe { (acl().aclrtMemset)(buf.at(out), rest, 0xEE, rest) });
        (buf.ptr, buf.at(out))
    };
    hok(call(r, kind, send, recv, count as u64, t, op, root));
    ok(r.sync());
    let want: Vec<f64> = match kind {
        Collective::AllReduce => (0..count)
            .map(|i| fold(op, (0..r.n).map(|k| value(t, k, i))))
            .collect(),
        Collective::AllGather => (0..n * count)
            .map(|j| value(t, (j / count) as u32, j % count))
            .collect(),
        Collective::ReduceScatter => (0..count)
            .map(|i| fold(op, (0..r.n).map(|k| value(t, k, me as usize * count + i))))
            .collect(),
        Collective::AlltoAll => (0..n * count)
            .map(|j| value(t, (j / count) as u32, me as usize * count + j % count))
            .collect(),
        Collective::Broadcast => (0..count).map(|i| value(t, root, i)).collect(),
        Collective::Reduce => (0..count)
            .map(|i| fold(op, (0..r.n).map(|k| value(t, k, i))))
            .collect(),
        Collective::Scatter => (0..count)
            .map(|i| value(t, root, me as usize * count + i))
            .collect(),
        _ => Vec::new(),
    };
    let at = if kind == Collective::Broadcast {
        0
    } else {
        out
    };
    let len = want.len() * size_of(t);
    let got = buf.read::<u8>(at, len);
    // Reduce leaves other ranks' recvBuf alone.
    let want = match kind {
        Collective::Reduce if me != root => vec![0xEE; len],
        _ => encode(t, want),
    };
    assert_eq!(
        got,
        want,
        "{} type {} op {} on rank {me} of {n}",
        kind.c_name(),
        t.0,
        op.0
    );
}

/// Every collective, type and op, on 1, 2, 3, 4 and 8 ranks, through both paths.
#[test]
fn every_kernel_matches_the_host_reference() {
    let _g = test_lock();
    for n in [1u32, 2, 3, 4, 8] {
        for symmetric in [false, true] {
            let runs = crate::testing::counters().symmetric_collectives;
            let done = run_ranks(n, &test_config(), |r| {
                let buf = DevBuf::new(r.rank, 2 * G);
                let win = symmetric.then(|| register(r, &buf));
                let mut done = 0;
                for t in TYPES {
                    for op in OPS {
                        for kind in [
                            Collective::AllReduce,
                            Collective::ReduceScatter,
                            Collective::Reduce,
                        ] {
                            check_one(r, &buf, G, kind, t, op, 1001);
                            done += u64::from(kind != Collective::Reduce);
                        }
                    }
                    for kind in [
                        Collective::AllGather,
                        Collective::AlltoAll,
                        Collective::Broadcast,
                        Collective::Scatter,
                    ] {
                        check_one(r, &buf, G, kind, t, SUM, 999);
                        done +=
                            u64::from(matches!(kind, Collective::AllGather | Collective::AlltoAll));
                    }
                }
                if let Some(w) = win {
                    deregister(w);
                }
                buf.free();
                done
            });
            let took = crate::testing::counters().symmetric_collectives - runs;
            // One rank: HCCL finds no window, so everything stages.
            let want = if symmetric && n > 1 {
                done.iter().sum()
            } else {
                0
            };
            assert_eq!(took, want, "symmetric path on {n} ranks");
        }
    }
    assert_clean();
}

#[test]
fn integers_wrap_and_halves_round_once() {
    let _g = test_lock();
    run_ranks(2, &test_config(), |r| {
        let buf = DevBuf::new(r.rank, G);
        buf.write(0, &[100i8, -100, 127]);
        hok(call(
            r,
            Collective::AllReduce,
            buf.ptr,
            buf.at(64),
            3,
            HcclDataType::HCCL_DATA_TYPE_INT8,
            SUM,
            0,
        ));
        ok(r.sync());
        assert_eq!(buf.read::<i8>(64, 3), vec![-56, 56, -2]);
        // 2048 + 1 + 1: two fp16 roundings would give 2048, one rounding of the f32 sum 2050.
        let v = if r.rank == 0 { 2048.0 } else { 1.0 };
        buf.write(0, &[f16::from_f32(v)]);
        let ty = HcclDataType::HCCL_DATA_TYPE_FP16;
        hok(call(
            r,
            Collective::AllReduce,
            buf.ptr,
            buf.at(64),
            1,
            ty,
            SUM,
            0,
        ));
        ok(r.sync());
        assert_eq!(buf.read::<u16>(64, 1)[0], f16::from_f32(2049.0).to_bits());
        buf.free();
    });
    assert_clean();
}

/// In-place AllReduce, AllGather and ReduceScatter on both paths.
#[test]
fn in_place_is_correct_on_both_paths() {
    let _g = test_lock();
    for symmetric in [false, true] {
        let runs = crate::testing::counters().symmetric_collectives;
        run_ranks(3, &test_config(), |r| {
            let buf = DevBuf::new(r.rank, 2 * G);
            let win = symmetric.then(|| register(r, &buf));
            let c = 50_000usize;
            let me = r.rank as f32;
            // AllReduce, send == recv.
            let data: Vec<f32> = (0..c).map(|i| i as f32 + me).collect();
            buf.write(0, &data);
            hok(call(
                r,
                Collective::AllReduce,
                buf.ptr,
                buf.ptr,
                c as u64,
                F32,
                SUM,
                0,
            ));
            ok(r.sync());
            let got = buf.read::<f32>(0, c);
            assert!(
                got.iter()
                    .enumerate()
                    .all(|(i, &v)| v == 3.0 * i as f32 + 3.0)
            );
            // AllGather, send == recv + rank * count.
            let mine = r.rank as usize * c * 4;
            buf.write(mine, &vec![me + 1.0; c]);
            hok(call(
                r,
                Collective::AllGather,
                buf.at(mine),
                buf.ptr,
                c as u64,
                F32,
                SUM,
                0,
            ));
            ok(r.sync());
            let got = buf.read::<f32>(0, 3 * c);
            assert!(
                got.chunks(c)
                    .enumerate()
                    .all(|(k, ch)| ch.iter().all(|&v| v == k as f32 + 1.0))
            );
            // ReduceScatter, recv == send + rank * count.
            let data: Vec<f32> = (0..3 * c).map(|i| (i / c) as f32 * 10.0 + me).collect();
            buf.write(0, &data);
            hok(call(
                r,
                Collective::ReduceScatter,
                buf.ptr,
                buf.at(mine),
                c as u64,
                F32,
                SUM,
                0,
            ));
            ok(r.sync());
            let want = r.rank as f32 * 30.0 + 3.0;
            assert!(buf.read::<f32>(mine, c).iter().all(|&v| v == want));
            if let Some(w) = win {
                deregister(w);
            }
            buf.free();
        });
        let took = crate::testing::counters().symmetric_collectives - runs;
        assert_eq!(took, if symmetric { 9 } else { 0 });
    }
    assert_clean();
}

/// Data larger than the staging buffer goes through it in chunks.
#[test]
fn the_staged_path_chunks_through_a_small_buffer() {
    let _g = test_lock();
    let mut cfg = test_config();
    cfg.hcclBufferSize = 1;
    run_ranks(3, &cfg, |r| {
        let buf = DevBuf::new(r.rank, 8 * G);
        let out = 4 * G;
        let t = HcclDataType::HCCL_DATA_TYPE_INT32;
        check_one(r, &buf, out, Collective::AllReduce, t, SUM, 700_001);
        check_one(
            r,
            &buf,
            out,
            Collective::ReduceScatter,
            t,
            HcclReduceOp::HCCL_REDUCE_MAX,
            200_003,
        );
        check_one(r, &buf, out, Collective::AllGather, t, SUM, 300_007);
        check_one(r, &buf, out, Collective::AlltoAll, t, SUM, 100_003);
        check_one(r, &buf, out, Collective::Broadcast, t, SUM, 500_009);
        check_one(r, &buf, out, Collective::Reduce, t, SUM, 700_001);
        check_one(r, &buf, out, Collective::Scatter, t, SUM, 200_003);
        buf.free();
    });
    assert_clean();
}

#[test]
fn asymmetric_offsets_fail_on_every_rank() {
    let _g = test_lock();
    let msgs = run_ranks(2, &test_config(), |r| {
        let buf = DevBuf::new(r.rank, 2 * G);
        let win = register(r, &buf);
        let skew = r.rank as usize * 4096;
        hok(call(
            r,
            Collective::AllReduce,
            buf.at(skew),
            buf.at(G),
            256,
            F32,
            SUM,
            0,
        ));
        assert_eq!(r.sync(), FAILED);
        let msg = recent();
        let mut err = HcclResult::HCCL_SUCCESS;
        // SAFETY: live communicator, valid out-pointer.
        hok(unsafe { (hccl().HcclGetCommAsyncError.unwrap())(r.comm, &mut err) });
        assert_eq!(err, PARA);
        // Read and cleared.
        // SAFETY: as above.
        hok(unsafe { (hccl().HcclGetCommAsyncError.unwrap())(r.comm, &mut err) });
        assert_eq!(err, HcclResult::HCCL_SUCCESS);
        // The communicator still works afterwards.
        hok(call(
            r,
            Collective::AllReduce,
            buf.ptr,
            buf.at(G),
            256,
            F32,
            SUM,
            0,
        ));
        ok(r.sync());
        deregister(win);
        buf.free();
        msg
    });
    for msg in msgs {
        assert!(msg.contains("asymmetric"), "{msg}");
        assert!(msg.contains("rank 0: input slot 0x0 offset 0x0"), "{msg}");
        assert!(
            msg.contains("rank 1: input slot 0x0 offset 0x1000"),
            "{msg}"
        );
    }
    assert_clean();
}

#[test]
fn mismatched_calls_and_paths_fail_on_every_rank() {
    let _g = test_lock();
    let msgs = run_ranks(2, &test_config(), |r| {
        let buf = DevBuf::new(r.rank, 2 * G);
        let count = 100 + 100 * u64::from(r.rank);
        hok(call(
            r,
            Collective::AllReduce,
            buf.ptr,
            buf.at(G),
            count,
            F32,
            SUM,
            0,
        ));
        assert_eq!(r.sync(), FAILED);
        let first = recent();
        // Rank 0 has both buffers in a window, rank 1 does not.
        let win = register(r, &buf);
        let other = DevBuf::new(r.rank, G);
        let recv = if r.rank == 0 { buf.at(G) } else { other.ptr };
        hok(call(
            r,
            Collective::AllReduce,
            buf.ptr,
            recv,
            64,
            F32,
            SUM,
            0,
        ));
        assert_eq!(r.sync(), FAILED);
        let second = recent();
        deregister(win);
        other.free();
        buf.free();
        (first, second)
    });
    for (first, second) in msgs {
        assert!(
            first.contains("different calls")
                && first.contains("count 200, type HCCL_DATA_TYPE_FP32, op HCCL_REDUCE_SUM"),
            "{first}"
        );
        assert!(second.contains("rank 1: staged"), "{second}");
    }
    assert_clean();
}

#[test]
fn a_missing_peer_times_out_without_hanging() {
    let _g = test_lock();
    let mut cfg = test_config();
    cfg.hcclExecTimeOut = 1;
    let start = Instant::now();
    // Rank 1 stays alive (its communicator too) until rank 0 has given up.
    let done = Barrier::new(2);
    run_ranks(2, &cfg, |r| {
        if r.rank == 1 {
            done.wait();
            return;
        }
        let buf = DevBuf::new(r.rank, G);
        hok(call(
            r,
            Collective::AllReduce,
            buf.ptr,
            buf.ptr,
            16,
            F32,
            SUM,
            0,
        ));
        assert_eq!(r.sync(), FAILED);
        let msg = recent();
        assert!(
            msg.contains("HCCL_E_TIMEOUT") && msg.contains("waited 1.0 s at step 0 for ranks [1]"),
            "{msg}"
        );
        let mut err = HcclResult::HCCL_SUCCESS;
        // SAFETY: live communicator, valid out-pointer.
        hok(unsafe { (hccl().HcclGetCommAsyncError.unwrap())(r.comm, &mut err) });
        assert_eq!(err, HcclResult::HCCL_E_TIMEOUT);
        buf.free();
        done.wait();
    });
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_clean();
}

#[test]
fn a_peer_that_destroyed_its_communicator_fails_collectives_at_once() {
    let _g = test_lock();
    let mut cfg = test_config();
    cfg.hcclExecTimeOut = 120;
    let start = Instant::now();
    run_ranks(2, &cfg, |r| {
        if r.rank == 1 {
            return;
        }
        let buf = DevBuf::new(r.rank, G);
        // The first waits until rank 1 is gone; the second fails on arrival.
        for _ in 0..2 {
            hok(call(
                r,
                Collective::AllReduce,
                buf.ptr,
                buf.ptr,
                16,
                F32,
                SUM,
                0,
            ));
            assert_eq!(r.sync(), FAILED);
            let msg = recent();
            assert!(
                msg.contains("HCCL_E_TIMEOUT") && msg.contains("ranks [1] destroyed"),
                "{msg}"
            );
        }
        buf.free();
    });
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    assert_clean();
}

#[test]
fn stream_order_is_kept_and_reads_before_synchronize_may_be_stale() {
    let _g = test_lock();
    run_ranks(2, &test_config(), |r| {
        let a = acl();
        let buf = DevBuf::new(r.rank, G);
        let win = register(r, &buf);
        buf.write(0, &[0f32; 4]);
        let input = crate::testutil::PinnedBuf::new(&[r.rank as f32 + 1.0; 4]);
        let output = crate::testutil::PinnedBuf::new(&[0f32; 4]);
        let open = gate(r.stream);
        // SAFETY: `input` / `output` outlive the synchronize; device sides are validated.
        unsafe {
            ok((a.aclrtMemcpyAsync)(
                buf.ptr,
                16,
                input.ptr(),
                16,
                aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE,
                r.stream,
            ));
            hok(call(
                r,
                Collective::AllReduce,
                buf.ptr,
                buf.at(64),
                4,
                F32,
                SUM,
                0,
            ));
            ok((a.aclrtMemcpyAsync)(
                output.ptr(),
                16,
                buf.at(64),
                16,
                aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
                r.stream,
            ));
        }
        // Nothing ran yet: a host read now sees the old contents.
        assert_eq!(buf.read::<f32>(0, 4), vec![0.0; 4]);
        // Queued work holds the window: deregistering now is refused on every rank.
        let dereg = hccl().HcclCommSymWinDeregister.unwrap();
        // SAFETY: a live window handle.
        assert_eq!(unsafe { dereg(win) }, HcclResult::HCCL_E_AGAIN);
        drop(open);
        ok(r.sync());
        assert_eq!(output.get(), [3.0; 4]);
        deregister(win);
        buf.free();
    });
    assert_clean();
}

#[test]
fn barrier_waits_for_every_rank() {
    let _g = test_lock();
    let ready = Barrier::new(3);
    // When rank 0 is about to call: no rank may leave the barrier before that.
    let rank0_calls = std::sync::OnceLock::new();
    let finished = run_ranks(3, &test_config(), |r| {
        ready.wait();
        if r.rank == 0 {
            std::thread::sleep(Duration::from_millis(50));
            rank0_calls.set(Instant::now()).unwrap();
        }
        hok(call(
            r,
            Collective::Barrier,
            null_mut(),
            null_mut(),
            0,
            F32,
            SUM,
            0,
        ));
        ok(r.sync());
        Instant::now()
    });
    let called = *rank0_calls.get().unwrap();
    assert!(
        finished.iter().all(|&t| t >= called),
        "{finished:?} vs {called:?}"
    );
    assert_clean();
}

#[test]
fn bad_arguments_are_rejected_synchronously() {
    let _g = test_lock();
    run_ranks(1, &test_config(), |r| {
        let h = hccl();
        let buf = DevBuf::new(0, G);
        let (p, q) = (buf.ptr, buf.at(4096));
        let ar =
            |send, recv, count, t, op| call(r, Collective::AllReduce, send, recv, count, t, op, 0);
        let mut host = [0f32; 4];
        let hp = host.as_mut_ptr().cast();
        // SAFETY: the emulator validates every handle and buffer.
        unsafe {
            assert_eq!(
                (h.HcclAllReduce)(p, q, 4, F32, SUM, null_mut(), r.stream),
                PTR
            );
            assert_eq!(
                (h.HcclAllReduce)(p, q, 4, F32, SUM, 0x99 as HcclComm, r.stream),
                PARA
            );
            assert_eq!(
                (h.HcclAllReduce)(p, q, 4, F32, SUM, r.comm, null_mut()),
                PTR
            );
            assert_eq!(
                (h.HcclAllReduce)(p, q, 4, F32, SUM, r.comm, 0x99 as aclrtStream),
                PARA
            );
            assert_eq!((h.HcclBarrier)(null_mut(), r.stream), PTR);
            assert_eq!(
                (h.HcclAlltoAll)(p, 4, F32, q, 8, F32, r.comm, r.stream),
                PARA,
                "counts differ"
            );
        }
        assert_eq!(ar(p, q, 4, HcclDataType::HCCL_DATA_TYPE_INT128, SUM), PARA);
        assert_eq!(ar(p, q, 4, HcclDataType(13), SUM), PARA);
        assert_eq!(ar(p, q, 4, F32, HcclReduceOp(7)), PARA);
        assert_eq!(ar(null_mut(), q, 4, F32, SUM), PTR);
        assert_eq!(ar(p, null_mut(), 4, F32, SUM), PTR);
        assert_eq!(ar(hp, q, 4, F32, SUM), PARA, "host memory");
        assert!(recent().contains("sendBuf"));
        assert_eq!(ar(buf.at(G - 8), q, 4, F32, SUM), PARA, "past the mapping");
        assert_eq!(ar(buf.at(2), q, 4, F32, SUM), PARA, "unaligned");
        assert_eq!(ar(p, buf.at(4), 4, F32, SUM), PARA, "overlapping");
        assert_eq!(ar(p, q, u64::MAX / 2, F32, SUM), PARA, "overflow");
        let bc = call(r, Collective::Broadcast, p, p, 4, F32, SUM, 1);
        assert_eq!(bc, PARA, "root out of range");
        let ag = call(r, Collective::AllGather, p, buf.at(2), 4, F32, SUM, 0);
        assert_eq!(ag, PARA, "overlapping AllGather");
        // A count of 0 is a successful no-op, even with NULL buffers.
        assert_eq!(
            ar(null_mut(), null_mut(), 0, F32, SUM),
            HcclResult::HCCL_SUCCESS
        );
        // Injected failures: the second call fails without doing anything.
        inject_failure("HcclAllReduce", 2, HcclResult::HCCL_E_INTERNAL.0);
        buf.write(0, &[1f32, 2.0, 3.0, 4.0]);
        hok(ar(p, q, 4, F32, SUM));
        assert_eq!(ar(q, p, 4, F32, SUM), HcclResult::HCCL_E_INTERNAL);
        ok(r.sync());
        assert_eq!(buf.read::<f32>(0, 4), vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(buf.read::<f32>(4096, 4), vec![1.0, 2.0, 3.0, 4.0]);
        buf.free();
    });
    assert_clean();
}

#[test]
fn an_injected_collective_failure_consumes_its_sequence_number() {
    let _g = test_lock();
    let mut cfg = test_config();
    cfg.hcclExecTimeOut = 1;
    let (first, second) = (Barrier::new(2), Barrier::new(2));
    let out = run_ranks(2, &cfg, |r| {
        let buf = DevBuf::new(r.rank, G);
        let ar = |v: f32| {
            buf.write(0, &[v]);
            let code = call(
                r,
                Collective::AllReduce,
                buf.ptr,
                buf.at(64),
                1,
                F32,
                SUM,
                0,
            );
            (code, r.sync(), buf.read::<f32>(64, 1)[0])
        };
        let base = r.rank as f32 + 1.0;
        // Only rank 0's first AllReduce fails by injection; rank 1 calls once it has.
        if r.rank == 0 {
            inject_failure("HcclAllReduce", 1, HcclResult::HCCL_E_INTERNAL.0);
        } else {
            first.wait();
        }
        let a = ar(base);
        if r.rank == 0 {
            first.wait();
        }
        // Rank 1's first call met nobody (it timed out): the next calls pair up again.
        second.wait();
        let b = ar(base * 10.0);
        buf.free();
        (a.0, a.1, b)
    });
    assert_eq!(out[0].0, HcclResult::HCCL_E_INTERNAL);
    assert_eq!((out[1].0, out[1].1), (HcclResult::HCCL_SUCCESS, FAILED));
    for (_, _, b) in &out {
        assert_eq!(*b, (HcclResult::HCCL_SUCCESS, ACL_SUCCESS, 30.0));
    }
    assert_clean();
}

/// Rough bandwidth of a 2-rank fp32 AllReduce at 64 MiB on both paths, against single-thread
/// memcpy of the same size (host memory, and emulated device memory through `aclrtMemcpy`).
/// Run with
/// `cargo test --release --lib symmetric_allreduce_bandwidth -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn symmetric_allreduce_bandwidth() {
    let _g = test_lock();
    let bytes = 64usize << 20;
    let reps = 20;
    let gbps = |secs: f64| bytes as f64 / secs / 1e9;
    // Averages over `reps` calls, after one warm-up call.
    let time = |f: &mut dyn FnMut()| {
        f();
        let start = Instant::now();
        for _ in 0..reps {
            f();
        }
        start.elapsed().as_secs_f64() / reps as f64
    };
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let host = time(&mut || {
        dst.copy_from_slice(&src);
        std::hint::black_box(&mut dst);
    });
    let device = run_ranks(1, &test_config(), |_| {
        let (a, b) = (DevBuf::new(0, bytes), DevBuf::new(0, bytes));
        let t = time(&mut || {
            // SAFETY: both device ranges are validated by the emulator.
            ok(unsafe {
                (acl().aclrtMemcpy)(
                    b.ptr,
                    bytes,
                    a.ptr,
                    bytes,
                    aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_DEVICE,
                )
            })
        });
        a.free();
        b.free();
        t
    })[0];
    println!(
        "single-thread memcpy, 64 MiB: host {:.2} GB/s, emulated device {:.2} GB/s",
        gbps(host),
        gbps(device)
    );
    for symmetric in [true, false] {
        let times = run_ranks(2, &test_config(), |r| {
            let buf = DevBuf::new(r.rank, 2 * bytes);
            let win = symmetric.then(|| register(r, &buf));
            let count = (bytes / 4) as u64;
            buf.write(0, &vec![1f32; bytes / 4]);
            // Each call is enqueued and synchronized, so ranks start together every time; the
            // warm-up faults every page in (also through the heap mappings).
            let t = time(&mut || {
                hok(call(
                    r,
                    Collective::AllReduce,
                    buf.ptr,
                    buf.at(bytes),
                    count,
                    F32,
                    SUM,
                    0,
                ));
                ok(r.sync());
            });
            if let Some(w) = win {
                deregister(w);
            }
            buf.free();
            t
        });
        let t = times.iter().copied().fold(0.0, f64::max);
        // busbw = algbw * 2 (n - 1) / n, which is algbw itself for n = 2.
        println!(
            "2-rank fp32 AllReduce, 64 MiB, {}: {:.2} ms, busbw {:.2} GB/s = {:.2} x host memcpy, \
             {:.2} x device memcpy",
            if symmetric { "symmetric" } else { "staged" },
            t * 1e3,
            gbps(t),
            host / t,
            device / t
        );
    }
    assert_clean();
}
