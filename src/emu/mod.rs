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
//! - **Devices**: there are 16 (an Atlas A3 server's dies), or `SYMHEAP_EMU_DEVICE_COUNT`
//!   (1 to 64, read once; an unusable value gives 16 and a warning); `aclrtSetDevice` binds the
//!   calling thread to one of them.
//! - **Device memory** is host memory managed like device virtual memory: a reservation is
//!   `mmap` PROT_NONE address space, physical memory a `memfd` of a multiple of
//!   [`GRANULARITY`], and `aclrtMapMem` maps one into the other with `MAP_FIXED`. Every
//!   device-addressable range (user mappings and symmetric-heap mappings) is registered;
//!   copies and collectives validate device-side ranges against the registry and pin them
//!   while queued work may touch them, so a bad pointer is an error, never an access to
//!   arbitrary host memory. `aclrtMalloc` memory is a memfd of its own, mapped whole outside
//!   every reservation and registered as device memory the same way.
//! - **Streams** are threads with a FIFO queue: async calls enqueue and return, and
//!   `aclrtSynchronizeStream` waits, so a host read before synchronizing can see stale data.
//! - **Events**: `aclrtRecordEvent` queues a task that stamps the time when the stream thread
//!   reaches it; `aclrtStreamWaitEvent` queues a task that waits for that record, and
//!   `aclrtEventElapsedTime` is the real time between two records.
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
//! - **Point-to-point** transfers (`HcclSend` / `HcclRecv` / `HcclBatchSendRecv`) involve only
//!   their two ranks: the k-th send from s to d meets the k-th receive at d from s in the
//!   pair's mailboxes on the board, and the data moves through a staging area of the sender
//!   (or, when the sender's buffer is in a symmetric window, straight out of it).
//!
//! # Choices where the reference is silent
//! Initialisation and errors:
//! - `aclInit` when already initialised returns `ACL_ERROR_REPEAT_INITIALIZE` (100002), and
//!   `aclFinalize` when already finalised (no `aclInit` since) `ACL_ERROR_REPEAT_FINALIZE`
//!   (100037); `aclInit` after `aclFinalize` succeeds, and so does `aclFinalize` before any
//!   `aclInit` (as CANN's flag checks do). Nothing else needs `aclInit`: every other call works
//!   before it and after `aclFinalize`, whose live objects stay usable (the emulator needs no
//!   initialisation, and the layers above may share the process with another ACL user).
//! - NULL pointer arguments of ACL calls (out-pointers, addresses, events, physical handles)
//!   are `ACL_ERROR_INVALID_PARAM` (100000), CANN's `ACL_REQUIRES_NOT_NULL`; other bad values
//!   keep the runtime's codes. An unknown stream, event or physical handle is
//!   `ACL_ERROR_RT_INVALID_HANDLE` (107017); an address that is not the start of a
//!   reservation, mapping or allocation is `ACL_ERROR_RT_PARAM_INVALID` (107000). NULL streams
//!   are a case of their own (see *Streams*).
//! - In HCCL calls, NULL pointer arguments and NULL handles are `HCCL_E_PTR`; an unknown
//!   communicator, window or stream handle is `HCCL_E_PARA`.
//! - `aclGetRecentErrMsg` returns the calling thread's last failure message of any emulated
//!   call, ACL or HCCL (read and clear), or NULL. A failed stream task's detail becomes the
//!   message of the thread whose `aclrtSynchronizeStream` reports the failure (see the failure
//!   modes under *Streams*).
//! - `HcclGetErrorString` returns libhccl's descriptions (`"parameter error"` for
//!   `HCCL_E_PARA`, see [`crate::sys::HcclResult::description`]); for a code libhccl does not
//!   describe it returns `"unknown error"` (libhccl itself answers `"unknow error"` at or above
//!   `HCCL_E_RESERVED` and has no entry for 22..=1041).
//!
//! Devices:
//! - `aclrtGetDevice`, `aclrtCreateStream`, `aclrtCreateEvent`, `aclrtMalloc`,
//!   `aclrtGetMemInfo` and `aclrtGet/SetDeviceSatMode` on a thread without a device:
//!   `ACL_ERROR_RT_CONTEXT_NULL` (107002). A device id outside `0..count`:
//!   `ACL_ERROR_RT_INVALID_DEVICEID` (107001), with a message naming
//!   `SYMHEAP_EMU_DEVICE_COUNT`. `aclrtResetDevice` unbinds the thread and ends the device's
//!   context settings (overflow mode and stop-on-failure back to the defaults), also for other
//!   threads bound to it (CANN counts references; the emulator does not).
//! - Device ids name devices machine-wide, so a process may use any of them; the memory
//!   limit of [`set_device_memory_limit`] is counted per process.
//! - A device has 64 GiB (an Atlas A3 die's HBM), or the host's RAM if that is less. Emulated
//!   device memory is host memory whose pages are allocated when first touched, so the
//!   emulator also refuses (`ACL_ERROR_RT_MEMORY_ALLOCATION`) an allocation that would take
//!   this process's devices together past the host's RAM (`MemTotal`), or that is larger than
//!   what the host has available now (`MemAvailable`): a run that asks for too much gets the
//!   error a device would give instead of being killed by the kernel later. Memory another
//!   process allocated but has not touched yet is not seen.
//! - `aclrtGetSocName` returns `"Ascend910_9391"` (an Atlas A3 name: CANN's own code tells A3
//!   by the prefix `Ascend910_93`) for every device, also before `aclrtSetDevice`.
//! - `aclrtSetDeviceSatMode` accepts `ACL_RT_OVERFLOW_MODE_SATURATION` (0) and
//!   `ACL_RT_OVERFLOW_MODE_INFNAN` (1, the default); other values are 107000. The emulator
//!   only keeps the device's mode for `aclrtGetDeviceSatMode` (CANN's streams take it when
//!   created, which nothing observable depends on here): its reductions give IEEE results (Inf
//!   and NaN, as `INFNAN`) in both modes.
//!
//! Memory:
//! - `aclrtMalloc` (on the current device): size 0 or one that overflows is 100000, and every
//!   policy value is accepted (CANN treats unknown ones as its default). It counts `size`
//!   rounded up to 32 plus 32 bytes against the device's memory (as CANN on A2 / A3), beyond
//!   which it fails with `ACL_ERROR_RT_MEMORY_ALLOCATION` (207001) like
//!   `aclrtMallocPhysical`; the memory is zeroed, page-aligned (which covers the 64 bytes
//!   CANN documents), and exactly `size` bytes are addressable (copies past them fail). Copies,
//!   memsets and staged collectives accept it; it cannot be registered as a symmetric window
//!   (it is no `aclrtMapMem` mapping), nor unmapped or released with the VMM calls. `aclrtFree`
//!   of anything but the start of a live allocation is 107000. Like CANN's, `aclrtFree` does
//!   not wait for queued work: the memory stops being device memory and counting at once,
//!   while work already queued on it keeps it mapped until that work is done.
//! - `aclrtMallocHost` needs no device; size 0, or one too large for any allocation (about
//!   `PTRDIFF_MAX` or more), is 100000, and an allocation the host cannot make is
//!   `ACL_ERROR_RT_MEMORY_ALLOCATION` (207001); the memory is 64-byte aligned and zeroed.
//!   Copies treat it as host memory (and check ranges inside it), `aclrtMemset` /
//!   `aclrtMemsetAsync` accept it as CANN documents (other host memory is 107000), and
//!   `aclrtFreeHost` of anything but the start of a live allocation is 107000. Work queued on
//!   it keeps it until done.
//! - `aclrtMemset` with `count > maxCount` is 107000 (CANN's runtime check; its code is not
//!   documented). `aclrtGetMemInfo` reports the same numbers for every attribute, with
//!   `aclrtMalloc` memory counted.
//! - `aclrtMemcpy` kinds are checked against which side is device memory: inside a
//!   reservation, an `aclrtMalloc` allocation or a symmetric heap (anything else, also
//!   `aclrtMallocHost` memory, is host memory); `ACL_MEMCPY_DEFAULT` infers them. The kind is
//!   checked also when the count is 0, which is then a no-op. Copies may span adjacent
//!   mappings.
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
//!
//! Streams:
//! - There is no default stream: a NULL stream is `ACL_ERROR_RT_PARAM_INVALID` (107000) for
//!   every call that queues work on a stream or synchronizes one (`aclrtSynchronizeStream`,
//!   `aclrtMemcpyAsync`, `aclrtMemsetAsync`, `aclrtRecordEvent`, `aclrtStreamWaitEvent`), and
//!   `HCCL_E_PTR` for HCCL's collectives and point-to-point calls, whereas the real ACL runs
//!   such work on the device's default stream. `aclrtDestroyStream(NULL)` is 100000 (the
//!   default stream cannot be destroyed), and `aclrtSetStreamFailureMode(NULL)` sets the mode
//!   of the current device's context (107002 without a device), as below.
//! - Failure modes: in `ACL_CONTINUE_ON_FAILURE` mode (the default) a failed task's failure
//!   (the first one) is kept while later tasks run, and `aclrtSynchronizeStream` returns its
//!   code (`ACL_ERROR_RT_INTERNAL_ERROR`, 507000, for a failed collective) and clears it. In
//!   `ACL_STOP_ON_FAILURE` mode the stream skips the tasks after the failure and refuses new
//!   ones (with the failure's code; HCCL calls queuing on it get `HCCL_E_RUNTIME`, as for a
//!   failed runtime call) until that synchronize, then runs again (CANN's stream stays
//!   stopped). Stop mode set on any stream, or on NULL (the default stream, with a
//!   current device), applies to every stream of that device's context, existing or new,
//!   until `aclrtResetDevice`, as on A2 / A3; a mode other than 0 or 1 is 107000.
//! - `aclrtDestroyStream` runs what is queued (a collective waiting for absent peers until its
//!   timeout), joins the thread and discards a pending failure.
//!
//! Events:
//! - A plain event may be recorded again (the new record replaces the old). Never recorded, it
//!   queries `COMPLETE` (as CANN's runtime answers), synchronizes at once and
//!   `aclrtStreamWaitEvent` on it waits for nothing; `aclrtEventElapsedTime` needs both
//!   records run (`ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID`, 107006, otherwise), and an end
//!   before the start is `ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL` (107007); the two need not be
//!   on one stream.
//! - A stream waits at most `SYMHEAP_EMU_EVENT_WAIT_S` seconds (read once; 1800 by default;
//!   CANN waits forever unless `aclrtSetOpWaitTimeout`): then its wait task fails with
//!   `ACL_ERROR_RT_EVENT_SYNC_TIMEOUT` (507047), reported by `aclrtSynchronizeStream`.
//! - A record its stream skipped (stop mode) queries `NOT_READY`, and synchronizing it, or a
//!   stream waiting for it, fails with 507000. `aclrtSynchronizeEvent` waits as long as
//!   `aclrtSynchronizeStream` would. `aclrtDestroyEvent` does not block: a pending record
//!   still completes and its waiters still wait for it.
//!
//! Communicators and symmetric windows:
//! - Init on a thread without a device: `HCCL_E_RUNTIME`. Config fields are read from the
//!   first `min(configSize, 2248)` bytes (by size; the version is not interpreted).
//!   `hcclExecTimeOut <= 0` means 120 s, or `SYMHEAP_EMU_EXEC_TIMEOUT_S` (seconds) when set;
//!   either is clamped to at most one day. Init waits for the other ranks to join for the
//!   exec timeout but at least 30 s (rank threads may start late on a loaded machine);
//!   `hcclBufferSize` unset or 0 means 200 MiB, mapped so untouched pages cost nothing, and
//!   must be the same on every rank (init fails with `HCCL_E_PARA` on every rank otherwise);
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
//! - `HcclCommInitAll` needs `ndev > 0` and distinct device ids, each valid for
//!   `aclrtSetDevice` (`0..count`, see *Devices*) (`HCCL_E_PARA`), and non-NULL arrays
//!   (`HCCL_E_PTR`); it makes a root info and joins rank i from a thread of its
//!   own bound to `devices[i]`, with the default config, so the calling thread's device
//!   binding is unchanged; if any rank fails, the others stop waiting for it at once (instead
//!   of the join timeout), those made are destroyed and the first failure (by rank, not
//!   counting the ranks that only gave up because of it) is returned. The communicators may
//!   then be used from any thread.
//! - `HcclGetCommName` writes at most `COMM_NAME_MAX_LENGTH` (128) bytes, the NUL included:
//!   the config's `hcclCommName` bytes as given (cut to 127 bytes, not necessarily UTF-8; not
//!   compared across ranks nor checked for uniqueness) when it is not empty, otherwise the
//!   rendezvous name made by `HcclGetRootInfo` (`symheap-emu-<pid>-<n>-<random>`, 64 random
//!   bits of its own, nothing of the session key), the same on every rank and different for
//!   every root info. A NULL `commName` is `HCCL_E_PTR`.
//! - A rank waiting at a step (a collective, or a window registration's exchange) for longer
//!   than [`set_wait_warning`]'s interval (10 s by default, or [`WAIT_WARNING_ENV`] seconds)
//!   logs one `tracing` warning, long before the exec timeout fails the step. In a collective
//!   it names the ranks it waits for; in a registration exchange, which goes through the
//!   rendezvous host, the waiting rank does not know them yet, and the host names them when
//!   the timeout ends the wait. The real library logs nothing like it to the application.
//! - `HcclCommDestroy` is local: it deregisters this rank's windows without a rendezvous and
//!   forgets the handle; the heap and staging buffer go when queued work no longer uses them.
//!   It also marks the rank as gone in its group: a peer waiting for it in a register /
//!   deregister exchange fails at once with `HCCL_E_TCP_TRANSFER`, and in a collective with
//!   `HCCL_E_TIMEOUT` (the codes of a timeout, with a message saying the rank destroyed its
//!   communicator), and so does every later such call of a peer. Collectives the rank queued
//!   before destroying still meet their peers. A peer that is alive but absent still makes
//!   the others wait for the exec timeout. A rank lost without `HcclCommDestroy` (see *Lost
//!   ranks*) fails its peers the same way, at once, with a message naming it.
//! - `HcclGetCommAsyncError` reads and clears the communicator's first collective failure.
//! - Each rank reserves `hcclSymWinMaxMemSizePerRank` GiB (16 by default) times the number of
//!   ranks of address space for its symmetric heap. `SYMHEAP_EMU_SYM_HEAP_GIB` caps that
//!   stride for every communicator of the process, for tools whose address space is smaller
//!   (valgrind's stays under 128 GiB); a window larger than the cap then fails to register
//!   as one larger than the stride does.
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
//!   ([`inject_failure`]) consumes its sequence number the same way. (Point-to-point calls
//!   take no such number, see *Point-to-point*.)
//!
//! Collectives:
//! - Checked when called: unsupported type (INT128, FP8 kinds, reserved) or op, a root out of
//!   range, an overflowing count, a buffer not wholly in mapped device memory, reduction
//!   buffers not aligned to the element size, or buffers that overlap other than in place
//!   (AllReduce `send == recv`, AllGather `send == recv + rank * count`, ReduceScatter
//!   `recv == send + rank * count`, Reduce `send == recv` on the root, Scatter
//!   `recv == send + root * recvCount` on the root): `HCCL_E_PARA`. A count of 0 succeeds at
//!   once. AlltoAll needs equal send / receive counts and types. Broadcast, Barrier, Reduce and
//!   Scatter always use the staged path: HCCL looks buffers up in windows for AllReduce,
//!   AllGather, ReduceScatter and AlltoAll only (the emulator lets their V forms do the same,
//!   see *V collectives*).
//! - `HcclReduce` writes only the root's `recvBuf`; `HcclScatter` reads only the root's
//!   `sendBuf`. The other ranks' buffer of that side is not used, not checked, and may be
//!   NULL (a NULL buffer a rank does use is `HCCL_E_PTR`). Reduce accepts every type and op
//!   the other reductions do (PROD included, also for INT16 / BFP16, which CANN's docs exclude
//!   on A3).
//! - On the stream, ranks whose calls differ (collective, count, type, op, root), whose paths
//!   differ, or whose window offsets differ fail with `HCCL_E_PARA` on every rank, with a
//!   message naming each rank's call or offsets; absent peers give `HCCL_E_TIMEOUT` after the
//!   exec timeout. (In-place AllGather / ReduceScatter compare the offset of rank 0's block.)
//! - Reductions fold in rank order for every element, so all ranks get identical bits;
//!   integers wrap; fp16 / bf16 are reduced in f32 and rounded once; float max / min ignore a
//!   NaN operand (IEEE maxNum / minNum).
//!
//! V collectives:
//! - V collectives (`HcclAllGatherV`, `HcclReduceScatterV`, `HcclAlltoAllV`): the counts and
//!   displacements are host arrays of `rankSize` `uint64_t`, in elements, read during the call
//!   (a NULL array is `HCCL_E_PTR`). Checked when called (`HCCL_E_PARA`): AllGatherV's
//!   `recvCounts[rank]` is the rank's `sendCount`; ReduceScatterV's `recvCount` is
//!   `sendCounts[rank]`; AlltoAllV's `sendType == recvType`; no block overflows (an empty
//!   block's displacement is otherwise free); every
//!   non-empty block is in mapped device memory (each pinned on its own: gaps between blocks
//!   need not be mapped); no two receive blocks share a byte; no receive block overlaps a send
//!   block, and `sendBuf == recvBuf` (not NULL) is refused even when no blocks overlap (there
//!   is no in-place form: CANN requires `recvBuf != sendBuf`; send blocks may overlap each
//!   other); reductions need element-aligned buffers. A NULL buffer is
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
//!
//! Point-to-point (`HcclSend`, `HcclRecv`, `HcclBatchSendRecv`):
//! - `HcclSend` / `HcclRecv` / `HcclBatchSendRecv` take no collective sequence number: the
//!   k-th send from rank s to rank d pairs with the k-th receive at d from s (per ordered
//!   pair, in the host order of the calls, whatever streams they go to; a pair's messages run
//!   one after another). Only calls that pass their checks and are queued take a number (as
//!   in HCCL, a rejected call creates no operation), so the peer's matching call pairs with
//!   this rank's next accepted one. A count of 0 (with a valid item type and peer) succeeds
//!   at once, queues nothing and takes no number (even with a NULL buffer or an unsupported
//!   data type: the buffer and type checks below apply only to items that move data).
//! - Their checks: NULL comm or stream, a NULL buffer with a count above 0, or a NULL item
//!   array (even with `itemNum` 0): `HCCL_E_PTR`; a peer not below rankSize or equal to the
//!   calling rank, an item type other than `HCCL_SEND` / `HCCL_RECV`, an unsupported type,
//!   an overflowing count, or a buffer not wholly in mapped device memory: `HCCL_E_PARA`
//!   (naming the item in a batch; nothing of the batch is queued). `itemNum` 0 succeeds and
//!   queues nothing. Buffers are pinned until the transfer ends.
//! - Sends are synchronous: a send's task ends once the receiver has every byte, so sends
//!   ordered so that they wait for each other (a ring of separate `HcclSend` then `HcclRecv`)
//!   wait until the exec timeout, as HCCL warns. A batch moves all its items at once (a ring
//!   in one batch works); items of one pair run in order. The exec timeout counts from the
//!   last progress of any item, so large messages never time out while they move.
//! - A pair whose counts or types differ fails on both ranks with `HCCL_E_PARA`, each message
//!   naming both calls; later messages of the pair still match. A peer that is absent gives
//!   `HCCL_E_TIMEOUT` after the exec timeout; one that gave up on the message (its call
//!   failed, or its stream skipped it after an earlier failure), destroyed its communicator
//!   before queueing the message, or was lost fails the rank at once with `HCCL_E_TIMEOUT` and
//!   a message saying why. A failed item fails its whole batch. Failures reach the stream and
//!   `HcclGetCommAsyncError` as a failed collective's do.
//! - Data moves through a point-to-point staging area of the sender: a second
//!   `hcclBufferSize` after the collective staging buffer in the same memfd (pages cost only
//!   when touched), so sends never share bytes with collectives of other streams. It holds a
//!   section of `hcclBufferSize / rankSize` per destination, used as two chunks (the sender
//!   fills one while the receiver empties the other; a message needing `u32::MAX` chunks or
//!   more is `HCCL_E_PARA`). When the sender's buffer lies wholly in a symmetric window of
//!   the communicator, the receiver copies it straight out of its heap mapping of the
//!   sender's memory instead (counted in [`Counters::direct_receives`], the staged ones in
//!   [`Counters::staged_receives`]); it finds the window by slot and registration, so a
//!   window registered later in a freed slot is never taken for it (not found: the sender
//!   stages).
//!
//! Memory ranges (`HcclCommSetMemoryRange` & co.):
//! - Memory ranges are recorded per communicator (torch_npu sets its segments on each
//!   communicator, so a range may be set on several communicators of a process; CANN says a
//!   range is visible to all of them) and the calls are local, with no rendezvous.
//!   `HcclCommSetMemoryRange` needs a non-NULL base (`HCCL_E_PTR`), a size above 0,
//!   `alignment` 0 and `flags` 0 or 1 (torch_npu passes 1; CANN documents only 0), and a range
//!   inside one `aclrtReserveMemAddress` reservation, overlapping no range set on the
//!   communicator (`HCCL_E_PARA`). `HcclCommActivateCommMemory` needs non-NULL `virPtr` and
//!   `handle` (`HCCL_E_PTR`), a size above 0, `offset` and `flags` 0, a block inside one set
//!   range that overlaps no activated block, wholly mapped, with `handle`'s mapping starting
//!   at `virPtr` (`HCCL_E_PARA`). Deactivate needs an activated block's start, Unset a range's
//!   base and no activated block left in it (`HCCL_E_PARA`). The records pin nothing:
//!   unmapping or freeing activated memory is not refused. `HcclCommDestroy` forgets the
//!   communicator's ranges and activations; the memory stays the user's. Collectives on
//!   activated memory take the staged path like any mapped memory (every collective, not only
//!   the four HCCL allows, and without modifying the input as HCCL's zero-copy
//!   ReduceScatter / AllReduce do).
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
// - device, init, inject, memory, memory_range, host, stream, event, copy: devices, aclInit /
//   aclFinalize, failure injection, device memory, the zero-copy memory ranges recorded on
//   communicators, aclrtMallocHost memory, streams, events, copies;
// - window: symmetric heaps, windows and window handles; comm: communicators, which own them;
// - entry: entering an emulated C function (where a collective call takes its sequence number);
// - steps (a collective's rendezvous steps), vector (the V collectives' counts and
//   displacements, and their exchange), job (a checked collective), staged and symmetric (the
//   two algorithms), collective (queuing and running one); p2p (point-to-point transfers);
//   sym_window (registering, deregistering and finding windows);
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
mod event;
mod exports;
mod hccl;
mod host;
mod hub;
mod init;
mod inject;
mod job;
mod launch;
mod memory;
mod memory_range;
mod os;
mod p2p;
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
