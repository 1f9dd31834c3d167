//! The crate's one error type.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::sys::{HcclResult, aclError};

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in symheap.
///
/// Errors from the C libraries keep the raw code and the name of the call that returned it, so a
/// report can be matched against CANN's own documentation and logs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The caller passed something that can never work (size 0, an alignment that is not a power
    /// of two, an overflowing size, a block from another heap, mismatched lengths, ...). Nothing
    /// was changed.
    InvalidArgument(String),
    /// A request did not fit. Carries what was asked and what was left.
    OutOfMemory(OutOfMemory),
    /// An HCCL call returned a code other than `HCCL_SUCCESS`.
    Hccl {
        /// The C function, e.g. `"HcclAllReduce"`.
        call: &'static str,
        /// The `HcclResult` (its constants can be matched on: `code: HcclResult::HCCL_E_TIMEOUT`).
        code: HcclResult,
        /// `HcclGetErrorString(code)`, plus any detail the library recorded.
        message: String,
    },
    /// An ACL runtime call returned a code other than `ACL_SUCCESS`.
    Acl {
        /// The C function, e.g. `"aclrtMapMem"`.
        call: &'static str,
        /// The `aclError` (its constants can be matched on, e.g.
        /// `code: symheap::sys::ACL_ERROR_RT_MEMORY_ALLOCATION`).
        code: aclError,
        /// The library's recent error message, if it gave one.
        message: String,
    },
    /// The loaded library does not export an optional function (for example the symmetric-window
    /// API on CANN 8.x).
    Unsupported {
        /// The missing C function.
        call: &'static str,
    },
    /// Host access to device memory was asked for on a runtime whose device memory the host
    /// cannot address (real NPUs). Copy through `to_host` / `copy_from_host` instead.
    NotHostAddressable,
    /// The CANN libraries could not be loaded. Lists every path tried and why each failed.
    Load {
        /// Which library was being looked for (`"HCCL"` or `"ACL"`).
        library: &'static str,
        /// Every candidate path, with the reason it was rejected.
        tried: Vec<(PathBuf, String)>,
    },
    /// A collective failed after it was queued (it timed out, or a peer was lost): found when
    /// its stream was synchronised.
    Collective {
        /// The communicator's asynchronous error (`HcclGetCommAsyncError`), e.g.
        /// `HcclResult::HCCL_E_TIMEOUT`.
        code: HcclResult,
        /// How the stream's synchronisation failed (the runtime's own report).
        source: Box<Error>,
    },
    /// An earlier failure of queued work (a timed-out or rejected collective) left a pool's
    /// memory possibly still in use by a peer: the pool refuses further work. Drop it (and
    /// usually the communicator) and build a new one. Carries that failure (also its
    /// [`source`](std::error::Error::source)).
    Poisoned(Arc<Error>),
    /// The pool is asleep ([`SymPool::sleep`](crate::SymPool::sleep)): its device memory is
    /// released until [`SymPool::wake`](crate::SymPool::wake). Says what was refused.
    Asleep(String),
    /// Ranks disagreed about something that must be identical on every rank.
    Asymmetric(String),
    /// An operating-system call failed (a file, a process); `what` says what was being done.
    Io {
        /// What was being done, e.g. "cannot read /tmp/root-info".
        what: String,
        /// The operating system's error.
        source: Arc<std::io::Error>,
    },
    /// An error on one rank of a multi-rank run.
    Rank {
        /// The rank that failed.
        rank: u32,
        /// What went wrong there.
        source: Box<Error>,
    },
    /// A rank's closure panicked.
    Panicked {
        /// The rank whose closure panicked.
        rank: u32,
        /// The panic payload, if it was a string.
        message: String,
    },
}

