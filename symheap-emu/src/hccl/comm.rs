//! Communicators: root info, the rendezvous that forms a group, per-rank communicator state,
//! and the configuration fields the emulator uses.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

use crate::sys::{
    HCCL_COMM_CONFIG_MAGIC_WORD, HCCL_EXP_BUFFER_BYTES, HcclCommConfig, HcclResult, HcclRootInfo,
};

use crate::acl::node::{self, Place};
use crate::acl::{device, memory};
use crate::base::counters::{self, Counter};
use crate::base::errors::{Fail, HcclRes, hccl_fail, hccl_non_null, para};
use crate::base::handle::{CommHandle, StreamHandle};
use crate::base::lock::{RankedMutex, lock, ranks};
use crate::base::registry::Registry;
use crate::hccl::expansion::{self, Expansion};
use crate::hccl::memory_range::Ranges;
use crate::hccl::names;
use crate::hccl::topology::{self, Topology};
use crate::hccl::window::{SymHeap, Window, forget_window};
use crate::ipc::host_threads::HostThreads;
use crate::ipc::os;
use crate::ipc::rendezvous::{JoinError, Rendezvous};
use crate::ipc::{hub, keyed};

/// The execution timeout when neither the config (`hcclExecTimeOut` <= 0) nor the environment
/// sets one. (CANN's default is 1836 s; the emulator's is shorter, so that a hang a test
/// provokes ends in two minutes.)
const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(120);
/// CANN's variable for the exec timeout: seconds, with at most two decimals; 0 means never
/// (here: [`MAX_TIMEOUT`]).
const HCCL_EXEC_TIMEOUT_ENV: &str = "HCCL_EXEC_TIMEOUT";
/// The emulator's own exec timeout (seconds, fractions allowed), which wins over
/// [`HCCL_EXEC_TIMEOUT_ENV`]: for tests that want a short timeout whatever the job sets.
const EXEC_TIMEOUT_ENV: &str = "SYMHEAP_EMU_EXEC_TIMEOUT_SECS";
/// The emulator's variables that had other names before, as (old, new): an old one still
/// set fails init naming the new one, instead of being ignored in silence.
const RENAMED_ENV: [(&str, &str); 2] = [
    ("SYMHEAP_EMU_EXEC_TIMEOUT_S", EXEC_TIMEOUT_ENV),
    (
        "SYMHEAP_EMU_EVENT_WAIT_S",
        crate::acl::event::EVENT_WAIT_ENV,
    ),
];
/// CANN's variable for how long init waits for the other ranks: whole seconds, 120 to 7200.
const HCCL_CONNECT_TIMEOUT_ENV: &str = "HCCL_CONNECT_TIMEOUT";
/// The range CANN accepts for [`HCCL_CONNECT_TIMEOUT_ENV`], in seconds.
const CONNECT_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 120..=7200;
/// The longest timeout the emulator uses (longer requests are clamped), so deadlines never
/// overflow.
const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);
/// The shortest time init waits for the other ranks to join: rank threads may start late on a
/// loaded machine, whatever the exec timeout.
const MIN_JOIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Marks a root info blob as the emulator's.
const ROOT_MAGIC: &[u8; 16] = b"symheap-emu-root";

/// What one rank holds of its communicator's group. Queued collectives keep it alive, so a
/// rank that destroys its communicator still meets its peers for work it queued before.
pub(crate) struct Group {
    /// Where the ranks meet for collectives and collective host calls.
    pub(crate) rv: Rendezvous,
    /// Every rank's staging buffer (the non-symmetric path's `hcclBufferSize` MiB), mapped
    /// here from the memfds the ranks shared when they joined, in rank order. Pages are
    /// allocated when first touched.
    pub(crate) staging: Vec<os::Space>,
    /// Every rank's point-to-point staging area, in rank order: another `hcclBufferSize` MiB
    /// after the staging buffer in the same memfd, so sends and collectives never share
    /// bytes. Rank r's area holds one section per destination ([`crate::hccl::p2p`]).
    pub(crate) p2p: Vec<os::Space>,
}

/// How many point-to-point messages a rank queued to each rank (`sent`) and from each rank
/// (`received`), in host order: its k-th send to a rank meets that rank's k-th receive from it.
pub(crate) struct Messages {
    pub(crate) sent: Vec<u64>,
    pub(crate) received: Vec<u64>,
}

/// One rank's communicator (what an `HcclComm` handle names).
pub(crate) struct Comm {
    /// The `HcclComm` value.
    pub(crate) handle: CommHandle,
    pub(crate) group: Arc<Group>,
    pub(crate) rank: u32,
    pub(crate) n: u32,
    /// What `HcclGetCommName` answers: the config's `hcclCommName` bytes as given, or the
    /// rendezvous name (the same on every rank); a sub-communicator's default is
    /// `{global name}_sub_{subCommId}`.
    pub(crate) name: Vec<u8>,
    /// The rendezvous this communicator's ranks met at (its hub's socket name and session
    /// key): a global communicator's sub-communicators meet at names and keys made from them.
    pub(crate) meeting: Meeting,
    /// For a sub-communicator, the global communicator it was split from (`None` for a
    /// global one, which alone may be split).
    pub(crate) parent: Option<CommHandle>,
    /// How long a rendezvous waits for peers (`hcclExecTimeOut`).
    pub(crate) timeout: Duration,
    /// Per-rank stride of the symmetric heap in bytes (`hcclSymWinMaxMemSizePerRank` GiB).
    pub(crate) stride: usize,
    /// How its collectives are expanded: only AI CPU expansion uses windows.
    pub(crate) expansion: Expansion,
    /// Where its ranks are (node and SuperPoD of each), learned at init.
    pub(crate) topology: Topology,
    coll_seq: AtomicU64,
    host_seq: AtomicU64,
    /// The symmetric heap, reserved at the first window registration.
    heap: RankedMutex<Option<Arc<SymHeap>>>,
    /// Live windows of this rank, in registration order.
    pub(crate) windows: RankedMutex<Vec<Arc<Window>>>,
    /// The first collective failure not yet read by `HcclGetCommAsyncError`.
    async_error: AtomicI32,
    /// HCCL's buffers on this rank's device (CCL in + out + expansion), counted against the
    /// device's memory until `HcclCommDestroy`.
    buffers: memory::Charge,
    /// Point-to-point messages queued so far, per pair.
    pub(crate) messages: RankedMutex<Messages>,
    /// The zero-copy memory ranges set on this communicator (`HcclCommSetMemoryRange`).
    pub(crate) ranges: RankedMutex<Ranges>,
    /// This rank's host threads, for the deadlock check: shared with the communicators split
    /// from this one (or with the global one this was split from).
    pub(crate) threads: Arc<HostThreads>,
    /// The stream and position of this rank's last collective queued eagerly, with its
    /// sequence number (`None` before the first, and after a replay queued collectives):
    /// the next one must come after it ([`crate::hccl::collective`]).
    pub(crate) last_collective: RankedMutex<Option<Queued>>,
}

/// Where a collective was queued: it is done once `stream` has completed `position` tasks.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Queued {
    pub(crate) seq: u64,
    pub(crate) stream: StreamHandle,
    pub(crate) position: u64,
}

static COMMS: Registry<CommHandle, Comm> = Registry::new(ranks::COMMS);

