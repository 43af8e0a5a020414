//! Tags, matchers and the tag/mask algebra of UCX-style matching.
//!
//! A receive posted with `(tag, mask)` takes a message sent with `sent` when
//! `((sent ^ tag) & mask) == 0`. [`Matcher`]s are made only by a
//! [`Namespace`](crate::Namespace) and always cover its whole namespace field (invariant T1),
//! so matchers of two namespaces can never take the same message (T2). [`RawMatcher`] is any
//! `(tag, mask)` pair, for reasoning about code outside tagspace (a legacy library's wildcard).
//!
//! ```
//! use tagspace_core::matcher::{overlap, RawMatcher};
//! // BlazingSQL's old "begin transmission" probe, and a dask tag:
//! let blazing = RawMatcher::new(0, 0xFFFF_0000_0000_0000);
//! let dask = RawMatcher::new(0x0000_0000_0000_1234, u64::MAX);
//! assert_eq!(overlap(blazing, dask), Some(0x1234)); // blazing would steal it
//! ```

use core::fmt;

/// A 64-bit tag as sent on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(u64);

impl Tag {
    /// Wraps raw bits, such as the sender tag UCX reports for a received message. A `Tag` grants
    /// nothing; only [`Matcher`]s are restricted.
    pub const fn from_raw(raw: u64) -> Tag {
        Tag(raw)
    }

    /// The raw bits, for `ucp_tag_send_nbx` and friends.
    #[inline]
    pub const fn raw(self) -> u64 {
        self.0
    }
}

impl fmt::Debug for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tag({:#018x})", self.0)
    }
}

/// Any `(tag, mask)` pair, with UCX's matching rule. Not namespace-safe: for analysis and for
/// describing foreign code.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawMatcher {
    /// Tag to compare against.
    pub tag: u64,
    /// Bits that must be equal.
    pub mask: u64,
}

impl RawMatcher {
    /// A pair as UCX takes it.
    pub const fn new(tag: u64, mask: u64) -> RawMatcher {
        RawMatcher { tag, mask }
    }

    /// UCX's rule: `((sent ^ tag) & mask) == 0`.
    #[inline]
    pub const fn matches(self, sent: u64) -> bool {
        (sent ^ self.tag) & self.mask == 0
    }

    /// libfabric's convention: `(tag, ignore)` with `ignore = !mask`.
    pub const fn to_libfabric(self) -> (u64, u64) {
        (self.tag & self.mask, !self.mask)
    }

    /// From libfabric's `(tag, ignore)`.
    pub const fn from_libfabric(tag: u64, ignore: u64) -> RawMatcher {
        RawMatcher { tag, mask: !ignore }
    }
}

impl fmt::Debug for RawMatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(tag {:#018x}, mask {:#018x})", self.tag, self.mask)
    }
}

/// A tag and mask that cover one namespace's whole field. Only a
/// [`Namespace`](crate::Namespace) makes them.
///
/// ```compile_fail
/// // There is no public constructor and the fields are private:
/// let m = tagspace_core::Matcher { tag: 0, mask: 0 };
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Matcher {
    tag: u64,
    mask: u64,
}

impl Matcher {
    /// Crate-private: callers must guarantee `mask` covers a namespace field and `tag` holds
    /// that namespace's id there.
    #[inline]
    pub(crate) const fn new_unchecked(tag: u64, mask: u64) -> Matcher {
        Matcher {
            tag: tag & mask,
            mask,
        }
    }

    /// The tag to post (bits outside the mask are zero).
    #[inline]
    pub const fn tag(self) -> u64 {
        self.tag
    }

    /// The mask to post.
    #[inline]
    pub const fn mask(self) -> u64 {
        self.mask
    }

    /// Whether a message sent with `sent` would match.
    #[inline]
    pub const fn matches(self, sent: Tag) -> bool {
        (sent.0 ^ self.tag) & self.mask == 0
    }

    /// Whether the mask is all ones: UCX keeps such receives on its hashed fast path.
    pub const fn is_exact(self) -> bool {
        self.mask == u64::MAX
    }

    /// As a [`RawMatcher`], for the algebra below.
    pub const fn raw(self) -> RawMatcher {
        RawMatcher {
            tag: self.tag,
            mask: self.mask,
        }
    }

    /// libfabric's `(tag, ignore)`.
    pub const fn to_libfabric(self) -> (u64, u64) {
        self.raw().to_libfabric()
    }
}

impl fmt::Debug for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Matcher(tag {:#018x}, mask {:#018x})",
            self.tag, self.mask
        )
    }
}

/// A tag that both `a` and `b` match, or `None` exactly when no such tag exists (invariant T4).
///
/// They conflict only on bits both masks cover and their tags disagree on; otherwise take `a`'s
/// bits under `a`'s mask and `b`'s under the rest of `b`'s.
#[inline]
pub const fn overlap(a: RawMatcher, b: RawMatcher) -> Option<u64> {
    if (a.tag ^ b.tag) & a.mask & b.mask != 0 {
        return None;
    }
    Some((a.tag & a.mask) | (b.tag & b.mask & !a.mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_matches_brute_force_on_four_bits() {
        // Every (tag, mask) pair over 4 bits, both sides: 2^16 pairs of pairs.
        for at in 0..16u64 {
            for am in 0..16u64 {
                for bt in 0..16u64 {
                    for bm in 0..16u64 {
                        let a = RawMatcher::new(at, am);
                        let b = RawMatcher::new(bt, bm);
                        // Upper bits are unconstrained by both, so a 4-bit witness suffices.
                        let brute = (0..16u64).find(|&t| a.matches(t) && b.matches(t));
                        match overlap(a, b) {
                            Some(w) => {
                                assert!(a.matches(w) && b.matches(w), "{a:?} {b:?} {w:#x}");
                            }
                            None => assert_eq!(brute, None, "{a:?} {b:?}"),
                        }
                        assert_eq!(brute.is_some(), overlap(a, b).is_some());
                    }
                }
            }
        }
    }

    #[test]
    fn libfabric_round_trip() {
        let m = RawMatcher::new(0xAB00, 0xFF00);
        let (t, ignore) = m.to_libfabric();
        assert_eq!(ignore, !0xFF00);
        let back = RawMatcher::from_libfabric(t, ignore);
        for sent in [0xAB00u64, 0xAB12, 0xAC00, 0] {
            assert_eq!(m.matches(sent), back.matches(sent));
        }
    }
}
