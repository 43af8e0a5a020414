//! Error types. Each names what was wrong and carries the offending value, so a log line is
//! enough to find the caller, peer or config at fault.

use core::fmt;

/// Which part of a layout an error refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldRef {
    /// The namespace field.
    Namespace,
    /// The owner's sub-field at this index (declaration order).
    Field(u8),
    /// The guard bits.
    Guard,
    /// The pair field.
    Pair,
}

impl fmt::Display for FieldRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldRef::Namespace => f.write_str("the namespace field"),
            FieldRef::Field(i) => write!(f, "field #{i}"),
            FieldRef::Guard => f.write_str("the guard bits"),
            FieldRef::Pair => f.write_str("the pair field"),
        }
    }
}

/// Why a tag layout was rejected (invariant T5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// The namespace field is narrower or wider than tagspace supports.
    NamespaceWidth {
        /// The width asked for.
        width: u32,
    },
    /// A field has zero width.
    ZeroWidth {
        /// The field.
        which: FieldRef,
    },
    /// A field reaches past bit 63.
    PastBit63 {
        /// The field.
        which: FieldRef,
        /// Its lowest bit.
        shift: u32,
        /// Its width.
        width: u32,
    },
    /// Two fields share bits.
    Overlap {
        /// One field.
        a: FieldRef,
        /// The other.
        b: FieldRef,
    },
    /// More sub-fields than [`MAX_FIELDS`](crate::layout::MAX_FIELDS).
    TooManyFields,
    /// A sub-field name is empty, too long, or not visible ASCII.
    BadFieldName {
        /// The field.
        which: FieldRef,
    },
    /// Two sub-fields have the same name.
    DuplicateFieldName {
        /// The second one.
        which: FieldRef,
    },
    /// So many guard bits that fewer than `width + 32` payload bits are left (the control
    /// plane's acknowledgement tags need that many).
    GuardTooWide {
        /// Payload bits left.
        payload_bits: u32,
        /// Payload bits needed.
        needed: u32,
    },
    /// A pair field wider than [`MAX_PAIR_BITS`](crate::layout::MAX_PAIR_BITS), or narrower
    /// than [`MIN_PAIR_BITS`](crate::layout::MIN_PAIR_BITS), or declared twice.
    PairWidth {
        /// The width asked for.
        width: u32,
    },
    /// Guard bits with an empty mask, or a value with bits outside the mask.
    BadGuard {
        /// The guard mask given.
        mask: u64,
        /// The guard value given.
        value: u64,
    },
}

impl LayoutError {
    /// A fixed description, usable in `const` panics.
    pub const fn as_str(&self) -> &'static str {
        match self {
            LayoutError::NamespaceWidth { .. } => "namespace width outside the supported range",
            LayoutError::ZeroWidth { .. } => "a field has zero width",
            LayoutError::PastBit63 { .. } => "a field reaches past bit 63",
            LayoutError::Overlap { .. } => "two fields overlap",
            LayoutError::TooManyFields => "too many sub-fields",
            LayoutError::BadFieldName { .. } => "a sub-field name is empty, too long or not ASCII",
            LayoutError::DuplicateFieldName { .. } => "two sub-fields share a name",
            LayoutError::GuardTooWide { .. } => "too many guard bits: too few payload bits left",
            LayoutError::BadGuard { .. } => "guard bits with an empty mask or a value outside it",
            LayoutError::PairWidth { .. } => {
                "pair field width outside 16..=32 bits, or two of them"
            }
        }
    }
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::layout::{MAX_NAMESPACE_BITS, MIN_NAMESPACE_BITS};
        match *self {
            LayoutError::NamespaceWidth { width } => write!(
                f,
                "namespace width {width} is outside the supported range \
                 {MIN_NAMESPACE_BITS}..={MAX_NAMESPACE_BITS} bits"
            ),
            LayoutError::ZeroWidth { which } => write!(f, "{which} has zero width"),
            LayoutError::PastBit63 {
                which,
                shift,
                width,
            } => write!(
                f,
                "{which} (bits {shift}..{}) reaches past bit 63",
                shift + width
            ),
            LayoutError::Overlap { a, b } => write!(f, "{a} overlaps {b}"),
            LayoutError::TooManyFields => write!(
                f,
                "a layout holds at most {} sub-fields",
                crate::layout::MAX_FIELDS
            ),
            LayoutError::BadFieldName { which } => write!(
                f,
                "{which} has an empty name, one longer than {} bytes, or one that is not visible ASCII",
                crate::layout::MAX_FIELD_NAME
            ),
            LayoutError::DuplicateFieldName { which } => {
                write!(f, "{which} repeats the name of an earlier field")
            }
            LayoutError::GuardTooWide {
                payload_bits,
                needed,
            } => write!(
                f,
                "the guard bits leave {payload_bits} payload bits; a layout needs at least \
                 {needed} (the namespace width + 32)"
            ),
            LayoutError::PairWidth { width } => write!(
                f,
                "pair field of {width} bits: it must be {}..={} bits wide, and a layout has one \
                 at most",
                crate::layout::MIN_PAIR_BITS,
                crate::layout::MAX_PAIR_BITS
            ),
            LayoutError::BadGuard { mask, value } => write!(
                f,
                "guard value {value:#018x} is not inside guard mask {mask:#018x} (or the mask is empty)"
            ),
        }
    }
}

