//! The node's connection table (feature `alloc`): every connection's session, state,
//! deadlines, route cache and flood window, keyed by an opaque adapter key, with the peer index
//! the send path looks up and the record of peers gone — and the protocol decisions on them
//! (P1–P5, D3, D5), made here once. The adapter keeps its transport state for each connection
//! in [`Connection::io`] and carries out what the engine's answers say (send these frames,
//! retire that endpoint, end these operations).

use super::libraries::Libraries;
use super::live::{Check, Deadlines, Link, LiveClock, Liveness};
use super::types::{LibId, NodeError, PeerEvent};
use crate::identity::Identity;
use crate::layout::TagLayout;
use crate::namespace::Route;
use crate::session::{Event, Phase, Session, SessionError};
use crate::wire::{self, CloseReason, Role};
use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::hash::{BuildHasher, Hash, Hasher};

/// How long (ms) a connection that lost the simultaneous-connect tie-break (P4) keeps its
/// endpoint open after it was taken out of service, so that what either side sent on it before
/// settling still arrives.
pub const SUPERSEDED_LINGER_MS: u64 = 2000;

/// How many peers gone (every connection closed and forgotten) a node remembers, and how, so
/// that a send to one fails at once instead of waiting for a connection (D3, D5).
pub const GONE_PEERS_MAX: usize = 4096;

/// How long (ms) a peer this node cut off for a protocol error is refused when it proves
/// itself on a new connection (its own redial, or a new connect): that connection is closed at
/// once with the same reason. Long enough that a peer which saw its endpoint fail before the
/// CLOSE that explained it (and so dials back) hears the reason on the next connection. (A
/// peer cut off for a flood may come back at once: its limits apply again, and a burst is no
/// reason to keep an honest peer out.)
pub const REFUSE_MS: u64 = 30_000;

/// How many refused peers a node remembers at once ([`REFUSE_MS`]): beyond it the oldest
/// refusal is forgotten (D5).
pub const REFUSED_MAX: usize = 1024;

/// How many control-plane errors from peers a node keeps for [`Connections::protocol_errors`].
pub const PROTOCOL_ERRORS_KEPT: usize = 64;

/// A connection's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState<E> {
    /// In service (handshaking or established).
    Open,
    /// Lost the simultaneous-connect tie-break: out of service; its endpoint stays open until
    /// `until_ms` ([`SUPERSEDED_LINGER_MS`]), then is retired.
    Superseded {
        /// Adapter time at which the linger ends.
        until_ms: u64,
    },
    /// Closed by either side (`None`) or failed with the transport's error.
    Down(Option<E>),
}

/// Per-connection flood limits (D5): what a peer may send each second before its connection
/// is cut off (CLOSE with [`CloseReason::Flood`]). Only what can be traced to a connection is
/// limited: control frames, and Active Messages sent with a reply endpoint (as tagspace and
/// ucxx send them). Tag messages carry no sender; strays among them are drained within the
/// per-call budget instead (D4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerLimits {
    /// Control frames (HELLO, PROOF, ANNOUNCE, WITHDRAW, CLOSE). An honest peer sends two to
    /// connect and about two per registration change.
    pub control_per_s: u32,
    /// Active Messages on ids nobody here listens on, or sent by rendezvous (which tagspace
    /// never uses). An honest peer sends some when it talks to a library before that library
    /// has started listening.
    pub unwanted_am_per_s: u32,
}

impl Default for PeerLimits {
    fn default() -> Self {
        PeerLimits {
            control_per_s: 1024,
            unwanted_am_per_s: 1024,
        }
    }
}

/// What [`Engine::handle_charge`](super::Engine::handle_charge) counts against a connection's [`PeerLimits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Charge {
    /// A control frame.
    Control,
    /// An Active Message nobody wanted.
    Unwanted,
}

#[derive(Clone, Copy, Debug, Default)]
struct Window {
    start_ms: u64,
    control: u32,
    unwanted: u32,
}

/// A connection's handle: handed out once by [`Engine::add_conn`](super::Engine::add_conn), never reused, and never
/// moved by other connections coming and going — a handle kept across calls names the same
/// connection or, once that is forgotten, none ([`Connections::get`] says `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub(crate) u64);

/// What [`Connections::route_tag`] finds: the connection serving the peer, and the tag.
pub type RouteHit<'a, K, X, E, const CAP: usize> = (&'a Connection<K, X, E, CAP>, u64);

/// One connection.
pub struct Connection<K, X, E, const CAP: usize> {
    id: ConnId,
    key: K,
    session: Box<Session<CAP>>,
    state: LinkState<E>,
    deadlines: Deadlines,
    /// The peer's route for each library (indexed by `LibId`), so the send path does not
    /// search the directory by name for every message. The directory changes only when this
    /// connection's session reports it (established, announced, withdrawn, closed), and
    /// libraries are only ever added (a released `LibId` is never reused): refreshed at
    /// exactly those points (a new library: its entry alone), and cleared for a library
    /// released. Each entry keeps the peer's tag for payload 0 too (its namespace bits), so
    /// that the send path's tag is one check and one OR.
    routes: Vec<Option<(Route, u64)>>,
    /// Its endpoint was handed back for closing at the end of its linger (P4).
    retired: bool,
    /// Its session may have something to send that no `Transmit` has taken yet
    /// ([`Connections::transmit_due`]).
    transmit: bool,
    closed_for: Option<CloseReason>,
    window: Window,
    /// The adapter's transport state (its endpoint, requests in flight, …).
    pub io: X,
}

impl<K: Copy, X, E: Copy, const CAP: usize> Connection<K, X, E, CAP> {
    /// Its handle.
    pub fn id(&self) -> ConnId {
        self.id
    }
    /// The adapter's key.
    pub fn key(&self) -> K {
        self.key
    }
    /// Its session.
    pub fn session(&self) -> &Session<CAP> {
        &self.session
    }
    /// Its session, to queue frames on it (e.g. a CLOSE) or take what it has to send.
    #[cfg(test)]
    pub(crate) fn session_mut(&mut self) -> &mut Session<CAP> {
        &mut self.session
    }
    /// Its session and the adapter's state together (to send what the session queued).
    pub(crate) fn parts(&mut self) -> (&mut Session<CAP>, &mut X, &mut bool) {
        (&mut self.session, &mut self.io, &mut self.transmit)
    }
    /// Its state.
    pub fn state(&self) -> LinkState<E> {
        self.state
    }
    /// Whether it is in service.
    #[inline]
    pub fn is_open(&self) -> bool {
        matches!(self.state, LinkState::Open)
    }
    /// The proven peer's token, once established.
    #[inline]
    pub fn peer(&self) -> Option<u64> {
        self.session.peer().map(|p| p.token)
    }
    /// Whether it is open, established and proven to be `peer`'s.
    #[inline]
    pub fn serves(&self, peer: u64) -> bool {
        self.is_open() && self.session.is_established() && self.peer() == Some(peer)
    }
    /// Its deadlines.
    pub fn deadlines(&self) -> &Deadlines {
        &self.deadlines
    }

    /// The reason of the CLOSE that ended it, sent or received.
    pub fn closed_for(&self) -> Option<CloseReason> {
        self.closed_for
    }

    /// Marks a superseded connection's endpoint as handed back for closing: `true` the first
    /// time only (never for one that is not superseded).
    fn retire(&mut self) -> bool {
        let fresh = matches!(self.state, LinkState::Superseded { .. }) && !self.retired;
        self.retired |= fresh;
        fresh
    }
    /// The peer's route for `lib` (cached).
    pub fn route(&self, lib: LibId) -> Option<Route> {
        self.routes.get(lib.0).copied().flatten().map(|(r, _)| r)
    }
}

impl<K, X, E, const CAP: usize> Link<CAP> for Connection<K, X, E, CAP> {
    fn is_open(&self) -> bool {
        matches!(self.state, LinkState::Open)
    }
    fn session(&self) -> &Session<CAP> {
        &self.session
    }
    fn deadline_parts(&mut self) -> (&mut Session<CAP>, &mut Deadlines) {
        (&mut self.session, &mut self.deadlines)
    }
}

/// What a control frame on a connection led to ([`Connections::on_control`]); the engine turns
/// it into actions ([`Engine::handle_control`](super::Engine::handle_control)), and the
/// adapter's per-call transmit sends what the session queued in answer.
#[derive(Debug)]
pub(crate) enum Control {
    /// Nothing more.
    Handled,
    /// The connection proved a peer this node cut off for a protocol error less than
    /// [`REFUSE_MS`] ago: it is to be cut off at once with this reason.
    Refused(CloseReason),
    /// The connection is established with `peer`. Those in `superseded` lost the tie-break
    /// (P4): each has queued its CLOSE and is out of service; each CLOSE goes out and the
    /// endpoint stays open for the linger ([`Connections::take_lingered`] says when it is
    /// over).
    Established {
        /// The proven peer.
        peer: u64,
        /// Connections that lost the tie-break.
        superseded: Vec<ConnId>,
    },
    /// The peer closed the connection; the engine has recorded the reason. `Linger`: it is
    /// out of service already (the peer settled a duplicate first). `AbandonAndClose`: what
    /// is in flight on it ends (it may never finish), then it ends ([`Connections::end`]).
    /// `Close`: it ends.
    PeerClosed(AfterClose),
    /// The peer broke the protocol: the session queued a CLOSE naming it; it goes out, then
    /// the connection ends. The error is kept ([`Connections::protocol_errors`]).
    ProtocolError(SessionError),
}

/// A peer whose last connection went ([`Connections::end`], [`Connections::failed`]): the
/// listening libraries have been told; what waits for this peer ends (D3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PeerGone<E> {
    /// The peer's token.
    pub peer: u64,
    /// The transport's error, if it failed.
    pub cause: Option<E>,
    /// Where the peer said it listens (on any connection), and whether this side told it its
    /// own address (so that the peer can dial this side).
    pub addr: Option<crate::wire::Address>,
    pub told_ours: bool,
}

