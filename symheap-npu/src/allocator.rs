//! The allocator behind the exports: symmetric segments carved by symheap's deterministic
//! heap, registered in every attached communicator.
//!
//! A *segment* is device memory from reserve + allocate physical + map ([`Mapping`]), its
//! size a multiple of the device granularity: [`Config::segment_bytes`], or a request's own
//! size where that is larger. Each segment has a [`Heap`] of 512-byte granules (torch_npu's
//! block alignment). A request takes the first segment, in the order they were made, whose
//! heap holds it; where none does, a new segment is made. Every decision depends on the
//! order of the calls and their sizes alone, so ranks that make the same calls get the same
//! segments and the same offsets in them.
//!
//! Once a communicator is attached, every segment is one of its symmetric windows, so an
//! HCCL collective on any pointer handed out finds it (`HcclCommSymWinGet`) at the same offset
//! on every rank. A new segment is registered there at once, after an agreement (see
//! [`crate::agreement`]) that also compares every rank's call history.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use symheap::heap::{Block, Heap, fold_words};
use symheap::raw::{Mapping, calls};
use symheap::sys::{HcclComm, HcclCommSymWindow, HcclResult, aclrtStream};
use symheap::{Runtime, Stream};

use crate::agreement::{self, Verdict};
use crate::config::{Config, LIMIT_BYTES_VAR, SEGMENT_BYTES_VAR};
use crate::error::{Failure, Outcome};
use crate::fences::Fences;

/// The granule of the heaps: every block's size and offset is a multiple of it (torch_npu's
/// caching allocator rounds blocks to 512 bytes, and tensor code expects that alignment).
pub const BLOCK_BYTES: u64 = 512;

/// What the fingerprint records of each kind of call (the first word of its fold).
mod tag {
    pub const MALLOC: u64 = 1;
    pub const FREE: u64 = 2;
    pub const SEGMENT: u64 = 3;
    pub const FAILED: u64 = 4;
    pub const RELEASE: u64 = 5;
    pub const ATTACH: u64 = 6;
}

/// The allocator's counters, laid out as the C struct `symheap_npu_stats_t` that
/// `symheap_npu_stats` fills.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Segments held.
    pub segments: u64,
    /// Bytes of all segments held.
    pub reserved_bytes: u64,
    /// Bytes of the blocks handed out and not freed (sizes rounded up to 512 bytes).
    pub allocated_bytes: u64,
    /// The most `allocated_bytes` has been since the start or the last peak reset.
    pub peak_allocated_bytes: u64,
    /// Blocks handed out and not freed.
    pub live_allocations: u64,
    /// Windows registered (`HcclCommSymWinRegister` calls that succeeded), all communicators.
    pub registrations: u64,
    /// Communicators attached.
    pub communicators: u64,
    /// The bytes the segments may hold together (`u64::MAX`: no limit).
    pub limit_bytes: u64,
}

/// A raw handle that only this allocator's lock gives access to.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Raw(*mut c_void);

// SAFETY: communicator and window handles are opaque tokens that CANN accepts from any
// thread; the allocator uses them only under its lock, one thread at a time.
unsafe impl Send for Raw {}

/// One segment and its windows (one per attached communicator, in attach order).
struct Segment {
    mapping: Arc<Mapping>,
    heap: Heap,
    windows: Vec<Raw>,
}

/// A block handed out.
struct Live {
    segment: usize,
    block: Block,
}

/// An attached communicator, with what its agreements need.
struct Attached {
    comm: Raw,
    ranks: u32,
    rank: u32,
    /// Device memory for the agreements' AllGather (one granule).
    scratch: Mapping,
    /// The agreements' own stream.
    stream: Stream,
}

/// The allocator of one process (one device).
pub struct Allocator {
    rt: Runtime,
    config: Config,
    /// The device, known at the first call that names it.
    device: Option<u32>,
    /// The device's allocation granularity.
    granularity: u64,
    /// The limit `set_memory_fraction` set, in bytes.
    fraction_limit: Option<u64>,
    /// In the order they were made; `None` where one was released.
    segments: Vec<Option<Segment>>,
    /// The blocks handed out, by address (looked up only, never iterated to decide).
    live: HashMap<u64, Live>,
    fences: Fences,
    comms: Vec<Attached>,
    /// The calls made, and their fold: what agreements compare.
    calls: u64,
    fingerprint: u64,
    allocated: u64,
    peak: u64,
    registrations: u64,
}

