//! Collectives: `HcclAllReduce` & co. once the call has its sequence number ([`enqueue`]), and
//! what runs on the stream thread ([`run`]): a rendezvous in which every rank compares its
//! call with its peers', then the symmetric or the staged algorithm, then an exit barrier so no
//! rank moves on while a peer may still read its memory.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;

use crate::sys::{ACL_ERROR_RT_INTERNAL_ERROR, HcclDataType, HcclReduceOp, HcclResult};

use crate::acl::stream::{self, TaskFailure};
use crate::acl::{graph, order};
use crate::base::counters::{self, Counter};
use crate::base::errors::{Fail, HcclRes, para};
use crate::base::handle::StreamHandle;
use crate::base::lock::lock;
use crate::hccl::comm::{Comm, Queued};
use crate::hccl::job::{self, Job, Path, Place, Request, Signature};
use crate::hccl::steps::Steps;
use crate::ipc::host_threads::StreamAt;
use crate::ipc::wire::{Reader, Wire, Writer};
use crate::{hccl::staged, hccl::symmetric, hccl::v_layout, ipc::os};
use symheap_types::Collective;

#[cfg(test)]
pub(crate) mod tests;

/// The path a rank chose, as its peers see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Staged,
    Symmetric { input: Place, output: Place },
}

impl Route {
    fn of(path: &Path) -> Route {
        match path {
            Path::Staged => Route::Staged,
            Path::Symmetric { input, output } => Route::Symmetric {
                input: input.place(),
                output: output.place(),
            },
        }
    }
}

/// What each rank brings to a collective's first rendezvous.
struct Arrival {
    sig: Signature,
    route: Route,
}

impl Wire for Arrival {
    const TAG: u8 = 10;
    fn put<'a>(&'a self, w: &mut Writer, _: &mut Vec<BorrowedFd<'a>>) {
        let s = &self.sig;
        w.u8(s.kind as u8).u64(s.count).u32(s.dtype.0 as u32);
        w.u32(s.op.0 as u32).u32(s.root);
        let place = |w: &mut Writer, (slot, offset, in_place): Place| {
            w.u64(slot as u64).u64(offset as u64).u8(u8::from(in_place));
        };
        match self.route {
            Route::Staged => {
                w.u8(0);
            }
            Route::Symmetric { input, output } => {
                place(w.u8(1), input);
                place(w, output);
            }
        }
    }
    fn get(r: &mut Reader<'_>, _: &mut dyn Iterator<Item = OwnedFd>) -> Option<Self> {
        let sig = Signature {
            kind: Collective::from_u8(r.u8()?)?,
            count: r.u64()?,
            dtype: HcclDataType(r.u32()? as i32),
            op: HcclReduceOp(r.u32()? as i32),
            root: r.u32()?,
        };
        let route = match r.u8()? {
            0 => Route::Staged,
            _ => {
                let mut place = || -> Option<Place> {
                    Some((r.u64()? as usize, r.u64()? as usize, r.u8()? != 0))
                };
                let input = place()?;
                Route::Symmetric {
                    input,
                    output: place()?,
                }
            }
        };
        Some(Arrival { sig, route })
    }
}

/// Converts a failed stream lookup or refused task (ACL codes) into HCCL's codes.
pub(crate) fn stream_error(f: Fail<i32>) -> Fail<HcclResult> {
    let code = match f.code {
        // A NULL stream (the emulator has none by default).
        crate::sys::ACL_ERROR_RT_PARAM_INVALID => HcclResult::HCCL_E_PTR,
        // An unknown stream, or one being destroyed.
        crate::sys::ACL_ERROR_RT_INVALID_HANDLE => HcclResult::HCCL_E_PARA,
        // The runtime refused the task (a stream stopped by stop-on-failure mode), as HCCL
        // reports a failed runtime call.
        _ => HcclResult::HCCL_E_RUNTIME,
    };
    Fail { code, msg: f.msg }
}

/// `HcclAllReduce` & co., once the call has taken its sequence number `seq`: checks
/// synchronously, then queues the work on the stream.
pub(crate) fn enqueue(comm: &Arc<Comm>, seq: u64, stream: StreamHandle, req: &Request) -> HcclRes {
    let handle = stream;
    let stream = stream::lookup(stream).map_err(stream_error)?;
    let Some(job) = job::check(comm, req)? else {
        return Ok(());
    };
    let job = Arc::new(job);
    if stream.capture().is_some() {
        // Kept in the capture: each replay takes the communicator's next sequence number
        // when it is launched (host order, the same on every rank), and the job's buffers
        // stay pinned as long as the graph lives.
        let (comm, at) = (comm.clone(), stream.at());
        let recipe = Arc::new(move || {
            let seq = comm.next_collective_seq();
            // Where the replay runs it is not tracked: the next eager collective is not
            // checked against it.
            *lock(&comm.last_collective) = None;
            Ok(task(comm.clone(), job.clone(), seq, at.clone()))
        });
        return graph::submit(&stream, handle, recipe).map_err(stream_error);
    }
    let mut last = lock(&comm.last_collective);
    if let Some(before) = *last {
        check_order(before, seq, handle)?;
    }
    let position = stream
        .enqueue_counted(task(comm.clone(), job, seq, stream.at()))
        .map_err(stream_error)?;
    *last = Some(Queued {
        seq,
        stream: handle,
        position,
    });
    Ok(())
}