/// A route cache entry: the peer's route for `ns`'s name, and its tag for payload 0.
fn cached_route<const CAP: usize>(
    session: &Session<CAP>,
    ns: &crate::Namespace<'_, CAP>,
) -> Option<(Route, u64)> {
    let r = session.route(ns)?;
    Some((r, ns.remote_tag(r, 0).ok()?.raw()))
}

/// Why [`Connections::route_tag`] found no tag (small, for the send path's fast lookup).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteMiss {
    /// No established connection serves the peer.
    NoConnection,
    /// The library is not registered.
    NoSuchLibrary,
    /// The payload does not fit the layout.
    Tag(crate::error::TagError),
}

impl RouteMiss {
    /// The node's error for this miss on a send to `peer`.
    pub fn error<E>(self, peer: u64) -> NodeError<E> {
        match self {
            RouteMiss::NoConnection => NodeError::NoConnection { peer },
            RouteMiss::NoSuchLibrary => NodeError::NoSuchLibrary,
            RouteMiss::Tag(e) => NodeError::Tag(e),
        }
    }
}

/// Why a send cannot go out now ([`Connections::blocked`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// No established connection serves the peer (yet): it may still be handshaking.
    NoConnection,
    /// The peer has not announced the library's name (yet).
    NoRoute,
}

/// The send path's peer-index hash: a folded 128-bit multiply of the token with two per-node
/// keys (as foldhash does), about 1 ns against SipHash's 15–20. Keyed, because tokens come
/// from peers' keys, which a peer chooses: with a fixed hash it could pick tokens that share a
/// bucket. The adapter supplies the keys (random, per node: the engine has no entropy).
#[derive(Clone, Copy, Debug)]
pub struct TokenHash([u64; 2]);

impl TokenHash {
    /// A hash with these keys.
    pub fn new(keys: [u64; 2]) -> TokenHash {
        TokenHash([keys[0], keys[1] | 1])
    }
}

impl BuildHasher for TokenHash {
    type Hasher = TokenHasher;
    fn build_hasher(&self) -> TokenHasher {
        TokenHasher { keys: self.0, h: 0 }
    }
}

/// The hasher of [`TokenHash`].
#[derive(Debug)]
pub struct TokenHasher {
    keys: [u64; 2],
    h: u64,
}