impl Allocator {
    /// Loads CANN (`symheap::raw::load`: `libhccl.so` and `libascendcl.so`, found as symheap
    /// finds them) and reads the settings from the environment.
    ///
    /// # Errors
    /// A library that cannot be loaded; a bad setting.
    pub fn load() -> Outcome<Allocator> {
        let config = Config::from_env()?;
        // SAFETY: the libraries found under CANN's names are trusted to be CANN (or a library
        // built to its ABI, such as symheap's emulator): whoever installs this library
        // installs them.
        let rt = unsafe { symheap::raw::load() }
            .map_err(|e| Failure::from(e).context("loading CANN"))?;
        Ok(Allocator {
            rt,
            config,
            device: None,
            granularity: 0,
            fraction_limit: None,
            segments: Vec::new(),
            live: HashMap::new(),
            fences: Fences::default(),
            comms: Vec::new(),
            calls: 0,
            fingerprint: fold_words([0]),
            allocated: 0,
            peak: 0,
            registrations: 0,
        })
    }

    /// The device, from the caller's `device` argument (or the thread's current device): the
    /// first sets it, and later ones must name the same.
    fn device(&mut self, given: Option<i32>) -> Outcome<u32> {
        let given = match given {
            Some(d) => u32::try_from(d)
                .map_err(|_| Failure::invalid(format!("device {d} is not a device id")))?,
            None => match self.device {
                Some(d) => return Ok(d),
                None => self.rt.current_device()?,
            },
        };
        match self.device {
            Some(d) if d != given => Err(Failure::invalid(format!(
                "device {given}: this allocator serves device {d} (one device per process)"
            ))),
            Some(d) => Ok(d),
            None => {
                self.granularity = self.rt.granularity(given)?;
                self.config.segment_bytes = self
                    .config
                    .segment_bytes
                    .checked_next_multiple_of(self.granularity)
                    .ok_or_else(|| Failure::invalid(format!("{SEGMENT_BYTES_VAR} overflows")))?;
                self.device = Some(given);
                Ok(given)
            }
        }
    }

    fn record(&mut self, words: impl IntoIterator<Item = u64>) {
        self.calls += 1;
        let fp = self.fingerprint;
        self.fingerprint = fold_words(std::iter::once(fp).chain(words));
    }

    /// `size` bytes for `stream`'s work (torch_npu's `alloc`): a block of the first segment
    /// that holds it, else of a new segment (registered in every attached communicator,
    /// after an agreement). Ordered after other streams' work on memory freed before.
    ///
    /// # Errors
    /// A bad size or device; out of memory or over the limit; a refused agreement.
    ///
    /// # Safety
    /// `stream` is a live stream of the device (or null, the default stream).
    pub unsafe fn malloc(
        &mut self,
        size: isize,
        device: i32,
        stream: aclrtStream,
    ) -> Outcome<*mut c_void> {
        let size = u64::try_from(size)
            .map_err(|_| Failure::invalid(format!("malloc: size {size} is negative")))?;
        if size == 0 {
            return Ok(std::ptr::null_mut());
        }
        let device = self.device(Some(device))?;
        let mut found = None;
        for (i, segment) in self.segments.iter_mut().enumerate() {
            let Some(segment) = segment else { continue };
            if let Some(block) = segment.heap.try_alloc(size, 0)? {
                found = Some((i, block));
                break;
            }
        }
        let (index, block) = match found {
            Some(found) => found,
            None => {
                // SAFETY: the caller's contract.
                let grown = unsafe { self.grow(size, device, stream) };
                let index = match grown {
                    Ok(index) => index,
                    Err(e) => {
                        self.record([tag::FAILED, size]);
                        return Err(e.context(&format!("malloc of {size} bytes")));
                    }
                };
                let segment = self.segments[index].as_mut().expect("a new segment");
                (index, segment.heap.alloc(size, 0)?)
            }
        };
        // SAFETY: the caller's contract.
        if let Err(e) = unsafe { self.fences.order_before(&self.rt, stream) } {
            if let Some(segment) = self.segments[index].as_mut() {
                segment.heap.free(block)?;
            }
            return Err(Failure::from(e).context("ordering the block after its last users"));
        }
        let segment = self.segments[index].as_ref().expect("the block's segment");
        let ptr = segment.mapping.ptr().byte_add(block.offset());
        self.record([tag::MALLOC, size, index as u64, block.offset()]);
        self.allocated += block.size();
        self.peak = self.peak.max(self.allocated);
        self.live.insert(
            ptr.addr(),
            Live {
                segment: index,
                block,
            },
        );
        Ok(ptr.as_raw())
    }

