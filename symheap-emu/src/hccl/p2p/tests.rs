//! Point-to-point transfers through the C entry points, with threads as ranks.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::sys::*;
use crate::testutil::{
    DevBuf, Rank, acl, assert_clean, deregister, hccl, hok, ok, recent, register, run_ranks,
    test_config,
};
use crate::{GRANULARITY as G, test_lock, testing::counters};

const PARA: HcclResult = HcclResult::HCCL_E_PARA;
const PTR: HcclResult = HcclResult::HCCL_E_PTR;
const FAILED: aclError = ACL_ERROR_RT_INTERNAL_ERROR;
const I32: HcclDataType = HcclDataType::HCCL_DATA_TYPE_INT32;
const F32: HcclDataType = HcclDataType::HCCL_DATA_TYPE_FP32;
const SEND: HcclSendRecvType = HcclSendRecvType::HCCL_SEND;
const RECV: HcclSendRecvType = HcclSendRecvType::HCCL_RECV;

/// What rank `rank` sends as its message tagged `tag`: distinct per rank, tag and element.
fn pattern(rank: u32, tag: u32, len: usize) -> Vec<i32> {
    (0..len)
        .map(|i| (i as i32).wrapping_mul(31) ^ (rank as i32 * 1_000_003 + tag as i32 * 7919))
        .collect()
}

/// Asserts `got` equals `want` element by element, naming the first difference.
#[track_caller]
fn assert_elements(got: &[i32], want: &[i32]) {
    assert_eq!(got.len(), want.len());
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!("element {i}: got {}, want {}", got[i], want[i]);
    }
}

fn send(r: &Rank, buf: *mut c_void, count: u64, t: HcclDataType, peer: u32) -> HcclResult {
    // SAFETY: the emulator validates buffers and handles.
    unsafe { (hccl().HcclSend.unwrap())(buf, count, t, peer, r.comm, r.stream) }
}

fn recv(r: &Rank, buf: *mut c_void, count: u64, t: HcclDataType, peer: u32) -> HcclResult {
    // SAFETY: the emulator validates buffers and handles.
    unsafe { (hccl().HcclRecv.unwrap())(buf, count, t, peer, r.comm, r.stream) }
}

fn item(
    kind: HcclSendRecvType,
    buf: *mut c_void,
    count: u64,
    t: HcclDataType,
    peer: u32,
) -> HcclSendRecvItem {
    HcclSendRecvItem {
        sendRecvType: kind,
        buf,
        count,
        dataType: t,
        remoteRank: peer,
    }
}

fn batch(r: &Rank, items: &mut [HcclSendRecvItem]) -> HcclResult {
    // SAFETY: `items` holds `len` items; the emulator validates their buffers.
    unsafe {
        (hccl().HcclBatchSendRecv.unwrap())(
            items.as_mut_ptr(),
            items.len() as u32,
            r.comm,
            r.stream,
        )
    }
}

fn all_reduce_sum(r: &Rank, buf: &DevBuf, count: usize) -> HcclResult {
    // SAFETY: the emulator validates buffers and handles.
    unsafe {
        (hccl().HcclAllReduce)(
            buf.ptr,
            buf.ptr,
            count as u64,
            I32,
            HcclReduceOp::HCCL_REDUCE_SUM,
            r.comm,
            r.stream,
        )
    }
}

/// Every rank contributes `pattern(rank, 9, count)` to an in-place AllReduce of `buf` and
/// checks the sum.
fn check_all_reduce(r: &Rank, buf: &DevBuf, count: usize) {
    buf.write(0, &pattern(r.rank, 9, count));
    hok(all_reduce_sum(r, buf, count));
    assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
    let want: Vec<i32> = (0..count)
        .map(|i| {
            (0..r.n)
                .map(|k| pattern(k, 9, count)[i])
                .fold(0i32, i32::wrapping_add)
        })
        .collect();
    assert_elements(&buf.read::<i32>(0, count), &want);
}

/// A config whose 1 MiB staging area makes sections of 1 MiB / n, so messages of a few MiB
/// move in many chunks.
fn small_staging() -> HcclCommConfig {
    let mut cfg = test_config();
    cfg.hcclBufferSize = 1;
    cfg
}

