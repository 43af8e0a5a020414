//! Namespace names: short, visible-ASCII strings that two processes compare byte for byte.
//!
//! ```
//! use tagspace_core::Name;
//! let n = Name::new("dask").unwrap();
//! assert_eq!(n.as_str(), "dask");
//! assert!(Name::new("has space").is_err());
//! ```

use crate::error::NameError;
use core::fmt;

/// Longest name, in bytes. Fits the wire format's one-byte length.
pub const MAX_NAME_LEN: usize = 64;

/// A validated namespace name, stored inline (no allocator).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Name {
    len: u8,
    bytes: [u8; MAX_NAME_LEN],
}

impl Name {
    /// Validates `s`: 1 to [`MAX_NAME_LEN`] bytes of visible ASCII (`0x21..=0x7e`).
    pub const fn new(s: &str) -> Result<Name, NameError> {
        Name::from_bytes(s.as_bytes())
    }

    /// As [`Name::new`], from bytes (for instance off the wire).
    pub const fn from_bytes(b: &[u8]) -> Result<Name, NameError> {
        if b.is_empty() {
            return Err(NameError::Empty);
        }
        if b.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong { len: b.len() });
        }
        let mut bytes = [0u8; MAX_NAME_LEN];
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if !(c >= 0x21 && c <= 0x7e) {
                return Err(NameError::BadByte { byte: c, at: i });
            }
            bytes[i] = c;
            i += 1;
        }
        Ok(Name {
            len: b.len() as u8,
            bytes,
        })
    }

    /// The name as bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The name. Always valid ASCII.
    pub fn as_str(&self) -> &str {
        // Every byte was checked to be visible ASCII, so this cannot fail; fall back to "" rather
        // than panic should that ever change.
        core::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// Length in bytes.
    #[allow(clippy::len_without_is_empty)] // a Name is never empty
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub(crate) const fn raw(&self) -> &[u8; MAX_NAME_LEN] {
        &self.bytes
    }

    pub(crate) const fn from_raw(len: u8, bytes: [u8; MAX_NAME_LEN]) -> Name {
        Name { len, bytes }
    }

    /// Byte equality, usable in `const` contexts.
    pub const fn eq_str(&self, s: &str) -> bool {
        let s = s.as_bytes();
        if s.len() != self.len as usize {
            return false;
        }
        let mut i = 0;
        while i < s.len() {
            if s[i] != self.bytes[i] {
                return false;
            }
            i += 1;
        }
        true
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates() {
        assert_eq!(Name::new(""), Err(NameError::Empty));
        assert_eq!(
            Name::new(core::str::from_utf8(&[b'a'; 65]).unwrap()),
            Err(NameError::TooLong { len: 65 })
        );
        assert!(Name::new(core::str::from_utf8(&[b'a'; 64]).unwrap()).is_ok());
        assert_eq!(
            Name::new("a b"),
            Err(NameError::BadByte { byte: b' ', at: 1 })
        );
        assert_eq!(
            Name::from_bytes(&[b'x', 0xff]),
            Err(NameError::BadByte { byte: 0xff, at: 1 })
        );
        let n = Name::new("dask.distributed").unwrap();
        assert_eq!(n.as_str(), "dask.distributed");
        assert!(n.eq_str("dask.distributed"));
        assert!(!n.eq_str("dask"));
    }
}