impl Hasher for TokenHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b) ^ self.h.rotate_left(8));
        }
    }
    fn write_u64(&mut self, v: u64) {
        let p = u128::from(v ^ self.keys[0]) * u128::from(self.keys[1]);
        self.h = (p as u64) ^ ((p >> 64) as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn finish(&self) -> u64 {
        self.h
    }
}

/// Every connection of one node.
pub struct Connections<K, X, E, const CAP: usize> {
    conns: Vec<Connection<K, X, E, CAP>>,
    /// Peer token → index of a connection serving it: a hint for the send path, rebuilt when
    /// a connection's state changes ([`reindex`](Self::reindex)) and verified on use (a stale
    /// or missing entry falls back to the scan).
    serving: hashbrown::HashMap<u64, usize, TokenHash>,
    /// Peers whose every connection is gone and forgotten (D5): how each went (a failure wins
    /// over an orderly close), oldest first in `gone_order`, at most [`GONE_PEERS_MAX`].
    gone: hashbrown::HashMap<u64, Option<E>, TokenHash>,
    gone_order: VecDeque<u64>,
    /// Per proven peer whose connection ended: where it said it listens, and whether this
    /// side told it its own address — on any connection, so that a connection that fails
    /// again before its ADDRESS frames crossed still knows (forgotten with the peer).
    known: hashbrown::HashMap<u64, (Option<crate::wire::Address>, bool), TokenHash>,
    /// Peers this node cut off for a protocol error, with the reason
    /// and until when (adapter time) a connection on which they prove themselves again is
    /// refused ([`REFUSE_MS`]); at most [`REFUSED_MAX`].
    refused: hashbrown::HashMap<u64, (CloseReason, u64), TokenHash>,
    /// Peers the listening libraries were told `Up` about and not `Down` since: each hears one
    /// `Up` and one `Down` per time it is connected, whichever connections come and go.
    up: hashbrown::HashSet<u64, TokenHash>,
    protocol_errors: Vec<SessionError>,
    /// The layout's namespace mask (set with the first connection), for the payload check.
    ns_mask: u64,
    /// The pair values this node gives its peers (see [`Connections::rx_pair`]).
    pairs: Pairs,
    /// Bumped whenever a send's route could have changed ([`epoch`](Self::epoch)).
    epoch: u64,
    /// Where each connection is in `conns` (positions change when ended ones are forgotten;
    /// handles do not).
    at: hashbrown::HashMap<ConnId, usize, TokenHash>,
    /// Adapter key → the first connection on it and how many connections are on it: the
    /// lookup of every incoming control frame and endpoint error ([`find`](Self::find)) in
    /// O(1). A key can hold several connections (an ended one not yet forgotten and a new
    /// one on an endpoint at a reused address); those few are searched in order.
    by_key: hashbrown::HashMap<K, (ConnId, u32), TokenHash>,
    /// The next handle's number.
    next_id: u64,
    /// Connections marked to transmit ([`transmit_due`](Self::transmit_due)); may hold ids
    /// already transmitted or forgotten, which the next call drops.
    due: Vec<ConnId>,
    /// The registry epoch of the last pass over every connection.
    flushed_epoch: Option<u64>,
    /// Bumped by everything that can change a connection's deadlines or hand its session
    /// something to collect: a connection added, a frame or acknowledgement handled, a state
    /// changed, mutable access from the engine: every one goes through [`touch`](Self::touch).
    changes: u64,
    /// `changes` as the last deadline pass saw it, and the adapter time until which that pass
    /// found nothing due ([`sweep`](Self::sweep)): while both hold, a pass would find nothing.
    pass_seen: u64,
    quiet_until_ms: u64,
    /// `changes` as the last collection of confirmed withdrawals saw it.
    confirm_seen: u64,
    /// Deadline passes made over every connection ([`deadline_passes`](Self::deadline_passes)).
    passes: u64,
    /// Connections not open (superseded, ended): [`forget`](Self::forget) has nothing to do
    /// while there are none.
    not_open: usize,
}

/// The pair values a node gives its peers: peer token → value, and value → peer token.
///
/// Values are a keyed permutation (a Feistel network keyed by the node's secret hash keys) of
/// a counter, so nobody else can predict them and none repeats before every other value of
/// the field has been given out: a value forgotten with its peer (dropped from the peers gone,
/// [`GONE_PEERS_MAX`]) comes back only after `2^bits - 1` newer ones — a stranger churning
/// identities cannot make a value meant for one peer land on another soon. Never 0 (the value
/// of loopback and static-route tags) and unique among the values held. An entry lives as long
/// as the node remembers the peer, so every connection to the same proven peer (a superseded
/// one, a reconnect) uses the same value.
struct Pairs {
    keys: [u64; 2],
    made: u64,
    bits: u32,
    by_peer: hashbrown::HashMap<u64, (u32, bool), TokenHash>,
    by_value: hashbrown::HashMap<u64, u64, TokenHash>,
    /// [`super::pair_gaps`] of the values, rebuilt when they change (`None`: stale).
    gaps: Option<Vec<(u32, u32)>>,
    /// How many values were forgotten with their peers so far.
    forgotten: u64,
}

impl Pairs {
    /// `peer`'s value, made now if it has none; 0 when the layout has no pair field, or when
    /// every value of the field is held (a 16-bit field and 65 535 peers remembered at once).
    fn value_for(&mut self, peer: u64) -> u32 {
        if self.bits == 0 {
            return 0;
        }
        if let Some(&(v, _)) = self.by_peer.get(&peer) {
            return v;
        }
        let space = 1u64 << self.bits;
        if self.by_value.len() as u64 >= space - 1 {
            return 0;
        }
        let value = loop {
            self.made = (self.made + 1) % space;
            let v = permute(self.keys, self.made, self.bits);
            if v != 0 && !self.by_value.contains_key(&v) {
                break v as u32;
            }
        };
        self.by_peer.insert(peer, (value, false));
        self.by_value.insert(value as u64, peer);
        self.gaps = None;
        value
    }

    fn forget(&mut self, peer: u64) {
        if let Some((v, _)) = self.by_peer.remove(&peer) {
            self.by_value.remove(&(v as u64));
            self.gaps = None;
            self.forgotten += 1;
        }
    }
}

/// A keyed permutation of `0..2^bits` (`x` in it): a four-round Feistel network over the
/// smallest even width that holds `bits`, cycle-walked back into range.
fn permute(keys: [u64; 2], mut x: u64, bits: u32) -> u64 {
    use sha2::{Digest, Sha512};
    let half = bits.div_ceil(2);
    let mask = (1u64 << half) - 1;
    loop {
        let (mut l, mut r) = (x >> half, x & mask);
        for round in 0u8..4 {
            let digest = Sha512::new()
                .chain_update(b"tagspace-pair-value")
                .chain_update(keys[0].to_le_bytes())
                .chain_update(keys[1].to_le_bytes())
                .chain_update([round])
                .chain_update(r.to_le_bytes())
                .finalize();
            let mut word = [0u8; 8];
            word.copy_from_slice(&digest[..8]);
            (l, r) = (r, l ^ (u64::from_le_bytes(word) & mask));
        }
        x = (l << half) | r;
        if x >> bits == 0 {
            return x;
        }
    }
}

impl<K: Copy + Eq + Hash, X, E: Copy, const CAP: usize> Connections<K, X, E, CAP> {
    /// An empty table; `hash_keys`: random, per node (see [`TokenHash`]).
    pub fn new(hash_keys: [u64; 2]) -> Self {
        let h = TokenHash::new(hash_keys);
        Connections {
            conns: Vec::new(),
            serving: hashbrown::HashMap::with_hasher(h),
            gone: hashbrown::HashMap::with_hasher(h),
            gone_order: VecDeque::new(),
            known: hashbrown::HashMap::with_hasher(h),
            refused: hashbrown::HashMap::with_hasher(h),
            up: hashbrown::HashSet::with_hasher(h),
            protocol_errors: Vec::new(),
            ns_mask: u64::MAX,
            pairs: Pairs {
                keys: hash_keys,
                made: 0,
                bits: 0,
                by_peer: hashbrown::HashMap::with_hasher(h),
                by_value: hashbrown::HashMap::with_hasher(h),
                gaps: None,
                forgotten: 0,
            },
            epoch: 0,
            at: hashbrown::HashMap::with_hasher(h),
            by_key: hashbrown::HashMap::with_hasher(h),
            next_id: 0,
            due: Vec::new(),
            flushed_epoch: None,
            changes: 1,
            pass_seen: 0,
            quiet_until_ms: 0,
            confirm_seen: 0,
            passes: 0,
            not_open: 0,
        }
    }

    /// Marks connection `id` as having something to send (a frame arrived on it: the answer,
    /// if any, goes at the next [`transmit_due`](Self::transmit_due)).
    pub(crate) fn mark_transmit(&mut self, id: ConnId) {
        if let Some(c) = self.get_mut(id) {
            if !c.transmit {
                c.transmit = true;
                self.due.push(id);
            }
        }
    }

    /// Something may have changed a connection's deadlines, or given its session confirmed
    /// withdrawals to collect: the next deadline pass and collection look at every connection.
    pub(crate) fn touch(&mut self) {
        self.changes += 1;
    }

    /// Connection `i` moves to `state` (counted for [`forget`](Self::forget)).
    fn set_state(&mut self, i: usize, state: LinkState<E>) {
        let c = &mut self.conns[i];
        match (c.is_open(), matches!(state, LinkState::Open)) {
            (true, false) => self.not_open += 1,
            (false, true) => self.not_open -= 1,
            _ => {}
        }
        c.state = state;
        self.touch();
    }

    /// The open connections whose sessions may have something to send, for the adapter's
    /// [`Stage::Transmit`](super::Stage::Transmit): every open one when the registry changed
    /// since the last call (announcements and withdrawals are for every peer), else only the
    /// ones something happened to since — added, a frame arrived, or an earlier transmit that
    /// did not finish (not wired up yet, the transport refused a frame). A connection leaves
    /// the set when an [`Outbox`](super::Outbox) drains it. So an idle `progress` costs
    /// nothing per connection.
    pub fn transmit_due(&mut self, registry_epoch: u64) -> Vec<ConnId> {
        if self.flushed_epoch != Some(registry_epoch) {
            self.flushed_epoch = Some(registry_epoch);
            self.due.clear();
            for c in self.conns.iter_mut().filter(|c| c.is_open()) {
                c.transmit = true;
                self.due.push(c.id);
            }
            return self.due.clone();
        }
        let conns = &self.conns;
        let at = &self.at;
        self.due.retain(|id| {
            let c = at.get(id).map(|&i| &conns[i]);
            c.is_some_and(|c| c.transmit && c.is_open())
        });
        // An id marked again after an explicit transmit drained it can be here twice.
        self.due.sort_unstable();
        self.due.dedup();
        self.due.clone()
    }

    /// Where connection `id` is now, if it has not been forgotten.
    #[inline]
    fn pos(&self, id: ConnId) -> Option<usize> {
        self.at.get(&id).copied()
    }

    /// The open connections to `peer` (to cut a peer off: all of them).
    pub fn open_to(&self, peer: u64) -> Vec<ConnId> {
        (self.conns.iter())
            .filter(|c| c.is_open() && c.peer() == Some(peer))
            .map(|c| c.id)
            .collect()
    }

    /// Every connection's handle, in the order they were added.
    pub fn ids(&self) -> Vec<ConnId> {
        self.conns.iter().map(|c| c.id).collect()
    }

    /// Changes whenever where a send goes could have changed — a connection established,
    /// superseded, ended or forgotten, a peer's directory changed, a library added or
    /// released — and only then (D6: sends waiting for a route are tried again on a change,
    /// not on every `progress`).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The pair value `peer`'s tags to this node carry (invariant: unique per peer, unguessable,
    /// non-zero; 0 when `layout` has no pair field). Made on first use — when the peer proves
    /// itself on a connection, or earlier, when a receive tied to it is posted — and given to
    /// the peer (a PAIR frame) only once it has proven its identity. A receive tied to `peer`
    /// matches its tags exactly with it ([`crate::Namespace::matcher_from`]).
    pub(crate) fn rx_pair(&mut self, peer: u64, layout: &TagLayout) -> u32 {
        self.pairs.bits = layout.pair_bits();
        self.pairs.value_for(peer)
    }

    /// How many pair values were forgotten with their peers so far (a change tells whoever
    /// keeps state per peer value — the held backlogs — to let go of the forgotten ones).
    pub fn pairs_forgotten(&self) -> u64 {
        self.pairs.forgotten
    }

    /// The pair value `peer`'s tags to this node carry, if one was made already (see
    /// [`Engine::rx_pair`](super::Engine::rx_pair), which makes it).
    pub fn rx_pair_of(&self, peer: u64) -> Option<u32> {
        self.pairs.by_peer.get(&peer).map(|&(v, _)| v)
    }

    /// The proven peer whose pair value `tag` carries: who sent a tag a receive from any peer
    /// took ([`crate::Namespace::matcher_any_peer`]). `None`: no proven peer can have made it
    /// (a stranger's guess, or a peer's that is no longer remembered) — or `layout` has no pair
    /// field, where nobody can tell.
    pub fn sender_of(&self, layout: &TagLayout, tag: u64) -> Option<u64> {
        if layout.pair_bits() == 0 {
            return None;
        }
        let peer = *self.pairs.by_value.get(&(layout.pair_of(tag) as u64))?;
        let (_, given) = *self.pairs.by_peer.get(&peer)?;
        given.then_some(peer)
    }

    /// Whether a tag a receive from any peer took is a stranger's: `layout` has a pair field
    /// and no proven peer was given the value in it (the adapter drops the message, counts it
    /// and posts the receive again).
    pub fn forged(&self, layout: &TagLayout, tag: u64) -> bool {
        layout.pair_bits() != 0 && self.sender_of(layout, tag).is_none()
    }

    /// The stray drain's view of the pair values ([`super::PairCheck`]), its blocks of values
    /// nobody was given rebuilt if the values changed since the last call.
    pub fn with_pair_check<R>(
        &mut self,
        layout: &TagLayout,
        f: impl FnOnce(&super::strays::PairCheck<'_>) -> R,
    ) -> R {
        let p = &mut self.pairs;
        if p.gaps.is_none() {
            let mut given: Vec<u32> = p.by_value.keys().map(|&v| v as u32).collect();
            given.sort_unstable();
            p.gaps = Some(super::pair_gaps(&given, layout.pair_bits()));
        }
        let by_value = &p.by_value;
        let given = |v: u32| by_value.contains_key(&(v as u64));
        f(&super::strays::PairCheck {
            layout,
            given: &given,
            gaps: p.gaps.as_deref().unwrap_or(&[]),
        })
    }

    /// A new connection (open, handshaking) on the adapter's `key`, started at adapter time
    /// `now_ms` and live time `live_ms` (its deadlines start there). Returns its handle.
    // Sans-IO: each input is a plain value the adapter passes (no context object to build).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add(
        &mut self,
        key: K,
        role: Role,
        identity: &Identity,
        layout: &TagLayout,
        now_ms: u64,
        live_ms: u64,
        io: X,
    ) -> ConnId {
        self.ns_mask = layout.fixed_mask() | layout.pair_mask();
        self.pairs.bits = layout.pair_bits();
        self.next_id += 1;
        let id = ConnId(self.next_id);
        self.touch();
        self.at.insert(id, self.conns.len());
        (self.by_key.entry(key))
            .and_modify(|(_, n)| *n += 1)
            .or_insert((id, 1));
        self.due.push(id);
        self.conns.push(Connection {
            id,
            key,
            session: Box::new(Session::new(role, identity, layout)),
            state: LinkState::Open,
            deadlines: Deadlines::new(now_ms, live_ms),
            routes: Vec::new(),
            retired: false,
            transmit: true, // its HELLO
            closed_for: None,
            window: Window {
                start_ms: now_ms,
                ..Window::default()
            },
            io,
        });
        id
    }

    /// How many connections there are (open, lingering and ended ones not yet forgotten).
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Connection `id`; `None` once it has been forgotten.
    pub fn get(&self, id: ConnId) -> Option<&Connection<K, X, E, CAP>> {
        Some(&self.conns[self.pos(id)?])
    }

    /// Connection `id`, mutable; `None` once it has been forgotten.
    pub fn get_mut(&mut self, id: ConnId) -> Option<&mut Connection<K, X, E, CAP>> {
        let i = self.pos(id)?;
        self.touch();
        Some(&mut self.conns[i])
    }

    /// Connection `id`'s adapter state (its `io`), mutable: changes no deadline, so the next
    /// deadline pass may still be skipped (see [`deadline_passes`](Self::deadline_passes)).
    pub fn io_mut(&mut self, id: ConnId) -> Option<&mut X> {
        let i = self.pos(id)?;
        Some(&mut self.conns[i].io)
    }

    /// Every connection.
    pub fn iter(&self) -> core::slice::Iter<'_, Connection<K, X, E, CAP>> {
        self.conns.iter()
    }

    /// Every connection, mutable (the adapter's side of each: its `io`).
    pub fn iter_mut(&mut self) -> core::slice::IterMut<'_, Connection<K, X, E, CAP>> {
        self.conns.iter_mut()
    }

    /// The confirmed withdrawals to collect ([`super::Unpins::collect_confirmed`]): every
    /// connection, when something changed since the last collection; none otherwise (a
    /// session confirms a withdrawal only when a frame or an acknowledgement tag arrives).
    pub(crate) fn confirmations_due(&mut self) -> &mut [Connection<K, X, E, CAP>] {
        if self.confirm_seen == self.changes {
            return &mut [];
        }
        self.confirm_seen = self.changes;
        &mut self.conns
    }

    /// The first connection on `key` that `also` accepts (O(1); a key shared by several
    /// connections searches those from the first).
    pub fn find(&self, key: K, also: impl Fn(&Connection<K, X, E, CAP>) -> bool) -> Option<ConnId> {
        let &(first, n) = self.by_key.get(&key)?;
        let i = self.pos(first)?;
        if n == 1 {
            let c = &self.conns[i];
            return also(c).then_some(c.id);
        }
        // Connections keep their order in `conns`: the others on `key` come after the first.
        self.conns[i..]
            .iter()
            .filter(|c| c.key == key)
            .take(n as usize)
            .find(|c| also(c))
            .map(|c| c.id)
    }

    /// The connection serving `peer` for sends: open, established, proven `peer`'s.
    #[inline]
    pub fn serving(&self, peer: u64) -> Result<ConnId, NodeError<E>> {
        self.serving_index(peer)
            .map(|i| self.conns[i].id)
            .ok_or(NodeError::NoConnection { peer })
    }

    /// [`serving`](Self::serving) with a small answer (the send path's).
    #[inline]
    fn serving_index(&self, peer: u64) -> Option<usize> {
        if let Some(&i) = self.serving.get(&peer) {
            if self.conns.get(i).is_some_and(|c| c.serves(peer)) {
                return Some(i);
            }
        }
        self.conns.iter().position(|c| c.serves(peer))
    }

    /// Rebuilds the peer index (after a connection was established, superseded, ended or
    /// forgotten). Cheap enough for every such change; a stale entry only costs a scan.
    pub(crate) fn reindex(&mut self) {
        self.epoch += 1;
        self.serving.clear();
        for (i, c) in self.conns.iter().enumerate() {
            if let (LinkState::Open, true, Some(p)) =
                (c.state, c.session.is_established(), c.peer())
            {
                self.serving.entry(p).or_insert(i);
            }
        }
    }

    /// How many open, established connections serve `peer`.
    pub fn live_to(&self, peer: u64) -> usize {
        live_to(&self.conns, peer)
    }

    /// Tokens of peers with an open, established connection, sorted.
    pub fn peers(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .conns
            .iter()
            .filter(|c| c.is_open())
            .filter_map(|c| c.peer())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Recomputes connection `i`'s route cache from its session's directory (its directory
    /// changed: O(libraries)). A new connection routes nothing until it is established.
    fn refresh_routes<'r>(&mut self, i: usize, libs: &Libraries<'r, CAP, E>)
    where
        E: Clone,
    {
        self.epoch += 1;
        let c = &mut self.conns[i];
        c.routes.clear();
        // Exactly as many as the libraries (one per connection, thousands of connections).
        c.routes.reserve_exact(libs.slots());
        c.routes.resize(libs.slots(), None);
        for (lib, l) in libs.iter() {
            c.routes[lib.0] = cached_route(&c.session, l.ns());
        }
    }

    /// Library `lib` was registered: each connection's cache gains its route (O(connections),
    /// not a refresh of every library).
    pub(crate) fn library_added<'r>(&mut self, lib: LibId, libs: &Libraries<'r, CAP, E>)
    where
        E: Clone,
    {
        let Some(l) = libs.get(lib) else {
            return;
        };
        self.epoch += 1;
        for c in &mut self.conns {
            if c.routes.len() < libs.slots() {
                c.routes.reserve_exact(libs.slots() - c.routes.len());
                c.routes.resize(libs.slots(), None);
            }
            c.routes[lib.0] = cached_route(&c.session, l.ns());
        }
    }

    /// The send path: the connection serving `peer` and the peer's route for `lib`, `None`
    /// while the peer has not announced the name; `NoConnection` while no established
    /// connection serves the peer, `NoSuchLibrary` for a library not registered.
    pub fn route<'r>(
        &self,
        libs: &Libraries<'r, CAP, E>,
        lib: LibId,
        peer: u64,
    ) -> Result<Option<(ConnId, Route)>, NodeError<E>>
    where
        E: Clone,
    {
        let i = self
            .serving_index(peer)
            .ok_or(NodeError::NoConnection { peer })?;
        let ns = libs.ns(lib)?;
        let c = &self.conns[i];
        let route = c.route(lib);
        debug_assert_eq!(route, c.session.route(ns), "stale route cache");
        Ok(route.map(|r| (c.id, r)))
    }

    /// The send path's fast lookup: the connection serving `peer` and the peer's tag for
    /// `payload` in `lib`'s namespace (`None` while the peer has not announced the name). The
    /// same answers as [`route`](Self::route) then `Namespace::remote_tag`, from the cache:
    /// the peer index, the cached tag base, one payload check; a miss is small
    /// ([`RouteMiss::error`] turns it into the node's error).
    #[inline]
    pub fn route_tag<'r>(
        &self,
        libs: &Libraries<'r, CAP, E>,
        lib: LibId,
        peer: u64,
        payload: u64,
    ) -> Result<Option<RouteHit<'_, K, X, E, CAP>>, RouteMiss>
    where
        E: Clone,
    {
        let i = self.serving_index(peer).ok_or(RouteMiss::NoConnection)?;
        let c = &self.conns[i];
        match c.routes.get(lib.0).copied().flatten() {
            Some((route, base)) => {
                let ns_mask = self.ns_mask;
                if (payload & ns_mask != 0) | (payload == !ns_mask) {
                    // The error the namespace gives (checked the slow way).
                    let ns = libs.get(lib).ok_or(RouteMiss::NoSuchLibrary)?.ns();
                    let e = ns.remote_tag(route, payload).err();
                    return Err(e.map_or(RouteMiss::NoSuchLibrary, RouteMiss::Tag));
                }
                debug_assert_eq!(
                    Some(route),
                    libs.ns(lib).ok().and_then(|ns| c.session.route(ns)),
                    "stale route cache"
                );
                Ok(Some((c, base | payload)))
            }
            None => match libs.get(lib) {
                Some(_) => Ok(None),
                None => Err(RouteMiss::NoSuchLibrary),
            },
        }
    }

    /// A library was released: no connection's cache routes it any more.
    pub(crate) fn library_released(&mut self, lib: LibId) {
        self.epoch += 1;
        for c in &mut self.conns {
            if let Some(r) = c.routes.get_mut(lib.0) {
                *r = None;
            }
        }
    }

    /// Why a send to `peer` cannot go out now, when [`route`](Self::route) found no
    /// connection: if the peer's connections are all gone, the send fails now (D3) with
    /// `PeerDown` (the transport's error if one failed); otherwise a connection may still be
    /// handshaking and the send waits.
    pub fn blocked(&self, peer: u64) -> Result<Blocked, NodeError<E>> {
        match self.failed_peer(peer) {
            Some(cause) => Err(NodeError::PeerDown { peer, cause }),
            None => Ok(Blocked::NoConnection),
        }
    }

    /// If no open connection serves `peer` and one ended: how (a failure wins over a close).
    pub fn failed_peer(&self, peer: u64) -> Option<Option<E>> {
        if self.live_to(peer) > 0 {
            return None;
        }
        let mut closed = self.gone.get(&peer).copied();
        if let Some(Some(e)) = closed {
            return Some(Some(e));
        }
        for c in &self.conns {
            match c.state {
                LinkState::Down(Some(e)) if c.peer() == Some(peer) => return Some(Some(e)),
                LinkState::Down(None) if c.peer() == Some(peer) => closed = Some(None),
                _ => {}
            }
        }
        closed
    }

    /// Hands a control frame that arrived on connection `i` to its session at adapter time
    /// `now_ms`, and decides what follows (P1, P3, P4, P6). Frames on a connection out of
    /// service are ignored.
    pub(crate) fn on_control<'r>(
        &mut self,
        id: ConnId,
        bytes: &[u8],
        now_ms: u64,
        libs: &mut Libraries<'r, CAP, E>,
    ) -> Control
    where
        E: Clone,
    {
        let Some(i) = self.pos(id).filter(|&i| self.conns[i].is_open()) else {
            return Control::Handled;
        };
        self.touch();
        let handled = self.conns[i].session.handle(bytes);
        // The directory changes only with these (between HELLO and PROOF it changes quietly,
        // but routes nothing until `Established` reports it whole); a PING, PONG or ack
        // leaves the cache as it is.
        let changed = !matches!(handled, Ok(None));
        if changed {
            self.refresh_routes(i, libs);
        }
        let out = match handled {
            Ok(Some(Event::Established { peer_token }))
                if self.refused.get(&peer_token).is_some_and(|r| now_ms < r.1) =>
            {
                Control::Refused(self.refused[&peer_token].0)
            }
            Ok(Some(Event::Established { peer_token })) => {
                // The peer is proven: tell it the value its tags carry here.
                // (0: every value is held; the peer gets none and never routes here)
                let value = self.pairs.value_for(peer_token);
                if let Some(e) = self.pairs.by_peer.get_mut(&peer_token) {
                    e.1 = true;
                }
                self.conns[i].session.grant_pair(value);
                let superseded = self.settle_duplicates(peer_token, now_ms);
                if self.conns[i].is_open() && self.up.insert(peer_token) {
                    libs.tell(&PeerEvent::Up { peer: peer_token });
                }
                Control::Established {
                    peer: peer_token,
                    superseded,
                }
            }
            Ok(Some(Event::Closed { reason })) => {
                self.conns[i].closed_for = Some(reason);
                let then = after_peer_close(reason);
                if then == AfterClose::Linger {
                    // The peer settled the duplicate first; linger like it does.
                    self.linger(i, now_ms);
                }
                Control::PeerClosed(then)
            }
            Ok(_) => Control::Handled,
            Err(e) => {
                if self.protocol_errors.len() == PROTOCOL_ERRORS_KEPT {
                    self.protocol_errors.remove(0);
                }
                self.protocol_errors.push(e);
                if let Phase::Closing(r) = self.conns[i].session.phase() {
                    self.conns[i].closed_for = Some(r);
                }
                Control::ProtocolError(e)
            }
        };
        // Which connection serves a peer changes only with the same events (established,
        // superseded, closed): a heartbeat does not rebuild the index.
        if changed {
            self.reindex();
        }
        out
    }

    /// The last [`PROTOCOL_ERRORS_KEPT`] control-plane errors from peers, oldest first.
    pub fn protocol_errors(&self) -> &[SessionError] {
        &self.protocol_errors
    }

    /// P4: of several established connections to `peer`, the losers ([`superseded`]) are
    /// closed (their CLOSE queued) and taken out of service to linger.
    fn settle_duplicates(&mut self, peer: u64, now_ms: u64) -> Vec<ConnId> {
        let mut losers = Vec::new();
        superseded(&self.conns, peer, &mut losers);
        for &i in &losers {
            self.conns[i].session.close(CloseReason::Superseded);
            self.linger(i, now_ms);
        }
        losers.into_iter().map(|i| self.conns[i].id).collect()
    }

    fn linger(&mut self, i: usize, now_ms: u64) {
        let until_ms = now_ms.saturating_add(SUPERSEDED_LINGER_MS);
        self.set_state(i, LinkState::Superseded { until_ms });
    }

    /// Superseded connections whose linger is over at `now_ms`, each handed out once: their
    /// endpoints are to be closed.
    ///
    /// One that was its peer's last (its replacement failed here before it was established,
    /// say) ends as well: out of service for good, and the peer is gone ([`end`](Self::end)'s
    /// `Down`, with the CLOSE's reason).
    pub(crate) fn take_lingered<'r>(
        &mut self,
        now_ms: u64,
        libs: &mut Libraries<'r, CAP, E>,
    ) -> Vec<(ConnId, Option<PeerGone<E>>)>
    where
        E: Clone,
    {
        if self.not_open == 0 {
            return Vec::new();
        }
        let over = |c: &Connection<K, X, E, CAP>| matches!(c.state, LinkState::Superseded { until_ms } if now_ms >= until_ms);
        let ids: Vec<ConnId> = (self.conns.iter_mut())
            .filter_map(|c| (over(c) && c.retire()).then_some(c.id))
            .collect();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let gone = self.lingered_out(id, libs);
            out.push((id, gone));
        }
        out
    }

    /// Superseded connection `id`, its linger over: if no other connection to its peer is
    /// open or still lingering, it ends and the peer is gone.
    fn lingered_out<'r>(
        &mut self,
        id: ConnId,
        libs: &mut Libraries<'r, CAP, E>,
    ) -> Option<PeerGone<E>>
    where
        E: Clone,
    {
        let i = self.pos(id)?;
        let (peer, reason) = (self.conns[i].peer()?, self.conns[i].closed_for);
        let others = self.conns.iter().any(|c| {
            c.id != id
                && c.peer() == Some(peer)
                && match c.state {
                    LinkState::Open => true,
                    LinkState::Superseded { .. } => !c.retired,
                    LinkState::Down(_) => false,
                }
        });
        if others {
            return None;
        }
        self.set_state(i, LinkState::Down(None));
        self.remember(i, peer);
        self.went_down(peer, None, reason, libs)
    }

    /// Marks superseded connection `id`'s endpoint as handed back for closing; `false` if it
    /// was already (or is not superseded).
    pub(crate) fn retire(&mut self, id: ConnId) -> bool {
        self.pos(id).is_some_and(|i| self.conns[i].retire())
    }

    /// This side cuts connection `i` off: queues a CLOSE with `reason` (or keeps the one the
    /// session already queued) and records it; the engine then has it sent and calls
    /// [`end`](Self::end).
    pub(crate) fn cut_off(&mut self, id: ConnId, reason: Option<CloseReason>) {
        let Some(i) = self.pos(id) else {
            return;
        };
        self.touch();
        let s = &mut self.conns[i].session;
        if let Some(reason) = reason {
            s.close(reason);
        }
        if let Phase::Closing(r) = s.phase() {
            self.conns[i].closed_for = Some(r);
        }
    }

    /// Connection `i` ended (closed in order, `cause` `None`; or failed): out of service. If it
    /// was the peer's last, the listening libraries hear `Down` and the answer names the peer.
    pub(crate) fn end<'r>(
        &mut self,
        id: ConnId,
        cause: Option<E>,
        libs: &mut Libraries<'r, CAP, E>,
    ) -> Option<PeerGone<E>>
    where
        E: Clone,
    {
        let i = self.pos(id)?;
        let was_open = self.conns[i].is_open();
        self.set_state(i, LinkState::Down(cause));
        let c = &self.conns[i];
        let (peer, reason) = (c.peer(), c.closed_for);
        self.reindex();
        let peer = peer?;
        self.remember(i, peer);
        (was_open && self.live_to(peer) == 0)
            .then(|| self.went_down(peer, cause, reason, libs))
            .flatten()
    }

    /// What connection `i` of `peer` learnt for a reconnect (where the peer listens, whether
    /// ours was told), kept per peer.
    fn remember(&mut self, i: usize, peer: u64) {
        let s = &self.conns[i].session;
        let (addr, told) = (s.peer_addr(), s.told_addr());
        let known = self.known.entry(peer).or_insert((None, false));
        *known = (addr.or(known.0), told || known.1);
    }

    /// `peer` has no connection left: if the libraries were told it is up, they hear `Down`
    /// (once) and the answer names it.
    fn went_down<'r>(
        &mut self,
        peer: u64,
        cause: Option<E>,
        reason: Option<CloseReason>,
        libs: &mut Libraries<'r, CAP, E>,
    ) -> Option<PeerGone<E>>
    where
        E: Clone,
    {
        if !self.up.remove(&peer) {
            return None;
        }
        libs.tell(&PeerEvent::Down {
            peer,
            cause,
            reason,
        });
        let (addr, told_ours) = self.known.get(&peer).copied().unwrap_or((None, false));
        Some(PeerGone {
            peer,
            cause,
            addr,
            told_ours,
        })
    }

    /// Connection `id`'s proven peer broke the protocol (`reason`): for [`REFUSE_MS`] from
    /// `now_ms`, a connection on which it proves itself again is refused.
    pub(crate) fn refuse(&mut self, id: ConnId, reason: CloseReason, now_ms: u64) {
        let Some(peer) = self.get(id).and_then(|c| c.peer()) else {
            return;
        };
        if self.refused.len() >= REFUSED_MAX && !self.refused.contains_key(&peer) {
            self.refused.retain(|_, r| now_ms < r.1);
            if self.refused.len() >= REFUSED_MAX {
                let oldest = self
                    .refused
                    .iter()
                    .min_by_key(|(_, r)| r.1)
                    .map(|(p, _)| *p);
                if let Some(p) = oldest {
                    self.refused.remove(&p);
                }
            }
        }
        self.refused
            .insert(peer, (reason, now_ms.saturating_add(REFUSE_MS)));
    }

    /// Connection `id` was opened to dial back its peer lost to a fault: its HELLO says so
    /// (unless it went out already), and the peer keeps it over any older connection.
    pub(crate) fn mark_redial(&mut self, id: ConnId, expected: u64) {
        if let Some(i) = self.pos(id) {
            self.touch();
            self.conns[i].session.mark_redial(expected);
        }
    }

    /// Connection `id`'s session tells its peer that this node listens at `addr` (once the
    /// peer is proven; again if it changed). `true` if a frame is now queued.
    pub(crate) fn advertise(&mut self, id: ConnId, addr: Option<crate::wire::Address>) -> bool {
        let Some(i) = self.pos(id).filter(|&i| self.conns[i].is_open()) else {
            return false;
        };
        self.touch();
        let s = &mut self.conns[i].session;
        s.set_advertised(addr) && addr.is_some() && s.is_established()
    }

    /// Connection `i`'s transport failed with `e`. A superseded connection's failure is
    /// expected (the peer closed its side) and changes nothing; otherwise as
    /// [`end`](Self::end) with the error.
    pub(crate) fn failed<'r>(
        &mut self,
        id: ConnId,
        e: E,
        libs: &mut Libraries<'r, CAP, E>,
    ) -> Option<PeerGone<E>>
    where
        E: Clone,
    {
        let i = self.pos(id)?;
        match self.conns[i].state {
            LinkState::Superseded { .. } => None,
            LinkState::Down(_) => {
                self.set_state(i, LinkState::Down(Some(e)));
                None
            }
            LinkState::Open => self.end(id, Some(e), libs),
        }
    }

    /// Counts one message from connection `i` against `limits` at adapter time `now_ms`:
    /// `false` if the peer is over its limit (the adapter cuts it off with
    /// [`CloseReason::Flood`]).
    pub(crate) fn charge(
        &mut self,
        id: ConnId,
        now_ms: u64,
        what: Charge,
        limits: PeerLimits,
    ) -> bool {
        let Some(i) = self.pos(id) else {
            return true;
        };
        let w = &mut self.conns[i].window;
        if now_ms >= w.start_ms.saturating_add(1000) {
            *w = Window {
                start_ms: now_ms,
                ..Window::default()
            };
        }
        let (count, max) = match what {
            Charge::Control => (&mut w.control, limits.control_per_s),
            Charge::Unwanted => (&mut w.unwanted, limits.unwanted_am_per_s),
        };
        *count = count.saturating_add(1);
        *count <= max
    }

    /// R7: a withdrawal acknowledgement tag arrived; hands it to the session (among those
    /// `usable` accepts) whose withdrawal it confirms. `false`: nobody's — unknown, stale or
    /// forged, a stray.
    pub(crate) fn claim_ack_tag(
        &mut self,
        layout: &TagLayout,
        tag: u64,
        usable: impl Fn(&X) -> bool,
    ) -> bool {
        self.touch();
        wire::parse_ack_tag(layout, tag).is_some_and(|(id, seq)| {
            self.conns
                .iter_mut()
                .any(|c| usable(&c.io) && c.session.on_ack_tag(id, seq))
        })
    }

    /// R7 on a host's worker: the exact acknowledgement tags the sessions (among those
    /// `usable` accepts) wait for.
    pub fn awaited_ack_tags<'a>(
        &'a self,
        layout: &'a TagLayout,
        usable: impl Fn(&X) -> bool + 'a,
    ) -> impl Iterator<Item = u64> + 'a {
        self.conns
            .iter()
            .filter(move |c| usable(&c.io) && c.session.awaiting_acks() > 0)
            .flat_map(|c| c.session.awaited_ack_tags())
            .map(move |(id, seq)| wire::ack_tag(layout, id, seq))
    }

    /// One deadline pass ([`super::sweep`]): `(index, what to do)` for each open connection
    /// that needs something.
    pub(crate) fn sweep(
        &mut self,
        clock: &mut LiveClock,
        now_ms: u64,
        liveness: Option<Liveness>,
    ) -> Vec<(ConnId, Check)> {
        let live = clock.tick(now_ms);
        // Nothing changed since the last pass and none of its deadlines has come: an idle
        // `progress` costs nothing per connection. (Live time never runs ahead of adapter
        // time, so a deadline is never reached before the adapter time the pass computed.)
        if self.pass_seen == self.changes && now_ms < self.quiet_until_ms {
            return Vec::new();
        }
        self.pass_seen = self.changes;
        self.passes += 1;
        let mut due = Vec::new();
        self.quiet_until_ms = sweep(&mut self.conns, live, now_ms, liveness, &mut due);
        due.into_iter()
            .map(|(i, c)| (self.conns[i].id, c))
            .collect()
    }

    /// How many deadline passes over every connection were made: one when something changed
    /// or a deadline came, none for an idle `progress`.
    pub fn deadline_passes(&self) -> u64 {
        self.passes
    }

    /// The connections that may be superseded and lingering: every one while any is not
    /// open, none otherwise.
    pub(crate) fn lingering(&self) -> core::slice::Iter<'_, Connection<K, X, E, CAP>> {
        let n = if self.not_open == 0 {
            0
        } else {
            self.conns.len()
        };
        self.conns[..n].iter()
    }

    /// The adapter time until which the last deadline pass found nothing due, if nothing
    /// changed since (else `None`: a pass is due at once).
    pub(crate) fn quiet_until(&self) -> Option<u64> {
        (self.pass_seen == self.changes).then_some(self.quiet_until_ms)
    }

    /// D5: removes ended connections that `done` says the adapter is finished with (their
    /// endpoint is gone), remembering how their peers went, and hands their pins to
    /// `unpins` (R7). Returns whether any went.
    pub(crate) fn forget(
        &mut self,
        done: impl Fn(&Connection<K, X, E, CAP>) -> bool,
        unpins: &mut super::unpins::Unpins<CAP>,
        now_ms: u64,
    ) -> bool {
        debug_assert_eq!(
            self.not_open,
            self.conns.iter().filter(|c| !c.is_open()).count(),
            "the count of connections not open"
        );
        if self.not_open == 0 || !self.conns.iter().any(|c| !c.is_open() && done(c)) {
            return false;
        }
        self.touch();
        let mut went = Vec::new();
        self.conns.retain_mut(|c| {
            if c.is_open() || !done(c) {
                return true;
            }
            if let (LinkState::Down(cause), Some(p)) = (c.state, c.peer()) {
                went.push((p, cause));
            }
            unpins.connection_ended(&mut c.session, now_ms);
            false
        });
        self.at.clear();
        self.by_key.clear();
        self.not_open = self.conns.iter().filter(|c| !c.is_open()).count();
        for (i, c) in self.conns.iter().enumerate() {
            self.at.insert(c.id, i);
            (self.by_key.entry(c.key))
                .and_modify(|(_, n)| *n += 1)
                .or_insert((c.id, 1));
        }
        for (peer, cause) in went {
            match self.gone.get_mut(&peer) {
                Some(old) => {
                    if cause.is_some() {
                        *old = cause;
                    }
                }
                None => {
                    if self.gone_order.len() >= GONE_PEERS_MAX {
                        if let Some(oldest) = self.gone_order.pop_front() {
                            self.gone.remove(&oldest);
                            if self.live_to(oldest) == 0 {
                                self.pairs.forget(oldest);
                                self.known.remove(&oldest);
                                self.up.remove(&oldest);
                            }
                        }
                    }
                    self.gone.insert(peer, cause);
                    self.gone_order.push_back(peer);
                }
            }
        }
        self.reindex();
        true
    }
}

