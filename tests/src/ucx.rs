//! The conformance suite's [`Cluster`] over real UCX.
//!
//! Each "process" is a [`Node`] with its own UCP context, worker, listener (127.0.0.1, any
//! port) and registry, all in this test process and progressed by this thread; they talk over
//! real UCX transports (TCP by default, or shared memory) exactly as separate processes do.
//! What is simulated: `kill` drops a node without an orderly close (its endpoints are
//! force-closed and its worker destroyed, so peers see UCX's peer failure) — the kill -9 of a
//! real process is tested separately, with real processes, in `tests/multiprocess.rs`. Deadlines
//! use a manual clock, moved by `advance_ms`, so P2 is tested without timing assumptions.

use crate::{Cluster, Counters, Lib, Op, OpResult, Proc};
use std::time::{Duration, Instant};
use tagspace_core::{Registry, TagLayout};
use tagspace_ucx::node::{Clock, HostProgress, LibId, Node, NodeConfig, OpId, Role};
use tagspace_ucx::ucp::{Config, Endpoint, Request, Started, Worker};

/// Largest message a conformance receive accepts.
pub const RECV_CAP: usize = 128 * 1024;

/// Nodes on real UCX workers.
pub struct UcxCluster {
    nodes: Vec<Option<Node>>,
    ucx: Config,
    clock: Clock,
    /// Legacy sends UCX has not finished with.
    background: Vec<Request>,
    /// Connections from outside tagspace ([`Cluster::raw_control`]), kept open.
    raw: Vec<(Worker, Endpoint)>,
    /// Processes that no longer progress ([`Cluster::freeze`]).
    frozen: Vec<Proc>,
    /// Hosted processes ([`Cluster::spawn_hosted`]): the host's worker and the endpoints it
    /// made, dropped after the nodes that borrow them (field order).
    hosts: std::collections::HashMap<Proc, Host>,
}

/// What a host owns in a hosted process: its worker and its endpoints (by worker address).
struct Host {
    worker: Worker,
    eps: Vec<Endpoint>,
}

impl UcxCluster {
    /// A cluster whose workers use `ucx`. The rendezvous threshold is set to 8 KiB (as in the
    /// mock) unless `ucx` sets one, so large sends complete only when matched.
    pub fn new(mut ucx: Config) -> Self {
        ucx.rndv_thresh.get_or_insert(8192);
        UcxCluster {
            nodes: Vec::new(),
            ucx,
            clock: Clock::manual(),
            background: Vec::new(),
            raw: Vec::new(),
            frozen: Vec::new(),
            hosts: std::collections::HashMap::new(),
        }
    }

    /// Over TCP on loopback.
    pub fn tcp() -> Self {
        Self::new(Config::tcp())
    }

    /// Over shared memory (TCP only to connect).
    pub fn shm() -> Self {
        Self::new(Config::shm())
    }

    fn token(p: Proc) -> u64 {
        crate::identity(p).token()
    }

    /// The node of a live process.
    pub fn node(&mut self, p: Proc) -> &mut Node {
        self.nodes[p].as_mut().expect("process was killed")
    }

    fn progress_all(&mut self) -> bool {
        let mut busy = false;
        for (p, n) in self.nodes.iter_mut().enumerate() {
            if let (Some(n), false) = (n, self.frozen.contains(&p)) {
                busy |= n.progress();
            }
        }
        self.background.retain_mut(|r| r.test().is_none());
        // Raw workers are only kept alive (they answer nothing): not counted as activity.
        for (w, _) in &self.raw {
            while w.take_am().is_some() {}
            w.progress();
        }
        busy
    }

