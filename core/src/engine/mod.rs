//! Protocol decisions that every adapter makes the same way, made once here (sans-IO: no
//! clock, no transport; the adapter passes the time in and carries out the answer).
//!
//! One [`Engine`] per node (feature `alloc`) holds the tables the decisions are made on:
//! [`Connections`] (sessions, states, deadlines, route caches, the peer index, the peers gone;
//! each connection named by a [`ConnId`] that never shifts nor comes back), [`Libraries`],
//! [`Ops`] (operations, what each waits for — [`Pending`] — and D3's which-operations-end,
//! [`Loss`]), [`Unpins`] (R7), [`Sweep`] (D2), [`Backlog`] (held namespaces). Beside them:
//! the per-connection deadlines ([`Deadlines`], [`Liveness`]), what a peer's CLOSE asks of the
//! adapter ([`after_peer_close`]), the send path ([`Connections::resolve`]), and the types
//! every node shows its users: [`NodeError`] (generic over the transport's error),
//! [`PeerEvent`], [`Counters`], [`LibId`], [`OpId`].
//!
//! What an adapter's `progress` owes the engine: the transport's events, as inputs — a
//! control frame ([`Engine::handle_control`]), an endpoint failure
//! ([`Engine::handle_failed`]), a message charged to its sender ([`Engine::handle_charge`]),
//! time ([`Engine::handle_timeout`]), a request completed ([`Ops::completed`] with the key
//! the transport names it by) — and after each, every [`Action`] that [`Engine::poll_action`] hands out, carried out in that order
//! (send a connection's queued control bytes, close an endpoint in order or at once, end or
//! cancel an operation D3 reaches, a peer proven): so which connections close, which
//! operations end and in which order is decided once, here, for both nodes. Then the
//! operations [`Engine::due_ops`] names — only those, so that a call costs what happened, not
//! what is pending (D6) — and the timed work [`Engine::poll_timeout`] schedules. The order of
//! a `progress` call is the engine's too: every adapter runs the stages of [`PROGRESS`] in
//! that order. Still the nodes' own: how a send or receive is handed to the transport (routed
//! through [`Connections::resolve`]), and the probes of the stray drain and held backlogs.
//!
//! ```
//! use tagspace_core::engine::{Check, Deadlines, Expiry, LiveClock, Liveness, HANDSHAKE_TIMEOUT_MS};
//! use tagspace_core::{wire::Role, Identity, Registry, Session, TagLayout};
//!
//! let reg: Registry<64> = Registry::new(TagLayout::DEFAULT);
//! let me = Identity::from_seed(&[1; 32]);
//! let mut session: Session<64> = Session::new(Role::Initiator, &me, reg.layout());
//! let mut clock = LiveClock::new(0);
//! let mut d = Deadlines::new(0, clock.now());
//! // The peer never answers: at the handshake deadline the connection is to be closed.
//! let now = HANDSHAKE_TIMEOUT_MS;
//! let live = clock.tick(now);
//! let got = d.check(&mut session, now, live, Some(Liveness::default()));
//! assert!(matches!(got, Check::Expired(Expiry::Handshake(_))));
//! ```

use crate::error::{RegistryError, TagError};
use crate::name::Name;
use crate::session::{Phase, Session};
use crate::wire::CloseReason;
use core::fmt;

/// One node's protocol state (feature `alloc`): everything the engine decides with, in one
/// sans-IO value the adapter owns next to its transport. The tables are private: the adapter
/// reads them through getters, changes its own transport state through [`conn_mut`]
/// (a connection's `io`) and its operations through [`ops_mut`], and reports everything else
/// as an input (the `handle_*` methods, [`register`](Self::register), [`release`],
/// [`close`](Self::close), …), after which it carries out what [`poll_action`] asks.
///
/// [`conn_mut`]: Self::conn_mut
/// [`ops_mut`]: Self::ops_mut
/// [`release`]: Self::release
/// [`poll_action`]: Self::poll_action
#[cfg(feature = "alloc")]
pub struct Engine<'r, K, X, T, E, const CAP: usize> {
    /// The registry this node's namespaces and pins are in.
    registry: &'r crate::Registry<CAP>,
    /// The connections (sessions, states, deadlines, route caches, peer index, peers gone).
    conns: Connections<K, X, E, CAP>,
    /// The libraries registered here.
    libs: Libraries<'r, CAP, E>,
    /// The operations started here.
    ops: Ops<T, E>,
    /// R7: ids on their way back to the registry.
    unpins: Unpins<CAP>,
    /// The heartbeat's clock (adapter time counted only while the node progresses).
    live: LiveClock,
    /// The heartbeat's settings (`None`: off).
    liveness: Option<Liveness>,
    /// The per-connection flood limits (D5).
    limits: PeerLimits,
    /// The stray sweep (D2 within D4's bound).
    sweep: Sweep,
    /// Whose queue the worker's is: the node's (strays swept, quarantined ids drained) or a
    /// host's ([`QueueOwner::HOST`]: nothing taken, ids held while anything waits in them).
    owner: QueueOwner,
    /// What the adapter is to do next ([`Engine::poll_action`]).
    actions: actions::Actions<E>,
}

