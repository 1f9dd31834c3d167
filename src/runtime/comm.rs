//! Communicators: bootstrap (root info), configuration, and the communicator handle.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::collective_order::CollectiveOrder;
use super::{Mapping, calls};
use super::{Runtime, Stream};
use crate::sys::{
    HCCL_EXP_BUFFER_BYTES, HCCL_ROOT_INFO_BYTES, HcclComm, HcclCommConfig, HcclCommSymWindow,
    HcclResult, HcclRootInfo,
};
use crate::{Error, Result};

/// The bootstrap blob that rank 0 creates ([`RootInfo::new`]) and every rank passes to
/// [`Comm::init`]. Ship it to other processes with [`as_bytes`](RootInfo::as_bytes).
#[derive(Clone, Debug)]
pub struct RootInfo(HcclRootInfo);

impl RootInfo {
    /// Creates a new communicator bootstrap (`HcclGetRootInfo`); call it on one rank only.
    ///
    /// # Errors
    /// The runtime's error.
    pub fn new(rt: &Runtime) -> Result<Self> {
        let mut info = HcclRootInfo::default();
        // SAFETY: valid out-pointer to a correctly sized struct.
        unsafe { calls::HcclGetRootInfo(rt, &mut info) }?;
        Ok(RootInfo(info))
    }

    /// The raw bytes, to send to the other ranks.
    pub fn as_bytes(&self) -> [u8; HCCL_ROOT_INFO_BYTES] {
        self.0.internal.map(|c| c as u8)
    }

    /// Rebuilds a root info from bytes made by [`as_bytes`](RootInfo::as_bytes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `bytes` is not exactly `HCCL_ROOT_INFO_BYTES` long.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let bytes: &[u8; HCCL_ROOT_INFO_BYTES] = bytes.try_into().map_err(|_| {
            Error::invalid(format!(
                "root info is {HCCL_ROOT_INFO_BYTES} bytes, got {}",
                bytes.len()
            ))
        })?;
        Ok(RootInfo(HcclRootInfo {
            internal: bytes.map(|b| b as std::ffi::c_char),
        }))
    }
}

/// Communicator settings: a safe builder over `HcclCommConfig` (version 11), starting from the
/// library defaults (`HcclCommConfigInit`).
#[derive(Clone, Debug)]
pub struct CommConfig {
    raw: HcclCommConfig,
}

impl Default for CommConfig {
    fn default() -> Self {
        CommConfig {
            raw: HcclCommConfig::init(),
        }
    }
}

impl CommConfig {
    /// The library defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Collective execution timeout in seconds (`hcclExecTimeOut`): a collective whose peers do
    /// not arrive within it fails with `HCCL_E_TIMEOUT`.
    pub fn exec_timeout_secs(mut self, secs: i32) -> Self {
        self.raw.hcclExecTimeOut = secs;
        self
    }

    /// Size of the HCCL staging buffer in MB (`hcclBufferSize`).
    pub fn buffer_size_mb(mut self, mb: u32) -> Self {
        self.raw.hcclBufferSize = mb;
        self
    }

    /// The size of one HCCL staging buffer in MiB: `hcclBufferSize`, or HCCL's default of
    /// 200 where the config leaves it unset (0 or `0xFFFFFFFF`), as the emulator reads it.
    /// (On CANN the environment variable `HCCL_BUFFSIZE` may set that default; this reads
    /// the config alone.)
    ///
    /// # Examples
    /// ```
    /// use symheap::CommConfig;
    ///
    /// assert_eq!(CommConfig::new().buffer_mb(), 200);
    /// assert_eq!(CommConfig::new().buffer_size_mb(64).buffer_mb(), 64);
    /// assert_eq!(CommConfig::new().buffer_size_mb(64).buffer_bytes(), (2 * 64 + 1) << 20);
    /// ```
    pub fn buffer_mb(&self) -> u32 {
        self.raw.buffer_mb()
    }