/// The proven peer a connection serves, if it is open and established.
fn serves<const CAP: usize, L: Link<CAP>>(link: &L) -> Option<u64> {
    if link.is_open() {
        link.session().peer().map(|p| p.token)
    } else {
        None
    }
}

/// How many open, established connections serve `peer`.
fn live_to<const CAP: usize, L: Link<CAP>>(links: &[L], peer: u64) -> usize {
    links.iter().filter(|l| serves(*l) == Some(peer)).count()
}

/// P4: when a connection to `peer` has just been established, the connections to it that lose
/// (indices into `links`), if more than one serves it. Each connection has a rank both sides
/// compute alike from what both saw in the handshake: a dial that reached another process
/// than the one its HELLO named (a misdial) loses to any other, a redial's (either HELLO says
/// it redials the other) beats any other, then the one opened by the lower token (the
/// simultaneous-connect tie-break); the
/// connections ranked below the best lose, and connections tied at the best are all kept — so
/// however the establishments interleave on the two sides, the best is never closed, on
/// either. A lone connection is kept whoever opened it. The adapter closes each loser with
/// [`CloseReason::Superseded`] and keeps its endpoint open for the linger time (see
/// [`AfterClose::Linger`]).
fn superseded<const CAP: usize, L: Link<CAP>>(
    links: &[L],
    peer: u64,
    out: &mut impl Extend<usize>,
) {
    if live_to(links, peer) < 2 {
        return;
    }
    let rank = |l: &L| {
        let s = l.session();
        Some((
            !s.misdialled(),
            s.redials() || s.peer_redials(),
            s.survives_duplicate()?,
        ))
    };
    let serving = || {
        links
            .iter()
            .enumerate()
            .filter(|(_, l)| serves(*l) == Some(peer))
    };
    let best = serving().filter_map(|(_, l)| rank(l)).max();
    out.extend(serving().filter_map(|(i, l)| (rank(l) < best).then_some(i)));
}

