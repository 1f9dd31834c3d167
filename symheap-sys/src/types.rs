//! The C types of HCCL and the ACL runtime, with their C names and layouts.
//!
//! Enums are integer newtypes with associated constants rather than Rust enums: a foreign library
//! may return a value this crate does not list, and that must not be undefined behaviour.

use std::ffi::{c_char, c_void};
use std::mem::{align_of, offset_of, size_of};

use static_assertions::const_assert_eq;

/// An HCCL communicator (opaque).
pub type HcclComm = *mut c_void;
/// A registered symmetric window (opaque; a device pointer on real hardware).
pub type HcclCommSymWindow = *mut c_void;
/// An ACL stream (opaque).
pub type aclrtStream = *mut c_void;
/// A physical memory allocation (opaque).
pub type aclrtDrvMemHandle = *mut c_void;
/// An ACL event (opaque).
pub type aclrtEvent = *mut c_void;
/// `aclrtHostFunc`: a host function a stream calls when it reaches it (`aclrtLaunchHostFunc`).
pub type aclrtHostFunc = Option<unsafe extern "C" fn(args: *mut c_void)>;
/// An ACL status code; [`ACL_SUCCESS`] is 0.
pub type aclError = i32;

/// `aclError` success.
pub const ACL_SUCCESS: aclError = 0;
/// Invalid parameter (generic ACL).
pub const ACL_ERROR_INVALID_PARAM: aclError = 100000;
/// `aclInit` was not called (generic ACL).
pub const ACL_ERROR_UNINITIALIZE: aclError = 100001;
/// `aclInit` called again (generic ACL); the documentation says it may be ignored.
pub const ACL_ERROR_REPEAT_INITIALIZE: aclError = 100002;
/// `aclFinalize` called again (generic ACL).
pub const ACL_ERROR_REPEAT_FINALIZE: aclError = 100037;
/// Allocation failed (generic ACL).
pub const ACL_ERROR_BAD_ALLOC: aclError = 200000;
/// Invalid parameter (runtime).
pub const ACL_ERROR_RT_PARAM_INVALID: aclError = 107000;
/// Invalid device id (runtime).
pub const ACL_ERROR_RT_INVALID_DEVICEID: aclError = 107001;
/// The calling thread has no current device, no `aclrtSetDevice` (runtime).
pub const ACL_ERROR_RT_CONTEXT_NULL: aclError = 107002;
/// An event's timestamp is invalid: the event was not recorded, or its work has not run
/// (runtime).
pub const ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID: aclError = 107006;
/// An event's timestamp is before the start event's (runtime).
pub const ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL: aclError = 107007;
/// Invalid handle (runtime).
pub const ACL_ERROR_RT_INVALID_HANDLE: aclError = 107017;
/// The feature is not supported (runtime).
pub const ACL_ERROR_RT_FEATURE_NOT_SUPPORT: aclError = 207000;
/// Out of memory (runtime).
pub const ACL_ERROR_RT_MEMORY_ALLOCATION: aclError = 207001;
/// Device out of memory (runtime).
pub const ACL_ERROR_RT_DEVICE_OOM: aclError = 207018;
/// Internal error (runtime).
pub const ACL_ERROR_RT_INTERNAL_ERROR: aclError = 507000;
/// Stream synchronisation timed out (runtime).
pub const ACL_ERROR_RT_STREAM_SYNC_TIMEOUT: aclError = 507046;
/// Waiting for an event timed out (runtime).
pub const ACL_ERROR_RT_EVENT_SYNC_TIMEOUT: aclError = 507047;
/// A captured stream waits for an event recorded outside the capture (runtime).
pub const ACL_ERROR_RT_CAPTURE_DEPENDENCY: aclError = 107024;
/// A stream that joined a capture did not join back to the origin stream (runtime).
pub const ACL_ERROR_RT_STREAM_UNJOINED: aclError = 107025;
/// The model is still being captured (runtime).
pub const ACL_ERROR_RT_MODEL_CAPTURED: aclError = 107026;
/// The stream is being captured (runtime).
pub const ACL_ERROR_RT_STREAM_CAPTURED: aclError = 107027;
/// The event was recorded in a capture that is still active (runtime).
pub const ACL_ERROR_RT_EVENT_CAPTURED: aclError = 107028;
/// The stream is not being captured (runtime).
pub const ACL_ERROR_RT_STREAM_NOT_CAPTURED: aclError = 107029;
/// The call is not allowed while a stream is captured, in the capture mode (runtime).
pub const ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT: aclError = 107030;
/// Two streams of different captures depend on each other (runtime; CANN's name has no
/// `_RT_`).
pub const ACL_ERROR_STREAM_CAPTURE_CONFLICT: aclError = 107032;
/// The capture was not begun on this stream (runtime).
pub const ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED: aclError = 107036;
/// The model is still running (runtime).
pub const ACL_ERROR_RT_MODEL_RUNNING: aclError = 107037;
/// The capture ends on another thread than it began, in a mode other than relaxed (runtime).
pub const ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD: aclError = 107038;
/// An asynchronous call turned synchronous while a stream is captured (runtime).
pub const ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC: aclError = 107041;
/// The capture was invalidated (runtime).
pub const ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED: aclError = 507903;

