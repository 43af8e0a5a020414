//! tagspace on a real UCP worker: one [`Node`] per worker, shared by every library in the
//! process.
//!
//! The node moves bytes and events; every protocol decision is the core's (its engine,
//! [`engine::Engine`], with the [`Session`](tagspace_core::Session)s, the [`Registry`] and the
//! [`Namespace`]s), driven the same way as the mock adapter's node:
//! * one endpoint per peer worker, shared by every namespace; of two endpoints opened at once
//!   between a pair the session's tie-break keeps one (P4); connecting costs one HELLO each way
//!   plus one frame per change, whatever the number of endpoints (P3);
//! * control frames travel as Active Messages on the control namespace's first AM id, sent
//!   eagerly with a reply endpoint, so the receiver knows which connection they came from;
//! * data travels as tags built by the namespace through the peer's directory (P1), received
//!   with full masks (D1); "a new transmission has begun" is the exact per-namespace inbox tag;
//! * Active Messages use the namespace's own AM ids and are dispatched by id;
//! * a send to a name the peer has not announced waits until the deadline, then fails (P2);
//! * messages for ids nobody here has registered are probed out, counted and dropped (D2);
//! * UCX's peer error handling fails the operations on that endpoint only (D3), and every
//!   library listening for peers hears that it went down.
//!
//! Progress is explicit: call [`Node::progress`] (polling) or [`Node::wait`] (blocks on the
//! worker's event fd) from the thread that owns the node.
//!
//! The node is an executor: UCX's events go to the core engine as inputs (`handle_*`), and what
//! the engine asks for ([`engine::Action`]) is carried out here, in its order. By concern:
//! `config` (setting up, the clock), `ops` (the libraries' sends and receives, the routes and
//! matchers for runtimes' own calls, and UCX as the engine's [`engine::Transport`]), `exec`
//! (the control plane: events in, actions out — the one way a connection closes), `wireup` (new
//! connections, U1), `host` (host mode's endpoints), `strays` (D2's sweep and the held
//! backlogs), `stats`, and `hooks` (feature `test-hooks`).
//!
//! Host mode ([`Node::adopt`]): the node runs on a worker and endpoints a runtime already owns
//! (ucxx's, a C++ engine's). It never closes or destroys them; the host attaches each endpoint
//! ([`Node::attach`]), reports failures ([`Node::peer_failed`]) and may keep progressing the
//! worker itself ([`HostProgress::Host`]). Coexistence rules there: tagspace sets AM handlers
//! only on its namespaces' ids (never AM id 0, never the whole-table guard), posts no receive
//! and no removing probe with a partial mask over tags it does not own (withdrawal acks get one
//! exact receive each; the stray sweep is off; only ids tagspace itself withdrew are drained),
//! and keeps full masks on its data receives.

use crate::ucp::{
    Completion, Endpoint, EpKey, Listener, Message, Request, Started, Status, TagInfo, UcxError,
    Worker,
};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tagspace_core::engine::{
    self, Action, Charge, CloseHow, ConnId, Dest, Next, Out, QueueOwner, Stage, StrayQueue, Target,
    Waiting, Why,
};
use tagspace_core::identity::Identity;
use tagspace_core::namespace::Route;
use tagspace_core::session::{Phase, SessionError};
use tagspace_core::wellknown::CONTROL_ID;
use tagspace_core::wire::{self, CloseReason, MAX_FRAME_LEN};
use tagspace_core::{Namespace, Registry, Tag, TagError, TagLayout};
use ucx1_sys as sys;

mod config;
mod deaf;
mod exec;
mod hooks;
mod host;
mod ops;
mod stats;
mod strays;
mod wireup;

use config::index_keys;
pub use config::{dialable_address, fresh_identity, Clock, HostInfo, HostProgress, NodeConfig};
use deaf::RETIRED_POLL_MS;
pub use deaf::{CARRIED_BYTES_MAX, CARRIED_MAX, CARRY_LEN_MAX};
pub use stats::NodeStats;

pub use tagspace_core::wire::Role;
/// The name [`Role`] had in this crate's host-mode API.
#[deprecated(note = "use Role (the same type)")]
pub type Side = Role;

/// The status of a failure a host reports: its own, or `CONNECTION_RESET` for a "failure"
/// given without a cause (`UCS_OK`).
pub(crate) fn failure_status(status: i8) -> Status {
    match Status::from_code(status) {
        s if s.is_ok() => Status::CONNECTION_RESET,
        s => s,
    }
}

/// How many failed host endpoints a node remembers, so that detaching one is not an error.
pub const FAILED_EPS_KEPT: usize = 1024;

