//! An emulator of the CANN C ABI (`libhccl.so` + `libascendcl.so`) over host memory, with
//! ranks as processes (one per device, as every real deployment runs), as threads of one
//! process, or a mix of both.
//!
//! It implements the same C functions and fills the same [`crate::sys::HcclApi`] /
//! [`crate::sys::AclApi`] tables as the real libraries ([`hccl_api`], [`acl_api`]), so
//! everything above [`crate::sys`] runs unchanged against it: [`Runtime::emulated`] is
//! [`Runtime::from_tables`] over these tables. The emulator depends on `sys` only (apart from
//! [`launch`] and [`Runtime::emulated`], which sit on top of the runtime), nothing outside it
//! imports it, and it is compiled only with the default `emulator` feature. With the
//! `emulator-c-exports` feature the functions also carry their C names, for a `cdylib` that
//! stands in for `libhccl.so` / `libascendcl.so`.
//!
//! Its functions are generated from the list of C functions in `sys` (one line each there,
//! plus a body here in `hccl.rs` or `acl.rs`).
//!
//! # Test hooks
//! [`inject_failure`] / [`clear_injected_failures`] (make the n-th call of a C function fail),
//! [`count_calls`] / [`call_counts`] (which calls a scenario makes, to fail each in turn),
//! [`counters`] and [`check_released`] (live objects, threads and memfds, to prove nothing
//! leaked), [`set_device_memory_limit`] and [`set_wait_warning`] exist
//! for tests of the layers above; they are process-global and a real program has no use for
//! them.
//!
//! # Model
//! - **Devices**: `aclrtSetDevice` binds the calling thread to a device id in `0..64`.
//! - **Device memory** is host memory managed like device virtual memory: a reservation is
//!   `mmap` PROT_NONE address space, physical memory a `memfd` of a multiple of
//!   [`GRANULARITY`], and `aclrtMapMem` maps one into the other with `MAP_FIXED`. Every
//!   device-addressable range (user mappings and symmetric-heap mappings) is registered;
//!   copies and collectives validate device-side ranges against the registry and pin them
//!   while queued work may touch them, so a bad pointer is an error, never an access to
//!   arbitrary host memory.
//! - **Streams** are threads with a FIFO queue: async calls enqueue and return, and
//!   `aclrtSynchronizeStream` waits, so a host read before synchronizing can see stale data.
//! - **Communicators**: `HcclGetRootInfo` starts a rendezvous host (a thread of the calling
//!   process, listening on an abstract Unix socket) and returns bytes naming it and a random
//!   session key; any thread of any process on the machine that gets those bytes (from a
//!   file, MPI, a key-value store) can join as a rank, and init blocks until all have. Each
//!   rank then meets its peers, keyed by sequence numbers taken in host program order: for
//!   window registration through the host, and for the steps of every collective on a
//!   shared-memory board (a memfd every rank maps, with a cross-process futex), which keeps a
//!   collective's latency the same whether the ranks are threads or processes. Memory travels
//!   as memfds over the socket (`SCM_RIGHTS`): each rank's staging buffer and the board at
//!   init, each rank's physical allocation at window registration.
//! - **Lost ranks**: the host notices at once when a rank's connection closes without
//!   `HcclCommDestroy` (its process exited, crashed or was killed): every step that waits for
//!   it fails on every rank with an error naming it, and so does every later one. Nothing
//!   outlives the processes: abstract sockets vanish with their last descriptor, memfds and
//!   mappings with the processes that hold them.
//! - **Symmetric windows** work like the A3 ones: each rank reserves `stride * rankSize`, and
//!   registering maps every rank's memfd at `heapBase + stride * r + slot` in every rank's
//!   heap (the same pages mapped again, in every process), so peers' memory is really visible
//!   there.
//! - **Collectives** are checked when called, then run on the stream thread: the ranks
//!   rendezvous, compare their calls, and either read and write each other's windows through
//!   the heap (symmetric path, when both buffers are in windows at the same offsets on every
//!   rank) or stage through a per-communicator buffer (otherwise), then meet once more before
//!   the stream moves on.
//!
//! # Choices where the reference is silent
//! ACL:
//! - `aclInit` called again succeeds (no `ACL_ERROR_REPEAT_INITIALIZE`); `aclFinalize`
//!   succeeds and changes nothing.
//! - `aclrtGetDevice`, `aclrtCreateStream` and `aclrtGetMemInfo` on a thread without a device:
//!   `ACL_ERROR_RT_CONTEXT_NULL` (107002). A device id outside `0..64`:
//!   `ACL_ERROR_RT_INVALID_DEVICEID` (107001). `aclrtResetDevice` unbinds the thread.
//! - Null pointer arguments of ACL calls: `ACL_ERROR_RT_PARAM_INVALID` (107000). There is no
//!   default stream: a NULL stream is 107000 for every call that takes one (ACL and HCCL's
//!   collectives, where it is `HCCL_E_PTR`), whereas the real ACL runs work given a NULL stream
//!   on the device's default stream; an unknown stream or physical handle is
//!   `ACL_ERROR_RT_INVALID_HANDLE` (107017); an address that is not the start of a
//!   reservation or mapping is 107000.
//! - `aclrtReserveMemAddress` rejects a non-NULL `expectPtr` (107000) and flags other than
//!   0 or 1; reservations are aligned to at least the granularity.
//! - `aclrtMallocPhysical` needs `location.type == ACL_MEM_LOCATION_TYPE_DEVICE`, a device id
//!   in range and `flags == 0` (107000); beyond [`set_device_memory_limit`] it fails with
//!   `ACL_ERROR_RT_MEMORY_ALLOCATION` (207001). `memAttr` is not checked.
//! - `aclrtMapMem` needs a granularity-aligned address and offset. `aclrtUnmapMem` of a
//!   mapping that queued stream work still uses fails with 107000 (synchronize first), and so
//!   does one registered in a live symmetric window (deregister the window first, or destroy
//!   the communicator, which deregisters what is left), so no window refers to stale memory.
//! - `aclrtFreePhysical` fails with 107000 while the allocation is mapped or registered in a
//!   symmetric window; `aclrtReleaseMemAddress` fails with 107000 while it has mappings.
//! - `aclrtMemcpy` kinds are checked against which side is device address space (inside a
//!   reservation or a symmetric heap); `ACL_MEMCPY_DEFAULT` infers them. A count of 0 is a
//!   no-op. Copies may span adjacent mappings.
//! - A failed task (a collective) makes its stream fail every later task until
//!   `aclrtSynchronizeStream` returns `ACL_ERROR_RT_INTERNAL_ERROR` (507000) and clears it;
//!   the detail is copied to the synchronizing thread's `aclGetRecentErrMsg`.
//! - `aclGetRecentErrMsg` returns the calling thread's last failure message of any emulated
//!   call, ACL or HCCL (read and clear), or NULL.
//! - `aclrtDestroyStream` runs what is queued (a collective waiting for absent peers until its
//!   timeout), joins the thread and discards a pending failure.
//!
//! HCCL:
//! - Null pointer arguments and NULL handles are `HCCL_E_PTR`; an unknown communicator, window
//!   or stream handle is `HCCL_E_PARA`.
//! - Init on a thread without a device: `HCCL_E_RUNTIME`. Config fields are read from the
//!   first `min(configSize, 2248)` bytes (by size; the version is not interpreted).
//!   `hcclExecTimeOut <= 0` means 120 s, or `SYMHEAP_EMU_EXEC_TIMEOUT_S` (seconds) when set;
//!   either is clamped to at most one day. Init waits for the other ranks to join for the
//!   exec timeout but at least 30 s (rank threads may start late on a loaded machine);
//!   `hcclBufferSize` unset or 0 means 200 MiB, mapped so untouched pages cost nothing;
//!   `hcclSymWinMaxMemSizePerRank` is the heap stride in GiB (`stride * nRanks` must fit in
//!   64 TiB). A root info is used up once all its ranks joined. Its bytes are
//!   `"symheap-emu-root"`, the 16-byte session key, the socket name's length and the name; a
//!   root info whose host cannot be reached (its process is gone) or whose key does not match
//!   is `HCCL_E_PARA`.
//! - The process that called `HcclGetRootInfo` hosts the rendezvous (the real library's
//!   root rank listens the same way): it need not stay inside any call, but it must outlive the
//!   communicator. If it goes, every later step of every rank fails with the codes of a
//!   timeout and a message saying so. A root info that is never used keeps its host thread
//!   and socket until the process ends.
//! - Each rank reserves `hcclSymWinMaxMemSizePerRank` GiB (16 by default) times the number of
//!   ranks of address space for its symmetric heap. `SYMHEAP_EMU_SYM_HEAP_GIB` caps that
//!   stride for every communicator of the process, for tools whose address space is smaller
//!   (valgrind's stays under 128 GiB); a window larger than the cap then fails to register
//!   as one larger than the stride does.
//! - A rank waiting at a step (a collective, or a window registration's exchange) for longer
//!   than [`set_wait_warning`]'s interval (10 s by default, or [`WAIT_WARNING_ENV`] seconds)
//!   logs one `tracing` warning, long before the exec timeout fails the step. In a collective
//!   it names the ranks it waits for; in a registration exchange, which goes through the
//!   rendezvous host, the waiting rank does not know them yet, and the host names them when
//!   the timeout ends the wait. The real library logs nothing like it to the application.
//! - Device ids name devices machine-wide, so a process may use any of them; the memory
//!   limit of [`set_device_memory_limit`] is counted per process.
//! - A device has 64 GiB (an Atlas A3 die's HBM), or the host's RAM if that is less. Emulated
//!   device memory is host memory whose pages are allocated when first touched, so the
//!   emulator also refuses (`ACL_ERROR_RT_MEMORY_ALLOCATION`) an allocation that would take
//!   this process's devices together past the host's RAM (`MemTotal`), or that is larger than
//!   what the host has available now (`MemAvailable`): a run that asks for too much gets the
//!   error a device would give instead of being killed by the kernel later. Memory another
//!   process allocated but has not touched yet is not seen.
//! - `HcclCommDestroy` is local: it deregisters this rank's windows without a rendezvous and
//!   forgets the handle; the heap and staging buffer go when queued work no longer uses them.
//!   It also marks the rank as gone in its group: a peer waiting for it in a register /
//!   deregister exchange fails at once with `HCCL_E_TCP_TRANSFER`, and in a collective with
//!   `HCCL_E_TIMEOUT` (the codes of a timeout, with a message saying the rank destroyed its
//!   communicator), and so does every later such call of a peer. Collectives the rank queued
//!   before destroying still meet their peers. A peer that is alive but absent still makes
//!   the others wait for the exec timeout. A rank lost without `HcclCommDestroy` (see *Lost
//!   ranks*) fails its peers the same way, at once, with a message naming it.
//! - `HcclGetErrorString` returns libhccl's descriptions (`"parameter error"` for
//!   `HCCL_E_PARA`, see [`crate::sys::HcclResult::description`]); for a code libhccl does not
//!   describe it returns `"unknown error"` (libhccl itself answers `"unknow error"` at or above
//!   `HCCL_E_RESERVED` and has no entry for 22..=1041).
//! - `HcclGetCommAsyncError` reads and clears the communicator's first collective failure.
//! - A window covers the whole physical allocation mapped at `addr`, and the emulator needs
//!   that allocation mapped whole (offset 0, its full size) at one address (`HCCL_E_PARA`
//!   otherwise). Registering the same allocation again on a communicator returns the same
//!   handle and counts a reference; each registration needs a deregistration.
//! - Register compares `{slot, size, allocation size, new or counted again}` across ranks;
//!   deregistering a window that queued stream work still uses fails with `HCCL_E_AGAIN` on
//!   every rank (synchronize, then deregister again).
//! - A collective host call (register / deregister / collective) that names a live
//!   communicator consumes a sequence number even when it is rejected locally (the number is
//!   taken as soon as the communicator is found, before any other argument check), so peers'
//!   matching calls time out and later calls stay matched. An injected failure of such a call
//!   ([`inject_failure`]) consumes its sequence number the same way.
//! - Collectives: unsupported type (INT128, FP8 kinds, reserved) or op, a root out of range,
//!   an overflowing count, a buffer not wholly in mapped device memory, reduction buffers not
//!   aligned to the element size, or buffers that overlap other than in place (AllReduce
//!   `send == recv`, AllGather `send == recv + rank * count`, ReduceScatter
//!   `recv == send + rank * count`, Reduce `send == recv` on the root, Scatter
//!   `recv == send + root * recvCount` on the root): `HCCL_E_PARA`. A count of 0 succeeds at
//!   once. AlltoAll needs equal send / receive counts and types. Broadcast, Barrier, Reduce and
//!   Scatter always use the staged path: HCCL looks buffers up in windows for AllReduce,
//!   AllGather, ReduceScatter and AlltoAll only (the emulator lets their V forms do the same,
//!   see below).
//! - `HcclReduce` writes only the root's `recvBuf`; `HcclScatter` reads only the root's
//!   `sendBuf`. The other ranks' buffer of that side is not used, not checked, and may be
//!   NULL (a NULL buffer a rank does use is `HCCL_E_PTR`). Reduce accepts every type and op
//!   the other reductions do (PROD included, also for INT16 / BFP16, which CANN's docs exclude
//!   on A3).
//! - V collectives (`HcclAllGatherV`, `HcclReduceScatterV`, `HcclAlltoAllV`): the counts and
//!   displacements are host arrays of `rankSize` `uint64_t`, in elements, read during the call
//!   (a NULL array is `HCCL_E_PTR`). Checked when called (`HCCL_E_PARA`): AllGatherV's
//!   `recvCounts[rank]` is the rank's `sendCount`; ReduceScatterV's `recvCount` is
//!   `sendCounts[rank]`; AlltoAllV's `sendType == recvType`; no block overflows; every
//!   non-empty block is in mapped device memory (each pinned on its own: gaps between blocks
//!   need not be mapped); no two receive blocks share a byte; no receive block overlaps a send
//!   block (there is no in-place form, as CANN requires `recvBuf != sendBuf`; send blocks may
//!   overlap each other); reductions need element-aligned buffers. A NULL buffer is
//!   `HCCL_E_PTR` only when the rank moves something through it. ReduceScatterV accepts
//!   PROD, as ReduceScatter does (CANN's docs exclude it on A2 / A3).
//! - A V collective succeeds at once, queuing nothing, only when the rank's own arguments
//!   show that nothing moves on any rank: AllGatherV's `recvCounts` or ReduceScatterV's
//!   `sendCounts` all 0 (those arrays are the same on every rank), or AlltoAllV with zero
//!   counts on a one-rank communicator. Otherwise an AlltoAllV rank with nothing to send or
//!   receive still takes part (its peers cannot know it has nothing), and ranks whose arrays
//!   disagree on whether the operation is empty make the others time out.
//! - On the stream, once the ranks know they made the same call, they exchange their arrays
//!   on the board, 28 words a step (AllGatherV / ReduceScatterV: `2 * rankSize` words,
//!   AlltoAllV: `3 * rankSize`). AllGatherV's `recvCounts` / `recvDispls` and ReduceScatterV's
//!   `sendCounts` / `sendDispls` must equal rank 0's on every rank, and in AlltoAllV rank
//!   `k`'s `sendCounts[j]` must equal rank `j`'s `recvCounts[k]`; otherwise every rank fails
//!   with `HCCL_E_PARA` and a message naming the first difference (rank, array and index, or
//!   the pair of ranks).
//! - V collectives take the symmetric path, like their plain forms, when both buffers (from
//!   the buffer's address to the end of its last block) lie in windows, and the buffers'
//!   addresses are at the same window offsets on every rank; each rank then reads what a peer
//!   sends it straight out of the peer's window at the peer's displacement. A buffer that is
//!   NULL or outside a window, even one the rank moves nothing through, takes the staged path,
//!   so with peers on windows the call fails as asymmetric. The staged path moves the data in
//!   rounds of `cap / (rankSize * size)` elements per pair of ranks (AllGatherV, which sends
//!   one block to all: `cap / size`), as many rounds as the largest count any rank sends any
//!   rank needs, the same on every rank.
//! - On the stream, ranks whose calls differ (collective, count, type, op, root), whose paths
//!   differ, or whose window offsets differ fail with `HCCL_E_PARA` on every rank, with a
//!   message naming each rank's call or offsets; absent peers give `HCCL_E_TIMEOUT` after the
//!   exec timeout. (In-place AllGather / ReduceScatter compare the offset of rank 0's block.)
//! - Reductions fold in rank order for every element, so all ranks get identical bits;
//!   integers wrap; fp16 / bf16 are reduced in f32 and rounded once; float max / min ignore a
//!   NaN operand (IEEE maxNum / minNum).
//!
//! # Limits
//! Window handles point to a boxed descriptor and are validated against a registry; a handle
//! of a dropped window whose address the allocator hands out again for a new window would
//! name the new one (as with any pointer-valued handle). Unused root infos are kept until
//! the process ends (a few bytes each).

