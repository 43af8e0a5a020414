//! Tag layouts: where the namespace field sits in the 64-bit tag, and the owner's named
//! sub-fields in the rest.
//!
//! A layout is built with `const fn`s, so a bad one in a `const` fails the build:
//!
//! ```
//! use tagspace_core::layout::{Field, TagLayout};
//!
//! // namespace in the top 8 bits; the owner splits the rest into kind | peer | sequence.
//! const LAYOUT: TagLayout = TagLayout::builder(56, 8)
//!     .field("kind", 52, 4)
//!     .field("peer", 32, 20)
//!     .field("seq", 0, 32)
//!     .build_or_panic();
//! const KIND: Field = LAYOUT.field("kind").unwrap();
//!
//! assert_eq!(KIND.encode(3), Ok(3 << 52));
//! assert!(KIND.encode(16).is_err()); // too wide: an error, never truncation (T3)
//! assert_eq!(KIND.decode(3 << 52), 3);
//! ```
//!
//! ```compile_fail
//! use tagspace_core::layout::TagLayout;
//! // the field overlaps the namespace field: rejected at compile time
//! const BAD: TagLayout = TagLayout::builder(56, 8).field("kind", 50, 8).build_or_panic();
//! ```
//!
//! Sub-fields sit at absolute bit positions. A payload is any value with no bit inside the
//! namespace field or the guard bits; building a tag is `namespace_bits | guard | payload`, no
//! bit spreading.
//!
//! # Guard bits
//! A layout may also fix *guard bits*: bits outside the namespace field that every tag tagspace
//! builds sets to a fixed value (data, inbox and control tags alike). They are taken from the
//! payload (a payload that sets one is an error, as one inside the namespace field is) and are
//! part of the fingerprint. Their use is to keep a foreign library's wildcard receives out of
//! tagspace's tags: a probe that must see a 0 where every tagspace tag has a 1 can never match
//! one (see [`crate::foreign`], which also chooses such layouts).
//!
//! ```
//! use tagspace_core::{layout::TagLayout, RawMatcher};
//! // rapidsmpf's recv_any probes reach only tags whose bits 23..31 are zero
//! let rapidsmpf = RawMatcher::new(0, 0xff80_0000);
//! assert!(TagLayout::DEFAULT.reach(rapidsmpf).is_reachable());
//! // bit 31 set in every tagspace tag: out of its reach
//! const GUARDED: TagLayout = TagLayout::builder(56, 8).guard(1 << 31, 1 << 31).build_or_panic();
//! assert!(!GUARDED.reach(rapidsmpf).is_reachable());
//! ```

use crate::error::{FieldRef, LayoutError, TagError};
use crate::matcher::{overlap, RawMatcher};
use crate::wellknown::UNMANAGED_ID;
use core::fmt;

/// Narrowest supported namespace field: 32 ids, of which 0 (unmanaged), 1 (control plane) and
/// the well-known range `2..16` are reserved, leaving 16 dynamic ids.
pub const MIN_NAMESPACE_BITS: u32 = 5;
/// Widest supported namespace field. UCX Active-Message ids are 16 bits, and each namespace
/// gets `2^(16 - width)` of them.
pub const MAX_NAMESPACE_BITS: u32 = 16;
/// Narrowest pair field: a stranger guesses a pair's value with probability 2⁻¹⁶ per message.
pub const MIN_PAIR_BITS: u32 = 16;
/// Widest pair field.
pub const MAX_PAIR_BITS: u32 = 32;
/// The default layout's pair field: 24 bits, a guess per message succeeds with 2⁻²⁴.
pub const DEFAULT_PAIR_BITS: u32 = 24;
/// Most sub-fields a layout can declare.
pub const MAX_FIELDS: usize = 8;
/// Longest sub-field name, in bytes.
pub const MAX_FIELD_NAME: usize = 16;

/// A contiguous bit range of the tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Field {
    shift: u8,
    width: u8,
}

impl Field {
    /// `width` bits starting at bit `shift`. Fails on zero width or bits past 63.
    pub const fn new(shift: u32, width: u32) -> Result<Field, LayoutError> {
        Field::checked(shift, width, FieldRef::Field(0))
    }

    const fn checked(shift: u32, width: u32, which: FieldRef) -> Result<Field, LayoutError> {
        if width == 0 {
            return Err(LayoutError::ZeroWidth { which });
        }
        if shift >= 64 || width > 64 || shift + width > 64 {
            return Err(LayoutError::PastBit63 {
                which,
                shift,
                width,
            });
        }
        Ok(Field {
            shift: shift as u8,
            width: width as u8,
        })
    }