    /// The device memory HCCL holds for a communicator made with this config, for its own
    /// buffers: the input and output CCL buffers of [`buffer_mb`](Self::buffer_mb) MiB each
    /// and the 1 MiB expansion buffer, one allocation (hicann/hcomm `ccl_buffer_manager.cc`,
    /// `CreateCommCCLbuffer`). The runtime counts 32 bytes of padding on top.
    pub fn buffer_bytes(&self) -> u64 {
        2 * (u64::from(self.buffer_mb()) << 20) + HCCL_EXP_BUFFER_BYTES as u64
    }

    /// Per-rank stride of the symmetric heap in GiB (`hcclSymWinMaxMemSizePerRank`, default
    /// 16): the most window memory one rank can register.
    pub fn sym_window_stride_gib(mut self, gib: u64) -> Self {
        self.raw.hcclSymWinMaxMemSizePerRank = gib;
        self
    }

    /// Operator expansion mode (`hcclOpExpansionMode`: 0 default, 1 host, 2 AI CPU, 3 AIV).
    /// Symmetric windows need AI CPU (2) on real hardware.
    pub fn op_expansion_mode(mut self, mode: u32) -> Self {
        self.raw.hcclOpExpansionMode = mode;
        self
    }

    /// The raw struct, as sent to `HcclCommInitRootInfoConfig`.
    pub fn as_raw(&self) -> &HcclCommConfig {
        &self.raw
    }
}

/// One rank's handle on a communicator (`HcclComm`). Cheap to clone; destroyed
/// (`HcclCommDestroy`) when the last clone and every window registered on it are gone.
///
/// Calls that take the communicator are serialised by a lock, because HCCL (like NCCL) does
/// not promise that one communicator may be used from several threads at once. Collective
/// calls must still be made in the same order on every rank. Its collectives run in call
/// order on any streams: one queued on another stream than the collective before waits for
/// it (see [`RawComm`](crate::raw::RawComm)).
#[derive(Clone, Debug)]
pub struct Comm {
    inner: Arc<CommInner>,
}

#[derive(Debug)]
struct CommInner {
    rt: Runtime,
    raw: HcclComm,
    rank: u32,
    size: u32,
    device: u32,
    /// Held around every C call that takes `raw`; it keeps where the last collective was
    /// queued, so the next one is ordered after it.
    calls: Mutex<CollectiveOrder>,
    /// Memory of windows whose deregistration failed or was left to the destroy (with their
    /// handles, as addresses, while still registered): it may only be unmapped and freed
    /// after `HcclCommDestroy` has deregistered it, or [`Comm::release_orphans_after_loss`].
    orphans: Mutex<Vec<(Option<usize>, Arc<Mapping>)>>,
    /// The scratch memory of [`Comm::agree`], made at its first use.
    agreement: Mutex<Option<Arc<Mapping>>>,
    /// Whether it expands collectives on the AI CPU, the one mode that uses windows.
    ai_cpu: bool,
    /// Where its ranks are, as HCCL's checks need it (from its rank graph).
    placement: crate::path_rules::Placement,
    /// Set once [`Comm::release`] destroyed it while handles remained.
    released: AtomicBool,
    /// The settings it was made with: a split's default.
    config: CommConfig,
    /// For a sub-communicator, the communicator it was split from and the ranks there of its
    /// members, in sub-rank order. Holding the parent destroys sub-communicators first, the
    /// order HCCL asks for.
    parent: Option<(Comm, Vec<u32>)>,
}

// SAFETY: an HcclComm is an opaque handle that may be passed between threads.
unsafe impl Send for CommInner {}
// SAFETY: every C call that takes the handle holds `calls`, so the library never sees two
// threads on one communicator at once; the other fields are immutable or locked.
unsafe impl Sync for CommInner {}

