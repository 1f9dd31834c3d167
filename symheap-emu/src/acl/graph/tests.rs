//! Graph capture and replay through the C entry points.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::base::handle::StreamHandle;
use crate::sys::*;
use crate::testutil::{DevBuf, acl, assert_clean, hccl, hok, ok, register, run_ranks, test_config};
use crate::{GRANULARITY as G, test_lock};

fn stream() -> aclrtStream {
    let mut s = null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { (acl().aclrtCreateStream)(&mut s) });
    s
}

fn sync_event() -> aclrtEvent {
    let mut e = null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { (acl().aclrtCreateEventExWithFlag.unwrap())(&mut e, ACL_EVENT_SYNC) });
    e
}

fn begin(s: aclrtStream, mode: aclmdlRICaptureMode) -> aclError {
    // SAFETY: the emulator validates the handle.
    unsafe { (acl().aclmdlRICaptureBegin.unwrap())(s, mode) }
}

fn end(s: aclrtStream) -> Result<aclmdlRI, aclError> {
    let mut m = null_mut();
    // SAFETY: valid out-pointer.
    match unsafe { (acl().aclmdlRICaptureEnd.unwrap())(s, &mut m) } {
        ACL_SUCCESS => Ok(m),
        code => {
            assert!(m.is_null(), "a failed end leaves no model");
            Err(code)
        }
    }
}

fn info(s: aclrtStream) -> (aclmdlRICaptureStatus, aclmdlRI) {
    let (mut st, mut m) = (-1, null_mut());
    // SAFETY: valid out-pointers.
    ok(unsafe { (acl().aclmdlRICaptureGetInfo.unwrap())(s, &mut st, &mut m) });
    (st, m)
}

fn replay(m: aclmdlRI, s: aclrtStream) -> aclError {
    // SAFETY: the emulator validates the handles.
    unsafe { (acl().aclmdlRIExecuteAsync.unwrap())(m, s) }
}

fn destroy(m: aclmdlRI) -> aclError {
    // SAFETY: the emulator validates the handle.
    unsafe { (acl().aclmdlRIDestroy.unwrap())(m) }
}

fn exchange(mode: aclmdlRICaptureMode) -> aclmdlRICaptureMode {
    let mut m = mode;
    // SAFETY: valid pointer.
    ok(unsafe { (acl().aclmdlRICaptureThreadExchangeMode.unwrap())(&mut m) });
    m
}

/// A second stream that joins a capture of `origin` and joins back, through two events.
struct SideStream {
    stream: aclrtStream,
    joined: aclrtEvent,
    back: aclrtEvent,
}

impl SideStream {
    fn new() -> Self {
        SideStream {
            stream: stream(),
            joined: sync_event(),
            back: sync_event(),
        }
    }

    /// Joins the capture `origin` is in.
    fn join(&self, origin: aclrtStream) {
        // SAFETY: live handles.
        unsafe {
            ok((acl().aclrtRecordEvent.unwrap())(self.joined, origin));
            ok((acl().aclrtStreamWaitEvent.unwrap())(
                self.stream,
                self.joined,
            ));
        }
    }

    /// Joins back: `origin` waits for what this stream queued.
    fn join_back(&self, origin: aclrtStream) {
        // SAFETY: live handles.
        unsafe {
            ok((acl().aclrtRecordEvent.unwrap())(self.back, self.stream));
            ok((acl().aclrtStreamWaitEvent.unwrap())(origin, self.back));
        }
    }
}

impl Drop for SideStream {
    fn drop(&mut self) {
        // SAFETY: live handles, destroyed once.
        unsafe {
            ok((acl().aclrtDestroyEvent.unwrap())(self.joined));
            ok((acl().aclrtDestroyEvent.unwrap())(self.back));
            ok((acl().aclrtDestroyStream)(self.stream));
        }
    }
}