#[cfg(feature = "alloc")]
impl<'r, K: Copy + PartialEq, X, T, E: Copy, const CAP: usize> Engine<'r, K, X, T, E, CAP> {
    /// A node's engine on `registry` at adapter time `now_ms`; `hash_keys`: random per node
    /// (see [`TokenHash`]). Dropping it gives back every pin its sessions hold (R7).
    pub fn new(
        registry: &'r crate::Registry<CAP>,
        hash_keys: [u64; 2],
        now_ms: u64,
        liveness: Option<Liveness>,
        limits: PeerLimits,
    ) -> Self {
        Engine {
            registry,
            conns: Connections::new(hash_keys),
            libs: Libraries::new(),
            ops: Ops::new(),
            unpins: Unpins::new(),
            live: LiveClock::new(now_ms),
            liveness,
            limits,
            sweep: Sweep::new(),
            owner: QueueOwner::Node,
            actions: Default::default(),
        }
    }

    /// The connections.
    pub fn conns(&self) -> &Connections<K, X, E, CAP> {
        &self.conns
    }

    /// Connection `id`, to change its transport state (`io`) or send what its session queued;
    /// `None` once it is forgotten.
    pub fn conn_mut(&mut self, id: ConnId) -> Option<&mut Connection<K, X, E, CAP>> {
        self.conns.get_mut(id)
    }