/// One deadline pass over an adapter's connections at adapter time `now_ms` and live time
/// `live`: checks every open connection ([`Deadlines::check`]) and hands `(index, what to
/// do)` to `due` for each that needs something. Returns the adapter time of the earliest
/// deadline left ([`Deadlines::next_ms`]; `u64::MAX` if none): until then, with nothing
/// changed, another pass would find nothing.
fn sweep<const CAP: usize, L: Link<CAP>>(
    links: &mut [L],
    live: u64,
    now_ms: u64,
    liveness: Option<Liveness>,
    due: &mut impl Extend<(usize, Check)>,
) -> u64 {
    let mut quiet_until = u64::MAX;
    for (i, link) in links.iter_mut().enumerate() {
        if !link.is_open() {
            continue;
        }
        let (session, deadlines) = link.deadline_parts();
        match deadlines.check(session, now_ms, live, liveness) {
            Check::Nothing => {}
            check => due.extend([(i, check)]),
        }
        if let Some(at) = deadlines.next_ms(session, now_ms, live, liveness) {
            quiet_until = quiet_until.min(at);
        }
    }
    quiet_until
}

/// What the adapter does with a connection whose peer sent CLOSE with `reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterClose {
    /// The peer settled a simultaneous connect first (P4): take the connection out of service
    /// but keep its endpoint open for the linger time, so what either side sent on it arrives.
    Linger,
    /// The peer could not hear this side ([`CloseReason::Unresponsive`]): what is in flight on
    /// the connection may never finish; end it now (D3), then close.
    AbandonAndClose,
    /// Close in order.
    Close,
}

