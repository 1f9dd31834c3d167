#![doc = include_str!("../README.md")]

mod error;
pub mod heap;

pub use error::{Error, OutOfMemory, Result};
