//! CUDA IPC: the descriptor a library sends (`tagspace_core::ipc`), the process-wide cache of
//! imported handles ([`IpcCache`]), and driver backends: the real CUDA driver loaded at run time
//! ([`CudaDriverBackend`]) and, for tests, the mock driver of `tagspace-mock`.
//!
//! Two libraries sharing one imported buffer:
//!
//! ```no_run
//! use tagspace_ucx::ipc::{IpcCache, IpcError};
//! use tagspace_core::ipc::IpcDescriptor;
//!
//! # fn got_from_peer() -> Vec<u8> { vec![] }
//! let cache = IpcCache::global()?;                       // CudaUnavailable without a driver
//! let desc = IpcDescriptor::decode(&got_from_peer())?;   // bytes from the peer, via a namespace
//! let for_dask = cache.import(&desc)?;                   // opens the handle
//! let for_cuml = cache.import(&desc)?;                   // shares it: no second open
//! assert_eq!(for_dask.device_ptr(), for_cuml.device_ptr());
//! drop(for_dask);
//! drop(for_cuml);                                        // the last release closes it
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cache;
mod cuda;

pub use cache::{CacheStats, ImportGuard, IpcCache};
pub use cuda::CudaDriverBackend;

use std::fmt;
use std::sync::OnceLock;
use tagspace_core::ipc::ExporterId;

/// What opens and closes IPC handles.
pub trait IpcBackend: Send + Sync + 'static {
    /// Opens `handle` on `device` in this process; returns the base device pointer.
    fn open(&self, device: u32, handle: &[u8; 64]) -> Result<u64, IpcError>;
    /// Closes a mapping returned by `open`.
    fn close(&self, device: u32, base: u64) -> Result<(), IpcError>;
}

/// Why an IPC operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IpcError {
    /// No CUDA driver could be loaded (C2). Says what was looked for.
    CudaUnavailable(String),
    /// The driver refused a second open of a handle (old drivers). Backends return this; the
    /// cache turns it into [`IpcError::AlreadyMappedElsewhere`].
    AlreadyMapped,
    /// The handle is open in this process outside the cache (UCX's own cuda_ipc cache, or a
    /// library that bypassed tagspace), and the driver refuses to open it again.
    AlreadyMappedElsewhere,
    /// The exporting process was reported failed.
    PeerFailed {
        /// Its pid.
        pid: u32,
    },
    /// A driver call failed.
    Driver {
        /// The call.
        call: &'static str,
        /// `CUresult` code.
        code: i32,
        /// The driver's name for it.
        name: String,
    },
    /// This machine cannot say who this process is (no `/proc`).
    Identity(String),
}

impl fmt::Display for IpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpcError::CudaUnavailable(why) => write!(f, "CUDA is unavailable: {why}"),
            IpcError::AlreadyMapped => f.write_str("CUDA_ERROR_ALREADY_MAPPED"),
            IpcError::AlreadyMappedElsewhere => f.write_str(
                "the handle is already open in this process outside tagspace's cache \
                 (CUDA_ERROR_ALREADY_MAPPED)",
            ),
            IpcError::PeerFailed { pid } => {
                write!(f, "the exporting process (pid {pid}) has failed")
            }
            IpcError::Driver { call, code, name } => write!(f, "{call} failed: {name} ({code})"),
            IpcError::Identity(why) => write!(f, "cannot identify this process: {why}"),
        }
    }
}

impl std::error::Error for IpcError {}

/// This process's [`ExporterId`], from `/proc` (Linux). Computed once.
pub fn exporter_id() -> Result<ExporterId, IpcError> {
    static ID: OnceLock<Result<ExporterId, IpcError>> = OnceLock::new();
    ID.get_or_init(read_exporter_id).clone()
}

fn read_exporter_id() -> Result<ExporterId, IpcError> {
    let err = |what: &str, e: &dyn fmt::Display| IpcError::Identity(format!("{what}: {e}"));
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map_err(|e| err("/proc/sys/kernel/random/boot_id", &e))?;
    let hex: String = boot.trim().chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        return Err(IpcError::Identity(format!(
            "boot_id {boot:?} is not a UUID"
        )));
    }
    let mut boot_id = [0u8; 16];
    for (i, b) in boot_id.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| err("boot_id", &e))?;
    }
    let ns = std::fs::read_link("/proc/self/ns/pid").map_err(|e| err("/proc/self/ns/pid", &e))?;
    // "pid:[4026531836]"
    let ns = ns.to_string_lossy();
    let pid_namespace = ns
        .trim_start_matches("pid:[")
        .trim_end_matches(']')
        .parse()
        .map_err(|e| err("pid namespace inode", &e))?;
    let stat =
        std::fs::read_to_string("/proc/self/stat").map_err(|e| err("/proc/self/stat", &e))?;
    // Field 2 (comm) may hold spaces and parentheses: count fields after the last ')'.
    let after = stat
        .rsplit_once(')')
        .ok_or_else(|| IpcError::Identity("malformed /proc/self/stat".into()))?
        .1;
    let start_time = after
        .split_whitespace()
        .nth(19) // field 22 overall; fields after comm start at 3
        .ok_or_else(|| IpcError::Identity("short /proc/self/stat".into()))?
        .parse()
        .map_err(|e| err("start time", &e))?;
    Ok(ExporterId {
        boot_id,
        pid_namespace,
        pid: std::process::id(),
        start_time,
    })
}

impl IpcCache<CudaDriverBackend> {
    /// The process-wide cache over the real CUDA driver, created on first use. Fails with
    /// [`IpcError::CudaUnavailable`] (every time, cheaply) on machines without CUDA.
    pub fn global() -> Result<&'static IpcCache<CudaDriverBackend>, IpcError> {
        static GLOBAL: OnceLock<Result<IpcCache<CudaDriverBackend>, IpcError>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| CudaDriverBackend::new().map(IpcCache::new))
            .as_ref()
            .map_err(Clone::clone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exporter_identity_is_read_from_proc() {
        let id = exporter_id().unwrap();
        assert_eq!(id.pid, std::process::id());
        assert_ne!(id.boot_id, [0; 16]);
        assert!(id.pid_namespace > 0);
        assert!(id.start_time > 0);
        assert_eq!(exporter_id().unwrap(), id);
    }
}