// The profiling API (`acl/acl_prof.h`, `libmsprofiler.so`).
/// `aclprofConfig`: a profiling configuration (opaque; `aclprofCreateConfig` makes one).
pub type aclprofConfig = c_void;
/// `aclprofAicoreEvents`: AI Core events to profile (opaque; CANN requires NULL).
pub type aclprofAicoreEvents = c_void;
/// `aclprofAicoreMetrics` (a C enum): which AI Core metrics a profiling run collects.
pub type aclprofAicoreMetrics = i32;
/// `aclprofConfigType` (a C enum): which setting `aclprofSetConfig` changes.
pub type aclprofConfigType = i32;
/// A file or path argument is invalid (generic ACL).
pub const ACL_ERROR_INVALID_FILE: aclError = 100003;
/// Profiling is already running (generic ACL).
pub const ACL_ERROR_PROF_ALREADY_RUN: aclError = 100042;
/// Profiling was not initialized or started (generic ACL).
pub const ACL_ERROR_PROF_NOT_RUN: aclError = 100043;

/// `aclmdlRI`: a model runtime instance, what a capture makes.
pub type aclmdlRI = *mut c_void;
/// `aclmdlRICaptureMode` (a C enum).
pub type aclmdlRICaptureMode = i32;
/// Capture mode: no thread may make unsafe calls.
pub const ACL_MODEL_RI_CAPTURE_MODE_GLOBAL: aclmdlRICaptureMode = 0;
/// Capture mode: the capturing thread may not make unsafe calls.
pub const ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL: aclmdlRICaptureMode = 1;
/// Capture mode: every thread may make unsafe calls.
pub const ACL_MODEL_RI_CAPTURE_MODE_RELAXED: aclmdlRICaptureMode = 2;
/// `aclmdlRICaptureStatus` (a C enum).
pub type aclmdlRICaptureStatus = i32;
/// The stream is not being captured.
pub const ACL_MODEL_RI_CAPTURE_STATUS_NONE: aclmdlRICaptureStatus = 0;
/// The stream is being captured.
pub const ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE: aclmdlRICaptureStatus = 1;
/// The stream's capture was invalidated.
pub const ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED: aclmdlRICaptureStatus = 2;
/// `aclrtCreateEventExWithFlag` flag: the event may be waited for (and used in captures).
pub const ACL_EVENT_SYNC: u32 = 0x1;
/// `aclrtCreateEventExWithFlag` flag: the event records a timestamp.
pub const ACL_EVENT_TIME_LINE: u32 = 0x8;

/// The most bytes `HcclGetCommName` writes, its NUL included (`COMM_NAME_MAX_LENGTH`).
pub const COMM_NAME_MAX_LENGTH: usize = 128;

/// `ACL_CONTINUE_ON_FAILURE`: a stream keeps running later tasks after one fails (default).
pub const ACL_CONTINUE_ON_FAILURE: u64 = 0;
/// `ACL_STOP_ON_FAILURE`: a stream stops at its first failed task.
pub const ACL_STOP_ON_FAILURE: u64 = 1;

/// Size in bytes of [`HcclRootInfo`] (`HCCL_ROOT_INFO_BYTES`).
pub const HCCL_ROOT_INFO_BYTES: usize = 4108;