/// Where a group's ranks meet: the hub's abstract socket and the session key it expects
/// (what a root info names).
#[derive(Clone)]
pub(crate) struct Meeting {
    pub(crate) name: String,
    pub(crate) session: [u8; 16],
}

/// `HcclGetRootInfo`: starts the hub of a fresh rendezvous in this process and names it in
/// the blob: `ROOT_MAGIC`, the 16-byte session key, the socket name's length and the name.
///
/// The name (the socket's, which every local user can list, and the default comm name) is
/// derived from the key with a keyed hash ([`keyed::global_name`]): nobody can predict it
/// and bind it first, and it tells nothing of the key, which authenticates joins.
pub(crate) fn get_root_info() -> HcclRes<HcclRootInfo> {
    let fail = |e: std::io::Error| Fail {
        code: HcclResult::HCCL_E_SYSCALL,
        msg: format!("cannot start the rendezvous: {e}"),
    };
    let session = os::random_bytes().map_err(fail)?;
    let name = keyed::global_name(std::process::id(), &session);
    hub::start(&name, session).map_err(fail)?;
    let mut info = HcclRootInfo::default();
    let len = [name.len() as u8];
    let bytes = ROOT_MAGIC
        .iter()
        .chain(&session)
        .chain(&len)
        .chain(name.as_bytes());
    for (dst, &b) in info.internal.iter_mut().zip(bytes) {
        *dst = b as std::ffi::c_char;
    }
    Ok(info)
}

/// The rendezvous a root info names, if it is the emulator's.
fn parse_root(info: &HcclRootInfo) -> Option<Meeting> {
    let bytes: Vec<u8> = info.internal.iter().map(|&c| c as u8).collect();
    let rest = bytes.strip_prefix(&ROOT_MAGIC[..])?;
    let (session, rest) = rest.split_at(16);
    let (&len, rest) = rest.split_first()?;
    let name = std::str::from_utf8(rest.get(..len as usize)?).ok()?;
    Some(Meeting {
        name: name.to_owned(),
        session: session.try_into().ok()?,
    })
}

/// Reads a config the way HCCL does: the header must carry the magic word; fields are taken
/// from the first `min(configSize, sizeof)` bytes, the rest keep their defaults.
///
/// # Safety
/// `config` points to at least 24 readable bytes, and to `configSize` (as its header says)
/// readable bytes or the whole struct, whichever is smaller.
pub(crate) unsafe fn read_config(config: *const HcclCommConfig) -> HcclRes<HcclCommConfig> {
    let mut header = [0u8; 24];
    // SAFETY: the caller promises the 24-byte header is readable.
    unsafe { std::ptr::copy_nonoverlapping(config.cast::<u8>(), header.as_mut_ptr(), 24) };
    let size = usize::from_ne_bytes(header[0..8].try_into().unwrap());
    let magic = u32::from_ne_bytes(header[8..12].try_into().unwrap());
    if magic != HCCL_COMM_CONFIG_MAGIC_WORD {
        return para(format!(
            "config magic word is {magic:#x}, not {HCCL_COMM_CONFIG_MAGIC_WORD:#x}: \
             initialise it with HcclCommConfigInit"
        ));
    }
    if size < header.len() {
        return para(format!("config size {size} is smaller than its header"));
    }
    let mut out = HcclCommConfig::init();
    let len = size.min(std::mem::size_of::<HcclCommConfig>());
    // SAFETY: the caller promises `len` bytes are readable; `out` is a plain-data struct of at
    // least `len` bytes, and every byte pattern is a valid value of its fields.
    unsafe { std::ptr::copy_nonoverlapping(config.cast::<u8>(), (&raw mut out).cast::<u8>(), len) };
    Ok(out)
}

/// The execution timeout, at most [`MAX_TIMEOUT`]: the config's `hcclExecTimeOut` when set,
/// else [`EXEC_TIMEOUT_ENV`], else [`HCCL_EXEC_TIMEOUT_ENV`], else [`DEFAULT_EXEC_TIMEOUT`].
///
/// # Errors
/// `HCCL_E_PARA` for an `HCCL_EXEC_TIMEOUT` that CANN would refuse (init fails there too), or
/// for a variable of [`RENAMED_ENV`] set under its old name.
fn exec_timeout(config: &HcclCommConfig) -> HcclRes<Duration> {
    check_renamed(|name| std::env::var_os(name))?;
    if config.hcclExecTimeOut > 0 {
        return Ok(Duration::from_secs(config.hcclExecTimeOut as u64).min(MAX_TIMEOUT));
    }
    if let Ok(own) = std::env::var(EXEC_TIMEOUT_ENV) {
        return Ok(env_timeout(Some(&own)));
    }
    match std::env::var(HCCL_EXEC_TIMEOUT_ENV) {
        Ok(value) => hccl_exec_timeout(&value),
        Err(_) => Ok(DEFAULT_EXEC_TIMEOUT),
    }
}

/// `HCCL_E_PARA` naming the new name of the first variable of [`RENAMED_ENV`] that `var`
/// finds set under its old one.
fn check_renamed(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> HcclRes<()> {
    match RENAMED_ENV.iter().find(|(old, _)| var(old).is_some()) {
        Some((old, new)) => para(format!("{old} is now called {new}: set that instead")),
        None => Ok(()),
    }
}

/// `HCCL_EXEC_TIMEOUT` as CANN's `ParseExecTimeOut` reads it on Atlas A3: digits with at most
/// two decimals, 0 to 2147483647 s, 0 meaning no timeout.
fn hccl_exec_timeout(value: &str) -> HcclRes<Duration> {
    let (whole, decimals) = value.split_once('.').unwrap_or((value, ""));
    let well_formed = !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && (!value.contains('.') || (1..=2).contains(&decimals.len()))
        && decimals.bytes().all(|b| b.is_ascii_digit());
    let secs = value.parse::<f64>().ok().filter(|_| well_formed);
    match secs {
        Some(0.0) => Ok(MAX_TIMEOUT),
        Some(s) if s <= f64::from(i32::MAX) => Ok(Duration::from_secs_f64(s).min(MAX_TIMEOUT)),
        _ => para(format!(
            "{HCCL_EXEC_TIMEOUT_ENV}={value:?} is not a timeout: seconds from 0 to 2147483647, \
             at most two decimals"
        )),
    }
}

/// How long init waits for the other ranks: `HCCL_CONNECT_TIMEOUT` when set, else the exec
/// timeout but at least [`MIN_JOIN_TIMEOUT`].
///
/// # Errors
/// `HCCL_E_PARA` for an `HCCL_CONNECT_TIMEOUT` that CANN would refuse.
pub(crate) fn connect_timeout(exec: Duration) -> HcclRes<Duration> {
    match std::env::var(HCCL_CONNECT_TIMEOUT_ENV) {
        Ok(value) => hccl_connect_timeout(&value),
        Err(_) => Ok(join_timeout(exec)),
    }
}

/// `HCCL_CONNECT_TIMEOUT` as CANN's `ParseLinkConnTimeOut` reads it: at most 10 digits, a
/// value in [`CONNECT_TIMEOUT_RANGE`].
fn hccl_connect_timeout(value: &str) -> HcclRes<Duration> {
    let secs =
        (value.len() <= 10 && !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()))
            .then(|| value.parse::<u64>().ok())
            .flatten()
            .filter(|s| CONNECT_TIMEOUT_RANGE.contains(s));
    match secs {
        Some(s) => Ok(Duration::from_secs(s)),
        None => para(format!(
            "{HCCL_CONNECT_TIMEOUT_ENV}={value:?} is not a timeout: whole seconds from {} to {}",
            CONNECT_TIMEOUT_RANGE.start(),
            CONNECT_TIMEOUT_RANGE.end()
        )),
    }
}

