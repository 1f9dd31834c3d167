//! The allocators under test behind one trait, and the workloads that drive them.

pub mod allocators;
pub mod best_fit;
pub mod report;
pub mod workloads;