    /// Gives back `ptr` (torch_npu's `free`), which `stream`'s queued work may still use: the
    /// block goes back to its heap at once; the next user on another stream waits for that
    /// work first.
    ///
    /// # Errors
    /// A pointer this allocator did not hand out (nothing changes).
    ///
    /// # Safety
    /// As [`malloc`](Self::malloc).
    pub unsafe fn free(&mut self, ptr: *mut c_void, stream: aclrtStream) -> Outcome<()> {
        if ptr.is_null() {
            return Ok(());
        }
        let Some(live) = self.live.remove(&(ptr as u64)) else {
            return Err(Failure::invalid(format!(
                "free: {ptr:p} was not handed out by symheap_npu_malloc (or was freed already)"
            )));
        };
        // SAFETY: the caller's contract.
        if let Err(e) = unsafe { self.fences.freed_on(&self.rt, stream) } {
            // No event: wait here instead, so that the block is not reused too early.
            // SAFETY: the caller's contract.
            unsafe { calls::aclrtSynchronizeStream(&self.rt, stream) }
                .map_err(|e2| Failure::from(e2).context(&format!("free after {e}")))?;
        }
        let (index, offset, bytes) = (live.segment, live.block.offset(), live.block.size());
        let segment = self.segments[index]
            .as_mut()
            .expect("a live block's segment");
        segment.heap.free(live.block)?;
        self.allocated -= bytes;
        self.record([tag::FREE, index as u64, offset]);
        Ok(())
    }

    /// Makes a segment for a `size`-byte request and registers it in every attached
    /// communicator, after an agreement on each; returns its index.
    ///
    /// # Safety
    /// As [`malloc`](Self::malloc).
    unsafe fn grow(&mut self, size: u64, device: u32, stream: aclrtStream) -> Outcome<usize> {
        let bytes = if size > self.config.segment_bytes {
            size.checked_next_multiple_of(self.granularity)
                .ok_or_else(|| Failure::invalid(format!("{size} bytes overflow")))?
        } else {
            self.config.segment_bytes
        };
        let reserved = self.stats().reserved_bytes;
        let limit = self.limit();
        let mine = if reserved.saturating_add(bytes) > limit {
            Err(Failure::new(
                HcclResult::HCCL_E_MEMORY,
                format!(
                    "a new segment of {bytes} bytes would bring the segments to {} bytes, over \
                     the limit of {limit} ({LIMIT_BYTES_VAR}, symheap_npu_set_memory_fraction)",
                    reserved + bytes
                ),
            ))
        } else {
            Mapping::allocate(&self.rt, bytes, device).map_err(Failure::from)
        };
        if !self.comms.is_empty() {
            // SAFETY: the caller's contract.
            unsafe { self.quiesce(stream) }?;
            let what = format!("make a segment of {bytes} bytes");
            for i in 0..self.comms.len() {
                // SAFETY: attached communicators are live (`attach`'s contract).
                let agreed = unsafe { self.agree(i, mine.is_ok(), &what) };
                if let Err(e) = agreed {
                    // This rank's own failure says more than the agreement's.
                    return Err(mine.err().unwrap_or(e));
                }
            }
        }
        let mapping = Arc::new(mine?);
        let mut windows = Vec::with_capacity(self.comms.len());
        for i in 0..self.comms.len() {
            // SAFETY: as above; the mapping is device memory from reserve + allocate + map.
            match unsafe { self.register(i, &mapping) } {
                Ok(win) => windows.push(win),
                Err(e) => {
                    for (j, win) in windows.into_iter().enumerate() {
                        // SAFETY: registered just now, deregistered once.
                        unsafe { self.deregister(j, win) };
                    }
                    return Err(e);
                }
            }
        }
        self.segments.push(Some(Segment {
            heap: Heap::new(bytes, BLOCK_BYTES)?,
            mapping,
            windows,
        }));
        self.record([tag::SEGMENT, bytes]);
        Ok(self.segments.len() - 1)
    }