#[test]
fn sends_chunk_through_a_small_staging_area_both_ways() {
    let _g = test_lock();
    let before = counters();
    // 2.8 MB: eleven 256 KiB chunks, the last one partial.
    let count = 700_001;
    run_ranks(2, &small_staging(), |r| {
        let buf = DevBuf::new(r.rank, 3 * G);
        let peer = 1 - r.rank;
        if r.rank == 0 {
            buf.write(0, &pattern(0, 0, count));
            hok(send(r, buf.ptr, count as u64, I32, peer));
            hok(recv(r, buf.at(0), count as u64, I32, peer));
        } else {
            hok(recv(r, buf.ptr, count as u64, I32, peer));
            // Sent back changed, from another offset (the write does not wait for the
            // receive, so it must not overlap it).
            let back = pattern(1, 1, count);
            buf.write(3 << 20, &back);
            hok(send(r, buf.at(3 << 20), count as u64, I32, peer));
        }
        assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
        let want = match r.rank {
            0 => pattern(1, 1, count),
            _ => pattern(0, 0, count),
        };
        assert_elements(&buf.read::<i32>(0, count), &want);
        buf.free();
    });
    let after = counters();
    assert_eq!(after.staged_receives - before.staged_receives, 2);
    assert_eq!(after.direct_receives, before.direct_receives);
    assert_clean();
}

#[test]
fn sends_and_receives_pair_up_across_four_ranks() {
    let _g = test_lock();
    let count = 300_007;
    run_ranks(4, &small_staging(), |r| {
        let n = r.n;
        let (next, prev) = ((r.rank + 1) % n, (r.rank + n - 1) % n);
        let out = DevBuf::new(r.rank, 2 * G);
        let inb = DevBuf::new(r.rank, 2 * G);
        out.write(0, &pattern(r.rank, 3, count));
        // A ring of separate calls needs an order that cannot deadlock (sends are
        // synchronous): even ranks send first, odd ranks receive first.
        let (c, t) = (count as u64, I32);
        if r.rank % 2 == 0 {
            hok(send(r, out.ptr, c, t, next));
            hok(recv(r, inb.ptr, c, t, prev));
        } else {
            hok(recv(r, inb.ptr, c, t, prev));
            hok(send(r, out.ptr, c, t, next));
        }
        assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
        assert_elements(&inb.read::<i32>(0, count), &pattern(prev, 3, count));
        out.free();
        inb.free();
    });
    assert_clean();
}

#[test]
fn a_ring_batch_progresses_together_and_keeps_pair_order() {
    let _g = test_lock();
    let count = 200_003;
    let bytes = count * 4;
    run_ranks(4, &small_staging(), |r| {
        let n = r.n;
        let (next, prev) = ((r.rank + 1) % n, (r.rank + n - 1) % n);
        // Two messages out, two in, each pair's in order.
        let buf = DevBuf::new(r.rank, 4 * G);
        buf.write(0, &pattern(r.rank, 0, count));
        buf.write(bytes, &pattern(r.rank, 1, count));
        let c = count as u64;
        let mut items = [
            item(SEND, buf.ptr, c, I32, next),
            item(RECV, buf.at(2 * bytes), c, I32, prev),
            item(SEND, buf.at(bytes), c, I32, next),
            item(RECV, buf.at(3 * bytes), c, I32, prev),
        ];
        hok(batch(r, &mut items));
        assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
        assert_elements(&buf.read::<i32>(2 * bytes, count), &pattern(prev, 0, count));
        assert_elements(&buf.read::<i32>(3 * bytes, count), &pattern(prev, 1, count));
        buf.free();
    });
    assert_clean();
}

