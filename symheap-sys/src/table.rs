//! The one list of C functions this crate calls, and the function-pointer tables generated from
//! it, which both backends fill: the real libraries through `libloading`, the emulator with its
//! own `extern "C"` functions.
//!
//! [`hccl_functions!`] and [`acl_functions!`] hold the list: each function's C name, its
//! parameters (named as in CANN's headers) and its return type, split into required and
//! optional ones. They pass the list to a macro of the caller's choice, so the tables here and
//! the emulator's exported shims and table fills are expanded from the same text: adding a C
//! function is one line here plus, in the emulator, its body.

use std::ffi::{c_char, c_void};

use libloading::Library;

use super::types::*;

/// One function of a table: its C name and return type, as written in the list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CFunction {
    /// The C name, e.g. `"HcclAllReduce"`.
    pub name: &'static str,
    /// The return type as the list spells it (`stringify!`), e.g. `"HcclResult"`.
    pub returns: &'static str,
    /// Whether a library must export it (optional ones are `Option<fn>` in the table).
    pub required: bool,
}

impl CFunction {
    /// Whether the function returns a status code (`HcclResult` or `aclError`).
    pub fn returns_status(&self) -> bool {
        matches!(self.returns, "HcclResult" | "aclError")
    }
}

/// Invokes `$then! { $($extra)* HcclApi; required { .. } optional { .. } }` with every HCCL
/// function symheap knows, one `Name(param: Type, ..) -> Ret;` each. The types are named
/// bare: the caller has this crate's types in scope.
#[macro_export]
macro_rules! hccl_functions {
    ($then:ident $(, $($extra:tt)*)?) => {
        $then! { $($($extra)*)? HcclApi;
            required {
                HcclGetRootInfo(rootInfo: *mut HcclRootInfo) -> HcclResult;
                HcclCommInitRootInfo(nRanks: u32, rootInfo: *const HcclRootInfo, rank: u32, comm: *mut HcclComm) -> HcclResult;
                HcclCommInitRootInfoConfig(nRanks: u32, rootInfo: *const HcclRootInfo, rank: u32, config: *const HcclCommConfig, comm: *mut HcclComm) -> HcclResult;
                HcclCommDestroy(comm: HcclComm) -> HcclResult;
                HcclGetRankSize(comm: HcclComm, rankSize: *mut u32) -> HcclResult;
                HcclGetRankId(comm: HcclComm, rank: *mut u32) -> HcclResult;
                HcclBarrier(comm: HcclComm, stream: aclrtStream) -> HcclResult;
                HcclGetErrorString(code: HcclResult) -> *const c_char;
                HcclAllReduce(sendBuf: *mut c_void, recvBuf: *mut c_void, count: u64, dataType: HcclDataType, op: HcclReduceOp, comm: HcclComm, stream: aclrtStream) -> HcclResult;
                HcclAllGather(sendBuf: *mut c_void, recvBuf: *mut c_void, sendCount: u64, dataType: HcclDataType, comm: HcclComm, stream: aclrtStream) -> HcclResult;
                HcclReduceScatter(sendBuf: *mut c_void, recvBuf: *mut c_void, recvCount: u64, dataType: HcclDataType, op: HcclReduceOp, comm: HcclComm, stream: aclrtStream) -> HcclResult;
                HcclAlltoAll(sendBuf: *const c_void, sendCount: u64, sendType: HcclDataType, recvBuf: *const c_void, recvCount: u64, recvType: HcclDataType, comm: HcclComm, stream: aclrtStream) -> HcclResult;
                HcclBroadcast(buf: *mut c_void, count: u64, dataType: HcclDataType, root: u32, comm: HcclComm, stream: aclrtStream) -> HcclResult;
            }
            optional {
                HcclGetCommAsyncError(comm: HcclComm, asyncError: *mut HcclResult) -> HcclResult;
                HcclCommSymWinRegister(comm: HcclComm, addr: *mut c_void, size: u64, winHandle: *mut HcclCommSymWindow, flag: u32) -> HcclResult;
                HcclCommSymWinDeregister(winHandle: HcclCommSymWindow) -> HcclResult;
                HcclCommSymWinGet(comm: HcclComm, ptr: *mut c_void, size: usize, winHandle: *mut HcclCommSymWindow, offset: *mut usize) -> HcclResult;
                HcclCommInitAll(ndev: u32, devices: *mut i32, comms: *mut HcclComm) -> HcclResult;
                HcclGetCommName(comm: HcclComm, commName: *mut c_char) -> HcclResult;
                HcclCreateSubCommConfig(comm: *mut HcclComm, rankNum: u32, rankIds: *mut u32, subCommId: u64, subCommRankId: u32, config: *mut HcclCommConfig, subComm: *mut HcclComm) -> HcclResult;
                HcclAllGatherV(sendBuf: *mut c_void, sendCount: u64, recvBuf: *mut c_void, recvCounts: *const c_void, recvDispls: *const c_void, dataType: HcclDataType, comm: HcclComm, stream: aclrtStream) -> HcclResult;
                HcclReduceScatterV(sendBuf: *mut c_void, sendCounts: *const c_void, sendDispls: *const c_void, recvBuf: *mut c_void, recvCount: u64, dataType: HcclDataType, op: HcclReduceOp, comm: HcclComm, stream: aclrtStream) -> HcclResult;
                HcclAlltoAllV(sendBuf: *const c_void, sendCounts: *const c_void, sdispls: *const c_void, sendType: HcclDataType, recvBuf: *const c_void, recvCounts: *const c_void, rdispls: *const c_void, recvType: HcclDataType, comm: HcclComm, stream: aclrtStream) -> HcclResult;
                HcclAlltoAllVC(sendBuf: *const c_void, sendCountMatrix: *const c_void, sendType: HcclDataType, recvBuf: *const c_void, recvType: HcclDataType, comm: HcclComm, stream: aclrtStream) -> HcclResult;
                HcclReduce(sendBuf: *mut c_void, recvBuf: *mut c_void, count: u64, dataType: HcclDataType, op: HcclReduceOp, root: u32, comm: HcclComm, stream: aclrtStream) -> HcclResult;
                HcclScatter(sendBuf: *mut c_void, recvBuf: *mut c_void, recvCount: u64, dataType: HcclDataType, root: u32, comm: HcclComm, stream: aclrtStream) -> HcclResult;
                HcclSend(sendBuf: *mut c_void, count: u64, dataType: HcclDataType, destRank: u32, comm: HcclComm, stream: aclrtStream) -> HcclResult;
                HcclRecv(recvBuf: *mut c_void, count: u64, dataType: HcclDataType, srcRank: u32, comm: HcclComm, stream: aclrtStream) -> HcclResult;
                HcclBatchSendRecv(sendRecvInfo: *mut HcclSendRecvItem, itemNum: u32, comm: HcclComm, stream: aclrtStream) -> HcclResult;
                HcclCommSetMemoryRange(comm: HcclComm, baseVirPtr: *mut c_void, size: usize, alignment: usize, flags: u64) -> HcclResult;
                HcclCommUnsetMemoryRange(comm: HcclComm, baseVirPtr: *mut c_void) -> HcclResult;
                HcclCommActivateCommMemory(comm: HcclComm, virPtr: *mut c_void, size: usize, offset: usize, handle: aclrtDrvMemHandle, flags: u64) -> HcclResult;
                HcclCommDeactivateCommMemory(comm: HcclComm, virPtr: *mut c_void) -> HcclResult;
                HcommMemAlloc(ptr: *mut *mut c_void, size: usize) -> HcclResult;
                HcommMemFree(ptr: *mut c_void) -> HcclResult;
                // Grouped calls, communicators by name, the process-wide configuration, and
                // peers' addresses in a window: hicann/hcomm include/hccl/hccl_comm.h and
                // hccl_sym_win.h.
                HcclGroupStart() -> HcclResult;
                HcclGroupEnd() -> HcclResult;
                HcclGroupStatusGet(isGroupEnabled: *mut bool) -> HcclResult;
                HcclCommGetHandleWithName(commName: *const c_char, comm: *mut HcclComm) -> HcclResult;
                HcclSetConfig(config: HcclConfig, configValue: HcclConfigValue) -> HcclResult;
                HcclGetConfig(config: HcclConfig, configValue: *mut HcclConfigValue) -> HcclResult;
                HcclSymWinGetPeerPointer(winHandle: HcclCommSymWindow, offset: usize, peerRank: u32, ptr: *mut *mut c_void) -> HcclResult;
                // Rank tables: hicann/hcomm include/hccl/hccl_comm.h.
                HcclCommInitClusterInfo(clusterInfo: *const c_char, rank: u32, comm: *mut HcclComm) -> HcclResult;
                HcclCommInitClusterInfoConfig(clusterInfo: *const c_char, rank: u32, config: *mut HcclCommConfig, comm: *mut HcclComm) -> HcclResult;
                // What CANN's HCCL test tool calls.
                HcclGetCommConfigCapability() -> u32;
                // Topology: the rank graph of hicann/hcomm include/hccl/hccl_rank_graph.h.
                HcclRankGraphGetLayers(comm: HcclComm, netLayers: *mut *mut u32, netLayerNum: *mut u32) -> HcclResult;
                HcclRankGraphGetRankSizeByLayer(comm: HcclComm, netLayer: u32, rankNum: *mut u32) -> HcclResult;
                HcclRankGraphGetRanksByLayer(comm: HcclComm, netLayer: u32, ranks: *mut *mut u32, rankNum: *mut u32) -> HcclResult;
                HcclRankGraphGetInstSizeListByLayer(comm: HcclComm, netLayer: u32, instSizeList: *mut *mut u32, listSize: *mut u32) -> HcclResult;
            }
        }
    };
}