    /// Two hosts make endpoints to each other's worker address (as RAFT does) and attach
    /// them: the lower index as the initiator.
    fn connect_hosted(&mut self, from: Proc, to: Proc) -> Result<(), String> {
        let mut made = Vec::new();
        for (me, peer) in [(from, to), (to, from)] {
            let addr = self.hosts[&peer]
                .worker
                .address()
                .map_err(|e| e.to_string())?;
            // SAFETY: a live worker's address, from `address()`.
            let ep = unsafe { Endpoint::connect_address(&self.hosts[&me].worker, &addr) }
                .map_err(|e| e.to_string())?;
            made.push((me, ep));
        }
        for (me, ep) in made {
            let side = if me == from.min(to) {
                Role::Initiator
            } else {
                Role::Acceptor
            };
            let raw = ep.as_raw();
            self.hosts.get_mut(&me).expect("hosted").eps.push(ep);
            // SAFETY: the host keeps the endpoint (in `hosts`) until after the node is gone.
            unsafe { self.node(me).attach(raw, side) }.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Progresses every node until `done` or 10 s pass.
    fn until(&mut self, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if done(self) {
                return true;
            }
            self.progress_all();
        }
        done(self)
    }
}

impl Cluster for UcxCluster {
    fn spawn(&mut self) -> Proc {
        let p = self.nodes.len();
        let registry: &'static Registry<256> =
            Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
        let cfg = NodeConfig {
            identity: std::sync::Arc::new(crate::identity(p)),
            clock: self.clock.clone(),
            ..NodeConfig::loopback(self.ucx.clone())
        };
        let node = Node::with_registry(cfg, registry).expect("UCX node");
        self.nodes.push(Some(node));
        p
    }

    fn spawn_hosted(&mut self) -> Proc {
        let p = self.nodes.len();
        let registry: &'static Registry<256> =
            Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
        let worker = Worker::new(&self.ucx).expect("the host's worker");
        let cfg = NodeConfig {
            identity: std::sync::Arc::new(crate::identity(p)),
            clock: self.clock.clone(),
            listen: None,
            ..NodeConfig::loopback(self.ucx.clone())
        };
        // SAFETY: the cluster keeps the worker in `hosts`, dropped after `nodes`.
        let node = unsafe {
            Node::adopt_with_registry(worker.as_raw(), cfg, HostProgress::Node, registry)
        }
        .expect("UCX node on the host's worker");
        self.nodes.push(Some(node));
        self.hosts.insert(
            p,
            Host {
                worker,
                eps: Vec::new(),
            },
        );
        p
    }

    fn quarantine_held(&self, p: Proc) -> usize {
        self.nodes[p].as_ref().map_or(0, Node::quarantine_held)
    }

    fn register(&mut self, p: Proc, name: &str) -> Result<Lib, String> {
        self.node(p)
            .register(name)
            .map(|l| l.0)
            .map_err(|e| e.to_string())
    }

    fn release(&mut self, p: Proc, lib: Lib) {
        self.node(p).release(LibId(lib));
    }

    fn connect(&mut self, from: Proc, to: Proc) -> Result<(), String> {
        match (self.hosts.contains_key(&from), self.hosts.contains_key(&to)) {
            (false, false) => {}
            (true, true) => return self.connect_hosted(from, to),
            _ => return Err("hosted processes connect only to hosted ones".into()),
        }
        let addr = self.node(to).listen_addr().map_err(|e| e.to_string())?;
        self.node(from).connect(addr).map_err(|e| e.to_string())
    }

    fn settle(&mut self) {
        // Real transports have no "nothing in flight" signal: progress until no node has a
        // handshake, control frame or close outstanding, and every node has then been idle for
        // a while (loopback round trips take tens of microseconds; connection requests pass
        // through UCX's async thread, which a loaded machine may schedule late — hence the
        // first condition, which does not depend on timing).
        let quiet = Duration::from_millis(5);
        let start = Instant::now();
        let mut idle_since = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            // A node with work in flight to a frozen peer keeps it for as long as the peer is
            // frozen: then only idleness counts.
            let in_flight = !self.background.is_empty()
                || self.frozen.is_empty()
                    && self.nodes.iter().flatten().any(Node::has_work_in_flight);
            if self.progress_all() || in_flight {
                idle_since = Instant::now();
            } else if idle_since.elapsed() >= quiet {
                return;
            }
        }
    }