/// What an out-of-memory error reports: the request, what was free, and what to change.
///
/// Non-exhaustive, so that a field can be added without breaking callers: read its fields;
/// only the crate builds one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutOfMemory {
    /// Bytes asked for.
    pub requested: u64,
    /// Alignment asked for (after rounding up to the granularity).
    pub align: u64,
    /// Total capacity of the heap or pool that refused.
    pub capacity: u64,
    /// Free bytes at the time of the request.
    pub free: u64,
    /// The largest free region at the time of the request.
    pub largest_free: u64,
    /// The setting to raise to make the request fit.
    pub setting: &'static str,
    /// That setting's value now, in bytes (a pool's budget, a tag's budget, a heap's
    /// capacity).
    pub configured: u64,
    /// The budget that refused the request, when a pool refused it
    /// ([`PoolConfig::budget`](crate::PoolConfig::budget),
    /// [`PoolConfig::tag_budget`](crate::PoolConfig::tag_budget)); `None` for a heap or the
    /// adapter's private region, which have no budget.
    pub over_budget: Option<OverBudget>,
}

/// Which budget refused a request, and how much of it was used: part of an
/// [`OutOfMemory`] report. The same on every rank that made the same calls.
///
/// Non-exhaustive, so that a field can be added without breaking callers: read its fields;
/// only the crate builds one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OverBudget {
    /// The pool's budget, or a tag's.
    pub budget: Budget,
    /// The budget, in bytes.
    pub limit: u64,
    /// The bytes used under it when the request came: the pool's windows
    /// ([`PoolStats::reserved`](crate::PoolStats::reserved)) for the pool budget, the tag's
    /// live bytes ([`TagStats::bytes`](crate::TagStats::bytes)) for a tag budget.
    pub used: u64,
    /// The bytes the refused step would have added under it: the size of the window the pool
    /// would have grown by, or the allocation's granted size.
    pub adding: u64,
}