/// Invokes `$then! { $($extra)* AclApi; required { .. } optional { .. } }` with every ACL
/// runtime function symheap knows, one `Name(param: Type, ..) -> Ret;` each. The types are
/// named bare: the caller has this crate's types in scope.
#[macro_export]
macro_rules! acl_functions {
    ($then:ident $(, $($extra:tt)*)?) => {
        $then! { $($($extra)*)? AclApi;
            required {
                aclInit(configPath: *const c_char) -> aclError;
                aclFinalize() -> aclError;
                aclrtSetDevice(deviceId: i32) -> aclError;
                aclrtGetDevice(deviceId: *mut i32) -> aclError;
                aclrtResetDevice(deviceId: i32) -> aclError;
                aclrtCreateStream(stream: *mut aclrtStream) -> aclError;
                aclrtDestroyStream(stream: aclrtStream) -> aclError;
                aclrtSynchronizeStream(stream: aclrtStream) -> aclError;
                aclrtMemcpy(dst: *mut c_void, destMax: usize, src: *const c_void, count: usize, kind: aclrtMemcpyKind) -> aclError;
                aclrtMemcpyAsync(dst: *mut c_void, destMax: usize, src: *const c_void, count: usize, kind: aclrtMemcpyKind, stream: aclrtStream) -> aclError;
                aclrtMemset(devPtr: *mut c_void, maxCount: usize, value: i32, count: usize) -> aclError;
                aclrtMemsetAsync(devPtr: *mut c_void, maxCount: usize, value: i32, count: usize, stream: aclrtStream) -> aclError;
                aclrtGetMemInfo(attr: aclrtMemAttr, free: *mut usize, total: *mut usize) -> aclError;
                aclrtReserveMemAddress(virPtr: *mut *mut c_void, size: usize, alignment: usize, expectPtr: *mut c_void, flags: u64) -> aclError;
                aclrtReleaseMemAddress(virPtr: *mut c_void) -> aclError;
                aclrtMallocPhysical(handle: *mut aclrtDrvMemHandle, size: usize, prop: *const aclrtPhysicalMemProp, flags: u64) -> aclError;
                aclrtFreePhysical(handle: aclrtDrvMemHandle) -> aclError;
                aclrtMapMem(virPtr: *mut c_void, size: usize, offset: usize, handle: aclrtDrvMemHandle, flags: u64) -> aclError;
                aclrtUnmapMem(virPtr: *mut c_void) -> aclError;
                aclrtMemGetAllocationGranularity(prop: *mut aclrtPhysicalMemProp, option: aclrtMemGranularityOptions, granularity: *mut usize) -> aclError;
            }
            optional {
                aclGetRecentErrMsg() -> *const c_char;
                aclrtGetDeviceCount(count: *mut u32) -> aclError;
                aclrtGetSocName() -> *const c_char;
                aclrtSetDeviceSatMode(mode: aclrtFloatOverflowMode) -> aclError;
                aclrtGetDeviceSatMode(mode: *mut aclrtFloatOverflowMode) -> aclError;
                aclrtSetStreamFailureMode(stream: aclrtStream, mode: u64) -> aclError;
                aclrtMalloc(devPtr: *mut *mut c_void, size: usize, policy: aclrtMemMallocPolicy) -> aclError;
                aclrtFree(devPtr: *mut c_void) -> aclError;
                aclrtMemGetAddressRange(ptr: *mut c_void, pbase: *mut *mut c_void, psize: *mut usize) -> aclError;
                aclrtMemRetainAllocationHandle(virPtr: *mut c_void, handle: *mut aclrtDrvMemHandle) -> aclError;
                aclrtMallocHost(hostPtr: *mut *mut c_void, size: usize) -> aclError;
                aclrtFreeHost(hostPtr: *mut c_void) -> aclError;
                aclrtCreateEvent(event: *mut aclrtEvent) -> aclError;
                aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) -> aclError;
                aclrtSynchronizeEvent(event: aclrtEvent) -> aclError;
                aclrtStreamWaitEvent(stream: aclrtStream, event: aclrtEvent) -> aclError;
                aclrtQueryEventStatus(event: aclrtEvent, status: *mut aclrtEventRecordedStatus) -> aclError;
                aclrtEventElapsedTime(ms: *mut f32, startEvent: aclrtEvent, endEvent: aclrtEvent) -> aclError;
                aclrtDestroyEvent(event: aclrtEvent) -> aclError;
                aclrtLaunchHostFunc(stream: aclrtStream, fn_: aclrtHostFunc, args: *mut c_void) -> aclError;
                aclrtSynchronizeStreamWithTimeout(stream: aclrtStream, timeout: i32) -> aclError;
                aclrtStreamQuery(stream: aclrtStream, status: *mut aclrtStreamStatus) -> aclError;
                aclrtSynchronizeDevice() -> aclError;
                aclrtSynchronizeDeviceWithTimeout(timeout: i32) -> aclError;
                aclrtCreateEventExWithFlag(event: *mut aclrtEvent, flag: u32) -> aclError;
                aclmdlRICaptureBegin(stream: aclrtStream, mode: aclmdlRICaptureMode) -> aclError;
                aclmdlRICaptureGetInfo(stream: aclrtStream, status: *mut aclmdlRICaptureStatus, modelRI: *mut aclmdlRI) -> aclError;
                aclmdlRICaptureEnd(stream: aclrtStream, modelRI: *mut aclmdlRI) -> aclError;
                aclmdlRICaptureThreadExchangeMode(mode: *mut aclmdlRICaptureMode) -> aclError;
                aclmdlRIExecuteAsync(modelRI: aclmdlRI, stream: aclrtStream) -> aclError;
                aclmdlRIDestroy(modelRI: aclmdlRI) -> aclError;
                // Events with flags, and the profiling API (`acl/acl_prof.h`, exported under
                // `libmsprofiler.so`).
                aclrtCreateEventWithFlag(event: *mut aclrtEvent, flag: u32) -> aclError;
                aclrtResetEvent(event: aclrtEvent, stream: aclrtStream) -> aclError;
                aclprofInit(profilerResultPath: *const c_char, length: usize) -> aclError;
                aclprofFinalize() -> aclError;
                aclprofCreateConfig(deviceIdList: *mut u32, deviceNums: u32, aicoreMetrics: aclprofAicoreMetrics, aicoreEvents: *const aclprofAicoreEvents, dataTypeConfig: u64) -> *mut aclprofConfig;
                aclprofDestroyConfig(profilerConfig: *const aclprofConfig) -> aclError;
                aclprofStart(profilerConfig: *const aclprofConfig) -> aclError;
                aclprofStop(profilerConfig: *const aclprofConfig) -> aclError;
                aclprofSetConfig(configType: aclprofConfigType, config: *const c_char, configLength: usize) -> aclError;
            }
        }
    };
}