/// Registry capacity (the process-wide registry's).
pub const CAP: usize = 256;
/// How often (ms) `progress` starts a sweep for stray messages (D2).
pub const DRAIN_INTERVAL_MS: u64 = engine::DRAIN_INTERVAL_MS;
/// The most partial-mask probes of UCX's unexpected queue that find nothing (each scans the
/// whole queue) one `progress` call makes for strays (D4): a sweep over every unregistered id is spread over
/// several calls, and UCX's own progress (keepalive among it) runs in between, however much a
/// peer sends.
pub const STRAY_PROBES_PER_CALL: u32 = engine::STRAY_PROBES_PER_CALL;
/// The most strays one `progress` call looks at and takes (D4): at the head of UCX's
/// unexpected queue each costs a constant-time look and take by the same probe.
pub const STRAY_TAKES_PER_CALL: u32 = engine::STRAY_TAKES_PER_CALL;
/// Most time (µs) one `progress` call spends draining strays, whatever the counts above allow
/// (D4): under a flood each probe scans a longer queue. What is left resumes on the next call.
pub const STRAY_TIME_BUDGET_US: u64 = 2_000;
/// The drain's time budget (µs) while strays keep coming ([`STRAY_TIME_BUDGET_US`] otherwise),
/// in a call that then makes one `ucp_worker_progress` instead of up to
/// [`UCX_PROGRESS_PER_CALL`]: taking a stray costs more than UCX's taking it in, so a flood is
/// drained as fast as it arrives only if the drain gets most of the time — and the sender is
/// held back by the transport's flow control instead of the queue growing (D4: still far below
/// 50 ms a call).
pub const STRAY_FLOOD_BUDGET_US: u64 = 10_000;
/// The most `ucp_worker_progress` calls one `progress` call makes (D4).
pub const UCX_PROGRESS_PER_CALL: u32 = 16;
/// The largest stray message the drain will buffer; longer ones are truncated and dropped.
pub const STRAY_MAX_LEN: usize = 1 << 20;
/// Control frames a peer may send on a connection before this side's endpoint has finished
/// wiring up (U1): they wait, in order, and are handled once it has. An honest peer sends one
/// HELLO and at most a few ANNOUNCE/WITHDRAW frames in that window; a peer that sends more is
/// cut off ([`NodeStats::early_overflows`]).
pub const EARLY_FRAMES_MAX: usize = 64;
/// The bytes of control frames that may wait for wire-up on one connection (see
/// [`EARLY_FRAMES_MAX`]).
pub const EARLY_BYTES_MAX: usize = 64 * 1024;
/// Host mode: control frames kept for endpoints the host has not attached yet (a peer's HELLO
/// can come before the host attaches its side), oldest dropped first; together at most
/// [`EARLY_BYTES_MAX`] bytes.
pub const UNATTACHED_FRAMES_MAX: usize = 256;
// The connection deadlines and table limits are the core engine's (the mock node runs the
// same code): declared there once.
pub use tagspace_core::engine::{
    Liveness, ACK_TIMEOUT_MS, CLOSED_PIN_LINGER_MS, GONE_PEERS_MAX, HANDSHAKE_TIMEOUT_MS,
    LIVENESS_TICK_MAX_MS, PROTOCOL_ERRORS_KEPT, REFUSED_MAX, REFUSE_MS, SUPERSEDED_LINGER_MS,
};
/// The most inbox messages with a stranger's pair value one [`Node::probe_inbox`] call drops
/// before it answers `None` (the next call goes on; the stray drain takes them too).
pub const FORGED_PER_PROBE: u32 = 64;
/// Withdrawal acknowledgement tags taken per `progress` call at most (R7).
pub const ACKS_PER_CALL: u32 = 64;

pub use tagspace_core::engine::{BacklogLimit, Counters, LibId, OpId, HOLD_LOOKS_PER_CALL};
/// How a node reconnects to peers lost to a fault: the core engine's.
pub use tagspace_core::engine::{Backoff, Redial};
/// Host mode: how many peers needing a reconnect wait for the host at most
/// ([`Node::take_reconnect_needed`]); the oldest is dropped first.
pub const RECONNECTS_KEPT: usize = 1024;
/// Why a node operation failed: the core engine's error, with UCX's (a peer failure says so).
pub type NodeError = engine::NodeError<UcxError>;
/// A change in the set of peers, told to every library that [`Node::listen`]s.
pub type PeerEvent = engine::PeerEvent<UcxError>;

impl From<UcxError> for NodeError {
    fn from(e: UcxError) -> Self {
        NodeError::Transport(e)
    }
}

/// Whether a new endpoint may be sent on yet (U1).
enum Wire {
    /// The first flush has not completed: UCX may still be on its wire-up lane, and a send
    /// posted now can be replayed onto the final lane in a form it rejects (openucx/ucx#6872).
    Flushing(Request),
    /// Wired up: sends go out as they come.
    Ready,
}