impl Comm {
    /// Joins communicator `root` as `rank` of `nranks` (`HcclCommInitRootInfoConfig`), on the
    /// calling thread's current device. Blocks until every rank has joined.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `rank >= nranks`; the runtime's error otherwise (no device
    /// set, bad config, timeout).
    pub fn init(
        rt: &Runtime,
        nranks: u32,
        root: &RootInfo,
        rank: u32,
        config: &CommConfig,
    ) -> Result<Comm> {
        if rank >= nranks {
            return Err(Error::invalid(format!(
                "rank {rank} is not below the rank count {nranks}"
            )));
        }
        let device = rt.current_device()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: valid root info, config and out-pointer.
        unsafe {
            calls::HcclCommInitRootInfoConfig(rt, nranks, &root.0, rank, config.as_raw(), &mut raw)
        }?;
        Comm::wrap(rt, raw, (rank, nranks), device, config, None)
    }

    /// Owns the fresh communicator `raw`, which must be `rank` of `size`, and checks that
    /// the library agrees.
    pub(super) fn wrap(
        rt: &Runtime,
        raw: HcclComm,
        (rank, size): (u32, u32),
        device: u32,
        config: &CommConfig,
        parent: Option<(Comm, Vec<u32>)>,
    ) -> Result<Comm> {
        let placement = match placement(rt, raw) {
            Ok(placement) => placement,
            Err(e) => {
                // Not yet owned by a `Comm`, whose drop would destroy it.
                // SAFETY: `raw` is the live communicator just made, destroyed exactly once.
                if let Err(destroyed) = unsafe { calls::HcclCommDestroy(rt, raw) } {
                    rt.record_drop_error(destroyed);
                }
                return Err(e);
            }
        };
        let comm = Comm {
            inner: Arc::new(CommInner {
                rt: rt.clone(),
                raw,
                rank,
                size,
                device,
                calls: Mutex::new(CollectiveOrder::default()),
                orphans: Mutex::new(Vec::new()),
                agreement: Mutex::new(None),
                ai_cpu: crate::path_rules::expands_on_ai_cpu(
                    config.as_raw().hcclOpExpansionMode,
                    std::env::var("HCCL_OP_EXPANSION_MODE").ok().as_deref(),
                ),
                placement,
                config: config.clone(),
                parent,
                released: AtomicBool::new(false),
            }),
        };
        let (mut got_rank, mut got_size) = (0u32, 0u32);
        // SAFETY: live communicator and valid out-pointers.
        unsafe { calls::HcclGetRankId(rt, raw, &mut got_rank) }?;
        // SAFETY: as above.
        unsafe { calls::HcclGetRankSize(rt, raw, &mut got_size) }?;
        if (got_rank, got_size) != (rank, size) {
            return Err(Error::Asymmetric(format!(
                "asked for rank {rank} of {size}, the library says {got_rank} of {got_size}"
            )));
        }
        Ok(comm)
    }

