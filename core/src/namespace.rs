//! A `Namespace` is a library's lease on one id: the only way to build tags and matchers.
//!
//! ```
//! use tagspace_core::{Registry, TagLayout, Tag};
//!
//! let registry: Registry<64> = Registry::new(TagLayout::DEFAULT);
//! let blazing = registry.register("blazingsql").unwrap();
//! let dask = registry.register("dask").unwrap();
//!
//! // Data: exact tags, received with full masks (UCX's hashed fast path).
//! let tag = blazing.tag(42).unwrap();
//! let recv = blazing.matcher_exact(42).unwrap();
//! assert!(recv.matches(tag) && recv.is_exact());
//!
//! // "A new transmission has begun": one exact inbox tag per namespace, no partial mask.
//! assert!(blazing.inbox_matcher().matches(blazing.inbox()));
//! assert!(!blazing.inbox_matcher().matches(dask.inbox()));
//!
//! // Even the widest matcher a namespace can make stays inside it (T1, T2).
//! assert!(!blazing.matcher_any().matches(dask.tag(42).unwrap()));
//! ```

use crate::error::TagError;
use crate::layout::{Field, TagLayout};
use crate::matcher::{Matcher, Tag};
use crate::name::Name;
use crate::registry::{LeaseToken, Registry};
use core::fmt;

/// Where a namespace's messages go on one peer: the peer's id for the same name, and the
/// pair value the peer chose for this process (0 without one). Made by the peer directory (or
/// [`Namespace::static_route`] where both sides share a static table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Route {
    local: u16,
    remote: u16,
    pair: u32,
}

impl Route {
    pub(crate) const fn new(local: u16, remote: u16, pair: u32) -> Route {
        Route {
            local,
            remote,
            pair,
        }
    }

    /// The pair value tags on this route carry (0: none, a static route or a layout without
    /// a pair field).
    pub const fn pair(self) -> u32 {
        self.pair
    }

    /// The peer's id for this namespace.
    pub const fn remote_id(self) -> u16 {
        self.remote
    }

    /// The local id this route was made for.
    pub const fn local_id(self) -> u16 {
        self.local
    }
}

/// A live registration. Not `Clone`: dropping it releases the id, so a `Namespace` you hold is
/// never stale, and the tags it builds always carry an id you own. Share it behind an `Arc`.
pub struct Namespace<'r, const CAP: usize = 256> {
    registry: &'r Registry<CAP>,
    id: u16,
    generation: u32,
    name: Name,
    /// `layout.base(id)`: the id in its field and the guard values.
    ns_bits: u64,
    /// `layout.fixed_mask()`: the namespace field and the guard bits.
    ns_mask: u64,
    /// `layout.pair_mask()` and the field's lowest bit.
    pair_mask: u64,
    pair_shift: u8,
    /// `ns_mask | pair_mask`: the bits no payload may set (one load on the send path).
    reserved: u64,
    guard: u64,
    ns_shift: u8,
    am_bits: u8,
}

impl<'r, const CAP: usize> Namespace<'r, CAP> {
    pub(crate) fn new(registry: &'r Registry<CAP>, id: u16, generation: u32, name: Name) -> Self {
        let layout = registry.layout();
        let field = layout.namespace_field();
        Namespace {
            registry,
            id,
            generation,
            name,
            ns_bits: layout.base(id),
            ns_mask: layout.fixed_mask(),
            pair_mask: layout.pair_mask(),
            pair_shift: layout.pair_field().map_or(0, |f| f.shift()) as u8,
            reserved: layout.fixed_mask() | layout.pair_mask(),
            guard: layout.guard_value(),
            ns_shift: field.shift() as u8,
            am_bits: (16 - field.width()) as u8,
        }
    }

    /// The local namespace id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The name it was registered under.
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// A `Copy` token naming this lease, for registry checks after it may have been released.
    pub fn token(&self) -> LeaseToken {
        LeaseToken {
            id: self.id,
            generation: self.generation,
        }
    }

