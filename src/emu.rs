//! The emulator (`symheap-emu`) on this side: [`Runtime::emulated`], and running a closure on
//! every rank of an emulated communicator ([`launch`]). Only with the default `emulator`
//! feature.
//!
//! The emulator's test hooks ([`testing`]) and tables ([`hccl_api`], [`acl_api`]) are
//! re-exported here, so that tests reach the very emulator this crate runs on.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

pub use symheap_emu::{GRANULARITY, acl_api, hccl_api, testing, topology};

use crate::raw::{Backend, Origin};
use crate::runtime::{Comm, CommConfig, RootInfo, Runtime};
use crate::sys::HcclResult;
use crate::{Error, Result};

impl Runtime {
    /// The emulator (`symheap-emu`, through [`crate::emu`]): HCCL and ACL over host memory,
    /// ranks as threads or processes, device memory host-addressable. A thin convenience over
    /// [`raw::from_tables`](crate::raw::from_tables) with [`hccl_api`] and [`acl_api`]; only with the default
    /// `emulator` feature.
    ///
    /// # Errors
    /// Only if `aclInit` fails (which it does not, unless a failure is injected).
    pub fn emulated() -> Result<Runtime> {
        let origin = Origin {
            backend: Backend::InProcess {
                name: "symheap emulator",
            },
            host_addressable: true,
            keep_alive: Box::new(()),
        };
        // SAFETY: the emulator's functions implement the C prototypes of `sys` for any thread,
        // are part of this program (never unloaded), and its device memory is host memory of
        // this process.
        unsafe { crate::raw::from_tables(hccl_api(), acl_api(), origin) }
    }
}

/// What `launch` says of a result that keeps the rank's communicator alive.
const HOLDS_COMM: &str = "the closure's result holds its communicator (a pool, pooled memory, \
    a window or the Comm itself), which must be dropped on every rank together; it was dropped \
    there. Return host data instead (for example `to_host()`)";

/// Runs `f` on `ranks` threads, each bound to its own emulated device (device `r` for rank
/// `r`) with an initialised communicator, and returns the results in rank order.
///
/// Return plain data from `f`, not values that own pool memory or windows: dropping those
/// is a collective step (deregistration) that every rank must take, which only the rank
/// threads can do together. A result that still holds its communicator is dropped on its
/// rank's thread and reported as an error.
///
/// The ranks wait for each other before they join the communicator: a rank that fails before
/// joining (its `aclrtSetDevice` refused, or its thread not started) stops the others there,
/// so `launch` fails at once with its error instead of after the connect timeout (120 s by
/// default) for which the others would wait for it in `HcclCommInitRootInfoConfig`. A rank
/// whose `HcclCommInitRootInfoConfig` itself fails before it reaches the rendezvous (out of
/// descriptors, say) cannot stop the others, already inside theirs: they wait for it until
/// the connect timeout, as with real HCCL.
///
/// # Errors
/// The failing rank's error, as [`Error::Rank`] or [`Error::Panicked`] with its rank: a
/// rank that fails often makes its peers fail later (time out, or find it gone), so a panic
/// is reported first, then an error that is not such a consequence, each the earliest of its
/// kind. Failures of `HcclGetRootInfo`, `aclrtSetDevice` and communicator initialisation are
/// reported the same way, and so is a result that holds its communicator
/// ([`Error::InvalidArgument`]).
///
/// # Examples
/// ```
/// let ranks = symheap::emu::launch(4, |comm| Ok(comm.rank()))?;
/// assert_eq!(ranks, [0, 1, 2, 3]);
/// # Ok::<(), symheap::Error>(())
/// ```
pub fn launch<T, F>(ranks: u32, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&Comm) -> Result<T> + Sync,
{
    launch_with(&Runtime::emulated()?, ranks, &CommConfig::default(), f)
}

