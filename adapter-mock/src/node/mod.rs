//! tagspace on the simulated UCX: one [`Node`] per simulated process.
//!
//! The node only moves bytes and events; every protocol decision is the core's
//! ([`Session`](tagspace_core::Session), [`Registry`], [`Namespace`]), which the UCX adapter drives the same way:
//! * control frames travel as Active Messages on the control namespace's first AM id, so the
//!   receiver knows the connection from UCX's `reply_ep`;
//! * data travels as tags built by the namespace through the peer's directory, received with full
//!   masks (D1); "a new transmission has begun" is the exact per-namespace inbox tag;
//! * Active Messages use the namespace's own AM ids and are dispatched by id;
//! * a send to a name the peer has not announced waits until the deadline, then fails (P2);
//! * messages for ids nobody here has registered are probed out, counted and dropped (D2);
//! * of two connections to one peer the session's tie-break keeps one (P4);
//! * an endpoint error fails the operations on that endpoint only (D3).
//!
//! Like the UCX node it is an executor of the core engine ([`engine::Engine`]): this file is
//! the public API, `exec` runs `progress` (the engine's stages, its inputs, every action it
//! asks for carried out) and `views` is the fabric as the engine sees it — the operations'
//! [`engine::Transport`], the unexpected queue for the stray sweep and R7's drain, the held
//! namespaces' view.

use crate::fabric::{
    Completed, EpId, Fabric, FabricError, ProcessId, RecvId, SendId, WorkerEvent, WorkerId,
};
use std::collections::VecDeque;
use tagspace_core::engine::{
    self, Action, AmDelivery, Charge, CloseHow, ConnId, Liveness, Out, PeerLimits, QueueOwner,
    Stage, Target, Waiting, Why,
};
use tagspace_core::session::SessionError;
use tagspace_core::wellknown::CONTROL_ID;
use tagspace_core::wire::{self, Role, MAX_FRAME_LEN};
use tagspace_core::{Identity, Namespace, Registry, TagLayout};

/// Registry capacity of a simulated process.
pub const CAP: usize = 256;
/// How often (simulated ms) `progress` drains stray messages.
pub const DRAIN_INTERVAL_MS: u64 = engine::DRAIN_INTERVAL_MS;

pub use tagspace_core::engine::{Counters, LibId, OpId};
/// Why a node operation failed: the core engine's error, with the fabric's.
pub type NodeError = engine::NodeError<FabricError>;

impl From<FabricError> for NodeError {
    fn from(e: FabricError) -> Self {
        NodeError::Transport(e)
    }
}

/// The mock's side of a connection: its endpoint, and whether it has been closed.
struct Io {
    ep: EpId,
    closed: bool,
}

/// The core engine, on fabric endpoints and operations.
type Engine = engine::Engine<'static, EpId, Io, Op, FabricError, CAP>;

/// A running operation: fabric sends and receives, on endpoints.
type Op = engine::Op<SendId, RecvId, EpId>;

mod exec;
mod views;
use views::{FabricHolds, FabricOps, FabricQueue};

impl engine::Request for SendId {
    /// Its id (what [`Fabric::completed`] reports).
    fn key(&self) -> u64 {
        self.0
    }
}

impl engine::Request for RecvId {
    /// Its id (what [`Fabric::completed`] reports).
    fn key(&self) -> u64 {
        self.0
    }
}

/// A simulated process running tagspace.
pub struct Node {
    registry: &'static Registry<CAP>,
    identity: Identity,
    token: u64,
    worker: WorkerId,
    control_am: u16,
    /// The core engine: every protocol decision is its (this node moves bytes).
    engine: Engine,
    stray: u64,
    forged: u64,
    buf: Vec<u8>,
    /// The fabric's time at the last `progress` (new connections start their deadlines there).
    last_now_ms: u64,
    deadline_closes: u64,
    flood_closes: u64,
    /// The held namespaces' messages (see [`Node::hold_backlog`]): tag, and the data the
    /// fabric's probe with removal handed over.
    backlog: engine::Backlog<Vec<u8>>,
    /// With [`engine::Redial::Report`]: peers lost to a fault, for the test to reconnect.
    reconnects: VecDeque<(u64, WorkerId)>,
    /// How many times the engine found this node deaf ([`engine::Action::Deaf`]).
    deaf: u64,
    /// The control plane's traffic sent so far.
    sent: ControlSent,
}

