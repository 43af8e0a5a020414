//! A mock CUDA driver for IPC memory handles, with the two behaviours real drivers have:
//!
//! * [`DriverBehavior::AlreadyMapped`] (older drivers): a process that opens a handle it already
//!   has open gets `CUDA_ERROR_ALREADY_MAPPED`;
//! * [`DriverBehavior::RefCounted`] (newer drivers): a second open returns the same mapping and
//!   counts; each open needs its own close.
//!
//! Device memory is a byte vector per allocation, so tests can check that an importer sees the
//! exporter's bytes. Thread-safe: concurrent imports are part of what the cache must survive.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

/// CUDA's `CUipcMemHandle` is 64 opaque bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpcHandle(pub [u8; 64]);

/// A device pointer in some process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DevicePtr(pub u64);

/// What a second open of the same handle in one process does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverBehavior {
    /// Fails with `CUDA_ERROR_ALREADY_MAPPED` (older drivers).
    AlreadyMapped,
    /// Returns the same mapping and counts (newer drivers).
    RefCounted,
}

/// Errors with the driver's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaError {
    /// `CUDA_ERROR_ALREADY_MAPPED`.
    AlreadyMapped,
    /// `CUDA_ERROR_INVALID_HANDLE`: unknown or freed allocation.
    InvalidHandle,
    /// `CUDA_ERROR_INVALID_VALUE`: a pointer this process did not get from the driver.
    InvalidValue,
    /// `CUDA_ERROR_INVALID_DEVICE`.
    InvalidDevice,
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CudaError::AlreadyMapped => "CUDA_ERROR_ALREADY_MAPPED",
            CudaError::InvalidHandle => "CUDA_ERROR_INVALID_HANDLE",
            CudaError::InvalidValue => "CUDA_ERROR_INVALID_VALUE",
            CudaError::InvalidDevice => "CUDA_ERROR_INVALID_DEVICE",
        })
    }
}

impl std::error::Error for CudaError {}

struct Allocation {
    device: u32,
    bytes: Vec<u8>,
}

#[derive(Default)]
struct State {
    next: u64,
    /// Exported allocations by handle; `None` once freed.
    allocations: HashMap<IpcHandle, Option<Allocation>>,
    /// Device pointer (in its exporting process) to handle.
    exported: HashMap<(u32, DevicePtr), IpcHandle>,
    /// (process, handle) → (mapped pointer, open count).
    mappings: HashMap<(u32, IpcHandle), (DevicePtr, u32)>,
    opens: u64,
    closes: u64,
}

/// The mock driver, shared by every simulated process of a test.
pub struct MockCudaDriver {
    behavior: DriverBehavior,
    devices: u32,
    state: Mutex<State>,
}

impl MockCudaDriver {
    /// A driver with `devices` GPUs and the given behaviour.
    pub fn new(behavior: DriverBehavior, devices: u32) -> Self {
        MockCudaDriver {
            behavior,
            devices,
            state: Mutex::new(State::default()),
        }
    }