    /// Every connection's transport state.
    pub fn ios_mut(&mut self) -> impl Iterator<Item = &mut X> + '_ {
        self.conns.iter_mut().map(|c| &mut c.io)
    }

    /// The libraries registered here.
    pub fn libs(&self) -> &Libraries<'r, CAP, E> {
        &self.libs
    }

    /// The libraries, for what concerns each alone (its counters, its Active Messages, its
    /// peer events).
    pub fn libs_mut(&mut self) -> &mut Libraries<'r, CAP, E> {
        &mut self.libs
    }

    /// The operations started here.
    pub fn ops(&self) -> &Ops<T, E> {
        &self.ops
    }

    /// The operations, which the adapter starts, moves along and ends.
    pub fn ops_mut(&mut self) -> &mut Ops<T, E> {
        &mut self.ops
    }

    /// R7's ids on their way back to the registry.
    pub fn unpins(&self) -> &Unpins<CAP> {
        &self.unpins
    }

    /// The stray sweep.
    pub fn sweep(&self) -> &Sweep {
        &self.sweep
    }

    /// Whether the sweep takes id 0's unexpected messages (no legacy code receives them).
    pub fn set_id0_strays(&mut self, take: bool) {
        self.sweep.set_id0_strays(take);
    }

    /// Whose queue the worker's is.
    pub fn owner(&self) -> QueueOwner {
        self.owner
    }

    /// Sets whose queue the worker's is (a host's: nothing is taken from it).
    pub fn set_owner(&mut self, owner: QueueOwner) {
        self.owner = owner;
    }

    /// The heartbeat's settings (`None`: off).
    pub fn liveness(&self) -> Option<Liveness> {
        self.liveness
    }

    /// Changes the heartbeat's settings (`None`: off).
    pub fn set_liveness(&mut self, liveness: Option<Liveness>) {
        self.liveness = liveness;
    }

    /// The per-connection flood limits (D5).
    pub fn limits(&self) -> PeerLimits {
        self.limits
    }

    /// Changes the per-connection flood limits.
    pub fn set_limits(&mut self, limits: PeerLimits) {
        self.limits = limits;
    }

    /// A connection the adapter opened (`Role::Initiator`) or accepted, at adapter time
    /// `now_ms`, with its transport state `io`; its handshake starts (its HELLO is queued).
    pub fn add_conn(
        &mut self,
        key: K,
        role: crate::wire::Role,
        identity: &crate::Identity,
        layout: &crate::TagLayout,
        now_ms: u64,
        io: X,
    ) -> ConnId {
        let live = self.live.now();
        self.conns
            .add(key, role, identity, layout, now_ms, live, io)
    }

    /// Registers library `name`; routes to it are looked up from now on.
    pub fn register(&mut self, name: &str) -> Result<LibId, NodeError<E>> {
        let lib = self.libs.register(self.registry, name)?;
        self.conns.library_added(lib, &self.libs);
        Ok(lib)
    }

    /// `lib` starts hearing of peers coming up and going down; the peers up now at once.
    pub fn listen(&mut self, lib: LibId) -> Result<(), NodeError<E>> {
        let up = self.conns.peers();
        self.libs.listen_peers(lib, up)
    }

    /// The pair value this node gives `peer` (made now if need be): what `peer`'s tags carry
    /// here, for an exact receive from it.
    pub fn rx_pair(&mut self, peer: u64, layout: &crate::TagLayout) -> u32 {
        self.conns.rx_pair(peer, layout)
    }

    /// R7: a withdrawal acknowledgement tag arrived; `false` if nobody's withdrawal (among the
    /// connections `usable` accepts) waits for it — a stray.
    pub fn handle_ack_tag(
        &mut self,
        layout: &crate::TagLayout,
        tag: u64,
        usable: impl Fn(&X) -> bool,
    ) -> bool {
        self.conns.claim_ack_tag(layout, tag, usable)
    }

    /// D5: forgets ended connections that `done` says the adapter is finished with (their
    /// endpoint is gone); their pins go on their way back to the registry (R7).
    pub fn forget_ended(&mut self, done: impl Fn(&Connection<K, X, E, CAP>) -> bool, now_ms: u64) {
        self.conns.forget(done, &mut self.unpins, now_ms);
    }

    /// The tag for `payload` in `lib`'s namespace at `peer`, and the connection serving it
    /// ([`Connections::route_tag`]).
    pub fn route_tag(
        &self,
        lib: LibId,
        peer: u64,
        payload: u64,
    ) -> Result<Option<RouteHit<'_, K, X, E, CAP>>, RouteMiss> {
        self.conns.route_tag(&self.libs, lib, peer, payload)
    }

    /// R7's last step, one pass: collects the withdrawals peers confirmed, then gives back
    /// every id that is due, drained or looked at first as [`owner`](Self::owner) says, within
    /// [`STRAY_PROBES_PER_CALL`] probes ([`Unpins::run`]).
    pub fn unpin_due(&mut self, now_ms: u64, queue: &mut impl StrayQueue) -> UnpinPass {
        let confirmed = self.unpins.collect_confirmed(self.conns.as_mut_slice());
        let budget = STRAY_PROBES_PER_CALL;
        (self.unpins).run(self.registry, now_ms, self.owner, budget, confirmed, queue)
    }

    /// Whether a stray sweep pass is due at `now_ms` (never on a host's worker: the host's
    /// libraries own every tag tagspace does not).
    pub fn sweep_due(&mut self, now_ms: u64) -> bool {
        self.owner == QueueOwner::Node && self.sweep.due(now_ms)
    }

    /// One stray sweep pass within [`STRAY_PROBES_PER_CALL`] probes ([`Sweep::pass`]): (strays
    /// taken, head looks, id probes); nothing on a host's worker.
    pub fn sweep_pass(
        &mut self,
        queue: &mut impl QueueHead,
        out_of_time: impl Fn() -> bool,
    ) -> (u64, u64, u64) {
        if self.owner != QueueOwner::Node {
            return (0, 0, 0);
        }
        let (sweep, registry) = (&mut self.sweep, self.registry);
        self.conns.with_pair_check(registry.layout(), |pairs| {
            sweep.pass(registry, STRAY_PROBES_PER_CALL, queue, pairs, out_of_time)
        })
    }

    /// Releases library `lib` (its namespace goes when the returned value is dropped: the
    /// adapter first removes its AM handlers and cancels its receives); no route leads to it
    /// any more.
    pub fn release(&mut self, lib: LibId) -> Option<Library<'r, CAP, E>>
    where
        E: Clone,
    {
        self.conns.library_released(lib);
        self.libs.remove(lib)
    }

    /// When the node next has something time-driven to do, in adapter time (the sans-IO
    /// `poll_timeout`): a connection's handshake, acknowledgement or heartbeat deadline, a
    /// superseded connection's linger end, an ended connection's pins coming due, a waiting
    /// send's deadline, the next stray sweep (not on a host's worker, which is never swept).
    /// `None`: nothing is timed. An adapter that sleeps between events wakes by then and calls
    /// its `progress`.
    pub fn poll_timeout(&self, now_ms: u64) -> Option<u64>
    where
        T: Pending,
    {
        let sweep = (self.owner == QueueOwner::Node).then_some(&self.sweep);
        let live_ms = self.live.now();
        let conns = self.conns.iter().filter_map(|c| match c.state() {
            LinkState::Open => c
                .deadlines()
                .next_ms(c.session(), now_ms, live_ms, self.liveness),
            LinkState::Superseded { until_ms } => Some(until_ms),
            LinkState::Down(_) => None,
        });
        conns
            .chain(self.ops.next_due(self.conns.epoch()))
            .chain(self.unpins.next_due())
            .chain(sweep.and_then(Sweep::next_ms))
            .min()
    }

    /// The running operations to move along at `now_ms` (D6, [`Ops::due`]): those their
    /// transport woke, the sends waiting for a route if the routes changed, and those whose
    /// deadline passed — never every pending one.
    pub fn due_ops(&mut self, now_ms: u64) -> alloc::vec::Vec<OpId>
    where
        T: Pending,
    {
        self.ops.due(now_ms, self.conns.epoch())
    }

    /// The matcher a receive for `payload` in `lib`'s namespace posts: from `peer` (exact, the
    /// pair value this node gives it, made now if need be) or from any peer (the pair field
    /// free).
    pub fn recv_matcher(
        &mut self,
        layout: &crate::TagLayout,
        lib: LibId,
        from: Option<u64>,
        payload: u64,
    ) -> Result<crate::Matcher, NodeError<E>> {
        let ns = self.libs.ns(lib)?;
        Ok(match from {
            Some(peer) => ns.matcher_from(self.conns.rx_pair(peer, layout), payload)?,
            None => ns.matcher_any_peer(payload)?,
        })
    }

    /// Where waiting send `w` goes now, or why it waits on ([`Connections::resolve`]).
    pub fn resolve(&self, w: &Waiting) -> Result<Resolved, NodeError<E>>
    where
        E: Clone,
    {
        self.conns.resolve(&self.libs, w.lib, w.peer, w.target)
    }
}

#[cfg(feature = "alloc")]
impl<'r, K, X, T, E, const CAP: usize> Drop for Engine<'r, K, X, T, E, CAP> {
    /// The node goes (its transport with it, so nothing more arrives for its ids): every pin
    /// its sessions hold, and every one on its way back, is given back now (R7) — whether or
    /// not the adapter closed its connections first.
    fn drop(&mut self) {
        self.conns.release_all(self.registry, &mut self.unpins);
    }
}