/// What a node has sent of the control plane ([`Node::control_sent`]): frames as Active
/// Messages on the control id, and the tag halves of withdrawal acknowledgements (R7, empty
/// messages). Bytes are the frames' own; a transport adds its headers (UCX: its AM header).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControlSent {
    /// Control frames sent.
    pub frames: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Withdrawal acknowledgements' tag messages sent (no payload).
    pub ack_tags: u64,
}

impl std::ops::AddAssign for ControlSent {
    /// Adds another node's (or another period's) traffic.
    fn add_assign(&mut self, o: ControlSent) {
        self.frames += o.frames;
        self.bytes += o.bytes;
        self.ack_tags += o.ack_tags;
    }
}

impl Node {
    /// A process with the default layout, known to peers by `identity` (P6; its token must be
    /// unique among processes, which distinct random seeds give).
    pub fn new(fab: &mut Fabric, process: ProcessId, identity: Identity) -> Node {
        Node::with_layout(fab, process, identity, TagLayout::DEFAULT)
    }

    /// A process with its own registry of `layout` (leaked: it lives as long as the test).
    pub fn with_layout(
        fab: &mut Fabric,
        process: ProcessId,
        identity: Identity,
        layout: TagLayout,
    ) -> Node {
        let registry: &'static Registry<CAP> = Box::leak(Box::new(Registry::new(layout)));
        Node::with_registry(fab, process, identity, registry)
    }

    /// A process on the given registry (a harness that runs many short scenarios reuses its
    /// registries instead of leaking one per node).
    pub fn with_registry(
        fab: &mut Fabric,
        process: ProcessId,
        identity: Identity,
        registry: &'static Registry<CAP>,
    ) -> Node {
        let layout = *registry.layout();
        let worker = fab.new_worker(process);
        let control_am = tagspace_core::wellknown::control_am_id(&layout);
        fab.am_set_handler(worker, control_am)
            .expect("a new worker accepts handlers");
        Node {
            registry,
            token: identity.token(),
            identity,
            worker,
            control_am,
            // Fixed keys: a simulation stays reproducible (a real node's are random).
            engine: Engine::new(
                registry,
                [
                    0x243f_6a88_85a3_08d3 ^ worker.0 as u64,
                    0x9e37_79b9_7f4a_7c15,
                ],
                fab.now_ms(),
                Some(Liveness::default()),
                PeerLimits::default(),
            ),
            stray: 0,
            forged: 0,
            buf: vec![0; MAX_FRAME_LEN],
            last_now_ms: fab.now_ms(),
            deadline_closes: 0,
            flood_closes: 0,
            backlog: engine::Backlog::new(),
            reconnects: VecDeque::new(),
            deaf: 0,
            sent: ControlSent::default(),
        }
        .redialling()
    }

    /// As the UCX node on its own worker: tells peers its worker (the fabric's address) and
    /// dials peers lost to a fault back with the default [`engine::Backoff`].
    fn redialling(mut self) -> Node {
        self.engine.set_redial(engine::Redial::default());
        (self.engine).set_advertised(Some(wire::Address::Local(self.worker.0 as u64)));
        self
    }

    /// How peers lost to a fault are dialled again ([`engine::Redial::Dial`] with the default
    /// backoff unless set; [`engine::Redial::Report`] queues them for
    /// [`take_reconnect_needed`](Self::take_reconnect_needed)).
    pub fn set_redial(&mut self, redial: engine::Redial) {
        self.engine.set_redial(redial);
    }