#[test]
fn point_to_point_leaves_collectives_of_all_ranks_matched() {
    let _g = test_lock();
    run_ranks(4, &test_config(), |r| {
        let buf = DevBuf::new(r.rank, G);
        let count = 1000;
        // Only ranks 0 and 1 talk (three messages), ranks 2 and 3 make no call.
        if r.rank < 2 {
            for tag in 0..3 {
                if r.rank == 0 {
                    buf.write(0, &pattern(0, tag, count));
                    hok(send(r, buf.ptr, count as u64, I32, 1));
                    assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
                } else {
                    hok(recv(r, buf.ptr, count as u64, I32, 0));
                    assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
                    assert_elements(&buf.read::<i32>(0, count), &pattern(0, tag, count));
                }
            }
        }
        check_all_reduce(r, &buf, count);
        // Then ranks 2 and 3 only, and all four again.
        if r.rank == 2 {
            buf.write(0, &pattern(2, 5, count));
            hok(send(r, buf.ptr, count as u64, I32, 3));
            // The send reads `buf` on the stream: wait before the host rewrites it.
            assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
        } else if r.rank == 3 {
            hok(recv(r, buf.ptr, count as u64, I32, 2));
            assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
            assert_elements(&buf.read::<i32>(0, count), &pattern(2, 5, count));
        }
        check_all_reduce(r, &buf, count);
        buf.free();
    });
    assert_clean();
}

#[test]
fn mismatched_pairs_fail_on_both_sides_and_later_pairs_still_match() {
    let _g = test_lock();
    run_ranks(2, &test_config(), |r| {
        let buf = DevBuf::new(r.rank, G);
        let h = hccl();
        let mismatches = [((10, I32), (12, I32)), ((10, F32), (10, I32))];
        for ((sc, st), (rc, rt)) in mismatches {
            match r.rank {
                0 => hok(send(r, buf.ptr, sc, st, 1)),
                _ => hok(recv(r, buf.ptr, rc, rt, 0)),
            }
            assert_eq!(r.sync(), FAILED);
            let msg = recent();
            let sends = format!("rank 0 sends {sc} x {st}");
            let receives = format!("rank 1 receives {rc} x {rt}");
            assert!(
                msg.contains("HCCL_E_PARA") && msg.contains(&sends) && msg.contains(&receives),
                "{msg}"
            );
            let mut err = HcclResult::HCCL_SUCCESS;
            // SAFETY: live communicator, valid out-pointer.
            hok(unsafe { (h.HcclGetCommAsyncError.unwrap())(r.comm, &mut err) });
            assert_eq!(err, PARA);
        }
        // The failed messages are finished on both sides: the next pair matches.
        let count = 5000;
        if r.rank == 0 {
            buf.write(0, &pattern(0, 2, count));
            hok(send(r, buf.ptr, count as u64, I32, 1));
        } else {
            hok(recv(r, buf.ptr, count as u64, I32, 0));
        }
        assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
        assert_elements(&buf.read::<i32>(0, count), &pattern(0, 2, count));
        buf.free();
    });
    assert_clean();
}

#[test]
fn a_peer_that_never_receives_times_out() {
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
        hok(send(r, buf.ptr, 16, I32, 1));
        assert_eq!(r.sync(), FAILED);
        let msg = recent();
        assert!(
            msg.contains("HCCL_E_TIMEOUT")
                && msg.contains("waited 1.0 s")
                && msg.contains("send of 16 x")
                && msg.contains("for the matching receive"),
            "{msg}"
        );
        let mut err = HcclResult::HCCL_SUCCESS;
        // SAFETY: live communicator, valid out-pointer.
        hok(unsafe { (hccl().HcclGetCommAsyncError.unwrap())(r.comm, &mut err) });
        assert_eq!(err, HcclResult::HCCL_E_TIMEOUT);
        buf.free();
        done.wait();
    });
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
    assert_clean();
}