macro_rules! c_enum {
    ($(#[$meta:meta])* $name:ident {
        $($(#[$vmeta:meta])* $variant:ident = $value:expr $(=> $text:literal)?),* $(,)?
    }) => {
        $(#[$meta])*
        #[repr(transparent)]
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(pub i32);
        impl $name {
            $($(#[$vmeta])* pub const $variant: Self = Self($value);)*

            /// The C name of this value (`"HCCL_E_PARA"`), or `None` for a value this crate
            /// does not list.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $(v if v == $value => Some(stringify!($variant)),)*
                    _ => None,
                }
            }

            /// What the library's own error-string function says of this value (for
            /// `HcclResult`, libhccl's `HcclGetErrorString`), or `None` where it says nothing.
            pub const fn description(self) -> Option<&'static str> {
                match self.0 {
                    $($(v if v == $value => Some($text),)?)*
                    _ => None,
                }
            }
        }

        /// The C name and the value, `HCCL_E_TIMEOUT(9)`, or the type and the value for a
        /// value this crate does not list.
        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.name() {
                    Some(name) => write!(f, "{name}({})", self.0),
                    None => write!(f, "{}({})", stringify!($name), self.0),
                }
            }
        }

        /// The C name, or the type and raw value for a value this crate does not list.
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self.name() {
                    Some(name) => f.write_str(name),
                    None => write!(f, "{}({})", stringify!($name), self.0),
                }
            }
        }
    };
}

c_enum! {
    /// `HcclResult`: the status of every HCCL call.
    HcclResult {
        /// Success.
        HCCL_SUCCESS = 0 => "no error",
        /// Invalid parameter.
        HCCL_E_PARA = 1 => "parameter error",
        /// Null pointer.
        HCCL_E_PTR = 2 => "empty pointer",
        /// Memory error.
        HCCL_E_MEMORY = 3 => "memory error",
        /// Internal error.
        HCCL_E_INTERNAL = 4 => "internal error",
        /// Not supported.
        HCCL_E_NOT_SUPPORT = 5 => "not support feature",
        /// Not found.
        HCCL_E_NOT_FOUND = 6 => "not found specific resource",
        /// Resource unavailable.
        HCCL_E_UNAVAIL = 7 => "resource unavailable",
        /// System call failed.
        HCCL_E_SYSCALL = 8 => "call system interface error",
        /// Timed out.
        HCCL_E_TIMEOUT = 9 => "timeout",
        /// Could not open a file.
        HCCL_E_OPEN_FILE_FAILURE = 10 => "open file fail",
        /// TCP connection failed.
        HCCL_E_TCP_CONNECT = 11 => "tcp connect fail",
        /// RoCE connection failed.
        HCCL_E_ROCE_CONNECT = 12 => "roce connect fail",
        /// TCP transfer failed.
        HCCL_E_TCP_TRANSFER = 13 => "tcp transfer fail",
        /// RoCE transfer failed.
        HCCL_E_ROCE_TRANSFER = 14 => "roce transfer fail",
        /// Runtime call failed.
        HCCL_E_RUNTIME = 15 => "call runtime api fail",
        /// Driver call failed.
        HCCL_E_DRV = 16 => "call driver api fail",
        /// Profiling error.
        HCCL_E_PROFILING = 17 => "call profiling api fail",
        /// CCE error.
        HCCL_E_CCE = 18 => "call cce api fail",
        /// Network error.
        HCCL_E_NETWORK = 19 => "call network api fail",
        /// Try again.
        HCCL_E_AGAIN = 20 => "try again",
        /// Remote error.
        HCCL_E_REMOTE = 21 => "error cqe",
        /// Communicator suspending.
        HCCL_E_SUSPENDING = 22,
        /// Operator retry failed.
        HCCL_E_OPRETRY_FAIL = 23,
        /// Out of memory.
        HCCL_E_OOM = 24,
        /// Wrong state.
        HCCL_E_IN_STATUS = 1041,
        /// Reserved.
        HCCL_E_RESERVED = 1042,
    }
}

c_enum! {
    /// `HcclReduceOp`: the reduction of AllReduce and ReduceScatter.
    HcclReduceOp {
        /// Sum.
        HCCL_REDUCE_SUM = 0,
        /// Product.
        HCCL_REDUCE_PROD = 1,
        /// Maximum.
        HCCL_REDUCE_MAX = 2,
        /// Minimum.
        HCCL_REDUCE_MIN = 3,
        /// Reserved.
        HCCL_REDUCE_RESERVED = 255,
    }
}

