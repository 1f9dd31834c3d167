//! The function-pointer tables that both backends fill: the real libraries through
//! `libloading`, the emulator with its own `extern "C"` functions.

use std::ffi::{c_char, c_void};

use libloading::Library;

use super::types::*;

/// Declares a table of C function pointers: required ones are plain `fn` fields, optional ones
/// `Option<fn>`; `resolve` looks every symbol up by its C name.
macro_rules! fn_table {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            required { $( $req:ident ( $($rarg:ty),* ) $(-> $rret:ty)? ; )* }
            optional { $( $opt:ident ( $($oarg:ty),* ) $(-> $oret:ty)? ; )* }
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy)]
        pub struct $name {
            $(
                #[doc = concat!("`", stringify!($req), "` (required).")]
                pub $req: unsafe extern "C" fn($($rarg),*) $(-> $rret)?,
            )*
            $(
                #[doc = concat!("`", stringify!($opt), "` (optional: `None` where the library lacks it).")]
                pub $opt: Option<unsafe extern "C" fn($($oarg),*) $(-> $oret)?>,
            )*
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
pub(crate) trait FnTable: Sized {
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

fn_table! {
    /// HCCL: communicators, symmetric windows and collectives (`libhccl.so`, `libhcomm.so`).
    pub struct HcclApi {
        required {
            HcclGetRootInfo(*mut HcclRootInfo) -> HcclResult;
            HcclCommInitRootInfo(u32, *const HcclRootInfo, u32, *mut HcclComm) -> HcclResult;
            HcclCommInitRootInfoConfig(u32, *const HcclRootInfo, u32, *const HcclCommConfig, *mut HcclComm) -> HcclResult;
            HcclCommDestroy(HcclComm) -> HcclResult;
            HcclGetRankSize(HcclComm, *mut u32) -> HcclResult;
            HcclGetRankId(HcclComm, *mut u32) -> HcclResult;
            HcclBarrier(HcclComm, aclrtStream) -> HcclResult;
            HcclGetErrorString(HcclResult) -> *const c_char;
            HcclAllReduce(*mut c_void, *mut c_void, u64, HcclDataType, HcclReduceOp, HcclComm, aclrtStream) -> HcclResult;
            HcclAllGather(*mut c_void, *mut c_void, u64, HcclDataType, HcclComm, aclrtStream) -> HcclResult;
            HcclReduceScatter(*mut c_void, *mut c_void, u64, HcclDataType, HcclReduceOp, HcclComm, aclrtStream) -> HcclResult;
            HcclAlltoAll(*const c_void, u64, HcclDataType, *const c_void, u64, HcclDataType, HcclComm, aclrtStream) -> HcclResult;
            HcclBroadcast(*mut c_void, u64, HcclDataType, u32, HcclComm, aclrtStream) -> HcclResult;
        }
        optional {
            HcclGetCommAsyncError(HcclComm, *mut HcclResult) -> HcclResult;
            HcclCommSymWinRegister(HcclComm, *mut c_void, u64, *mut HcclCommSymWindow, u32) -> HcclResult;
            HcclCommSymWinDeregister(HcclCommSymWindow) -> HcclResult;
            HcclCommSymWinGet(HcclComm, *mut c_void, usize, *mut HcclCommSymWindow, *mut usize) -> HcclResult;
        }
    }
}

fn_table! {
    /// The ACL runtime: devices, streams, virtual and physical memory, copies
    /// (`libascendcl.so`, `libacl_rt.so`).
    pub struct AclApi {
        required {
            aclInit(*const c_char) -> aclError;
            aclFinalize() -> aclError;
            aclrtSetDevice(i32) -> aclError;
            aclrtGetDevice(*mut i32) -> aclError;
            aclrtResetDevice(i32) -> aclError;
            aclrtCreateStream(*mut aclrtStream) -> aclError;
            aclrtDestroyStream(aclrtStream) -> aclError;
            aclrtSynchronizeStream(aclrtStream) -> aclError;
            aclrtMemcpy(*mut c_void, usize, *const c_void, usize, aclrtMemcpyKind) -> aclError;
            aclrtMemcpyAsync(*mut c_void, usize, *const c_void, usize, aclrtMemcpyKind, aclrtStream) -> aclError;
            aclrtMemset(*mut c_void, usize, i32, usize) -> aclError;
            aclrtMemsetAsync(*mut c_void, usize, i32, usize, aclrtStream) -> aclError;
            aclrtGetMemInfo(aclrtMemAttr, *mut usize, *mut usize) -> aclError;
            aclrtReserveMemAddress(*mut *mut c_void, usize, usize, *mut c_void, u64) -> aclError;
            aclrtReleaseMemAddress(*mut c_void) -> aclError;
            aclrtMallocPhysical(*mut aclrtDrvMemHandle, usize, *const aclrtPhysicalMemProp, u64) -> aclError;
            aclrtFreePhysical(aclrtDrvMemHandle) -> aclError;
            aclrtMapMem(*mut c_void, usize, usize, aclrtDrvMemHandle, u64) -> aclError;
            aclrtUnmapMem(*mut c_void) -> aclError;
            aclrtMemGetAllocationGranularity(*mut aclrtPhysicalMemProp, aclrtMemGranularityOptions, *mut usize) -> aclError;
        }
        optional {
            aclGetRecentErrMsg() -> *const c_char;
        }
    }
}