    /// Splits off the sub-communicator of the ranks `ranks` of this one
    /// (`HcclCreateSubCommConfig`): `ranks[i]` becomes its rank `i`, and this rank must be
    /// among them. Only the members call it, each with the same `ranks`, `id` and `config`
    /// (ranks outside make no call); `id` names it (`{name}_sub_{id}`, unless the config
    /// sets a name) and must differ between the live sub-communicators of this one. It
    /// blocks until every member has called.
    ///
    /// The sub-communicator keeps this one alive, so it is always destroyed first.
    ///
    /// # Examples
    /// ```
    /// use symheap::{CommConfig, emu};
    ///
    /// let sizes = emu::launch(4, |world| {
    ///     // Two pairs: {0, 1} and {2, 3}.
    ///     let first = world.rank() & !1;
    ///     let pair = world.split(&[first, first + 1], u64::from(first), &CommConfig::new())?;
    ///     assert_eq!(pair.rank(), world.rank() % 2);
    ///     assert_eq!(pair.global_ranks(), vec![first, first + 1]);
    ///     Ok(pair.rank_count())
    /// })?;
    /// assert_eq!(sizes, [2; 4]);
    /// # Ok::<(), symheap::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when this is a sub-communicator itself (HCCL splits only
    /// global ones), when `ranks` is empty, repeats a rank, names one this communicator does
    /// not have or leaves this rank out, or when `id` is `0xFFFFFFFF` (HCCL's "not a member");
    /// [`Error::Unsupported`] if the library lacks the call; the library's error otherwise
    /// (members whose calls differ all fail alike).
    pub fn split(&self, ranks: &[u32], id: u64, config: &CommConfig) -> Result<Comm> {
        if self.inner.parent.is_some() {
            return Err(Error::invalid(
                "split: only a global communicator can be split, not a sub-communicator",
            ));
        }
        let index = check_members(ranks, self.rank(), self.rank_count())?;
        if id == 0xFFFF_FFFF {
            return Err(Error::invalid(
                "split: id 0xFFFFFFFF means \"not a member\" to HCCL",
            ));
        }
        let rt = self.runtime();
        let mut ids = ranks.to_vec();
        let mut raw_config = *config.as_raw();
        let mut parent = self.as_raw();
        let mut raw = std::ptr::null_mut();
        // Not under the parent's call lock: the call waits for the other members, and this
        // process's other threads must go on using the parent meanwhile (one may be a member).
        // SAFETY: every pointer is valid for the call: the parent handle, `ids.len()` rank
        // ids, a config of its own size, and the out-pointer.
        unsafe {
            calls::HcclCreateSubCommConfig(
                rt,
                &mut parent,
                ids.len() as u32,
                ids.as_mut_ptr(),
                id,
                index,
                &mut raw_config,
                &mut raw,
            )
        }?;
        let parent = Some((self.clone(), ranks.to_vec()));
        let size = ranks.len() as u32;
        Comm::wrap(rt, raw, (index, size), self.device(), config, parent)
    }

    /// The communicator this one was split from ([`Comm::split`]), `None` for a global one.
    pub fn parent(&self) -> Option<&Comm> {
        self.inner.parent.as_ref().map(|(p, _)| p)
    }

    /// The ranks of the members in the global communicator, in this communicator's rank
    /// order (`0..size` for a global one).
    pub fn global_ranks(&self) -> Vec<u32> {
        match &self.inner.parent {
            Some((_, ranks)) => ranks.clone(),
            None => (0..self.rank_count()).collect(),
        }
    }

    /// The settings the communicator was made with.
    pub fn config(&self) -> &CommConfig {
        &self.inner.config
    }

    /// Whether `other` is a handle on this very communicator.
    pub fn same_as(&self, other: &Comm) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The communicator's name (`HcclGetCommName`): the same on every rank.
    ///
    /// # Errors
    /// [`Error::Unsupported`] if the library lacks the call; the library's error.
    pub fn name(&self) -> Result<String> {
        let mut name = [0 as std::ffi::c_char; crate::sys::COMM_NAME_MAX_LENGTH];
        self.serialised(|comm| {
            // SAFETY: a live communicator and room for the longest name.
            unsafe { calls::HcclGetCommName(self.runtime(), comm, name.as_mut_ptr()) }
        })?;
        let bytes: Vec<u8> = name
            .iter()
            .map(|&c| c as u8)
            .take_while(|&b| b != 0)
            .collect();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.inner.rank
    }

    /// The number of ranks (HCCL's rank size, `HcclGetRankSize`).
    #[doc(alias("size", "world_size", "rank_size"))]
    pub fn rank_count(&self) -> u32 {
        self.inner.size
    }

    /// The device this rank runs on.
    pub fn device(&self) -> u32 {
        self.inner.device
    }

