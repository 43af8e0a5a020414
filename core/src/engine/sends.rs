//! The send path's decisions (feature `alloc`): where a send goes in the peer's namespace, and
//! P2 — a send to a peer not connected yet, or to a name it has not announced yet, waits until
//! its deadline, then fails with an error that says which.

use super::conns::{Blocked, ConnId, Connections};
use super::libraries::Libraries;
use super::types::{LibId, NodeError};
use crate::error::TagError;
use crate::namespace::{Namespace, Route};
use alloc::vec::Vec;

/// What a send is addressed to in the library's namespace on the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A tag message with this payload.
    Data(u64),
    /// The library's inbox tag ("a new transmission has begun").
    Inbox,
    /// An Active Message on this local AM id.
    Am(u16),
}

/// What the transport is handed for a [`Target`] on a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// A tag message with this tag.
    Tag(u64),
    /// An Active Message with this (global) AM id.
    Am(u16),
}

impl Target {
    /// The tag or AM id on the peer, through its route for `ns`'s name.
    pub fn dest<const CAP: usize>(
        self,
        ns: &Namespace<'_, CAP>,
        route: Route,
    ) -> Result<Dest, TagError> {
        Ok(match self {
            Target::Data(p) => Dest::Tag(ns.remote_tag(route, p)?.raw()),
            Target::Inbox => Dest::Tag(ns.remote_inbox(route)?.raw()),
            Target::Am(local) => Dest::Am(ns.remote_am_id(route, local)?),
        })
    }
}

/// Where a send goes now ([`Connections::resolve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// On connection `conn`, as `dest`.
    Go {
        /// The connection.
        conn: ConnId,
        /// The tag or AM id.
        dest: Dest,
    },
    /// Not yet: the send waits (P2).
    Wait(Blocked),
}

impl<K: Copy + Eq + core::hash::Hash, X, E: Copy + Clone, const CAP: usize>
    Connections<K, X, E, CAP>
{
    /// The send path, decided once: where a send from `lib` to `target` on `peer` goes now,
    /// or why it waits — or fails now: a library not registered, a peer whose every
    /// connection ended (D3, `PeerDown`), a target outside the layout.
    pub fn resolve<'r>(
        &self,
        libs: &Libraries<'r, CAP, E>,
        lib: LibId,
        peer: u64,
        target: Target,
    ) -> Result<Resolved, NodeError<E>> {
        match self.route(libs, lib, peer) {
            Ok(Some((conn, route))) => Ok(Resolved::Go {
                conn,
                dest: target.dest(libs.ns(lib)?, route)?,
            }),
            Ok(None) => Ok(Resolved::Wait(Blocked::NoRoute)),
            Err(NodeError::NoConnection { .. }) => self.blocked(peer).map(Resolved::Wait),
            Err(e) => Err(e),
        }
    }
}

/// A send waiting for a connection, or for the peer to announce the name (P2).
#[derive(Debug)]
pub struct Waiting {
    /// The sending library.
    pub lib: LibId,
    /// The peer's token.
    pub peer: u64,
    /// What it is addressed to.
    pub target: Target,
    /// The message (owned by the operation until it is handed to the transport).
    pub data: Vec<u8>,
    since_ms: u64,
    deadline_ms: u64,
}

impl Waiting {
    /// A send started at adapter time `now_ms` that may wait up to `timeout_ms`.
    pub fn new(
        lib: LibId,
        peer: u64,
        target: Target,
        data: Vec<u8>,
        now_ms: u64,
        timeout_ms: u64,
    ) -> Self {
        Waiting {
            lib,
            peer,
            target,
            data,
            since_ms: now_ms,
            deadline_ms: now_ms.saturating_add(timeout_ms),
        }
    }

    /// Its deadline (adapter time).
    pub fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }

    /// P2: the send could not go out at `now_ms` because of `why`: it waits on (`Ok`) until its
    /// deadline, then fails with `NoConnection` or `PeerLacksNamespace` (how long it waited).
    pub fn blocked<'r, const CAP: usize, E: Clone>(
        self,
        why: Blocked,
        now_ms: u64,
        libs: &Libraries<'r, CAP, E>,
    ) -> Result<Waiting, NodeError<E>> {
        if now_ms < self.deadline_ms {
            return Ok(self);
        }
        let peer = self.peer;
        Err(match why {
            Blocked::NoConnection => NodeError::NoConnection { peer },
            Blocked::NoRoute => libs.lacks(self.lib, peer, now_ms.saturating_sub(self.since_ms)),
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{Registry, TagLayout};

    #[test]
    fn a_waiting_send_fails_at_its_deadline_naming_what_was_missing() {
        let reg: &'static Registry<64> = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
        let mut libs: Libraries<'static, 64, u8> = Libraries::new();
        let lib = libs.register(reg, "foo").unwrap();
        let w = Waiting::new(lib, 7, Target::Inbox, vec![1], 100, 50);
        let w = w
            .blocked(Blocked::NoRoute, 149, &libs)
            .expect("still waiting");
        assert_eq!(w.data, [1]);
        match w.blocked(Blocked::NoRoute, 150, &libs) {
            Err(NodeError::PeerLacksNamespace {
                name,
                peer: 7,
                waited_ms: 50,
            }) => {
                assert_eq!(name.as_str(), "foo")
            }
            other => panic!("{other:?}"),
        }
        let w = Waiting::new(lib, 7, Target::Data(1), vec![], 0, 0);
        assert_eq!(
            w.blocked(Blocked::NoConnection, 0, &libs).unwrap_err(),
            NodeError::NoConnection { peer: 7 }
        );
        let w = Waiting::new(LibId(5), 7, Target::Data(1), vec![], 0, 0);
        assert_eq!(
            w.blocked(Blocked::NoRoute, 0, &libs).unwrap_err(),
            NodeError::NoSuchLibrary
        );
        let w = Waiting::new(lib, 7, Target::Data(1), vec![], u64::MAX - 1, 10);
        assert!(
            w.blocked(Blocked::NoRoute, u64::MAX - 1, &libs).is_ok(),
            "no overflow"
        );
    }

    #[test]
    fn a_target_becomes_the_peer_s_tag_or_am_id() {
        let reg: &'static Registry<64> = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
        let ns = reg.register("foo").unwrap();
        let route = ns.static_route();
        assert_eq!(
            Target::Data(5).dest(&ns, route),
            Ok(Dest::Tag(ns.tag(5).unwrap().raw()))
        );
        assert_eq!(
            Target::Inbox.dest(&ns, route),
            Ok(Dest::Tag(ns.inbox().raw()))
        );
        assert_eq!(
            Target::Am(3).dest(&ns, route),
            Ok(Dest::Am(ns.am_id(3).unwrap()))
        );
        assert!(Target::Data(u64::MAX).dest(&ns, route).is_err());
    }
}