    /// The reconnect schedule's counts.
    pub fn redial_stats(&self) -> engine::RedialStats {
        self.engine.redial_stats()
    }

    /// How many times this node found itself hearing nobody ([`engine::Action::Deaf`]: every
    /// peer cut off by the heartbeat, nothing heard for its timeout — a fabric partitioned
    /// around it). The fabric has no receive queue that can stick, so unlike the UCX node's
    /// own worker nothing is replaced: the count is all.
    pub fn times_deaf(&self) -> u64 {
        self.deaf
    }

    /// With [`engine::Redial::Report`]: the next peer lost to a fault to connect to again (its
    /// token and worker), oldest first.
    pub fn take_reconnect_needed(&mut self) -> Option<(u64, WorkerId)> {
        self.reconnects.pop_front()
    }

    /// Host mode, as the UCX node's on a host's worker (`Node::adopt` there): the worker and
    /// its endpoints are shared with a host's own libraries, whose tags (random 64-bit hashes,
    /// as ucxx's) fall in every namespace id. So tagspace takes nothing it does not own: no
    /// stray sweep (`drain_strays` does nothing), withdrawal acks taken by exact probes of the
    /// tags the sessions wait for (no wildcard over the control namespace), and a released id
    /// whose withdrawal is confirmed is freed only once nothing is queued in it — looked at
    /// without taking ([`quarantine_held`](Self::quarantine_held) counts the ids held).
    pub fn set_host_mode(&mut self) {
        self.engine.set_owner(QueueOwner::HOST);
    }

    /// Host mode: released ids kept quarantined because a message is still queued in them.
    pub fn quarantine_held(&self) -> usize {
        self.engine.unpins().held(self.registry)
    }

    /// The heartbeat ([`Liveness`], on by default as on UCX); `None` turns it off.
    pub fn set_liveness(&mut self, liveness: Option<Liveness>) {
        self.engine.set_liveness(liveness);
    }

    /// Connections this node closed because a deadline passed (handshake, withdrawal
    /// acknowledgements, heartbeat: the core engine's [`Deadlines`](engine::Deadlines)).
    pub fn deadline_closes(&self) -> u64 {
        self.deadline_closes
    }

    /// Per-connection flood limits ([`PeerLimits`], the core engine's; default as on UCX).
    pub fn set_limits(&mut self, limits: PeerLimits) {
        self.engine.set_limits(limits);
    }

    /// Connections this node cut off because the peer went over its [`PeerLimits`].
    pub fn flood_closes(&self) -> u64 {
        self.flood_closes
    }

    /// The control plane's traffic this node has sent so far.
    pub fn control_sent(&self) -> ControlSent {
        self.sent
    }

    /// How many bytes this node's connection tables hold (the core engine's
    /// [`Footprint`](engine::Footprint)).
    pub fn footprint(&self) -> engine::Footprint {
        self.engine.conns().footprint()
    }

    /// This process's token.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// This process's worker.
    pub fn worker(&self) -> WorkerId {
        self.worker
    }