/// [`launch`] on a given runtime (the emulator, or the emulator's cdylib loaded with
/// [`raw::load_from`](crate::raw::load_from)) with a given communicator configuration.
///
/// # Errors
/// As for [`launch`]; [`Error::InvalidArgument`] for zero ranks; the runtime's error if
/// `HcclGetRootInfo` fails.
pub fn launch_with<T, F>(rt: &Runtime, ranks: u32, config: &CommConfig, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&Comm) -> Result<T> + Sync,
{
    launch_on(rt, ranks, None, config, f)
}

/// How the ranks of a thread job sit on emulated nodes ([`launch_nodes`]): `nodes` nodes of
/// `ranks_per_node` ranks each, rank `r` on node `r / ranks_per_node` and on device
/// `r % ranks_per_node` of it (its local rank, as torchrun numbers ranks), and the nodes in
/// SuperPoDs of `nodes_per_superpod` (by default `SYMHEAP_EMU_NODES_PER_SUPERPOD`, or 24: a
/// CloudMatrix384).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLayout {
    nodes: u32,
    ranks_per_node: u32,
    nodes_per_superpod: Option<u32>,
}

impl NodeLayout {
    /// `nodes` nodes of `ranks_per_node` ranks each, in SuperPoDs of the default size.
    pub fn new(nodes: u32, ranks_per_node: u32) -> NodeLayout {
        NodeLayout {
            nodes,
            ranks_per_node,
            nodes_per_superpod: None,
        }
    }

    /// The same nodes, in SuperPoDs of `nodes` nodes each (node `n` in SuperPoD
    /// `n / nodes`): symmetric windows work only within one.
    pub fn nodes_per_superpod(self, nodes: u32) -> NodeLayout {
        NodeLayout {
            nodes_per_superpod: Some(nodes),
            ..self
        }
    }

    /// How many ranks the job has: nodes × ranks per node.
    pub fn ranks(&self) -> u32 {
        self.nodes.saturating_mul(self.ranks_per_node)
    }

    /// Rank `rank`'s node, its device on that node, and its SuperPoD where the layout sets
    /// one.
    fn place(&self, rank: u32) -> (u32, u32, Option<u32>) {
        let node = rank / self.ranks_per_node;
        let superpod = self.nodes_per_superpod.map(|k| node / k);
        (node, rank % self.ranks_per_node, superpod)
    }

    /// `Error::InvalidArgument` for a layout without ranks or with empty SuperPoDs.
    fn check(&self) -> Result<()> {
        if self.nodes == 0 || self.ranks_per_node == 0 {
            return Err(Error::invalid(format!(
                "a node layout needs at least one node of at least one rank, not {} x {}",
                self.nodes, self.ranks_per_node
            )));
        }
        if self.nodes_per_superpod == Some(0) {
            return Err(Error::invalid("a SuperPoD has at least one node, not 0"));
        }
        Ok(())
    }
}

/// [`launch`] with the ranks on emulated nodes: `nodes` nodes of `ranks_per_node` ranks
/// each, every rank's thread on its node and on device = its local rank there (as a
/// multi-node job's processes are), so a job of 24 nodes × 16 runs as threads of this one
/// process. The communicator knows each rank's node and SuperPoD: on one spanning SuperPoDs
/// (more than 24 nodes by default, or see [`launch_nodes_with`]) windows cannot be
/// registered and collectives stage.
///
/// # Errors
/// As for [`launch`]; [`Error::InvalidArgument`] for 0 nodes or 0 ranks per node.
///
/// # Examples
/// ```
/// // 2 nodes of 2 ranks: global ranks 0..4, each on device = its local rank.
/// let devices = symheap::emu::launch_nodes(2, 2, |comm| comm.runtime().current_device())?;
/// assert_eq!(devices, [0, 1, 0, 1]);
/// # Ok::<(), symheap::Error>(())
/// ```
pub fn launch_nodes<T, F>(nodes: u32, ranks_per_node: u32, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&Comm) -> Result<T> + Sync,
{
    launch_nodes_with(
        &NodeLayout::new(nodes, ranks_per_node),
        &CommConfig::default(),
        f,
    )
}

