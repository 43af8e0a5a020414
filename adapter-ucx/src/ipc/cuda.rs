//! The real backend: the CUDA driver API, loaded at run time through `cudarc`'s dynamic loading,
//! so this builds, links and runs where there is no CUDA (C2): [`CudaDriverBackend::new`] then
//! returns [`IpcError::CudaUnavailable`] instead of panicking.
//!
//! Handles are opened in each device's primary context (the one the CUDA runtime, and so most
//! libraries, use), with `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.

use super::{IpcBackend, IpcError};
use cudarc::driver::sys;
use std::collections::HashMap;
use std::sync::Mutex;

/// `CUresult` to `Result`, with the driver's name for the error.
fn check(call: &'static str, r: sys::CUresult) -> Result<(), IpcError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    if r == sys::CUresult::CUDA_ERROR_ALREADY_MAPPED {
        return Err(IpcError::AlreadyMapped);
    }
    let mut p: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: only reached after the library was found and loaded (every path into this module
    // goes through `CudaDriverBackend::new`); `p` is a valid out-pointer; on success the driver
    // stores a pointer to a static NUL-terminated string.
    let name = unsafe {
        if sys::cuGetErrorName(r, &mut p) == sys::CUresult::CUDA_SUCCESS && !p.is_null() {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        } else {
            format!("{r:?}")
        }
    };
    Err(IpcError::Driver {
        call,
        code: r as i32,
        name,
    })
}

/// The CUDA driver, loaded at run time.
pub struct CudaDriverBackend {
    /// Retained primary context per device, stored as an address: `CUcontext` is a raw pointer.
    contexts: Mutex<HashMap<u32, usize>>,
}

impl CudaDriverBackend {
    /// Loads libcuda and initialises it; [`IpcError::CudaUnavailable`] where there is none.
    pub fn new() -> Result<Self, IpcError> {
        // SAFETY: only probes for the shared library; calls nothing in it.
        if !unsafe { sys::is_culib_present() } {
            return Err(IpcError::CudaUnavailable(
                "no CUDA driver library (libcuda.so) could be loaded".into(),
            ));
        }
        // SAFETY: the library is present (checked above), so the lazy loader will not panic;
        // cuInit takes no pointers.
        check("cuInit", unsafe { sys::cuInit(0) }).map_err(|e| match e {
            IpcError::Driver { name, .. } => IpcError::CudaUnavailable(format!("cuInit: {name}")),
            e => e,
        })?;
        Ok(CudaDriverBackend {
            contexts: Mutex::new(HashMap::new()),
        })
    }

    /// Makes `device`'s primary context current on this thread (retaining it once).
    pub fn make_current(&self, device: u32) -> Result<(), IpcError> {
        let mut ctxs = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        let ctx = match ctxs.get(&device) {
            Some(&c) => c as sys::CUcontext,
            None => {
                let mut dev: sys::CUdevice = 0;
                let mut ctx: sys::CUcontext = std::ptr::null_mut();
                // SAFETY: library loaded (constructor); `dev` and `ctx` are valid out-pointers.
                unsafe {
                    check("cuDeviceGet", sys::cuDeviceGet(&mut dev, device as i32))?;
                    check(
                        "cuDevicePrimaryCtxRetain",
                        sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
                    )?;
                }
                ctxs.insert(device, ctx as usize);
                ctx
            }
        };
        // SAFETY: `ctx` is a primary context we retained and never release while `self` lives.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })
    }
}

impl IpcBackend for CudaDriverBackend {
    fn open(&self, device: u32, handle: &[u8; 64]) -> Result<u64, IpcError> {
        self.make_current(device)?;
        let mut h = sys::CUipcMemHandle { reserved: [0; 64] };
        for (d, s) in h.reserved.iter_mut().zip(handle) {
            *d = *s as std::ffi::c_char;
        }
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: library loaded; `ptr` is a valid out-pointer; the handle is passed by value.
        check("cuIpcOpenMemHandle", unsafe {
            sys::cuIpcOpenMemHandle_v2(
                &mut ptr,
                h,
                sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
            )
        })?;
        Ok(ptr)
    }

    fn close(&self, device: u32, base: u64) -> Result<(), IpcError> {
        self.make_current(device)?;
        // SAFETY: library loaded; `base` came from cuIpcOpenMemHandle and the cache closes it
        // exactly once.
        check("cuIpcCloseMemHandle", unsafe {
            sys::cuIpcCloseMemHandle(base)
        })
    }
}

// SAFETY of the auto traits: the only state is a map of context addresses behind a Mutex; CUDA
// contexts may be made current on any thread, which is all this type does with them. (Send and
// Sync are derived automatically because the addresses are stored as usize.)

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_unavailable_without_a_driver() {
        // On machines with a driver this constructs; on this project's CI machines (no GPU) it
        // must return a clear error, not panic (C2).
        // SAFETY: probe only.
        if unsafe { sys::is_culib_present() } {
            return;
        }
        match CudaDriverBackend::new() {
            Err(IpcError::CudaUnavailable(why)) => assert!(why.contains("libcuda")),
            Err(e) => panic!("wrong error {e}"),
            Ok(_) => panic!("a backend without a driver"),
        }
        assert!(matches!(
            super::super::IpcCache::global(),
            Err(IpcError::CudaUnavailable(_))
        ));
    }
}