c_enum! {
    /// `HcclDataType`: the element type of a collective (13 is unused).
    HcclDataType {
        /// i8.
        HCCL_DATA_TYPE_INT8 = 0,
        /// i16.
        HCCL_DATA_TYPE_INT16 = 1,
        /// i32.
        HCCL_DATA_TYPE_INT32 = 2,
        /// IEEE half.
        HCCL_DATA_TYPE_FP16 = 3,
        /// f32.
        HCCL_DATA_TYPE_FP32 = 4,
        /// i64.
        HCCL_DATA_TYPE_INT64 = 5,
        /// u64.
        HCCL_DATA_TYPE_UINT64 = 6,
        /// u8.
        HCCL_DATA_TYPE_UINT8 = 7,
        /// u16.
        HCCL_DATA_TYPE_UINT16 = 8,
        /// u32.
        HCCL_DATA_TYPE_UINT32 = 9,
        /// f64.
        HCCL_DATA_TYPE_FP64 = 10,
        /// bfloat16.
        HCCL_DATA_TYPE_BFP16 = 11,
        /// 128-bit integer.
        HCCL_DATA_TYPE_INT128 = 12,
        /// HiFloat8.
        HCCL_DATA_TYPE_HIF8 = 14,
        /// FP8 E4M3.
        HCCL_DATA_TYPE_FP8E4M3 = 15,
        /// FP8 E5M2.
        HCCL_DATA_TYPE_FP8E5M2 = 16,
        /// FP8 E8M0.
        HCCL_DATA_TYPE_FP8E8M0 = 17,
        /// Reserved.
        HCCL_DATA_TYPE_RESERVED = 255,
    }
}

c_enum! {
    /// `aclrtMemcpyKind`: the direction of a copy.
    aclrtMemcpyKind {
        /// Host to host.
        ACL_MEMCPY_HOST_TO_HOST = 0,
        /// Host to device.
        ACL_MEMCPY_HOST_TO_DEVICE = 1,
        /// Device to host.
        ACL_MEMCPY_DEVICE_TO_HOST = 2,
        /// Device to device.
        ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
        /// Inferred from the addresses.
        ACL_MEMCPY_DEFAULT = 4,
    }
}

c_enum! {
    /// `aclrtMemGranularityOptions`.
    aclrtMemGranularityOptions {
        /// The smallest granularity.
        ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
        /// The recommended granularity.
        ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,
    }
}

c_enum! {
    /// `aclrtMemAttr`: the kind of memory asked for.
    aclrtMemAttr {
        /// DDR.
        ACL_DDR_MEM = 0,
        /// HBM.
        ACL_HBM_MEM = 1,
        /// DDR, huge pages.
        ACL_DDR_MEM_HUGE = 2,
        /// DDR, normal pages.
        ACL_DDR_MEM_NORMAL = 3,
        /// HBM, 2 MiB pages.
        ACL_HBM_MEM_HUGE = 4,
        /// HBM, normal pages.
        ACL_HBM_MEM_NORMAL = 5,
        /// HBM, 1 GiB pages.
        ACL_HBM_MEM_HUGE1G = 10,
    }
}

c_enum! {
    /// `aclrtMemMallocPolicy`: the pages `aclrtMalloc` uses (flags may be OR-ed in above the
    /// low byte).
    aclrtMemMallocPolicy {
        /// 2 MiB pages when available, normal pages otherwise (and for 1 MiB or less).
        ACL_MEM_MALLOC_HUGE_FIRST = 0,
        /// 2 MiB pages only.
        ACL_MEM_MALLOC_HUGE_ONLY = 1,
        /// Normal pages only.
        ACL_MEM_MALLOC_NORMAL_ONLY = 2,
        /// As `HUGE_FIRST`, for memory copied between devices.
        ACL_MEM_MALLOC_HUGE_FIRST_P2P = 3,
        /// As `HUGE_ONLY`, for memory copied between devices.
        ACL_MEM_MALLOC_HUGE_ONLY_P2P = 4,
        /// As `NORMAL_ONLY`, for memory copied between devices.
        ACL_MEM_MALLOC_NORMAL_ONLY_P2P = 5,
        /// 1 GiB pages only.
        ACL_MEM_MALLOC_HUGE1G_ONLY = 6,
        /// 1 GiB pages only, for memory copied between devices.
        ACL_MEM_MALLOC_HUGE1G_ONLY_P2P = 7,
    }
}

