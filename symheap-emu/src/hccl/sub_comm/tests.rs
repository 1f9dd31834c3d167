//! Sub-communicators through the C entry points, with threads as ranks.

use std::ffi::c_void;
use std::ptr::null_mut;

use crate::sys::*;
use crate::testutil::{
    DevBuf, Rank, acl, assert_clean, free_here, free_on, hccl, hok, ok, recent, run_ranks,
    test_config,
};
use crate::{GRANULARITY as G, test_lock};

const PARA: HcclResult = HcclResult::HCCL_E_PARA;
const PTR: HcclResult = HcclResult::HCCL_E_PTR;
const F32: HcclDataType = HcclDataType::HCCL_DATA_TYPE_FP32;
const SUM: HcclReduceOp = HcclReduceOp::HCCL_REDUCE_SUM;

/// `HcclCreateSubCommConfig` on `global` with `ids` (`None`: the non-member form).
fn split(
    global: HcclComm,
    ids: Option<&[u32]>,
    id: u64,
    sub_rank: u32,
    config: &HcclCommConfig,
) -> Result<HcclComm, HcclResult> {
    let create = hccl().HcclCreateSubCommConfig.expect("filled");
    let mut global = global;
    let mut config = *config;
    let mut ids = ids.map(<[u32]>::to_vec);
    let (n, ptr) = match &mut ids {
        Some(v) => (v.len() as u32, v.as_mut_ptr()),
        None => (0, null_mut()),
    };
    let mut sub = null_mut();
    // SAFETY: valid pointers; the emulator validates the handle.
    let code = unsafe { create(&mut global, n, ptr, id, sub_rank, &mut config, &mut sub) };
    if code == HcclResult::HCCL_SUCCESS {
        Ok(sub)
    } else {
        Err(code)
    }
}

/// This rank's index in `ids`, and a split with it.
fn join(r: &Rank, ids: &[u32], id: u64, config: &HcclCommConfig) -> HcclComm {
    let me = ids.iter().position(|&g| g == r.rank).unwrap() as u32;
    match split(r.comm, Some(ids), id, me, config) {
        Ok(sub) => sub,
        Err(code) => panic!("rank {}: {code:?}: {}", r.rank, recent()),
    }
}

fn destroy(comm: HcclComm) {
    // SAFETY: a live communicator, destroyed once.
    hok(unsafe { (hccl().HcclCommDestroy)(comm) });
}

fn rank_and_size(comm: HcclComm) -> (u32, u32) {
    let (mut rank, mut size) = (0, 0);
    // SAFETY: valid out-pointers.
    unsafe {
        hok((hccl().HcclGetRankId)(comm, &mut rank));
        hok((hccl().HcclGetRankSize)(comm, &mut size));
    }
    (rank, size)
}