    fn advance_ms(&mut self, ms: u64) {
        // Time passing lets what is in flight land first, then the clock moves (deadlines,
        // the periodic stray drain), then its effects settle.
        self.settle();
        self.clock.advance(ms);
        self.settle();
    }

    fn send(
        &mut self,
        p: Proc,
        lib: Lib,
        to: Proc,
        payload: u64,
        data: &[u8],
        timeout_ms: u64,
    ) -> Op {
        let peer = Self::token(to);
        self.node(p)
            .send(LibId(lib), peer, payload, data.to_vec(), timeout_ms)
            .0
    }

    fn send_inbox(&mut self, p: Proc, lib: Lib, to: Proc, data: &[u8], timeout_ms: u64) -> Op {
        let peer = Self::token(to);
        self.node(p)
            .send_inbox(LibId(lib), peer, data.to_vec(), timeout_ms)
            .0
    }

    fn recv(&mut self, p: Proc, lib: Lib, payload: u64) -> Op {
        self.node(p).recv(LibId(lib), payload, RECV_CAP).0
    }

    fn recv_from(&mut self, p: Proc, lib: Lib, from: Proc, payload: u64) -> Op {
        let peer = Self::token(from);
        self.node(p)
            .recv_from(LibId(lib), peer, payload, RECV_CAP)
            .0
    }

    fn take(&mut self, p: Proc, op: Op) -> Option<OpResult> {
        self.nodes[p]
            .as_mut()?
            .take(OpId(op))
            .map(|r| r.map_err(|e| e.to_string()))
    }

    fn probe_inbox(&mut self, p: Proc, lib: Lib) -> Option<Vec<u8>> {
        self.progress_all();
        let op = self.node(p).probe_inbox(LibId(lib), RECV_CAP).ok()??;
        let mut out = None;
        self.until(|c| {
            out = c.node(p).take(op);
            out.is_some()
        });
        out?.ok()?
    }

    fn am_listen(&mut self, p: Proc, lib: Lib, local: u16) {
        self.node(p)
            .am_listen(LibId(lib), local)
            .expect("am_listen");
    }

    fn am_send(&mut self, p: Proc, lib: Lib, to: Proc, local: u16, data: &[u8]) -> Op {
        let peer = Self::token(to);
        self.node(p)
            .am_send(LibId(lib), peer, local, data.to_vec(), 1000)
            .0
    }

    fn am_take(&mut self, p: Proc, lib: Lib, local: u16) -> Option<Vec<u8>> {
        self.node(p).am_take(LibId(lib), local)
    }

    fn freeze(&mut self, p: Proc) {
        self.frozen.push(p);
    }

    fn thaw(&mut self, p: Proc) {
        self.frozen.retain(|&q| q != p);
    }

    fn cut(&mut self, a: Proc, b: Proc) {
        let peer = Self::token(b);
        self.node(a).fail_link_for_test(peer);
    }

    fn heal(&mut self, _a: Proc, _b: Proc) {}

    fn reconnects(&self, p: Proc) -> u64 {
        self.nodes[p].as_ref().map_or(0, |n| n.stats().reconnects)
    }

    fn hold(&mut self, _on: bool) {}

    fn kill(&mut self, p: Proc) {
        // No CLOSE, no flush: endpoints are force-closed and the worker destroyed.
        self.nodes[p] = None;
        self.hosts.remove(&p);
    }

    fn legacy_send(&mut self, from: Proc, to: Proc, tag: u64, data: &[u8]) {
        let peer = Self::token(to);
        let ep = self
            .node(from)
            .endpoint_to(peer)
            .expect("a connection to share");
        if let Started::Pending(r) = ep.tag_send(tag, data.to_vec()).expect("legacy send") {
            self.background.push(r);
        }
    }