#[cfg(feature = "alloc")]
mod actions;
#[cfg(feature = "alloc")]
pub use actions::{Action, CloseHow, Stage, Why, PROGRESS};
#[cfg(feature = "alloc")]
mod backlog;
#[cfg(feature = "alloc")]
pub use backlog::{Backlog, BacklogLimit, Held, HoldPass, HoldQueue, HOLD_LOOKS_PER_CALL};
#[cfg(feature = "alloc")]
mod conns;
#[cfg(feature = "alloc")]
pub use conns::{
    Blocked, Charge, ConnId, Connection, Connections, Control, LinkState, PeerGone, PeerLimits,
    RouteHit, RouteMiss, TokenHash, TokenHasher, GONE_PEERS_MAX, PROTOCOL_ERRORS_KEPT,
    SUPERSEDED_LINGER_MS,
};
#[cfg(feature = "alloc")]
mod libraries;
#[cfg(feature = "alloc")]
pub use libraries::{AmDelivery, Libraries, Library};
#[cfg(feature = "alloc")]
mod ops;
#[cfg(feature = "alloc")]
pub use ops::{Ending, Loss, Next, Ops, Outcome, Pending, Waits};
#[cfg(feature = "alloc")]
mod sends;
#[cfg(feature = "alloc")]
pub use sends::{Dest, Resolved, Target, Waiting};
mod strays;
#[cfg(feature = "alloc")]
pub use strays::pair_gaps;
pub use strays::{
    carries_pair, is_owned, PairCheck, QueueHead, StrayQueue, Sweep, DRAIN_INTERVAL_MS,
    GAP_PROBES_PER_SWEEP, STRAY_TAKES_PER_CALL,
};
#[cfg(feature = "alloc")]
mod unpins;
#[cfg(feature = "alloc")]
pub use unpins::{QueueOwner, UnpinPass, Unpins};

/// A library's handle inside one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LibId(pub usize);

/// An operation started on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// Per-namespace counters, readable by the application.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Tag messages and AMs sent.
    pub sent: u64,
    /// Tag messages and AMs received.
    pub received: u64,
    /// Operations that failed.
    pub failed: u64,
}

/// Why a node operation failed; `E` is the transport's error (UCX's, or the mock fabric's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeError<E> {
    /// The transport reported an error (a peer failure says so).
    Transport(E),
    /// No open connection to that peer.
    NoConnection {
        /// The peer's process token.
        peer: u64,
    },
    /// The connection to the peer failed or was closed while the operation waited (D3).
    PeerDown {
        /// The peer's process token.
        peer: u64,
        /// What the transport said, if it was a failure rather than a close.
        cause: Option<E>,
    },
    /// The peer did not register the name before the deadline (P2).
    PeerLacksNamespace {
        /// The name.
        name: Name,
        /// The peer's process token.
        peer: u64,
        /// How long we waited.
        waited_ms: u64,
    },
    /// Building a tag failed.
    Tag(TagError),
    /// The registry refused.
    Registry(RegistryError),
    /// No such library handle (released, or never registered here).
    NoSuchLibrary,
    /// The call does not fit the node's state or mode (e.g. attaching an endpoint twice, or
    /// a listener on a worker a host owns); the text says what was wrong.
    Usage(&'static str),
}

impl<E: fmt::Display> fmt::Display for NodeError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::Transport(e) => write!(f, "transport: {e}"),
            NodeError::NoConnection { peer } => write!(f, "no open connection to peer {peer:#x}"),
            NodeError::PeerDown { peer, cause } => match cause {
                Some(e) => write!(f, "connection to peer {peer:#x} failed: {e}"),
                None => write!(f, "connection to peer {peer:#x} was closed"),
            },
            NodeError::PeerLacksNamespace {
                name,
                peer,
                waited_ms,
            } => write!(
                f,
                "peer {peer:#x} has not registered namespace \"{name}\" (waited {waited_ms} ms)"
            ),
            NodeError::Tag(e) => e.fmt(f),
            NodeError::Registry(e) => e.fmt(f),
            NodeError::NoSuchLibrary => f.write_str("no such library handle"),
            NodeError::Usage(what) => write!(f, "misuse: {what}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> core::error::Error for NodeError<E> {}

impl<E> From<TagError> for NodeError<E> {
    fn from(e: TagError) -> Self {
        NodeError::Tag(e)
    }
}

impl<E> From<RegistryError> for NodeError<E> {
    fn from(e: RegistryError) -> Self {
        NodeError::Registry(e)
    }
}

/// A change in the set of peers, told to every library that listens; `E` is the transport's
/// error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerEvent<E> {
    /// A connection to this peer is established (its directory is known).
    Up {
        /// The peer's token.
        peer: u64,
    },
    /// The connection to this peer is gone.
    Down {
        /// The peer's token.
        peer: u64,
        /// The transport's error if it failed; `None` for a close.
        cause: Option<E>,
        /// The reason in the CLOSE frame that ended it, whichever side sent it (e.g.
        /// [`CloseReason::Unresponsive`] from the heartbeat); `None` if no CLOSE was exchanged.
        reason: Option<CloseReason>,
    },
}

/// How many probes of the transport's queue (each may scan all of it) one drain pass makes at
/// most (D4): a flood of strays is taken over several calls, never all in one.
pub const STRAY_PROBES_PER_CALL: u32 = 32;