    /// Lowest bit.
    pub const fn shift(self) -> u32 {
        self.shift as u32
    }

    /// Width in bits.
    pub const fn width(self) -> u32 {
        self.width as u32
    }

    /// Largest value the field holds.
    pub const fn max_value(self) -> u64 {
        u64::MAX >> (64 - self.width as u32)
    }

    /// The field's bits in the tag.
    pub const fn mask(self) -> u64 {
        self.max_value() << self.shift
    }

    /// Places `value` in the field. A value that does not fit is an error (T3).
    #[inline]
    pub const fn encode(self, value: u64) -> Result<u64, TagError> {
        if value > self.max_value() {
            return Err(TagError::ValueTooWide {
                value,
                width: self.width as u32,
            });
        }
        Ok(value << self.shift)
    }

    /// Reads the field out of a tag.
    #[inline]
    pub const fn decode(self, tag: u64) -> u64 {
        (tag >> self.shift) & self.max_value()
    }

    const fn overlaps(self, other: Field) -> bool {
        self.mask() & other.mask() != 0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct NamedField {
    name: [u8; MAX_FIELD_NAME],
    name_len: u8,
    field: Field,
}

impl NamedField {
    const EMPTY: NamedField = NamedField {
        name: [0; MAX_FIELD_NAME],
        name_len: 0,
        field: Field { shift: 0, width: 1 },
    };

    fn name(&self) -> &str {
        core::str::from_utf8(&self.name[..self.name_len as usize]).unwrap_or("?")
    }

    const fn name_is(&self, s: &[u8]) -> bool {
        if s.len() != self.name_len as usize {
            return false;
        }
        let mut i = 0;
        while i < s.len() {
            if s[i] != self.name[i] {
                return false;
            }
            i += 1;
        }
        true
    }
}

/// The shape of a 64-bit tag: one namespace field and up to [`MAX_FIELDS`] named sub-fields.
///
/// Two processes must use the same layout; compare [`TagLayout::fingerprint`]s (the control
/// plane does this during the handshake).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TagLayout {
    namespace: Field,
    /// The pair field (width 0: the layout has none and its tags are forgeable).
    pair_shift: u8,
    pair_width: u8,
    guard_mask: u64,
    guard_value: u64,
    fields: [NamedField; MAX_FIELDS],
    field_count: u8,
    fingerprint: u64,
}

/// Builds a [`TagLayout`]; the first error is kept and reported by [`LayoutBuilder::build`].
#[derive(Clone, Copy, Debug)]
pub struct LayoutBuilder {
    layout: TagLayout,
    error: Option<LayoutError>,
}

impl TagLayout {
    /// The default: namespace in the top 8 bits (256 ids), a 24-bit pair field below it
    /// (bits 32..56), payload in the low 32 bits, no sub-fields.
    pub const DEFAULT: TagLayout = TagLayout::builder(56, 8)
        .pair(32, DEFAULT_PAIR_BITS)
        .build_or_panic();

    /// Starts a layout whose namespace field is `width` bits from bit `shift`.
    pub const fn builder(shift: u32, width: u32) -> LayoutBuilder {
        let mut error = None;
        if width < MIN_NAMESPACE_BITS || width > MAX_NAMESPACE_BITS {
            error = Some(LayoutError::NamespaceWidth { width });
        }
        let namespace = match Field::checked(shift, width, FieldRef::Namespace) {
            Ok(f) => f,
            Err(e) => {
                if error.is_none() {
                    error = Some(e);
                }
                Field { shift: 0, width: 8 }
            }
        };
        LayoutBuilder {
            layout: TagLayout {
                namespace,
                pair_shift: 0,
                pair_width: 0,
                guard_mask: 0,
                guard_value: 0,
                fields: [NamedField::EMPTY; MAX_FIELDS],
                field_count: 0,
                fingerprint: 0,
            },
            error,
        }
    }

    /// The namespace field.
    pub const fn namespace_field(&self) -> Field {
        self.namespace
    }

    /// Bits of the namespace field.
    pub const fn namespace_mask(&self) -> u64 {
        self.namespace.mask()
    }

    /// Bits available to owners: everything outside the namespace field, the guard bits and
    /// the pair field.
    pub const fn payload_mask(&self) -> u64 {
        !(self.fixed_mask() | self.pair_mask())
    }