/// The UCX side of a connection (the core engine keeps the rest: its session, state,
/// deadlines, route cache and flood window).
struct Io {
    ep: Option<Endpoint>,
    wire: Wire,
    /// Control frames that arrived before wire-up finished, handled in order once it has.
    early: VecDeque<Vec<u8>>,
    early_bytes: usize,
    /// Control frames UCX has not finished sending on this endpoint.
    ctl_inflight: Vec<Request>,
    /// Test hook: this side withholds its acknowledgements (a peer that never answers).
    #[cfg(feature = "test-hooks")]
    withhold_acks: bool,
}

/// The core engine, on UCX endpoints and requests.
type Engine = engine::Engine<'static, EpKey, Io, Op, UcxError, CAP>;
type Conn = engine::Connection<EpKey, Io, UcxError, CAP>;

/// An endpoint being closed in order: closed only once every request on it has finished (UCX
/// 1.13.1 asserts when an endpoint is disconnected with requests still on it). A failed
/// endpoint is not closed this way: its requests may never finish (a forced close, `Node::close` with
/// `CloseHow::Forced`).
struct Closing {
    key: EpKey,
    ep: Endpoint,
    /// The peer's token, if the connection was established (for `PeerDown` if it fails).
    peer: Option<u64>,
    waits: Vec<Request>,
}

/// A running operation: UCX requests, on endpoints.
type Op = engine::Op<Request, Request, EpKey>;

impl engine::Request for Request {
    /// Its address (what [`Worker::take_completed`] reports).
    fn key(&self) -> u64 {
        self.addr() as u64
    }
}

/// Per connection, per second: how much a peer may send that nobody asked for before its
/// connection is closed (counted in `stats().flood_closes`, D5); the core engine's.
pub use tagspace_core::engine::PeerLimits;

/// tagspace on one UCP worker.
pub struct Node {
    registry: &'static Registry<CAP>,
    identity: Arc<Identity>,
    token: u64,
    worker: Worker,
    listener: Option<Listener>,
    control_am: u16,
    /// The core engine: connections (sessions, states, deadlines, route caches, the peer
    /// index, the peers gone), libraries, operations, R7's unpinning, the heartbeat and flood
    /// settings. This node keeps its endpoints and UCX requests in it and carries out what it
    /// decides.
    engine: Engine,
    stats: NodeStats,
    stray_by_id: Vec<u64>,
    /// The held namespaces' messages, taken out of UCX's queue per peer within their limit
    /// ([`Node::hold_backlog`]).
    backlog: engine::Backlog<Message>,
    clock: Clock,
    /// The addresses of the requests UCX completed (its completion callbacks name them),
    /// taken from the worker at each `progress`: only their operations are moved along (D6).
    completed: Vec<usize>,
    /// Closes and drains UCX has not finished with yet.
    background: Vec<Request>,
    /// Sends given up (D3: their peer went down; or forgotten by their library) that UCX has
    /// not finished, with their endpoint's key: such an endpoint is force-closed, never closed
    /// in order — UCX ≥ 1.13
    /// destroys a flush-closed endpoint with a rendezvous send still on it (in a build with
    /// assertions, `ucp_ep.c: Assertion ucs_hlist_is_empty(...proto_reqs)` aborts the
    /// process; 1.12 purged such sends on every close, and a forced close purges them still).
    abandoned: Vec<(EpKey, Request)>,
    /// Endpoints waiting for their requests to finish before they are closed.
    closing: Vec<Closing>,
    /// Connections whose endpoint's first flush may still be pending (U1), and those with
    /// control sends UCX may not have finished: what `progress` looks at, instead of every
    /// connection (may name connections already done or forgotten; the next look drops them).
    wiring: Vec<ConnId>,
    ctl_busy: Vec<ConnId>,
    buf: Vec<u8>,
    /// The posted receive for withdrawal acknowledgements (R7): the control namespace, any
    /// payload. Re-posted as each completes.
    ack_recv: Option<Request>,
    /// `Some` on a worker a host owns ([`Node::adopt`]).
    host: Option<HostInfo>,
    /// Host mode: one exact receive per awaited withdrawal-ack tag (no wildcard over the
    /// control namespace, where a host library's random tags may fall).
    ack_exact: HashMap<u64, Request>,
    /// Host mode: the host's endpoints attached and not yet detached (or reported failed),
    /// whether or not their connection is still up (a peer's CLOSE ends the connection, not
    /// the attachment).
    attached: std::collections::HashSet<EpKey>,
    /// Host mode: attached endpoints that failed (reported by the host), newest last, at most
    /// [`FAILED_EPS_KEPT`]: detached by the failure, so that a later `detach` of one is not
    /// an error (a shared node's host must detach after `peer_failed`; a plain node's need not).
    failed_eps: VecDeque<EpKey>,
    /// Host mode: control frames from endpoints not attached yet, oldest first.
    unattached: VecDeque<(EpKey, Vec<u8>)>,
    unattached_bytes: usize,
    /// Host mode: peers lost to a fault for the host to connect to again, oldest first.
    reconnects: VecDeque<(u64, SocketAddr)>,
    /// What a worker is made with, for one that replaces it ([`NodeConfig::replace_deaf_worker`]).
    ucx: crate::ucp::Config,
    /// [`NodeConfig::advertise`]: `None` tells the listener's address (again after a
    /// replacement).
    advertise_cfg: Option<SocketAddr>,
    /// [`NodeConfig::replace_deaf_worker`].
    replace_deaf: bool,
    /// Workers replaced, kept (and progressed) until nothing made from them is left.
    retired: Vec<Worker>,
    /// Messages carried over from a replaced worker, which receives take first.
    carried: deaf::Carried,
    /// Test hook: control frames arriving on this worker are dropped, as a stuck receive
    /// queue would leave them unread ([`Node::deafen_for_test`]).
    #[cfg(feature = "test-hooks")]
    deafened: bool,
}