/// How long (ms) a new connection may take to complete its handshake (HELLOs and PROOFs): a
/// peer that never says hello, or never proves the identity it claimed (P6), cannot keep a
/// connection (and its session's memory) for ever (D5).
pub const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// How long (ms) a peer may leave this node's withdrawals unacknowledged, with none of them
/// arriving meanwhile, before its connection is closed (R7: it would keep ids quarantined).
pub const ACK_TIMEOUT_MS: u64 = 30_000;
/// R7: how long (ms) the ids a connection had pinned stay quarantined after the connection
/// ended (closed by either side, superseded, or failed). Until the peer has seen the end it may
/// still send to them, and a transport can deliver what it sent before — over shared memory even
/// after the peer died; meanwhile such a message lands in a quarantined id and is drained as a
/// stray instead of reaching a name that took the id next. (Found by the `network` fuzz target
/// as a route to an id the closing side had already freed.) Confirmed withdrawals are not
/// delayed: the peer's acknowledgement came after everything it sent to the id.
pub const CLOSED_PIN_LINGER_MS: u64 = 2_000;

/// The pins of ended connections, held for [`CLOSED_PIN_LINGER_MS`] (R7). Per id: how many
/// pins wait and until when (an id pinned by several ended connections waits for the last of
/// them). No allocation: one slot per registry id.
pub struct ClosedPins<const CAP: usize> {
    until: [u64; CAP],
    count: [u32; CAP],
    held: u32,
}

impl<const CAP: usize> Default for ClosedPins<CAP> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const CAP: usize> ClosedPins<CAP> {
    /// Nothing held.
    pub const fn new() -> Self {
        ClosedPins {
            until: [0; CAP],
            count: [0; CAP],
            held: 0,
        }
    }

    /// Holds the pins a connection that ended at `now_ms` gave back (`Session::finish`).
    pub fn hold(&mut self, ids: &[u16], now_ms: u64) {
        let until = now_ms.saturating_add(CLOSED_PIN_LINGER_MS);
        for &id in ids {
            if let Some(c) = self.count.get_mut(id as usize) {
                *c += 1;
                self.until[id as usize] = until;
                self.held += 1;
            }
        }
    }

    /// Hands `unpin` each pin whose linger has passed at `now_ms` (once per pin held).
    pub fn take_due(&mut self, now_ms: u64, mut unpin: impl FnMut(u16)) {
        if self.held == 0 {
            return;
        }
        for id in 0..CAP {
            if self.count[id] > 0 && now_ms >= self.until[id] {
                for _ in 0..self.count[id] {
                    unpin(id as u16);
                }
                self.held -= self.count[id];
                self.count[id] = 0;
            }
        }
    }

    /// When the next held pin's linger ends (adapter time), if any is held.
    pub fn next_due(&self) -> Option<u64> {
        (self.held > 0)
            .then(|| {
                (0..CAP)
                    .filter(|&id| self.count[id] > 0)
                    .map(|id| self.until[id])
                    .min()
            })
            .flatten()
    }

    /// Hands `unpin` every pin held (the node is going away: nothing more can arrive).
    pub fn take_all(&mut self, unpin: impl FnMut(u16)) {
        self.take_due(u64::MAX, unpin);
    }
}

/// The most one gap between an adapter's `progress` calls adds to the heartbeat's clock
/// ([`LiveClock`]): a peer's PONG can only be handled while the adapter progresses, so time it
/// spends away (computing, stopped, descheduled) is not held against the peer.
pub const LIVENESS_TICK_MAX_MS: u64 = 1000;

/// The heartbeat: every established connection carries a PING each `interval_ms`, and a PING
/// not answered within `timeout_ms` closes the connection ([`CloseReason::Unresponsive`]).
///
/// Transports notice a peer that died; this notices a connection that stopped working while
/// both processes live: a peer that stopped calling `progress`, or a process that no longer
/// receives anything (UCX's shared-memory FIFO stays stuck for good when a sender is killed
/// between reserving a slot and filling it; see the README). Time is counted on a
/// [`LiveClock`]. The contract it adds: **a process must call `progress` at least once per
/// `timeout_ms`**, or its peers cut it off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Liveness {
    /// How often a PING goes out on an established connection (after the last one's PONG).
    pub interval_ms: u64,
    /// How long a PING may wait for its PONG before the connection is closed.
    pub timeout_ms: u64,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            interval_ms: 1000,
            timeout_ms: 30_000,
        }
    }
}

/// The heartbeat's clock: the adapter's clock, counted only while the adapter progresses —
/// each gap between two [`tick`](Self::tick)s adds at most [`LIVENESS_TICK_MAX_MS`].
#[derive(Clone, Copy, Debug)]
pub struct LiveClock {
    live_ms: u64,
    last_ms: u64,
}

impl LiveClock {
    /// A clock at 0, started at adapter time `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        LiveClock {
            live_ms: 0,
            last_ms: now_ms,
        }
    }

    /// Moves to adapter time `now_ms` (call once per `progress`); returns the new live time.
    /// A clock that went backwards adds nothing.
    pub fn tick(&mut self, now_ms: u64) -> u64 {
        self.live_ms += now_ms
            .saturating_sub(self.last_ms)
            .min(LIVENESS_TICK_MAX_MS);
        self.last_ms = self.last_ms.max(now_ms);
        self.live_ms
    }

    /// The live time now (ms).
    pub fn now(&self) -> u64 {
        self.live_ms
    }
}