// The modules, each using only modules listed before it (test modules aside), so none
// depends on itself through others:
// - errors, registry, counters, reduce, primitives, wire: leaves (wire: sockets and messages);
// - os, attendance, board, hub, rendezvous: system calls, who a step waits for, the shared
//   board of collective steps, the rendezvous host, and a rank's end of the rendezvous;
// - device, inject, memory, stream, copy: devices, failure injection, device memory, streams,
//   copies;
// - window: symmetric heaps, windows and window handles; comm: communicators, which own them;
// - entry: entering an emulated C function (where a collective call takes its sequence number);
// - steps (a collective's rendezvous steps), vector (the V collectives' counts and
//   displacements, and their exchange), job (a checked collective), staged and symmetric (the
//   two algorithms), collective (queuing and running one); sym_window (registering,
//   deregistering and finding windows);
// - acl, hccl: the C functions' bodies; exports: the C functions and tables over them; launch.
// (os uses counters for the memfd name; rendezvous uses hub's message tags.)
mod acl;
mod attendance;
mod board;
mod collective;
mod comm;
mod copy;
mod counters;
mod device;
mod entry;
mod errors;
mod exports;
mod hccl;
mod hub;
mod inject;
mod job;
mod launch;
mod memory;
mod os;
mod patience;
mod primitives;
mod reduce;
mod registry;
mod rendezvous;
mod staged;
mod steps;
mod stream;
mod sym_window;
mod symmetric;
#[cfg(test)]
pub(crate) mod testutil;
mod vector;
mod window;
mod wire;

pub use counters::{Counters, check_released, counters};
pub use device::set_device_memory_limit;
pub use exports::{acl_api, hccl_api};
pub use inject::{call_counts, clear_injected_failures, count_calls, inject_failure};
pub use launch::{launch, launch_with};
pub use patience::{WAIT_WARNING_ENV, set_wait_warning};

#[cfg(doc)]
use crate::Runtime;

/// The allocation granularity of device memory (2 MiB), for both granularity options.
pub const GRANULARITY: usize = 2 << 20;

/// Serialises the unit tests that depend on process-global emulator state (counters,
/// injected failures), and resets that state on acquisition (no injected failure pending, the
/// default device memory limit), so a test that failed half-way does not leak into the next.
#[cfg(test)]
pub(crate) fn test_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = registry::lock(&LOCK);
    clear_injected_failures();
    set_device_memory_limit(0);
    guard
}
