//! Protocol decisions that every adapter makes the same way, made once here (sans-IO: no
//! clock, no transport; the adapter passes the time in and carries out the answer).
//!
//! **For adapter authors.** A runtime that uses tagspace through a node (the UCX adapter's
//! `Node`, the C ABI, the Python package) never names anything here but the types a node shows
//! it ([`NodeError`], [`PeerEvent`], [`Counters`], [`LibId`], [`OpId`]); this module is what
//! a new transport under tagspace implements against.
//!
//! One [`Engine`] per node (feature `alloc`) holds the tables the decisions are made on:
//! [`Connections`] (sessions, states, deadlines, route caches, the peer index, the peers gone;
//! each connection named by a [`ConnId`] that never shifts nor comes back), [`Libraries`],
//! [`Ops`] (operations, what each waits for — [`Pending`] — and D3's which-operations-end,
//! [`Loss`]), [`Unpins`] (R7), [`Sweep`] (D2); each node keeps its [`Backlog`] (held
//! namespaces, whose messages are the transport's) beside it. Beside them:
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
//! that order.
//!
//! Operations move along here as well, over the node's [`Transport`] (one transport call per
//! method: start a send, look at a request, post, cancel or give up a receive): a library's
//! send ([`Engine::send`], routed through [`Connections::resolve`], waiting for a route until
//! its deadline, P2) and receive ([`Engine::recv`]), the due ones ([`Engine::advance_due`]),
//! what [`Action::End`] and [`Action::Cancel`] ask ([`Engine::end_op`], [`Engine::cancel_op`]),
//! a released library's receives ([`Engine::cancel_receives`]) and a result taken
//! ([`Engine::take`]) — the same code on both nodes, so that the same event ends an operation
//! with the same error on each. Still the nodes' own: the probes of the stray drain and held
//! backlogs ([`StrayQueue`], [`QueueHead`], [`HoldQueue`]).
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

/// One node's protocol state (feature `alloc`): everything the engine decides with, in one
/// sans-IO value the adapter owns next to its transport. The tables are private: the adapter
/// reads them through getters, changes its own transport state through [`io_mut`]
/// (a connection's `io`), sends what a connection queued through [`outbox`], and changes its
/// operations through [`ops_mut`], and reports everything else
/// as an input (the `handle_*` methods, [`register`](Self::register), [`release`],
/// [`close`](Self::close), …), after which it carries out what [`poll_action`] asks.
///
/// [`io_mut`]: Self::io_mut
/// [`outbox`]: Self::outbox
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
    /// Whether this node hears anyone ([`Action::Deaf`]).
    deafness: Deafness,
    /// The per-connection flood limits (D5).
    limits: PeerLimits,
    /// The stray sweep (D2 within D4's bound).
    sweep: Sweep,
    /// Whose queue the worker's is: the node's (strays swept, quarantined ids drained) or a
    /// host's ([`QueueOwner::HOST`]: nothing taken, ids held while anything waits in them).
    owner: QueueOwner,
    /// What the adapter is to do next ([`Engine::poll_action`]).
    actions: actions::Actions<E>,
    /// Whether and how peers lost to a fault are dialled again, and those being dialled.
    redial: Redial,
    dials: redial::Dials,
    /// Where this node listens, told to every proven peer (`None`: nothing to tell).
    advertised: Option<crate::wire::Address>,
}

