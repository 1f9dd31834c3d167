//! Grouped calls: `HcclGroupStart` / `HcclGroupEnd` / `HcclGroupStatusGet`.
//!
//! As in HCCL (hicann/hcomm `src/legacy/ascend910/framework/group/hccl_group.cc` and
//! `src/coll_communicator_mgr/api_c_adpt/coll_comm_res_c_adpt.cc`), a group belongs to the
//! calling thread and nests: `HcclGroupStart` counts up, `HcclGroupEnd` counts down and only
//! the outermost one issues what the group kept. Between them, `HcclSend` / `HcclRecv` and the
//! collectives HCCL groups (every one but `HcclBarrier`) are checked and kept, taking no
//! sequence or message number. The outermost `HcclGroupEnd` then issues, communicator by
//! communicator in the order each was first named in the group:
//! - its sends and receives as one batch on the stream of its first one (as
//!   `HcclBatchSendRecv` runs a batch: every item progresses at once, so a ring of sends and
//!   receives that would wait for each other one by one completes);
//! - its collectives, largest first (bytes of the call, a stable order among equals), the V
//!   collectives last in call order, as HCCL's `sortGroupTasks` orders them;
//!
//! and waits for the streams of the group's collectives, as HCCL's `groupLaunch` does.
//!
//! `HcclCommInitRootInfo(Config)` and `HcclCommDestroy` inside a group are kept too, and the
//! outermost `HcclGroupEnd` runs them all at once, each on a thread of its own bound to the
//! device of the thread that called it, as HCCL's `asyncJobLaunch` does. A group holds one kind
//! of call (communicator management, point-to-point or collective), as CANN's docs require.

use std::cell::RefCell;

use crate::sys::HcclResult;
use symheap_types::DataType;

use crate::acl::stream;
use crate::base::errors::{Fail, HcclRes, hccl_fail, hccl_non_null, para};
use crate::base::handle::{CommHandle, StreamHandle};
use crate::hccl::comm;
use crate::hccl::p2p;

thread_local! {
    /// The calling thread's group (HCCL's `hcclGroupDepth` and planners are thread-local).
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

/// A thread's group: how deeply it is open and what it kept.
#[derive(Default)]
struct Group {
    depth: u32,
    /// What the group holds: CANN's docs forbid mixing kinds in one group.
    kind: Option<Kind>,
    /// Per communicator, in the order each was first named.
    members: Vec<Member>,
    /// Communicator inits and destroys, in call order.
    jobs: Vec<Job>,
}

/// The kinds of call a group may hold (CANN: "in one group call, communicator management,
/// collective and point-to-point calls may not be mixed").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Management,
    PointToPoint,
    Collective,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Management => "communicator management (HcclCommInitRootInfo*, HcclCommDestroy)",
            Kind::PointToPoint => "point-to-point calls (HcclSend / HcclRecv)",
            Kind::Collective => "collectives",
        }
    }
}

/// A communicator init or destroy kept for `HcclGroupEnd`, which runs it on a thread of its
/// own bound to the device (and on the node) of the thread that called it.
struct Job {
    name: &'static str,
    device: crate::acl::device::Device,
    place: crate::acl::node::Place,
    run: Box<dyn FnOnce() -> HcclRes + Send>,
}

/// What a group kept for one communicator.
struct Member {
    comm: CommHandle,
    /// The stream of its first send or receive, which the batch runs on.
    p2p_stream: Option<StreamHandle>,
    items: Vec<p2p::Item>,
    collectives: Vec<Deferred>,
}

/// A collective kept for `HcclGroupEnd`.
pub(crate) struct Deferred {
    /// The C function, for messages.
    pub(crate) name: String,
    /// Bytes it moves per rank, as HCCL's `calcOpDataVolume` counts them; `None` for a V
    /// collective (issued after the others).
    pub(crate) volume: Option<u64>,
    /// The stream it is queued on.
    pub(crate) stream: StreamHandle,
    /// Issues the call: takes its sequence number and queues it.
    pub(crate) issue: Box<dyn FnOnce() -> HcclRes>,
}

/// HCCL's `calcOpDataVolume` of a non-V collective: `count` elements of `dtype`.
pub(crate) fn volume(count: u64, dtype: crate::sys::HcclDataType) -> u64 {
    let size = DataType::try_from(dtype).map_or(0, |t| t.size() as u64);
    count.saturating_mul(size)
}

/// `HcclGroupStart`: opens a group, or nests one more level.
pub(crate) fn start() -> HcclRes {
    GROUP.with_borrow_mut(|g| match g.depth.checked_add(1) {
        Some(depth) => {
            g.depth = depth;
            Ok(())
        }
        None => hccl_fail(
            HcclResult::HCCL_E_INTERNAL,
            "HcclGroupStart nested too deeply",
        ),
    })
}

/// Whether the calling thread is inside a group (what `HcclGroupStatusGet` answers, and
/// whether a groupable call is kept).
pub(crate) fn is_open() -> bool {
    GROUP.with_borrow(|g| g.depth > 0)
}

