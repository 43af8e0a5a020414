//! The conformance suite's [`Cluster`] over the mock adapter.

use crate::{Cluster, Counters, Lib, Op, OpResult, Proc};
use tagspace_core::TagLayout;
use tagspace_mock::fabric::{Fabric, ProcessId};
use tagspace_mock::node::{LibId, Node, OpId};

/// Simulated processes on one [`Fabric`].
pub struct MockCluster {
    /// The simulated UCX.
    pub fabric: Fabric,
    /// One node per process.
    pub nodes: Vec<Node>,
    /// Processes that no longer progress ([`Cluster::freeze`]).
    pub frozen: Vec<Proc>,
}

impl MockCluster {
    /// An empty cluster.
    pub fn new() -> Self {
        MockCluster {
            fabric: Fabric::new(),
            nodes: Vec::new(),
            frozen: Vec::new(),
        }
    }

    fn token(p: Proc) -> u64 {
        crate::identity(p).token()
    }
}

impl Default for MockCluster {
    fn default() -> Self {
        Self::new()
    }
}

impl Cluster for MockCluster {
    fn spawn(&mut self) -> Proc {
        let p = self.nodes.len();
        let node = Node::new(&mut self.fabric, ProcessId(p), crate::identity(p));
        self.nodes.push(node);
        p
    }

    fn spawn_hosted(&mut self) -> Proc {
        let p = self.spawn();
        self.nodes[p].set_host_mode();
        p
    }

    fn quarantine_held(&self, p: Proc) -> usize {
        self.nodes[p].quarantine_held()
    }

    fn register(&mut self, p: Proc, name: &str) -> Result<Lib, String> {
        self.nodes[p]
            .register(name)
            .map(|l| l.0)
            .map_err(|e| e.to_string())
    }

    fn release(&mut self, p: Proc, lib: Lib) {
        self.nodes[p].release(&mut self.fabric, LibId(lib));
    }

    fn connect(&mut self, from: Proc, to: Proc) -> Result<(), String> {
        let w = self.nodes[to].worker();
        self.nodes[from]
            .connect(&mut self.fabric, w)
            .map_err(|e| e.to_string())
    }

    fn settle(&mut self) {
        // Delivery is synchronous, so a handful of rounds lets every chain of reactions finish
        // (a handshake takes three).
        for _ in 0..6 {
            for (p, n) in self.nodes.iter_mut().enumerate() {
                if !self.frozen.contains(&p) {
                    n.progress(&mut self.fabric);
                }
            }
        }
    }

    fn advance_ms(&mut self, ms: u64) {
        self.fabric.advance(ms);
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
        self.nodes[p]
            .send(
                &mut self.fabric,
                LibId(lib),
                peer,
                payload,
                data,
                timeout_ms,
            )
            .0
    }

    fn send_inbox(&mut self, p: Proc, lib: Lib, to: Proc, data: &[u8], timeout_ms: u64) -> Op {
        let peer = Self::token(to);
        self.nodes[p]
            .send_inbox(&mut self.fabric, LibId(lib), peer, data, timeout_ms)
            .0
    }

    fn recv(&mut self, p: Proc, lib: Lib, payload: u64) -> Op {
        self.nodes[p].recv(&mut self.fabric, LibId(lib), payload).0
    }

    fn recv_from(&mut self, p: Proc, lib: Lib, from: Proc, payload: u64) -> Op {
        let peer = Self::token(from);
        (self.nodes[p].recv_from(&mut self.fabric, LibId(lib), peer, payload)).0
    }

    fn take(&mut self, p: Proc, op: Op) -> Option<OpResult> {
        self.nodes[p]
            .take(OpId(op))
            .map(|r| r.map_err(|e| e.to_string()))
    }

    fn probe_inbox(&mut self, p: Proc, lib: Lib) -> Option<Vec<u8>> {
        self.nodes[p]
            .probe_inbox(&mut self.fabric, LibId(lib))
            .ok()
            .flatten()
    }

    fn am_listen(&mut self, p: Proc, lib: Lib, local: u16) {
        self.nodes[p]
            .am_listen(&mut self.fabric, LibId(lib), local)
            .expect("am_listen");
    }

