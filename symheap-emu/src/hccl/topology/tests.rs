//! A communicator's topology: its rank graph from places, and through the C ABI: devices per node, the rank graph, windows refused
//! on a communicator spanning SuperPoDs and its collectives staged, windows across the nodes
//! of one SuperPoD.

use super::*;

use std::ptr::null_mut;

use crate::sys::{HcclDataType, HcclReduceOp, HcclResult};
use crate::test_lock;
use crate::testing::counters;
use crate::testutil::{
    DevBuf, Rank, acl, hccl, hok, ok, recent, register, run_ranks_at, test_config,
};

const G: usize = crate::GRANULARITY;

/// Per layer of a rank graph: the ranks of the rank's own instance, and every instance's size.
type Layers = Vec<(Vec<u32>, Vec<u32>)>;

/// The layers of `r`'s communicator: their ids, and each as [`Layers`] has it.
fn rank_graph(r: &Rank) -> (Vec<u32>, Layers) {
    let h = hccl();
    let (mut ids, mut count) = (null_mut(), 0u32);
    // SAFETY: a live communicator and valid out-pointers; the lists the emulator returns
    // live as long as the communicator and are copied at once.
    unsafe {
        hok(h.HcclRankGraphGetLayers.unwrap()(
            r.comm, &mut ids, &mut count,
        ));
        let ids = std::slice::from_raw_parts(ids, count as usize).to_vec();
        let layers = ids
            .iter()
            .map(|&layer| {
                let (mut ranks, mut n, mut sizes, mut m, mut size) =
                    (null_mut(), 0u32, null_mut(), 0u32, 0u32);
                hok(h.HcclRankGraphGetRanksByLayer.unwrap()(
                    r.comm, layer, &mut ranks, &mut n,
                ));
                hok(h.HcclRankGraphGetInstSizeListByLayer.unwrap()(
                    r.comm, layer, &mut sizes, &mut m,
                ));
                hok(h.HcclRankGraphGetRankSizeByLayer.unwrap()(
                    r.comm, layer, &mut size,
                ));
                assert_eq!(size, n, "the size of the rank's instance");
                (
                    std::slice::from_raw_parts(ranks, n as usize).to_vec(),
                    std::slice::from_raw_parts(sizes, m as usize).to_vec(),
                )
            })
            .collect();
        (ids, layers)
    }
}

/// An fp32 AllReduce of 4 elements from `send` to `recv` on `r`, synchronized: the result.
fn all_reduce(r: &Rank, send: &DevBuf, recv: &DevBuf) -> Vec<f32> {
    send.write(0, &[r.rank as f32 + 1.0; 4]);
    // SAFETY: mapped device buffers of the rank, a live communicator and stream.
    hok(unsafe {
        (hccl().HcclAllReduce)(
            send.ptr,
            recv.ptr,
            4,
            HcclDataType::HCCL_DATA_TYPE_FP32,
            HcclReduceOp::HCCL_REDUCE_SUM,
            r.comm,
            r.stream,
        )
    });
    ok(r.sync());
    recv.read(0, 4)
}

#[test]
fn device_ids_are_per_node() {
    let _g = test_lock();
    let a = acl();
    std::thread::scope(|s| {
        s.spawn(|| {
            crate::topology::set_thread_node(3, None).unwrap();
            let mut id = -1;
            let mut count = 0u32;
            // SAFETY: valid out-pointers.
            unsafe {
                ok(a.aclrtGetDeviceCount.unwrap()(&mut count));
                assert_eq!(count, crate::acl::device::count(), "the count is per node");
                ok((a.aclrtSetDevice)(0));
                ok((a.aclrtGetDevice)(&mut id));
            }
            assert_eq!(id, 0, "the id on the node");
            // Node 3's device 0 is a device of its own: its memory and its context. (A
            // thread `free_on` spawns is on the process's node, 0.)
            let (node0_before, here_before) =
                (crate::testutil::free_on(0), crate::testutil::free_here());
            let buf = DevBuf::new(0, G);
            assert_eq!(crate::testutil::free_here() + G, here_before);
            assert_eq!(crate::testutil::free_on(0), node0_before);
            let mode = crate::sys::aclrtFloatOverflowMode::ACL_RT_OVERFLOW_MODE_SATURATION;
            // SAFETY: plain calls on the bound device.
            ok(unsafe { a.aclrtSetDeviceSatMode.unwrap()(mode) });
            let node0 = crate::acl::device::Device { node: 0, id: 0 };
            let node3 = crate::acl::device::Device { node: 3, id: 0 };
            assert_eq!(crate::acl::device::sat_mode(node3), mode);
            assert_ne!(crate::acl::device::sat_mode(node0), mode);
            buf.free();
            // SAFETY: as above.
            ok(unsafe { (a.aclrtResetDevice)(0) });
            assert_ne!(
                crate::acl::device::sat_mode(node3),
                mode,
                "reset ends the context"
            );
        })
        .join()
        .unwrap();
    });
}