fn name_of(comm: HcclComm) -> String {
    let mut name = [0 as std::ffi::c_char; COMM_NAME_MAX_LENGTH];
    // SAFETY: room for the longest name.
    hok(unsafe { (hccl().HcclGetCommName.unwrap())(comm, name.as_mut_ptr()) });
    // SAFETY: NUL-terminated by the call.
    unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// All-reduces `value` (8 floats) on `comm` through `buf` and returns the sum.
fn all_reduce(r: &Rank, comm: HcclComm, buf: &DevBuf, value: f32) -> f32 {
    buf.write(0, &[value; 8]);
    // SAFETY: both ranges lie in `buf`.
    hok(unsafe { (hccl().HcclAllReduce)(buf.at(0), buf.at(64), 8, F32, SUM, comm, r.stream) });
    ok(r.sync());
    let out: Vec<f32> = buf.read(64, 8);
    assert!(out.iter().all(|&v| v == out[0]), "{out:?}");
    out[0]
}

#[test]
fn the_argument_checks_come_in_hccls_order_with_its_codes() {
    let _g = test_lock();
    let cfg = test_config();
    run_ranks(2, &cfg, |r| {
        let create = hccl().HcclCreateSubCommConfig.unwrap();
        let mut global = r.comm;
        let mut c = cfg;
        let mut ids = [0u32, 1];
        let mut sub = null_mut();
        // SAFETY: every pointer is valid or NULL; the emulator checks them.
        unsafe {
            let ids = ids.as_mut_ptr();
            assert_eq!(
                create(&mut global, 2, ids, 1, r.rank, &mut c, null_mut()),
                PTR
            );
            // Not a member: success, nothing written, whatever else is passed.
            let not = 0xFFFF_FFFF;
            assert_eq!(
                create(null_mut(), 9, null_mut(), not, 7, null_mut(), &mut sub),
                HcclResult::HCCL_SUCCESS
            );
            assert!(sub.is_null());
            assert_eq!(
                create(&mut global, 2, null_mut(), 1, r.rank, &mut c, &mut sub),
                PARA
            );
            assert_eq!(
                create(&mut global, 2, ids, not, r.rank, &mut c, &mut sub),
                PARA
            );
            assert_eq!(create(&mut global, 0, ids, 1, 0, &mut c, &mut sub), PARA);
            assert_eq!(create(&mut global, 2, ids, 1, 2, &mut c, &mut sub), PARA);
            assert_eq!(
                create(&mut global, 2, ids, 1, r.rank, null_mut(), &mut sub),
                PTR
            );
            assert_eq!(create(null_mut(), 2, ids, 1, r.rank, &mut c, &mut sub), PTR);
            let mut none: HcclComm = null_mut();
            assert_eq!(create(&mut none, 2, ids, 1, r.rank, &mut c, &mut sub), PTR);
            assert_eq!(
                create(&mut global, 3, ids, 1, r.rank, &mut c, &mut sub),
                PARA
            );
            assert!(recent().contains("exceeds"), "{}", recent());
            let mut bad = c;
            bad.reserved[8] ^= 1;
            assert_eq!(
                create(&mut global, 2, ids, 1, r.rank, &mut bad, &mut sub),
                PARA
            );
            assert!(sub.is_null());
        }
        assert_eq!(split(r.comm, Some(&[1, 1]), 1, 0, &cfg), Err(PARA));
        assert!(recent().contains("appears twice"), "{}", recent());
        assert_eq!(split(r.comm, Some(&[0, 2]), 1, 0, &cfg), Err(PARA));
        assert!(recent().contains("not a rank"), "{}", recent());
        // Index 1 - r is the other rank's place.
        assert_eq!(split(r.comm, Some(&[0, 1]), 1, 1 - r.rank, &cfg), Err(PARA));
        assert!(recent().contains("subCommRankId must be"), "{}", recent());
    });
    assert_clean();
}

#[test]
fn a_world_of_4_splits_into_pairs_both_ways_and_each_reduces_alone() {
    let _g = test_lock();
    let cfg = test_config();
    run_ranks(4, &cfg, |r| {
        // Tensor-parallel pairs {0,1} {2,3}, data-parallel pairs {0,2} {1,3}.
        let tp_ids = [r.rank & !1, r.rank | 1];
        let dp_ids = [r.rank & 1, (r.rank & 1) + 2];
        let tp = join(r, &tp_ids, 10 + u64::from(r.rank / 2), &cfg);
        let dp = join(r, &dp_ids, 20 + u64::from(r.rank % 2), &cfg);
        assert_eq!(rank_and_size(tp), (r.rank % 2, 2));
        assert_eq!(rank_and_size(dp), (r.rank / 2, 2));
        let global = name_of(r.comm);
        assert_eq!(name_of(tp), format!("{global}_sub_{}", 10 + r.rank / 2));
        let buf = DevBuf::new(r.rank, G);
        let v = r.rank as f32 + 1.0;
        // Interleaved on one stream: each group's sequence numbers are its own.
        for _ in 0..3 {
            assert_eq!(
                all_reduce(r, tp, &buf, v),
                (tp_ids[0] + tp_ids[1] + 2) as f32
            );
            assert_eq!(
                all_reduce(r, dp, &buf, v),
                (dp_ids[0] + dp_ids[1] + 2) as f32
            );
            assert_eq!(all_reduce(r, r.comm, &buf, v), 10.0);
        }
        // A sub-communicator cannot be split again.
        assert_eq!(
            split(tp, Some(&[0]), 1, 0, &cfg),
            Err(HcclResult::HCCL_E_INTERNAL)
        );
        // Nor may a live one's name be taken; once destroyed it may.
        assert_eq!(
            split(
                r.comm,
                Some(&tp_ids),
                10 + u64::from(r.rank / 2),
                r.rank % 2,
                &cfg
            ),
            Err(PARA)
        );
        assert!(recent().contains("in use"), "{}", recent());
        destroy(dp);
        destroy(tp);
        let again = join(r, &tp_ids, 10 + u64::from(r.rank / 2), &cfg);
        assert_eq!(
            all_reduce(r, again, &buf, v),
            (tp_ids[0] + tp_ids[1] + 2) as f32
        );
        destroy(again);
        buf.free();
    });
    assert_clean();
}

#[test]
fn members_that_pass_different_configs_all_fail_naming_the_first_that_differs() {
    let _g = test_lock();
    let cfg = test_config();
    run_ranks(3, &cfg, |r| {
        let mut mine = cfg;
        if r.rank == 2 {
            mine.hcclExecTimeOut = 20;
        }
        let got = split(r.comm, Some(&[0, 2]), 5, r.rank / 2, &mine);
        if r.rank == 1 {
            assert!(split(r.comm, None, 0xFFFF_FFFF, 0, &mine).is_ok());
            return;
        }
        assert_eq!(got, Err(PARA), "rank {}", r.rank);
        let why = recent();
        assert!(
            why.contains("sub-communicator rank 1 passed an exec timeout of 20000 ms"),
            "{why}"
        );
        // Nothing is left: the same call, alike, then works.
        let sub = join(r, &[0, 2], 5, &cfg);
        destroy(sub);
    });
    assert_clean();
}

#[test]
fn one_allocation_registered_in_the_world_and_its_pair_has_a_window_in_each() {
    let _g = test_lock();
    let mut cfg = test_config();
    cfg.hcclOpExpansionMode = 2;
    let before = crate::testing::counters().symmetric_collectives;
    run_ranks(4, &cfg, |r| {
        let ids = [r.rank & !1, r.rank | 1];
        let tp = join(r, &ids, 1 + u64::from(r.rank / 2), &cfg);
        let reg = hccl().HcclCommSymWinRegister.unwrap();
        let get = hccl().HcclCommSymWinGet.unwrap();
        let in_both = DevBuf::new(r.rank, G);
        let world_only = DevBuf::new(r.rank, G);
        let (mut w_world, mut w_tp, mut w_other) = (null_mut(), null_mut(), null_mut());
        // SAFETY: live communicators, mapped memory, valid out-pointers.
        unsafe {
            hok(reg(r.comm, in_both.ptr, G as u64, &mut w_world, 1));
            hok(reg(tp, in_both.ptr, G as u64, &mut w_tp, 1));
            hok(reg(r.comm, world_only.ptr, G as u64, &mut w_other, 1));
        }
        assert_ne!(w_world, w_tp, "each communicator has its own window");
        let found = |comm, buf: &DevBuf| {
            let (mut win, mut off) = (null_mut::<c_void>(), 0usize);
            // SAFETY: valid out-pointers.
            let code = unsafe { get(comm, buf.at(64), 8, &mut win, &mut off) };
            (code, win, off)
        };
        assert_eq!(
            found(r.comm, &in_both),
            (HcclResult::HCCL_SUCCESS, w_world, 64)
        );
        assert_eq!(found(tp, &in_both), (HcclResult::HCCL_SUCCESS, w_tp, 64));
        assert_eq!(
            found(tp, &world_only).0,
            HcclResult::HCCL_E_NOT_FOUND,
            "not in the pair"
        );
        let v = r.rank as f32;
        // The pair's collective on memory of its own window is symmetric; the same on
        // memory registered only in the world stages. Both are correct.
        assert_eq!(all_reduce(r, tp, &in_both, v), (ids[0] + ids[1]) as f32);
        assert_eq!(all_reduce(r, tp, &world_only, v), (ids[0] + ids[1]) as f32);
        assert_eq!(all_reduce(r, r.comm, &in_both, v), 6.0);
        let dereg = hccl().HcclCommSymWinDeregister.unwrap();
        // SAFETY: windows registered above.
        unsafe {
            hok(dereg(w_tp));
            hok(dereg(w_other));
            hok(dereg(w_world));
        }
        destroy(tp);
        in_both.free();
        world_only.free();
    });
    // Each rank ran the pair's in-window reduction and the world's symmetrically: 8; the
    // pair's on world-only memory staged.
    assert_eq!(crate::testing::counters().symmetric_collectives - before, 8);
    assert_clean();
}

#[test]
fn two_groups_run_side_by_side_on_two_streams_of_each_rank() {
    let _g = test_lock();
    let cfg = test_config();
    run_ranks(4, &cfg, |r| {
        let tp_ids = [r.rank & !1, r.rank | 1];
        let dp_ids = [r.rank & 1, (r.rank & 1) + 2];
        let tp = join(r, &tp_ids, 1 + u64::from(r.rank / 2), &cfg);
        let dp = join(r, &dp_ids, 3 + u64::from(r.rank % 2), &cfg);
        let (tp_buf, dp_buf) = (DevBuf::new(r.rank, G), DevBuf::new(r.rank, G));
        let mut other = null_mut();
        // SAFETY: a valid out-pointer.
        ok(unsafe { (crate::testutil::acl().aclrtCreateStream)(&mut other) });
        // Each group's collectives from a host thread of their own, on a stream of their own.
        let me = r.rank;
        std::thread::scope(|s| {
            let run = move |comm: usize, buf: &DevBuf, stream: usize, ids: [u32; 2]| {
                let (comm, stream) = (comm as HcclComm, stream as aclrtStream);
                // SAFETY: binds this thread to the rank's device.
                ok(unsafe { (crate::testutil::acl().aclrtSetDevice)(me as i32) });
                for i in 0..50u32 {
                    buf.write(0, &[(me + i) as f32; 8]);
                    // SAFETY: both ranges lie in `buf`.
                    hok(unsafe {
                        (hccl().HcclAllReduce)(buf.at(0), buf.at(64), 8, F32, SUM, comm, stream)
                    });
                    // SAFETY: a live stream.
                    ok(unsafe { (crate::testutil::acl().aclrtSynchronizeStream)(stream) });
                    let want = (ids[0] + ids[1] + 2 * i) as f32;
                    assert_eq!(buf.read::<f32>(64, 8), [want; 8]);
                }
            };
            let (a, b) = (r.stream as usize, other as usize);
            let (tpb, dpb) = (&tp_buf, &dp_buf);
            let (tpc, dpc) = (tp as usize, dp as usize);
            s.spawn(move || run(tpc, tpb, a, tp_ids));
            s.spawn(move || run(dpc, dpb, b, dp_ids));
        });
        // SAFETY: made above, idle.
        ok(unsafe { (crate::testutil::acl().aclrtDestroyStream)(other) });
        destroy(dp);
        destroy(tp);
        tp_buf.free();
        dp_buf.free();
    });
    assert_clean();
}

/// Every communicator, sub-communicators too, takes HCCL's buffers from its device's memory
/// until it is destroyed: one allocation of the input and output CCL buffers
/// (`hcclBufferSize` MiB each, 200 by default) and the 1 MiB expansion buffer, counted as
/// `aclrtMalloc` counts (rounded up to 32 bytes, plus 32). Too little device memory fails
/// init with `HCCL_E_OOM`.
#[test]
fn every_communicator_takes_hccls_buffers_from_its_device() {
    let _g = test_lock();
    const MB: usize = 1 << 20;
    let took = |mb: usize| 2 * mb * MB + MB + 32;
    let before = [free_on(0), free_on(1)];
    let mut cfg = test_config();
    cfg.hcclBufferSize = 8;
    run_ranks(2, &cfg, |r| {
        let mine = before[r.rank as usize];
        assert_eq!(mine - free_here(), took(8));
        let mut sub_cfg = test_config();
        sub_cfg.hcclBufferSize = 4;
        let sub = join(r, &[0, 1], 7, &sub_cfg);
        assert_eq!(mine - free_here(), took(8) + took(4));
        destroy(sub);
        assert_eq!(mine - free_here(), took(8));
    });
    assert_eq!([free_on(0), free_on(1)], before);
    run_ranks(1, &test_config(), |_| {
        assert_eq!(before[0] - free_here(), took(200), "the default size");
    });
    assert_eq!(free_on(0), before[0]);

    // Not enough device memory for the buffers.
    crate::testing::set_device_memory_limit(took(200) as u64 - 32);
    let (a, h) = (acl(), hccl());
    let (mut root, mut comm) = (HcclRootInfo::default(), null_mut());
    let config = test_config();
    // SAFETY: valid pointers; the device is unbound below.
    unsafe {
        hok((h.HcclGetRootInfo)(&mut root));
        ok((a.aclrtSetDevice)(0));
        let code = (h.HcclCommInitRootInfoConfig)(1, &root, 0, &config, &mut comm);
        assert_eq!(code, HcclResult::HCCL_E_OOM, "{}", recent());
        assert!(recent().contains("hcclBufferSize 200 MiB"), "{}", recent());
        ok((a.aclrtResetDevice)(0));
    }
    crate::testing::set_device_memory_limit(0);
    assert_clean();
}