/// Fails unless the group may take a call of `kind`; records the kind.
fn admit(g: &mut Group, kind: Kind) -> HcclRes {
    match g.kind {
        Some(held) if held != kind => hccl_fail(
            HcclResult::HCCL_E_NOT_SUPPORT,
            format!(
                "this group already holds {}: CANN does not allow {} in the same group \
                 (hicann/hcomm docs/zh/api_ref/comm_mgr_c/HcclGroupStart.md)",
                held.describe(),
                kind.describe()
            ),
        ),
        _ => {
            g.kind = Some(kind);
            Ok(())
        }
    }
}

/// The entry of `comm` in the group, made if it is the first call naming it.
fn member(g: &mut Group, comm: CommHandle) -> &mut Member {
    let at = match g.members.iter().position(|m| m.comm == comm) {
        Some(at) => at,
        None => {
            g.members.push(Member {
                comm,
                p2p_stream: None,
                items: Vec::new(),
                collectives: Vec::new(),
            });
            g.members.len() - 1
        }
    };
    &mut g.members[at]
}

/// `HcclSend` / `HcclRecv` inside a group: checks `item` as the call would (nothing is kept
/// for a count of 0) and keeps it for `HcclGroupEnd`.
pub(crate) fn keep_send_recv(comm: CommHandle, stream: StreamHandle, item: p2p::Item) -> HcclRes {
    let c = comm::lookup(comm)?;
    hccl_non_null(stream.raw(), "stream")?;
    stream::lookup(stream).map_err(crate::hccl::collective::stream_error)?;
    if !p2p::check(&c, &item)? {
        return Ok(());
    }
    GROUP.with_borrow_mut(|g| {
        admit(g, Kind::PointToPoint)?;
        let m = member(g, comm);
        m.p2p_stream.get_or_insert(stream);
        m.items.push(item);
        Ok(())
    })
}

/// A collective inside a group: checks that it names a live communicator and a stream, and
/// keeps it for `HcclGroupEnd` (its other checks are made when it is issued).
pub(crate) fn keep_collective(comm: *mut std::ffi::c_void, deferred: Deferred) -> HcclRes {
    let handle = CommHandle::from_c(comm);
    comm::lookup(handle)?;
    hccl_non_null(deferred.stream.raw(), "stream")?;
    GROUP.with_borrow_mut(|g| {
        admit(g, Kind::Collective)?;
        member(g, handle).collectives.push(deferred);
        Ok(())
    })
}

/// `HcclCommInitRootInfo(Config)` or `HcclCommDestroy` (`name`) inside a group: kept, with the
/// calling thread's device (none is `HCCL_E_RUNTIME`, as init without a device is), and run by
/// `HcclGroupEnd` on a thread of its own bound to that device, all of the group's at once (so
/// one thread can make the communicators of several devices, as CANN's group does).
pub(crate) fn keep_management(
    name: &'static str,
    run: impl FnOnce() -> HcclRes + Send + 'static,
) -> HcclRes {
    let device = crate::acl::device::current().or_else(|e| {
        hccl_fail(
            HcclResult::HCCL_E_RUNTIME,
            format!("{name} in a group: {}", e.msg),
        )
    })?;
    let place = crate::acl::node::current_place().or_else(|e| para(e.msg))?;
    GROUP.with_borrow_mut(|g| {
        admit(g, Kind::Management)?;
        g.jobs.push(Job {
            name,
            device,
            place,
            run: Box::new(run),
        });
        Ok(())
    })
}

/// Runs the group's inits and destroys, each on a thread of its own bound to its device, and
/// waits for all of them: the first failure in call order.
fn run_jobs(jobs: Vec<Job>) -> HcclRes {
    let threads: Vec<_> = jobs
        .into_iter()
        .enumerate()
        .map(|(i, job)| {
            let Job {
                name,
                device,
                place,
                run,
            } = job;
            let spawned = std::thread::Builder::new()
                .name(format!("symheap-emu-group-{i}"))
                .spawn(move || {
                    // The device's node (the thread may have moved since it set the device);
                    // its SuperPoD as the caller saw it when still on that node.
                    let superpod = (place.node == device.node).then_some(place.superpod);
                    crate::acl::node::set_thread_node(device.node, superpod)
                        .or_else(|why| hccl_fail(HcclResult::HCCL_E_RUNTIME, why))?;
                    crate::acl::device::set(device.id as i32)
                        .or_else(|e| hccl_fail(HcclResult::HCCL_E_RUNTIME, e.msg))?;
                    run()
                });
            (i, name, device, spawned)
        })
        .collect();
    let mut first = Ok(());
    for (i, name, device, spawned) in threads {
        let outcome = match spawned {
            Ok(thread) => thread.join().unwrap_or_else(|_| {
                hccl_fail(HcclResult::HCCL_E_INTERNAL, "the emulator panicked")
            }),
            Err(e) => hccl_fail(
                HcclResult::HCCL_E_SYSCALL,
                format!("cannot start a thread: {e}"),
            ),
        };
        if let (Err(f), Ok(())) = (outcome, &first) {
            first = Err(Fail {
                code: f.code,
                msg: format!("{name} (the group's call {} on {device}): {}", i + 1, f.msg),
            });
        }
    }
    first
}