    /// The pair field, if the layout has one: bits every data tag fills with a value the
    /// receiving process chose for the sending one, so that a process that has not proven
    /// its identity to the receiver cannot make a tag any receive tied to a peer takes, except
    /// by guessing (probability `2^-width` per message). See [`crate::session`].
    pub const fn pair_field(&self) -> Option<Field> {
        if self.pair_width == 0 {
            None
        } else {
            Some(Field {
                shift: self.pair_shift,
                width: self.pair_width,
            })
        }
    }

    /// The pair field's bits (0 when the layout has none).
    pub const fn pair_mask(&self) -> u64 {
        match self.pair_field() {
            Some(f) => f.mask(),
            None => 0,
        }
    }

    /// Width of the pair field in bits (0 when the layout has none).
    pub const fn pair_bits(&self) -> u32 {
        self.pair_width as u32
    }

    /// The pair field holding `value` (which must fit: values come from
    /// [`crate::session`], which checks them); 0 when the layout has no pair field.
    #[inline]
    pub const fn pair_value_bits(&self, value: u32) -> u64 {
        if self.pair_width == 0 {
            0
        } else {
            ((value as u64) << self.pair_shift) & self.pair_mask()
        }
    }

    /// The pair value in a raw tag (0 when the layout has no pair field).
    #[inline]
    pub const fn pair_of(&self, tag: u64) -> u32 {
        match self.pair_field() {
            Some(f) => f.decode(tag) as u32,
            None => 0,
        }
    }

    /// The guard bits: bits outside the namespace field that every tagspace tag fixes (0 when
    /// the layout has none).
    pub const fn guard_mask(&self) -> u64 {
        self.guard_mask
    }

    /// The values every tagspace tag has under [`TagLayout::guard_mask`].
    pub const fn guard_value(&self) -> u64 {
        self.guard_value
    }

    /// The bits no payload may set: the namespace field and the guard bits.
    pub const fn fixed_mask(&self) -> u64 {
        self.namespace.mask() | self.guard_mask
    }

    /// The fixed bits of every tag of namespace `id`: the id in its field and the guard values.
    /// A tag of that namespace is `base(id) | payload`.
    #[inline]
    pub const fn base(&self, id: u16) -> u64 {
        ((id as u64) << self.namespace.shift) | self.guard_value
    }

    /// Every tag tagspace can build in namespace `id` (any payload, the inbox, and for the
    /// control id the control tags), as one matcher: `base(id)` under [`TagLayout::fixed_mask`].
    /// This is what a drain of a namespace may remove, and no more.
    pub const fn space(&self, id: u16) -> RawMatcher {
        RawMatcher::new(self.base(id), self.fixed_mask())
    }

    /// Whether a foreign receive or probe that can take any tag `pattern` matches can take a
    /// tag tagspace builds (in any managed namespace, the control namespace included, with any
    /// payload or the inbox), and the proof either way (invariant F1). Exact, by the overlap
    /// rule (T4): the set of tagspace tags is the union of [`TagLayout::space`] over ids
    /// `1..2^width`, and each of those overlaps `pattern` unless a guard bit or the namespace
    /// field contradicts it.
    pub const fn reach(&self, pattern: RawMatcher) -> Reach {
        // a guard bit the pattern fixes to the other value: no tagspace tag can match
        let clash = (pattern.tag ^ self.guard_value) & pattern.mask & self.guard_mask;
        if clash != 0 {
            let bit = clash.trailing_zeros();
            return Reach::Guarded {
                bit,
                value: self.guard_value >> bit & 1 == 1,
            };
        }
        let ns_mask = self.namespace.mask();
        let fixed = pattern.mask & ns_mask;
        let wanted = pattern.tag & fixed;
        let id_bits = if wanted != 0 {
            wanted
        } else if fixed == ns_mask {
            // the pattern wants namespace field 0: the unmanaged id, never handed out (R6)
            return Reach::UnmanagedOnly;
        } else {
            // lowest namespace bit the pattern leaves free: a non-zero id it reaches
            let free = ns_mask & !fixed;
            free & free.wrapping_neg()
        };
        let id = (id_bits >> self.namespace.shift) as u16;
        match overlap(pattern, self.space(id)) {
            Some(witness) => Reach::Reaches { id, witness },
            // unreachable: the guard and the namespace field were checked above
            None => Reach::UnmanagedOnly,
        }
    }

    /// The first part of the layout (namespace field, guard bits, pair field, named fields)
    /// that has a bit in `mask`.
    const fn clash(&self, mask: u64) -> Option<FieldRef> {
        if mask & self.namespace.mask() != 0 {
            return Some(FieldRef::Namespace);
        }
        if mask & self.guard_mask != 0 {
            return Some(FieldRef::Guard);
        }
        if mask & self.pair_mask() != 0 {
            return Some(FieldRef::Pair);
        }
        let mut j = 0;
        while j < self.field_count as usize {
            if mask & self.fields[j].field.mask() != 0 {
                return Some(FieldRef::Field(j as u8));
            }
            j += 1;
        }
        None
    }