/// [`launch_nodes`] with a given layout (SuperPoDs of a given size) and communicator
/// configuration, on the emulator this crate links ([`Runtime::emulated`]: a thread's node is
/// that emulator's to set).
///
/// # Errors
/// As for [`launch_nodes`]; [`Error::InvalidArgument`] for a SuperPoD of 0 nodes.
pub fn launch_nodes_with<T, F>(layout: &NodeLayout, config: &CommConfig, f: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&Comm) -> Result<T> + Sync,
{
    layout.check()?;
    launch_on(
        &Runtime::emulated()?,
        layout.ranks(),
        Some(layout),
        config,
        f,
    )
}

/// [`launch_with`], with the ranks on the nodes of `layout` when given (each on device =
/// its local rank), else each on device = its rank.
fn launch_on<T, F>(
    rt: &Runtime,
    ranks: u32,
    layout: Option<&NodeLayout>,
    config: &CommConfig,
    f: F,
) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&Comm) -> Result<T> + Sync,
{
    if ranks == 0 {
        return Err(Error::invalid("launch needs at least one rank"));
    }
    let root = RootInfo::new(rt)?;
    let gate = Gate::new(ranks);
    // Each outcome is stamped with a global order so the earliest failure is reported.
    let clock = AtomicU64::new(0);
    let outcomes: Vec<(Result<T>, u64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..ranks)
            .map(|rank| {
                let (root, f, clock, gate) = (&root, &f, &clock, &gate);
                let spawned = std::thread::Builder::new().spawn_scoped(scope, move || {
                    let result = run_rank(rt, (rank, ranks), layout, root, config, gate, f);
                    (result, clock.fetch_add(1, Ordering::SeqCst))
                });
                spawned.map_err(|e| {
                    // The ranks at the gate must not wait for this one.
                    gate.fail(rank);
                    let source = Box::new(Error::io("cannot start the rank's thread", e));
                    (
                        Error::Rank { rank, source },
                        clock.fetch_add(1, Ordering::SeqCst),
                    )
                })
            })
            .collect();
        // The closure's panics are caught in `run_rank`, so a join error cannot happen.
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join().expect("rank thread panicked outside its closure"),
                Err((e, stamp)) => (Err(e), stamp),
            })
            .collect()
    });
    // The cause, not a consequence: a panic first, then an error other than waiting in vain
    // for a peer, then the earliest. (A rank's failure is stamped when its thread ends, after
    // its unwinding, which may itself wait for peers: time alone can blame the wrong rank.)
    let first_failure = outcomes
        .iter()
        .enumerate()
        .filter_map(|(rank, (result, stamp))| Some((rank, result.as_ref().err()?, *stamp)))
        .min_by_key(|&(_, err, stamp)| (blame_order(err), stamp))
        .map(|(rank, _, _)| rank);
    let mut results = Vec::with_capacity(outcomes.len());
    for (rank, (result, _)) in outcomes.into_iter().enumerate() {
        match result {
            Ok(value) => results.push(value),
            Err(e) if Some(rank) == first_failure => return Err(e),
            Err(_) => {}
        }
    }
    Ok(results)
}

/// One rank's thread of [`launch_with`]: binds the thread to device `rank` (or, with a
/// `layout`, puts it on its node and binds it to its local device), meets the other ranks at
/// `gate`, joins the communicator and runs `f` on it.
fn run_rank<T, F>(
    rt: &Runtime,
    (rank, ranks): (u32, u32),
    layout: Option<&NodeLayout>,
    root: &RootInfo,
    config: &CommConfig,
    gate: &Gate,
    f: &F,
) -> Result<T>
where
    F: Fn(&Comm) -> Result<T>,
{
    let run = || {
        let arrival = gate.arrival(rank);
        let bound = match layout.map(|l| l.place(rank)) {
            Some((node, device, superpod)) => {
                symheap_emu::topology::set_thread_node(node, superpod)
                    .map_err(Error::invalid)
                    .and_then(|()| rt.set_device(device))
            }
            None => rt.set_device(rank),
        };
        arrival.pass(bound)?;
        let comm = Comm::init(rt, ranks, root, rank, config)?;
        let value = f(&comm)?;
        if comm.handles() > 1 {
            // Dropped here, by every rank at once, as its collective deregistrations need:
            // after `launch` they would wait in vain.
            drop(value);
            return Err(Error::invalid(HOLDS_COMM));
        }
        Ok(value)
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(result) => result.map_err(|source| Error::Rank {
            rank,
            source: Box::new(source),
        }),
        Err(payload) => Err(Error::Panicked {
            rank,
            message: panic_message(payload.as_ref()),
        }),
    }
}