#[test]
fn a_communicator_spanning_superpods_has_no_windows_and_stages() {
    let _g = test_lock();
    // Ranks 0, 1 on node 0 (SuperPoD 0); ranks 2, 3 on node 1, a SuperPoD of its own; every
    // rank on device 0 of its node but rank 1 (device 1).
    let at = |rank: u32| {
        let node = rank / 2;
        (node, (rank % 2) as i32, Some(node))
    };
    let staged = counters().staged_collectives;
    let symmetric = counters().symmetric_collectives;
    let sums = run_ranks_at(4, &test_config(), at, |r| {
        let (ids, layers) = rank_graph(r);
        assert_eq!(ids, [0, 1, 2], "server, SuperPoD, and across SuperPoDs");
        let node = r.rank / 2;
        assert_eq!(layers[0], (vec![2 * node, 2 * node + 1], vec![2, 2]));
        assert_eq!(layers[1], (vec![2 * node, 2 * node + 1], vec![2, 2]));
        assert_eq!(layers[2], (vec![0, 1, 2, 3], vec![4]));
        let mut size = 0;
        // SAFETY: a live communicator, valid or null out-pointers.
        unsafe {
            let by_layer = hccl().HcclRankGraphGetRankSizeByLayer.unwrap();
            assert_eq!(by_layer(r.comm, 3, &mut size), HcclResult::HCCL_E_PARA);
            assert!(recent().contains("netLayer 3"));
            assert_eq!(by_layer(r.comm, 0, null_mut()), HcclResult::HCCL_E_PTR);
            assert_eq!(by_layer(null_mut(), 0, &mut size), HcclResult::HCCL_E_PTR);
        }
        let device = at(r.rank).1 as u32;
        let (send, recv) = (DevBuf::new(device, G), DevBuf::new(device, G));
        let mut win = null_mut();
        let reg = hccl().HcclCommSymWinRegister.unwrap();
        // SAFETY: a live communicator, mapped memory, a valid out-pointer.
        let code = unsafe { reg(r.comm, send.ptr, G as u64, &mut win, 1) };
        assert_eq!(code, HcclResult::HCCL_E_NOT_SUPPORT);
        assert!(recent().contains("2 SuperPoDs"));
        assert!(win.is_null());
        let sum = all_reduce(r, &send, &recv);
        send.free();
        recv.free();
        sum
    });
    assert!(sums.iter().all(|s| *s == [10.0; 4]), "{sums:?}");
    assert_eq!(counters().staged_collectives - staged, 4);
    assert_eq!(counters().symmetric_collectives, symmetric);
}

#[test]
fn windows_work_across_the_nodes_of_one_superpod() {
    let _g = test_lock();
    // Two nodes of two ranks, interleaved, in one SuperPoD (the default 24 nodes per
    // SuperPoD): each node's devices 0 and 1.
    let at = |rank: u32| (rank % 2, (rank / 2) as i32, None);
    let symmetric = counters().symmetric_collectives;
    let sums = run_ranks_at(4, &test_config(), at, |r| {
        let (ids, layers) = rank_graph(r);
        assert_eq!(ids, [0, 1]);
        let node = r.rank % 2;
        assert_eq!(layers[0], (vec![node, node + 2], vec![2, 2]));
        assert_eq!(layers[1], (vec![0, 1, 2, 3], vec![4]));
        let device = at(r.rank).1 as u32;
        let buf = DevBuf::new(device, 2 * G);
        let win = register(r, &buf);
        let (send, recv) = (buf_view(&buf, 0), buf_view(&buf, G));
        let sum = all_reduce(r, &send, &recv);
        crate::testutil::deregister(win);
        buf.free();
        sum
    });
    assert!(sums.iter().all(|s| *s == [10.0; 4]), "{sums:?}");
    assert_eq!(counters().symmetric_collectives - symmetric, 4);
}

/// `size` bytes of `buf` from `offset`, as a buffer of its own (never freed on its own).
fn buf_view(buf: &DevBuf, offset: usize) -> DevBuf {
    DevBuf {
        ptr: buf.at(offset),
        size: buf.size - offset,
        phys: buf.phys,
    }
}

