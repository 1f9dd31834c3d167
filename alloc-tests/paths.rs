//! The path matrix: every collective kind the pool's rules cover, on buffers placed every way
//! (both in one window, one outside, in two windows, in another communicator's window), in AI
//! CPU and host expansion. `Comm::path` predicts each call's path, and the emulator's
//! counters say which path it took.

use symheap::raw::DevicePtr;
use symheap::sys::HcclDataType;
use symheap::{Collective, CollectivePath, Comm, CommConfig, ReduceOp, RootInfo, Runtime, Stream};

use crate::harness::{DeviceBuf, EmuSession};

const F32: HcclDataType = HcclDataType::HCCL_DATA_TYPE_FP32;
/// Elements per rank block: 1 KiB of f32.
const COUNT: u64 = 256;

/// Runs `kind` from `input` to `output` (each at least `2 * COUNT` f32 long).
///
/// # Safety
/// Both ranges are device memory of this rank that nothing else uses.
unsafe fn run(comm: &Comm, kind: Collective, input: DevicePtr, output: DevicePtr, s: &Stream) {
    // SAFETY: the caller's contract.
    unsafe {
        match kind {
            Collective::AllReduce => {
                comm.raw()
                    .all_reduce(input, output, COUNT, F32, ReduceOp::Sum, s)
            }
            Collective::AllGather => comm.raw().all_gather(input, output, COUNT, F32, s),
            Collective::ReduceScatter => {
                comm.raw()
                    .reduce_scatter(input, output, COUNT, F32, ReduceOp::Sum, s)
            }
            Collective::AlltoAll => comm.raw().all_to_all(input, output, COUNT, F32, s),
            Collective::Broadcast => comm.raw().broadcast(output, COUNT, F32, 0, s),
            _ => unreachable!("not in the matrix"),
        }
    }
    .unwrap();
}

/// How many symmetric collectives the emulator ran around `f`, once every rank is idle on
/// both sides (the barriers keep a peer's next call out of the count).
fn symmetric_during(comm: &Comm, stream: &Stream, f: impl FnOnce()) -> u64 {
    let idle = || {
        comm.barrier(stream).unwrap();
        comm.synchronize(stream).unwrap();
    };
    idle();
    let before = symheap::emu::testing::counters().symmetric_collectives;
    f();
    comm.synchronize(stream).unwrap();
    idle();
    symheap::emu::testing::counters().symmetric_collectives - before
}

#[test]
fn every_kind_on_every_placement_takes_the_path_predicted() {
    let session = EmuSession::start();
    let rt = Runtime::emulated().unwrap();
    const KINDS: [Collective; 5] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AlltoAll,
        Collective::Broadcast,
    ];
    for mode in [0u32, 1] {
        let config = CommConfig::new()
            .exec_timeout_secs(30)
            .op_expansion_mode(mode);
        let other_root = RootInfo::new(&rt).unwrap();
        let seen = symheap::emu::launch_with(&rt, 2, &config, |comm| {
            let stream = Stream::new(comm.runtime())?;
            let other = Comm::init(comm.runtime(), 2, &other_root, comm.rank(), &config)?;
            let bytes = 4 * 4 * COUNT;
            let (one, two) = (
                DeviceBuf::new(comm, bytes, true)?,
                DeviceBuf::new(comm, bytes, true)?,
            );
            let plain = DeviceBuf::new(comm, bytes, false)?;
            let foreign = DeviceBuf::new(&other, bytes, true)?;
            let half = 2 * 4 * COUNT;
            let placements = [
                ("both in one window", one.ptr(), one.ptr().byte_add(half)),
                ("input outside", plain.ptr(), one.ptr()),
                ("in two windows", one.ptr(), two.ptr()),
                (
                    "in another communicator's window",
                    foreign.ptr(),
                    foreign.ptr().byte_add(half),
                ),
            ];
            let mut seen = Vec::new();
            for (placement, input, output) in placements {
                for kind in KINDS {
                    let predicted = comm.path(kind, input, half, output, half)?;
                    // SAFETY: both halves are this rank's device memory, used by nothing else.
                    let took = symmetric_during(comm, &stream, || unsafe {
                        run(comm, kind, input, output, &stream)
                    });
                    let want = if predicted == CollectivePath::Symmetric {
                        2
                    } else {
                        0
                    };
                    assert_eq!(
                        took,
                        want,
                        "mode {mode}, {placement}, {}: {predicted}",
                        kind.c_name()
                    );
                    seen.push(predicted);
                }
            }
            drop(foreign);
            drop(other);
            Ok(seen)
        })
        .unwrap();
        // The matrix is not trivial: both paths occur where the mode allows windows.
        let symmetric = seen[0]
            .iter()
            .filter(|p| **p == CollectivePath::Symmetric)
            .count();
        assert_eq!(
            symmetric,
            if mode == 0 { 8 } else { 0 },
            "mode {mode}: {:?}",
            seen[0]
        );
    }
    session.assert_clean();
}
