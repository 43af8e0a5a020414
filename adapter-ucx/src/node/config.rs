//! How a node is set up: its configuration, its clock, what host mode found.

use crate::ucp::{Config, ThreadMode};
use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use tagspace_core::engine::{Liveness, PeerLimits, Redial};
use tagspace_core::identity::Identity;

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
    /// The heartbeat on established connections ([`Liveness`]: by default a PING a second, cut off
    /// after 30 s without an answer); `None`: off (a peer that stops answering is then only noticed
    /// when UCX reports its endpoint failed). A connection it closes ends with
    /// [`CloseReason::Unresponsive`](tagspace_core::wire::CloseReason::Unresponsive) on both sides
    /// (`stats().liveness_timeouts`, the reason in
    /// [`PeerEvent::Down`](crate::node::PeerEvent::Down)), and what was in flight on it ends with
    /// `PeerDown` at once. It frees a process whose shared-memory receive queue a kill left stuck
    /// (see the README). **Call `progress` at least once per `timeout_ms`**, or peers cut this node
    /// off; time away from `progress` is not held against them (gaps count at most
    /// [`LIVENESS_TICK_MAX_MS`](tagspace_core::engine::LIVENESS_TICK_MAX_MS)).
    pub liveness: Option<Liveness>,
    /// What to tell peers this node listens at, for them to dial after a fault; `None`: the
    /// listener's address, unless it listens on every interface (0.0.0.0 or ::), which names
    /// no address a peer could dial (set one then). A host-mode node tells this address (its
    /// host's listener) and nothing otherwise.
    pub advertise: Option<SocketAddr>,
    /// Whether peers lost to a fault (transport failure, heartbeat) are dialled again at the
    /// address they told ([`Redial`], by default 200 ms doubling to 5 s, for 5 minutes). On a
    /// host's worker [`Redial::Dial`] means [`Redial::Report`]: the host is told
    /// ([`Node::take_reconnect_needed`](crate::node::Node::take_reconnect_needed)).
    pub redial: Redial,
    /// Whether a node on its own worker that finds itself hearing nobody
    /// ([`Deafness`](tagspace_core::engine::Deafness): no established connection left, at
    /// least [`DEAF_PEERS_MIN`](tagspace_core::engine::DEAF_PEERS_MIN) peers down, silence
    /// where a live peer would have spoken, and no control frame from anyone for the
    /// heartbeat's timeout: UCX's shared-memory receive FIFO stuck by a writer killed
    /// mid-send) replaces its worker: a new worker, the listener again at the same address
    /// (another port if that one cannot be bound yet), the receives waiting posted again there, the
    /// messages that had arrived carried over; the peers are then dialled as after any fault
    /// (`redial`). Default `true`. `false`, and on a host's worker: counted
    /// (`stats().deaf`) and logged only.
    pub replace_deaf_worker: bool,
}

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
            advertise: None,
            redial: Redial::default(),
            replace_deaf_worker: true,
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
pub(super) fn index_keys() -> [u64; 2] {
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

/// Who calls `ucp_worker_progress` on a worker a host owns
/// ([`Node::adopt`](crate::node::Node::adopt)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostProgress {
    /// The host does (ucxx's progress thread, an asyncio loop, RAFT's thread): the node's
    /// [`progress`](crate::node::Node::progress) only handles what UCX queued for it. On a
    /// `UCS_THREAD_MODE_MULTI` worker the host may progress from any thread.
    Host,
    /// The node does, in [`progress`](crate::node::Node::progress) (the host never progresses
    /// it itself, or does so only on the node's thread).
    Node,
}

/// What a node in host mode found on the host's worker ([`Node::host`](crate::node::Node::host)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostInfo {
    /// The worker's thread mode.
    pub thread_mode: ThreadMode,
    /// The UCX library loaded in the process (the host's).
    pub ucx_version: (u32, u32, u32),
    /// Who progresses the worker.
    pub progress: HostProgress,
}

/// `text` as an address a peer could dial to reach this node again
/// ([`NodeConfig::advertise`]): `"IP:PORT"` (`"10.0.0.2:13337"`, `"[::1]:13337"`), neither
/// every interface (0.0.0.0, ::) nor port 0; else why not, naming the text (for the C and
/// Python bindings' errors).
pub fn dialable_address(text: &str) -> Result<SocketAddr, String> {
    let a: SocketAddr = text.parse().map_err(|_| {
        format!("{text:?} is not IP:PORT (e.g. \"10.0.0.2:13337\", \"[::1]:13337\")")
    })?;
    if a.ip().is_unspecified() || a.port() == 0 {
        return Err(format!(
            "{a} names no address a peer could connect to (use the listener's own IP and port)"
        ));
    }
    Ok(a)
}