    /// The behaviour chosen.
    pub fn behavior(&self) -> DriverBehavior {
        self.behavior
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panicking test thread must not hide the driver's state from the others.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `cuMemAlloc` in `process` on `device`, filled with `fill`, then `cuIpcGetMemHandle`.
    pub fn alloc_and_export(
        &self,
        process: u32,
        device: u32,
        bytes: &[u8],
    ) -> Result<(DevicePtr, IpcHandle), CudaError> {
        if device >= self.devices {
            return Err(CudaError::InvalidDevice);
        }
        let mut s = self.state();
        s.next += 1;
        let ptr = DevicePtr(0x7f00_0000_0000 + (s.next << 20));
        let mut h = [0u8; 64];
        h[..8].copy_from_slice(&s.next.to_le_bytes());
        h[8..12].copy_from_slice(&process.to_le_bytes());
        h[12..16].copy_from_slice(&device.to_le_bytes());
        let handle = IpcHandle(h);
        s.allocations.insert(
            handle,
            Some(Allocation {
                device,
                bytes: bytes.to_vec(),
            }),
        );
        s.exported.insert((process, ptr), handle);
        Ok((ptr, handle))
    }

    /// `cuMemFree` by the exporter: later opens fail; existing mappings read nothing.
    pub fn free(&self, process: u32, ptr: DevicePtr) -> Result<(), CudaError> {
        let mut s = self.state();
        let h = s
            .exported
            .remove(&(process, ptr))
            .ok_or(CudaError::InvalidValue)?;
        s.allocations.insert(h, None);
        Ok(())
    }

    /// `cuIpcOpenMemHandle` in `process`.
    pub fn open(&self, process: u32, handle: &IpcHandle) -> Result<DevicePtr, CudaError> {
        let mut s = self.state();
        match s.allocations.get(handle) {
            Some(Some(_)) => {}
            _ => return Err(CudaError::InvalidHandle),
        }
        if let Some((ptr, count)) = s.mappings.get_mut(&(process, *handle)) {
            return match self.behavior {
                DriverBehavior::AlreadyMapped => Err(CudaError::AlreadyMapped),
                DriverBehavior::RefCounted => {
                    *count += 1;
                    let p = *ptr;
                    s.opens += 1;
                    Ok(p)
                }
            };
        }
        s.next += 1;
        let ptr = DevicePtr(0x5500_0000_0000 + (s.next << 20));
        s.mappings.insert((process, *handle), (ptr, 1));
        s.opens += 1;
        Ok(ptr)
    }

    /// `cuIpcCloseMemHandle` in `process`.
    pub fn close(&self, process: u32, ptr: DevicePtr) -> Result<(), CudaError> {
        let mut s = self.state();
        let key = s
            .mappings
            .iter()
            .find(|(k, v)| k.0 == process && v.0 == ptr)
            .map(|(k, _)| *k)
            .ok_or(CudaError::InvalidValue)?;
        let entry = s.mappings.get_mut(&key).ok_or(CudaError::InvalidValue)?;
        entry.1 -= 1;
        if entry.1 == 0 {
            s.mappings.remove(&key);
        }
        s.closes += 1;
        Ok(())
    }

    /// Reads the bytes behind a mapping (what a kernel or a copy would see).
    pub fn read(&self, process: u32, ptr: DevicePtr) -> Result<Vec<u8>, CudaError> {
        let s = self.state();
        let handle = s
            .mappings
            .iter()
            .find(|(k, v)| k.0 == process && v.0 == ptr)
            .map(|(k, _)| k.1)
            .ok_or(CudaError::InvalidValue)?;
        match s.allocations.get(&handle) {
            Some(Some(a)) => Ok(a.bytes.clone()),
            _ => Err(CudaError::InvalidHandle),
        }
    }

    /// The device an exported handle lives on.
    pub fn device_of(&self, handle: &IpcHandle) -> Option<u32> {
        self.state()
            .allocations
            .get(handle)?
            .as_ref()
            .map(|a| a.device)
    }

    /// Current open count of `handle` in `process` (0 if not open).
    pub fn open_count(&self, process: u32, handle: &IpcHandle) -> u32 {
        self.state()
            .mappings
            .get(&(process, *handle))
            .map_or(0, |m| m.1)
    }

    /// Successful opens and closes so far, all processes.
    pub fn totals(&self) -> (u64, u64) {
        let s = self.state();
        (s.opens, s.closes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_drivers_refuse_a_second_open() {
        let d = MockCudaDriver::new(DriverBehavior::AlreadyMapped, 2);
        let (_, h) = d.alloc_and_export(1, 0, b"abc").unwrap();
        let p = d.open(2, &h).unwrap();
        assert_eq!(d.open(2, &h), Err(CudaError::AlreadyMapped));
        assert_eq!(d.read(2, p).unwrap(), b"abc");
        assert!(d.open(3, &h).is_ok()); // another process is fine
        d.close(2, p).unwrap();
        assert_eq!(d.close(2, p), Err(CudaError::InvalidValue));
        assert!(d.open(2, &h).is_ok());
    }

    #[test]
    fn new_drivers_count() {
        let d = MockCudaDriver::new(DriverBehavior::RefCounted, 1);
        let (ptr, h) = d.alloc_and_export(1, 0, b"x").unwrap();
        let a = d.open(2, &h).unwrap();
        let b = d.open(2, &h).unwrap();
        assert_eq!(a, b);
        assert_eq!(d.open_count(2, &h), 2);
        d.close(2, a).unwrap();
        assert_eq!(d.open_count(2, &h), 1);
        d.free(1, ptr).unwrap();
        assert_eq!(d.open(3, &h), Err(CudaError::InvalidHandle));
        assert_eq!(d.alloc_and_export(1, 5, b""), Err(CudaError::InvalidDevice));
    }
}