    /// How many namespace ids the layout can express (`2^width`).
    pub const fn id_capacity(&self) -> u32 {
        1 << self.namespace.width
    }

    /// How many Active-Message ids each namespace owns (`2^(16 - width)`).
    pub const fn am_ids_per_namespace(&self) -> u32 {
        1 << (16 - self.namespace.width as u32)
    }

    /// The sub-field called `name`, if declared.
    pub const fn field(&self, name: &str) -> Option<Field> {
        let mut i = 0;
        while i < self.field_count as usize {
            if self.fields[i].name_is(name.as_bytes()) {
                return Some(self.fields[i].field);
            }
            i += 1;
        }
        None
    }

    /// The declared sub-fields, in declaration order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, Field)> + '_ {
        self.fields[..self.field_count as usize]
            .iter()
            .map(|f| (f.name(), f.field))
    }

    /// The namespace id in a raw tag.
    #[inline]
    pub const fn namespace_of(&self, tag: u64) -> u16 {
        self.namespace.decode(tag) as u16
    }

    /// Splits a raw tag (say, from a log) into namespace, sub-fields and leftover bits.
    pub fn decode(&self, tag: u64) -> DecodedTag<'_> {
        DecodedTag { layout: self, tag }
    }

    /// A hash of everything that determines where bits go; equal on both sides or the
    /// handshake refuses the peer.
    pub const fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    const fn compute_fingerprint(&self) -> u64 {
        // FNV-1a, 64-bit: tiny, const-evaluable, and good enough to tell layouts apart (it is a
        // mismatch detector, not a security boundary).
        const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        const fn mix(mut h: u64, b: u8) -> u64 {
            h ^= b as u64;
            h.wrapping_mul(PRIME)
        }
        let mut h = OFFSET;
        let tagline = b"tagspace-layout-1";
        let mut i = 0;
        while i < tagline.len() {
            h = mix(h, tagline[i]);
            i += 1;
        }
        h = mix(h, self.namespace.shift);
        h = mix(h, self.namespace.width);
        h = mix(h, self.field_count);
        if self.pair_width != 0 {
            // layouts without a pair field keep the fingerprints they always had
            h = mix(h, b'p');
            h = mix(h, self.pair_shift);
            h = mix(h, self.pair_width);
        }
        if self.guard_mask != 0 {
            // layouts without guard bits keep the fingerprints they always had
            let mut k = 0;
            while k < 8 {
                h = mix(h, (self.guard_mask >> (8 * k)) as u8);
                h = mix(h, (self.guard_value >> (8 * k)) as u8);
                k += 1;
            }
        }
        let mut f = 0;
        while f < self.field_count as usize {
            let nf = &self.fields[f];
            let mut j = 0;
            while j < nf.name_len as usize {
                h = mix(h, nf.name[j]);
                j += 1;
            }
            h = mix(h, 0);
            h = mix(h, nf.field.shift);
            h = mix(h, nf.field.width);
            f += 1;
        }
        h
    }
}

impl Default for TagLayout {
    fn default() -> Self {
        TagLayout::DEFAULT
    }
}

impl fmt::Debug for TagLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("TagLayout");
        d.field("namespace", &self.namespace);
        if let Some(p) = self.pair_field() {
            d.field("pair", &p);
        }
        if self.guard_mask != 0 {
            d.field("guard_mask", &format_args!("{:#018x}", self.guard_mask));
            d.field("guard_value", &format_args!("{:#018x}", self.guard_value));
        }
        for (name, field) in self.fields() {
            d.field(name, &field);
        }
        d.field("fingerprint", &format_args!("{:#018x}", self.fingerprint))
            .finish()
    }
}