/// Why a connection's deadline closed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// The handshake did not complete in [`HANDSHAKE_TIMEOUT_MS`]; the reason to send.
    Handshake(CloseReason),
    /// Withdrawals left unacknowledged for [`ACK_TIMEOUT_MS`] (R7).
    Acks,
    /// A PING unanswered for [`Liveness::timeout_ms`]. What is in flight on the connection
    /// may never finish: the adapter ends it now (D3), as for a failed endpoint.
    Unresponsive,
}

impl Expiry {
    /// The reason the CLOSE carries.
    pub fn reason(self) -> CloseReason {
        match self {
            Expiry::Handshake(r) => r,
            Expiry::Acks => CloseReason::ProtocolError,
            Expiry::Unresponsive => CloseReason::Unresponsive,
        }
    }
}

/// What [`Deadlines::check`] asks of the adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Nothing.
    Nothing,
    /// A PING was queued on the session: flush the connection's control frames.
    PingQueued,
    /// The connection is to be closed with [`Expiry::reason`]: the adapter closes the session
    /// with it, flushes, and closes the endpoint (ending what is in flight first if
    /// [`Expiry::Unresponsive`]).
    Expired(Expiry),
}

/// One connection's deadlines: the handshake, the withdrawal acknowledgements, the heartbeat.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    opened_ms: u64,
    ack_wait_since: Option<u64>,
    next_ping_ms: u64,
    ping_ms: u64,
}

impl Deadlines {
    /// A connection opened at adapter time `now_ms`, live time `live_ms`.
    pub fn new(now_ms: u64, live_ms: u64) -> Self {
        Deadlines {
            opened_ms: now_ms,
            ack_wait_since: None,
            next_ping_ms: live_ms,
            ping_ms: live_ms,
        }
    }

    /// One of this connection's withdrawals was acknowledged: the peer is answering, so its
    /// acknowledgement deadline starts over.
    pub fn acks_arrived(&mut self) {
        self.ack_wait_since = None;
    }

    /// When [`check`](Self::check) next has something to do for this connection, in adapter
    /// time, if `progress` keeps being called (live time then moves with adapter time):
    /// the handshake deadline, the acknowledgement deadline, the next PING or the PONG's.
    pub fn next_ms<const CAP: usize>(
        &self,
        session: &Session<CAP>,
        now_ms: u64,
        live_ms: u64,
        liveness: Option<Liveness>,
    ) -> Option<u64> {
        if !session.is_established() {
            return Some(self.opened_ms.saturating_add(HANDSHAKE_TIMEOUT_MS));
        }
        let acks = (session.awaiting_acks() > 0).then(|| {
            self.ack_wait_since
                .unwrap_or(now_ms)
                .saturating_add(ACK_TIMEOUT_MS)
        });
        let heartbeat = liveness.map(|l| {
            let live_at = if session.ping_outstanding() {
                self.ping_ms.saturating_add(l.timeout_ms)
            } else {
                self.next_ping_ms
            };
            now_ms.saturating_add(live_at.saturating_sub(live_ms))
        });
        [acks, heartbeat].into_iter().flatten().min()
    }

    /// The deadlines of an open connection at adapter time `now_ms` and live time `live_ms`
    /// (see [`LiveClock`]); `liveness: None` turns the heartbeat off. Call it on every
    /// `progress` for every open connection.
    pub fn check<const CAP: usize>(
        &mut self,
        session: &mut Session<CAP>,
        now_ms: u64,
        live_ms: u64,
        liveness: Option<Liveness>,
    ) -> Check {
        if !session.is_established() {
            if now_ms < self.opened_ms.saturating_add(HANDSHAKE_TIMEOUT_MS) {
                return Check::Nothing;
            }
            // A peer that claimed a key and never proved it is told so.
            return Check::Expired(Expiry::Handshake(match session.phase() {
                Phase::Proving => CloseReason::Unproven,
                _ => CloseReason::ProtocolError,
            }));
        }
        if session.awaiting_acks() == 0 {
            self.ack_wait_since = None;
        } else if now_ms
            >= self
                .ack_wait_since
                .get_or_insert(now_ms)
                .saturating_add(ACK_TIMEOUT_MS)
        {
            return Check::Expired(Expiry::Acks);
        }
        let Some(l) = liveness else {
            return Check::Nothing;
        };
        if session.ping_outstanding() {
            if live_ms >= self.ping_ms.saturating_add(l.timeout_ms) {
                return Check::Expired(Expiry::Unresponsive);
            }
        } else if live_ms >= self.next_ping_ms && session.ping() {
            self.ping_ms = live_ms;
            self.next_ping_ms = live_ms.saturating_add(l.interval_ms);
            return Check::PingQueued;
        }
        Check::Nothing
    }
}