#[cfg(feature = "alloc")]
impl<'r, K: Copy + Eq + core::hash::Hash, X, T, E: Copy, const CAP: usize>
    Engine<'r, K, X, T, E, CAP>
{
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
            deafness: Deafness::new(0),
            liveness,
            limits,
            sweep: Sweep::new(),
            owner: QueueOwner::Node,
            actions: Default::default(),
            redial: Redial::Off,
            dials: redial::Dials::new(TokenHash::new(hash_keys)),
            advertised: None,
        }
    }

    /// How peers lost to a fault are dialled again ([`Redial::Off`] until set).
    pub fn set_redial(&mut self, redial: Redial) {
        self.redial = redial;
    }

    /// The reconnect setting.
    pub fn redial(&self) -> Redial {
        self.redial
    }

    /// The reconnect schedule's counts.
    pub fn redial_stats(&self) -> RedialStats {
        self.dials.stats
    }

    /// The peers lost to a fault and being dialled again now.
    pub fn redialling(&self) -> impl Iterator<Item = u64> + '_ {
        self.dials.peers()
    }

    /// Tells every proven peer, now and on every later connection, that this node listens at
    /// `addr` (an ADDRESS frame), so that it can dial this node again after a fault; `None`:
    /// tell nothing more.
    pub fn set_advertised(&mut self, addr: Option<crate::wire::Address>) {
        self.advertised = addr;
        for conn in self.conns.ids() {
            if self.conns.advertise(conn, addr) {
                self.actions.push_back(Action::Transmit(conn));
            }
        }
    }

    /// The address this node tells its peers.
    pub fn advertised(&self) -> Option<crate::wire::Address> {
        self.advertised
    }

    /// The adapter opened connection `conn` to carry out [`Action::Dial`] for `peer`: the
    /// next dial waits while it may still prove to be the peer.
    pub fn dial_started(&mut self, peer: u64, conn: ConnId) {
        self.dials.started(peer, conn);
        self.conns.mark_redial(conn, peer);
    }

    /// The connections.
    pub fn conns(&self) -> &Connections<K, X, E, CAP> {
        &self.conns
    }

    /// The connections to transmit on at [`Stage::Transmit`]: every open one after a change
    /// of the registry, else only those something happened to (see
    /// [`Connections::transmit_due`]); each through [`outbox`](Self::outbox).
    pub fn transmit_due(&mut self) -> alloc::vec::Vec<ConnId> {
        self.conns.transmit_due(self.registry.epoch())
    }

    /// Connection `id`'s transport state, the adapter's to change; `None` once it is
    /// forgotten. (What its session queued goes out through [`outbox`](Self::outbox).)
    pub fn io_mut(&mut self, id: ConnId) -> Option<&mut X> {
        self.conns.io_mut(id)
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
        self.conns.touch();
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
        now_ms: u64,
        io: X,
    ) -> ConnId {
        let (live, layout) = (self.live.now(), self.registry.layout());
        let conn = (self.conns).add(key, role, identity, layout, now_ms, live, io);
        self.conns.advertise(conn, self.advertised);
        conn
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
    pub fn rx_pair(&mut self, peer: u64) -> u32 {
        self.conns.rx_pair(peer, self.registry.layout())
    }

    /// R7: a withdrawal acknowledgement tag arrived; `false` if nobody's withdrawal (among the
    /// connections `usable` accepts) waits for it — a stray.
    pub fn handle_ack_tag(&mut self, tag: u64, usable: impl Fn(&X) -> bool) -> bool {
        self.conns
            .claim_ack_tag(self.registry.layout(), tag, usable)
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
        let confirmed = self
            .unpins
            .collect_confirmed(self.conns.confirmations_due());
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
        // Open connections' deadlines: as the last pass left them if nothing changed since.
        let quiet = self.conns.quiet_until();
        let open = self.conns.iter().filter(|_| quiet.is_none());
        let open = open.filter_map(|c| match c.state() {
            LinkState::Open => c
                .deadlines()
                .next_ms(c.session(), now_ms, live_ms, self.liveness),
            _ => None,
        });
        let lingering = (self.conns.lingering()).filter_map(|c| match c.state() {
            LinkState::Superseded { until_ms } => Some(until_ms),
            _ => None,
        });
        let conns = open
            .chain(quiet.filter(|&q| q != u64::MAX))
            .chain(lingering);
        let dials = match self.redial {
            Redial::Dial(_) | Redial::Report => self.dials.next_ms(),
            Redial::Off => None,
        };
        conns
            .chain(dials)
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
        lib: LibId,
        from: Option<u64>,
        payload: u64,
    ) -> Result<crate::Matcher, NodeError<E>> {
        let (ns, layout) = (self.libs.ns(lib)?, self.registry.layout());
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

mod types;
pub use types::{Counters, LibId, NodeError, OpId, PeerEvent};

#[cfg(feature = "alloc")]
mod actions;
#[cfg(feature = "alloc")]
pub use actions::{Action, CloseHow, Out, Outbox, Stage, Why, PROGRESS};
#[cfg(feature = "alloc")]
mod backlog;
#[cfg(feature = "alloc")]
pub use backlog::{Backlog, BacklogLimit, Held, HoldPass, HoldQueue, HOLD_LOOKS_PER_CALL};
#[cfg(feature = "alloc")]
mod conns;
#[cfg(feature = "alloc")]
pub use conns::{
    after_peer_close, AfterClose, Blocked, Charge, ConnId, Connection, Connections, Footprint,
    LinkState, PeerLimits, RouteHit, RouteMiss, TokenHash, TokenHasher, GONE_PEERS_MAX,
    PROTOCOL_ERRORS_KEPT, REFUSED_MAX, REFUSE_MS, SUPERSEDED_LINGER_MS,
};
#[cfg(feature = "alloc")]
use conns::{Control, PeerGone};
#[cfg(feature = "alloc")]
mod exec;
#[cfg(feature = "alloc")]
pub use exec::{Finished, Posted, Transport};
#[cfg(feature = "alloc")]
mod libraries;
#[cfg(feature = "alloc")]
pub use libraries::{AmDelivery, Libraries, Library};
#[cfg(feature = "alloc")]
mod ops;
#[cfg(feature = "alloc")]
pub use ops::{Ending, Loss, Next, Op, Ops, Outcome, Pending, Request, Waits};
#[cfg(feature = "alloc")]
mod redial;
#[cfg(feature = "alloc")]
pub use redial::{dials_after, Backoff, Redial, RedialStats, DIALS_MAX};
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
pub use unpins::{ClosedPins, QueueOwner, UnpinPass, Unpins, CLOSED_PIN_LINGER_MS};
mod live;
pub use live::{
    Check, Deadlines, Deafness, Expiry, LiveClock, Liveness, ACK_TIMEOUT_MS, DEAF_PEERS_MIN,
    HANDSHAKE_TIMEOUT_MS, LIVENESS_TICK_MAX_MS,
};

/// How many probes of the transport's queue (each may scan all of it) one drain pass makes at
/// most (D4): a flood of strays is taken over several calls, never all in one.
pub const STRAY_PROBES_PER_CALL: u32 = 32;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::identity::Identity;
    use crate::wire::Role;
    use crate::{Registry, TagLayout};

    type Reg = Registry<64>;

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