#[test]
fn a_peer_that_destroyed_its_communicator_fails_transfers_at_once() {
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
            hok(recv(r, buf.ptr, 16, I32, 1));
            assert_eq!(r.sync(), FAILED);
            let msg = recent();
            assert!(
                msg.contains("HCCL_E_TIMEOUT") && msg.contains("rank 1 destroyed its communicator"),
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
fn a_sender_in_a_window_is_read_directly() {
    let _g = test_lock();
    let before = counters();
    let count = 100_000;
    run_ranks(2, &small_staging(), |r| {
        let win_buf = DevBuf::new(r.rank, G);
        let win = register(r, &win_buf);
        let plain = DevBuf::new(r.rank, G);
        if r.rank == 0 {
            win_buf.write(4096, &pattern(0, 4, count));
            hok(send(r, win_buf.at(4096), count as u64, I32, 1));
        } else {
            hok(recv(r, plain.ptr, count as u64, I32, 0));
        }
        assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
        if r.rank == 1 {
            assert_elements(&plain.read::<i32>(0, count), &pattern(0, 4, count));
        }
        deregister(win);
        win_buf.free();
        plain.free();
    });
    let after = counters();
    assert_eq!(after.direct_receives - before.direct_receives, 1);
    assert_eq!(after.staged_receives, before.staged_receives);
    assert_clean();
}

#[test]
fn bad_calls_are_rejected_synchronously_and_take_no_message_number() {
    let _g = test_lock();
    run_ranks(2, &test_config(), |r| {
        let buf = DevBuf::new(r.rank, G);
        if r.rank == 0 {
            let h = hccl();
            let (s, rv) = (h.HcclSend.unwrap(), h.HcclRecv.unwrap());
            let mut host = vec![0i32; 16];
            let floats = (G / 4) as u64;
            // SAFETY: the emulator validates every argument.
            unsafe {
                assert_eq!(s(buf.ptr, 4, I32, 1, null_mut(), r.stream), PTR);
                assert_eq!(s(buf.ptr, 4, I32, 1, 0x77 as HcclComm, r.stream), PARA);
                assert_eq!(s(buf.ptr, 4, I32, 1, r.comm, null_mut()), PTR);
                assert_eq!(s(null_mut(), 4, I32, 1, r.comm, r.stream), PTR);
                assert_eq!(rv(null_mut(), 4, I32, 1, r.comm, r.stream), PTR);
                assert_eq!(s(buf.ptr, 4, I32, 2, r.comm, r.stream), PARA);
                assert!(recent().contains("not below rankSize 2"));
                assert_eq!(rv(buf.ptr, 4, I32, 0, r.comm, r.stream), PARA);
                assert!(recent().contains("itself"));
                assert_eq!(s(buf.ptr, 4, HcclDataType(99), 1, r.comm, r.stream), PARA);
                let host_ptr = host.as_mut_ptr().cast();
                assert_eq!(s(host_ptr, 4, I32, 1, r.comm, r.stream), PARA);
                assert_eq!(s(buf.ptr, floats + 1, F32, 1, r.comm, r.stream), PARA);
                assert_eq!(s(buf.ptr, u64::MAX, F32, 1, r.comm, r.stream), PARA);
                // A count of 0 moves nothing, even from NULL.
                hok(s(null_mut(), 0, I32, 1, r.comm, r.stream));
                let bsr = h.HcclBatchSendRecv.unwrap();
                assert_eq!(bsr(null_mut(), 1, r.comm, r.stream), PTR);
                assert_eq!(bsr(null_mut(), 0, r.comm, r.stream), PTR);
                let mut items = [
                    item(SEND, buf.ptr, 4, I32, 1),
                    item(HcclSendRecvType(2), buf.ptr, 4, I32, 1),
                ];
                hok(bsr(items.as_mut_ptr(), 0, r.comm, r.stream));
                assert_eq!(bsr(items.as_mut_ptr(), 2, r.comm, r.stream), PARA);
                assert!(recent().contains("item 1: sendRecvType 2"), "{}", recent());
            }
            assert_eq!(r.sync(), ACL_SUCCESS);
        }
        // Nothing was queued or numbered: the first accepted pair is message 0 on both.
        let count = 64;
        if r.rank == 0 {
            buf.write(0, &pattern(0, 6, count));
            hok(send(r, buf.ptr, count as u64, I32, 1));
        } else {
            hok(recv(r, buf.ptr, count as u64, I32, 0));
        }
        assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
        assert_elements(&buf.read::<i32>(0, count), &pattern(0, 6, count));
        buf.free();
    });
    assert_clean();
}

#[test]
fn a_call_refused_by_a_stopped_stream_takes_no_message_number() {
    let _g = test_lock();
    // Rank 1's receive is queued before rank 0's refused send.
    let queued = Barrier::new(2);
    run_ranks(2, &test_config(), |r| {
        let buf = DevBuf::new(r.rank, G);
        let count = 64;
        if r.rank == 0 {
            let a = acl();
            // SAFETY: a live stream.
            ok(unsafe { (a.aclrtSetStreamFailureMode.unwrap())(r.stream, ACL_STOP_ON_FAILURE) });
            crate::acl::stream::lookup(crate::base::handle::StreamHandle::from_c(r.stream))
                .unwrap()
                .enqueue(Box::new(|| {
                    Err(crate::acl::stream::TaskFailure {
                        code: FAILED,
                        msg: "an earlier task failed".into(),
                    })
                }))
                .unwrap();
            // Wait until the failure stopped the stream (harmless memsets are skipped).
            // SAFETY: device range validated by the emulator.
            while unsafe { (a.aclrtMemsetAsync)(buf.ptr, 4, 0, 4, r.stream) } == ACL_SUCCESS {
                std::thread::sleep(Duration::from_millis(1));
            }
            // Refused, as a failed runtime call: no operation, no message number.
            queued.wait();
            assert_eq!(
                send(r, buf.ptr, count as u64, I32, 1),
                HcclResult::HCCL_E_RUNTIME
            );
            assert!(recent().contains("stop-on-failure"), "{}", recent());
            // Time for rank 1's waiting receive to look at the pair's mailbox.
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(r.sync(), FAILED);
            buf.write(0, &pattern(0, 7, count));
            hok(send(r, buf.ptr, count as u64, I32, 1));
        } else {
            hok(recv(r, buf.ptr, count as u64, I32, 0));
            queued.wait();
        }
        assert_eq!(r.sync(), ACL_SUCCESS, "{}", recent());
        assert_elements(&buf.read::<i32>(0, count), &pattern(0, 7, count));
        buf.free();
    });
    assert_clean();
}

#[test]
fn a_transfer_needs_fewer_than_u32_max_chunks() {
    let chunk = 64;
    let most = (u32::MAX as usize - 1) * chunk;
    assert_eq!(super::chunks(most, chunk).unwrap(), u32::MAX as u64 - 1);
    let f = super::chunks(most + 1, chunk).unwrap_err();
    assert_eq!(f.code, PARA);
    assert!(f.msg.contains("chunks"), "{}", f.msg);
    assert!(super::chunks(usize::MAX, chunk).is_err());
    assert_eq!(super::chunks(1, chunk).unwrap(), 1);
}

/// A direct read needs the sender's very window: the slot and its registration's id.
#[test]
fn a_direct_read_matches_the_window_id_as_well_as_the_slot() {
    let _g = test_lock();
    run_ranks(2, &test_config(), |r| {
        let win_buf = DevBuf::new(r.rank, G);
        let win = register(r, &win_buf);
        let plain = DevBuf::new(r.rank, G);
        if r.rank == 1 {
            let comm =
                crate::hccl::comm::lookup(crate::base::handle::CommHandle::from_c(r.comm)).unwrap();
            let w = crate::base::lock::lock(&comm.windows)[0].clone();
            let item = super::Item {
                kind: RECV,
                buf: plain.ptr as usize,
                count: 16,
                dtype: I32,
                peer: 0,
            };
            let t = super::Transfer::check(&comm, &item).unwrap();
            assert!(!t.read_window(&comm, w.slot, w.id + 1, 0), "another window");
            assert!(t.read_window(&comm, w.slot, w.id, 0));
        }
        deregister(win);
        win_buf.free();
        plain.free();
    });
    assert_clean();
}

/// `itemNum` `UINT32_MAX` (137 GB of items) is refused before anything is read or
/// allocated; it aborted the process on the allocation.
#[test]
fn a_batch_of_uint32_max_items_is_refused() {
    let _g = test_lock();
    run_ranks(2, &small_staging(), |r| {
        let buf = DevBuf::new(r.rank, G);
        let mut items = [item(SEND, buf.ptr, 1, I32, 1 - r.rank)];
        // SAFETY: the emulator must refuse the count before it reads past the one item.
        let code = unsafe {
            (hccl().HcclBatchSendRecv.unwrap())(items.as_mut_ptr(), u32::MAX, r.comm, r.stream)
        };
        assert_eq!(code, HcclResult::HCCL_E_PARA);
        assert!(recent().contains("itemNum 4294967295"), "{}", recent());
        buf.free();
    });
    assert_clean();
}