/// An adapter's connection, as the engine sees it.
pub trait Link<const CAP: usize> {
    /// Whether the connection is in service (deadlines apply only then; superseded, closed and
    /// failed connections are not).
    fn is_open(&self) -> bool;
    /// Its session.
    fn session(&self) -> &Session<CAP>;
    /// Its session and deadlines.
    fn deadline_parts(&mut self) -> (&mut Session<CAP>, &mut Deadlines);
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
pub fn live_to<const CAP: usize, L: Link<CAP>>(links: &[L], peer: u64) -> usize {
    links.iter().filter(|l| serves(*l) == Some(peer)).count()
}

/// P4: when a connection to `peer` has just been established, the connections to it that lose
/// the simultaneous-connect tie-break (indices into `links`), if more than one serves it. Both
/// sides compute the same answer from the proven tokens; a lone connection is kept whoever
/// opened it. The adapter closes each with [`CloseReason::Superseded`] and keeps its endpoint
/// open for the linger time (see [`AfterClose::Linger`]).
pub fn superseded<const CAP: usize, L: Link<CAP>>(
    links: &[L],
    peer: u64,
    out: &mut impl Extend<usize>,
) {
    if live_to(links, peer) < 2 {
        return;
    }
    out.extend(links.iter().enumerate().filter_map(|(i, l)| {
        (serves(l) == Some(peer) && l.session().survives_duplicate() == Some(false)).then_some(i)
    }));
}

/// One deadline pass over an adapter's connections at adapter time `now_ms`: moves `clock`,
/// checks every open connection ([`Deadlines::check`]) and hands `(index, what to do)` to
/// `due` for each that needs something. Call it once per `progress`.
pub fn sweep<const CAP: usize, L: Link<CAP>>(
    links: &mut [L],
    clock: &mut LiveClock,
    now_ms: u64,
    liveness: Option<Liveness>,
    due: &mut impl Extend<(usize, Check)>,
) {
    let live = clock.tick(now_ms);
    for (i, link) in links.iter_mut().enumerate() {
        if !link.is_open() {
            continue;
        }
        let (session, deadlines) = link.deadline_parts();
        match deadlines.check(session, now_ms, live, liveness) {
            Check::Nothing => {}
            check => due.extend([(i, check)]),
        }
    }
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::identity::Identity;
    use crate::wire::{self, Role};
    use crate::{Registry, TagLayout};

    type Reg = Registry<64>;

    fn pump(from: &mut Session<64>, fr: &Reg, to: &mut Session<64>) -> usize {
        let mut buf = [0u8; 1024];
        let mut n = 0;
        while let Some(len) = from.poll_transmit(fr, &mut buf).unwrap() {
            to.handle(&buf[..len]).unwrap();
            n += 1;
        }
        n
    }

    fn established(ra: &Reg, rb: &Reg) -> (Session<64>, Session<64>) {
        let mut a = Session::new(Role::Initiator, &Identity::from_seed(&[1; 32]), ra.layout());
        let mut b = Session::new(Role::Acceptor, &Identity::from_seed(&[2; 32]), rb.layout());
        for _ in 0..3 {
            pump(&mut a, ra, &mut b);
            pump(&mut b, rb, &mut a);
        }
        assert!(a.is_established() && b.is_established());
        (a, b)
    }

    #[test]
    fn the_live_clock_caps_each_gap_and_never_goes_back() {
        let mut c = LiveClock::new(100);
        assert_eq!(c.tick(400), 300);
        assert_eq!(c.tick(60_400), 300 + LIVENESS_TICK_MAX_MS);
        assert_eq!(c.tick(50_000), 1300, "backwards adds nothing");
        assert_eq!(c.tick(60_500), 1400);
        assert_eq!(c.now(), 1400);
    }

    #[test]
    fn handshake_deadline_names_an_unproven_claim() {
        let ra = Reg::new(TagLayout::DEFAULT);
        let mut s: Session<64> =
            Session::new(Role::Acceptor, &Identity::from_seed(&[1; 32]), ra.layout());
        let mut d = Deadlines::new(5, 0);
        let live = Some(Liveness::default());
        assert_eq!(
            d.check(&mut s, HANDSHAKE_TIMEOUT_MS + 4, 0, live),
            Check::Nothing
        );
        assert_eq!(
            d.check(&mut s, HANDSHAKE_TIMEOUT_MS + 5, 0, live),
            Check::Expired(Expiry::Handshake(CloseReason::ProtocolError))
        );
        // A HELLO claiming a key, no PROOF: Proving, and the reason says so.
        let other = Identity::from_seed(&[9; 32]);
        let mut buf = [0u8; 256];
        let n = wire::HelloEncoder::new(
            &mut buf,
            ra.layout().fingerprint(),
            Role::Initiator,
            ra.layout().namespace_field().width() as u8,
            other.public_key(),
            &[3; 16],
        )
        .unwrap()
        .finish();
        s.handle(&buf[..n]).unwrap();
        assert_eq!(
            d.check(&mut s, HANDSHAKE_TIMEOUT_MS + 5, 0, live),
            Check::Expired(Expiry::Handshake(CloseReason::Unproven))
        );
        assert_eq!(
            Expiry::Handshake(CloseReason::Unproven).reason(),
            CloseReason::Unproven
        );
    }

    #[test]
    fn a_ping_goes_out_each_interval_and_an_unanswered_one_expires() {
        let (ra, rb) = (Reg::new(TagLayout::DEFAULT), Reg::new(TagLayout::DEFAULT));
        let (mut a, mut b) = established(&ra, &rb);
        let l = Liveness {
            interval_ms: 1000,
            timeout_ms: 5000,
        };
        let mut d = Deadlines::new(0, 0);
        assert_eq!(d.check(&mut a, 0, 0, Some(l)), Check::PingQueued);
        assert_eq!(d.check(&mut a, 10, 10, Some(l)), Check::Nothing);
        pump(&mut a, &ra, &mut b);
        pump(&mut b, &rb, &mut a);
        assert_eq!(
            d.check(&mut a, 999, 999, Some(l)),
            Check::Nothing,
            "answered; the next is due at 1000"
        );
        assert_eq!(d.check(&mut a, 1000, 1000, Some(l)), Check::PingQueued);
        // Never answered: the adapter time alone does not expire it, the live time does.
        assert_eq!(d.check(&mut a, 999_999, 5999, Some(l)), Check::Nothing);
        assert_eq!(
            d.check(&mut a, 999_999, 6000, Some(l)),
            Check::Expired(Expiry::Unresponsive)
        );
        assert_eq!(d.check(&mut a, 999_999, 6000, None), Check::Nothing);
    }

    #[test]
    fn unacknowledged_withdrawals_expire_unless_acks_keep_coming() {
        let (ra, rb) = (Reg::new(TagLayout::DEFAULT), Reg::new(TagLayout::DEFAULT));
        let ns = ra.register("gone").unwrap();
        let (mut a, mut b) = established(&ra, &rb);
        drop(ns);
        pump(&mut a, &ra, &mut b); // the WITHDRAW; b's acknowledgement is never delivered
        assert_eq!(a.awaiting_acks(), 1);
        let mut d = Deadlines::new(0, 0);
        assert_eq!(d.check(&mut a, 100, 0, None), Check::Nothing);
        assert_eq!(
            d.check(&mut a, 100 + ACK_TIMEOUT_MS - 1, 0, None),
            Check::Nothing
        );
        d.acks_arrived();
        assert_eq!(
            d.check(&mut a, 100 + ACK_TIMEOUT_MS, 0, None),
            Check::Nothing,
            "an acknowledgement restarted the wait"
        );
        assert_eq!(
            d.check(&mut a, 100 + 2 * ACK_TIMEOUT_MS, 0, None),
            Check::Expired(Expiry::Acks)
        );
        assert_eq!(Expiry::Acks.reason(), CloseReason::ProtocolError);
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
        extern crate std;
        use std::vec::Vec;
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

    #[test]
    fn closed_pins_wait_for_the_linger_and_the_last_connection() {
        let mut p: ClosedPins<8> = ClosedPins::new();
        let mut out = [0u32; 8];
        p.hold(&[3, 5], 100);
        p.hold(&[3], 1_000);
        p.hold(&[99], 100); // outside the registry: ignored
        p.take_due(100 + CLOSED_PIN_LINGER_MS - 1, |id| out[id as usize] += 1);
        assert_eq!(out, [0; 8]);
        p.take_due(100 + CLOSED_PIN_LINGER_MS, |id| out[id as usize] += 1);
        assert_eq!(
            (out[3], out[5]),
            (0, 1),
            "id 3 waits for its later connection"
        );
        p.take_due(1_000 + CLOSED_PIN_LINGER_MS, |id| out[id as usize] += 1);
        assert_eq!((out[3], out[5]), (2, 1), "one unpin per pin");
        p.hold(&[1], 0);
        p.take_all(|id| out[id as usize] += 1);
        assert_eq!(out[1], 1);
    }

    /// A send waiting for a route until this deadline.
    #[cfg(feature = "alloc")]
    impl Pending for u64 {
        fn route_deadline(&self) -> Option<u64> {
            Some(*self)
        }
        fn request(&self) -> Option<u64> {
            None
        }
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn poll_timeout_names_the_earliest_timed_event() {
        extern crate std;
        let reg: &'static Reg =
            std::boxed::Box::leak(std::boxed::Box::new(Reg::new(TagLayout::DEFAULT)));
        let me = Identity::from_seed(&[1; 32]);
        let mut e: Engine<'static, u32, (), u64, (), 64> =
            Engine::new(reg, [1, 2], 100, None, PeerLimits::default());
        // A host's worker is never swept: nothing else is timed yet.
        e.owner = QueueOwner::HOST;
        assert_eq!(e.poll_timeout(100), None, "nothing timed");
        e.conns
            .add(7, Role::Initiator, &me, reg.layout(), 100, 0, ());
        let handshake = 100 + HANDSHAKE_TIMEOUT_MS;
        assert_eq!(e.poll_timeout(150), Some(handshake));
        let op = e.ops.start(Next::Wait(500));
        assert_eq!(e.poll_timeout(150), Some(500), "a waiting send's deadline");
        assert!(e.ops.take(op).is_none());
        assert!(!e.sweep_due(150), "never on a host's worker");
        e.owner = QueueOwner::Node;
        assert_eq!(e.poll_timeout(150), Some(0), "a first sweep is due");
        let mut q = NoQueue;
        while e.sweep_due(150) {
            assert_eq!(e.poll_timeout(150), Some(0), "under way");
            e.sweep_pass(&mut q, || false);
        }
        assert_eq!(e.poll_timeout(150), Some(150 + DRAIN_INTERVAL_MS));
    }

    #[cfg(feature = "alloc")]
    struct NoQueue;
    #[cfg(feature = "alloc")]
    impl StrayQueue for NoQueue {
        fn take_one(&mut self, _: u16) -> bool {
            false
        }
        fn waits(&mut self, _: u16) -> bool {
            false
        }
    }
    #[cfg(feature = "alloc")]
    impl QueueHead for NoQueue {
        fn oldest_tag(&mut self) -> Option<u64> {
            None
        }
        fn take_oldest(&mut self, _: u16, _: bool) -> bool {
            false
        }
        fn take_matching(&mut self, _: u64, _: u64, _: u16, _: bool) -> bool {
            false
        }
        fn first(&mut self, _: u64, _: u64) -> Option<u64> {
            None
        }
    }
}
