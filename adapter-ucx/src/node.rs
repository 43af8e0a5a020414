//! tagspace on a real UCP worker: one [`Node`] per worker, shared by every library in the
//! process.
//!
//! The node moves bytes and events; every protocol decision is the core's ([`Session`],
//! [`Registry`], [`Namespace`]), driven the same way as the mock adapter's node:
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
//! Host mode ([`Node::adopt`]): the node runs on a worker and endpoints a runtime already owns
//! (ucxx's, a C++ engine's). It never closes or destroys them; the host attaches each endpoint
//! ([`Node::attach`]), reports failures ([`Node::peer_failed`]) and may keep progressing the
//! worker itself ([`HostProgress::Host`]). Coexistence rules there: tagspace sets AM handlers
//! only on its namespaces' ids (never AM id 0, never the whole-table guard), posts no receive
//! and no removing probe with a partial mask over tags it does not own (withdrawal acks get one
//! exact receive each; the stray sweep is off; only ids tagspace itself withdrew are drained),
//! and keeps full masks on its data receives.

use crate::ucp::{
    Completion, Config, Endpoint, EpKey, Listener, Message, Request, Started, Status, TagInfo,
    ThreadMode, UcxError, Worker,
};
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tagspace_core::engine::{
    self, Action, Blocked, Charge, CloseHow, ConnId, Dest, Expiry, Next, QueueOwner, Resolved,
    StrayQueue, Target, Waiting, Why,
};
use tagspace_core::identity::Identity;
use tagspace_core::namespace::Route;
use tagspace_core::session::{Phase, SessionError};
use tagspace_core::wellknown::CONTROL_ID;
use tagspace_core::wire::{self, CloseReason, MAX_FRAME_LEN};
use tagspace_core::{Namespace, Registry, Tag, TagError, TagLayout};
use ucx1_sys as sys;

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
    LIVENESS_TICK_MAX_MS, PROTOCOL_ERRORS_KEPT, SUPERSEDED_LINGER_MS,
};
/// The most inbox messages with a stranger's pair value one [`Node::probe_inbox`] call drops
/// before it answers `None` (the next call goes on; the stray drain takes them too).
pub const FORGED_PER_PROBE: u32 = 64;
/// Withdrawal acknowledgement tags taken per `progress` call at most (R7).
pub const ACKS_PER_CALL: u32 = 64;

pub use tagspace_core::engine::{BacklogLimit, Counters, LibId, OpId, HOLD_LOOKS_PER_CALL};
/// Why a node operation failed: the core engine's error, with UCX's (a peer failure says so).
pub type NodeError = engine::NodeError<UcxError>;
/// A change in the set of peers, told to every library that [`Node::listen`]s.
pub type PeerEvent = engine::PeerEvent<UcxError>;

/// Milliseconds for deadlines: the real monotonic clock, or a manual one that only moves when
/// told (for deterministic tests of P2 deadlines over a real transport).
#[derive(Clone, Debug)]
pub enum Clock {
    /// `Instant` since the node started.
    Real(Instant),
    /// Moved by [`Clock::advance`].
    Manual(Rc<Cell<u64>>),
}

impl Clock {
    /// A manual clock at 0.
    pub fn manual() -> Clock {
        Clock::Manual(Rc::new(Cell::new(0)))
    }

    /// Now, in ms.
    pub fn now_ms(&self) -> u64 {
        match self {
            Clock::Real(t) => t.elapsed().as_millis() as u64,
            Clock::Manual(c) => c.get(),
        }
    }

    /// Moves a manual clock forward (no effect on the real one).
    pub fn advance(&self, ms: u64) {
        if let Clock::Manual(c) = self {
            c.set(c.get() + ms);
        }
    }
}

impl From<UcxError> for NodeError {
    fn from(e: UcxError) -> Self {
        NodeError::Transport(e)
    }
}

/// Node-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Control frames sent (HELLO, ANNOUNCE, WITHDRAW, CLOSE).
    pub control_sent: u64,
    /// Control frames received.
    pub control_received: u64,
    /// Tag messages and AMs for ids nobody here registered, drained (D2), and tag messages
    /// in registered namespaces whose pair value no proven peer was given (`forged`).
    pub stray: u64,
    /// Of `stray`: tag messages in a registered namespace carrying a pair value this node gave
    /// no proven peer — made up by a process that never proved its identity here — taken by
    /// the drain or by a receive from any peer (which then waits on for a real one).
    pub forged: u64,
    /// AMs UCX delivered by rendezvous (tagspace sends eagerly), dropped.
    pub am_dropped: u64,
    /// AMs on ids nobody here listens on (also counted in `stray`), dropped.
    pub am_unowned: u64,
    /// Partial-mask probes of UCX's unexpected queue made for strays that found nothing (each
    /// scanned the whole queue; at most [`STRAY_PROBES_PER_CALL`] per `progress` call).
    pub stray_probes: u64,
    /// Looks at the head of UCX's unexpected queue made for strays (at most
    /// [`STRAY_TAKES_PER_CALL`] per `progress` call).
    pub stray_head_probes: u64,
    /// Endpoints that failed (UCX peer error handling).
    pub endpoint_failures: u64,
    /// Connections cut off because the peer sent more control frames than may wait for
    /// wire-up ([`EARLY_FRAMES_MAX`], [`EARLY_BYTES_MAX`]).
    pub early_overflows: u64,
    /// Operations failed by tagspace because their peer failed, while UCX still held their
    /// requests (D3): their buffers are kept until UCX lets the requests go.
    pub failed_by_peer_down: u64,
    /// Connections closed for a control-plane error from the peer (the last
    /// [`PROTOCOL_ERRORS_KEPT`] are in [`Node::protocol_errors`]).
    pub protocol_errors: u64,
    /// Of those, connections whose peer could not prove the identity its HELLO claimed (P6):
    /// never indexed as that peer, never able to supersede its connection.
    pub unproven: u64,
    /// Connections closed because their handshake did not complete in
    /// [`HANDSHAKE_TIMEOUT_MS`] (a silent peer, or one that never proved its claim).
    pub handshake_timeouts: u64,
    /// Connections closed because the peer sent more than [`PeerLimits`] allow, or left more
    /// messages waiting than a held namespace's [`BacklogLimit`] (`backlog_floods`).
    pub flood_closes: u64,
    /// Messages of held namespaces taken out of UCX's queue into the node's backlog
    /// ([`Node::hold_backlog`]).
    pub held: u64,
    /// Peers cut off for leaving more messages waiting in a held namespace than its
    /// [`BacklogLimit`] allows (also in `flood_closes`).
    pub backlog_floods: u64,
    /// Messages of those peers dropped: held when the limit was passed, or sent to a held
    /// namespace after it.
    pub backlog_dropped: u64,
    /// Withdrawal acknowledgements sent as tag messages (R7).
    pub acks_sent: u64,
    /// Withdrawal acknowledgements received as tag messages and matched to a withdrawal.
    pub acks_received: u64,
    /// Ids this node gave back to the registry's quarantine (R7): confirmed withdrawals and
    /// the pins of ended connections.
    pub ids_unpinned: u64,
    /// Connections closed because the peer left withdrawals unacknowledged for
    /// [`ACK_TIMEOUT_MS`].
    pub ack_timeouts: u64,
    /// Heartbeat frames (PING, PONG) sent and received; not in `control_sent`/`_received`.
    pub heartbeats_sent: u64,
    /// See `heartbeats_sent`.
    pub heartbeats_received: u64,
    /// Connections closed because a PING went unanswered for [`Liveness::timeout_ms`].
    pub liveness_timeouts: u64,
    /// Host mode: control frames that came on an endpoint the host had not attached, and were
    /// dropped because more such frames waited than [`UNATTACHED_FRAMES_MAX`] /
    /// [`EARLY_BYTES_MAX`] allow.
    pub unattached_dropped: u64,
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

impl Io {
    /// Whether `frame`, an acknowledgement, is withheld ([`Node::withhold_acks_for_test`]).
    #[cfg(feature = "test-hooks")]
    fn withholds(&self, frame: Option<&[u8]>) -> bool {
        use tagspace_core::wire::{decode, Frame};
        self.withhold_acks
            && frame.is_none_or(|f| matches!(decode(f), Ok(Frame::WithdrawAck { .. })))
    }

    /// Nothing is withheld without the test hooks.
    #[cfg(not(feature = "test-hooks"))]
    fn withholds(&self, _frame: Option<&[u8]>) -> bool {
        false
    }
}

/// The core engine, on UCX endpoints and requests.
type Engine = engine::Engine<'static, EpKey, Io, Op, UcxError, CAP>;
type Conn = engine::Connection<EpKey, Io, UcxError, CAP>;

/// An endpoint being closed in order: closed only once every request on it has finished (UCX
/// 1.13.1 asserts when an endpoint is disconnected with requests still on it). A failed
/// endpoint is not closed this way: its requests may never finish (see `Node::fail_ep`).
struct Closing {
    key: EpKey,
    ep: Endpoint,
    /// The peer's token, if the connection was established (for `PeerDown` if it fails).
    peer: Option<u64>,
    waits: Vec<Request>,
}

enum Op {
    WaitingRoute(Waiting),
    Sending {
        lib: LibId,
        req: Request,
        conn: EpKey,
    },
    Receiving {
        lib: LibId,
        req: Request,
        /// The peer the library said the message comes from ([`Node::recv_from`]): the
        /// receive fails when that peer goes down.
        from: Option<u64>,
        /// A receive from any peer ([`Node::recv`]): its payload and length limit, to post it
        /// again when what it took carries a pair value no proven peer was given.
        any: Option<(u64, usize)>,
    },
}

/// What an operation became after a step (the engine's table keeps finished ones' results).
type Step = Next<Op, UcxError>;

impl engine::Pending for Op {
    fn route_deadline(&self) -> Option<u64> {
        match self {
            Op::WaitingRoute(w) => Some(w.deadline_ms()),
            _ => None,
        }
    }
    /// Its request's address (what [`Worker::take_completed`] reports).
    fn request(&self) -> Option<u64> {
        match self {
            Op::Sending { req, .. } | Op::Receiving { req, .. } => Some(req.addr() as u64),
            Op::WaitingRoute(_) => None,
        }
    }
}

