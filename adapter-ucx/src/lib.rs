//! tagspace's std adapter.
//!
//! **Status: only the CUDA IPC handle cache is here.** The UCX binding this crate is named for
//! (workers, listeners, shared endpoints, namespaced tag and AM traffic over `ucx1-sys`) is not
//! written yet; until it is, `tagspace-mock` is the only transport tagspace runs on.
//!
//! [`ipc`]: the process-wide cache of imported CUDA IPC memory handles, so every library that is
//! handed the same peer buffer shares one mapping (invariant C1), with a real backend that loads
//! the CUDA driver at run time and so works, and reports `CudaUnavailable`, on machines without
//! CUDA (C2).
#![deny(missing_docs)]

pub mod ipc;
#[cfg(not(loom))]
pub mod node;
mod sync;
#[cfg(not(loom))]
pub mod ucp;