#[test]
fn a_rank_placed_explicitly_is_where_it_says() {
    let _g = test_lock();
    use crate::acl::node::Place;
    use crate::hccl::comm;
    let root = comm::get_root_info().unwrap();
    let places = [
        Place {
            node: 0,
            superpod: 0,
        },
        Place {
            node: 5,
            superpod: 1,
        },
    ];
    let spans = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..2u32)
            .map(|rank| {
                let root = &root;
                s.spawn(move || {
                    // Both threads are on node 0; the explicit places win.
                    // SAFETY: plain device binding.
                    ok(unsafe { (acl().aclrtSetDevice)(rank as i32) });
                    let config = test_config();
                    let handle =
                        comm::init_placed(2, root, rank, &config, places[rank as usize]).unwrap();
                    let c = comm::lookup(handle).unwrap();
                    let seen = (c.topology.spans_superpods(), c.topology.place(1 - rank));
                    drop(c);
                    comm::destroy(handle).unwrap();
                    // SAFETY: as above.
                    ok(unsafe { (acl().aclrtResetDevice)(rank as i32) });
                    seen
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(spans, [(true, places[1]), (true, places[0])]);
}

/// Where rank `r` is: its node, its device there, its SuperPoD if given.
type At = fn(u32) -> (u32, i32, Option<u32>);

#[test]
fn one_rank_per_node_or_uneven_nodes_stage_on_windows() {
    let _g = test_lock();
    // Two nodes of one rank (each device 0), then nodes of 2 and 1 ranks: windows register
    // (one SuperPoD), yet HCCL's symmetric path needs the same count, above one, per node.
    let layouts: [(u32, At); 2] = [
        (2, |rank| (rank, 0, None)),
        (3, |rank| (rank / 2, (rank % 2) as i32, None)),
    ];
    for (n, at) in layouts {
        let staged = counters().staged_collectives;
        let symmetric = counters().symmetric_collectives;
        let sums = run_ranks_at(n, &test_config(), at, |r| {
            let buf = DevBuf::new(at(r.rank).1 as u32, 2 * G);
            let win = register(r, &buf);
            let sum = all_reduce(r, &buf_view(&buf, 0), &buf_view(&buf, G));
            crate::testutil::deregister(win);
            buf.free();
            sum
        });
        let total = (1..=n).sum::<u32>() as f32;
        assert!(sums.iter().all(|s| *s == [total; 4]), "{sums:?}");
        assert_eq!(counters().symmetric_collectives, symmetric, "{n} ranks");
        assert_eq!(counters().staged_collectives - staged, u64::from(n));
    }
}

// The topology from places, without the C ABI.

fn at(node: u32, superpod: u32) -> Place {
    Place { node, superpod }
}

#[test]
fn a_word_carries_a_place_both_ways() {
    for p in [at(0, 0), at(23, 0), at(4095, 170), at(7, 4095)] {
        assert_eq!(place_of(word(p)), p);
    }
}

#[test]
fn one_node_has_one_layer() {
    let t = Topology::new(vec![at(0, 0); 4], 2);
    assert_eq!(t.layer_ids, [0]);
    assert_eq!(t.layers[0].ranks, [0, 1, 2, 3]);
    assert_eq!(t.layers[0].instance_sizes, [4]);
    assert!(!t.spans_superpods());
    assert!(!t.nodes_rule_out_windows());
    assert!(
        !Topology::new(vec![at(0, 0)], 0).nodes_rule_out_windows(),
        "one rank"
    );
}

#[test]
fn nodes_of_one_superpod_have_two_layers_as_hccl_s_rank_graph() {
    // Two nodes of two ranks each, the ranks interleaved.
    let t = Topology::new(vec![at(0, 0), at(1, 0), at(0, 0), at(1, 0)], 1);
    assert_eq!(t.layer_ids, [0, 1]);
    assert_eq!(t.layers[0].ranks, [1, 3], "rank 1's node");
    assert_eq!(t.layers[0].instance_sizes, [2, 2]);
    assert_eq!(t.layers[1].ranks, [0, 1, 2, 3], "its SuperPoD");
    assert_eq!(t.layers[1].instance_sizes, [4]);
    assert!(!t.spans_superpods());
    assert!(!t.nodes_rule_out_windows());
    assert_eq!(t.place(3), at(1, 0));
}

#[test]
fn superpods_add_a_third_layer_and_span() {
    // Nodes 0 and 1 in SuperPoD 0, node 2 in SuperPoD 1.
    let places = vec![at(0, 0), at(0, 0), at(1, 0), at(2, 1), at(2, 1)];
    let t = Topology::new(places, 3);
    assert_eq!(t.layer_ids, [0, 1, 2]);
    assert_eq!(t.layers[0].ranks, [3, 4]);
    assert_eq!(t.layers[0].instance_sizes, [2, 1, 2]);
    assert_eq!(t.layers[1].ranks, [3, 4], "rank 3's SuperPoD");
    assert_eq!(t.layers[1].instance_sizes, [3, 2]);
    assert_eq!(t.layers[2].ranks, [0, 1, 2, 3, 4]);
    assert_eq!(t.layers[2].instance_sizes, [5]);
    assert!(t.spans_superpods());
    assert_eq!(t.superpod_count(), 2);
    assert!(t.nodes_rule_out_windows(), "nodes of 2, 1 and 2 ranks");
}

#[test]
fn one_node_per_superpod_skips_no_layer() {
    // Two one-node SuperPoDs: more than one node, so layer 1 exists (each SuperPoD).
    let t = Topology::new(vec![at(0, 0), at(1, 1)], 0);
    assert_eq!(t.layer_ids, [0, 1, 2]);
    assert_eq!(t.layers[1].ranks, [0]);
    assert!(t.nodes_rule_out_windows(), "one rank per node");
}