impl engine::Waits<EpKey> for Op {
    fn sending_on(&self) -> Option<EpKey> {
        match self {
            Op::Sending { conn, .. } => Some(*conn),
            _ => None,
        }
    }
    fn receiving_from(&self) -> Option<u64> {
        match self {
            Op::Receiving { from, .. } => *from,
            _ => None,
        }
    }
}

/// How a node is set up.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// UCX options (transports, thresholds).
    pub ucx: Config,
    /// Where to listen; `None`: no listener (this node only connects out).
    pub listen: Option<SocketAddr>,
    /// Who this node is (P6): peers know it by `identity.token()` once it proved it holds the
    /// key. Never from a guessable seed; two nodes that talk need different ones.
    pub identity: Arc<Identity>,
    /// The clock for deadlines.
    pub clock: Clock,
    /// What one connection may send unasked before it is cut off (D5).
    pub limits: PeerLimits,
    /// The heartbeat on established connections ([`Liveness`]: by default a PING a second,
    /// cut off after 30 s without an answer); `None`: off (a peer that stops answering is then
    /// only noticed when UCX reports its endpoint failed). A connection it closes ends with
    /// [`CloseReason::Unresponsive`] on both sides (`stats().liveness_timeouts`, the reason in
    /// [`PeerEvent::Down`]), and what was in flight on it ends with `PeerDown` at once. It
    /// frees a process whose shared-memory receive queue a kill left stuck (see the README).
    /// **Call `progress` at least once per `timeout_ms`**, or peers cut this node off; time
    /// away from `progress` is not held against them (gaps count at most
    /// [`LIVENESS_TICK_MAX_MS`]).
    pub liveness: Option<Liveness>,
}

/// Per connection, per second: how much a peer may send that nobody asked for before its
/// connection is closed (counted in `stats().flood_closes`, D5); the core engine's.
pub use tagspace_core::engine::PeerLimits;

impl NodeConfig {
    /// Listens on 127.0.0.1 (any port) over `ucx`, with a new identity ([`fresh_identity`]).
    pub fn loopback(ucx: Config) -> NodeConfig {
        NodeConfig {
            ucx,
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            identity: fresh_identity(),
            clock: Clock::Real(Instant::now()),
            limits: PeerLimits::default(),
            liveness: Some(Liveness::default()),
        }
    }
}

/// A new identity from the operating system's randomness (`getrandom`).
///
/// # Panics
/// If the operating system has no randomness to give (no `getrandom(2)` and no
/// `/dev/urandom`): tagspace cannot prove who it is without a secret key.
pub fn fresh_identity() -> Arc<Identity> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).expect("the operating system's random source (getrandom) failed");
    Arc::new(Identity::from_seed(&seed))
}

/// Random keys for the send path's peer index ([`engine::TokenHash`]): tokens come from
/// peers' keys, which a peer chooses, so the hash must be one it cannot predict. Without OS
/// randomness, an address and the time (weaker, still per node).
fn index_keys() -> [u64; 2] {
    let mut k = [0u8; 16];
    if getrandom::fill(&mut k).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let here = &t as *const u64 as u64;
        k[..8].copy_from_slice(&(here ^ t).to_le_bytes());
        k[8..].copy_from_slice(&t.rotate_left(17).to_le_bytes());
    }
    let a = u64::from_le_bytes(k[..8].try_into().unwrap_or_default());
    let b = u64::from_le_bytes(k[8..].try_into().unwrap_or_default());
    [a, b]
}

/// Who calls `ucp_worker_progress` on a worker a host owns ([`Node::adopt`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostProgress {
    /// The host does (ucxx's progress thread, an asyncio loop, RAFT's thread): the node's
    /// [`progress`](Node::progress) only handles what UCX queued for it. On a
    /// `UCS_THREAD_MODE_MULTI` worker the host may progress from any thread.
    Host,
    /// The node does, in [`progress`](Node::progress) (the host never progresses it itself,
    /// or does so only on the node's thread).
    Node,
}