    /// Waits until the device has run everything queued on it, so that the next collective
    /// (an agreement's) is not taken for one queued before it on another stream. Only before
    /// collective steps, never on the hot path.
    ///
    /// # Safety
    /// As [`malloc`](Self::malloc), for `stream` (waited for where the library cannot wait
    /// for the whole device).
    unsafe fn quiesce(&mut self, stream: aclrtStream) -> Outcome<()> {
        // SAFETY: no arguments.
        match unsafe { calls::aclrtSynchronizeDevice(&self.rt) } {
            Ok(()) => {}
            Err(symheap::Error::Unsupported { .. }) => {
                // SAFETY: the caller's contract.
                unsafe { calls::aclrtSynchronizeStream(&self.rt, stream) }?;
                self.fences.wait_all()?;
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// Runs an agreement on attached communicator `i` with this rank's verdict `ok`.
    ///
    /// # Safety
    /// Communicator `i` is live.
    unsafe fn agree(&self, i: usize, ok: bool, what: &str) -> Outcome<()> {
        let c = &self.comms[i];
        let mine = Verdict {
            ok,
            calls: self.calls,
            fingerprint: self.fingerprint,
        };
        // SAFETY: a live communicator (the caller's contract), used under the allocator's
        // lock; the scratch is used by agreements alone, one at a time, each waited for.
        let all =
            unsafe { agreement::gather(&self.rt, c.comm.0, c.ranks, &c.scratch, &c.stream, mine) }?;
        agreement::judge(&all, c.rank, what)
    }

    /// Registers `mapping` as a window of attached communicator `i` (collective).
    ///
    /// # Safety
    /// Communicator `i` is live.
    unsafe fn register(&mut self, i: usize, mapping: &Mapping) -> Outcome<Raw> {
        let mut win: HcclCommSymWindow = std::ptr::null_mut();
        // SAFETY: a live communicator (the caller's contract); the memory is from reserve +
        // allocate + map and stays mapped while the window lives (the segment keeps it).
        unsafe {
            calls::HcclCommSymWinRegister(
                &self.rt,
                self.comms[i].comm.0,
                mapping.ptr().as_raw(),
                mapping.size(),
                &mut win,
                1,
            )
        }
        .map_err(|e| Failure::from(e).context("registering a segment as a window"))?;
        self.registrations += 1;
        Ok(Raw(win))
    }

    /// Deregisters `win` (collective); a failure is left for `HcclCommDestroy`, which
    /// deregisters what is left.
    ///
    /// # Safety
    /// `win` is a live window of attached communicator `i`.
    unsafe fn deregister(&mut self, _i: usize, win: Raw) {
        // SAFETY: the caller's contract.
        let _ = unsafe { calls::HcclCommSymWinDeregister(&self.rt, win.0) };
    }

    /// Registers every segment in `comm` (collective), after an agreement that every rank
    /// made the same calls so far, and every later segment too.
    ///
    /// # Errors
    /// A null communicator; a refused agreement (a rank made other calls); the library's
    /// error registering (what was registered is deregistered).
    ///
    /// # Safety
    /// `comm` is a live communicator of the loaded library, and stays live until
    /// [`detach`](Self::detach) (or the end of the process).
    pub unsafe fn attach(&mut self, comm: HcclComm) -> Outcome<()> {
        if comm.is_null() {
            return Err(Failure::new(
                HcclResult::HCCL_E_PTR,
                "attach: the communicator is null",
            ));
        }
        if self.comms.iter().any(|c| c.comm.0 == comm) {
            return Ok(());
        }
        let device = self.device(None)?;
        let (mut rank, mut ranks) = (0u32, 0u32);
        // SAFETY: a live communicator (the caller's contract) and valid out-pointers.
        unsafe { calls::HcclGetRankId(&self.rt, comm, &mut rank) }?;
        // SAFETY: as above.
        unsafe { calls::HcclGetRankSize(&self.rt, comm, &mut ranks) }?;
        let scratch = Mapping::allocate(&self.rt, self.granularity, device)?;
        let stream = Stream::new(&self.rt)?;
        self.comms.push(Attached {
            comm: Raw(comm),
            ranks,
            rank,
            scratch,
            stream,
        });
        let i = self.comms.len() - 1;
        // SAFETY: the caller's contract; the agreement's stream is ours.
        let done = unsafe { self.attach_segments(i) };
        if let Err(e) = done {
            self.comms.pop();
            return Err(e);
        }
        self.record([tag::ATTACH, u64::from(ranks)]);
        Ok(())
    }

    /// The collective part of [`attach`](Self::attach), for the communicator just pushed.
    ///
    /// # Safety
    /// As [`attach`](Self::attach).
    unsafe fn attach_segments(&mut self, i: usize) -> Outcome<()> {
        let stream = self.comms[i].stream.as_raw();
        // SAFETY: our own stream.
        unsafe { self.quiesce(stream) }?;
        // SAFETY: the caller's contract.
        unsafe { self.agree(i, true, "attach the communicator") }?;
        let mut done = Vec::new();
        for index in 0..self.segments.len() {
            let Some(mapping) = self.segments[index]
                .as_ref()
                .map(|s| Arc::clone(&s.mapping))
            else {
                continue;
            };
            // SAFETY: the caller's contract.
            match unsafe { self.register(i, &mapping) } {
                Ok(win) => done.push((index, win)),
                Err(e) => {
                    for (_, win) in done {
                        // SAFETY: registered just now, deregistered once.
                        unsafe { self.deregister(i, win) };
                    }
                    return Err(e);
                }
            }
        }
        for (index, win) in done {
            if let Some(segment) = self.segments[index].as_mut() {
                segment.windows.push(win);
            }
        }
        Ok(())
    }

    /// Deregisters every segment from `comm` (collective) and forgets it: for before the
    /// communicator is destroyed, when the process goes on allocating.
    ///
    /// # Errors
    /// A communicator that is not attached.
    ///
    /// # Safety
    /// `comm` is live.
    pub unsafe fn detach(&mut self, comm: HcclComm) -> Outcome<()> {
        let Some(i) = self.comms.iter().position(|c| c.comm.0 == comm) else {
            return Err(Failure::invalid("detach: the communicator is not attached"));
        };
        // SAFETY: the allocator's own stream of that communicator.
        unsafe { self.quiesce(self.comms[i].stream.as_raw()) }?;
        let mut windows = Vec::new();
        for segment in self.segments.iter_mut().flatten() {
            windows.push(segment.windows.remove(i));
        }
        for win in windows {
            // SAFETY: a window of communicator `i`, deregistered once (removed above).
            unsafe { self.deregister(i, win) };
        }
        self.comms.remove(i);
        Ok(())
    }

    /// Compares every rank's call history on every attached communicator (collective).
    ///
    /// # Errors
    /// As the agreements of [`attach`](Self::attach).
    pub fn check(&mut self) -> Outcome<()> {
        for i in 0..self.comms.len() {
            // SAFETY: the allocator's own stream; attached communicators are live.
            unsafe {
                self.quiesce(self.comms[i].stream.as_raw())?;
                self.agree(i, true, "check")?;
            }
        }
        Ok(())
    }

    /// Releases the segments that hold no block and are registered nowhere (torch_npu's
    /// `empty_cache`). Registered segments stay: releasing one is a collective step, which
    /// `empty_cache` is not.
    ///
    /// # Errors
    /// The runtime's error waiting for the streams that freed memory.
    pub fn release_cached(&mut self) -> Outcome<()> {
        let idle: Vec<usize> = (0..self.segments.len())
            .filter(|&i| {
                self.segments[i]
                    .as_ref()
                    .is_some_and(|s| s.windows.is_empty() && s.heap.report().live_blocks == 0)
            })
            .collect();
        if idle.is_empty() {
            return Ok(());
        }
        self.fences.wait_all()?;
        for i in idle {
            if let Some(segment) = self.segments[i].take() {
                drop(segment.heap);
                if let Some(mapping) = Arc::into_inner(segment.mapping) {
                    mapping.release()?;
                }
                self.record([tag::RELEASE, i as u64]);
            }
        }
        Ok(())
    }

    /// Caps the segments at `fraction` of the device's memory (`aclrtGetMemInfo`'s total).
    ///
    /// # Errors
    /// A fraction outside `[0, 1]`; the runtime's error.
    pub fn set_memory_fraction(&mut self, fraction: f64, device: i32) -> Outcome<()> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(Failure::invalid(format!(
                "set_memory_fraction: {fraction} is not between 0 and 1"
            )));
        }
        self.device(Some(device))?;
        let (_, total) = self.rt.mem_info()?;
        self.fraction_limit = Some((total as f64 * fraction) as u64);
        Ok(())
    }

    /// Starts the peak over from what is allocated now.
    pub fn reset_peak(&mut self) {
        self.peak = self.allocated;
    }

    /// The limit on all segments together.
    fn limit(&self) -> u64 {
        let env = self.config.limit_bytes.unwrap_or(u64::MAX);
        env.min(self.fraction_limit.unwrap_or(u64::MAX))
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        let held = self.segments.iter().flatten();
        Stats {
            segments: held.clone().count() as u64,
            reserved_bytes: held.map(|s| s.mapping.size()).sum(),
            allocated_bytes: self.allocated,
            peak_allocated_bytes: self.peak,
            live_allocations: self.live.len() as u64,
            registrations: self.registrations,
            communicators: self.comms.len() as u64,
            limit_bytes: self.limit(),
        }
    }
}
