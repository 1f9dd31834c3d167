//! symheap's integration tests: one binary, one module per subject.

mod budgets;
mod cann_install;
mod collectives;
mod cpp_program;
mod dlopen;
mod fail_fast;
mod faults;
mod graphs;
mod groups;
mod hardening;
mod harness;
mod heap_map;
mod inference_worker;
mod inspect;
mod module_order;
mod moe;
mod paths;
mod pool;
mod pool_vector;
mod processes;
mod runtime;
mod sleep;
mod soak;
mod streams;
mod support;
mod views;