/// What a node in host mode found on the host's worker ([`Node::host`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostInfo {
    /// The worker's thread mode.
    pub thread_mode: ThreadMode,
    /// The UCX library loaded in the process (the host's).
    pub ucx_version: (u32, u32, u32),
    /// Who progresses the worker.
    pub progress: HostProgress,
}

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
    /// Endpoints waiting for their requests to finish before they are closed.
    closing: Vec<Closing>,
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
        let control_am = (CONTROL_ID as u32 * layout.am_ids_per_namespace()) as u16;
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
            closing: Vec::new(),
            buf: vec![0; MAX_FRAME_LEN],
            ack_recv: None,
            host,
            ack_exact: HashMap::new(),
            attached: std::collections::HashSet::new(),
            failed_eps: VecDeque::new(),
            unattached: VecDeque::new(),
            unattached_bytes: 0,
        };
        let mut node = node;
        match node.host {
            None => node.post_ack_recv()?,
            Some(_) => node.engine.set_owner(QueueOwner::HOST),
        }
        tracing::info!(token = node.token, addr = ?node.listen_addr().ok(), "tagspace node up");
        Ok(node)
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
            for id in l.am_ids() {
                let _ = self.worker.clear_am_handler(id);
            }
            // Its receives go with it (R7): one left posted would match a message meant for
            // the next name to take the id, UCX matching the oldest posted receive first. They
            // finish with UCS_ERR_CANCELED (one already matched to a rendezvous still completes
            // with its data, which was sent to this name).
            for op in self.engine.ops().values() {
                if let Op::Receiving { lib: of, req, .. } = op {
                    if *of == lib {
                        req.cancel();
                    }
                }
            }
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
        self.stats
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

    /// Opens an endpoint to the node listening at `addr`; the handshake runs in `progress`.
    pub fn connect(&mut self, addr: SocketAddr) -> Result<(), NodeError> {
        let ep = Endpoint::connect(&self.worker, addr)?;
        tracing::info!(%addr, "connecting");
        self.add_conn(ep, Role::Initiator);
        Ok(())
    }

    fn add_conn(&mut self, ep: Endpoint, role: Role) {
        // U1: nothing is sent until the endpoint's first flush has completed.
        let (wire, failed) = match ep.flush() {
            Ok(Started::Pending(r)) => (Wire::Flushing(r), None),
            Ok(Started::Done(())) => (Wire::Ready, None),
            Err(e) => {
                tracing::warn!(error = %e, "flushing a new endpoint failed");
                (Wire::Ready, Some(e))
            }
        };
        let key = ep.key();
        let io = Io {
            ep: Some(ep),
            wire,
            early: VecDeque::new(),
            early_bytes: 0,
            ctl_inflight: Vec::new(),
            #[cfg(feature = "test-hooks")]
            withhold_acks: false,
        };
        let (now, layout) = (self.clock.now_ms(), self.registry.layout());
        let i = (self.engine).add_conn(key, role, &self.identity, layout, now, io);
        if let Some(e) = failed {
            self.engine.handle_failed(i, e);
            self.carry_out();
        }
    }

    /// Host mode: what the node found on the host's worker; `None` on a worker of its own.
    pub fn host(&self) -> Option<HostInfo> {
        self.host
    }

    /// Host mode: lets tagspace use the host's endpoint `ep` to one peer. The handshake runs
    /// in [`progress`](Self::progress); the peer's libraries appear as it completes
    /// ([`PeerEvent::Up`]). `side`: [`Role::Initiator`] if this process created the endpoint
    /// to the peer's listener, [`Role::Acceptor`] if it came from a connection request. For
    /// endpoints both processes created from each other's worker address (one UCX connection
    /// for the pair), the two must pass different sides: e.g. the lower rank `Initiator`.
    /// Control frames the peer sent before this call were kept (at most
    /// [`UNATTACHED_FRAMES_MAX`]) and are handled now.
    ///
    /// # Safety
    /// `ep` must be a live endpoint on this node's worker, and stay live until
    /// [`detach`](Self::detach) returns or the node is dropped.
    pub unsafe fn attach(&mut self, ep: sys::ucp_ep_h, side: Role) -> Result<(), NodeError> {
        if self.host.is_none() {
            return Err(NodeError::Usage(
                "attach is for a node on a host's worker (Node::adopt); use connect",
            ));
        }
        if ep.is_null() {
            return Err(NodeError::Usage("the host's endpoint handle is NULL"));
        }
        let key = EpKey::of(ep);
        if self.attached.contains(&key) {
            return Err(NodeError::Usage("this endpoint is already attached"));
        }
        if let Some(j) = self.closing.iter().position(|c| c.key == key) {
            // A reused address: the old endpoint's leftovers are tagspace's no more.
            let c = self.closing.swap_remove(j);
            drop(c.waits);
        }
        self.attached.insert(key);
        self.failed_eps.retain(|k| *k != key); // a reused address: a new endpoint
                                               // SAFETY: the caller's promise.
        let ep = unsafe { Endpoint::borrow(&self.worker, ep) };
        self.add_conn(ep, side);
        for f in self.take_unattached(key) {
            self.on_control(key, &f);
        }
        Ok(())
    }

    /// Host mode: the token of the peer on the host's endpoint `ep`, once its connection is
    /// established (`None` before, and after it went down or was detached): how a host that
    /// knows its endpoint finds the peer's name for routing.
    pub fn peer_on(&self, ep: sys::ucp_ep_h) -> Option<u64> {
        let key = EpKey::of(ep);
        self.engine
            .conns()
            .iter()
            .find(|c| {
                c.key() == key && c.io.ep.is_some() && c.is_open() && c.session().is_established()
            })
            .and_then(Conn::peer)
    }

    /// Host mode: stops using the host's endpoint `ep`. The peer is told (an orderly CLOSE,
    /// sent on `ep` before this returns: close the endpoint in order, not forced, for the peer
    /// to see it), libraries hear [`PeerEvent::Down`] if it was the peer's last connection, and
    /// sends still in flight on it end with [`NodeError::PeerDown`] (their buffers stay parked
    /// until UCX ends them). tagspace makes no UCX call on `ep` after this returns. Detach
    /// every attached endpoint before closing it, also after the peer closed the connection
    /// ([`PeerEvent::Down`]); one reported with [`peer_failed`](Self::peer_failed) is
    /// detached already.
    pub fn detach(&mut self, ep: sys::ucp_ep_h) -> Result<(), NodeError> {
        let key = EpKey::of(ep);
        if !self.attached.remove(&key) {
            if let Some(j) = self.failed_eps.iter().position(|k| *k == key) {
                // Failed and so detached already (peer_failed, handled by progress).
                self.failed_eps.remove(j);
                return Ok(());
            }
            return Err(NodeError::Usage("this endpoint is not attached"));
        }
        let detached = UcxError {
            op: "endpoint detached by the host",
            status: Status::CANCELED,
        };
        if let Some(i) = self.engine.conns().find(key, |c| c.io.ep.is_some()) {
            self.engine.close(i, Some(CloseReason::Normal));
            self.carry_out();
        }
        if let Some(j) = self.closing.iter().position(|c| c.key == key) {
            let c = self.closing.swap_remove(j);
            self.abandon_closing(c, detached);
        }
        self.take_unattached(key);
        Ok(())
    }

    /// Host mode: the host's endpoint `ep` failed with UCX status `status` (what its error
    /// handler was given). Handled as tagspace's own error handler would be (D3): operations
    /// on it fail, the peer goes down if this was its last connection. tagspace makes no
    /// further UCX call on `ep`, and never closes it: the host does (no
    /// [`detach`](Self::detach) needed; one is harmless). An endpoint that is not attached is
    /// ignored.
    pub fn peer_failed(&mut self, ep: sys::ucp_ep_h, status: i8) {
        let e = UcxError {
            op: "endpoint (failure reported by the host)",
            status: failure_status(status),
        };
        // At once (a shared node queues it for its next `progress`): the endpoint is detached
        // from here on, and a later `detach` of it is harmless.
        self.on_ep_error(EpKey::of(ep), e);
    }

    /// Where a shared node ([`crate::shared::SharedNode`]) reports failures without its lock.
    pub(crate) fn error_sink(&self) -> crate::ucp::ErrorSink {
        self.worker.error_sink()
    }

    /// Forgets operation `op`, finished or not: a receive still waiting is cancelled, and a
    /// request UCX has not finished is parked with its buffer until UCX is done with it.
    pub fn forget(&mut self, op: OpId) {
        self.engine.ops_mut().forget(op);
    }

    /// Takes the frames kept for endpoint `key` (oldest first) out of the unattached queue.
    fn take_unattached(&mut self, key: EpKey) -> Vec<Vec<u8>> {
        let (mine, rest) = std::mem::take(&mut self.unattached)
            .into_iter()
            .partition(|(k, _)| *k == key);
        self.unattached = rest;
        let mine: Vec<Vec<u8>> = mine.into_iter().map(|(_, f)| f).collect();
        self.unattached_bytes -= mine.iter().map(Vec::len).sum::<usize>();
        mine
    }

    /// Host mode: keeps a control frame from an endpoint not attached yet, within bounds.
    fn keep_unattached(&mut self, key: EpKey, bytes: &[u8]) {
        while !self.unattached.is_empty()
            && (self.unattached.len() >= UNATTACHED_FRAMES_MAX
                || self.unattached_bytes + bytes.len() > EARLY_BYTES_MAX)
        {
            if let Some((_, f)) = self.unattached.pop_front() {
                self.unattached_bytes -= f.len();
                self.stats.unattached_dropped += 1;
            }
        }
        if bytes.len() > EARLY_BYTES_MAX {
            self.stats.unattached_dropped += 1;
            return;
        }
        self.unattached_bytes += bytes.len();
        self.unattached.push_back((key, bytes.to_vec()));
    }

    /// Test hook (feature `test-hooks`): sends raw bytes as a control frame to `peer`, as a
    /// hostile peer would.
    #[cfg(feature = "test-hooks")]
    pub fn inject_control(&mut self, peer: u64, bytes: &[u8]) -> Result<(), NodeError> {
        let ep = self
            .endpoint_to(peer)
            .ok_or(NodeError::NoConnection { peer })?;
        if let Started::Pending(r) = ep.am_send(self.control_am, bytes.to_vec())? {
            self.background.push(r);
        }
        Ok(())
    }

    /// The shared endpoint to `peer`, for code outside tagspace (a legacy library) and for
    /// runtimes that send with their own buffers (see [`route_tag`](Self::route_tag)).
    /// `None` until the connection is established, which is only after the endpoint's wire-up
    /// has finished (U1): a send on it is never exposed to openucx/ucx#6872.
    pub fn endpoint_to(&self, peer: u64) -> Option<&Endpoint> {
        let i = self.engine.conns().serving(peer).ok()?;
        self.engine.conns().get(i)?.io.ep.as_ref()
    }

    /// The fast path: the endpoint to `peer` and the tag for `payload` in `lib`'s namespace
    /// there, for a runtime that sends with [`Endpoint::tag_send`] itself. `Ok(None)` while the
    /// peer has not announced the name; `NoConnection` until the connection is established
    /// (after the endpoint's wire-up, U1). A send made this way is the caller's: if the peer
    /// fails, UCX (not tagspace) decides when its request ends.
    pub fn route_tag(
        &self,
        lib: LibId,
        peer: u64,
        payload: u64,
    ) -> Result<Option<(&Endpoint, u64)>, NodeError> {
        let found = self
            .engine
            .conns()
            .route_tag(self.engine.libs(), lib, peer, payload);
        let Some((c, tag)) = found.map_err(|m| m.error(peer))? else {
            return Ok(None);
        };
        let ep = c.io.ep.as_ref();
        Ok(Some((ep.ok_or(NodeError::NoConnection { peer })?, tag)))
    }

    /// The endpoint to `peer` and `tag(lib's namespace, the peer's route for it)`.
    fn routed(
        &self,
        lib: LibId,
        peer: u64,
        tag: impl FnOnce(&Namespace<'static, CAP>, Route) -> Result<Tag, TagError>,
    ) -> Result<Option<(&Endpoint, u64)>, NodeError> {
        let Some((i, route)) = self.engine.conns().route(self.engine.libs(), lib, peer)? else {
            return Ok(None);
        };
        let ep = self.engine.conns().get(i).and_then(|c| c.io.ep.as_ref());
        let ep = ep.ok_or(NodeError::NoConnection { peer })?;
        Ok(Some((ep, tag(self.engine.libs().ns(lib)?, route)?.raw())))
    }

    /// [`route_tag`](Self::route_tag) for the peer's inbox tag of `lib` ("a new transmission
    /// has begun"), for a runtime that sends it with its own calls.
    pub fn route_inbox(
        &self,
        lib: LibId,
        peer: u64,
    ) -> Result<Option<(&Endpoint, u64)>, NodeError> {
        self.routed(lib, peer, |ns, route| ns.remote_inbox(route))
    }

    /// Sends `data` with `payload` to library `lib`'s namespace on `peer`, waiting up to
    /// `timeout_ms` for the connection and for the peer to announce the name (P2).
    pub fn send(
        &mut self,
        lib: LibId,
        peer: u64,
        payload: u64,
        data: Vec<u8>,
        timeout_ms: u64,
    ) -> OpId {
        self.start_send(lib, peer, Target::Data(payload), data, timeout_ms)
    }

    /// Sends to the peer's inbox tag for `lib` ("a new transmission has begun").
    pub fn send_inbox(&mut self, lib: LibId, peer: u64, data: Vec<u8>, timeout_ms: u64) -> OpId {
        self.start_send(lib, peer, Target::Inbox, data, timeout_ms)
    }

    /// Sends an Active Message to `lib`'s local AM id `local` on `peer`.
    pub fn am_send(
        &mut self,
        lib: LibId,
        peer: u64,
        local: u16,
        data: Vec<u8>,
        timeout_ms: u64,
    ) -> OpId {
        self.start_send(lib, peer, Target::Am(local), data, timeout_ms)
    }

    fn start_send(
        &mut self,
        lib: LibId,
        peer: u64,
        target: Target,
        data: Vec<u8>,
        timeout_ms: u64,
    ) -> OpId {
        let w = Waiting::new(lib, peer, target, data, self.clock.now_ms(), timeout_ms);
        let id = self.engine.ops_mut().start(Next::Wait(Op::WaitingRoute(w)));
        self.advance_op(id);
        id
    }

    /// Sends `data` from the caller's buffer to `payload` in `lib`'s namespace on `peer`,
    /// returning once UCX no longer needs the buffer (at once for a small message sent
    /// eagerly): no allocation and no operation to take — the path for pooled or reused
    /// buffers, at raw libucp's cost (bench (a), "buf").
    ///
    /// Unlike [`send`](Self::send) it does not wait for the connection or the peer's
    /// announcement (P2): `NoConnection` or `PeerLacksNamespace` (waited 0 ms) at once, so a
    /// caller sends the first message with `send` or checks [`route_tag`](Self::route_tag).
    /// While it blocks (a rendezvous waits for the receiver) only the UCX worker is progressed,
    /// not the node's control traffic. Both calls block: a rendezvous between two nodes that
    /// one thread drives in turn cannot finish inside either call (use `send`/`recv` there).
    pub fn send_from(
        &mut self,
        lib: LibId,
        peer: u64,
        payload: u64,
        data: &[u8],
    ) -> Result<(), NodeError> {
        let r = match self.route_tag(lib, peer, payload) {
            Ok(Some((ep, tag))) => ep.tag_send_from(tag, data).map_err(NodeError::from),
            Ok(None) => Err(self.engine.libs().lacks(lib, peer, 0)),
            Err(e) => Err(e),
        };
        self.count(lib, r.is_ok(), true);
        r
    }

    /// Receives the message for `payload` in `lib`'s namespace from any proven peer (as
    /// [`recv`](Self::recv): the pair field free, a stranger's message dropped and waited past)
    /// into the caller's `buf`, progressing the worker until it has arrived; returns its length. The
    /// buffer is borrowed for this call only: nothing is allocated, and a message already
    /// waiting is taken without a UCX request (see [`Worker::tag_recv_into`]).
    ///
    /// A message longer than `buf` fails with `UCS_ERR_MESSAGE_TRUNCATED` (it is consumed);
    /// with `timeout`, a receive still unmatched then fails with `UCS_ERR_TIMED_OUT` and takes
    /// nothing later. While it blocks only the UCX worker is progressed, not the node's control
    /// traffic (announcements, heartbeats): keep timeouts short, or use [`recv`](Self::recv)
    /// and [`progress`](Self::progress), which are also peer-aware ([`recv_from`](Self::recv_from)).
    pub fn recv_into(
        &mut self,
        lib: LibId,
        payload: u64,
        buf: &mut [u8],
        timeout: Option<std::time::Duration>,
    ) -> Result<usize, NodeError> {
        self.recv_into_inner(lib, None, payload, buf, timeout)
    }

    /// [`recv_into`](Self::recv_into) for `peer`'s message only: exact (full mask, D1: a
    /// message already waiting is taken by a hashed lookup, without a UCX request — in a held
    /// namespace ([`hold_backlog`](Self::hold_backlog)) one the node holds is taken first, by a
    /// scan of its backlog), and no
    /// other process's message matches (see [`recv_from`](Self::recv_from)). Unlike
    /// `recv_from` it does not end when `peer` goes down: give it a `timeout`.
    pub fn recv_into_from(
        &mut self,
        lib: LibId,
        peer: u64,
        payload: u64,
        buf: &mut [u8],
        timeout: Option<std::time::Duration>,
    ) -> Result<usize, NodeError> {
        self.recv_into_inner(lib, Some(peer), payload, buf, timeout)
    }

    fn recv_into_inner(
        &mut self,
        lib: LibId,
        from: Option<u64>,
        payload: u64,
        buf: &mut [u8],
        timeout: Option<std::time::Duration>,
    ) -> Result<usize, NodeError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let m = self.recv_matcher(lib, from, payload);
        let held = m.as_ref().ok().and_then(|m| self.take_held(m));
        let r = m.and_then(|m| loop {
            if let Some(held) = held {
                break Ok(held.recv_into(buf)?.len);
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let info = self.worker.tag_recv_into(m.tag(), m.mask(), buf, left)?;
            // a stranger's message (a pair value no proven peer was given): wait on
            if from.is_some() || !self.forged(info.tag) {
                return Ok(info.len);
            }
        });
        self.count(lib, r.is_ok(), false);
        r
    }

    fn count(&mut self, lib: LibId, ok: bool, sent: bool) {
        self.engine.libs_mut().count(lib, ok, sent);
    }

    /// Posts a receive for `payload` in `lib`'s namespace from any proven peer, for a message
    /// of at most `max_len` bytes (a longer one fails with `UCS_ERR_MESSAGE_TRUNCATED`).
    ///
    /// Every bit of the tag is matched but the pair field (where the layout has one): a
    /// partial mask, as MPI's any-source receives, which takes UCX off its hashed fast path
    /// while posted. What it takes is checked: a message whose pair value no proven peer was
    /// given (made up by a process that never proved its identity here) is dropped, counted
    /// ([`NodeStats::forged`]), and the receive waits on. A proven peer may still send any
    /// payload of this namespace here, as with any receive from any source.
    ///
    /// The receive is not tied to a peer: if the sender dies it may never finish (UCX cannot
    /// cancel a receive already matched to a dead peer's rendezvous). Use
    /// [`recv_from`](Self::recv_from) when the sender is known: exact (full mask, D1), and only
    /// that peer's messages match.
    pub fn recv(&mut self, lib: LibId, payload: u64, max_len: usize) -> OpId {
        self.post(lib, None, payload, max_len)
    }

    /// Like [`recv`](Self::recv), for a message the library expects from `peer` (D3): when
    /// `peer` goes down, the receive finishes with [`NodeError::PeerDown`] —
    /// * at once if its connection *failed* (UCX's peer error handling), including a receive
    ///   already matched to that peer's rendezvous, which UCX would otherwise leave in progress
    ///   for ever; its buffer stays with UCX until UCX lets the request go;
    /// * if the peer *closed* its connection in order, the receive is cancelled the UCX way:
    ///   one already matched still completes with its data, one not yet matched finishes with
    ///   `PeerDown { cause: None }`.
    ///
    /// A receive posted for a peer that has already failed fails at once. Only `peer`'s
    /// messages match it: the tag it waits for carries, in the layout's pair field, the value
    /// this node gives `peer` alone once it has proven its identity (a full mask, D1) — another
    /// peer, or a stranger who copies the namespace and payload, makes another tag (a stranger
    /// guesses the value with probability `2^-pair_bits` per message). Receives of other peers
    /// are never touched, and [`cancel`](Self::cancel) keeps UCX's meaning for every receive.
    pub fn recv_from(&mut self, lib: LibId, peer: u64, payload: u64, max_len: usize) -> OpId {
        if let Some(cause @ Some(_)) = self.engine.conns().failed_peer(peer) {
            let r = self.finish(lib, Err(NodeError::PeerDown { peer, cause }), false);
            return self.engine.ops_mut().start(r);
        }
        self.post(lib, Some(peer), payload, max_len)
    }

    fn post(&mut self, lib: LibId, from: Option<u64>, payload: u64, max_len: usize) -> OpId {
        let op = match self.post_recv(lib, from, payload, max_len) {
            Ok(req) => Next::Wait(Op::Receiving {
                lib,
                req,
                from,
                any: from.is_none().then_some((payload, max_len)),
            }),
            Err(e) => self.finish(lib, Err(e), false),
        };
        self.engine.ops_mut().start(op)
    }

    /// The matcher for `payload` in `lib`'s namespace: from `peer` (exact, its pair value) or
    /// from any peer (the pair field free).
    fn recv_matcher(
        &mut self,
        lib: LibId,
        from: Option<u64>,
        payload: u64,
    ) -> Result<tagspace_core::Matcher, NodeError> {
        (self.engine).recv_matcher(self.registry.layout(), lib, from, payload)
    }

    fn post_recv(
        &mut self,
        lib: LibId,
        from: Option<u64>,
        payload: u64,
        max_len: usize,
    ) -> Result<Request, NodeError> {
        let m = self.recv_matcher(lib, from, payload)?;
        if let Some(held) = self.take_held(&m) {
            return Ok(held.recv_woken(max_len)?);
        }
        Ok(self
            .worker
            .tag_recv_woken(m.tag(), m.mask(), Vec::with_capacity(max_len))?)
    }

    /// Whether a tag a receive from any peer took carries a pair value this node gave no
    /// proven peer (never, where the layout has no pair field): counted as a stray of its
    /// namespace.
    fn forged(&mut self, tag: u64) -> bool {
        let layout = self.registry.layout();
        if !self.engine.conns().forged(layout, tag) {
            return false;
        }
        count_stray(
            &mut self.stats,
            &mut self.stray_by_id,
            layout.namespace_of(tag),
            true,
        );
        true
    }

    /// Takes the next inbox message for `lib` if one waits (exact probe with remove, then a
    /// receive of at most `max_len` bytes): `Some(op)` completes with the data.
    ///
    /// It takes only what a proven peer sent: an inbox message with a pair value no proven
    /// peer was given (a stranger's) is taken out and dropped as a stray, at most
    /// [`FORGED_PER_PROBE`] of them per call.
    pub fn probe_inbox(&mut self, lib: LibId, max_len: usize) -> Result<Option<OpId>, NodeError> {
        let m = self.engine.libs().ns(lib)?.inbox_matcher_any_peer();
        if let Some(held) = self.take_held(&m) {
            let req = held.recv_woken(max_len)?;
            return Ok(Some(self.engine.ops_mut().start(Next::Wait(
                Op::Receiving {
                    lib,
                    req,
                    from: None,
                    any: None,
                },
            ))));
        }
        for _ in 0..FORGED_PER_PROBE {
            // Look first: a stranger's message is taken by its exact tag and never buffered
            // beyond STRAY_MAX_LEN, a proven peer's with the library's limit.
            let Some(info) = self.worker.tag_probe(m.tag(), m.mask()) else {
                return Ok(None);
            };
            if self.forged(info.tag) {
                if let Some((_, req)) =
                    (self.worker).tag_probe_take(info.tag, u64::MAX, STRAY_MAX_LEN)?
                {
                    self.background.push(req);
                }
                continue;
            }
            return match self
                .worker
                .tag_probe_take_woken(info.tag, u64::MAX, max_len)?
            {
                None => Ok(None),
                Some((_, req)) => Ok(Some(self.engine.ops_mut().start(Next::Wait(
                    Op::Receiving {
                        lib,
                        req,
                        from: None,
                        any: None,
                    },
                )))),
            };
        }
        Ok(None)
    }

    /// The oldest message waiting for `lib` — sent to its namespace but not received (yet) —
    /// as its tag and length; `None` when nothing waits. In a held namespace
    /// ([`hold_backlog`](Self::hold_backlog)) the node's backlog comes first.
    ///
    /// Otherwise messages to a *registered* namespace are the library's business, as in UCX:
    /// tagspace never drains them (but forgeries: a pair value no proven peer was given), so a
    /// peer (or a bug) can make them pile up for as long as the library does not receive them.
    /// UCX keeps no count of its unexpected queue and cannot be asked for one without taking
    /// the messages, so this answers "is anything waiting, and what is the oldest" — enough to
    /// watch for a library that has stopped receiving. It is one partial-mask probe, which
    /// scans UCX's queue: call it to monitor, not per message.
    pub fn oldest_waiting(&self, lib: LibId) -> Result<Option<TagInfo>, NodeError> {
        let ns = self.namespace(lib).ok_or(NodeError::NoSuchLibrary)?;
        if let Some((tag, len)) = self.backlog.oldest(ns.id()) {
            return Ok(Some(TagInfo { tag, len }));
        }
        let m = ns.matcher_any();
        Ok(self.worker.tag_probe(m.tag(), m.mask()))
    }

    /// Whether code outside tagspace receives tags whose namespace field is 0 on this worker
    /// with its own calls ("legacy" tags, R6): `true` by default, and then such messages are
    /// never drained — a stranger's id-0 tags wait for that code, and pile up if it never
    /// takes them. A node whose worker nobody else uses says `false`: id-0 messages are strays
    /// like any unregistered id's (on a host's worker nothing is drained either way).
    pub fn set_legacy_tags(&mut self, used: bool) {
        self.engine.set_id0_strays(!used);
    }

    /// Bounds what each proven peer can leave waiting for `lib` (D5 for tag messages): from
    /// now on the node takes `lib`'s unexpected messages out of UCX's queue — oldest first, on
    /// the stray drain's schedule ([`DRAIN_INTERVAL_MS`], or on every `progress` while they
    /// keep coming) — into a backlog that `lib`'s receives read before they ask UCX, counted
    /// per peer. A peer whose messages waiting there would pass `limit` is cut off (CLOSE with
    /// reason `Flood`; [`NodeStats::backlog_floods`]): its held messages are dropped, and so is
    /// what it still sends to a held namespace, until it proves its identity again. A message
    /// whose pair value no proven peer was given is dropped as a stray. Nothing is copied: a
    /// held message stays where UCX keeps it (a rendezvous message's data is not even
    /// fetched) until a receive takes it into its own buffer.
    ///
    /// The library promises to receive only through this node ([`recv`](Self::recv),
    /// [`recv_from`](Self::recv_from), [`recv_into`](Self::recv_into),
    /// [`recv_into_from`](Self::recv_into_from), [`probe_inbox`](Self::probe_inbox)): a
    /// receive it posts with its own calls on the worker does not see held messages. Order is
    /// kept: a peer's messages for one tag are received in the order they were sent.
    ///
    /// Not on a host's worker (its libraries receive with their own calls; there the node
    /// takes nothing, see [`oldest_waiting`](Self::oldest_waiting)), and only with a layout
    /// that has a pair field (it tells the sender). Called again, it sets the new limit.
    pub fn hold_backlog(&mut self, lib: LibId, limit: BacklogLimit) -> Result<(), NodeError> {
        let id = self.engine.libs().ns(lib)?.id();
        let (layout, owner) = (self.registry.layout(), self.engine.owner());
        (self.backlog.hold_checked(id, limit, layout, owner)).map_err(NodeError::Usage)
    }

    /// Whether strays keep coming, or more held namespaces' messages than a pass takes:
    /// the node, not a receive, has to take them.
    fn flooded(&self) -> bool {
        self.engine.sweep().is_flooded() || self.backlog.is_saturated()
    }

    /// How long a drain or hold pass may run ([`STRAY_FLOOD_BUDGET_US`] while flooded).
    fn drain_budget(&self) -> Duration {
        Duration::from_micros(if self.flooded() {
            STRAY_FLOOD_BUDGET_US
        } else {
            STRAY_TIME_BUDGET_US
        })
    }

    /// A held message for a receive with matcher `m`, if its namespace is held and one
    /// matches: the oldest (it was sent before anything still in UCX's queue that matches).
    fn take_held(&mut self, m: &tagspace_core::Matcher) -> Option<Message> {
        if !self.backlog.is_active() {
            return None;
        }
        let id = self.registry.layout().namespace_of(m.tag());
        Some(self.backlog.take(id, m.tag(), m.mask())?.msg)
    }

    /// One pass of the held namespaces' backlogs ([`Node::hold_backlog`]), within the stray
    /// drain's time budget; cuts off the peers over their limit. Whether it took anything.
    fn hold_pass(&mut self, deadline: Instant) -> bool {
        let layout = self.registry.layout();
        // Peers the node forgot, and their pair values: what they left held can no longer be
        // received from them (a receive tied to one makes a new value), nor be told apart
        // from a stranger's.
        let conns = self.engine.conns();
        let forgotten = conns.pairs_forgotten();
        let gone = (self.backlog).forget_unknown(forgotten, |p| conns.rx_pair_of(p).is_some());
        self.stats.backlog_dropped += gone.len() as u64;
        let mut queue = Strays {
            worker: &self.worker,
            layout,
            stats: &mut self.stats,
            by_id: &mut self.stray_by_id,
            background: &mut self.background,
            oldest: None,
        };
        let conns = self.engine.conns();
        let pass = self.backlog.pass(
            layout,
            &mut queue,
            |tag| conns.sender_of(layout, tag),
            || Instant::now() >= deadline,
        );
        self.stats.held += pass.held;
        self.stats.backlog_dropped += pass.dropped + pass.released.len() as u64;
        let took = pass.took();
        drop(pass.released);
        for &peer in &pass.floods {
            tracing::warn!(
                peer,
                "peer left more messages waiting than its backlog limit; closing its connections"
            );
            self.stats.backlog_floods += 1;
            self.engine.handle_flooded(peer);
        }
        self.carry_out();
        took
    }

    /// The exact matcher (full mask, D1) for `payload` in `lib`'s namespace from `peer`: what
    /// `peer`'s [`route_tag`](Self::route_tag) for this library and payload sends to, for a
    /// runtime that receives with its own calls. Only `peer`'s messages match it (see
    /// [`recv_from`](Self::recv_from)).
    pub fn matcher_from(
        &mut self,
        lib: LibId,
        peer: u64,
        payload: u64,
    ) -> Result<tagspace_core::Matcher, NodeError> {
        self.recv_matcher(lib, Some(peer), payload)
    }

    /// [`matcher_from`](Self::matcher_from) without making anything: `None` while this node
    /// has made no pair value for `peer` yet (before it connected, and before any receive tied
    /// to it) — then ask `matcher_from`, which makes it.
    pub fn matcher_known(
        &self,
        lib: LibId,
        peer: u64,
        payload: u64,
    ) -> Result<Option<tagspace_core::Matcher>, NodeError> {
        let ns = self.engine.libs().ns(lib)?;
        let pair = match self.registry.layout().pair_bits() {
            0 => Some(0),
            _ => self.engine.conns().rx_pair_of(peer),
        };
        Ok(match pair {
            Some(pair) => Some(ns.matcher_from(pair, payload)?),
            None => None,
        })
    }

    /// The matcher for `payload` in `lib`'s namespace from any peer: the pair field free (a
    /// partial mask where the layout has one). It also takes a message a stranger made up:
    /// check the received tag with [`sender_of`](Self::sender_of).
    pub fn matcher_any_peer(
        &self,
        lib: LibId,
        payload: u64,
    ) -> Result<tagspace_core::Matcher, NodeError> {
        Ok(self.engine.libs().ns(lib)?.matcher_any_peer(payload)?)
    }

    /// The exact matcher of `lib`'s inbox as `peer` sends to it.
    pub fn inbox_matcher_from(
        &mut self,
        lib: LibId,
        peer: u64,
    ) -> Result<tagspace_core::Matcher, NodeError> {
        let layout = self.registry.layout();
        let pair = self.engine.rx_pair(peer, layout);
        Ok(self.engine.libs().ns(lib)?.inbox_matcher_from(pair))
    }

    /// `lib`'s inbox from any peer (the pair field free; check with
    /// [`sender_of`](Self::sender_of)).
    pub fn inbox_matcher_any_peer(&self, lib: LibId) -> Result<tagspace_core::Matcher, NodeError> {
        Ok(self.engine.libs().ns(lib)?.inbox_matcher_any_peer())
    }

    /// Who sent a message with `tag` to a namespace here: the proven peer whose pair value it
    /// carries, or `None` — no proven peer was given that value, so a process that never
    /// proved its identity here made the tag up (drop the message). Where the layout has no
    /// pair field nobody can tell: `None`.
    pub fn sender_of(&self, tag: u64) -> Option<u64> {
        self.engine.conns().sender_of(self.registry.layout(), tag)
    }

    /// Listens on `lib`'s local AM id `local`.
    pub fn am_listen(&mut self, lib: LibId, local: u16) -> Result<(), NodeError> {
        let id = self.engine.libs_mut().am_listen(lib, local)?;
        self.worker.set_am_handler(id)?;
        Ok(())
    }

    /// The next Active Message for `lib` on `local`.
    pub fn am_take(&mut self, lib: LibId, local: u16) -> Option<Vec<u8>> {
        self.engine.libs_mut().am_take(lib, local)
    }

    /// Cancels a receive still waiting for its message (it then finishes with
    /// `UCS_ERR_CANCELED`); no effect on other operations.
    pub fn cancel(&mut self, op: OpId) {
        if let Some(Op::Receiving { req, .. }) = self.engine.ops().get(op) {
            req.cancel();
        }
    }

    /// Whether `op` has finished (without taking it).
    pub fn is_done(&self, op: OpId) -> bool {
        self.engine.ops().is_done(op)
    }

    /// The result of an operation once it has finished (`Ok(Some(data))` for receives); taking
    /// it forgets the operation.
    pub fn take(&mut self, op: OpId) -> Option<Result<Option<Vec<u8>>, NodeError>> {
        if !self.is_done(op) {
            self.advance_op(op);
        }
        self.engine.ops_mut().take(op)
    }

    /// Operations not yet taken.
    pub fn pending_ops(&self) -> usize {
        self.engine.ops().len()
    }

    fn finish(&mut self, lib: LibId, r: Result<Option<Vec<u8>>, NodeError>, sent: bool) -> Step {
        Next::finished(self.engine.libs_mut(), lib, r, sent)
    }

    fn advance_op(&mut self, id: OpId) {
        let Some(op) = self.engine.ops_mut().remove(id) else {
            return;
        };
        let next = match op {
            Op::WaitingRoute(w) => self.try_waiting(w),
            Op::Sending { lib, mut req, conn } => match req.test() {
                None => Next::Wait(Op::Sending { lib, req, conn }),
                Some(r) => self.finish(lib, r.map(|_| None).map_err(NodeError::from), true),
            },
            Op::Receiving {
                lib,
                mut req,
                from,
                any,
            } => match req.test() {
                None => Next::Wait(Op::Receiving {
                    lib,
                    req,
                    from,
                    any,
                }),
                Some(Err(e)) if e.status == crate::ucp::Status::CANCELED => {
                    // Cancelled because its peer closed (see `recv_from`), its library was
                    // released, or by the library.
                    let e = match from.and_then(|p| Some((p, self.engine.conns().failed_peer(p)?)))
                    {
                        // Released first: the same answer whatever its peer did meanwhile.
                        _ if self.engine.libs().get(lib).is_none() => NodeError::NoSuchLibrary,
                        Some((peer, cause)) => NodeError::PeerDown { peer, cause },
                        None => e.into(),
                    };
                    self.finish(lib, Err(e), false)
                }
                // A stranger's (also one too long for the receive, which UCX failed with
                // TRUNCATED): dropped; the receive waits on for a proven peer's message.
                Some(_) if any.is_some() && req.sender_tag().is_some_and(|t| self.forged(t)) => {
                    let (payload, max_len) = any.unwrap_or_default();
                    match self.post_recv(lib, None, payload, max_len) {
                        Ok(req) => Next::Wait(Op::Receiving {
                            lib,
                            req,
                            from,
                            any,
                        }),
                        Err(e) => self.finish(lib, Err(e), false),
                    }
                }
                Some(Ok(Completion::Received { data, .. })) => {
                    self.finish(lib, Ok(Some(data)), false)
                }
                Some(Ok(Completion::Sent(_))) => self.finish(lib, Ok(None), false),
                Some(Err(e)) => self.finish(lib, Err(e.into()), false),
            },
        };
        self.engine.ops_mut().put(id, next);
    }

    fn try_waiting(&mut self, mut w: Waiting) -> Step {
        let lib = w.lib;
        match self.try_send(&mut w) {
            Ok(Sent::InFlight(req, conn)) => Next::Wait(Op::Sending { lib, req, conn }),
            Ok(Sent::Complete) => self.finish(lib, Ok(None), true),
            Ok(Sent::Blocked(why)) => {
                match w.blocked(why, self.clock.now_ms(), self.engine.libs()) {
                    Ok(w) => Next::Wait(Op::WaitingRoute(w)),
                    Err(e) => self.finish(lib, Err(e), true),
                }
            }
            Err(e) => self.finish(lib, Err(e), true),
        }
    }

    /// Hands a waiting send to UCX if the engine says it can go (the data moves into the
    /// request), or says why it waits.
    fn try_send(&mut self, w: &mut Waiting) -> Result<Sent, NodeError> {
        let (i, dest) = match self.engine.resolve(w)? {
            Resolved::Go { conn, dest } => (conn, dest),
            Resolved::Wait(why) => return Ok(Sent::Blocked(why)),
        };
        let peer = w.peer;
        let c = (self.engine.conns().get(i)).ok_or(NodeError::NoConnection { peer })?;
        let ep = c.io.ep.as_ref().ok_or(NodeError::NoConnection { peer })?;
        let data = std::mem::take(&mut w.data);
        let started = match dest {
            Dest::Tag(tag) => ep.tag_send_woken(tag, data)?,
            Dest::Am(id) => ep.am_send_woken(id, data)?,
        };
        Ok(match started {
            Started::Done(_) => Sent::Complete,
            Started::Pending(req) => Sent::InFlight(req, c.key()),
        })
    }

    /// Handles everything pending: UCX progress, accepted connections, endpoint errors,
    /// control frames, Active Messages, outgoing announcements, waiting operations, and the
    /// periodic stray drain. Returns whether anything happened.
    pub fn progress(&mut self) -> bool {
        // Bounded (D4): under a flood UCX always has more to do; the rest waits for the next
        // call, after tagspace has handled what arrived.
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
        busy |= self.absorb_ep_errors();
        busy |= self.poll_wireup();
        while let Some(am) = self.worker.take_am() {
            busy = true;
            self.on_am(am);
        }
        busy |= self.take_ack_tags();
        busy |= self.flush();
        if self.host.is_some() {
            busy |= self.sync_ack_recvs();
        }
        busy |= self.release_confirmed();
        // D6: only the operations something happened to.
        self.worker.take_completed(&mut self.completed);
        for addr in self.completed.drain(..) {
            self.engine.ops_mut().completed(addr as u64);
        }
        for id in self.engine.due_ops(self.clock.now_ms()) {
            self.advance_op(id);
        }
        for io in self.engine.ios_mut() {
            io.ctl_inflight.retain_mut(|r| r.test().is_none());
        }
        self.engine.handle_timeout(self.clock.now_ms());
        self.carry_out();
        self.close_retired();
        self.background.retain_mut(|r| r.test().is_none());
        let now = self.clock.now_ms();
        self.engine.forget_ended(|c| c.io.ep.is_none(), now);
        // Never on a host's worker (coexistence: the host's libraries own every tag tagspace
        // does not; nothing is swept out of the host's queue). One time budget for both.
        let deadline = Instant::now() + self.drain_budget();
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
        let at = at.into_iter().chain(held).min()?;
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

    /// Handles the endpoint failures UCX (or the host) queued; true if there were any. A
    /// shared node does this before anything else it does under its lock, so that no call
    /// uses an endpoint whose failure was reported before the call began.
    pub(crate) fn absorb_ep_errors(&mut self) -> bool {
        let mut failed = false;
        while let Some((key, e)) = self.worker.take_ep_error() {
            failed = true;
            self.on_ep_error(key, e);
        }
        failed
    }

    fn on_ep_error(&mut self, key: EpKey, e: UcxError) {
        if self.attached.remove(&key) {
            // A host's endpoint reported failed (a shared node's `peer_failed` queues it here):
            // detached from now on, as a plain node's `peer_failed` does at once.
            self.take_unattached(key);
            if self.failed_eps.len() >= FAILED_EPS_KEPT {
                self.failed_eps.pop_front();
            }
            self.failed_eps.push_back(key);
        }
        if let Some(j) = self.closing.iter().position(|c| c.key == key) {
            // Failed while being closed in order: stop waiting for its requests.
            let c = self.closing.swap_remove(j);
            tracing::debug!(error = %e, "endpoint failed while closing");
            self.abandon_closing(c, e);
            return;
        }
        let Some(i) = self.engine.conns().find(key, |c| c.io.ep.is_some()) else {
            return;
        };
        tracing::debug!(error = %e, "endpoint failed");
        self.engine.handle_failed(i, e);
        self.carry_out();
    }

    /// An endpoint being closed in order will not finish (it failed, or the host took it
    /// back): the sends still in flight on it end, and it is force-closed.
    fn abandon_closing(&mut self, c: Closing, e: UcxError) {
        self.engine.handle_retired_failed(c.key, c.peer, e);
        self.carry_out();
        drop(c.waits);
        // Dropping the close request leaves it to UCX (it frees it when done).
        drop(c.ep.close(true));
    }

    /// Carries out everything the engine asked for, in its order.
    fn carry_out(&mut self) {
        while let Some(action) = self.engine.poll_action() {
            match action {
                Action::Transmit(i) => {
                    self.flush_conn(i);
                }
                Action::Close { conn, how, why } => self.close(conn, how, why),
                Action::End { op, peer, cause } => self.end_op(op, peer, cause),
                // Orderly close: UCX's cancel (a matched receive still completes); the
                // cancelled receive ends as `PeerDown` when UCX reports it.
                Action::Cancel { op, .. } => {
                    if let Some(Op::Receiving { req, .. }) = self.engine.ops().get(op) {
                        req.cancel();
                    }
                }
                Action::Proven { peer } => {
                    tracing::info!(peer, "connection established");
                    self.backlog.proven(peer);
                }
            }
        }
    }

    /// The one way a connection's endpoint closes. Orderly: taken out of service and closed
    /// once its requests have finished ([`close_retired`](Self::close_retired)). Forced (its
    /// transport failed; D3): what it has in flight is given up — UCX may keep a failed
    /// endpoint's requests in progress for ever (a shared-memory lane to a dead peer is never
    /// discarded) — and it is force-closed at once.
    fn close(&mut self, i: ConnId, how: CloseHow, why: Why) {
        let limits = self.engine.limits();
        let Some(c) = self.engine.conn_mut(i) else {
            return;
        };
        let (key, peer) = (c.key(), c.peer());
        let claimed = c.session().claimed_token();
        count_close(&mut self.stats, why);
        match why {
            Why::Flood => tracing::warn!(
                ?peer,
                ?limits,
                "peer sent more than its limits allow; closing its connection"
            ),
            Why::ProtocolError(error) => tracing::warn!(
                ?peer,
                %error,
                "protocol error from peer; closing its connection"
            ),
            Why::Expired(expiry) => tracing::warn!(
                ?peer,
                ?claimed,
                ?expiry,
                "connection deadline passed; closing the connection"
            ),
            Why::Failed => tracing::warn!(?peer, "endpoint failed"),
            Why::PeerClosed(reason) => {
                tracing::info!(?peer, ?reason, "peer closed the connection")
            }
            Why::Superseded | Why::Local => tracing::debug!(?peer, ?why, "closing a connection"),
        }
        let io = &mut c.io;
        let Some(ep) = io.ep.take() else {
            return;
        };
        let waits = std::mem::take(&mut io.ctl_inflight);
        match how {
            CloseHow::Orderly => self.closing.push(Closing {
                key,
                ep,
                peer,
                waits,
            }),
            CloseHow::Forced => {
                if let Wire::Flushing(_) = io.wire {
                    io.wire = Wire::Ready;
                }
                io.early.clear();
                drop(waits);
                // Dropping the close request leaves it to UCX (it frees it when done).
                drop(ep.close(true));
            }
        }
    }

    /// The one way an operation ends early (D3), a send or receive that can only finish
    /// through `peer`, which went down: its result if UCX has already finished it, else
    /// `PeerDown`. A request still in progress — UCX may never finish it, e.g. one matched to
    /// the dead peer's rendezvous — is dropped: a receive is cancelled, and either is parked
    /// with its buffer on the worker until UCX is done with it.
    fn end_op(&mut self, id: OpId, peer: u64, cause: Option<UcxError>) {
        let (lib, mut req, sent) = match self.engine.ops_mut().remove(id) {
            Some(Op::Sending { lib, req, .. }) => (lib, req, true),
            Some(Op::Receiving { lib, req, .. }) => (lib, req, false),
            Some(waiting) => {
                self.engine.ops_mut().put(id, Next::Wait(waiting));
                return;
            }
            None => return,
        };
        let down = NodeError::PeerDown { peer, cause };
        let r = match req.test() {
            Some(Ok(Completion::Received { data, .. })) => Ok(Some(data)),
            Some(Ok(Completion::Sent(_))) => Ok(None),
            Some(Err(_)) => Err(down),
            None => {
                self.stats.failed_by_peer_down += 1;
                Err(down)
            }
        };
        let done = self.finish(lib, r, sent);
        self.engine.ops_mut().put(id, done);
    }

    /// U1: completes the first flush of new endpoints; once one has, the control frames that
    /// waited for it are handled in order and its own frames may go out.
    fn poll_wireup(&mut self) -> bool {
        let mut busy = false;
        for i in self.engine.conns().ids() {
            let Some(c) = self.engine.conn_mut(i) else {
                continue;
            };
            let key = c.key();
            let io = &mut c.io;
            let Wire::Flushing(req) = &mut io.wire else {
                continue;
            };
            match req.test() {
                None => continue,
                Some(Ok(_)) => {
                    busy = true;
                    io.wire = Wire::Ready;
                    let early = std::mem::take(&mut io.early);
                    io.early_bytes = 0;
                    for frame in early {
                        self.on_control_at(i, &frame);
                    }
                }
                Some(Err(e)) => {
                    busy = true;
                    io.wire = Wire::Ready;
                    tracing::warn!(error = %e, "a new endpoint failed while wiring up");
                    self.on_ep_error(key, e);
                }
            }
        }
        busy
    }

    fn on_am(&mut self, am: crate::ucp::AmMessage) {
        if am.unowned {
            self.stats.am_unowned += 1;
            self.stats.stray += 1;
            self.charge(am.reply_ep, Charge::Unwanted);
            return;
        }
        if am.rndv_dropped {
            // tagspace sends every AM eagerly, control frames of any size included: a
            // rendezvous AM comes from something else, and is dropped.
            self.stats.am_dropped += 1;
            self.charge(am.reply_ep, Charge::Unwanted);
            return;
        }
        if am.id == self.control_am {
            if wire::is_heartbeat(&am.data) {
                self.stats.heartbeats_received += 1;
            } else {
                self.stats.control_received += 1;
            }
            match am.reply_ep {
                Some(key) => {
                    if self.charge(Some(key), Charge::Control) {
                        self.on_control(key, &am.data);
                    }
                }
                None => tracing::warn!("control frame without a reply endpoint dropped"),
            }
            return;
        }
        let layout = self.registry.layout();
        if let engine::AmDelivery::Stray { ns_id } =
            self.engine.libs_mut().deliver_am(layout, am.id, am.data)
        {
            self.stats.stray += 1;
            if let Some(s) = self.stray_by_id.get_mut(ns_id as usize) {
                *s += 1;
            }
            self.charge(am.reply_ep, Charge::Unwanted);
        }
    }

    /// Counts one message against its connection's [`PeerLimits`]; a connection over the limit
    /// is closed (CLOSE with reason `Flood`). Returns whether the message may be handled.
    /// Messages without a reply endpoint, or from an endpoint this node does not know, cannot
    /// be charged to anyone.
    fn charge(&mut self, from: Option<EpKey>, what: Charge) -> bool {
        let Some(key) = from else {
            return true;
        };
        let Some(i) = self
            .engine
            .conns()
            .find(key, |c| c.io.ep.is_some() && c.is_open())
        else {
            return true;
        };
        let ok = self.engine.handle_charge(i, self.clock.now_ms(), what);
        self.carry_out();
        ok
    }

    fn on_control(&mut self, key: EpKey, bytes: &[u8]) {
        let Some(i) = self.engine.conns().find(key, |c| c.io.ep.is_some()) else {
            if self.host.is_some() {
                // The host may attach this endpoint later: keep the frame (bounded).
                self.keep_unattached(key, bytes);
                return;
            }
            tracing::warn!("control frame from an unknown endpoint dropped");
            return;
        };
        let Some(c) = self.engine.conn_mut(i) else {
            return;
        };
        let open = c.is_open();
        let io = &mut c.io;
        if open && matches!(io.wire, Wire::Flushing(_)) {
            // U1: handled once this side can answer; bounded (D5).
            if io.early.len() >= EARLY_FRAMES_MAX || io.early_bytes + bytes.len() > EARLY_BYTES_MAX
            {
                tracing::warn!(
                    frames = io.early.len(),
                    bytes = io.early_bytes,
                    "peer sent too many control frames before wire-up; closing its connection"
                );
                self.stats.early_overflows += 1;
                self.engine.close(i, None);
                self.carry_out();
                return;
            }
            io.early_bytes += bytes.len();
            io.early.push_back(bytes.to_vec());
            return;
        }
        self.on_control_at(i, bytes);
    }

    /// Hands a control frame on connection `i` to the engine and carries out what it decided.
    fn on_control_at(&mut self, i: ConnId, bytes: &[u8]) {
        self.engine.handle_control(i, bytes, self.clock.now_ms());
        self.carry_out();
    }

    /// Closes retired endpoints whose requests have all finished.
    fn close_retired(&mut self) {
        if self.closing.is_empty() {
            return;
        }
        let busy: std::collections::HashSet<EpKey> = self
            .engine
            .ops()
            .values()
            .filter_map(|op| match op {
                Op::Sending { conn, .. } => Some(*conn),
                _ => None,
            })
            .collect();
        let mut i = 0;
        while i < self.closing.len() {
            let c = &mut self.closing[i];
            c.waits.retain_mut(|r| r.test().is_none());
            if c.waits.is_empty() && !busy.contains(&c.key) {
                let c = self.closing.swap_remove(i);
                if let Some(r) = c.ep.close(false) {
                    self.background.push(r);
                }
            } else {
                i += 1;
            }
        }
    }

    /// Test hook (feature `test-hooks`): this node stops acknowledging `peer`'s withdrawals
    /// (both halves), as a peer that never answers would.
    #[cfg(feature = "test-hooks")]
    pub fn withhold_acks_for_test(&mut self, peer: u64) -> Result<(), NodeError> {
        let i = self.engine.conns().serving(peer)?;
        if let Some(c) = self.engine.conn_mut(i) {
            c.io.withhold_acks = true;
        }
        Ok(())
    }

    fn flush_conn(&mut self, i: ConnId) -> bool {
        let mut sent = false;
        let Some(c) = self.engine.conn_mut(i) else {
            return false;
        };
        let (session, io) = c.parts();
        let (Some(ep), Wire::Ready) = (io.ep.as_ref(), &io.wire) else {
            return false;
        };
        while let Ok(Some(n)) = session.poll_transmit(self.registry, &mut self.buf) {
            if io.withholds(Some(&self.buf[..n])) {
                continue;
            }
            sent = true;
            if wire::is_heartbeat(&self.buf[..n]) {
                self.stats.heartbeats_sent += 1;
            } else {
                self.stats.control_sent += 1;
            }
            match ep.am_send(self.control_am, self.buf[..n].to_vec()) {
                Ok(Started::Pending(r)) => io.ctl_inflight.push(r),
                Ok(Started::Done(_)) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "sending a control frame failed");
                    break;
                }
            }
        }
        // R7: the tag half of each withdrawal acknowledgement, posted after every tag message
        // this node has already posted on the endpoint (so UCX delivers it after them).
        while let Some(tag) = session.poll_ack_tag(self.registry.layout()) {
            if io.withholds(None) {
                continue;
            }
            sent = true;
            self.stats.acks_sent += 1;
            match ep.tag_send(tag, Vec::new()) {
                Ok(Started::Pending(r)) => io.ctl_inflight.push(r),
                Ok(Started::Done(_)) => {}
                Err(e) => tracing::warn!(error = %e, "sending a withdrawal ack failed"),
            }
        }
        sent
    }

    /// Posts the receive for withdrawal acknowledgements (R7): any tag in the control
    /// namespace. One wildcard receive: UCX checks each arriving message against it, a constant
    /// cost, and the stray drain leaves the control namespace alone.
    fn post_ack_recv(&mut self) -> Result<(), NodeError> {
        let layout = self.registry.layout();
        let space = layout.space(CONTROL_ID);
        self.ack_recv = Some(
            self.worker
                .tag_recv(space.tag, space.mask, Vec::with_capacity(0))?,
        );
        Ok(())
    }

    /// Takes the acknowledgement tags that arrived (at most [`ACKS_PER_CALL`]) and hands each
    /// to the session it belongs to. Returns whether any came.
    fn take_ack_tags(&mut self) -> bool {
        if self.host.is_some() {
            return self.take_exact_acks();
        }
        let mut any = false;
        for _ in 0..ACKS_PER_CALL {
            let Some(done) = self.ack_recv.as_mut().and_then(Request::test) else {
                break;
            };
            any = true;
            if let Ok(Completion::Received { tag, .. }) = done {
                self.on_ack_tag(tag);
            } else {
                // Not an ack (data on the control namespace is truncated): a stray.
                self.stats.stray += 1;
            }
            if let Err(e) = self.post_ack_recv() {
                tracing::error!(error = %e, "re-posting the withdrawal-ack receive failed");
                self.ack_recv = None;
                break;
            }
        }
        any
    }

    /// Host mode: hands the exact ack receives that completed to their sessions.
    fn take_exact_acks(&mut self) -> bool {
        let mut done = Vec::new();
        for (&tag, req) in self.ack_exact.iter_mut() {
            if let Some(r) = req.test() {
                done.push((tag, r.is_ok()));
            }
        }
        for &(tag, ok) in &done {
            self.ack_exact.remove(&tag);
            if ok {
                self.on_ack_tag(tag);
            }
        }
        !done.is_empty()
    }

    /// Host mode: one exact receive per ack tag some session waits for; receives nobody waits
    /// for any more are cancelled. Returns whether it changed anything.
    fn sync_ack_recvs(&mut self) -> bool {
        let layout = self.registry.layout();
        let wanted: std::collections::HashSet<u64> = self
            .engine
            .conns()
            .awaited_ack_tags(layout, |io| io.ep.is_some())
            .collect();
        if wanted.is_empty() && self.ack_exact.is_empty() {
            return false;
        }
        let before = self.ack_exact.len();
        // Dropping a receive cancels it (and parks it until UCX lets it go).
        self.ack_exact.retain(|tag, _| wanted.contains(tag));
        let mut changed = before != self.ack_exact.len();
        for tag in wanted {
            if self.ack_exact.contains_key(&tag) {
                continue;
            }
            match self.worker.tag_recv(tag, u64::MAX, Vec::with_capacity(0)) {
                Ok(r) => {
                    self.ack_exact.insert(tag, r);
                    changed = true;
                }
                Err(e) => tracing::error!(error = %e, "posting a withdrawal-ack receive failed"),
            }
        }
        changed
    }

    fn on_ack_tag(&mut self, tag: u64) {
        let layout = self.registry.layout();
        if self
            .engine
            .handle_ack_tag(layout, tag, |io| io.ep.is_some())
        {
            self.stats.acks_received += 1;
        } else {
            // Unknown, stale or forged: nobody's withdrawal is waiting for it.
            self.stats.stray += 1;
        }
    }

    /// R7: gives back the ids whose withdrawal peers confirmed, and ended connections' pins
    /// after the linger, draining each quarantined one first of what arrived for it (all
    /// strays now: nobody owns the id) within the stray budget — the core engine's
    /// [`Unpins`](engine::Unpins). On a host's worker nothing is taken: an id is held while
    /// anything waits in it — until the host receives its message, or for good if an old
    /// name's message is never received (an id lost, never a message misdelivered;
    /// [`quarantine_held`](Node::quarantine_held) counts such ids), looked at (one probe
    /// without removal per id) at most every [`DRAIN_INTERVAL_MS`], or at once when a
    /// confirmation came. A host library's tags (ucxx hashes them over all 64 bits) fall in
    /// any namespace id, so a partial-mask removal could steal them.
    fn release_confirmed(&mut self) -> bool {
        let now = self.clock.now_ms();
        let pass = self.with_strays(|engine, queue| engine.unpin_due(now, queue));
        self.stats.stray_probes += pass.probes;
        self.stats.ids_unpinned += pass.unpinned;
        pass.changed
    }

    /// Ids this node keeps quarantined after their withdrawal was confirmed, because a message
    /// still waits in UCX's queue in them (host mode; see [`Node::adopt`]), or (own worker)
    /// because the stray drain has not finished with them yet.
    pub fn quarantine_held(&self) -> usize {
        self.engine.unpins().held(self.registry)
    }

    fn flush(&mut self) -> bool {
        let mut sent = false;
        for i in self.engine.conns().ids() {
            if self.engine.conns().get(i).is_some_and(|c| c.is_open()) {
                sent |= self.flush_conn(i);
            }
        }
        sent
    }

    /// Runs `f` with the engine and the worker's unexpected queue as the stray
    /// drains see it (what they take is counted in the stats and parked until UCX lets it go).
    fn with_strays<R>(&mut self, f: impl FnOnce(&mut Engine, &mut Strays<'_>) -> R) -> R {
        let mut queue = Strays {
            worker: &self.worker,
            layout: self.registry.layout(),
            stats: &mut self.stats,
            by_id: &mut self.stray_by_id,
            background: &mut self.background,
            oldest: None,
        };
        f(&mut self.engine, &mut queue)
    }

    /// D2 within D4's bound: takes out unexpected messages whose namespace id is not
    /// registered here (the control id, unregistered ids, ids beyond the registry; id 0 belongs
    /// to legacy code and is left alone unless [`set_legacy_tags`](Self::set_legacy_tags)
    /// says none runs), and registered namespaces' messages with a pair value nobody was
    /// given; at most [`STRAY_TAKES_PER_CALL`] looks and takes, and
    /// [`STRAY_PROBES_PER_CALL`] partial-mask probes that find nothing (each scans the whole
    /// queue). Returns how many it took.
    ///
    /// First the oldest unexpected message is looked at (a probe with mask 0 stops at the head
    /// of UCX's queue) and, while it is a stray, taken by the same probe with removal: a flood
    /// of strays costs O(1) per message. Behind a message someone here owns, probes for "bit b
    /// of the namespace field is set" stop at the next strays near the head; what is left is
    /// found by the sweep: one partial-mask probe per unregistered id, started every
    /// [`DRAIN_INTERVAL_MS`] and resumed where the previous call's budget ended.
    pub fn drain_strays(&mut self) -> u64 {
        let deadline = Instant::now() + self.drain_budget();
        self.drain_strays_until(deadline)
    }

    fn drain_strays_until(&mut self, deadline: Instant) -> u64 {
        // Host mode: nothing (the engine's sweep takes nothing from a host's queue).
        // Every probe may scan UCX's whole unexpected queue, whose length a flood decides: the
        // engine's counts bound the probes, the clock bounds what they cost together.
        let (taken, looks, probes) = self
            .with_strays(|engine, queue| engine.sweep_pass(queue, || Instant::now() >= deadline));
        self.stats.stray_head_probes += looks;
        self.stats.stray_probes += probes;
        taken
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
            self.close_retired();
            self.background.retain_mut(|r| r.test().is_none());
        }
    }
}