    fn am_send(&mut self, p: Proc, lib: Lib, to: Proc, local: u16, data: &[u8]) -> Op {
        let peer = Self::token(to);
        self.nodes[p]
            .am_send(&mut self.fabric, LibId(lib), peer, local, data, 1000)
            .0
    }

    fn am_take(&mut self, p: Proc, lib: Lib, local: u16) -> Option<Vec<u8>> {
        self.nodes[p].am_take(LibId(lib), local)
    }

    fn kill(&mut self, p: Proc) {
        self.fabric.kill(ProcessId(p));
    }

    fn freeze(&mut self, p: Proc) {
        self.frozen.push(p);
    }

    fn thaw(&mut self, p: Proc) {
        self.frozen.retain(|&q| q != p);
    }

    fn cut(&mut self, a: Proc, b: Proc) {
        self.fabric.partition(ProcessId(a), ProcessId(b));
    }

    fn heal(&mut self, a: Proc, b: Proc) {
        self.fabric.heal(ProcessId(a), ProcessId(b));
    }

    fn reconnects(&self, p: Proc) -> u64 {
        self.nodes[p].redial_stats().reconnected
    }

    fn hold(&mut self, on: bool) {
        self.fabric.set_hold(on);
    }

    fn legacy_send(&mut self, from: Proc, to: Proc, tag: u64, data: &[u8]) {
        let ep = self.nodes[from]
            .endpoint_to(Self::token(to))
            .expect("a connection to share");
        self.fabric.tag_send(ep, tag, data).expect("legacy send");
    }

    fn legacy_probe(&mut self, p: Proc, tag: u64, mask: u64, remove: bool) -> Option<u64> {
        let w = self.nodes[p].worker();
        self.fabric
            .tag_probe(w, tag, mask, remove)
            .ok()
            .flatten()
            .map(|r| r.tag)
    }

    fn inject_control(&mut self, from: Proc, to: Proc, bytes: &[u8]) {
        let peer = Self::token(to);
        self.nodes[from]
            .inject_control(&mut self.fabric, peer, bytes)
            .expect("inject");
    }

    fn raw_control(&mut self, to: Proc, frames: &[Vec<u8>]) {
        let layout = self.layout();
        let control_am = tagspace_core::wellknown::control_am_id(&layout);
        let raw = self
            .fabric
            .new_worker(ProcessId(1_000_000 + self.nodes.len()));
        self.fabric.am_set_handler(raw, control_am).unwrap();
        let ep = self.fabric.connect(raw, self.nodes[to].worker()).unwrap();
        for f in frames {
            self.fabric.am_send(ep, control_am, f).unwrap();
        }
    }

    fn stray(&self, p: Proc) -> u64 {
        self.nodes[p].stray()
    }

    fn unexpected(&self, p: Proc) -> usize {
        self.fabric.unexpected_len(self.nodes[p].worker())
    }

    fn namespace_id(&self, p: Proc, lib: Lib) -> u16 {
        self.nodes[p]
            .namespace(LibId(lib))
            .expect("live library")
            .id()
    }

    fn counters(&self, p: Proc, lib: Lib) -> Counters {
        let c = self.nodes[p].libraries().counters(LibId(lib));
        Counters {
            sent: c.sent,
            received: c.received,
            failed: c.failed,
        }
    }

    fn live_connections(&self, a: Proc, b: Proc) -> usize {
        self.nodes[a].live_connections_to(Self::token(b))
    }

    fn protocol_errors(&self, p: Proc) -> usize {
        self.nodes[p].protocol_errors().len()
    }

    fn flood_closes(&self, p: Proc) -> u64 {
        self.nodes[p].flood_closes()
    }

    fn hold_backlog(&mut self, p: Proc, lib: Lib, messages: u32) -> Result<(), String> {
        let limit = tagspace_core::engine::BacklogLimit {
            messages,
            ..Default::default()
        };
        (self.nodes[p].hold_backlog(LibId(lib), limit)).map_err(|e| e.to_string())
    }

    fn layout(&self) -> TagLayout {
        TagLayout::DEFAULT
    }
}
