//! symheap's tools, apart from the library so that a real-hardware build compiles neither:
//! [`launcher`] (a program started as N rank processes, the `symheap-run` binary) and
//! [`heap_map`] (pool snapshots drawn as one HTML page, the `symheap-map` binary).
//!
//! Install both binaries from a checkout with `cargo install --path symheap-tools`.

pub mod heap_map;
pub mod launcher;