/// The timeout [`EXEC_TIMEOUT_ENV`] set to `value` asks for, at most [`MAX_TIMEOUT`].
fn env_timeout(value: Option<&str>) -> Duration {
    value
        .and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_EXEC_TIMEOUT)
        .min(MAX_TIMEOUT)
}

/// How long init waits for the other ranks: the exec timeout, but at least
/// [`MIN_JOIN_TIMEOUT`].
fn join_timeout(exec: Duration) -> Duration {
    exec.max(MIN_JOIN_TIMEOUT)
}

/// The fields of a config the emulator uses.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    /// How long a rendezvous waits for peers.
    pub(crate) timeout: Duration,
    /// The staging buffer's size in MiB.
    pub(crate) buffer_mb: u32,
    /// The symmetric heap's per-rank stride in bytes.
    pub(crate) stride: usize,
    pub(crate) expansion: Expansion,
}

/// Caps every communicator's per-rank symmetric-heap stride, in GiB: for tools whose address
/// space cannot hold the default reservations (valgrind's stays under 128 GiB).
const SYM_HEAP_CAP_ENV: &str = "SYMHEAP_EMU_SYM_HEAP_GIB";

/// What `config` asks for, on a communicator of `n` ranks.
pub(crate) fn settings(config: &HcclCommConfig, n: u32) -> HcclRes<Settings> {
    let buffer_mb = config.buffer_mb();
    let cap = std::env::var(SYM_HEAP_CAP_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    let stride = usize::try_from(config.hcclSymWinMaxMemSizePerRank.min(cap))
        .ok()
        .and_then(|gb| gb.checked_mul(1 << 30))
        .filter(|s| s.checked_mul(n as usize).is_some_and(|t| t <= 1 << 46));
    let Some(stride) = stride else {
        return para(format!(
            "hcclSymWinMaxMemSizePerRank {} GiB x {n} ranks does not fit the address space",
            config.hcclSymWinMaxMemSizePerRank
        ));
    };
    Ok(Settings {
        timeout: exec_timeout(config)?,
        buffer_mb,
        stride,
        expansion: expansion::of(config.hcclOpExpansionMode)?,
    })
}

/// `HcclCommInitRootInfoConfig` (after the null checks): joins the group named by `root` as
/// `rank` of `n` and waits until all ranks have joined. The rank is where the calling thread
/// is ([`node::current_place`]: its node, and its SuperPoD).
pub(crate) fn init(
    n: u32,
    root: &HcclRootInfo,
    rank: u32,
    config: &HcclCommConfig,
) -> HcclRes<CommHandle> {
    init_cancellable(n, root, rank, config, None, None)
}

/// [`init`] for a rank whose node and SuperPoD are given (`place`; a rank table names them),
/// not taken from where the calling thread is.
#[cfg(test)]
pub(crate) fn init_placed(
    n: u32,
    root: &HcclRootInfo,
    rank: u32,
    config: &HcclCommConfig,
    place: Place,
) -> HcclRes<CommHandle> {
    init_cancellable(n, root, rank, config, Some(place), None)
}

/// The calling thread's place ([`node::current_place`]) in HCCL's codes: an unusable
/// `SYMHEAP_EMU_NODE` or `SYMHEAP_EMU_NODES_PER_SUPERPOD` is `HCCL_E_PARA`.
fn calling_place() -> HcclRes<Place> {
    node::current_place().or_else(|e| para(e.msg))
}

/// [`init`], which stops waiting for the other ranks once `cancel` (if any) is raised; at `place`, or
/// where the calling thread is.
fn init_cancellable(
    n: u32,
    root: &HcclRootInfo,
    rank: u32,
    config: &HcclCommConfig,
    place: Option<Place>,
    cancel: Option<&AtomicBool>,
) -> HcclRes<CommHandle> {
    if n == 0 {
        return para("nRanks is 0");
    }
    if rank >= n {
        return para(format!("rank {rank} is not below nRanks {n}"));
    }
    if let Err(e) = device::current() {
        return hccl_fail(HcclResult::HCCL_E_RUNTIME, e.msg);
    }
    let settings = settings(config, n)?;
    let Some(root) = parse_root(root) else {
        return para("rootInfo was not made by HcclGetRootInfo");
    };
    let name = comm_name(config).unwrap_or_else(|| root.name.clone().into_bytes());
    let place = match place {
        Some(given) => given,
        None => calling_place()?,
    };
    let member = Member {
        n,
        rank,
        name,
        parent: None,
        place,
    };
    form(
        &member,
        &settings,
        root.clone(),
        |place, staging, timeout| join(&root, n, rank, place, staging, timeout, cancel),
    )
}

/// Who a rank is in the group it forms: its rank of `n`, the group's name, the global
/// communicator a sub-communicator was split from, and where the rank is.
pub(crate) struct Member {
    pub(crate) n: u32,
    pub(crate) rank: u32,
    pub(crate) name: Vec<u8>,
    pub(crate) parent: Option<CommHandle>,
    pub(crate) place: Place,
}

/// Makes this rank's staging memfd, meets the group at `meeting` through `join` (given the
/// rank's place word, the memfd and how long to wait for the others), maps every rank's
/// staging buffer and registers the communicator, with the topology the ranks' places make:
/// its handle.
pub(crate) fn form(
    member: &Member,
    settings: &Settings,
    meeting: Meeting,
    join: impl FnOnce(u64, BorrowedFd<'_>, Duration) -> HcclRes<(Rendezvous, Vec<OwnedFd>)>,
) -> HcclRes<CommHandle> {
    let &Member { n, rank, .. } = member;
    // Made before joining, so a failure here leaves the peers' group untouched.
    let buffer_mb = settings.buffer_mb;
    let memory_error = |e: std::io::Error| Fail {
        code: HcclResult::HCCL_E_MEMORY,
        msg: format!("cannot make the {buffer_mb} MiB staging buffer: {e}"),
    };
    let buffer = buffer_mb as usize * (1 << 20);
    // HCCL's CCL buffers come out of the device's memory: one allocation of the input and the
    // output buffer, `hcclBufferSize` each, and the expansion buffer (hicann/hcomm
    // `ccl_buffer_manager.cc`, `CreateCommCCLbuffer`), on the device of the thread that makes
    // the communicator. A sub-communicator has buffers of its own (its own `hcclComm`).
    let device = device::current().map_err(|e| Fail {
        code: HcclResult::HCCL_E_RUNTIME,
        msg: e.msg,
    })?;
    let buffers = memory::charge(device, 2 * buffer + HCCL_EXP_BUFFER_BYTES).map_err(|e| Fail {
        code: HcclResult::HCCL_E_OOM,
        msg: format!("HCCL's buffers (hcclBufferSize {buffer_mb} MiB): {}", e.msg),
    })?;
    // The staging buffer, then the point-to-point area of the same size.
    let staging = os::memfd(2 * buffer).map_err(memory_error)?;
    let timeout = connect_timeout(settings.timeout)?;
    let (rv, stagings) = join(topology::word(member.place), staging.as_fd(), timeout)?;
    let topology = Topology::from_words(rv.places(), rank);
    check_buffer_sizes(&stagings, 2 * buffer)?;
    let map = |offset| {
        stagings
            .iter()
            .map(|fd| os::map_shared_at(fd.as_fd(), offset, buffer))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(memory_error)
    };
    let (staging, p2p) = (map(0)?, map(buffer)?);
    let group = Arc::new(Group { rv, staging, p2p });
    let handle = CommHandle::fresh();
    // A sub-communicator's rank has the host threads of the global one's.
    let threads = member
        .parent
        .and_then(|parent| COMMS.get(parent))
        .map_or_else(HostThreads::new, |parent| parent.threads.clone());
    // The thread that makes a communicator is one of its rank's host threads.
    threads.enlist();
    COMMS.insert(
        handle,
        Arc::new(Comm {
            handle,
            group,
            rank,
            n,
            name: member.name.clone(),
            meeting,
            parent: member.parent,
            timeout: settings.timeout,
            stride: settings.stride,
            expansion: settings.expansion,
            topology,
            coll_seq: AtomicU64::new(0),
            host_seq: AtomicU64::new(0),
            heap: RankedMutex::new(ranks::COMM_HEAP, None),
            windows: RankedMutex::new(ranks::COMM_WINDOWS, Vec::new()),
            async_error: AtomicI32::new(0),
            buffers,
            messages: RankedMutex::new(
                ranks::COMM_MESSAGES,
                Messages {
                    sent: vec![0; n as usize],
                    received: vec![0; n as usize],
                },
            ),
            ranges: RankedMutex::new(ranks::COMM_RANGES, Ranges::default()),
            threads,
            last_collective: RankedMutex::new(ranks::COMM_ORDER, None),
        }),
    );
    counters::inc(Counter::Comms);
    Ok(handle)
}

/// `HCCL_E_PARA` unless every rank's staging memfd (`stagings`, in rank order) is `len` bytes
/// like this rank's: each rank maps every peer's with its own size, and touching a mapping
/// past the end of a smaller memfd would kill the process (SIGBUS). Every rank sees the same
/// sizes, so all fail alike.
fn check_buffer_sizes(stagings: &[OwnedFd], len: usize) -> HcclRes {
    let sizes = stagings
        .iter()
        .map(|fd| os::file_size(fd.as_fd()))
        .collect::<std::io::Result<Vec<u64>>>()
        .or_else(|e| {
            hccl_fail(
                HcclResult::HCCL_E_SYSCALL,
                format!("cannot read the size of a staging buffer: {e}"),
            )
        })?;
    if sizes.iter().all(|&s| s == len as u64) {
        return Ok(());
    }
    // Each memfd is two buffers of `hcclBufferSize` MiB.
    let each: Vec<String> = sizes
        .iter()
        .enumerate()
        .map(|(r, s)| format!("rank {r}: {} MiB", (s / 2) >> 20))
        .collect();
    para(format!(
        "the ranks were made with different hcclBufferSize ({}): it must be the same on every rank",
        each.join(", ")
    ))
}

/// `HcclCommInitAll` (after the null checks): `devices.len()` communicators of one group,
/// rank i on device `devices[i]`, each joined from a thread of its own bound to its device
/// (the calling thread's binding is untouched). On failure none is left.
pub(crate) fn init_all(devices: &[i32]) -> HcclRes<Vec<CommHandle>> {
    if devices.is_empty() {
        return para("ndev is 0");
    }
    for (i, &d) in devices.iter().enumerate() {
        if let Err(e) = device::check_id(d) {
            return para(format!("devices[{i}]: {}", e.msg));
        }
        if devices[..i].contains(&d) {
            return para(format!("devices[{i}]: device {d} appears twice"));
        }
    }
    let n = devices.len() as u32;
    let root = get_root_info()?;
    let config = HcclCommConfig::init();
    // Every rank is on the calling thread's node: its init threads take its place.
    let place = calling_place()?;
    init_ranks(devices, &|rank, d, cancel| {
        node::set_thread_node(place.node, Some(place.superpod)).or_else(para)?;
        device::set(d).map_err(|e| Fail {
            code: HcclResult::HCCL_E_RUNTIME,
            msg: e.msg,
        })?;
        init_cancellable(n, &root, rank, &config, Some(place), Some(cancel))
    })
}

/// What a rank's init answers when it stopped waiting because another failed.
const CANCELLED: &str = "another rank of HcclCommInitAll failed";

/// The body of [`init_all`]: runs `init_one(rank, device, cancel)` for every rank on a thread
/// of its own. The first rank to fail raises `cancel`, so the others stop waiting for it to
/// join and fail at once; then every communicator made is destroyed and the first failure
/// by rank (not counting the ranks that were cancelled) is returned.
fn init_ranks(
    devices: &[i32],
    init_one: &(dyn Fn(u32, i32, &AtomicBool) -> HcclRes<CommHandle> + Sync),
) -> HcclRes<Vec<CommHandle>> {
    let cancel = AtomicBool::new(false);
    let joined: Vec<HcclRes<CommHandle>> = std::thread::scope(|s| {
        let threads: Vec<_> = devices
            .iter()
            .zip(0u32..)
            .map(|(&d, rank)| {
                let cancel = &cancel;
                let spawned = std::thread::Builder::new()
                    .name(format!("symheap-emu-init-{rank}"))
                    .spawn_scoped(s, move || {
                        init_one(rank, d, cancel)
                            .inspect_err(|_| cancel.store(true, Ordering::Release))
                    });
                if spawned.is_err() {
                    cancel.store(true, Ordering::Release);
                }
                spawned
            })
            .collect();
        threads
            .into_iter()
            .map(|t| match t {
                Ok(t) => t.join().unwrap_or_else(|_| {
                    hccl_fail(HcclResult::HCCL_E_INTERNAL, "an init thread panicked")
                }),
                Err(e) => hccl_fail(
                    HcclResult::HCCL_E_SYSCALL,
                    format!("cannot start an init thread: {e}"),
                ),
            })
            .collect()
    });
    let (mut handles, mut first) = (Vec::new(), None);
    for (i, joined) in joined.into_iter().enumerate() {
        match joined {
            Ok(handle) => handles.push(handle),
            Err(f) => {
                // A cancelled rank's failure only stands in for one that is not.
                if first
                    .as_ref()
                    .is_none_or(|(_, g): &(usize, Fail<HcclResult>)| {
                        g.msg == CANCELLED && f.msg != CANCELLED
                    })
                {
                    first = Some((i, f));
                }
            }
        }
    }
    let Some((i, f)) = first else {
        return Ok(handles);
    };
    for handle in handles {
        let _ = destroy(handle);
    }
    Err(Fail {
        msg: format!("rank {i} (device {}): {}", devices[i], f.msg),
        ..f
    })
}

/// The config's `hcclCommName` (up to its NUL, at most 127 bytes, unchanged: not
/// necessarily UTF-8), if not empty.
pub(crate) fn comm_name(config: &HcclCommConfig) -> Option<Vec<u8>> {
    let bytes: Vec<u8> = config
        .hcclCommName
        .iter()
        .take(crate::sys::COMM_NAME_MAX_LENGTH - 1)
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    (!bytes.is_empty()).then_some(bytes)
}

/// Joins `root` as `rank` of `n`, sharing this rank's `staging` memfd, and waits up to
/// `timeout` for the other ranks: the rendezvous and every rank's staging memfd.
fn join(
    root: &Meeting,
    n: u32,
    rank: u32,
    place: u64,
    staging: BorrowedFd<'_>,
    timeout: Duration,
    cancel: Option<&AtomicBool>,
) -> HcclRes<(Rendezvous, Vec<OwnedFd>)> {
    let joined = Rendezvous::join(
        &root.name,
        &root.session,
        n,
        rank,
        place,
        staging,
        timeout,
        cancel,
    );
    joined.or_else(|e| join_failed(e, rank, timeout))
}

/// A failed join in HCCL's codes.
pub(crate) fn join_failed<T>(e: JoinError, rank: u32, timeout: Duration) -> HcclRes<T> {
    let waited = timeout.as_secs_f64();
    match e {
        JoinError::Cancelled => para(CANCELLED),
        JoinError::Unreachable(e) if e.kind() == std::io::ErrorKind::WouldBlock => hccl_fail(
            HcclResult::HCCL_E_TIMEOUT,
            format!(
                "rank {rank} waited {waited:.1} s for the rendezvous to take its connection: the \
                 process that called HcclGetRootInfo is stopped or hung, or a process that never \
                 answers holds the rendezvous's name"
            ),
        ),
        JoinError::Unreachable(e) => para(format!(
            "rootInfo names a rendezvous that cannot be reached ({e}): the process that called \
             HcclGetRootInfo is gone, or the rootInfo is stale"
        )),
        JoinError::Stranger { pid, uid } => hccl_fail(
            HcclResult::HCCL_E_TCP_CONNECT,
            format!("{}: nothing was sent to it", held_by_stranger(pid, uid)),
        ),
        JoinError::NoAnswer { pid } => hccl_fail(
            HcclResult::HCCL_E_TIMEOUT,
            format!(
                "rank {rank} waited {waited:.1} s, and the rendezvous (process {pid}) never \
                 answered its join, so which ranks are missing is unknown: that process is \
                 stopped or hung, or out of file descriptors"
            ),
        ),
        JoinError::OutOfDescriptors(why) => hccl_fail(HcclResult::HCCL_E_SYSCALL, why),
        JoinError::Refused(why) => para(why),
        JoinError::Formed => {
            para("rootInfo was already used by a communicator whose ranks all joined")
        }
        JoinError::Closed => para("the rendezvous closed the connection"),
        JoinError::Timeout { missing } => hccl_fail(
            HcclResult::HCCL_E_TIMEOUT,
            format!("rank {rank} waited {waited:.1} s for ranks {missing:?} to join"),
        ),
    }
}

/// What a join says when a process of user `uid` (not admitted) listens at the rendezvous's
/// name: it is not the job's hub.
pub(crate) fn held_by_stranger(pid: u32, uid: u32) -> String {
    format!(
        "a process of another user (uid {uid}, pid {pid}) holds the rendezvous's socket name, \
         so it is not this job's hub (its process may have exited, leaving the name free to \
         take); if that user takes part in the job, list uid {uid} in SYMHEAP_EMU_PEER_UIDS"
    )
}

/// The live communicator `handle` (null `HCCL_E_PTR`, unknown `HCCL_E_PARA`).
///
/// The calling thread, which names the communicator in an HCCL call, counts from now on as
/// one of its rank's host threads (for the deadlock check).
pub(crate) fn lookup(handle: CommHandle) -> HcclRes<Arc<Comm>> {
    hccl_non_null(handle.raw(), "comm")?;
    let comm = COMMS.get(handle).map_or_else(
        || para(format!("{handle:#x} is not a live communicator")),
        Ok,
    )?;
    comm.threads.enlist();
    Ok(comm)
}

/// Whether `handle` names a live communicator (one not destroyed), without making the calling
/// thread one of its rank's host threads.
pub(crate) fn is_live(handle: CommHandle) -> bool {
    COMMS.get(handle).is_some()
}

/// `HcclCommDestroy`: a local call. Marks the rank as gone in the group's rendezvous (peers
/// waiting for it fail at once), deregisters this rank's windows without a rendezvous and
/// forgets the handle; the staging buffer and heap go when queued work no longer uses them.
pub(crate) fn destroy(handle: CommHandle) -> HcclRes {
    lookup(handle)?;
    let Some(comm) = COMMS.remove(handle) else {
        return para(format!("{handle:#x} is not a live communicator"));
    };
    // Peers waiting for this rank, now or later, fail at once instead of timing out.
    comm.group.rv.leave(comm.coll_seq.load(Ordering::Relaxed));
    let messages = lock(&comm.messages);
    let board = comm.group.rv.board();
    board.leave_pairs(comm.rank as usize, &messages.sent, &messages.received);
    drop(messages);
    if let Some(parent) = comm.parent {
        names::forget(parent, &comm.name);
    }
    let windows = std::mem::take(&mut *lock(&comm.windows));
    for w in &windows {
        forget_window(w);
    }
    // Dropped outside the lock: dropping a window unmaps it.
    drop(windows);
    // HCCL frees its buffers with the communicator, whatever queued work still holds.
    comm.buffers.release();
    counters::dec(Counter::Comms);
    Ok(())
}

impl Comm {
    /// The next collective sequence number (host program order). Taken only where a
    /// collective call is entered ([`crate::abi::entry`]), as is [`Comm::next_host_seq`].
    pub(crate) fn next_collective_seq(&self) -> u64 {
        let seq = self.coll_seq.fetch_add(1, Ordering::Relaxed);
        // For the deadlock check: this rank will come to the collective's steps.
        let progress = self.group.rv.board().progress(self.rank as usize);
        progress.coll_entered.fetch_max(seq + 1, Ordering::Release);
        seq
    }

    /// The next sequence number of a collective host call (window register / deregister).
    pub(crate) fn next_host_seq(&self) -> u64 {
        self.host_seq.fetch_add(1, Ordering::Relaxed)
    }

    /// The symmetric heap, reserving `stride * n` of address space on first use.
    pub(crate) fn heap(&self) -> HcclRes<Arc<SymHeap>> {
        let mut heap = lock(&self.heap);
        if let Some(h) = &*heap {
            return Ok(h.clone());
        }
        let h = Arc::new(SymHeap::new(self.handle, self.rank, self.n, self.stride)?);
        *heap = Some(h.clone());
        Ok(h)
    }

    /// The window of this communicator holding `[addr, addr + len)` whole, and the offset of
    /// `addr` in it: what `HcclCommSymWinGet` finds (never on a one-rank communicator).
    pub(crate) fn find_window(&self, addr: usize, len: usize) -> Option<(Arc<Window>, usize)> {
        if self.n == 1 {
            return None;
        }
        let end = addr.checked_add(len)?;
        lock(&self.windows)
            .iter()
            .find(|w| w.user_base <= addr && end <= w.user_base + w.size)
            .map(|w| (w.clone(), addr - w.user_base))
    }

    /// Records a collective failure for `HcclGetCommAsyncError` (the first one is kept).
    pub(crate) fn set_async_error(&self, code: HcclResult) {
        let _ = self
            .async_error
            .compare_exchange(0, code.0, Ordering::AcqRel, Ordering::Acquire);
    }

    /// `HcclGetCommAsyncError`: the first collective failure since the last call (read and
    /// clear), or `HCCL_SUCCESS`.
    pub(crate) fn take_async_error(&self) -> HcclResult {
        HcclResult(self.async_error.swap(0, Ordering::AcqRel))
    }
}

// Communicators by name (`HcclCommGetHandleWithName`).

/// `HcclCommGetHandleWithName`: the live communicator of this process named `name` (what
/// `HcclGetCommName` answers) among those made on `device`, or, when the calling thread has
/// no device (`None`), on the lowest device any communicator of the process was made on. HCCL
/// keeps one map of names per device and looks in the thread's device's, or in the first
/// used device's (hicann/hcomm `op_base.cc`, `HcclCommGetHandleWithName`;
/// `coll_comm_mgr.cc`, `LegacyGetHcclOpInfoCtx`): ranks of one job that are threads of one
/// process share their communicators' names, and each finds its own. Of several of one name
/// on one device, the one made last (HCCL's map keeps the last it was given).
pub(crate) fn with_name(name: &[u8], device: Option<device::Device>) -> Option<CommHandle> {
    let all = COMMS.all();
    let device = device.or_else(|| all.iter().map(|(_, c)| c.buffers.device()).min())?;
    all.iter()
        .rev()
        .find(|(_, c)| c.buffers.device() == device && c.name == name)
        .map(|&(h, _)| h)
}

#[cfg(test)]
mod tests {
    use std::ptr::null_mut;
    use std::time::{Duration, Instant};

    use crate::base::errors::hccl_fail;
    use crate::sys::*;
    use crate::testutil::{
        DevBuf, acl, assert_clean, hccl, hok, ok, recent, run_ranks, test_config,
    };
    use crate::{test_lock, testing::counters};
    use std::os::fd::AsFd;

    const PARA: HcclResult = HcclResult::HCCL_E_PARA;
    const PTR: HcclResult = HcclResult::HCCL_E_PTR;

    fn root() -> HcclRootInfo {
        let mut root = HcclRootInfo::default();
        // SAFETY: valid out-pointer.
        hok(unsafe { (hccl().HcclGetRootInfo)(&mut root) });
        root
    }

    #[test]
    fn init_checks_its_arguments() {
        let _g = test_lock();
        let h = hccl();
        let a = acl();
        let root = root();
        let cfg = test_config();
        let mut comm = null_mut();
        // SAFETY: the emulator validates every argument; pointers are valid or null.
        unsafe {
            assert_eq!((h.HcclGetRootInfo)(null_mut()), PTR);
            let init = h.HcclCommInitRootInfoConfig;
            assert_eq!(init(1, std::ptr::null(), 0, &cfg, &mut comm), PTR);
            assert_eq!(init(1, &root, 0, std::ptr::null(), &mut comm), PTR);
            assert_eq!(init(1, &root, 0, &cfg, null_mut()), PTR);
            // No device on this thread yet.
            assert_eq!(
                init(1, &root, 0, &cfg, &mut comm),
                HcclResult::HCCL_E_RUNTIME
            );
            ok((a.aclrtSetDevice)(0));
            assert_eq!(init(0, &root, 0, &cfg, &mut comm), PARA);
            assert_eq!(init(2, &root, 2, &cfg, &mut comm), PARA);
            let mut bad = cfg;
            bad.reserved[8] ^= 1;
            assert_eq!(init(1, &root, 0, &bad, &mut comm), PARA);
            assert!(recent().contains("magic"));
            let mut huge = cfg;
            huge.hcclSymWinMaxMemSizePerRank = 1 << 40;
            assert_eq!(init(1, &root, 0, &huge, &mut comm), PARA);
            let junk = HcclRootInfo::default();
            assert_eq!(init(1, &junk, 0, &cfg, &mut comm), PARA);

            // A one-rank communicator forms at once.
            hok(init(1, &root, 0, &cfg, &mut comm));
            assert_eq!(counters().comms, 1);
            let (mut size, mut rank) = (0, 9);
            hok((h.HcclGetRankSize)(comm, &mut size));
            hok((h.HcclGetRankId)(comm, &mut rank));
            assert_eq!((size, rank), (1, 0));
            assert_eq!((h.HcclGetRankSize)(comm, null_mut()), PTR);
            assert_eq!((h.HcclGetRankSize)(null_mut(), &mut size), PTR);
            assert_eq!((h.HcclGetRankId)(0x77 as HcclComm, &mut rank), PARA);
            let mut err = HcclResult(-1);
            hok((h.HcclGetCommAsyncError.unwrap())(comm, &mut err));
            assert_eq!(err, HcclResult::HCCL_SUCCESS);
            // The root info is used up once every rank joined.
            let mut other = null_mut();
            assert_eq!(init(1, &root, 0, &cfg, &mut other), PARA);
            // The default-config variant works the same way.
            let root2 = super::get_root_info().unwrap();
            hok((h.HcclCommInitRootInfo)(1, &root2, 0, &mut other));
            hok((h.HcclCommDestroy)(other));
            hok((h.HcclCommDestroy)(comm));
            assert_eq!((h.HcclCommDestroy)(comm), PARA);
            assert_eq!((h.HcclCommDestroy)(null_mut()), PTR);
            ok((a.aclrtResetDevice)(0));
        }
        assert_clean();
    }

    #[test]
    fn ranks_meet_and_conflicts_are_rejected() {
        let _g = test_lock();
        let h = hccl();
        // Three ranks join; each sees its own id.
        let ids = run_ranks(3, &test_config(), |r| {
            let (mut size, mut id) = (0, 0);
            // SAFETY: live communicator, valid out-pointers.
            unsafe {
                hok((h.HcclGetRankSize)(r.comm, &mut size));
                hok((h.HcclGetRankId)(r.comm, &mut id));
            }
            (size, id)
        });
        assert_eq!(ids, vec![(3, 0), (3, 1), (3, 2)]);

        // A rank that is already taken, or a different rank count, is refused at once.
        let root = root();
        let cfg = test_config();
        std::thread::scope(|s| {
            let first = s.spawn(|| {
                let mut comm = null_mut();
                // SAFETY: valid pointers.
                unsafe {
                    ok((acl().aclrtSetDevice)(0));
                    hok((h.HcclCommInitRootInfoConfig)(2, &root, 0, &cfg, &mut comm));
                    hok((h.HcclCommDestroy)(comm));
                    ok((acl().aclrtResetDevice)(0));
                }
            });
            // Wait until rank 0 has joined (and is waiting for rank 1).
            let session = super::parse_root(&root).unwrap().session;
            while super::hub::tests_hook::hellos(&session) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut comm = null_mut();
            // SAFETY: valid pointers.
            unsafe {
                ok((acl().aclrtSetDevice)(1));
                let init = h.HcclCommInitRootInfoConfig;
                assert_eq!(init(2, &root, 0, &cfg, &mut comm), PARA);
                assert!(recent().contains("already joined"));
                assert_eq!(init(3, &root, 1, &cfg, &mut comm), PARA);
                assert!(recent().contains("differs"));
                hok(init(2, &root, 1, &cfg, &mut comm));
                hok((h.HcclCommDestroy)(comm));
                ok((acl().aclrtResetDevice)(1));
            }
            first.join().unwrap();
        });
        assert_clean();
    }

    #[test]
    fn a_missing_rank_times_out() {
        let _g = test_lock();
        // Init waits at least 30 s (whatever the exec timeout); the wait itself is tested
        // with a shorter one.
        assert_eq!(super::join_timeout(Duration::from_secs(1)).as_secs(), 30);
        assert_eq!(super::join_timeout(Duration::from_secs(90)).as_secs(), 90);
        let root = super::parse_root(&root()).unwrap();
        let staging = super::os::memfd(4096).unwrap();
        let start = Instant::now();
        let err = super::join(
            &root,
            2,
            0,
            0,
            staging.as_fd(),
            Duration::from_millis(200),
            None,
        )
        .err()
        .unwrap();
        assert_eq!(err.code, HcclResult::HCCL_E_TIMEOUT);
        assert!(err.msg.contains("[1]"), "{}", err.msg);
        assert!(start.elapsed().as_secs_f64() < 5.0);
        drop(staging);
        assert_clean();
    }

    /// `HcclGetCommName` of `comm`.
    fn name(comm: HcclComm) -> String {
        let mut buf = [0x55 as std::ffi::c_char; COMM_NAME_MAX_LENGTH];
        // SAFETY: a buffer of COMM_NAME_MAX_LENGTH bytes.
        hok(unsafe { (hccl().HcclGetCommName.unwrap())(comm, buf.as_mut_ptr()) });
        let bytes: Vec<u8> = buf.iter().map(|&c| c as u8).collect();
        let nul = bytes.iter().position(|&b| b == 0).expect("NUL-terminated");
        String::from_utf8(bytes[..nul].to_vec()).unwrap()
    }

    #[test]
    fn comm_names_are_the_same_on_every_rank() {
        let _g = test_lock();
        let names = run_ranks(3, &test_config(), |r| name(r.comm));
        assert!(names[0].starts_with("symheap-emu-"), "{}", names[0]);
        assert!(names.iter().all(|n| *n == names[0]), "{names:?}");
        // Another communicator gets another name.
        let other = run_ranks(2, &test_config(), |r| name(r.comm));
        assert_ne!(other[0], names[0]);
        // The config's name, cut to 127 bytes.
        let mut cfg = test_config();
        for (dst, &b) in cfg.hcclCommName.iter_mut().zip(b"pp_group_7") {
            *dst = b as std::ffi::c_char;
        }
        assert_eq!(run_ranks(2, &cfg, |r| name(r.comm)), ["pp_group_7"; 2]);
        cfg.hcclCommName = [b'x' as std::ffi::c_char; 128];
        assert_eq!(run_ranks(1, &cfg, |r| name(r.comm)), ["x".repeat(127)]);
        let get = hccl().HcclGetCommName.unwrap();
        run_ranks(1, &test_config(), |r| {
            let mut buf = [0 as std::ffi::c_char; COMM_NAME_MAX_LENGTH];
            // SAFETY: the emulator validates the arguments.
            unsafe {
                assert_eq!(get(r.comm, null_mut()), PTR);
                assert_eq!(get(null_mut(), buf.as_mut_ptr()), PTR);
                assert_eq!(get(0x77 as HcclComm, buf.as_mut_ptr()), PARA);
            }
        });
        assert_clean();
    }

    /// `HcclGetCommName` of `comm`, as bytes.
    fn name_bytes(comm: HcclComm) -> Vec<u8> {
        let mut buf = [0x55 as std::ffi::c_char; COMM_NAME_MAX_LENGTH];
        // SAFETY: a buffer of COMM_NAME_MAX_LENGTH bytes.
        hok(unsafe { (hccl().HcclGetCommName.unwrap())(comm, buf.as_mut_ptr()) });
        let bytes: Vec<u8> = buf.iter().map(|&c| c as u8).collect();
        let nul = bytes.iter().position(|&b| b == 0).expect("NUL-terminated");
        bytes[..nul].to_vec()
    }

    #[test]
    fn comm_names_are_copied_as_bytes_and_hide_the_session_key() {
        let _g = test_lock();
        // Not UTF-8: copied unchanged, cut at 127 bytes.
        let mut cfg = test_config();
        cfg.hcclCommName = [0xE9u8 as std::ffi::c_char; 128];
        assert_eq!(
            run_ranks(1, &cfg, |r| name_bytes(r.comm)),
            [vec![0xE9; 127]]
        );
        // The rendezvous name (the default comm name, and the socket name every local user
        // can list) shows nothing of the key that authenticates joins.
        for _ in 0..4 {
            let root = super::parse_root(&root()).unwrap();
            for len in [4, 8] {
                let key = u64::from_le_bytes(root.session[..8].try_into().unwrap());
                let part = format!("{:x}", key & (u64::MAX >> (64 - 8 * len)));
                assert!(!root.name.contains(&part), "{} shows {part}", root.name);
            }
        }
        assert_clean();
    }

    #[test]
    fn ranks_with_different_buffer_sizes_are_refused() {
        let _g = test_lock();
        let root = root();
        let codes: Vec<(HcclResult, String)> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..2u32)
                .map(|rank| {
                    let root = &root;
                    s.spawn(move || {
                        let mut cfg = test_config();
                        cfg.hcclBufferSize = 1 + rank;
                        let mut comm = null_mut();
                        // SAFETY: valid pointers.
                        unsafe {
                            ok((acl().aclrtSetDevice)(rank as i32));
                            let code =
                                (hccl().HcclCommInitRootInfoConfig)(2, root, rank, &cfg, &mut comm);
                            let msg = recent();
                            if code == HcclResult::HCCL_SUCCESS {
                                hok((hccl().HcclCommDestroy)(comm));
                            }
                            ok((acl().aclrtResetDevice)(rank as i32));
                            (code, msg)
                        }
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for (code, msg) in codes {
            assert_eq!(code, PARA, "{msg}");
            assert!(msg.contains("hcclBufferSize"), "{msg}");
        }
        assert_clean();
    }

    /// A rank of `HcclCommInitAll` that fails makes the others give up at once instead of
    /// waiting 30 s for it to join; its own failure is the one returned.
    #[test]
    fn init_all_fails_at_once_when_a_rank_fails() {
        let _g = test_lock();
        let root = super::get_root_info().unwrap();
        let config = test_config();
        let start = Instant::now();
        let err = super::init_ranks(&[0, 1, 2], &|rank, d, cancel| {
            if rank == 1 {
                // The others are waiting by now.
                std::thread::sleep(Duration::from_millis(50));
                return hccl_fail(HcclResult::HCCL_E_INTERNAL, "rank 1 breaks");
            }
            super::device::set(d).unwrap();
            super::init_cancellable(3, &root, rank, &config, None, Some(cancel))
        })
        .unwrap_err();
        assert_eq!(err.code, HcclResult::HCCL_E_INTERNAL, "{}", err.msg);
        assert!(
            err.msg.contains("rank 1 (device 1): rank 1 breaks"),
            "{}",
            err.msg
        );
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(counters().comms, 0);
        assert_clean();
    }

    #[test]
    fn init_all_makes_a_communicator_per_device() {
        let _g = test_lock();
        let (a, h) = (acl(), hccl());
        let init_all = h.HcclCommInitAll.unwrap();
        let mut comms = [null_mut(); 4];
        let mut devices = [3, 1, 0, 2];
        // SAFETY: arrays of ndev entries, or null where the emulator must refuse.
        unsafe {
            ok((a.aclrtSetDevice)(5));
            assert_eq!(init_all(4, null_mut(), comms.as_mut_ptr()), PTR);
            assert_eq!(init_all(4, devices.as_mut_ptr(), null_mut()), PTR);
            assert_eq!(init_all(0, devices.as_mut_ptr(), comms.as_mut_ptr()), PARA);
            let mut twice = [0, 1, 0];
            assert_eq!(init_all(3, twice.as_mut_ptr(), comms.as_mut_ptr()), PARA);
            assert!(recent().contains("twice"), "{}", recent());
            for bad in [-1, 64] {
                let mut bad = [0, bad];
                assert_eq!(init_all(2, bad.as_mut_ptr(), comms.as_mut_ptr()), PARA);
            }
            assert_eq!(counters().comms, 0);
            hok(init_all(4, devices.as_mut_ptr(), comms.as_mut_ptr()));
            // The calling thread's device is unchanged.
            let mut dev = -1;
            ok((a.aclrtGetDevice)(&mut dev));
            assert_eq!(dev, 5);
            ok((a.aclrtResetDevice)(5));
        }
        assert_eq!(counters().comms, 4);
        let names: Vec<String> = comms.iter().map(|&c| name(c)).collect();
        assert!(names.iter().all(|n| *n == names[0]), "{names:?}");
        // One thread per device runs a collective on its communicator.
        let count = 1000usize;
        let sums = std::thread::scope(|s| {
            let threads: Vec<_> = (0..4)
                .map(|i| {
                    let (comm, device) = (comms[i] as usize, devices[i]);
                    s.spawn(move || {
                        let comm = comm as HcclComm;
                        let mut stream = null_mut();
                        let (mut rank, mut size) = (9, 0);
                        // SAFETY: live handles and valid out-pointers.
                        unsafe {
                            ok((a.aclrtSetDevice)(device));
                            hok((h.HcclGetRankId)(comm, &mut rank));
                            hok((h.HcclGetRankSize)(comm, &mut size));
                            ok((a.aclrtCreateStream)(&mut stream));
                        }
                        assert_eq!((rank, size), (i as u32, 4));
                        let buf = DevBuf::new(device as u32, crate::GRANULARITY);
                        let input: Vec<i64> =
                            (0..count as i64).map(|e| e * (i as i64 + 1)).collect();
                        buf.write(0, &input);
                        // SAFETY: live handles, mapped device memory.
                        unsafe {
                            hok((h.HcclAllReduce)(
                                buf.ptr,
                                buf.ptr,
                                count as u64,
                                HcclDataType::HCCL_DATA_TYPE_INT64,
                                HcclReduceOp::HCCL_REDUCE_SUM,
                                comm,
                                stream,
                            ));
                            ok((a.aclrtSynchronizeStream)(stream));
                        }
                        let out = buf.read::<i64>(0, count);
                        buf.free();
                        // SAFETY: handles made above.
                        unsafe {
                            ok((a.aclrtDestroyStream)(stream));
                            hok((h.HcclCommDestroy)(comm));
                            ok((a.aclrtResetDevice)(device));
                        }
                        out
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().unwrap())
                .collect::<Vec<_>>()
        });
        for out in sums {
            for (e, &v) in out.iter().enumerate() {
                assert_eq!(v, 10 * e as i64, "element {e}");
            }
        }
        assert_clean();
    }

    #[test]
    fn config_fields_are_read_by_size() {
        let mut cfg = test_config();
        cfg.hcclExecTimeOut = 7;
        cfg.hcclSymWinMaxMemSizePerRank = 3;
        // Claim a size that stops before hcclExecTimeOut: the library's defaults apply.
        let mut short = cfg;
        short.reserved[0..8].copy_from_slice(&300usize.to_ne_bytes());
        // SAFETY: both point to whole config structs.
        let (full, cut) = unsafe { (super::read_config(&cfg), super::read_config(&short)) };
        let (full, cut) = (full.unwrap(), cut.unwrap());
        assert_eq!(full.hcclExecTimeOut, 7);
        assert_eq!(full.hcclSymWinMaxMemSizePerRank, 3);
        assert_eq!(cut.hcclExecTimeOut, -1);
        assert_eq!(cut.hcclSymWinMaxMemSizePerRank, 16);
        assert_eq!(super::exec_timeout(&full).unwrap().as_secs(), 7);
        // Huge timeouts are clamped to a day, so deadlines cannot overflow.
        let mut huge = cfg;
        huge.hcclExecTimeOut = i32::MAX;
        assert_eq!(super::exec_timeout(&huge).unwrap(), super::MAX_TIMEOUT);
        assert_eq!(super::env_timeout(Some("1e19")), super::MAX_TIMEOUT);
        assert_eq!(super::env_timeout(Some("0.5")), Duration::from_millis(500));
        assert_eq!(super::env_timeout(Some("-1")), super::DEFAULT_EXEC_TIMEOUT);
        assert_eq!(super::env_timeout(None), super::DEFAULT_EXEC_TIMEOUT);
        // A variable set under its old name fails init, naming the new one.
        let old = |set: &'static str| {
            move |name: &str| (name == set).then(|| std::ffi::OsString::from("5"))
        };
        assert!(super::check_renamed(|_| None).is_ok());
        let err = super::check_renamed(old("SYMHEAP_EMU_EVENT_WAIT_S")).unwrap_err();
        assert_eq!(err.code, HcclResult::HCCL_E_PARA);
        assert!(
            err.msg.contains("SYMHEAP_EMU_EVENT_WAIT_SECS"),
            "{}",
            err.msg
        );
        assert!(super::check_renamed(old("SYMHEAP_EMU_EXEC_TIMEOUT_S")).is_err());
        // HCCL_EXEC_TIMEOUT, as CANN parses it.
        let exec = |v: &str| super::hccl_exec_timeout(v).map_err(|e| e.code);
        assert_eq!(exec("15"), Ok(Duration::from_secs(15)));
        assert_eq!(exec("1.25"), Ok(Duration::from_millis(1250)));
        assert_eq!(exec("0"), Ok(super::MAX_TIMEOUT));
        assert_eq!(exec("2147483647"), Ok(super::MAX_TIMEOUT));
        for bad in ["", "-1", "1.", "1.234", "abc", " 5", "2147483648", "1e3"] {
            assert_eq!(exec(bad), Err(HcclResult::HCCL_E_PARA), "{bad:?}");
        }
        let connect = |v: &str| super::hccl_connect_timeout(v).map_err(|e| e.code);
        assert_eq!(connect("120"), Ok(Duration::from_secs(120)));
        assert_eq!(connect("7200"), Ok(Duration::from_secs(7200)));
        for bad in ["", "119", "7201", "1.5", "abc", "00000000120"] {
            assert_eq!(connect(bad), Err(HcclResult::HCCL_E_PARA), "{bad:?}");
        }
    }
}