c_enum! {
    /// `aclrtFloatOverflowMode`: how float overflow is written on a device.
    aclrtFloatOverflowMode {
        /// Saturate: Inf becomes the largest finite value, NaN becomes 0.
        ACL_RT_OVERFLOW_MODE_SATURATION = 0,
        /// IEEE Inf and NaN (the default on Atlas A2 / A3).
        ACL_RT_OVERFLOW_MODE_INFNAN = 1,
        /// Undefined.
        ACL_RT_OVERFLOW_MODE_UNDEF = 2,
    }
}

c_enum! {
    /// `aclrtEventRecordedStatus`: whether the work an event captured has run (note the
    /// numbering, the opposite of the deprecated `aclrtEventStatus`).
    aclrtEventRecordedStatus {
        /// Recorded but not run yet.
        ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
        /// Run, or never recorded (CANN's runtime answers `COMPLETE` for an event with no
        /// record, and so does the emulator).
        ACL_EVENT_RECORDED_STATUS_COMPLETE = 1,
    }
}

c_enum! {
    /// `aclrtStreamStatus`: whether a stream has run everything queued on it.
    aclrtStreamStatus {
        /// Everything queued has run.
        ACL_STREAM_STATUS_COMPLETE = 0,
        /// Work is still queued or running.
        ACL_STREAM_STATUS_NOT_READY = 1,
    }
}

c_enum! {
    /// `HcclSendRecvType`: one item of `HcclBatchSendRecv`.
    HcclSendRecvType {
        /// Send `buf` to `remoteRank`.
        HCCL_SEND = 0,
        /// Receive into `buf` from `remoteRank`.
        HCCL_RECV = 1,
        /// Reserved.
        HCCL_SEND_RECV_RESERVED = 2,
    }
}

/// `HcclSendRecvItem`: one send or receive of `HcclBatchSendRecv`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HcclSendRecvItem {
    /// Send or receive.
    pub sendRecvType: HcclSendRecvType,
    /// The device buffer.
    pub buf: *mut c_void,
    /// Elements.
    pub count: u64,
    /// Element type.
    pub dataType: HcclDataType,
    /// The peer.
    pub remoteRank: u32,
}

/// `ACL_MEM_HANDLE_TYPE_NONE`.
pub const ACL_MEM_HANDLE_TYPE_NONE: i32 = 0;
/// `ACL_MEM_ALLOCATION_TYPE_PINNED`.
pub const ACL_MEM_ALLOCATION_TYPE_PINNED: i32 = 0;
/// `ACL_MEM_LOCATION_TYPE_HOST`.
pub const ACL_MEM_LOCATION_TYPE_HOST: i32 = 0;
/// `ACL_MEM_LOCATION_TYPE_DEVICE`.
pub const ACL_MEM_LOCATION_TYPE_DEVICE: i32 = 1;

/// `HcclRootInfo`: the opaque bootstrap blob rank 0 creates and every rank passes to init.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HcclRootInfo {
    /// Library-defined contents.
    pub internal: [c_char; HCCL_ROOT_INFO_BYTES],
}

impl Default for HcclRootInfo {
    fn default() -> Self {
        Self {
            internal: [0; HCCL_ROOT_INFO_BYTES],
        }
    }
}

impl std::fmt::Debug for HcclRootInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HcclRootInfo { .. }")
    }
}

/// The 24-byte header at the start of [`HcclCommConfig`] (`CommConfigInfo` in the headers).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HcclCommConfigInfo {
    /// `sizeof(HcclCommConfig)` as the caller knows it.
    pub configSize: usize,
    /// Must be [`HCCL_COMM_CONFIG_MAGIC_WORD`].
    pub magicWord: u32,
    /// Layout version; this crate sends [`HCCL_COMM_CONFIG_VERSION`].
    pub version: u32,
    /// Zero.
    pub reserved: u64,
}

/// The magic word of [`HcclCommConfigInfo`].
pub const HCCL_COMM_CONFIG_MAGIC_WORD: u32 = 0xf0f0_f0f0;
/// The layout version of [`HcclCommConfig`] this crate sends.
pub const HCCL_COMM_CONFIG_VERSION: u32 = 11;
/// "Not set" for the unsigned fields of [`HcclCommConfig`].
pub const HCCL_COMM_DEFAULT_U32: u32 = 0xffff_ffff;
/// HCCL's CCL buffer size in MiB where `hcclBufferSize` is not set.
pub const HCCL_DEFAULT_BUFFER_MB: u32 = 200;
/// HCCL's expansion buffer, allocated with the input and output CCL buffers (hicann/hcomm
/// `ccl_buffer_manager.h`, `EXP_BUFFER_SIZE`).
pub const HCCL_EXP_BUFFER_BYTES: usize = 1 << 20;