/// The decision for a peer's CLOSE with `reason`.
pub fn after_peer_close(reason: CloseReason) -> AfterClose {
    match reason {
        CloseReason::Superseded => AfterClose::Linger,
        CloseReason::Unresponsive => AfterClose::AbandonAndClose,
        _ => AfterClose::Close,
    }
}

/// How many bytes a node's connection tables hold ([`Connections::footprint`]): inline and on
/// the heap, from the tables' capacities (what the allocator was asked for, not what it
/// rounded up to). For sizing a node: one connection costs about
/// [`per_connection`](Self::per_connection), and the tables of peers gone are bounded by
/// [`GONE_PEERS_MAX`] and [`REFUSED_MAX`] whatever the number of peers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Connections held (open, handshaking, superseded and lingering, ended and not yet
    /// forgotten).
    pub connections: usize,
    /// Their sessions (handshake state, withdrawal acknowledgements, the peer's directory),
    /// each with what it holds on the heap ([`Session::heap_bytes`]).
    pub sessions: usize,
    /// Of `sessions`: the peers' directories (name → id), one per session.
    pub directories: usize,
    /// The connection table itself (one entry per connection, spare capacity included).
    pub table: usize,
    /// The route cache: each connection's route per library.
    pub route_cache: usize,
    /// The peer index (peer → serving connection) and the handle index.
    pub peer_index: usize,
    /// The pair values given to peers (by peer and by value), and their gaps.
    pub pairs: usize,
    /// What is remembered of peers gone, refused, told `Up`, and where they listened.
    pub gone_peers: usize,
}