impl Node {
    /// A node on the process-wide registry ([`tagspace_core::global`]), so that every library
    /// in the process shares it.
    pub fn new(cfg: NodeConfig) -> Result<Node, NodeError> {
        Node::with_registry(cfg, tagspace_core::global())
    }

    /// A node on its own registry (several simulated "processes" in one test process).
    pub fn with_registry(
        cfg: NodeConfig,
        registry: &'static Registry<CAP>,
    ) -> Result<Node, NodeError> {
        let mut cfg = cfg;
        // The listener with SO_REUSEADDR (UCX's `CM_REUSEADDR`, off by default): a worker
        // that replaces a deaf one listens again at the address its peers were told, while
        // the old one's connections still hold the port (or wait in TIME_WAIT). Linux lets
        // the new listener bind only if the old sockets had it too, so it is set from the
        // start. It never lets two listeners share a port.
        if !cfg
            .ucx
            .options
            .iter()
            .any(|(k, _)| k.ends_with("CM_REUSEADDR"))
        {
            (cfg.ucx.options).push(("CM_REUSEADDR".into(), "y".into()));
        }
        let worker = Worker::new(&cfg.ucx)?;
        // No AM id may be left without a handler: on UCX 1.12/1.13 an AM on such an id can
        // crash the process (see `Worker::guard_am_ids`).
        worker.guard_am_ids()?;
        Node::build(worker, cfg, registry, None)
    }

    /// A node on a worker a host created and owns (host mode), on the process-wide registry.
    /// See [`adopt_with_registry`](Self::adopt_with_registry).
    ///
    /// # Safety
    /// As for [`Worker::adopt`]: `worker` is live, has the tag and AM features, and outlives
    /// the node; the host destroys it only after dropping the node.
    pub unsafe fn adopt(
        worker: sys::ucp_worker_h,
        cfg: NodeConfig,
        progress: HostProgress,
    ) -> Result<Node, NodeError> {
        // SAFETY: the caller's promise.
        unsafe { Node::adopt_with_registry(worker, cfg, progress, tagspace_core::global()) }
    }