    /// The runtime the communicator belongs to.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.rt
    }

    /// The raw handle, for calls this crate does not wrap (they are not serialised with the
    /// wrapped ones).
    pub fn as_raw(&self) -> HcclComm {
        if self.is_released() {
            return std::ptr::null_mut();
        }
        self.inner.raw
    }

    /// Whether a deep sleep of a pool destroyed the communicator in place
    /// ([`SleepPlan::release_communicators`](crate::SleepPlan::release_communicators)).
    pub fn is_released(&self) -> bool {
        self.inner.released.load(Ordering::Acquire)
    }

    /// Destroys the communicator now (`HcclCommDestroy`), whatever handles on it remain, so
    /// that HCCL's own memory (its buffers, `2 × hcclBufferSize` + 1 MiB per communicator) comes
    /// back: a deep sleep of a pool ([`SleepPlan::release_communicators`]). Every handle stays
    /// a valid value; a collective on it then fails with [`Error::InvalidArgument`] saying
    /// so, and other calls get HCCL's error for a null communicator. Release a
    /// communicator's sub-communicators before it, as HCCL asks of destroys. Idempotent.
    ///
    /// [`SleepPlan::release_communicators`]: crate::SleepPlan::release_communicators
    ///
    /// # Errors
    /// The library's error (the communicator then stays live).
    pub(crate) fn release(&self) -> Result<()> {
        let _serial = self.inner.calls.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_released() {
            return Ok(());
        }
        // SAFETY: a live communicator (the flag), destroyed once: the flag is set under the
        // call lock, and `Drop` skips a released one.
        unsafe { calls::HcclCommDestroy(&self.inner.rt, self.inner.raw) }?;
        self.inner.released.store(true, Ordering::Release);
        // Deregistered by the destroy: their memory may go now.
        let orphans =
            std::mem::take(&mut *self.inner.orphans.lock().unwrap_or_else(|e| e.into_inner()));
        drop(orphans);
        self.release_agreement_scratch();
        Ok(())
    }

    /// Runs `f`, one HCCL call on this communicator, under the call lock: calls on one
    /// communicator never overlap (see the type's docs). A failed call's text
    /// (`HcclGetErrorString`, `aclGetRecentErrMsg`) is fetched inside `f` too, by the call
    /// layer; neither takes the communicator, and the ACL text is per thread.
    pub(crate) fn serialised<T>(&self, f: impl FnOnce(HcclComm) -> T) -> T {
        let _serial = self.inner.calls.lock().unwrap_or_else(|e| e.into_inner());
        f(self.as_raw())
    }

    /// Runs `f`, a collective queued on `stream`, under the call lock, after ordering it
    /// behind the communicator's last collective if that was queued on another stream
    /// ([`CollectiveOrder`]): a communicator's collectives run in call order.
    pub(crate) fn collective_on(
        &self,
        stream: &Stream,
        f: impl FnOnce(HcclComm) -> Result<()>,
    ) -> Result<()> {
        let mut order = self.inner.calls.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_released() {
            return Err(Error::invalid(
                "the communicator was released by a deep sleep of a pool \
                 (SleepPlan::release_communicators): make a new one",
            ));
        }
        order.before(&self.inner.rt, stream)?;
        f(self.as_raw())?;
        order.after(stream);
        Ok(())
    }

    /// How many handles share this communicator (this one included): what still holds it.
    #[cfg_attr(not(feature = "emulator"), allow(dead_code))]
    pub(crate) fn handles(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// Whether the communicator expands collectives on the AI CPU (its config's
    /// `hcclOpExpansionMode`, else `HCCL_OP_EXPANSION_MODE`): only then does HCCL use windows.
    pub fn expands_on_ai_cpu(&self) -> bool {
        self.inner.ai_cpu
    }

    /// Whether the communicator's ranks are in more than one SuperPoD (an Atlas A3
    /// SuperPoD: 384 NPUs joined by HCCS). HCCL then has no symmetric windows on it: it
    /// refuses to register them and stages every collective
    /// ([`Staged::CrossSuperPod`](crate::Staged::CrossSuperPod)). Learned once, when the
    /// communicator is made, from HCCL's rank graph (`HcclRankGraphGetLayers`: a layer 2,
    /// the layer across SuperPoDs, exists only then); `false` where the library lacks the
    /// rank graph. A [`SymPool`](crate::SymPool) on such a communicator maps its segments
    /// without registering them: its blocks' `window()` is
    /// [`WindowHandle::NONE`](crate::raw::WindowHandle::NONE), and an attached group that
    /// spans SuperPoDs gets no windows either.
    pub fn spans_superpods(&self) -> bool {
        self.inner.placement.spans_superpods
    }

    /// Whether the communicator's ranks are on several nodes (servers), one on each, or on
    /// nodes holding different numbers of them: HCCL then stages every collective although
    /// windows register ([`Staged::RanksPerNode`](crate::Staged::RanksPerNode)). Learned
    /// once, when the communicator is made, from HCCL's rank graph (layer 0's instance sizes,
    /// `HcclRankGraphGetInstSizeListByLayer`); `false` where the library lacks it.
    pub fn has_uneven_nodes(&self) -> bool {
        self.inner.placement.uneven_nodes
    }

    /// Where the ranks are, as HCCL's path checks need it.
    pub(crate) fn placement(&self) -> crate::path_rules::Placement {
        self.inner.placement
    }

    /// Where [`Comm::agree`] keeps its scratch memory.
    pub(super) fn agreement_slot(&self) -> &Mutex<Option<Arc<Mapping>>> {
        &self.inner.agreement
    }

    /// Keeps the memory of a window whose deregistration failed, or was left to the destroy,
    /// until the communicator is destroyed (which deregisters it), so it is never freed while
    /// still registered. `window` is its handle (`HcclCommSymWindow`, as an address) if it is
    /// still registered.
    pub(crate) fn adopt_orphan(&self, window: Option<usize>, mapping: Arc<Mapping>) {
        self.inner
            .orphans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((window, mapping));
    }

    /// After the loss of a peer, deregisters the windows left to the destroy, each on this
    /// rank alone (a deregistration whose peer is gone makes no exchange, as HCCL's makes
    /// none), and frees their memory: it may be where a pool maps its memory again. An
    /// orphan whose deregistration fails stays for the destroy. The first failure.
    pub(crate) fn release_orphans_after_loss(&self) -> Result<()> {
        let orphans =
            std::mem::take(&mut *self.inner.orphans.lock().unwrap_or_else(|e| e.into_inner()));
        if self.is_released() {
            // The destroy deregistered them; a handle adopted since is gone with it.
            return Ok(());
        }
        let mut result = Ok(());
        for (window, mapping) in orphans {
            let deregistered = window.map_or(Ok(()), |w| {
                self.serialised(|_| {
                    // SAFETY: a window registered on this communicator and never
                    // deregistered: its owner left it here instead.
                    unsafe {
                        calls::HcclCommSymWinDeregister(&self.inner.rt, w as HcclCommSymWindow)
                    }
                })
            });
            match deregistered {
                Ok(()) => drop(mapping),
                Err(e) => {
                    self.adopt_orphan(window, mapping);
                    result = result.and(Err(e));
                }
            }
        }
        result
    }

    /// Enqueues a barrier across all ranks on `stream`.
    ///
    /// # Errors
    /// The runtime's error for arguments checked at enqueue time.
    pub fn barrier(&self, stream: &Stream) -> Result<()> {
        self.collective_on(stream, |comm| {
            // SAFETY: live communicator and stream.
            unsafe { calls::HcclBarrier(self.runtime(), comm, stream.as_raw()) }
        })
    }

    /// The communicator's pending asynchronous error (`HcclGetCommAsyncError`): the code of
    /// queued work that failed, or `None`.
    ///
    /// # Errors
    /// The runtime's error if the query itself fails; [`Error::Unsupported`] if the library
    /// lacks the call.
    pub fn async_error(&self) -> Result<Option<HcclResult>> {
        let mut pending = HcclResult::HCCL_SUCCESS;
        self.serialised(|comm| {
            // SAFETY: live communicator and valid out-pointer.
            unsafe { calls::HcclGetCommAsyncError(self.runtime(), comm, &mut pending) }
        })?;
        Ok((pending != HcclResult::HCCL_SUCCESS).then_some(pending))
    }

    /// Waits for `stream`; if it failed and the communicator has an asynchronous error (a
    /// collective timed out, say), reports that as [`Error::Collective`].
    ///
    /// # Errors
    /// [`Error::Collective`] with the communicator's code and the stream's failure as its
    /// source; the stream's failure alone when the communicator reports none.
    pub fn synchronize(&self, stream: &Stream) -> Result<()> {
        let Err(stream_err) = stream.synchronize() else {
            return Ok(());
        };
        match self.async_error() {
            Ok(Some(code)) => Err(Error::Collective {
                code,
                source: Box::new(stream_err),
            }),
            _ => Err(stream_err),
        }
    }
}