/// Declares a table of C function pointers from a list: required functions are plain `fn`
/// fields, optional ones `Option<fn>`; `resolve` looks every symbol up by its C name, and
/// `FUNCTIONS` lists them.
macro_rules! fn_table {
    (
        $(#[$meta:meta])*
        $name:ident;
        required { $( $req:ident ( $($ra:ident : $rt:ty),* ) -> $rret:ty ; )* }
        optional { $( $opt:ident ( $($oa:ident : $ot:ty),* ) -> $oret:ty ; )* }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy)]
        pub struct $name {
            $(
                #[doc = concat!("`", stringify!($req), "` (required).")]
                pub $req: unsafe extern "C" fn($($rt),*) -> $rret,
            )*
            $(
                #[doc = concat!("`", stringify!($opt), "` (optional: `None` where the library lacks it).")]
                pub $opt: Option<unsafe extern "C" fn($($ot),*) -> $oret>,
            )*
        }

        impl $name {
            /// Every function of the table, in the order of the list.
            pub const FUNCTIONS: &'static [CFunction] = &[
                $(CFunction { name: stringify!($req), returns: stringify!($rret), required: true },)*
                $(CFunction { name: stringify!($opt), returns: stringify!($oret), required: false },)*
            ];

            /// Whether the table holds the function of C name `name`: always for a required
            /// one, where the library exports it for an optional one, never for a name the
            /// list does not know.
            pub fn has(&self, name: &str) -> bool {
                match name {
                    $(stringify!($req) => true,)*
                    $(stringify!($opt) => self.$opt.is_some(),)*
                    _ => false,
                }
            }
        }

        impl FnTable for $name {
            unsafe fn resolve(libs: &[&Library]) -> Result<Self, String> {
                Ok(Self {
                    $(
                        $req: {
                            let sym = concat!(stringify!($req), "\0").as_bytes();
                            // SAFETY: the caller promises the prototype matches.
                            unsafe { lookup(libs, sym) }
                                .ok_or_else(|| format!("required symbol {} not found", stringify!($req)))?
                        },
                    )*
                    $(
                        $opt: {
                            let sym = concat!(stringify!($opt), "\0").as_bytes();
                            // SAFETY: the caller promises the prototype matches.
                            unsafe { lookup(libs, sym) }
                        },
                    )*
                })
            }
        }
    };
}