/// A budget of a pool ([`PoolConfig`](crate::PoolConfig)'s budgets).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Budget {
    /// The pool budget, on the device memory its windows hold
    /// ([`PoolConfig::budget`](crate::PoolConfig::budget)).
    Pool,
    /// The budget of the allocations with this tag
    /// ([`PoolConfig::tag_budget`](crate::PoolConfig::tag_budget)).
    Tag(String),
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::heap::Bytes;
        f.write_str("out of memory: ")?;
        if let Some(OverBudget {
            budget: Budget::Tag(tag),
            limit,
            used,
            adding,
        }) = &self.over_budget
        {
            // A tag's budget: the pool's free space has nothing to do with it.
            return write!(
                f,
                "asked for {} bytes (align {}) with tag {tag:?}, whose budget is {limit} bytes \
                 ({}): {used} bytes ({}) are live under it, and {adding} more would pass it; \
                 raise {} for {tag:?} (now {} bytes, {}) or free tensors with the tag",
                self.requested,
                self.align,
                Bytes(*limit),
                Bytes(*used),
                self.setting,
                self.configured,
                Bytes(self.configured)
            );
        }
        write!(
            f,
            "asked for {} bytes (align {}), {} of {} bytes free, largest free region {} bytes",
            self.requested, self.align, self.free, self.capacity, self.largest_free,
        )?;
        if let Some(OverBudget {
            budget: Budget::Pool,
            limit,
            used,
            adding,
        }) = &self.over_budget
        {
            write!(
                f,
                "; the pool budget is {limit} bytes ({}), its windows hold {used} bytes ({}), \
                 and the {adding}-byte window it needs would pass it",
                Bytes(*limit),
                Bytes(*used)
            )?;
        }
        write!(
            f,
            "; raise {} (now {} bytes, {})",
            self.setting,
            self.configured,
            Bytes(self.configured)
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            Error::OutOfMemory(oom) => oom.fmt(f),
            Error::Hccl {
                call,
                code,
                message,
            } => match code.name() {
                Some(name) => write!(f, "{call} failed with {name} ({}): {message}", code.0),
                None => write!(f, "{call} failed with HcclResult {}: {message}", code.0),
            },
            Error::Acl {
                call,
                code,
                message,
            } => write!(f, "{call} failed with aclError {code}: {message}"),
            Error::Unsupported { call } => {
                write!(f, "{call} is not exported by the loaded library")
            }
            Error::NotHostAddressable => f.write_str(
                "device memory is not host-addressable on this runtime; copy to and from the host instead",
            ),
            Error::Load { library, tried } => {
                write!(f, "could not load the {library} library; tried:")?;
                for (path, why) in tried {
                    write!(f, "\n  {}: {why}", path.display())?;
                }
                let var = if *library == "HCCL" {
                    "SYMHEAP_HCCL_LIB"
                } else {
                    "SYMHEAP_ACL_LIB"
                };
                write!(
                    f,
                    "\nname the library file in {var}, or the CANN install in ASCEND_HOME_PATH \
                     (its lib64 is searched)"
                )
            }
            Error::Collective { code, source } => {
                write!(f, "a queued collective failed with {code}")?;
                if let Some(description) = code.description() {
                    write!(f, " ({description})")?;
                }
                write!(f, ": {source}")
            }
            Error::Poisoned(cause) => write!(
                f,
                "the pool is unusable after an earlier failure of queued work ({cause}); drop it and build a new one"
            ),
            Error::Asleep(what) => write!(
                f,
                "{what}: the pool is asleep, its device memory released; wake it first \
                 (SymPool::wake)"
            ),
            Error::Asymmetric(msg) => write!(f, "ranks are not symmetric: {msg}"),
            Error::Io { what, source } => write!(f, "{what}: {source}"),
            Error::Rank { rank, source } => write!(f, "rank {rank}: {source}"),
            Error::Panicked { rank, message } => write!(f, "rank {rank} panicked: {message}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Rank { source, .. } | Error::Collective { source, .. } => Some(source.as_ref()),
            Error::Poisoned(cause) => Some(cause.as_ref()),
            Error::Io { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

/// What an out-of-memory error from a heap tells the caller to raise.
const HEAP_CAPACITY_SETTING: &str = "the heap capacity (Heap::new)";

/// A heap's error as symheap's: [`HeapError::InvalidArgument`](crate::heap::HeapError)
/// keeps its message, [`HeapError::OutOfSpace`](crate::heap::HeapError) becomes
/// [`Error::OutOfMemory`] naming the heap's capacity as the setting to raise. (The pool reports
/// its own out-of-memory errors, naming its own setting.)
impl From<crate::heap::HeapError> for Error {
    fn from(e: crate::heap::HeapError) -> Self {
        use crate::heap::HeapError;
        match e {
            HeapError::InvalidArgument(msg) => Error::InvalidArgument(msg),
            HeapError::OutOfSpace(oom) => Error::OutOfMemory(OutOfMemory::from(oom)),
            // `HeapError` is non-exhaustive: a case added later reads as a bad argument until
            // it gets its own mapping.
            other => Error::InvalidArgument(other.to_string()),
        }
    }
}

impl From<crate::heap::OutOfSpace> for OutOfMemory {
    fn from(oom: crate::heap::OutOfSpace) -> Self {
        OutOfMemory {
            requested: oom.requested,
            align: oom.align,
            capacity: oom.capacity,
            free: oom.free,
            largest_free: oom.largest_free,
            setting: HEAP_CAPACITY_SETTING,
            configured: oom.capacity,
            over_budget: None,
        }
    }
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }

    /// Shorthand for [`Error::Io`].
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source: Arc::new(source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::Heap;

    #[test]
    fn heap_errors_map_with_their_details() {
        let mut heap = Heap::new(64 * 512, 512).unwrap();
        let low = heap.alloc(512, 0).unwrap();
        let Error::OutOfMemory(oom) = Error::from(heap.alloc(64 * 512, 0).unwrap_err()) else {
            panic!("a heap out of space is out of memory");
        };
        let fields = (
            oom.requested,
            oom.align,
            oom.capacity,
            oom.free,
            oom.largest_free,
        );
        assert_eq!(fields, (32768, 512, 32768, 32256, 32256));
        assert_eq!(
            (oom.setting, oom.configured),
            (HEAP_CAPACITY_SETTING, 32768)
        );
        let text = Error::OutOfMemory(oom).to_string();
        assert!(
            text.ends_with("raise the heap capacity (Heap::new) (now 32768 bytes, 32.00 KiB)"),
            "{text}"
        );
        let Error::InvalidArgument(msg) = Error::from(heap.alloc(0, 0).unwrap_err()) else {
            panic!("a bad argument stays one");
        };
        assert_eq!(msg, "Heap::alloc: size must be at least 1 byte");
        heap.free(low).unwrap();
    }
}