/// `HcclCommConfig`, version 11 (2248 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HcclCommConfig {
    /// The header; see [`HcclCommConfigInfo`].
    pub reserved: [u8; 24],
    /// HCCL buffer size in MB.
    pub hcclBufferSize: u32,
    /// Deterministic reductions.
    pub hcclDeterministic: u32,
    /// Communicator name (NUL-terminated).
    pub hcclCommName: [c_char; 128],
    /// User-defined information.
    pub hcclUdi: [c_char; 128],
    /// 0 default, 1 host, 2 AI CPU, 3 AIV, 4 AIV only.
    pub hcclOpExpansionMode: u32,
    /// RDMA traffic class.
    pub hcclRdmaTrafficClass: u32,
    /// RDMA service level.
    pub hcclRdmaServiceLevel: u32,
    /// World rank id.
    pub hcclWorldRankID: u32,
    /// Job id.
    pub hcclJobID: u64,
    /// ACL graph zero-copy switch.
    pub aclGraphZeroCopyEnable: u8,
    /// Execution timeout in seconds; -1 means the library default.
    pub hcclExecTimeOut: i32,
    /// Algorithm selection string.
    pub hcclAlgo: [c_char; 1600],
    /// Retry switch string.
    pub hcclRetryEnable: [c_char; 50],
    /// Retry parameters string.
    pub hcclRetryParams: [c_char; 128],
    /// HCCL buffer name.
    pub hcclBufferName: [c_char; 128],
    /// Quality of service.
    pub hcclQos: u32,
    /// Per-rank symmetric heap stride in GiB (default 16).
    pub hcclSymWinMaxMemSizePerRank: u64,
    /// Channel submission-queue depth.
    pub hcclChannelSqDepth: u32,
}

impl HcclCommConfig {
    /// The Rust equivalent of the header's `static inline HcclCommConfigInit`.
    pub fn init() -> Self {
        let info = HcclCommConfigInfo {
            configSize: size_of::<HcclCommConfig>(),
            magicWord: HCCL_COMM_CONFIG_MAGIC_WORD,
            version: HCCL_COMM_CONFIG_VERSION,
            reserved: 0,
        };
        let mut reserved = [0u8; 24];
        reserved[0..8].copy_from_slice(&info.configSize.to_ne_bytes());
        reserved[8..12].copy_from_slice(&info.magicWord.to_ne_bytes());
        reserved[12..16].copy_from_slice(&info.version.to_ne_bytes());
        reserved[16..24].copy_from_slice(&info.reserved.to_ne_bytes());
        Self {
            reserved,
            hcclBufferSize: HCCL_COMM_DEFAULT_U32,
            hcclDeterministic: HCCL_COMM_DEFAULT_U32,
            hcclCommName: [0; 128],
            hcclUdi: [0; 128],
            hcclOpExpansionMode: 0,
            hcclRdmaTrafficClass: HCCL_COMM_DEFAULT_U32,
            hcclRdmaServiceLevel: HCCL_COMM_DEFAULT_U32,
            hcclWorldRankID: 0,
            hcclJobID: 0,
            aclGraphZeroCopyEnable: 0,
            hcclExecTimeOut: -1,
            hcclAlgo: [0; 1600],
            hcclRetryEnable: [0; 50],
            hcclRetryParams: [0; 128],
            hcclBufferName: [0; 128],
            hcclQos: HCCL_COMM_DEFAULT_U32,
            hcclSymWinMaxMemSizePerRank: 16,
            hcclChannelSqDepth: HCCL_COMM_DEFAULT_U32,
        }
    }

    /// The CCL buffer size in MiB: `hcclBufferSize`, or [`HCCL_DEFAULT_BUFFER_MB`] where it is
    /// not set (0 or [`HCCL_COMM_DEFAULT_U32`]).
    pub fn buffer_mb(&self) -> u32 {
        match self.hcclBufferSize {
            0 | HCCL_COMM_DEFAULT_U32 => HCCL_DEFAULT_BUFFER_MB,
            mb => mb,
        }
    }