    /// The registry it lives in.
    pub fn registry(&self) -> &'r Registry<CAP> {
        self.registry
    }

    /// The layout its tags follow.
    pub fn layout(&self) -> &'r TagLayout {
        self.registry.layout()
    }

    /// Releases the id now (the same as dropping the lease).
    pub fn release(self) {}

    /// One combined test (no short-circuit) so the hot path is a single predictable branch and
    /// batch loops can be if-converted; the error is worked out only when it is needed.
    #[inline(always)]
    fn check_payload(&self, payload: u64) -> Result<(), TagError> {
        let reserved = self.reserved;
        let bad = (payload & reserved != 0) | (payload == !reserved);
        if bad {
            return Err(self.payload_error(payload));
        }
        Ok(())
    }

    #[inline]
    fn payload_error(&self, payload: u64) -> TagError {
        let reserved = self.reserved;
        if payload & reserved != 0 {
            TagError::PayloadInNamespaceField {
                payload,
                namespace_mask: reserved,
            }
        } else {
            TagError::ReservedInbox
        }
    }

    /// The tag for `payload` in this namespace, for local loopback or a static route (pair
    /// value 0). Payload bits inside the namespace field, the guard bits or the pair field are
    /// an error, never silently dropped (T3); so is the all-ones payload, reserved for
    /// [`Namespace::inbox`].
    #[inline]
    pub fn tag(&self, payload: u64) -> Result<Tag, TagError> {
        self.check_payload(payload)?;
        Ok(Tag::from_raw(self.ns_bits | payload))
    }

    /// The tag made of named sub-field values, e.g. `ns.tag_fields(&[(KIND, 1), (SEQ, 7)])`.
    /// Unset fields are zero. Values that do not fit are errors.
    pub fn tag_fields(&self, values: &[(Field, u64)]) -> Result<Tag, TagError> {
        self.tag(Self::payload_of_fields(values)?)
    }

    fn payload_of_fields(values: &[(Field, u64)]) -> Result<u64, TagError> {
        values
            .iter()
            .try_fold(0u64, |acc, &(f, v)| Ok(acc | f.encode(v)?))
    }

    /// This namespace's inbox tag: every payload bit set. Senders address "a new transmission
    /// has begun" here; the receiver probes it with [`Namespace::inbox_matcher`] (a full mask).
    pub fn inbox(&self) -> Tag {
        Tag::from_raw(self.ns_bits | self.payload_mask())
    }

    /// Exact matcher for the inbox tag (pair value 0: loopback or a static route).
    pub fn inbox_matcher(&self) -> Matcher {
        Matcher::new_unchecked(self.inbox().raw(), u64::MAX)
    }

    /// The bits a payload may use: everything outside the namespace field, the guard bits and
    /// the pair field.
    #[inline]
    pub fn payload_mask(&self) -> u64 {
        !self.reserved
    }

    #[inline]
    fn pair_bits(&self, pair: u32) -> u64 {
        ((pair as u64) << self.pair_shift) & self.pair_mask
    }

    /// Matches exactly the tag for `payload` (full mask: UCX's fast path), pair value 0
    /// (loopback or a static route).
    #[inline]
    pub fn matcher_exact(&self, payload: u64) -> Result<Matcher, TagError> {
        self.matcher_from(0, payload)
    }

    /// Matches exactly the tag for `payload` sent by the peer this process gave the pair value
    /// `pair` (full mask: UCX's fast path). Only that peer's messages match it: any other
    /// process's tags carry another value in the pair field.
    #[inline]
    pub fn matcher_from(&self, pair: u32, payload: u64) -> Result<Matcher, TagError> {
        self.check_payload(payload)?;
        Ok(Matcher::new_unchecked(
            self.ns_bits | self.pair_bits(pair) | payload,
            u64::MAX,
        ))
    }

    /// Matches the tag for `payload` from any sender: every bit fixed but the pair field. A
    /// partial mask when the layout has a pair field (UCX's slower wildcard path, as MPI's
    /// any-source receives), and it also takes tags a stranger made up: check the received
    /// tag's [`pair_of`](Self::pair_of) against the values this process gave its peers.
    #[inline]
    pub fn matcher_any_peer(&self, payload: u64) -> Result<Matcher, TagError> {
        self.check_payload(payload)?;
        Ok(Matcher::new_unchecked(
            self.ns_bits | payload,
            !self.pair_mask,
        ))
    }

    /// This namespace's inbox tag as sent by the peer that was given `pair`.
    pub fn inbox_from(&self, pair: u32) -> Tag {
        Tag::from_raw(self.ns_bits | self.pair_bits(pair) | self.payload_mask())
    }

    /// Exact matcher for [`inbox_from`](Self::inbox_from).
    pub fn inbox_matcher_from(&self, pair: u32) -> Matcher {
        Matcher::new_unchecked(self.inbox_from(pair).raw(), u64::MAX)
    }

    /// The inbox from any sender (the pair field free; see
    /// [`matcher_any_peer`](Self::matcher_any_peer)).
    pub fn inbox_matcher_any_peer(&self) -> Matcher {
        Matcher::new_unchecked(self.inbox().raw(), !self.pair_mask)
    }

    /// The pair value in a tag of this namespace (0 when the layout has no pair field).
    #[inline]
    pub fn pair_of(&self, tag: Tag) -> u32 {
        ((tag.raw() & self.pair_mask) >> self.pair_shift) as u32
    }

    /// Matches tags of this namespace whose bits under `payload_mask` equal `payload`'s. The
    /// namespace field is always covered (T1), so this never reaches another namespace; but a
    /// partial mask leaves UCX's fast path for every library on the worker (see the README).
    pub fn matcher(&self, payload: u64, payload_mask: u64) -> Result<Matcher, TagError> {
        if payload & self.ns_mask != 0 {
            return Err(TagError::PayloadInNamespaceField {
                payload,
                namespace_mask: self.ns_mask,
            });
        }
        Ok(Matcher::new_unchecked(
            self.ns_bits | payload,
            payload_mask | self.ns_mask,
        ))
    }

    /// Matches every tag of this namespace (inbox included). Confined to the namespace, but a
    /// partial mask: prefer exact matchers on hot paths.
    pub fn matcher_any(&self) -> Matcher {
        Matcher::new_unchecked(self.ns_bits, self.ns_mask)
    }

    /// Whether a received tag belongs to this namespace.
    #[inline]
    pub fn owns(&self, tag: Tag) -> bool {
        tag.raw() & self.ns_mask == self.ns_bits
    }

    /// The payload of a tag of this namespace.
    #[inline]
    pub fn payload_of(&self, tag: Tag) -> u64 {
        tag.raw() & self.payload_mask()
    }

    /// The UCX Active-Message id for this namespace's local AM id `local`. Each namespace owns
    /// [`TagLayout::am_ids_per_namespace`] ids, `id << (16 - width) | local`, so AM ids of two
    /// namespaces never collide and id 0 (used by ucx-py and ucxx) stays in the unmanaged range.
    pub fn am_id(&self, local: u16) -> Result<u16, TagError> {
        Self::am_for(self.id, self.am_bits, local)
    }

    fn am_for(ns: u16, am_bits: u8, local: u16) -> Result<u16, TagError> {
        let per = 1u32 << am_bits;
        if local as u32 >= per {
            return Err(TagError::AmIdTooWide {
                local,
                per_namespace: per,
            });
        }
        Ok(((ns as u32) << am_bits) as u16 | local)
    }

    /// The route to use when both sides registered this name at the same id (static mode or a
    /// well-known name): the peer's id is ours.
    pub fn static_route(&self) -> Route {
        Route::new(self.id, self.id, 0)
    }

    #[inline]
    fn check_route(&self, route: Route) -> Result<u64, TagError> {
        if route.local != self.id {
            return Err(TagError::RouteMismatch {
                lease: self.id,
                route: route.local,
            });
        }
        Ok((route.remote as u64) << self.ns_shift | self.guard | self.pair_bits(route.pair))
    }

    /// The tag to send `payload` to this namespace on the peer that `route` leads to.
    #[inline]
    pub fn remote_tag(&self, route: Route, payload: u64) -> Result<Tag, TagError> {
        let bits = self.check_route(route)?;
        self.check_payload(payload)?;
        Ok(Tag::from_raw(bits | payload))
    }

    /// As [`Namespace::remote_tag`], from named sub-field values.
    pub fn remote_tag_fields(
        &self,
        route: Route,
        values: &[(Field, u64)],
    ) -> Result<Tag, TagError> {
        self.remote_tag(route, Self::payload_of_fields(values)?)
    }

    /// The peer's inbox tag for this namespace.
    pub fn remote_inbox(&self, route: Route) -> Result<Tag, TagError> {
        Ok(Tag::from_raw(
            self.check_route(route)? | self.payload_mask(),
        ))
    }

    /// The peer's AM id for this namespace's local AM id `local`.
    pub fn remote_am_id(&self, route: Route, local: u16) -> Result<u16, TagError> {
        self.check_route(route)?;
        Self::am_for(route.remote, self.am_bits, local)
    }
}

