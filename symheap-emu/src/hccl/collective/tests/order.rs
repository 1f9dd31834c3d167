//! A communicator's collectives on several streams: the host program must order them.

use std::ptr::null_mut;

use crate::sys::*;
use crate::test_lock;
use crate::testutil::{
    DevBuf, Rank, acl, assert_clean, gate, hccl, hok, ok, recent, run_ranks, test_config,
};

const F32: HcclDataType = HcclDataType::HCCL_DATA_TYPE_FP32;
const SUM: HcclReduceOp = HcclReduceOp::HCCL_REDUCE_SUM;

fn new_stream() -> aclrtStream {
    let mut s = null_mut();
    // SAFETY: a valid out-pointer; the caller destroys the stream.
    ok(unsafe { (acl().aclrtCreateStream)(&mut s) });
    s
}

fn destroy_stream(s: aclrtStream) {
    // SAFETY: a stream of `new_stream`, destroyed once.
    ok(unsafe { (acl().aclrtDestroyStream)(s) });
}

/// `stream` waits for what `on` has queued so far, through a fresh event.
fn join(stream: aclrtStream, on: aclrtStream) -> aclrtEvent {
    let a = acl();
    let mut e = null_mut();
    // SAFETY: valid out-pointer and live handles; the caller destroys the event.
    unsafe {
        ok((a.aclrtCreateEvent.unwrap())(&mut e));
        ok((a.aclrtRecordEvent.unwrap())(e, on));
        ok((a.aclrtStreamWaitEvent.unwrap())(stream, e));
    }
    e
}

/// An in-place sum of `slot`'s 4 floats (rank + 1 each) on `stream`.
fn all_reduce(r: &Rank, buf: &DevBuf, slot: usize, stream: aclrtStream) -> HcclResult {
    let p = buf.at(slot * 64);
    buf.write(slot * 64, &[r.rank as f32 + 1.0; 4]);
    // SAFETY: `p` holds 4 floats of the rank's device memory, live until the test ends.
    unsafe { (hccl().HcclAllReduce)(p, p, 4, F32, SUM, r.comm, stream) }
}

/// The sum every rank's slot holds once its all-reduce ran, for `n` ranks.
fn total(n: u32) -> Vec<f32> {
    vec![(1..=n).sum::<u32>() as f32; 4]
}

#[test]
fn a_collective_on_another_stream_with_nothing_between_is_refused_at_once() {
    let _g = test_lock();
    run_ranks(2, &test_config(), |r| {
        let buf = DevBuf::new(r.rank, crate::GRANULARITY);
        let other = new_stream();
        // The first collective cannot have run when the second is called.
        let open = gate(r.stream);
        hok(all_reduce(r, &buf, 0, r.stream));
        assert_eq!(all_reduce(r, &buf, 1, other), HcclResult::HCCL_E_PARA);
        let why = recent();
        assert!(why.contains("nothing orders the two"), "{why}");
        assert!(why.contains("collective #0"), "{why}");
        drop(open);
        // The refused call consumed its sequence number on every rank alike; the first
        // collective completes, and the next one on its stream too.
        ok(r.sync());
        assert_eq!(buf.read::<f32>(0, 4), total(r.n));
        hok(all_reduce(r, &buf, 2, r.stream));
        ok(r.sync());
        assert_eq!(buf.read::<f32>(128, 4), total(r.n));
        destroy_stream(other);
        buf.free();
    });
    assert_clean();
}

#[test]
fn events_and_synchronizes_order_collectives_across_streams() {
    let _g = test_lock();
    run_ranks(2, &test_config(), |r| {
        let a = acl();
        let buf = DevBuf::new(r.rank, crate::GRANULARITY);
        let (b, c) = (new_stream(), new_stream());
        let open = gate(r.stream);
        hok(all_reduce(r, &buf, 0, r.stream));
        // Directly: `b` waits for an event recorded after the first.
        let e1 = join(b, r.stream);
        hok(all_reduce(r, &buf, 1, b));
        // Through another stream: `c` waits for `b`, which waited for the first stream.
        let e2 = join(c, b);
        hok(all_reduce(r, &buf, 2, c));
        drop(open);
        ok(r.sync());
        // SAFETY: live streams.
        unsafe { ok((a.aclrtSynchronizeStream)(c)) };
        for slot in 0..3 {
            assert_eq!(buf.read::<f32>(slot * 64, 4), total(r.n), "slot {slot}");
        }
        // The host saw `c` done: a collective on the first stream follows it.
        hok(all_reduce(r, &buf, 3, r.stream));
        ok(r.sync());
        assert_eq!(buf.read::<f32>(3 * 64, 4), total(r.n));
        // SAFETY: events of `join`, destroyed once.
        unsafe {
            ok((a.aclrtDestroyEvent.unwrap())(e1));
            ok((a.aclrtDestroyEvent.unwrap())(e2));
        }
        destroy_stream(b);
        destroy_stream(c);
        buf.free();
    });
    assert_clean();
}