impl LayoutBuilder {
    /// Declares a sub-field `name` of `width` bits from bit `shift`.
    pub const fn field(mut self, name: &str, shift: u32, width: u32) -> LayoutBuilder {
        if self.error.is_some() {
            return self;
        }
        let index = self.layout.field_count as usize;
        if index >= MAX_FIELDS {
            self.error = Some(LayoutError::TooManyFields);
            return self;
        }
        let which = FieldRef::Field(index as u8);
        let field = match Field::checked(shift, width, which) {
            Ok(f) => f,
            Err(e) => {
                self.error = Some(e);
                return self;
            }
        };
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() > MAX_FIELD_NAME {
            self.error = Some(LayoutError::BadFieldName { which });
            return self;
        }
        let mut stored = [0u8; MAX_FIELD_NAME];
        let mut i = 0;
        while i < bytes.len() {
            if !(bytes[i] >= 0x21 && bytes[i] <= 0x7e) {
                self.error = Some(LayoutError::BadFieldName { which });
                return self;
            }
            stored[i] = bytes[i];
            i += 1;
        }
        if field.overlaps(self.layout.namespace) {
            self.error = Some(LayoutError::Overlap {
                a: which,
                b: FieldRef::Namespace,
            });
            return self;
        }
        if field.mask() & self.layout.guard_mask != 0 {
            self.error = Some(LayoutError::Overlap {
                a: which,
                b: FieldRef::Guard,
            });
            return self;
        }
        if field.mask() & self.layout.pair_mask() != 0 {
            self.error = Some(LayoutError::Overlap {
                a: which,
                b: FieldRef::Pair,
            });
            return self;
        }
        let mut j = 0;
        while j < index {
            let other = &self.layout.fields[j];
            if other.name_is(bytes) {
                self.error = Some(LayoutError::DuplicateFieldName { which });
                return self;
            }
            if field.overlaps(other.field) {
                self.error = Some(LayoutError::Overlap {
                    a: which,
                    b: FieldRef::Field(j as u8),
                });
                return self;
            }
            j += 1;
        }
        self.layout.fields[index] = NamedField {
            name: stored,
            name_len: bytes.len() as u8,
            field,
        };
        self.layout.field_count += 1;
        self
    }

    /// Fixes the bits of `mask` to `value` in every tag tagspace builds (see the module docs on
    /// guard bits). May be called more than once; the guard bits must not overlap the namespace
    /// field, a named field or earlier guard bits, and `value` must lie inside `mask`.
    pub const fn guard(mut self, mask: u64, value: u64) -> LayoutBuilder {
        if self.error.is_some() {
            return self;
        }
        if mask == 0 || value & !mask != 0 {
            self.error = Some(LayoutError::BadGuard { mask, value });
            return self;
        }
        if let Some(b) = self.layout.clash(mask) {
            self.error = Some(LayoutError::Overlap {
                a: FieldRef::Guard,
                b,
            });
            return self;
        }
        self.layout.guard_mask |= mask;
        self.layout.guard_value |= value;
        self
    }

    /// Declares the pair field: `width` bits (16..=32) from bit `shift`, outside the
    /// namespace field, the guard bits and every named field. Every tag sent to a peer carries
    /// there the value that peer chose for the sender (see [`TagLayout::pair_field`]).
    pub const fn pair(mut self, shift: u32, width: u32) -> LayoutBuilder {
        if self.error.is_some() {
            return self;
        }
        if self.layout.pair_width != 0 || width < MIN_PAIR_BITS || width > MAX_PAIR_BITS {
            self.error = Some(LayoutError::PairWidth { width });
            return self;
        }
        let field = match Field::checked(shift, width, FieldRef::Pair) {
            Ok(f) => f,
            Err(e) => {
                self.error = Some(e);
                return self;
            }
        };
        if let Some(b) = self.layout.clash(field.mask()) {
            self.error = Some(LayoutError::Overlap {
                a: FieldRef::Pair,
                b,
            });
            return self;
        }
        self.layout.pair_shift = field.shift;
        self.layout.pair_width = field.width;
        self
    }

    /// The layout, or the first thing wrong with it.
    pub const fn build(self) -> Result<TagLayout, LayoutError> {
        let l = &self.layout;
        // the bits an acknowledgement tag may use: everything but the namespace and guard bits
        let payload_bits = (!l.fixed_mask()).count_ones();
        let needed = l.namespace.width as u32 + 32;
        match self.error {
            Some(e) => Err(e),
            // the control plane's acknowledgement tags carry an id and a 32-bit sequence
            None if payload_bits < needed => Err(LayoutError::GuardTooWide {
                payload_bits,
                needed,
            }),
            None => {
                let mut l = self.layout;
                l.fingerprint = l.compute_fingerprint();
                Ok(l)
            }
        }
    }

    /// The layout; panics on a bad one, which inside a `const` is a compile error.
    pub const fn build_or_panic(self) -> TagLayout {
        match self.build() {
            Ok(l) => l,
            Err(e) => panic!("{}", e.as_str()),
        }
    }
}