impl Footprint {
    /// Every table together.
    pub fn total(&self) -> usize {
        self.grows() + self.gone_peers
    }

    /// The tables that grow with connections (sessions, table, route cache, peer index and
    /// pair values), per connection held; 0 with none.
    pub fn per_connection(&self) -> usize {
        self.grows().checked_div(self.connections).unwrap_or(0)
    }

    fn grows(&self) -> usize {
        self.sessions + self.table + self.route_cache + self.peer_index + self.pairs
    }
}

/// Bytes a `VecDeque` or `Vec` of `cap` elements of `T` asked the allocator for.
fn heap_of<T>(cap: usize) -> usize {
    cap * core::mem::size_of::<T>()
}

impl<K: Eq + Hash, X, E, const CAP: usize> Connections<K, X, E, CAP> {
    /// How many bytes the tables hold now (see [`Footprint`]).
    pub fn footprint(&self) -> Footprint {
        let session = core::mem::size_of::<Session<CAP>>();
        let directory = core::mem::size_of::<crate::session::Directory<CAP>>();
        let (mut sessions, mut directories) = (0, 0);
        for c in &self.conns {
            sessions += session + c.session.heap_bytes();
            directories += directory + c.session.directory().heap_bytes();
        }
        let routes: usize = (self.conns.iter())
            .map(|c| heap_of::<Option<(Route, u64)>>(c.routes.capacity()))
            .sum();
        let p = &self.pairs;
        let gaps = p
            .gaps
            .as_ref()
            .map_or(0, |g| heap_of::<(u32, u32)>(g.capacity()));
        Footprint {
            connections: self.conns.len(),
            sessions,
            directories,
            table: heap_of::<Connection<K, X, E, CAP>>(self.conns.capacity()),
            route_cache: routes,
            peer_index: self.serving.allocation_size()
                + self.at.allocation_size()
                + self.by_key.allocation_size(),
            pairs: p.by_peer.allocation_size() + p.by_value.allocation_size() + gaps,
            gone_peers: self.gone.allocation_size()
                + heap_of::<u64>(self.gone_order.capacity())
                + self.known.allocation_size()
                + self.refused.allocation_size()
                + self.up.allocation_size(),
        }
    }
}