/// `HcclBatchSendRecv` inside a group: refused, as CANN's docs say it is not supported there.
pub(crate) fn refuse_batch() -> HcclRes {
    hccl_fail(
        HcclResult::HCCL_E_NOT_SUPPORT,
        "HcclBatchSendRecv cannot be called inside a group (between HcclGroupStart and \
         HcclGroupEnd): group HcclSend / HcclRecv calls instead",
    )
}

/// `HcclGroupEnd`: closes one level; the outermost issues what the group kept (see the
/// module's documentation). Every kept call is issued, also after one fails (each takes its
/// number, so the ranks stay numbered alike); the first failure is the result, naming the call.
pub(crate) fn end() -> HcclRes {
    let kept = GROUP.with_borrow_mut(|g| {
        if g.depth == 0 {
            return hccl_fail(
                HcclResult::HCCL_E_NOT_SUPPORT,
                "HcclGroupEnd without HcclGroupStart: this thread is not in a group",
            );
        }
        g.depth -= 1;
        if g.depth > 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        g.kind = None;
        Ok((std::mem::take(&mut g.jobs), std::mem::take(&mut g.members)))
    })?;
    let (jobs, members) = kept;
    if !jobs.is_empty() {
        // A group holds jobs or calls, never both.
        return run_jobs(jobs);
    }
    let mut first: Option<Fail<HcclResult>> = None;
    let mut note = |r: HcclRes, what: &dyn Fn() -> String| {
        if let Err(f) = r {
            first.get_or_insert(Fail {
                code: f.code,
                msg: format!("{}: {}", what(), f.msg),
            });
        }
    };
    let mut synchronize = Vec::new();
    for m in members {
        if let Some(stream) = m.p2p_stream {
            let n = m.items.len();
            let r = p2p::call(m.comm, stream, &m.items, "HcclGroupEnd");
            note(r, &|| {
                format!("the group's {n} sends and receives on {:#x}", m.comm)
            });
        }
        for (i, d) in in_issue_order(m.collectives).into_iter().enumerate() {
            let (name, stream) = (d.name, d.stream);
            let name = name.as_str();
            note((d.issue)(), &|| {
                format!("{name} (issued {} of the group on {:#x})", i + 1, m.comm)
            });
            if !synchronize.contains(&stream) {
                synchronize.push(stream);
            }
        }
    }
    for s in synchronize {
        let r = stream::synchronize(s).or_else(|e| hccl_fail(HcclResult::HCCL_E_RUNTIME, e.msg));
        note(r, &|| {
            format!(
                "waiting for the group's collectives on stream {:#x}",
                s.raw()
            )
        });
    }
    first.map_or(Ok(()), Err)
}

/// HCCL's `sortGroupTasks`: the non-V collectives by volume, largest first (stable), then the
/// V collectives in call order.
fn in_issue_order(mut calls: Vec<Deferred>) -> Vec<Deferred> {
    let v: Vec<Deferred> = {
        let (fixed, v): (Vec<_>, Vec<_>) = calls.drain(..).partition(|d| d.volume.is_some());
        calls = fixed;
        v
    };
    calls.sort_by_key(|d| std::cmp::Reverse(d.volume));
    calls.extend(v);
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deferred(name: &str, volume: Option<u64>) -> Deferred {
        Deferred {
            name: name.to_owned(),
            volume,
            stream: StreamHandle::from_raw(1),
            issue: Box::new(|| Ok(())),
        }
    }

    #[test]
    fn collectives_are_issued_largest_first_and_v_collectives_last_in_call_order() {
        let calls = vec![
            deferred("AlltoAllV-1", None),
            deferred("AllGather-4", Some(4)),
            deferred("AllReduce-8", Some(8)),
            deferred("ReduceScatterV-2", None),
            deferred("Broadcast-4", Some(4)),
        ];
        let order: Vec<_> = in_issue_order(calls).into_iter().map(|d| d.name).collect();
        assert_eq!(
            order,
            [
                "AllReduce-8",
                "AllGather-4",
                "Broadcast-4",
                "AlltoAllV-1",
                "ReduceScatterV-2"
            ]
        );
    }

    #[test]
    fn groups_nest_per_thread_and_end_without_start_is_not_supported() {
        assert!(!is_open());
        assert_eq!(end().unwrap_err().code, HcclResult::HCCL_E_NOT_SUPPORT);
        start().unwrap();
        start().unwrap();
        assert!(is_open());
        // Another thread has a group of its own.
        std::thread::spawn(|| assert!(!is_open())).join().unwrap();
        end().unwrap();
        assert!(is_open(), "the inner end leaves the outer group open");
        end().unwrap();
        assert!(!is_open());
    }
}