/// The index of `me` in `ranks`, which must be distinct ranks below `size`.
fn check_members(ranks: &[u32], me: u32, size: u32) -> Result<u32> {
    if ranks.is_empty() {
        return Err(Error::invalid("split: no ranks"));
    }
    for (i, &r) in ranks.iter().enumerate() {
        if r >= size {
            return Err(Error::invalid(format!(
                "split: rank {r} is not below the communicator's {size} ranks"
            )));
        }
        if ranks[..i].contains(&r) {
            return Err(Error::invalid(format!("split: rank {r} appears twice")));
        }
    }
    let index = ranks.iter().position(|&r| r == me).ok_or_else(|| {
        Error::invalid(format!(
            "split: this rank ({me}) is not among {ranks:?}; ranks outside make no call"
        ))
    })?;
    Ok(index as u32)
}

impl Drop for CommInner {
    fn drop(&mut self) {
        if *self.released.get_mut() {
            return;
        }
        // Runs before the fields drop: the orphaned windows' memory is unmapped and freed only
        // after this deregisters them.
        // SAFETY: `raw` is a live communicator destroyed exactly once; every window holds a
        // clone of the `Comm`, so none is left.
        let result = unsafe { calls::HcclCommDestroy(&self.rt, self.raw) };
        if let Err(e) = result {
            self.rt.record_drop_error(e);
        }
    }
}

