//! What a failed call reports: an `HcclResult` for the C caller, and a message that
//! `symheap_npu_last_error` returns.

use symheap::Error;
use symheap::sys::HcclResult;

/// A failed call: its status code and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The code an export that returns `HcclResult` returns.
    pub code: HcclResult,
    /// The message (no trailing newline).
    pub message: String,
}

/// The result of a call inside the library.
pub type Outcome<T> = Result<T, Failure>;

impl Failure {
    /// A failure with `code` and `message`.
    pub fn new(code: HcclResult, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// A bad argument (`HCCL_E_PARA`).
    pub fn invalid(message: impl Into<String>) -> Self {
        Failure::new(HcclResult::HCCL_E_PARA, message)
    }

    /// The same failure, its message prefixed with `what` was being done.
    pub fn context(mut self, what: &str) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let code = match &e {
            Error::Hccl { code, .. } => *code,
            Error::Collective { code, .. } => *code,
            Error::OutOfMemory(_) => HcclResult::HCCL_E_MEMORY,
            Error::InvalidArgument(_) => HcclResult::HCCL_E_PARA,
            Error::Unsupported { .. } => HcclResult::HCCL_E_NOT_SUPPORT,
            Error::Acl { .. } => HcclResult::HCCL_E_RUNTIME,
            _ => HcclResult::HCCL_E_INTERNAL,
        };
        Failure::new(code, e.to_string())
    }
}

impl From<symheap::heap::HeapError> for Failure {
    fn from(e: symheap::heap::HeapError) -> Self {
        Failure::new(HcclResult::HCCL_E_INTERNAL, format!("heap: {e}"))
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