impl core::error::Error for LayoutError {}

/// Why a tag, matcher or Active-Message id could not be built (invariant T3: never truncated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagError {
    /// A value does not fit in its field.
    ValueTooWide {
        /// The value given.
        value: u64,
        /// The field's width in bits.
        width: u32,
    },
    /// A payload sets bits inside the namespace field (or the layout's guard bits or pair
    /// field).
    PayloadInNamespaceField {
        /// The payload given.
        payload: u64,
        /// The bits a payload may not set: the namespace field's mask, the guard bits and the
        /// pair field where the layout has them (`!`[`TagLayout::payload_mask`](crate::TagLayout::payload_mask)).
        namespace_mask: u64,
    },
    /// The payload equals the namespace's reserved inbox payload; use `inbox()` for that.
    ReservedInbox,
    /// A local Active-Message id does not fit in the per-namespace AM range.
    AmIdTooWide {
        /// The local id given.
        local: u16,
        /// How many local AM ids each namespace has.
        per_namespace: u32,
    },
    /// A route from the peer directory was used with a different namespace's lease.
    RouteMismatch {
        /// The lease's local id.
        lease: u16,
        /// The local id the route was made for.
        route: u16,
    },
}

impl fmt::Display for TagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TagError::ValueTooWide { value, width } => {
                write!(f, "value {value:#x} does not fit in a {width}-bit field")
            }
            TagError::PayloadInNamespaceField {
                payload,
                namespace_mask,
            } => write!(
                f,
                "payload {payload:#018x} sets bits the layout reserves: the namespace field, guard \
                 bits or pair field ({namespace_mask:#018x})"
            ),
            TagError::ReservedInbox => f.write_str(
                "the payload with every payload bit set is reserved for the namespace inbox",
            ),
            TagError::AmIdTooWide {
                local,
                per_namespace,
            } => write!(
                f,
                "Active-Message id {local} is out of range: each namespace has {per_namespace} ids"
            ),
            TagError::RouteMismatch { lease, route } => write!(
                f,
                "route made for local namespace {route} used with the lease of namespace {lease}"
            ),
        }
    }
}

impl core::error::Error for TagError {}

/// Why a namespace name was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_NAME_LEN`](crate::name::MAX_NAME_LEN).
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// A byte outside visible ASCII (`0x21..=0x7e`).
    BadByte {
        /// The byte.
        byte: u8,
        /// Where it is.
        at: usize,
    },
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            NameError::Empty => f.write_str("namespace name is empty"),
            NameError::TooLong { len } => write!(
                f,
                "namespace name is {len} bytes long; the limit is {}",
                crate::name::MAX_NAME_LEN
            ),
            NameError::BadByte { byte, at } => write!(
                f,
                "namespace name has byte {byte:#04x} at {at}; only visible ASCII is allowed"
            ),
        }
    }
}

impl core::error::Error for NameError {}

/// Why a registry operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistryError {
    /// The name is not valid.
    BadName(NameError),
    /// Another live lease holds this name (invariant R2).
    DuplicateName,
    /// Every dynamic id is in use (invariant R5: an error, not a wait).
    NamespaceExhausted {
        /// How many ids the registry has.
        capacity: u32,
    },
    /// Every free dynamic id is quarantined (R7): released, but a peer may still have messages
    /// in flight to it. An error, not a wait; retry once peers have confirmed.
    Quarantined {
        /// How many ids are quarantined.
        ids: u32,
    },
    /// A fixed id (well-known or static) is held or being claimed by another registration.
    IdInUse {
        /// The id.
        id: u16,
    },
    /// The id is 0 (unmanaged), the control plane's, outside the registry, or a well-known id
    /// asked for by another name.
    ReservedId {
        /// The id.
        id: u16,
    },
    /// The name is well known and has a fixed id; static registration must use it.
    WellKnownId {
        /// The fixed id.
        expected: u16,
    },
    /// The lease was released; its id may belong to someone else now (invariant R3).
    StaleLease {
        /// The id.
        id: u16,
        /// The lease's generation.
        generation: u32,
    },
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RegistryError::BadName(e) => e.fmt(f),
            RegistryError::DuplicateName => {
                f.write_str("a live namespace already has this name in this registry")
            }
            RegistryError::NamespaceExhausted { capacity } => {
                write!(f, "all namespace ids are in use (capacity {capacity})")
            }
            RegistryError::Quarantined { ids } => write!(
                f,
                "no namespace id is free: {ids} released ids are quarantined until peers confirm \
                 nothing more can arrive for their previous names"
            ),
            RegistryError::IdInUse { id } => {
                write!(f, "namespace id {id} is held by another registration")
            }
            RegistryError::ReservedId { id } => write!(
                f,
                "namespace id {id} cannot be registered here: 0 is unmanaged, 1 is the control plane, \
                 well-known ids belong to their names, and ids must be below the capacity"
            ),
            RegistryError::WellKnownId { expected } => write!(
                f,
                "this name is well known and must be registered at id {expected}"
            ),
            RegistryError::StaleLease { id, generation } => write!(
                f,
                "lease for namespace id {id} (generation {generation}) has been released"
            ),
        }
    }
}

impl core::error::Error for RegistryError {}

impl From<NameError> for RegistryError {
    fn from(e: NameError) -> Self {
        RegistryError::BadName(e)
    }
}