/// Why a layout SPEC (`ns=SHIFT:WIDTH[,pair=SHIFT:WIDTH][,NAME=SHIFT:WIDTH...][,guard=VALUE/MASK]`)
/// was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecError<'a> {
    /// The spec does not start with `ns=SHIFT:WIDTH` (nor is it `default`).
    NoNamespace,
    /// A part is not `NAME=SHIFT:WIDTH` nor `guard=VALUE/MASK`.
    BadPart(&'a str),
    /// A number does not parse (decimal, `0x` hex or `0b` binary, `_` allowed, 64 bits).
    BadNumber(&'a str),
    /// The parts parse but do not make a valid layout.
    Layout(LayoutError),
}

impl fmt::Display for SpecError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::NoNamespace => {
                f.write_str("a layout SPEC must start with ns=SHIFT:WIDTH (or be `default`)")
            }
            SpecError::BadPart(p) => write!(
                f,
                "layout part {p:?} is neither NAME=SHIFT:WIDTH nor guard=VALUE/MASK"
            ),
            SpecError::BadNumber(n) => write!(
                f,
                "{n:?} is not a number (decimal, 0x hex or 0b binary; 64 bits at most)"
            ),
            SpecError::Layout(e) => write!(f, "not a valid layout: {e}"),
        }
    }
}

impl core::error::Error for SpecError<'_> {}

/// A number: decimal, `0x` hex or `0b` binary, `_` separators allowed; no allocation.
pub fn parse_number(s: &str) -> Option<u64> {
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or(s.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(b) = s.strip_prefix("0b").or(s.strip_prefix("0B")) {
        (b, 2)
    } else {
        (s, 10)
    };
    let mut value: u64 = 0;
    let mut any = false;
    for c in digits.chars() {
        if c == '_' {
            continue;
        }
        let d = c.to_digit(radix)? as u64;
        value = value.checked_mul(radix as u64)?.checked_add(d)?;
        any = true;
    }
    any.then_some(value)
}

impl TagLayout {
    /// Reads a layout written as `default` or
    /// `ns=SHIFT:WIDTH[,pair=SHIFT:WIDTH][,NAME=SHIFT:WIDTH...][,guard=VALUE/MASK]`: the
    /// namespace field, the pair field (a SPEC without one makes forgeable tags: see
    /// [`TagLayout::pair_field`]), named payload fields, and guard bits (every tagspace tag
    /// matches `VALUE/MASK`). `default` is `ns=56:8,pair=32:24`. The same
    /// syntax as [`TagLayout::spec`] writes, the `tagspace` command reads and prints, and the
    /// C ABI, the Python package and the Dask plugin take.
    ///
    /// ```
    /// use tagspace_core::TagLayout;
    /// let l = TagLayout::parse_spec("ns=56:8,pair=32:24,guard=0x80000000/0x80000000").unwrap();
    /// assert_eq!(l.guard_mask(), 1 << 31);
    /// assert_eq!(l.pair_mask(), 0x00ff_ffff_0000_0000);
    /// assert_eq!(l.spec().to_string(), "ns=56:8,pair=32:24,guard=0x80000000/0x80000000");
    /// assert_eq!(TagLayout::parse_spec("default"), Ok(TagLayout::DEFAULT));
    /// assert_eq!(TagLayout::DEFAULT.spec().to_string(), "ns=56:8,pair=32:24");
    /// assert_eq!(TagLayout::parse_spec(&l.spec().to_string()), Ok(l));
    /// assert!(TagLayout::parse_spec("ns=56:8,guard=1/0").is_err());
    /// ```
    pub fn parse_spec(spec: &str) -> Result<TagLayout, SpecError<'_>> {
        let spec = spec.trim();
        if spec == "default" {
            return Ok(TagLayout::DEFAULT);
        }
        fn pair<'a>(p: &'a str, body: &'a str, sep: char) -> Result<(u64, u64), SpecError<'a>> {
            let num = |s: &'a str| parse_number(s.trim()).ok_or(SpecError::BadNumber(s));
            let (a, b) = body.split_once(sep).ok_or(SpecError::BadPart(p))?;
            Ok((num(a)?, num(b)?))
        }
        fn small(v: u64, p: &str) -> Result<u32, SpecError<'_>> {
            u32::try_from(v).map_err(|_| SpecError::BadPart(p))
        }
        let mut parts = spec.split(',');
        let first = parts.next().unwrap_or("");
        let body = first
            .trim()
            .strip_prefix("ns=")
            .ok_or(SpecError::NoNamespace)?;
        let (s, w) = pair(first, body, ':')?;
        let mut b = TagLayout::builder(small(s, first)?, small(w, first)?);
        for p in parts {
            let (name, body) = p.trim().split_once('=').ok_or(SpecError::BadPart(p))?;
            if name == "guard" {
                let (value, mask) = pair(p, body, '/')?;
                b = b.guard(mask, value);
            } else if name == "pair" {
                let (s, w) = pair(p, body, ':')?;
                b = b.pair(small(s, p)?, small(w, p)?);
            } else {
                let (s, w) = pair(p, body, ':')?;
                b = b.field(name, small(s, p)?, small(w, p)?);
            }
        }
        b.build().map_err(SpecError::Layout)
    }

    /// The layout in the SPEC syntax [`TagLayout::parse_spec`] reads.
    pub fn spec(&self) -> impl fmt::Display + '_ {
        LayoutSpec(self)
    }
}

