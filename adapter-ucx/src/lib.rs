#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod ipc;
#[cfg(not(any(loom, trybuild)))]
pub mod node;
#[cfg(not(any(loom, trybuild)))]
pub mod shared;
mod sync;
#[cfg(not(any(loom, trybuild)))]
pub mod ucp;