    /// Decodes the 24-byte header.
    pub fn info(&self) -> HcclCommConfigInfo {
        let r = &self.reserved;
        let word = |range: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b[..range.len()].copy_from_slice(&r[range]);
            u64::from_ne_bytes(b)
        };
        HcclCommConfigInfo {
            configSize: word(0..8) as usize,
            magicWord: word(8..12) as u32,
            version: word(12..16) as u32,
            reserved: word(16..24),
        }
    }
}

impl std::fmt::Debug for HcclCommConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HcclCommConfig")
            .field("info", &self.info())
            .field("hcclBufferSize", &self.hcclBufferSize)
            .field("hcclOpExpansionMode", &self.hcclOpExpansionMode)
            .field("hcclExecTimeOut", &self.hcclExecTimeOut)
            .field(
                "hcclSymWinMaxMemSizePerRank",
                &self.hcclSymWinMaxMemSizePerRank,
            )
            .finish_non_exhaustive()
    }
}

/// `aclrtMemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct aclrtMemLocation {
    /// Device id.
    pub id: u32,
    /// [`ACL_MEM_LOCATION_TYPE_HOST`] or [`ACL_MEM_LOCATION_TYPE_DEVICE`].
    pub r#type: i32,
}

/// `aclrtPhysicalMemProp`: what kind of physical memory to allocate.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct aclrtPhysicalMemProp {
    /// [`ACL_MEM_HANDLE_TYPE_NONE`].
    pub handleType: i32,
    /// [`ACL_MEM_ALLOCATION_TYPE_PINNED`].
    pub allocationType: i32,
    /// An [`aclrtMemAttr`] value, e.g. `ACL_HBM_MEM_HUGE`.
    pub memAttr: i32,
    /// Where the memory lives.
    pub location: aclrtMemLocation,
    /// Zero.
    pub reserve: u64,
}

impl aclrtPhysicalMemProp {
    /// Pinned 2 MiB-page HBM on `device`, as the HCCL documentation's examples ask for.
    pub fn device_huge(device: u32) -> Self {
        Self {
            handleType: ACL_MEM_HANDLE_TYPE_NONE,
            allocationType: ACL_MEM_ALLOCATION_TYPE_PINNED,
            memAttr: aclrtMemAttr::ACL_HBM_MEM_HUGE.0,
            location: aclrtMemLocation {
                id: device,
                r#type: ACL_MEM_LOCATION_TYPE_DEVICE,
            },
            reserve: 0,
        }
    }
}