    /// This process's registry.
    pub fn registry(&self) -> &'static Registry<CAP> {
        self.registry
    }

    /// Registers a library.
    pub fn register(&mut self, name: &str) -> Result<LibId, NodeError> {
        self.engine.register(name)
    }

    /// Releases a library: its id is withdrawn from every peer at the next `progress`, and its
    /// posted receives are cancelled (they finish with `NoSuchLibrary`).
    pub fn release(&mut self, fab: &mut Fabric, lib: LibId) {
        if let Some(l) = self.engine.release(lib) {
            drop(self.backlog.release(l.ns().id()));
            for id in l.am_ids() {
                fab.am_clear_handler(self.worker, id);
            }
            // Its receives go with it (R7), as on the UCX node: one left posted would match a
            // message meant for the next name to take the id.
            self.with_ops(fab, |e, t| e.cancel_receives(t, lib));
        }
    }

    /// The namespace of a library.
    pub fn namespace(&self, lib: LibId) -> Option<&Namespace<'static, CAP>> {
        self.engine.libs().ns(lib).ok()
    }

    /// The libraries registered here (their counters, namespaces, queues): the core engine's
    /// table.
    pub fn libraries(&self) -> &engine::Libraries<'static, CAP, FabricError> {
        self.engine.libs()
    }

    /// Messages for unregistered ids drained so far (D2), and messages with a pair value no
    /// proven peer was given ([`forged`](Self::forged)).
    pub fn stray(&self) -> u64 {
        self.stray
    }

    /// Messages in registered namespaces with a pair value this node gave no proven peer,
    /// taken by the drain or by a receive from any peer (also in [`stray`](Self::stray)).
    pub fn forged(&self) -> u64 {
        self.forged
    }

    /// Control-plane errors from peers (each closed that peer's connection only).
    pub fn protocol_errors(&self) -> &[SessionError] {
        self.engine.conns().protocol_errors()
    }

    /// Open, established connections to `peer`.
    pub fn live_connections_to(&self, peer: u64) -> usize {
        self.engine.conns().live_to(peer)
    }

    /// Tokens of peers with an open, established connection.
    pub fn peers(&self) -> Vec<u64> {
        self.engine.conns().peers()
    }

    /// How long (simulated ms, from now) until this node next has something time-driven to do
    /// (the core engine's `poll_timeout`, as on UCX); `None`: nothing is timed.
    pub fn poll_timeout_ms(&self, fab: &Fabric) -> Option<u64> {
        let now = fab.now_ms();
        if fab.has_completed(self.worker) {
            return Some(0); // an operation's request finished: due now, as on UCX
        }
        let at = self.engine.poll_timeout(now);
        let held = (self.engine.owner() != QueueOwner::HOST)
            .then(|| self.backlog.next_ms())
            .flatten();
        let at = at.into_iter().chain(held).min()?;
        Some(at.saturating_sub(now))
    }

    /// Connections this node holds: open ones, ones still handshaking, superseded ones still
    /// lingering; ended ones are forgotten at the next `progress` (D5), as on UCX.
    pub fn connection_count(&self) -> usize {
        self.engine.conns().len()
    }

    /// `lib` starts hearing of peers coming up and going down; every peer already up is
    /// reported at once.
    pub fn listen(&mut self, lib: LibId) -> Result<(), NodeError> {
        self.engine.listen(lib)
    }

    /// The next peer event for a listening library.
    pub fn peer_event(&mut self, lib: LibId) -> Option<engine::PeerEvent<FabricError>> {
        self.engine.libs_mut().peer_event(lib)
    }

    /// Opens a connection to another process's worker; the handshake runs in `progress`.
    pub fn connect(&mut self, fab: &mut Fabric, to: WorkerId) -> Result<(), NodeError> {
        let ep = fab.connect(self.worker, to)?;
        self.last_now_ms = fab.now_ms();
        self.add_conn(ep, Role::Initiator);
        Ok(())
    }

    fn add_conn(&mut self, ep: EpId, role: Role) -> ConnId {
        let io = Io { ep, closed: false };
        (self.engine).add_conn(ep, role, &self.identity, self.last_now_ms, io)
    }

    /// Hostile-peer hook for tests: sends raw bytes as a control frame to `peer`.
    pub fn inject_control(
        &mut self,
        fab: &mut Fabric,
        peer: u64,
        bytes: &[u8],
    ) -> Result<(), NodeError> {
        let ep = self
            .endpoint_to(peer)
            .ok_or(NodeError::NoConnection { peer })?;
        fab.am_send(ep, self.control_am, bytes)?;
        Ok(())
    }

    /// The connection a control frame arriving on `ep` belongs to: the one whose endpoint is
    /// still open, else an ended one (it still reads its peer's CLOSE). The lookup every
    /// incoming frame makes (public for the simulator, which times it against the number of
    /// peers).
    pub fn connection_of(&self, ep: EpId) -> Option<engine::ConnId> {
        let conns = self.engine.conns();
        (conns.find(ep, |c| !c.io.closed)).or_else(|| conns.find(ep, |c| !c.is_open()))
    }

    /// The shared endpoint to `peer`, for code outside tagspace (a legacy library).
    pub fn endpoint_to(&self, peer: u64) -> Option<EpId> {
        let id = self.engine.conns().serving(peer).ok()?;
        Some(self.engine.conns().get(id)?.io.ep)
    }

    /// The endpoint to `peer` and the tag for `payload` in `lib`'s namespace there, as the
    /// UCX node's `route_tag`: `Ok(None)` while the peer has not announced the name,
    /// `NoConnection` while no established connection serves it.
    pub fn route_tag(
        &self,
        lib: LibId,
        peer: u64,
        payload: u64,
    ) -> Result<Option<(EpId, u64)>, NodeError> {
        let found = (self.engine.route_tag(lib, peer, payload)).map_err(|m| m.error(peer))?;
        Ok(found.map(|(c, tag)| (c.io.ep, tag)))
    }

    /// Sends `data` with `payload` to library `lib`'s namespace on `peer`, waiting up to
    /// `timeout_ms` for the peer to announce the name (P2).
    pub fn send(
        &mut self,
        fab: &mut Fabric,
        lib: LibId,
        peer: u64,
        payload: u64,
        data: &[u8],
        timeout_ms: u64,
    ) -> OpId {
        self.start_send(fab, lib, peer, Target::Data(payload), data, timeout_ms)
    }

    /// Sends to the peer's inbox tag for `lib` ("a new transmission has begun").
    pub fn send_inbox(
        &mut self,
        fab: &mut Fabric,
        lib: LibId,
        peer: u64,
        data: &[u8],
        timeout_ms: u64,
    ) -> OpId {
        self.start_send(fab, lib, peer, Target::Inbox, data, timeout_ms)
    }

    /// Sends an Active Message to `lib`'s local AM id `local` on `peer`.
    pub fn am_send(
        &mut self,
        fab: &mut Fabric,
        lib: LibId,
        peer: u64,
        local: u16,
        data: &[u8],
        timeout_ms: u64,
    ) -> OpId {
        self.start_send(fab, lib, peer, Target::Am(local), data, timeout_ms)
    }

    fn start_send(
        &mut self,
        fab: &mut Fabric,
        lib: LibId,
        peer: u64,
        target: Target,
        data: &[u8],
        timeout_ms: u64,
    ) -> OpId {
        let now = fab.now_ms();
        let w = Waiting::new(lib, peer, target, data.to_vec(), now, timeout_ms);
        self.with_ops(fab, |e, t| e.send(t, w, now))
    }

    /// Posts a receive for `payload` in `lib`'s namespace from any proven peer: the pair field
    /// free, and a message whose pair value no proven peer was given dropped (counted in
    /// [`forged`](Self::forged)) while the receive waits on — as the UCX node's `recv`.
    pub fn recv(&mut self, fab: &mut Fabric, lib: LibId, payload: u64) -> OpId {
        self.post(fab, lib, None, payload)
    }

    fn post(&mut self, fab: &mut Fabric, lib: LibId, from: Option<u64>, payload: u64) -> OpId {
        let now = fab.now_ms();
        self.with_ops(fab, |e, t| e.recv(t, lib, from, payload, usize::MAX, now))
    }

    /// Posts an exact receive (full mask, D1) for `payload` in `lib`'s namespace from `peer`
    /// only: the tag carries the pair value this node gives `peer` — as the UCX node's
    /// `recv_from`.
    /// A receive posted for a peer that has already failed fails at once; one that waits when
    /// the peer goes down ends with `PeerDown` (D3), as on UCX.
    pub fn recv_from(&mut self, fab: &mut Fabric, lib: LibId, peer: u64, payload: u64) -> OpId {
        self.post(fab, lib, Some(peer), payload)
    }

    fn take_held(&mut self, m: &tagspace_core::Matcher) -> Option<Vec<u8>> {
        let id = self.registry.layout().namespace_of(m.tag());
        Some(self.backlog.take(id, m.tag(), m.mask())?.msg)
    }

    /// Bounds what each proven peer can leave waiting for `lib`, as the UCX node's
    /// `hold_backlog`: the library receives only through this node; its unexpected messages
    /// are taken out of the fabric's queue into per-peer backlogs its receives read first, and
    /// a peer over `limit` is cut off with reason `Flood`.
    pub fn hold_backlog(
        &mut self,
        lib: LibId,
        limit: engine::BacklogLimit,
    ) -> Result<(), NodeError> {
        let id = self.engine.libs().ns(lib)?.id();
        let (layout, owner) = (self.registry.layout(), self.engine.owner());
        (self.backlog.hold_checked(id, limit, layout, owner)).map_err(NodeError::Usage)
    }

    /// Whether `tag` (taken by a receive from any peer) carries a pair value no proven peer was
    /// given; counts it.
    fn forged_tag(&mut self, tag: u64) -> bool {
        let layout = self.registry.layout();
        let forged = self.engine.conns().forged(layout, tag);
        self.stray += u64::from(forged);
        self.forged += u64::from(forged);
        forged
    }

    /// Takes an inbox message for `lib` from any proven peer if one waits (probe with remove,
    /// then receive); inbox messages with a stranger's pair value are dropped on the way.
    pub fn probe_inbox(
        &mut self,
        fab: &mut Fabric,
        lib: LibId,
    ) -> Result<Option<Vec<u8>>, NodeError> {
        let m = self.engine.libs().ns(lib)?.inbox_matcher_any_peer();
        if let Some(data) = self.take_held(&m) {
            self.engine.libs_mut().count(lib, true, false);
            return Ok(Some(data));
        }
        loop {
            let Some(got) = fab.tag_probe(self.worker, m.tag(), m.mask(), true)? else {
                return Ok(None);
            };
            if self.forged_tag(got.tag) {
                continue;
            }
            self.engine.libs_mut().count(lib, true, false);
            return Ok(Some(got.data));
        }
    }

    /// Listens on `lib`'s local AM id `local`.
    pub fn am_listen(&mut self, fab: &mut Fabric, lib: LibId, local: u16) -> Result<(), NodeError> {
        let id = self.engine.libs_mut().am_listen(lib, local)?;
        fab.am_set_handler(self.worker, id)?;
        Ok(())
    }

    /// The next Active Message for `lib` on `local`.
    pub fn am_take(&mut self, lib: LibId, local: u16) -> Option<Vec<u8>> {
        self.engine.libs_mut().am_take(lib, local)
    }

    /// The result of an operation once it has finished (`Ok(Some(data))` for receives); taking
    /// it forgets the operation.
    pub fn take(&mut self, op: OpId) -> Option<Result<Option<Vec<u8>>, NodeError>> {
        self.engine.ops_mut().take(op)
    }

    /// `f` with the engine and the fabric as its operations' transport.
    fn with_ops<R>(
        &mut self,
        fab: &mut Fabric,
        f: impl FnOnce(&mut Engine, &mut FabricOps<'_>) -> R,
    ) -> R {
        let mut t = FabricOps {
            fab,
            worker: self.worker,
            layout: self.registry.layout(),
            backlog: &mut self.backlog,
            stray: &mut self.stray,
            forged: &mut self.forged,
        };
        f(&mut self.engine, &mut t)
    }
}