/// A table of C functions that can be resolved from loaded libraries.
pub trait FnTable: Sized {
    /// Looks every symbol up in `libs`, first library first. A missing required symbol is an
    /// error naming it; a missing optional one becomes `None`.
    ///
    /// # Safety
    /// The libraries must export these symbols with exactly these prototypes, and must outlive
    /// every use of the returned pointers.
    unsafe fn resolve(libs: &[&Library]) -> Result<Self, String>;
}

/// Finds `symbol` (NUL-terminated) in the first library that has it.
///
/// # Safety
/// `T` must be the function-pointer type of the symbol.
unsafe fn lookup<T: Copy>(libs: &[&Library], symbol: &[u8]) -> Option<T> {
    libs.iter().find_map(|lib| {
        // SAFETY: the caller promises `T` is the symbol's type; the pointer is copied out and
        // its validity is tied to the library by the caller's contract.
        unsafe { lib.get::<T>(symbol) }.ok().map(|sym| *sym)
    })
}

hccl_functions!(
    fn_table,
    #[doc = "HCCL: communicators, symmetric windows and collectives (`libhccl.so`, `libhcomm.so`)."]
);

acl_functions!(
    fn_table,
    #[doc = "The ACL runtime: devices, streams, virtual and physical memory, copies (`libascendcl.so`, `libacl_rt.so`)."]
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_name_every_table_field_once() {
        for table in [HcclApi::FUNCTIONS, AclApi::FUNCTIONS] {
            let mut names: Vec<_> = table.iter().map(|f| f.name).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), table.len());
        }
        let get_error_string = HcclApi::FUNCTIONS
            .iter()
            .find(|f| f.name == "HcclGetErrorString")
            .unwrap();
        assert!(get_error_string.returns.ends_with("c_char"));
        assert!(!get_error_string.returns_status());
        assert!(AclApi::FUNCTIONS[0].returns_status());
    }
}
