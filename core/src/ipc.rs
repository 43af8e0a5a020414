//! The CUDA IPC descriptor a library sends to a peer through its namespace: which memory to
//! open and whose it is. Pure bytes (no CUDA here): the cache and the driver backends live in
//! the adapter.
//!
//! ```text
//! "TI" | version u8 (=1) | reserved u8 (=0) | device u32 | pid u32 | pid_namespace u64 |
//! start_time u64 | boot_id [16] | offset u64 | len u64 | handle [64]          (big endian)
//! ```
//!
//! Fixed size ([`IpcDescriptor::LEN`] bytes), so decoding never allocates; any byte string
//! decodes to a descriptor or a [`DescriptorError`] naming what was wrong.
//!
//! The exporter is named by more than its pid: the boot id (another boot or machine), the pid
//! namespace (another container) and the process start time (a reused pid) all differ, so two
//! exporters never alias in a cache keyed by [`ExporterId`].
//!
//! ```
//! use tagspace_core::ipc::{ExporterId, IpcDescriptor};
//! let d = IpcDescriptor {
//!     exporter: ExporterId { boot_id: [7; 16], pid_namespace: 4026531836, pid: 4242, start_time: 99 },
//!     device: 0, handle: [1; 64], offset: 4096, len: 1 << 20,
//! };
//! let bytes = d.encode();
//! assert_eq!(IpcDescriptor::decode(&bytes), Ok(d));
//! assert!(IpcDescriptor::decode(&bytes[..10]).is_err());
//! ```

use core::fmt;

/// Who exported a handle: unique across pid reuse, containers and reboots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExporterId {
    /// `/proc/sys/kernel/random/boot_id`, as 16 bytes.
    pub boot_id: [u8; 16],
    /// Inode of the exporter's pid namespace (`/proc/self/ns/pid`).
    pub pid_namespace: u64,
    /// Pid inside that namespace.
    pub pid: u32,
    /// Process start time in clock ticks since boot (`/proc/self/stat`, field 22).
    pub start_time: u64,
}

/// A CUDA IPC memory handle plus where the buffer lies inside the exported allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpcDescriptor {
    /// The exporting process.
    pub exporter: ExporterId,
    /// Device ordinal on the exporter's machine.
    pub device: u32,
    /// `CUipcMemHandle`: 64 opaque bytes from `cuIpcGetMemHandle`.
    pub handle: [u8; 64],
    /// Offset of the buffer inside the allocation.
    pub offset: u64,
    /// Length of the buffer.
    pub len: u64,
}

/// Why descriptor bytes were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DescriptorError {
    /// Not exactly [`IpcDescriptor::LEN`] bytes.
    WrongLength {
        /// Bytes given.
        got: usize,
    },
    /// Does not start with `TI`.
    BadMagic([u8; 2]),
    /// A version this crate does not speak.
    UnsupportedVersion(u8),
    /// The reserved byte is not zero.
    Reserved(u8),
    /// Zero-length buffer.
    EmptyBuffer,
    /// `offset + len` overflows 64 bits.
    RangeOverflow {
        /// The offset.
        offset: u64,
        /// The length.
        len: u64,
    },
}

impl fmt::Display for DescriptorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DescriptorError::WrongLength { got } => write!(
                f,
                "IPC descriptor must be {} bytes, got {got}",
                IpcDescriptor::LEN
            ),
            DescriptorError::BadMagic(m) => {
                write!(
                    f,
                    "not an IPC descriptor: magic {:#04x} {:#04x}",
                    m[0], m[1]
                )
            }
            DescriptorError::UnsupportedVersion(v) => write!(
                f,
                "IPC descriptor version {v} is not supported (this side speaks 1)"
            ),
            DescriptorError::Reserved(b) => {
                write!(f, "IPC descriptor reserved byte is {b:#04x}, not 0")
            }
            DescriptorError::EmptyBuffer => f.write_str("IPC descriptor describes an empty buffer"),
            DescriptorError::RangeOverflow { offset, len } => write!(
                f,
                "IPC descriptor range overflows: offset {offset:#x} + length {len:#x}"
            ),
        }
    }
}

