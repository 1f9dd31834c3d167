//! The shared basics every other wing uses, and which use nothing of the emulator: failures and
//! the recent error message, typed handles and their registries, the ranked locks, live-object
//! counters, wait warnings, the reduction kernels and the byte-level primitives of the
//! algorithms.

pub(crate) mod counters;
pub(crate) mod errors;
pub(crate) mod handle;
pub(crate) mod json;
pub(crate) mod lock;
pub(crate) mod patience;
pub(crate) mod primitives;
pub(crate) mod reduce;
pub(crate) mod registry;