static CALLS: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn count(_: *mut c_void) {
    CALLS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn a_single_stream_capture_runs_only_when_replayed_and_forbids_what_capture_forbids() {
    let _g = test_lock();
    let a = acl();
    // SAFETY: plain device binding.
    unsafe { ok((a.aclrtSetDevice)(0)) };
    let s = stream();
    let buf = DevBuf::new(0, G);
    buf.write(0, &[1u8; 64]);
    CALLS.store(0, Ordering::SeqCst);
    assert_eq!(info(s), (ACL_MODEL_RI_CAPTURE_STATUS_NONE, null_mut()));
    assert_eq!(begin(null_mut(), 0), ACL_ERROR_INVALID_PARAM);
    assert_eq!(begin(s, 3), ACL_ERROR_RT_PARAM_INVALID);
    ok(begin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
    assert_eq!(begin(s, 0), ACL_ERROR_RT_STREAM_CAPTURED);
    let (status, model) = info(s);
    assert_eq!(status, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE);
    // SAFETY: ranges inside `buf`; `count` ignores its argument.
    unsafe {
        ok((a.aclrtMemsetAsync)(buf.at(0), G, 2, 64, s));
        ok((a.aclrtLaunchHostFunc.unwrap())(s, Some(count), null_mut()));
        let d2d = aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_DEVICE;
        ok((a.aclrtMemcpyAsync)(
            buf.at(64),
            G - 64,
            buf.at(0),
            64,
            d2d,
            s,
        ));
        // Forbidden while capturing, without invalidating the capture.
        assert_eq!((a.aclrtSynchronizeStream)(s), ACL_ERROR_RT_STREAM_CAPTURED);
        assert_eq!((a.aclrtDestroyStream)(s), ACL_ERROR_RT_STREAM_CAPTURED);
        assert_eq!(
            (a.aclrtMemset)(buf.at(128), G - 128, 5, 1),
            ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT
        );
        assert_eq!(replay(model, s), ACL_ERROR_RT_STREAM_CAPTURED);
        assert_eq!(destroy(model), ACL_ERROR_RT_MODEL_CAPTURED);
        // An event of aclrtCreateEvent cannot be recorded in a capture.
        let mut old = null_mut();
        ok((a.aclrtCreateEvent.unwrap())(&mut old));
        assert_eq!(
            (a.aclrtRecordEvent.unwrap())(old, s),
            ACL_ERROR_RT_FEATURE_NOT_SUPPORT
        );
        ok((a.aclrtDestroyEvent.unwrap())(old));
    }
    // RELAXED on this thread allows the synchronous fill, which runs at once.
    assert_eq!(
        exchange(ACL_MODEL_RI_CAPTURE_MODE_RELAXED),
        ACL_MODEL_RI_CAPTURE_MODE_GLOBAL
    );
    // SAFETY: inside `buf`.
    ok(unsafe { (a.aclrtMemset)(buf.at(128), G - 128, 5, 1) });
    assert_eq!(
        exchange(ACL_MODEL_RI_CAPTURE_MODE_GLOBAL),
        ACL_MODEL_RI_CAPTURE_MODE_RELAXED
    );
    let graph = end(s).unwrap();
    assert_eq!(graph, model);
    assert_eq!(info(s), (ACL_MODEL_RI_CAPTURE_STATUS_NONE, null_mut()));
    // Nothing captured has run.
    let untouched = [[1u8; 64].as_slice(), &[0; 64], &[5]].concat();
    assert_eq!(buf.read::<u8>(0, 129), untouched);
    assert_eq!(CALLS.load(Ordering::SeqCst), 0);
    for n in 1..=3 {
        buf.write(0, &[0u8; 128]);
        ok(replay(graph, s));
        // SAFETY: a live stream.
        ok(unsafe { (a.aclrtSynchronizeStream)(s) });
        assert_eq!(buf.read::<u8>(0, 128), [2u8; 128]);
        assert_eq!(CALLS.load(Ordering::SeqCst), n);
    }
    assert_eq!(end(s), Err(ACL_ERROR_RT_STREAM_NOT_CAPTURED));
    ok(destroy(graph));
    assert_eq!(destroy(graph), ACL_ERROR_RT_PARAM_INVALID);
    buf.free();
    // SAFETY: handles from above.
    unsafe {
        ok((a.aclrtDestroyStream)(s));
        ok((a.aclrtResetDevice)(0));
    }
    assert_clean();
}

#[test]
fn a_stream_that_waits_for_the_capture_joins_it_and_must_join_back() {
    let _g = test_lock();
    let a = acl();
    // SAFETY: plain device binding.
    unsafe { ok((a.aclrtSetDevice)(0)) };
    let (s1, s2) = (stream(), stream());
    let (e1, e2, outside) = (sync_event(), sync_event(), sync_event());
    let buf = DevBuf::new(0, G);
    // SAFETY: valid handles; ranges inside `buf`.
    unsafe {
        ok((a.aclrtRecordEvent.unwrap())(outside, s2));
        // Joined, but never back: the end fails and leaves nothing.
        ok(begin(s1, 0));
        ok((a.aclrtRecordEvent.unwrap())(e1, s1));
        ok((a.aclrtStreamWaitEvent.unwrap())(s2, e1));
        assert_eq!(info(s2).0, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE);
        assert_eq!(info(s2).1, info(s1).1);
        // The event is being captured: the host cannot wait for it.
        assert_eq!(
            (a.aclrtSynchronizeEvent.unwrap())(e1),
            ACL_ERROR_RT_EVENT_CAPTURED
        );
        // A captured stream cannot wait for an event recorded outside the capture.
        assert_eq!(
            (a.aclrtStreamWaitEvent.unwrap())(s1, outside),
            ACL_ERROR_RT_CAPTURE_DEPENDENCY
        );
        ok((a.aclrtMemsetAsync)(buf.at(0), G, 3, 64, s2));
        assert_eq!(end(s2), Err(ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED));
        assert_eq!(end(s1), Err(ACL_ERROR_RT_STREAM_UNJOINED));
        assert_eq!(info(s2).0, ACL_MODEL_RI_CAPTURE_STATUS_NONE);
        // Joined and back: s2's last task is a record the origin waits for.
        ok(begin(s1, 0));
        ok((a.aclrtRecordEvent.unwrap())(e1, s1));
        ok((a.aclrtStreamWaitEvent.unwrap())(s2, e1));
        ok((a.aclrtMemsetAsync)(buf.at(0), G, 3, 64, s2));
        ok((a.aclrtRecordEvent.unwrap())(e2, s2));
        ok((a.aclrtStreamWaitEvent.unwrap())(s1, e2));
        let d2d = aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_DEVICE;
        ok((a.aclrtMemcpyAsync)(
            buf.at(64),
            G - 64,
            buf.at(0),
            64,
            d2d,
            s1,
        ));
        let graph = end(s1).unwrap();
        ok((a.aclrtSynchronizeEvent.unwrap())(e1));
        // The capture's events may go: a replay keeps the order they recorded.
        ok((a.aclrtDestroyEvent.unwrap())(e1));
        ok((a.aclrtDestroyEvent.unwrap())(e2));
        // Replayed on another stream: the fill, then the copy that depends on it.
        ok(replay(graph, s2));
        ok((a.aclrtSynchronizeStream)(s2));
        assert_eq!(buf.read::<u8>(64, 64), [3u8; 64]);
        ok(destroy(graph));
        ok((a.aclrtDestroyEvent.unwrap())(outside));
        buf.free();
        ok((a.aclrtDestroyStream)(s1));
        ok((a.aclrtDestroyStream)(s2));
        ok((a.aclrtResetDevice)(0));
    }
    assert_clean();
}

#[test]
fn a_capture_ended_on_another_thread_fails_unless_relaxed() {
    let _g = test_lock();
    let a = acl();
    // SAFETY: plain device binding.
    unsafe { ok((a.aclrtSetDevice)(0)) };
    let s = stream();
    for (mode, want) in [
        (
            ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL,
            Err(ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD),
        ),
        (ACL_MODEL_RI_CAPTURE_MODE_RELAXED, Ok(())),
    ] {
        ok(begin(s, mode));
        let s_addr = s as usize;
        let got = std::thread::spawn(move || end(s_addr as aclrtStream).map(|m| m as usize))
            .join()
            .unwrap();
        assert_eq!(got.map(drop), want, "mode {mode}");
        if let Ok(m) = got {
            ok(destroy(m as aclmdlRI));
        }
        assert_eq!(info(s).0, ACL_MODEL_RI_CAPTURE_STATUS_NONE);
    }
    // SAFETY: handles from above.
    unsafe {
        ok((a.aclrtDestroyStream)(s));
        ok((a.aclrtResetDevice)(0));
    }
    assert_clean();
}

/// A captured AllReduce of `buf`'s first 16 floats, in place.
fn capture_all_reduce(r: &crate::testutil::Rank, buf: &DevBuf) -> aclmdlRI {
    ok(begin(r.stream, 0));
    // SAFETY: the range lies in `buf`; in place.
    hok(unsafe {
        (hccl().HcclAllReduce)(
            buf.at(0),
            buf.at(0),
            16,
            HcclDataType::HCCL_DATA_TYPE_FP32,
            HcclReduceOp::HCCL_REDUCE_SUM,
            r.comm,
            r.stream,
        )
    });
    end(r.stream).unwrap()
}

#[test]
fn replays_of_a_captured_all_reduce_take_fresh_sequence_numbers_and_a_missing_rank_fails_them_fast()
{
    let _g = test_lock();
    let mut cfg = test_config();
    cfg.hcclOpExpansionMode = 2;
    let before = crate::testing::counters().symmetric_collectives;
    run_ranks(4, &cfg, |r| {
        let buf = DevBuf::new(r.rank, G);
        let window = register(r, &buf);
        buf.write(0, &[1.0f32; 16]);
        let graph = capture_all_reduce(r, &buf);
        assert_eq!(buf.read::<f32>(0, 16), [1.0; 16], "captured, not run");
        for n in 1..=3 {
            ok(replay(graph, r.stream));
            ok(r.sync());
            assert_eq!(buf.read::<f32>(0, 16), [4f32.powi(n); 16]);
        }
        // Graph, then window, then (in the teardown) communicator.
        ok(destroy(graph));
        crate::testutil::deregister(window);
        // Rank 3 replays no more and destroys its communicator: the others' next replay
        // fails at once, naming it, instead of waiting for the exec timeout.
        if r.rank != 3 {
            let graph = capture_all_reduce(r, &buf);
            let started = std::time::Instant::now();
            ok(replay(graph, r.stream));
            assert_eq!(r.sync(), ACL_ERROR_RT_INTERNAL_ERROR);
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
            let why = crate::testutil::recent();
            assert!(why.contains("[3]"), "{why}");
            ok(destroy(graph));
        }
        buf.free();
    });
    // Every replay on the window took the symmetric path: 3 per rank.
    assert_eq!(
        crate::testing::counters().symmetric_collectives - before,
        12
    );
    assert_clean();
}

#[test]
fn captured_point_to_point_calls_pair_with_the_peer_replay_by_replay() {
    let _g = test_lock();
    let (h, cfg) = (hccl(), test_config());
    let i32t = HcclDataType::HCCL_DATA_TYPE_INT32;
    run_ranks(2, &cfg, |r| {
        let (send, recv) = (h.HcclSend.unwrap(), h.HcclRecv.unwrap());
        let buf = DevBuf::new(r.rank, G);
        let peer = 1 - r.rank;
        // Each rank sends its first 16 ints and receives the peer's into the next 16: rank
        // 0 sends first, rank 1 receives first, so the two calls pair across the ranks.
        let (out, into) = (buf.at(0), buf.at(64));
        ok(begin(r.stream, 0));
        // SAFETY: both ranges lie in `buf`.
        unsafe {
            if r.rank == 0 {
                hok(send(out, 16, i32t, peer, r.comm, r.stream));
                hok(recv(into, 16, i32t, peer, r.comm, r.stream));
            } else {
                hok(recv(into, 16, i32t, peer, r.comm, r.stream));
                hok(send(out, 16, i32t, peer, r.comm, r.stream));
            }
        }
        let graph = end(r.stream).unwrap();
        for n in 1..=3i32 {
            buf.write(0, &[n * 10 + r.rank as i32; 16]);
            ok(replay(graph, r.stream));
            ok(r.sync());
            assert_eq!(buf.read::<i32>(64, 16), [n * 10 + peer as i32; 16]);
        }
        // The replays took the pairs' message numbers: an eager exchange pairs after them.
        buf.write(0, &[-1 - r.rank as i32; 16]);
        // SAFETY: as above.
        unsafe {
            let items = &mut [
                HcclSendRecvItem {
                    sendRecvType: HcclSendRecvType::HCCL_SEND,
                    buf: out,
                    count: 16,
                    dataType: i32t,
                    remoteRank: peer,
                },
                HcclSendRecvItem {
                    sendRecvType: HcclSendRecvType::HCCL_RECV,
                    buf: into,
                    count: 16,
                    dataType: i32t,
                    remoteRank: peer,
                },
            ];
            hok((h.HcclBatchSendRecv.unwrap())(
                items.as_mut_ptr(),
                2,
                r.comm,
                r.stream,
            ));
        }
        ok(r.sync());
        assert_eq!(buf.read::<i32>(64, 16), [-1 - peer as i32; 16]);
        ok(destroy(graph));
        buf.free();
    });
    assert_clean();
}

unsafe extern "C" fn slow_count(_: *mut c_void) {
    std::thread::sleep(std::time::Duration::from_millis(50));
    CALLS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn pageable_host_memory_is_copied_synchronously_and_cannot_be_captured() {
    let _g = test_lock();
    let a = acl();
    // SAFETY: plain device binding.
    unsafe { ok((a.aclrtSetDevice)(0)) };
    let s = stream();
    let buf = DevBuf::new(0, G);
    let h2d = aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE;
    let mut pageable = [3u8; 64];
    let mut pinned = null_mut();
    CALLS.store(0, Ordering::SeqCst);
    // SAFETY: host ranges of 64 bytes, device ranges inside `buf`.
    unsafe {
        ok((a.aclrtMallocHost.unwrap())(&mut pinned, 64));
        std::ptr::write_bytes(pinned.cast::<u8>(), 4, 64);
        // Outside a capture the stream is synchronized first and the copy made at once: the
        // slow host function queued before it has run, and the source may change at once.
        ok((a.aclrtLaunchHostFunc.unwrap())(
            s,
            Some(slow_count),
            null_mut(),
        ));
        ok((a.aclrtMemcpyAsync)(
            buf.at(0),
            64,
            pageable.as_ptr().cast(),
            64,
            h2d,
            s,
        ));
        assert_eq!(CALLS.load(Ordering::SeqCst), 1);
        pageable = [9; 64];
        assert_eq!(buf.read::<u8>(0, 64), [3; 64]);
        ok(begin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
        assert_eq!(
            (a.aclrtMemcpyAsync)(buf.at(0), 64, pageable.as_ptr().cast(), 64, h2d, s),
            ACL_ERROR_RT_PARAM_INVALID
        );
        let d2h = aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST;
        let back = pageable.as_mut_ptr().cast();
        assert_eq!(
            (a.aclrtMemcpyAsync)(back, 64, buf.at(0), 64, d2h, s),
            ACL_ERROR_RT_PARAM_INVALID
        );
        // Pinned memory is captured, and read when the graph runs.
        ok((a.aclrtMemcpyAsync)(buf.at(64), 64, pinned, 64, h2d, s));
        let graph = end(s).unwrap();
        std::ptr::write_bytes(pinned.cast::<u8>(), 5, 64);
        ok(replay(graph, s));
        ok((a.aclrtSynchronizeStream)(s));
        assert_eq!(buf.read::<u8>(64, 64), [5; 64]);
        ok(destroy(graph));
        // Another stream's global capture forbids the synchronous copy this one becomes.
        let other = stream();
        ok(begin(other, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL));
        assert_eq!(
            (a.aclrtMemcpyAsync)(buf.at(0), 64, pageable.as_ptr().cast(), 64, h2d, s),
            ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC
        );
        ok((a.aclrtMemcpyAsync)(buf.at(0), 64, pinned, 64, h2d, s));
        ok(destroy(end(other).unwrap()));
        ok((a.aclrtSynchronizeStream)(s));
        ok((a.aclrtFreeHost.unwrap())(pinned));
        ok((a.aclrtDestroyStream)(other));
        ok((a.aclrtDestroyStream)(s));
        ok((a.aclrtResetDevice)(0));
    }
    assert_eq!(pageable, [9; 64]);
    buf.free();
    assert_clean();
}

#[test]
fn a_replay_runs_its_streams_side_by_side_so_a_send_and_a_receive_on_two_streams_meet() {
    let _g = test_lock();
    let (h, cfg) = (hccl(), test_config());
    let i32t = HcclDataType::HCCL_DATA_TYPE_INT32;
    run_ranks(2, &cfg, |r| {
        let (send, recv) = (h.HcclSend.unwrap(), h.HcclRecv.unwrap());
        let side = SideStream::new();
        let buf = DevBuf::new(r.rank, G);
        let peer = 1 - r.rank;
        // Both ranks send on the origin stream and receive on the side stream: run one
        // after the other, both sends would wait for receives that never start.
        ok(begin(r.stream, 0));
        side.join(r.stream);
        // SAFETY: ranges inside `buf`; live handles.
        unsafe {
            hok(send(buf.at(0), 16, i32t, peer, r.comm, r.stream));
            hok(recv(buf.at(64), 16, i32t, peer, r.comm, side.stream));
        }
        side.join_back(r.stream);
        let graph = end(r.stream).unwrap();
        for n in 1..=3i32 {
            buf.write(0, &[n * 10 + r.rank as i32; 16]);
            let started = std::time::Instant::now();
            ok(replay(graph, r.stream));
            ok(r.sync());
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
            assert_eq!(buf.read::<i32>(64, 16), [n * 10 + peer as i32; 16]);
        }
        ok(destroy(graph));
        drop(side);
        buf.free();
    });
    assert_clean();
}

#[test]
fn a_failing_lane_of_a_replay_stops_the_others_at_once() {
    let _g = test_lock();
    let (a, cfg) = (acl(), test_config());
    run_ranks(2, &cfg, |r| {
        let side = SideStream::new();
        let buf = DevBuf::new(r.rank, G);
        ok(begin(r.stream, 0));
        side.join(r.stream);
        // SAFETY: ranges inside `buf`; live handles.
        unsafe {
            hok((hccl().HcclAllReduce)(
                buf.at(0),
                buf.at(0),
                16,
                HcclDataType::HCCL_DATA_TYPE_FP32,
                HcclReduceOp::HCCL_REDUCE_SUM,
                r.comm,
                side.stream,
            ));
        }
        side.join_back(r.stream);
        // SAFETY: a live stream.
        unsafe {
            ok((a.aclrtLaunchHostFunc.unwrap())(
                r.stream,
                Some(count),
                null_mut(),
            ));
        }
        let graph = end(r.stream).unwrap();
        CALLS.store(0, Ordering::SeqCst);
        // Rank 1 leaves (its teardown destroys its communicator): rank 0's side lane fails
        // and its origin lane, waiting for the side's record, stops with it.
        if r.rank == 0 {
            let started = std::time::Instant::now();
            ok(replay(graph, r.stream));
            assert_eq!(r.sync(), ACL_ERROR_RT_INTERNAL_ERROR);
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
            assert_eq!(CALLS.load(Ordering::SeqCst), 0, "the origin lane stopped");
        }
        ok(destroy(graph));
        drop(side);
        buf.free();
    });
    assert_clean();
}

#[test]
fn a_task_that_panics_in_a_joined_lane_fails_the_replay_instead_of_hanging_it() {
    let _g = test_lock();
    let a = acl();
    // SAFETY: plain device binding.
    unsafe { ok((a.aclrtSetDevice)(0)) };
    let (s, side) = (stream(), SideStream::new());
    ok(begin(s, 0));
    side.join(s);
    // An emulator task that panics (no C call makes one): the origin's wait for the side's
    // record must not wait for ever.
    let side_stream = crate::acl::stream::lookup(StreamHandle::from_c(side.stream)).unwrap();
    let recipe: super::Recipe = std::sync::Arc::new(|| {
        Ok(
            Box::new(|| -> Result<(), crate::acl::stream::TaskFailure> { panic!("a task panics") })
                as _,
        )
    });
    ok(
        super::submit(&side_stream, StreamHandle::from_c(side.stream), recipe)
            .map_or_else(|f| f.code, |()| 0),
    );
    side.join_back(s);
    let graph = end(s).unwrap();
    ok(replay(graph, s));
    // SAFETY: a live stream.
    let synchronized = unsafe { (a.aclrtSynchronizeStream)(s) };
    assert_eq!(synchronized, ACL_ERROR_RT_INTERNAL_ERROR);
    ok(destroy(graph));
    drop((side, side_stream));
    // SAFETY: live handles, destroyed once.
    unsafe {
        ok((a.aclrtDestroyStream)(s));
        ok((a.aclrtResetDevice)(0));
    }
    assert_clean();
}