    /// A node on a worker a host owns: tagspace never destroys the worker nor closes the
    /// host's endpoints; it sets AM handlers only on its own namespaces' ids (the control id,
    /// and ids libraries listen on) and removes them when the node goes. `cfg.ucx` is not used
    /// (the host configured UCX), and `cfg.listen` must be `None`: the host accepts or creates
    /// endpoints and [`attach`](Self::attach)es them. The worker's thread mode and the UCX
    /// version are checked (UCX ≥ 1.12, the API these bindings were made from) and reported
    /// by [`host`](Self::host).
    ///
    /// What the host must do: attach each endpoint tagspace may use, with the [`Role`] it
    /// played; call [`peer_failed`](Self::peer_failed) from its endpoint error handler (or
    /// when it learns a peer failed) and [`detach`](Self::detach) before closing an endpoint
    /// itself; drop the node (after [`shutdown`](Self::shutdown)) before destroying the
    /// worker. With [`HostProgress::Host`] it keeps progressing the worker; either way
    /// [`progress`](Self::progress) must still be called (it handles what arrived).
    ///
    /// UCX 1.12–1.16: a host whose AM handler table has gaps is exposed to the AM-id crash of
    /// [`Worker::guard_am_ids`] whether tagspace is there or not; tagspace does not install
    /// the guard on a host's worker (it would replace the host's handlers).
    ///
    /// # Safety
    /// As for [`Worker::adopt`].
    pub unsafe fn adopt_with_registry(
        worker: sys::ucp_worker_h,
        cfg: NodeConfig,
        progress: HostProgress,
        registry: &'static Registry<CAP>,
    ) -> Result<Node, NodeError> {
        if worker.is_null() {
            return Err(NodeError::Usage("the host's worker handle is NULL"));
        }
        if cfg.listen.is_some() {
            return Err(NodeError::Usage(
                "a node on a host's worker has no listener of its own: set NodeConfig::listen \
                 to None and attach the host's endpoints",
            ));
        }
        let ucx_version = crate::ucp::ucx_version();
        if ucx_version.0 != 1 || ucx_version.1 < 12 {
            return Err(NodeError::Usage(
                "the loaded UCX is older than 1.12 (tagspace's bindings need its API)",
            ));
        }
        // SAFETY: the caller's promise.
        let worker = unsafe { Worker::adopt(worker) };
        let thread_mode = worker.thread_mode()?;
        let info = HostInfo {
            thread_mode,
            ucx_version,
            progress,
        };
        tracing::info!(?info, "tagspace on a host's worker");
        Node::build(worker, cfg, registry, Some(info))
    }

    fn build(
        worker: Worker,
        cfg: NodeConfig,
        registry: &'static Registry<CAP>,
        host: Option<HostInfo>,
    ) -> Result<Node, NodeError> {
        let layout = registry.layout();
        let control_am = tagspace_core::wellknown::control_am_id(layout);
        worker.set_am_handler(control_am)?;
        let listener = match cfg.listen {
            Some(a) => Some(worker.listen(a)?),
            None => None,
        };
        let node = Node {
            registry,
            token: cfg.identity.token(),
            identity: cfg.identity,
            worker,
            listener,
            control_am,
            engine: Engine::new(
                registry,
                index_keys(),
                cfg.clock.now_ms(),
                cfg.liveness,
                cfg.limits,
            ),
            stats: NodeStats::default(),
            stray_by_id: vec![0; CAP],
            backlog: engine::Backlog::new(),
            clock: cfg.clock,
            completed: Vec::new(),
            background: Vec::new(),
            abandoned: Vec::new(),
            closing: Vec::new(),
            wiring: Vec::new(),
            ctl_busy: Vec::new(),
            buf: vec![0; MAX_FRAME_LEN],
            ack_recv: None,
            host,
            ack_exact: HashMap::new(),
            attached: std::collections::HashSet::new(),
            failed_eps: VecDeque::new(),
            unattached: VecDeque::new(),
            unattached_bytes: 0,
            reconnects: VecDeque::new(),
            ucx: cfg.ucx.clone(),
            advertise_cfg: cfg.advertise,
            replace_deaf: cfg.replace_deaf_worker,
            retired: Vec::new(),
            carried: deaf::Carried::default(),
            #[cfg(feature = "test-hooks")]
            deafened: false,
        };
        let mut node = node;
        // Own worker: dial lost peers back as configured, and tell peers where to dial this
        // node (the configured address, else the listener's unless it listens on every
        // interface, which names none). Host mode: the host owns the endpoints, so a lost
        // peer is only reported to it; the host may tell its listener's address.
        let redial = match (node.host.is_some(), cfg.redial) {
            (true, Redial::Dial(_)) => Redial::Report,
            (_, r) => r,
        };
        node.engine.set_redial(redial);
        node.advertise();
        match node.host {
            None => node.post_ack_recv()?,
            Some(_) => node.engine.set_owner(QueueOwner::HOST),
        }
        tracing::info!(token = node.token, addr = ?node.listen_addr().ok(), "tagspace node up");
        Ok(node)
    }

    /// Tells peers where to dial this node: [`NodeConfig::advertise`], else the listener's
    /// address unless it listens on every interface (which names none).
    fn advertise(&mut self) {
        let a = self.advertise_cfg.or_else(|| {
            let a = self.listen_addr().ok()?;
            (!a.ip().is_unspecified()).then_some(a)
        });
        self.engine.set_advertised(a.map(wire::Address::Ip));
    }

    /// Tells peers — those connected now (again, at once) and those met later — to dial
    /// `addr` after a fault: what [`NodeConfig::advertise`] sets at the start. A host-mode
    /// node learns its host's listener this way once the host has one; `None` goes back to
    /// the default (the own listener's address, or nothing in host mode).
    pub fn set_advertise(&mut self, addr: Option<SocketAddr>) {
        self.advertise_cfg = addr;
        self.advertise();
    }