struct LayoutSpec<'a>(&'a TagLayout);

impl fmt::Display for LayoutSpec<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = self.0;
        write!(f, "ns={}:{}", l.namespace.shift, l.namespace.width)?;
        if let Some(p) = l.pair_field() {
            write!(f, ",pair={}:{}", p.shift(), p.width())?;
        }
        for (name, field) in l.fields() {
            write!(f, ",{name}={}:{}", field.shift(), field.width())?;
        }
        if l.guard_mask != 0 {
            write!(f, ",guard={:#x}/{:#x}", l.guard_value, l.guard_mask)?;
        }
        Ok(())
    }
}

/// What [`TagLayout::reach`] found for a foreign pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// The pattern can take a tagspace tag: `witness` is one, in namespace `id` (managed).
    Reaches {
        /// A managed namespace id the pattern reaches.
        id: u16,
        /// A tag tagspace can build there that the pattern matches.
        witness: u64,
    },
    /// Out of reach: the pattern needs guard bit `bit` to differ from `value`, which every
    /// tagspace tag has there.
    Guarded {
        /// The guard bit.
        bit: u32,
        /// Its value in every tagspace tag.
        value: bool,
    },
    /// Out of reach: the pattern fixes the whole namespace field to 0, the unmanaged id that
    /// tagspace never hands out.
    UnmanagedOnly,
}

impl Reach {
    /// Whether the pattern can take a tagspace tag.
    pub const fn is_reachable(&self) -> bool {
        matches!(self, Reach::Reaches { .. })
    }
}

impl fmt::Display for Reach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Reach::Reaches { id, witness } => write!(
                f,
                "reaches namespace {id}: it matches the tagspace tag {witness:#018x}"
            ),
            Reach::Guarded { bit, value } => write!(
                f,
                "out of reach: it needs bit {bit} to be {}, and every tagspace tag has {} there \
                 (a guard bit)",
                !value as u8, value as u8
            ),
            Reach::UnmanagedOnly => write!(
                f,
                "out of reach: it needs the namespace field to be {UNMANAGED_ID}, the unmanaged id \
                 tagspace never hands out"
            ),
        }
    }
}

/// A raw tag seen through a layout; its `Display` is a log-friendly breakdown such as
/// `ns=3 kind=1 seq=42`.
#[derive(Clone, Copy)]
pub struct DecodedTag<'a> {
    layout: &'a TagLayout,
    tag: u64,
}

impl DecodedTag<'_> {
    /// The namespace id.
    pub fn namespace(&self) -> u16 {
        self.layout.namespace_of(self.tag)
    }

    /// The payload: every bit outside the namespace field.
    pub fn payload(&self) -> u64 {
        self.tag & self.layout.payload_mask()
    }

    /// The value of the sub-field `name`, if declared.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.layout.field(name).map(|f| f.decode(self.tag))
    }

    /// Whether the guard bits hold the layout's guard values (always, for a tag tagspace
    /// built; a foreign tag may differ).
    pub fn guard_ok(&self) -> bool {
        self.tag & self.layout.guard_mask == self.layout.guard_value
    }

    /// The pair value (0 when the layout has no pair field).
    pub fn pair(&self) -> u32 {
        self.layout.pair_of(self.tag)
    }

    /// Payload bits in no declared sub-field.
    pub fn rest(&self) -> u64 {
        let mut covered = self.layout.fixed_mask() | self.layout.pair_mask();
        for (_, f) in self.layout.fields() {
            covered |= f.mask();
        }
        self.tag & !covered
    }
}