/// Where the ranks of the communicator `raw` are, from HCCL's rank graph for an Atlas A3
/// (hicann/hcomm `rank_graph.cc`, `RankGraphV1::InitNetLayer`): layer 0 is the server, and
/// its instance sizes are the rank counts of the servers; layer 1 the SuperPoD (when there
/// are several servers); layer 2, every rank, exists only when there are several SuperPoDs.
/// A library without the rank graph says nothing: one server, one SuperPoD.
fn placement(rt: &Runtime, raw: HcclComm) -> Result<crate::path_rules::Placement> {
    let (mut layers, mut count) = (std::ptr::null_mut(), 0u32);
    // SAFETY: a live communicator and valid out-pointers; the list the library returns is
    // its own, read at once below.
    match unsafe { calls::HcclRankGraphGetLayers(rt, raw, &mut layers, &mut count) } {
        Ok(()) => {}
        Err(Error::Unsupported { .. }) => return Ok(Default::default()),
        Err(e) => return Err(e),
    }
    let spans_superpods = !layers.is_null()
        // SAFETY: the library returned `count` layer numbers at `layers`.
        && unsafe { std::slice::from_raw_parts(layers, count as usize) }.contains(&2);
    let (mut sizes, mut servers) = (std::ptr::null_mut(), 0u32);
    // SAFETY: as above; layer 0 always exists.
    match unsafe {
        calls::HcclRankGraphGetInstSizeListByLayer(rt, raw, 0, &mut sizes, &mut servers)
    } {
        Ok(()) => {}
        Err(Error::Unsupported { .. }) => {
            return Ok(crate::path_rules::Placement {
                spans_superpods,
                uneven_nodes: false,
            });
        }
        Err(e) => return Err(e),
    }
    let sizes: &[u32] = match sizes.is_null() {
        true => &[],
        // SAFETY: the library returned `servers` rank counts at `sizes`.
        false => unsafe { std::slice::from_raw_parts(sizes, servers as usize) },
    };
    let uneven_nodes = sizes.iter().any(|&s| s != sizes[0]) || (sizes.len() > 1 && sizes[0] == 1);
    Ok(crate::path_rules::Placement {
        spans_superpods,
        uneven_nodes,
    })
}