/// The namespace id an Active-Message id belongs to, for dispatch.
pub fn am_namespace(layout: &TagLayout, am_id: u16) -> u16 {
    let bits = 16 - layout.namespace_field().width();
    ((am_id as u32) >> bits) as u16
}

impl<const CAP: usize> Drop for Namespace<'_, CAP> {
    fn drop(&mut self) {
        self.registry.release(self.id, self.generation);
    }
}

impl<const CAP: usize> fmt::Debug for Namespace<'_, CAP> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Namespace")
            .field("name", &self.name)
            .field("id", &self.id)
            .field("generation", &self.generation)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::error::TagError;

    const L: TagLayout = TagLayout::builder(56, 8)
        .field("kind", 48, 8)
        .field("seq", 0, 32)
        .build_or_panic();

    #[test]
    fn tags_and_errors() {
        let r: Registry<64> = Registry::new(L);
        let ns = r.register("cuml").unwrap();
        assert_eq!(ns.tag(7).unwrap().raw(), (5u64 << 56) | 7);
        assert_eq!(
            ns.tag(1 << 60).unwrap_err(),
            TagError::PayloadInNamespaceField {
                payload: 1 << 60,
                namespace_mask: 0xff << 56
            }
        );
        assert_eq!(ns.tag((1 << 56) - 1).unwrap_err(), TagError::ReservedInbox);
        assert_eq!(ns.inbox().raw(), (5u64 << 56) | ((1 << 56) - 1));
        let kind = L.field("kind").unwrap();
        let seq = L.field("seq").unwrap();
        let t = ns.tag_fields(&[(kind, 3), (seq, 9)]).unwrap();
        assert_eq!(L.decode(t.raw()).get("kind"), Some(3));
        assert_eq!(
            ns.tag_fields(&[(kind, 256)]).unwrap_err(),
            TagError::ValueTooWide {
                value: 256,
                width: 8
            }
        );
        assert!(ns.owns(t));
        assert_eq!(ns.payload_of(t), (3 << 48) | 9);
    }

    #[test]
    fn matchers_cover_the_namespace() {
        let r: Registry<64> = Registry::new(L);
        let a = r.register("a").unwrap();
        let b = r.register("b").unwrap();
        let m = a.matcher(0, 0).unwrap();
        assert_eq!(m.mask(), 0xff << 56);
        assert_eq!(m, a.matcher_any());
        assert!(m.matches(a.tag(5).unwrap()));
        assert!(!m.matches(b.tag(5).unwrap()));
        assert!(a.matcher(1 << 63, 0).is_err());
        // tag bits outside the mask are cleared, so equal matchers compare equal
        assert_eq!(a.matcher(0xf0, 0x0f).unwrap(), a.matcher(0, 0x0f).unwrap());
    }

    #[test]
    fn routes_and_am_ids() {
        let r: Registry<64> = Registry::new(L);
        let a = r.register("a").unwrap();
        let b = r.register("b").unwrap();
        let route = Route::new(a.id(), 40, 0);
        assert_eq!(a.remote_tag(route, 1).unwrap().raw(), (40u64 << 56) | 1);
        assert_eq!(
            b.remote_tag(route, 1).unwrap_err(),
            TagError::RouteMismatch {
                lease: b.id(),
                route: a.id()
            }
        );
        assert_eq!(
            a.remote_inbox(route).unwrap().raw(),
            (40u64 << 56) | ((1 << 56) - 1)
        );
        assert_eq!(a.am_id(3).unwrap(), (a.id() << 8) | 3);
        assert_eq!(a.remote_am_id(route, 3).unwrap(), (40 << 8) | 3);
        assert_eq!(
            a.am_id(256).unwrap_err(),
            TagError::AmIdTooWide {
                local: 256,
                per_namespace: 256
            }
        );
        assert_eq!(am_namespace(&L, a.am_id(255).unwrap()), a.id());
        assert_eq!(am_namespace(&L, 0), 0); // ucx-py's AM id 0 is unmanaged
        assert_eq!(a.static_route().remote_id(), a.id());
    }
}