impl fmt::Display for DecodedTag<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ns={}", self.namespace())?;
        if self.layout.pair_width != 0 {
            write!(f, " pair={:#x}", self.pair())?;
        }
        if !self.guard_ok() {
            f.write_str(" (guard bits differ: not a tagspace tag)")?;
        }
        if self.layout.field_count == 0 {
            return write!(f, " payload={:#x}", self.payload());
        }
        for (name, field) in self.layout.fields() {
            write!(f, " {}={}", name, field.decode(self.tag))?;
        }
        let rest = self.rest();
        if rest != 0 {
            write!(f, " rest={rest:#x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for DecodedTag<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self} ({:#018x})", self.tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_top_eight_bits() {
        let l = TagLayout::DEFAULT;
        assert_eq!(l.namespace_mask(), 0xff00_0000_0000_0000);
        assert_eq!(l.id_capacity(), 256);
        assert_eq!(l.am_ids_per_namespace(), 256);
    }

    #[test]
    fn rejects_bad_layouts() {
        assert_eq!(
            TagLayout::builder(56, 4).build(),
            Err(LayoutError::NamespaceWidth { width: 4 })
        );
        assert_eq!(
            TagLayout::builder(40, 17).build(),
            Err(LayoutError::NamespaceWidth { width: 17 })
        );
        assert!(matches!(
            TagLayout::builder(60, 8).build(),
            Err(LayoutError::PastBit63 { .. })
        ));
        assert_eq!(
            TagLayout::builder(56, 8).field("a", 0, 0).build(),
            Err(LayoutError::ZeroWidth {
                which: FieldRef::Field(0)
            })
        );
        assert_eq!(
            TagLayout::builder(56, 8).field("a", 50, 7).build(),
            Err(LayoutError::Overlap {
                a: FieldRef::Field(0),
                b: FieldRef::Namespace
            })
        );
        assert_eq!(
            TagLayout::builder(56, 8)
                .field("a", 0, 8)
                .field("b", 7, 2)
                .build(),
            Err(LayoutError::Overlap {
                a: FieldRef::Field(1),
                b: FieldRef::Field(0)
            })
        );
        assert_eq!(
            TagLayout::builder(56, 8)
                .field("a", 0, 8)
                .field("a", 8, 2)
                .build(),
            Err(LayoutError::DuplicateFieldName {
                which: FieldRef::Field(1)
            })
        );
        assert!(matches!(
            TagLayout::builder(56, 8).field("", 0, 8).build(),
            Err(LayoutError::BadFieldName { .. })
        ));
        let mut b = TagLayout::builder(56, 8);
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        for (i, n) in names.iter().enumerate() {
            b = b.field(n, i as u32 * 4, 4);
        }
        assert_eq!(b.build(), Err(LayoutError::TooManyFields));
    }

    #[test]
    fn namespace_in_the_middle_and_bottom() {
        let mid = TagLayout::builder(24, 8)
            .field("hi", 32, 32)
            .field("lo", 0, 24)
            .build()
            .unwrap();
        assert_eq!(mid.namespace_mask(), 0xff00_0000);
        let low = TagLayout::builder(0, 16).build().unwrap();
        assert_eq!(low.namespace_mask(), 0xffff);
        assert_eq!(low.am_ids_per_namespace(), 1);
    }

    #[test]
    fn fingerprints_tell_layouts_apart() {
        let a = TagLayout::builder(56, 8)
            .field("seq", 0, 32)
            .build()
            .unwrap();
        let b = TagLayout::builder(56, 8)
            .field("seq", 0, 31)
            .build()
            .unwrap();
        let c = TagLayout::builder(56, 8)
            .field("sqe", 0, 32)
            .build()
            .unwrap();
        let d = TagLayout::builder(55, 8)
            .field("seq", 0, 32)
            .build()
            .unwrap();
        let a2 = TagLayout::builder(56, 8)
            .field("seq", 0, 32)
            .build()
            .unwrap();
        assert_eq!(a.fingerprint(), a2.fingerprint());
        for x in [b, c, d, TagLayout::DEFAULT] {
            assert_ne!(a.fingerprint(), x.fingerprint());
        }
    }

    #[test]
    fn decodes_for_logs() {
        const L: TagLayout = TagLayout::builder(56, 8)
            .field("kind", 48, 8)
            .field("seq", 0, 32)
            .build_or_panic();
        let tag = (3u64 << 56) | (2 << 48) | (1 << 40) | 42;
        let d = L.decode(tag);
        assert_eq!(d.namespace(), 3);
        assert_eq!(d.get("kind"), Some(2));
        assert_eq!(d.get("seq"), Some(42));
        assert_eq!(d.get("nope"), None);
        extern crate std;
        use std::string::ToString;
        assert_eq!(d.to_string(), "ns=3 kind=2 seq=42 rest=0x10000000000");
        assert_eq!(
            TagLayout::DEFAULT.decode(0x0100_0000_0000_0005).to_string(),
            "ns=1 pair=0x0 payload=0x5"
        );
    }
}