/// What a rank that did not join says when another rank failed before joining: only a
/// consequence (see [`blame_order`]), never the error `launch` reports.
const NOT_JOINED: &str = "did not join the communicator: rank ";

/// Where the rank threads of one `launch` meet before they join the communicator, so that a
/// rank that fails before joining (its `aclrtSetDevice` refused, say) stops the others from
/// joining, instead of leaving them to wait for it until the connect timeout (120 s by
/// default): the join itself cannot be cancelled from outside the C call.
struct Gate {
    ranks: u32,
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    /// Ranks that are ready to join.
    ready: u32,
    /// The first rank that failed before joining.
    failed: Option<u32>,
}

/// One rank on its way to the [`Gate`]: it must [`pass`](Arrival::pass) it; dropped
/// without passing (a panic), it counts as a failure.
struct Arrival<'a> {
    gate: &'a Gate,
    rank: u32,
    passed: bool,
}

impl Gate {
    fn new(ranks: u32) -> Gate {
        Gate {
            ranks,
            state: Mutex::new(GateState::default()),
            changed: Condvar::new(),
        }
    }

    fn arrival(&self, rank: u32) -> Arrival<'_> {
        Arrival {
            gate: self,
            rank,
            passed: false,
        }
    }

    /// Records that `rank` failed before joining: the ranks waiting at the gate, and those
    /// still to come, give up.
    fn fail(&self, rank: u32) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.failed.get_or_insert(rank);
        self.changed.notify_all();
    }

    /// Records that a rank is ready to join, then waits until every rank is or one failed:
    /// then the rank that failed first. Every rank arrives once (see [`Arrival`]), after
    /// its own pre-join steps only, so the wait ends.
    fn ready(&self) -> std::result::Result<(), u32> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.ready += 1;
        self.changed.notify_all();
        loop {
            if let Some(failed) = state.failed {
                return Err(failed);
            }
            if state.ready == self.ranks {
                return Ok(());
            }
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Arrival<'_> {
    /// Passes the gate with the outcome of this rank's pre-join steps: its own error if
    /// they failed (the other ranks then give up); otherwise `Ok` once every rank is ready
    /// to join, or an error naming the rank that failed before joining.
    fn pass(mut self, steps: Result<()>) -> Result<()> {
        self.passed = true;
        if steps.is_err() {
            self.gate.fail(self.rank);
            return steps;
        }
        self.gate
            .ready()
            .map_err(|failed| Error::invalid(format!("{NOT_JOINED}{failed} failed before joining")))
    }
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        if !self.passed {
            self.gate.fail(self.rank);
        }
    }
}

/// How directly a rank's failure points at the cause: 0 for a panic, 1 for an error of its
/// own, 2 for a failure that other ranks' failures explain (a peer that never came, was lost,
/// or a pool poisoned by such a collective), 3 for not joining because another rank failed
/// before it could.
fn blame_order(err: &Error) -> u8 {
    let source = match err {
        Error::Panicked { .. } => return 0,
        Error::Rank { source, .. } => source.as_ref(),
        other => other,
    };
    if matches!(source, Error::InvalidArgument(why) if why.starts_with(NOT_JOINED)) {
        return 3;
    }
    let waited_in_vain = matches!(
        source,
        Error::Hccl {
            code: HcclResult::HCCL_E_TIMEOUT | HcclResult::HCCL_E_TCP_TRANSFER,
            ..
        } | Error::Collective {
            code: HcclResult::HCCL_E_TIMEOUT | HcclResult::HCCL_E_TCP_TRANSFER,
            ..
        } | Error::Poisoned(_)
    );
    if waited_in_vain { 2 } else { 1 }
}

/// A panic's message, where its payload is a string.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