impl<K, X, E, const CAP: usize> Connections<K, X, E, CAP> {
    /// The node goes: every session's pins are given back (see [`super::Unpins::release_all`]).
    pub(crate) fn release_all(
        &mut self,
        registry: &crate::Registry<CAP>,
        unpins: &mut super::unpins::Unpins<CAP>,
    ) {
        unpins.release_all(registry, self.conns.iter_mut().map(|c| &mut *c.session));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::Registry;

    type Table = Connections<u32, (), u8, 64>;
    type Libs = Libraries<'static, 64, u8>;

    #[test]
    fn handles_never_shift_nor_come_back() {
        let reg: &'static Registry<64> = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
        let mut libs = Libs::new();
        let me = Identity::from_seed(&[4; 32]);
        let mut t = Table::new([1, 2]);
        let mut unpins = super::super::Unpins::new();
        let ids: Vec<ConnId> = (0..4u32)
            .map(|k| t.add(k, Role::Initiator, &me, reg.layout(), 0, 0, ()))
            .collect();
        // The first two end and are forgotten: the others' handles still name them.
        t.end(ids[0], None, &mut libs);
        t.end(ids[1], None, &mut libs);
        assert!(t.forget(|_| true, &mut unpins, 0));
        assert!(
            t.get(ids[0]).is_none() && t.get(ids[1]).is_none(),
            "forgotten: none"
        );
        assert_eq!(t.get(ids[2]).map(|c| c.key()), Some(2));
        assert_eq!(t.get(ids[3]).map(|c| c.key()), Some(3));
        assert_eq!(t.find(3, |_| true), Some(ids[3]));
        // A stale handle changes nothing; a new connection gets a new one.
        t.cut_off(ids[0], Some(CloseReason::Normal));
        assert!(t.end(ids[0], None, &mut libs).is_none());
        assert!(t.charge(ids[1], 0, Charge::Control, PeerLimits::default()));
        let new = t.add(9, Role::Acceptor, &me, reg.layout(), 0, 0, ());
        assert!(!ids.contains(&new), "never reused");
        assert_eq!(t.ids(), [ids[2], ids[3], new]);
    }

    /// `find` by key: the index answers as a scan of every connection in order would, with
    /// keys shared by several connections (UCX reuses an endpoint's address), and after ended
    /// ones are forgotten.
    #[test]
    fn find_by_key_agrees_with_a_scan_in_order() {
        let reg: &'static Registry<64> = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
        let mut libs = Libs::new();
        let me = Identity::from_seed(&[5; 32]);
        let mut t = Table::new([3, 4]);
        let mut unpins = super::super::Unpins::new();
        let scan = |t: &Table, key: u32, open: Option<bool>| {
            t.iter()
                .find(|c| c.key() == key && open.is_none_or(|o| c.is_open() == o))
                .map(|c| c.id())
        };
        let check = |t: &Table| {
            for key in 0..8u32 {
                for open in [None, Some(true), Some(false)] {
                    let found = t.find(key, |c| open.is_none_or(|o| c.is_open() == o));
                    assert_eq!(found, scan(t, key, open), "key {key}, open {open:?}");
                }
            }
        };
        // Keys 0..4, then 1 and 2 again (new endpoints at reused addresses), then 1 a third time.
        let mut ids = Vec::new();
        for k in [0u32, 1, 2, 3, 1, 2, 1] {
            ids.push(t.add(k, Role::Acceptor, &me, reg.layout(), 0, 0, ()));
        }
        check(&t);
        assert_eq!(t.find(1, |_| true), Some(ids[1]), "the first on a key");
        // The first on key 1 ends: the second open one answers for open ones.
        t.end(ids[1], None, &mut libs);
        check(&t);
        assert_eq!(t.find(1, |c| c.is_open()), Some(ids[4]));
        assert_eq!(t.find(1, |c| !c.is_open()), Some(ids[1]));
        // Forgotten: the index is rebuilt; key 1 now starts at the second.
        assert!(t.forget(|_| true, &mut unpins, 0));
        check(&t);
        assert_eq!(t.find(1, |_| true), Some(ids[4]));
        assert_eq!(t.find(7, |_| true), None, "a key nobody has");
        t.end(ids[4], None, &mut libs);
        t.end(ids[6], None, &mut libs);
        assert!(t.forget(|_| true, &mut unpins, 0));
        check(&t);
        assert_eq!(t.find(1, |_| true), None, "every connection on key 1 gone");
    }

    #[test]
    fn pair_values_are_a_permutation_and_none_returns_before_the_others() {
        // every value of a small field once per cycle
        for bits in [1u32, 4, 7, 16] {
            let mut seen: Vec<u64> = (0..1u64 << bits)
                .map(|x| permute([3, 9], x, bits))
                .collect();
            seen.sort_unstable();
            assert!(seen.iter().copied().eq(0..1u64 << bits), "{bits} bits");
        }
        // a 16-bit field: forgotten values come back only after every other one was given
        let layout = TagLayout::builder(56, 8).pair(0, 16).build().unwrap();
        let mut t = Table::new([7, 11]);
        let first = t.rx_pair(1, &layout);
        assert_eq!(t.rx_pair(1, &layout), first, "stable per peer");
        t.pairs.forget(1);
        let mut given = std::collections::HashSet::new();
        for peer in 2..65_536u64 {
            let v = t.rx_pair(peer, &layout);
            assert_ne!(v, 0);
            assert!(given.insert(v), "value {v:#x} given twice");
            if peer < 65_535 {
                assert_ne!(v, first, "a forgotten value came back early");
            }
            t.pairs.forget(peer);
        }
        // every value held: the next peer gets none (0), and nothing loops for ever
        let mut full = Table::new([7, 11]);
        for peer in 0..65_535u64 {
            assert_ne!(full.rx_pair(peer, &layout), 0);
        }
        assert_eq!(full.rx_pair(1 << 40, &layout), 0);
    }

    struct Side {
        reg: &'static Registry<64>,
        me: Identity,
        conns: Table,
        libs: Libs,
    }

    fn side(seed: u8) -> Side {
        Side {
            reg: Box::leak(Box::new(Registry::new(TagLayout::DEFAULT))),
            me: Identity::from_seed(&[seed; 32]),
            conns: Table::new([seed as u64, 7]),
            libs: Libs::new(),
        }
    }

    fn connect(a: &mut Side, b: &mut Side, key: u32) -> (ConnId, ConnId) {
        let l = *a.reg.layout();
        let i = a.conns.add(key, Role::Initiator, &a.me, &l, 0, 0, ());
        let j = b.conns.add(key, Role::Acceptor, &b.me, &l, 0, 0, ());
        (i, j)
    }

    /// Delivers what each side's session `i`/`j` has queued to the other, until quiet.
    fn pump(a: &mut Side, i: ConnId, b: &mut Side, j: ConnId) -> Vec<Control> {
        let mut buf = [0u8; wire::MAX_FRAME_LEN];
        let mut out = Vec::new();
        for _ in 0..8 {
            while let Ok(Some(n)) = a
                .conns
                .get_mut(i)
                .unwrap()
                .session_mut()
                .poll_transmit(a.reg, &mut buf)
            {
                out.push(b.conns.on_control(j, &buf[..n], 0, &mut b.libs));
            }
            while let Ok(Some(n)) = b
                .conns
                .get_mut(j)
                .unwrap()
                .session_mut()
                .poll_transmit(b.reg, &mut buf)
            {
                out.push(a.conns.on_control(i, &buf[..n], 0, &mut a.libs));
            }
        }
        out
    }

    #[test]
    fn an_established_connection_routes_a_shared_name_and_tells_listeners_once() {
        let (mut a, mut b) = (side(1), side(2));
        let foo_a = a.libs.register(a.reg, "foo").unwrap();
        let _other = b.libs.register(b.reg, "other").unwrap();
        let foo_b = b.libs.register(b.reg, "foo").unwrap();
        a.libs.listen_peers(foo_a, []).unwrap();
        let tb = b.me.token();
        assert!(matches!(
            a.conns.route(&a.libs, foo_a, tb),
            Err(NodeError::NoConnection { .. })
        ));
        assert_eq!(a.conns.blocked(tb), Ok(Blocked::NoConnection));
        let (i, j) = connect(&mut a, &mut b, 10);
        let got = pump(&mut a, i, &mut b, j);
        assert!(got
            .iter()
            .any(|c| matches!(c, Control::Established { peer, superseded } if *peer == tb && superseded.is_empty())));
        assert_eq!(a.conns.serving(tb), Ok(i));
        let (at, route) = a.conns.route(&a.libs, foo_a, tb).unwrap().unwrap();
        assert_eq!(at, i);
        assert_eq!(route.remote_id(), b.libs.ns(foo_b).unwrap().id());
        assert_eq!(a.libs.peer_event(foo_a), Some(PeerEvent::Up { peer: tb }));
        assert_eq!(a.libs.peer_event(foo_a), None);
        assert_eq!(a.conns.peers(), [tb]);
        // A name the peer lacks: no route (yet); an unknown library: an error.
        let bar = a.libs.register(a.reg, "bar").unwrap();
        a.conns.library_added(bar, &a.libs);
        assert_eq!(a.conns.route(&a.libs, bar, tb), Ok(None));
        assert!(matches!(
            a.conns.route(&a.libs, LibId(99), tb),
            Err(NodeError::NoSuchLibrary)
        ));
    }

    #[test]
    fn of_a_simultaneous_connect_both_sides_keep_the_same_one_and_the_other_lingers() {
        let (mut a, mut b) = (side(1), side(2));
        let (i1, j1) = connect(&mut a, &mut b, 1);
        let (j2, i2) = connect(&mut b, &mut a, 2);
        pump(&mut a, i1, &mut b, j1);
        pump(&mut a, i2, &mut b, j2);
        pump(&mut a, i1, &mut b, j1);
        pump(&mut a, i2, &mut b, j2);
        let (ta, tb) = (a.me.token(), b.me.token());
        assert_eq!(a.conns.live_to(tb), 1);
        assert_eq!(b.conns.live_to(ta), 1);
        let kept_a = a.conns.get(a.conns.serving(tb).unwrap()).unwrap().key();
        let kept_b = b.conns.get(b.conns.serving(ta).unwrap()).unwrap().key();
        assert_eq!(kept_a, kept_b, "both keep the same connection");
        assert_eq!(
            (a.conns)
                .take_lingered(SUPERSEDED_LINGER_MS - 1, &mut a.libs)
                .len(),
            0
        );
        assert_eq!(
            (a.conns)
                .take_lingered(SUPERSEDED_LINGER_MS, &mut a.libs)
                .len(),
            1
        );
        assert_eq!(
            a.conns
                .take_lingered(SUPERSEDED_LINGER_MS, &mut a.libs)
                .len(),
            0,
            "handed out once"
        );
    }

    #[test]
    fn a_peer_whose_connections_all_ended_fails_sends_at_once_and_is_remembered() {
        let (mut a, mut b) = (side(1), side(2));
        let foo = a.libs.register(a.reg, "foo").unwrap();
        a.libs.listen_peers(foo, []).unwrap();
        let (i, j) = connect(&mut a, &mut b, 1);
        pump(&mut a, i, &mut b, j);
        let tb = b.me.token();
        assert_eq!(a.libs.peer_event(foo), Some(PeerEvent::Up { peer: tb }));
        let gone = a.conns.failed(i, 5, &mut a.libs);
        assert_eq!(
            gone,
            Some(PeerGone {
                peer: tb,
                cause: Some(5),
                addr: None,
                told_ours: false,
            })
        );
        assert!(matches!(
            a.libs.peer_event(foo),
            Some(PeerEvent::Down { peer, cause: Some(5), .. }) if peer == tb
        ));
        assert_eq!(
            a.conns.blocked(tb),
            Err(NodeError::PeerDown {
                peer: tb,
                cause: Some(5)
            })
        );
        // A second failure report changes nothing more.
        assert_eq!(a.conns.failed(i, 6, &mut a.libs), None);
        let mut unpins = super::super::Unpins::new();
        assert!(a.conns.forget(|_| true, &mut unpins, 0));
        assert!(a.conns.is_empty());
        assert_eq!(
            a.conns.blocked(tb),
            Err(NodeError::PeerDown {
                peer: tb,
                cause: Some(6)
            }),
            "remembered after the connection is forgotten"
        );
    }

    #[test]
    fn a_protocol_error_is_kept_and_closes_with_its_reason() {
        let (mut a, mut b) = (side(1), side(2));
        let (i, _j) = connect(&mut a, &mut b, 1);
        let got = a.conns.on_control(i, &[0xff; 12], 0, &mut a.libs);
        assert!(matches!(got, Control::ProtocolError(_)));
        assert_eq!(a.conns.protocol_errors().len(), 1);
        assert!(a.conns.get(i).unwrap().closed_for().is_some());
        assert_eq!(
            a.conns.end(i, None, &mut a.libs),
            None,
            "never established: no Down"
        );
        assert!(!a.conns.get(i).unwrap().is_open());
        assert!(matches!(
            a.conns.on_control(i, &[0xff; 12], 0, &mut a.libs),
            Control::Handled
        ));
    }

    #[test]
    fn the_flood_window_counts_each_kind_per_second() {
        let (mut a, mut b) = (side(1), side(2));
        let (i, _) = connect(&mut a, &mut b, 1);
        let limits = PeerLimits {
            control_per_s: 2,
            unwanted_am_per_s: 1,
        };
        assert!(a.conns.charge(i, 0, Charge::Control, limits));
        assert!(a.conns.charge(i, 10, Charge::Control, limits));
        assert!(a.conns.charge(i, 20, Charge::Unwanted, limits));
        assert!(!a.conns.charge(i, 30, Charge::Control, limits));
        assert!(!a.conns.charge(i, 999, Charge::Unwanted, limits));
        assert!(
            a.conns.charge(i, 1000, Charge::Control, limits),
            "a new window"
        );
    }

    #[test]
    fn the_token_hash_depends_on_its_keys() {
        let h = |k| TokenHash::new(k).hash_one(42u64);
        assert_ne!(h([1, 2]), h([3, 2]));
        assert_eq!(h([1, 2]), h([1, 2]));
    }

    struct L {
        open: bool,
        s: Session<64>,
        d: Deadlines,
    }
    impl Link<64> for L {
        fn is_open(&self) -> bool {
            self.open
        }
        fn session(&self) -> &Session<64> {
            &self.s
        }
        fn deadline_parts(&mut self) -> (&mut Session<64>, &mut Deadlines) {
            (&mut self.s, &mut self.d)
        }
    }

    #[test]
    fn of_two_connections_both_sides_supersede_the_same_one() {
        use crate::engine::live::tests::{established, pump, Reg};
        let (ra, rb) = (Reg::new(TagLayout::DEFAULT), Reg::new(TagLayout::DEFAULT));
        // Two connections between the same two processes: a opened one, b the other.
        let (a1, b1) = established(&ra, &rb);
        let (b2, a2) = {
            let mut b = Session::new(Role::Initiator, &Identity::from_seed(&[2; 32]), rb.layout());
            let mut a = Session::new(Role::Acceptor, &Identity::from_seed(&[1; 32]), ra.layout());
            for _ in 0..3 {
                pump(&mut b, &rb, &mut a);
                pump(&mut a, &ra, &mut b);
            }
            (b, a)
        };
        let link = |s| L {
            open: true,
            s,
            d: Deadlines::new(0, 0),
        };
        let mut at_a = [link(a1), link(a2)];
        let at_b = [link(b1), link(b2)];
        let (ta, tb) = (
            Identity::from_seed(&[1; 32]).token(),
            Identity::from_seed(&[2; 32]).token(),
        );
        assert_eq!(live_to(&at_a, tb), 2);
        let (mut la, mut lb) = (Vec::new(), Vec::new());
        superseded(&at_a, tb, &mut la);
        superseded(&at_b, ta, &mut lb);
        assert_eq!(la.len(), 1);
        assert_eq!(la, lb, "both sides drop the same connection");
        // The survivor is the one opened by the lower token.
        let kept = 1 - la[0];
        let opener_is_a = kept == 0;
        assert_eq!(opener_is_a, ta < tb);
        // Once one is out of service, a lone connection is kept.
        at_a[la[0]].open = false;
        assert_eq!(live_to(&at_a, tb), 1);
        let mut none = Vec::new();
        superseded(&at_a, tb, &mut none);
        assert!(none.is_empty());
        assert_eq!(live_to(&at_a, 12345), 0);
    }

    #[test]
    fn a_peer_close_is_answered_by_its_reason() {
        assert_eq!(
            after_peer_close(CloseReason::Superseded),
            AfterClose::Linger
        );
        assert_eq!(
            after_peer_close(CloseReason::Unresponsive),
            AfterClose::AbandonAndClose
        );
        for r in [
            CloseReason::Normal,
            CloseReason::Flood,
            CloseReason::Other(77),
        ] {
            assert_eq!(after_peer_close(r), AfterClose::Close);
        }
    }
}
