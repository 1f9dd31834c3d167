//! symheap's integration tests: one binary, one module per subject.

mod heap;
mod support;