// Layouts pinned against the reference (LP64 Linux).
const_assert_eq!(size_of::<HcclRootInfo>(), 4108);
const_assert_eq!(align_of::<HcclRootInfo>(), 1);
const_assert_eq!(size_of::<HcclCommConfigInfo>(), 24);
const_assert_eq!(size_of::<HcclCommConfig>(), 2248);
const_assert_eq!(align_of::<HcclCommConfig>(), 8);
const_assert_eq!(offset_of!(HcclCommConfig, reserved), 0);
const_assert_eq!(offset_of!(HcclCommConfig, hcclBufferSize), 24);
const_assert_eq!(offset_of!(HcclCommConfig, hcclDeterministic), 28);
const_assert_eq!(offset_of!(HcclCommConfig, hcclCommName), 32);
const_assert_eq!(offset_of!(HcclCommConfig, hcclUdi), 160);
const_assert_eq!(offset_of!(HcclCommConfig, hcclOpExpansionMode), 288);
const_assert_eq!(offset_of!(HcclCommConfig, hcclRdmaTrafficClass), 292);
const_assert_eq!(offset_of!(HcclCommConfig, hcclRdmaServiceLevel), 296);
const_assert_eq!(offset_of!(HcclCommConfig, hcclWorldRankID), 300);
const_assert_eq!(offset_of!(HcclCommConfig, hcclJobID), 304);
const_assert_eq!(offset_of!(HcclCommConfig, aclGraphZeroCopyEnable), 312);
const_assert_eq!(offset_of!(HcclCommConfig, hcclExecTimeOut), 316);
const_assert_eq!(offset_of!(HcclCommConfig, hcclAlgo), 320);
const_assert_eq!(offset_of!(HcclCommConfig, hcclRetryEnable), 1920);
const_assert_eq!(offset_of!(HcclCommConfig, hcclRetryParams), 1970);
const_assert_eq!(offset_of!(HcclCommConfig, hcclBufferName), 2098);
const_assert_eq!(offset_of!(HcclCommConfig, hcclQos), 2228);
const_assert_eq!(
    offset_of!(HcclCommConfig, hcclSymWinMaxMemSizePerRank),
    2232
);
const_assert_eq!(offset_of!(HcclCommConfig, hcclChannelSqDepth), 2240);
const_assert_eq!(size_of::<aclrtMemLocation>(), 8);
const_assert_eq!(size_of::<aclrtPhysicalMemProp>(), 32);
const_assert_eq!(align_of::<aclrtPhysicalMemProp>(), 8);
const_assert_eq!(offset_of!(aclrtPhysicalMemProp, handleType), 0);
const_assert_eq!(offset_of!(aclrtPhysicalMemProp, allocationType), 4);
const_assert_eq!(offset_of!(aclrtPhysicalMemProp, memAttr), 8);
const_assert_eq!(offset_of!(aclrtPhysicalMemProp, location), 12);
const_assert_eq!(
    offset_of!(aclrtPhysicalMemProp, location) + offset_of!(aclrtMemLocation, r#type),
    16
);
const_assert_eq!(offset_of!(aclrtPhysicalMemProp, reserve), 24);
const_assert_eq!(size_of::<HcclSendRecvItem>(), 32);
const_assert_eq!(offset_of!(HcclSendRecvItem, sendRecvType), 0);
const_assert_eq!(offset_of!(HcclSendRecvItem, buf), 8);
const_assert_eq!(offset_of!(HcclSendRecvItem, count), 16);
const_assert_eq!(offset_of!(HcclSendRecvItem, dataType), 24);
const_assert_eq!(offset_of!(HcclSendRecvItem, remoteRank), 28);
const_assert_eq!(size_of::<HcclResult>(), 4);
const_assert_eq!(size_of::<HcclDataType>(), 4);
const_assert_eq!(size_of::<HcclReduceOp>(), 4);
const_assert_eq!(size_of::<aclrtMemcpyKind>(), 4);

// The process-wide configuration of `HcclSetConfig` / `HcclGetConfig` (hicann/hcomm `include/hccl/hccl_types.h`).

c_enum! {
    /// `HcclConfig`: a process-wide setting of `HcclSetConfig` / `HcclGetConfig`.
    HcclConfig {
        /// Deterministic reductions: 0 off (the default), 1 on, 2 strict (order-preserving,
        /// Atlas A2 only).
        HCCL_DETERMINISTIC = 0,
        /// Reserved.
        HCCL_CONFIG_RESERVED = 1,
    }
}

/// `union HcclConfigValue { int32_t value; }`: the value of an [`HcclConfig`] setting. A
/// struct of its one `int32_t` member, which C passes and lays out exactly as that union.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HcclConfigValue {
    /// The setting's value (for `HCCL_DETERMINISTIC`: 0, 1 or 2).
    pub value: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_debug_print_with_their_names() {
        assert_eq!(
            format!("{:?}", HcclResult::HCCL_E_TIMEOUT),
            "HCCL_E_TIMEOUT(9)"
        );
        assert_eq!(format!("{:?}", HcclResult(77)), "HcclResult(77)");
        assert_eq!(HcclResult::HCCL_E_PARA.to_string(), "HCCL_E_PARA");
    }

    #[test]
    fn config_init_matches_the_header() {
        let c = HcclCommConfig::init();
        let info = c.info();
        assert_eq!(info.configSize, 2248);
        assert_eq!(info.magicWord, 0xf0f0_f0f0);
        assert_eq!(info.version, 11);
        assert_eq!(info.reserved, 0);
        for unset in [
            c.hcclBufferSize,
            c.hcclDeterministic,
            c.hcclRdmaTrafficClass,
            c.hcclRdmaServiceLevel,
            c.hcclQos,
            c.hcclChannelSqDepth,
        ] {
            assert_eq!(unset, 0xffff_ffff);
        }
        assert_eq!(c.hcclExecTimeOut, -1);
        assert_eq!(
            (c.hcclOpExpansionMode, c.hcclWorldRankID, c.hcclJobID),
            (0, 0, 0)
        );
        assert_eq!(c.aclGraphZeroCopyEnable, 0);
        assert_eq!(c.hcclSymWinMaxMemSizePerRank, 16);
        assert!(c.hcclCommName.iter().chain(&c.hcclAlgo).all(|&b| b == 0));
    }
}
