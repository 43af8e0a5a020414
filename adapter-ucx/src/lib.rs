//! tagspace's std adapter: tagspace on real UCX workers, and the CUDA IPC handle cache.
//!
//! * [`ucp`]: safe wrappers over `ucx1-sys` — context, worker (`UCS_THREAD_MODE_SINGLE`, so
//!   nothing here is `Send`), listener, endpoints with peer error handling, requests with owned
//!   buffers, progress by polling or by blocking on the worker's event fd; UCX statuses mapped to
//!   one error type carrying the status name.
//! * [`node`]: a [`node::Node`] per worker, shared by every library in the process — one
//!   endpoint per peer for every namespace, the core's control-plane sessions over Active
//!   Messages (P1–P5), namespaced tag send/recv/probe and Active Messages with full masks (D1),
//!   stray draining (D2), peer failure confined to its endpoint (D3), per-namespace counters.
//! * [`shared`]: a [`shared::SharedNode`] (`Send + Sync`) on a host's MULTI worker, with a
//!   [`shared::Library`] handle per library, for libraries on several threads.
//! * [`ipc`]: the process-wide cache of imported CUDA IPC memory handles, so every library that
//!   is handed the same peer buffer shares one mapping (C1), with a real backend that loads the
//!   CUDA driver at run time and so works, and reports `CudaUnavailable`, on machines without
//!   CUDA (C2).
//!
//! The main job is the `tagspace-demo` binary (several real processes over UCX). Under
//! `--cfg loom` only [`ipc`] is built (its loom models do not need UCX); so it is under
//! `--cfg trybuild`, which the compile-fail tests of [`ipc`]'s guard types build with.
#![deny(missing_docs)]

pub mod ipc;
#[cfg(not(any(loom, trybuild)))]
pub mod node;
#[cfg(not(any(loom, trybuild)))]
pub mod shared;
mod sync;
#[cfg(not(any(loom, trybuild)))]
pub mod ucp;