    fn legacy_probe(&mut self, p: Proc, tag: u64, mask: u64, remove: bool) -> Option<u64> {
        self.progress_all();
        let w = self.node(p).worker().clone();
        if !remove {
            return w.tag_probe(tag, mask).map(|i| i.tag);
        }
        let (info, mut req) = w.tag_probe_take(tag, mask, RECV_CAP).ok()??;
        let mut done = false;
        self.until(|_| {
            done = req.test().is_some();
            done
        });
        done.then_some(info.tag)
    }

    fn inject_control(&mut self, from: Proc, to: Proc, bytes: &[u8]) {
        // As any process on the network could: an AM on the control id, on the shared endpoint.
        let (peer, layout) = (Self::token(to), self.layout());
        let am = tagspace_core::wellknown::control_am_id(&layout);
        let ep = self.node(from).endpoint_to(peer).expect("connected");
        if let Started::Pending(r) = ep.am_send(am, bytes.to_vec()).expect("inject") {
            self.background.push(r);
        }
    }

    fn raw_control(&mut self, to: Proc, frames: &[Vec<u8>]) {
        let layout = self.layout();
        let control_am = tagspace_core::wellknown::control_am_id(&layout);
        let w = Worker::new(&self.ucx).expect("raw worker");
        // the node answers with its own frames: every AM id needs a handler on UCX 1.12/1.13
        w.guard_am_ids().expect("AM handlers");
        let addr = self.node(to).listen_addr().expect("listener");
        let ep = Endpoint::connect(&w, addr).expect("raw connect");
        // U1: wired up before sending
        if let Ok(Started::Pending(mut r)) = ep.flush() {
            let start = Instant::now();
            while r.test().is_none() {
                assert!(start.elapsed() < Duration::from_secs(10), "raw flush");
                w.progress();
                self.progress_all();
            }
        }
        for f in frames {
            if let Ok(Started::Pending(r)) = ep.am_send(control_am, f.clone()) {
                self.background.push(r);
            }
        }
        self.raw.push((w, ep));
    }

    fn stray(&self, p: Proc) -> u64 {
        self.nodes[p].as_ref().map_or(0, |n| n.stats().stray)
    }

    /// UCX does not count its unexpected queue: this is 1 if a full-wildcard peek finds a
    /// message and 0 otherwise (a lower bound; the suite only asks whether it is empty).
    fn unexpected(&self, p: Proc) -> usize {
        self.nodes[p]
            .as_ref()
            .map_or(0, |n| n.worker().tag_probe(0, 0).is_some() as usize)
    }

    fn namespace_id(&self, p: Proc, lib: Lib) -> u16 {
        let node = self.nodes[p].as_ref().expect("process was killed");
        node.namespace(LibId(lib)).expect("live library").id()
    }

    fn counters(&self, p: Proc, lib: Lib) -> Counters {
        let c = self.nodes[p]
            .as_ref()
            .map(|n| n.counters(LibId(lib)))
            .unwrap_or_default();
        Counters {
            sent: c.sent,
            received: c.received,
            failed: c.failed,
        }
    }

    fn live_connections(&self, a: Proc, b: Proc) -> usize {
        self.nodes[a]
            .as_ref()
            .map_or(0, |n| n.live_connections_to(Self::token(b)))
    }

    fn protocol_errors(&self, p: Proc) -> usize {
        self.nodes[p]
            .as_ref()
            .map_or(0, |n| n.protocol_errors().len())
    }

    fn flood_closes(&self, p: Proc) -> u64 {
        self.nodes[p].as_ref().map_or(0, |n| n.stats().flood_closes)
    }

    fn hold_backlog(&mut self, p: Proc, lib: Lib, messages: u32) -> Result<(), String> {
        let limit = tagspace_ucx::node::BacklogLimit {
            messages,
            ..Default::default()
        };
        let node = self.nodes[p].as_mut().expect("process was killed");
        node.hold_backlog(LibId(lib), limit)
            .map_err(|e| e.to_string())
    }

    fn layout(&self) -> TagLayout {
        TagLayout::DEFAULT
    }
}