/// `HCCL_E_PARA` unless collective `seq`, queued on `stream`, comes after the
/// communicator's collective `before` in the host program's order: on the same stream, or
/// on one that waits for an event recorded after it, or after the host saw it done
/// ([`crate::acl::order`]). HCCL runs a communicator's collectives one at a time, in the
/// order they were called, and does not order them across streams itself (nor does NCCL):
/// unordered, two may run at once, and on a device they would corrupt or hang each other.
fn check_order(before: Queued, seq: u64, stream: StreamHandle) -> HcclRes {
    let ordered = before.stream == stream
        || stream::lookup(before.stream).is_err()
        || order::follows(stream, before.stream, before.position);
    if ordered {
        return Ok(());
    }
    para(format!(
        "collective #{seq} of the communicator is queued on stream {stream:#x}, but \
         collective #{} is on stream {:#x} and nothing orders the two: a communicator runs its \
         collectives one at a time, in call order, and does not order streams itself. Make \
         this stream wait for the other (aclrtRecordEvent there after the collective, then \
         aclrtStreamWaitEvent here), or synchronize the other stream first",
        before.seq, before.stream,
    ))
}

/// The stream task that runs `job` as collective `seq` of `comm`, recording in `at` (its
/// stream's) where it waits.
fn task(comm: Arc<Comm>, job: Arc<Job>, seq: u64, at: Arc<StreamAt>) -> stream::Task {
    Box::new(move || {
        run(&comm, &job, seq, &at).map_err(|f| {
            comm.set_async_error(f.code);
            TaskFailure {
                code: ACL_ERROR_RT_INTERNAL_ERROR,
                msg: format!(
                    "{} (collective #{seq} on rank {}) failed with {}: {}",
                    job.sig.kind.c_name(),
                    comm.rank,
                    f.code,
                    f.msg
                ),
            }
        })
    })
}

/// Runs a checked collective on the stream thread.
fn run(comm: &Comm, job: &Job, seq: u64, at: &StreamAt) -> HcclRes {
    let mut steps = Steps::new(comm, seq, at);
    let route = Route::of(&job.path);
    let all = steps.exchange(Arrival {
        sig: job.sig,
        route,
    })?;
    compare_arrivals(&all, job.sig, route, seq)?;
    // A V collective's arrays, once the ranks know they made the same call (so they bring as
    // many words).
    let table = match &job.vectors {
        Some(blocks) => Some(v_layout::exchange(&mut steps, blocks)?),
        None => None,
    };
    match &job.path {
        Path::Staged => {
            let staging: Vec<usize> = comm.group.staging.iter().map(os::Space::addr).collect();
            let cap = comm
                .group
                .staging
                .iter()
                .map(os::Space::len)
                .min()
                .unwrap_or(0);
            counters::inc(Counter::StagedCollectives);
            match (&job.vectors, &table) {
                (Some(blocks), Some(table)) => {
                    staged::run_vector(&mut steps, job, blocks, table, &staging, cap)?;
                }
                _ => staged::run(&mut steps, job, &staging, cap)?,
            }
        }
        // Never a V collective (`choose_path` asks `Collective::may_use_windows`).
        Path::Symmetric { input, output } => {
            counters::inc(Counter::SymmetricCollectives);
            symmetric::run(&steps, job, input, output);
        }
    }
    steps.barrier()
}

/// Fails (`HCCL_E_PARA`, the same on every rank) unless every rank made this rank's call
/// `sig` and chose its `route`, naming what each rank did.
fn compare_arrivals(all: &[Arrival], sig: Signature, route: Route, seq: u64) -> HcclRes {
    if all.iter().any(|a| a.sig != sig) {
        let calls: Vec<String> = all
            .iter()
            .enumerate()
            .map(|(r, a)| format!("rank {r}: {}", a.sig))
            .collect();
        return para(format!(
            "ranks made different calls as collective #{seq}: {}",
            calls.join("; ")
        ));
    }
    if all.iter().any(|a| a.route != route) {
        let routes: Vec<String> = all
            .iter()
            .enumerate()
            .map(|(r, a)| match a.route {
                Route::Staged => format!("rank {r}: staged (not both buffers in a window)"),
                Route::Symmetric { input, output } => {
                    let place = |(slot, offset, in_place): Place| {
                        let how = if in_place {
                            " (in place, rank 0's)"
                        } else {
                            ""
                        };
                        format!("slot {slot:#x} offset {offset:#x}{how}")
                    };
                    format!("rank {r}: input {}, output {}", place(input), place(output))
                }
            })
            .collect();
        return para(format!(
            "asymmetric buffers: the symmetric path needs every rank's input and output at the \
             same window offsets: {}",
            routes.join("; ")
        ));
    }
    Ok(())
}