impl core::error::Error for DescriptorError {}

impl IpcDescriptor {
    /// Encoded size.
    pub const LEN: usize = 124;
    const MAGIC: [u8; 2] = *b"TI";
    const VERSION: u8 = 1;

    /// The wire form.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        let mut at = 0;
        let mut put = |s: &[u8]| {
            b[at..at + s.len()].copy_from_slice(s);
            at += s.len();
        };
        put(&Self::MAGIC);
        put(&[Self::VERSION, 0]);
        put(&self.device.to_be_bytes());
        put(&self.exporter.pid.to_be_bytes());
        put(&self.exporter.pid_namespace.to_be_bytes());
        put(&self.exporter.start_time.to_be_bytes());
        put(&self.exporter.boot_id);
        put(&self.offset.to_be_bytes());
        put(&self.len.to_be_bytes());
        put(&self.handle);
        b
    }

    /// Parses the wire form.
    pub fn decode(bytes: &[u8]) -> Result<IpcDescriptor, DescriptorError> {
        let b: &[u8; Self::LEN] = bytes
            .try_into()
            .map_err(|_| DescriptorError::WrongLength { got: bytes.len() })?;
        if b[..2] != Self::MAGIC {
            return Err(DescriptorError::BadMagic([b[0], b[1]]));
        }
        if b[2] != Self::VERSION {
            return Err(DescriptorError::UnsupportedVersion(b[2]));
        }
        if b[3] != 0 {
            return Err(DescriptorError::Reserved(b[3]));
        }
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(a)
        };
        let mut boot_id = [0u8; 16];
        boot_id.copy_from_slice(&b[28..44]);
        let mut handle = [0u8; 64];
        handle.copy_from_slice(&b[60..124]);
        let (offset, len) = (u64_at(44), u64_at(52));
        if len == 0 {
            return Err(DescriptorError::EmptyBuffer);
        }
        if offset.checked_add(len).is_none() {
            return Err(DescriptorError::RangeOverflow { offset, len });
        }
        Ok(IpcDescriptor {
            exporter: ExporterId {
                boot_id,
                pid_namespace: u64_at(12),
                pid: u32_at(8),
                start_time: u64_at(20),
            },
            device: u32_at(4),
            handle,
            offset,
            len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> IpcDescriptor {
        IpcDescriptor {
            exporter: ExporterId {
                boot_id: [0xab; 16],
                pid_namespace: 7,
                pid: 1234,
                start_time: 555,
            },
            device: 3,
            handle: [9; 64],
            offset: 16,
            len: 32,
        }
    }

    #[test]
    fn round_trip_and_errors() {
        let d = sample();
        let b = d.encode();
        assert_eq!(IpcDescriptor::decode(&b), Ok(d));
        assert_eq!(
            IpcDescriptor::decode(&b[..123]),
            Err(DescriptorError::WrongLength { got: 123 })
        );
        let mut x = b;
        x[0] = b'X';
        assert_eq!(
            IpcDescriptor::decode(&x),
            Err(DescriptorError::BadMagic([b'X', b'I']))
        );
        let mut x = b;
        x[2] = 2;
        assert_eq!(
            IpcDescriptor::decode(&x),
            Err(DescriptorError::UnsupportedVersion(2))
        );
        let mut x = b;
        x[3] = 1;
        assert_eq!(IpcDescriptor::decode(&x), Err(DescriptorError::Reserved(1)));
        let mut d0 = d;
        d0.len = 0;
        assert_eq!(
            IpcDescriptor::decode(&d0.encode()),
            Err(DescriptorError::EmptyBuffer)
        );
        let mut dov = d;
        dov.offset = u64::MAX;
        assert!(matches!(
            IpcDescriptor::decode(&dov.encode()),
            Err(DescriptorError::RangeOverflow { .. })
        ));
    }
}