/// What an attempt to send did.
enum Sent {
    /// Not yet (P2): the data stays with the waiting send.
    Blocked(Blocked),
    /// Handed to UCX on that endpoint; completes later.
    InFlight(Request, EpKey),
    /// Handed over and already complete.
    Complete,
}

/// The worker's unexpected queue as the stray drains see it: what is taken is counted (per
/// namespace id) and its request parked until UCX lets it go.
struct Strays<'n> {
    worker: &'n Worker,
    layout: &'n TagLayout,
    stats: &'n mut NodeStats,
    by_id: &'n mut Vec<u64>,
    background: &'n mut Vec<Request>,
    /// The tag of the oldest unexpected message, as last looked at.
    oldest: Option<u64>,
}

impl Strays<'_> {
    /// Takes one unexpected message matching `(tag, mask)` as a stray of namespace id `id`
    /// (`forged`: for its pair value).
    fn take(&mut self, tag: u64, mask: u64, id: u16, forged: bool) -> bool {
        match self.worker.tag_probe_take(tag, mask, STRAY_MAX_LEN) {
            Ok(Some((_, req))) => {
                count_stray(self.stats, self.by_id, id, forged);
                self.background.push(req);
                true
            }
            _ => false,
        }
    }
}

impl StrayQueue for Strays<'_> {
    fn take_one(&mut self, id: u16) -> bool {
        let space = self.layout.space(id);
        self.take(space.tag, space.mask, id, false)
    }
    fn waits(&mut self, id: u16) -> bool {
        let space = self.layout.space(id);
        self.worker.tag_probe(space.tag, space.mask).is_some()
    }
}