    /// The address this node tells its peers to dial after a fault, if any.
    pub fn advertised(&self) -> Option<SocketAddr> {
        match self.engine.advertised() {
            Some(wire::Address::Ip(a)) => Some(a),
            _ => None,
        }
    }

    /// This node's token.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// This node's identity: its public key is what peers verify (P6). Share the key, or its
    /// token, out of band to pin which process is which.
    pub fn identity(&self) -> &Arc<Identity> {
        &self.identity
    }

    /// The worker (for code outside tagspace that shares it, e.g. a legacy library's probes).
    pub fn worker(&self) -> &Worker {
        &self.worker
    }

    /// The registry this node's libraries register in.
    pub fn registry(&self) -> &'static Registry<CAP> {
        self.registry
    }

    /// The tag layout.
    pub fn layout(&self) -> &'static TagLayout {
        self.registry.layout()
    }

    /// The clock deadlines are measured on.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The listener's address (what peers [`connect`](Self::connect) to).
    pub fn listen_addr(&self) -> Result<SocketAddr, NodeError> {
        match &self.listener {
            Some(l) => Ok(l.local_addr()?),
            None => Err(NodeError::NoConnection { peer: 0 }),
        }
    }

    /// Registers a library.
    pub fn register(&mut self, name: &str) -> Result<LibId, NodeError> {
        let lib = self.engine.register(name)?;
        tracing::debug!(
            name,
            id = self.engine.libs().ns(lib)?.id(),
            "namespace registered"
        );
        Ok(lib)
    }

    /// Releases a library: its id is withdrawn from every peer at the next `progress`, its AM
    /// handlers are removed, its waiting operations fail, and its posted receives are
    /// cancelled — they finish with [`NodeError::NoSuchLibrary`], as on the mock: left posted,
    /// one would take a message meant for the next name to get the id. A receive UCX has
    /// already matched (a rendezvous under way) still completes with its data.
    pub fn release(&mut self, lib: LibId) {
        if let Some(l) = self.engine.release(lib) {
            // Its held messages were sent to this name: dropped (received into a few bytes).
            drop(self.backlog.release(l.ns().id()));
            // So are messages carried over from a replaced worker (R7: the next name to take
            // the id must not receive them).
            self.stats.carry_dropped += (self.carried).forget(self.registry.layout(), l.ns().id());
            for id in l.am_ids() {
                let _ = self.worker.clear_am_handler(id);
            }
            // Its receives go with it (R7): one left posted would match a message meant for
            // the next name to take the id, UCX matching the oldest posted receive first. They
            // finish with UCS_ERR_CANCELED (one already matched to a rendezvous still completes
            // with its data, which was sent to this name).
            self.with_ops(|e, t| e.cancel_receives(t, lib));
            tracing::debug!(name = %l.ns().name(), id = l.ns().id(), "namespace released");
        }
    }

    /// The namespace of a library.
    pub fn namespace(&self, lib: LibId) -> Option<&Namespace<'static, CAP>> {
        self.engine.libs().ns(lib).ok()
    }

    /// Counters of a library.
    pub fn counters(&self, lib: LibId) -> Counters {
        self.engine.libs().counters(lib)
    }

    /// Node-wide counters.
    pub fn stats(&self) -> NodeStats {
        let r = self.engine.redial_stats();
        NodeStats {
            reconnects: r.reconnected,
            redials_given_up: r.given_up,
            ..self.stats
        }
    }

    /// Host mode: the next peer lost to a fault that the host should connect to again (its
    /// token, and where it said it listens), oldest first; at most [`RECONNECTS_KEPT`] are
    /// kept. The host connects and [`attach`](Self::attach)es the endpoint as the initiator;
    /// the peer proves itself again and traffic resumes. Always `None` on a node's own
    /// worker, which dials by itself ([`NodeConfig::redial`]).
    pub fn take_reconnect_needed(&mut self) -> Option<(u64, SocketAddr)> {
        self.reconnects.pop_front()
    }

    /// Stray messages drained for namespace id `id` (D2).
    pub fn stray_for(&self, id: u16) -> u64 {
        self.stray_by_id.get(id as usize).copied().unwrap_or(0)
    }

    /// The last [`PROTOCOL_ERRORS_KEPT`] control-plane errors from peers, oldest first (each
    /// closed that peer's connection only; `stats().protocol_errors` counts them all).
    pub fn protocol_errors(&self) -> &[SessionError] {
        self.engine.conns().protocol_errors()
    }

    /// `lib` starts hearing of peers coming up and going down (a namespaced listener): every
    /// peer already up is reported at once.
    pub fn listen(&mut self, lib: LibId) -> Result<(), NodeError> {
        self.engine.listen(lib)
    }

    /// The next peer event for a listening library.
    pub fn peer_event(&mut self, lib: LibId) -> Option<PeerEvent> {
        self.engine.libs_mut().peer_event(lib)
    }

    /// Open, established connections to `peer`.
    pub fn live_connections_to(&self, peer: u64) -> usize {
        self.engine.conns().live_to(peer)
    }

    /// Whether this node has work in flight that needs more progress to finish: a connection
    /// still handshaking, control frames or closes UCX has not completed, or endpoints waiting to
    /// be closed. (Messages in flight from peers cannot be seen; a harness that wants quiet
    /// also waits for a stretch without progress.)
    pub fn has_work_in_flight(&self) -> bool {
        // A connection whose peer's HELLO came but whose PROOF has not is waiting on the peer
        // alone (an honest peer's PROOF is then in its own queue or on the wire); one that
        // claims an identity it cannot prove would otherwise count as busy until it is closed.
        self.engine.conns().iter().any(|c| {
            c.is_open()
                && (c.session().phase() == Phase::Connecting || !c.io.ctl_inflight.is_empty())
        }) || !self.background.is_empty()
            || !self.closing.is_empty()
    }

    /// Connections this node holds: open ones, ones still handshaking, superseded ones still
    /// lingering, and closed ones whose endpoint UCX has not let go yet; closed connections are
    /// forgotten once their endpoint is gone (D5).
    pub fn connection_count(&self) -> usize {
        self.engine.conns().len()
    }

    /// Tokens of peers with an open, established connection.
    pub fn peers(&self) -> Vec<u64> {
        self.engine.conns().peers()
    }

    /// Forgets operation `op`, finished or not: a receive still waiting is cancelled, and a
    /// request UCX has not finished is parked with its buffer until UCX is done with it (a
    /// send's endpoint is then force-closed when it closes, see `abandoned`).
    pub fn forget(&mut self, op: OpId) {
        if let Some(Op::Sending { conn, req, .. }) = self.engine.ops_mut().forget(op) {
            self.abandoned.push((conn, req));
        }
    }

    /// Handles everything pending: UCX progress, accepted connections, endpoint errors,
    /// control frames, Active Messages, outgoing announcements, waiting operations, and the
    /// periodic stray drain. Returns whether anything happened.
    pub fn progress(&mut self) -> bool {
        let mut busy = false;
        // The engine's order, the same on every adapter.
        for stage in engine::PROGRESS {
            busy |= match stage {
                Stage::Transport => self.stage_transport(),
                Stage::WireUp => self.poll_wireup(),
                Stage::Messages => self.stage_messages(),
                Stage::AckTags => self.take_ack_tags(),
                Stage::Transmit => self.flush() | (self.host.is_some() && self.sync_ack_recvs()),
                Stage::Operations => self.stage_operations(),
                Stage::Timers => {
                    self.engine.handle_timeout(self.clock.now_ms());
                    self.carry_out();
                    false
                }
                Stage::Retire => self.stage_retire(),
                Stage::Unpin => self.release_confirmed(),
                Stage::Strays => self.stage_strays(),
            };
            debug_assert!(!self.engine.has_actions(), "{stage:?} left actions undone");
        }
        busy
    }

    /// [`Stage::Transport`]: UCX's progress, bounded (D4: under a flood UCX always has more to
    /// do; the rest waits for the next call, after tagspace has handled what arrived), then
    /// the connections accepted and the endpoint failures.
    fn stage_transport(&mut self) -> bool {
        let mut busy = match self.host {
            Some(HostInfo {
                progress: HostProgress::Host,
                ..
            }) => {
                self.worker.reap();
                false
            }
            _ => {
                self.worker.progress_up_to(if self.flooded() {
                    1
                } else {
                    UCX_PROGRESS_PER_CALL
                }) > 0
            }
        };
        if !self.retired.is_empty() {
            self.progress_retired();
        }
        while let Some(accepted) = self.listener.as_ref().and_then(Listener::accept) {
            busy = true;
            match accepted {
                Ok(ep) => {
                    tracing::info!("accepted a connection");
                    self.add_conn(ep, Role::Acceptor);
                }
                Err(e) => tracing::warn!(error = %e, "accepting a connection failed"),
            }
        }
        busy | self.absorb_ep_errors()
    }

    /// [`Stage::Messages`]: the Active Messages that arrived.
    fn stage_messages(&mut self) -> bool {
        let mut busy = false;
        while let Some(am) = self.worker.take_am() {
            busy = true;
            #[cfg(feature = "test-hooks")]
            if self.deafened {
                continue;
            }
            self.on_am(am);
        }
        busy
    }

    /// [`Stage::Retire`]: control sends UCX finished are let go, endpoints closing in order
    /// whose requests have finished are closed, ended connections whose endpoint is gone are
    /// forgotten.
    fn stage_retire(&mut self) -> bool {
        let engine = &mut self.engine;
        self.ctl_busy.retain(|&i| {
            engine.io_mut(i).is_some_and(|io| {
                io.ctl_inflight.retain_mut(|r| r.test().is_none());
                !io.ctl_inflight.is_empty()
            })
        });
        self.close_retired();
        self.background.retain_mut(|r| r.test().is_none());
        self.engine
            .forget_ended(|c| c.io.ep.is_none(), self.clock.now_ms());
        false
    }

    /// [`Stage::Operations`] (D6): only the operations something happened to.
    fn stage_operations(&mut self) -> bool {
        self.worker.take_completed(&mut self.completed);
        for addr in self.completed.drain(..) {
            self.engine.ops_mut().completed(addr as u64);
        }
        let now = self.clock.now_ms();
        self.with_ops(|e, t| e.advance_due(t, now));
        // Not counted as busy: a completion is the caller's to see (take, is_done).
        false
    }

    /// [`Stage::Strays`]: never on a host's worker (coexistence: the host's libraries own every
    /// tag tagspace does not; nothing is swept out of the host's queue). One time budget for
    /// the sweep and the held backlogs.
    fn stage_strays(&mut self) -> bool {
        let now = self.clock.now_ms();
        let deadline = Instant::now() + self.drain_budget();
        let mut busy = false;
        if self.engine.sweep_due(now) {
            busy |= self.drain_strays_until(deadline) > 0;
        }
        if self.host.is_none() && self.backlog.due(now) {
            busy |= self.hold_pass(deadline);
        }
        busy
    }

    /// How long (ms, from now) until this node next has something time-driven to do — a
    /// connection's handshake, acknowledgement or heartbeat deadline, a linger's end, a
    /// waiting send's deadline (P2), the next stray sweep — if `progress` is not called
    /// before; `None`: nothing is timed. The core engine's `poll_timeout`: a host that sleeps
    /// on its own event loop wakes by then and calls [`progress`](Self::progress).
    pub fn poll_timeout_ms(&self) -> Option<u64> {
        let now = self.clock.now_ms();
        if self.worker.has_completed() {
            // A request completed after this call's `progress` looked (e.g. a cancel UCX
            // finished at once): its operation is due now.
            return Some(0);
        }
        let at = self.engine.poll_timeout(now);
        let held = self
            .host
            .is_none()
            .then(|| self.backlog.next_ms())
            .flatten();
        // A replaced worker's completions do not wake this one's event fd: looked at often
        // while it finishes.
        let retired = (!self.retired.is_empty()).then_some(now + RETIRED_POLL_MS);
        let at = at.into_iter().chain(held).chain(retired).min()?;
        Some(at.saturating_sub(now))
    }

    /// Blocks on the worker's event fd for up to `timeout_ms` (negative: no limit), or until
    /// the next timed event ([`poll_timeout_ms`](Self::poll_timeout_ms)) if that is sooner,
    /// then progresses.
    pub fn wait(&mut self, timeout_ms: i32) -> Result<bool, NodeError> {
        if self.progress() {
            return Ok(true);
        }
        if matches!(self.host, Some(h) if h.progress == HostProgress::Host) {
            return Err(NodeError::Usage(
                "the host progresses this worker (HostProgress::Host): arming its event fd \
                 here would race the host's; call progress instead",
            ));
        }
        let timed = self
            .poll_timeout_ms()
            .map(|ms| ms.min(i32::MAX as u64) as i32);
        let timeout_ms = match (timeout_ms, timed) {
            (t, Some(d)) if t < 0 || d < t => d,
            (t, _) => t,
        };
        self.worker.wait(timeout_ms)?;
        Ok(self.progress())
    }

    /// Closes every connection (orderly CLOSE, then a flushing endpoint close) and progresses
    /// until UCX is done or `timeout_ms` passes.
    pub fn shutdown(&mut self, timeout_ms: u64) {
        // Held messages first, while their senders' endpoints are open: a rendezvous sender
        // is let go (received into a few bytes, as a stray).
        drop(self.backlog.clear());
        self.engine.close_all();
        self.carry_out();
        let start = Instant::now();
        while !(self.background.is_empty() && self.closing.is_empty())
            && start.elapsed().as_millis() < timeout_ms as u128
        {
            self.worker.progress();
            if !self.retired.is_empty() {
                self.progress_retired();
            }
            self.close_retired();
            self.background.retain_mut(|r| r.test().is_none());
        }
    }
}
