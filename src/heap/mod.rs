//! A pure offset allocator (placeholder: built in issue 2).
#![forbid(unsafe_code)]
