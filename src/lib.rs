#![doc = include_str!("../README.md")]

pub mod emu;
mod error;
pub mod heap;
pub mod runtime;
pub mod sys;

pub use error::{Error, OutOfMemory, Result};
pub use runtime::{DevicePtr, Element, Runtime, WindowHandle};