impl engine::QueueHead for Strays<'_> {
    fn oldest_tag(&mut self) -> Option<u64> {
        // A probe with mask 0 stops at the head of UCX's queue.
        self.oldest = self.worker.tag_probe(0, 0).map(|m| m.tag);
        self.oldest
    }
    fn take_matching(&mut self, tag: u64, mask: u64, id: u16, forged: bool) -> bool {
        self.take(tag, mask, id, forged)
    }
    fn first(&mut self, tag: u64, mask: u64) -> Option<u64> {
        self.worker.tag_probe(tag, mask).map(|m| m.tag)
    }
    fn take_oldest(&mut self, id: u16, forged: bool) -> bool {
        // The message `oldest_tag` looked at, by the same mask-0 probe, which stops at the head
        // of UCX's queue: O(1) however long the queue. (Nothing ran in between: the node's
        // worker is progressed on this thread only, and a sweep never runs on a host's; an
        // exact-tag lookup would walk one of UCX's 1021 hash buckets, each a thousandth of a
        // flooded queue.)
        (self.oldest.take()).is_some() && self.take(0, 0, id, forged)
    }
}

impl engine::HoldQueue<Message> for Strays<'_> {
    fn take_first(&mut self, tag: u64, mask: u64) -> Option<(u64, usize, Message)> {
        let m = self.worker.tag_probe_hold(tag, mask)?;
        let info = m.info();
        Some((info.tag, info.len, m))
    }
    fn discard(&mut self, tag: u64, msg: Message, forged: bool) {
        // Dropping the message receives it into a few bytes (parked until UCX is done).
        drop(msg);
        if forged {
            count_stray(self.stats, self.by_id, self.layout.namespace_of(tag), true);
        }
    }
}

/// Counts a stray of namespace id `id` (`forged`: a pair value no proven peer was given).
/// Counts a connection's close in the stats by why it closed.
fn count_close(stats: &mut NodeStats, why: Why) {
    match why {
        Why::Flood => stats.flood_closes += 1,
        Why::ProtocolError(e) => {
            stats.protocol_errors += 1;
            if matches!(e, SessionError::Unproven { .. }) {
                stats.unproven += 1;
            }
        }
        Why::Expired(Expiry::Handshake(_)) => stats.handshake_timeouts += 1,
        Why::Expired(Expiry::Acks) => stats.ack_timeouts += 1,
        Why::Expired(Expiry::Unresponsive) => stats.liveness_timeouts += 1,
        Why::Failed => stats.endpoint_failures += 1,
        Why::PeerClosed(_) | Why::Superseded | Why::Local => {}
    }
}

fn count_stray(stats: &mut NodeStats, by_id: &mut [u64], id: u16, forged: bool) {
    stats.stray += 1;
    stats.forged += u64::from(forged);
    if let Some(c) = by_id.get_mut(id as usize) {
        *c += 1;
    }
}
