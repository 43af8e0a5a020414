//! tagspace at scale, by simulation: thousands of processes in one, each a real tagspace node
//! (the core engine, its own registry and identity) on the mock fabric (UCX's matching
//! semantics), with virtual time.
//!
//! A run ([`Sim::run`]) goes through the phases a cluster lives through, measuring each:
//! 1. every process registers `libs - 1` libraries, in its own random order (so one name has
//!    different ids in different processes), then the connections of the topology are opened
//!    at once: the handshake's control cost per connection, and the hops until every
//!    directory has every name;
//! 2. every process registers one more library: the announcement's fan-out per registration,
//!    and the hops until every peer routes to it;
//! 3. steady state: virtual seconds pass, heartbeats only;
//! 4. churn: libraries released and registered again, one at a time: hops until every peer
//!    has dropped the route, and until every peer routes to the new id;
//! 5. processes killed (`kill -9`), then restarted with new identities that connect to the
//!    same peers;
//! 6. connections dropped (a reset): the nodes dial back by themselves;
//!
//! and checks, after phases 2, 4, 5 and 6, that a sample of messages is delivered exactly once
//! (none lost, none twice, none changed), and at every hop of phases 4–6 that no route points
//! at an id its peer has given to another library (a message sent on it would be misdelivered);
//! at every quiet point, that every route is exactly the peer's current id.
//!
//! One hop is one delivery of everything in flight followed by one `progress` of every node:
//! virtual time stands still during it, so hops count round trips, not milliseconds.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod reuse;
pub mod topology;

use std::time::Instant;
use tagspace_core::engine::Footprint;
use tagspace_core::{Identity, TagLayout};
use tagspace_mock::fabric::{Fabric, ProcessId, RNDV_THRESHOLD};
use tagspace_mock::node::{ControlSent, LibId, Node, OpId};
pub use topology::{Rng, Topology};

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Config {
    /// Processes.
    pub procs: usize,
    /// Libraries per process.
    pub libs: usize,
    /// Who connects to whom.
    pub topology: Topology,
    /// Seed of every random choice.
    pub seed: u64,
    /// Release/re-register events (phase 4).
    pub churn: usize,
    /// Processes killed and restarted (phase 5).
    pub kills: usize,
    /// Connections dropped (phase 6).
    pub drops: usize,
    /// Messages sampled for exactly-once after each phase.
    pub sample: usize,
    /// Virtual milliseconds of steady state (phase 3).
    pub steady_ms: u64,
}

impl Config {
    /// `procs` processes with the defaults: 8 libraries, 8 random peers dialled each, churn
    /// and faults scaled to the size (at least one of each).
    pub fn new(procs: usize) -> Config {
        Config {
            procs,
            libs: 8,
            topology: Topology::Random(8),
            seed: 1,
            churn: (procs / 16).clamp(1, 64),
            kills: (procs / 64).clamp(1, 16),
            drops: (procs / 32).clamp(1, 64),
            sample: procs.clamp(16, 1024),
            steady_ms: 10_000,
        }
    }

    /// What is wrong with this configuration, if anything.
    pub fn check(&self) -> Result<(), String> {
        if self.procs < 2 || self.procs > 65_536 {
            return Err(format!("procs must be 2..=65536, not {}", self.procs));
        }
        if self.libs < 1 || self.libs > 200 {
            return Err(format!("libs must be 1..=200, not {}", self.libs));
        }
        if self.kills >= self.procs {
            return Err(format!("kills ({}) must be fewer than procs", self.kills));
        }
        if self.topology == Topology::Random(0) {
            return Err("a random topology needs at least 1 peer dialled per process".into());
        }
        Ok(())
    }
}

/// Control traffic of one phase, summed over every process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Control frames.
    pub frames: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Withdrawal acknowledgements' tag messages.
    pub ack_tags: u64,
}

impl Traffic {
    fn between(a: ControlSent, b: ControlSent) -> Traffic {
        Traffic {
            frames: b.frames - a.frames,
            bytes: b.bytes - a.bytes,
            ack_tags: b.ack_tags - a.ack_tags,
        }
    }

    /// `self` divided by `n` (as a float, for per-unit figures).
    pub fn per(&self, n: u64) -> (f64, f64) {
        let n = n.max(1) as f64;
        (self.frames as f64 / n, self.bytes as f64 / n)
    }
}

/// Memory of the nodes' connection tables ([`Footprint`]), over every live process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Memory {
    /// Connection ends held (each connection has one in each of its two processes).
    pub connection_ends: usize,
    /// Bytes per connection end of the tables that grow with connections.
    pub per_connection: f64,
    /// Of it: the session (handshake, acknowledgements, directory).
    pub session: usize,
    /// Of the session: the directory.
    pub directory: usize,
    /// Of it: the route cache.
    pub route_cache: f64,
    /// Of it: the connection table's entry.
    pub table: f64,
    /// Of it: the peer index and the handle index.
    pub peer_index: f64,
    /// Of it: the pair values given to peers.
    pub pairs: f64,
    /// Mean bytes per node, every table.
    pub per_node_mean: f64,
    /// The largest node's bytes.
    pub per_node_max: usize,
    /// The largest table of peers gone (bounded by `GONE_PEERS_MAX`).
    pub gone_max: usize,
}

/// Exactly-once over a sample of messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delivery {
    /// Messages sent.
    pub sent: u64,
    /// Received once, intact.
    pub once: u64,
    /// Not received (the receive failed, or never finished).
    pub lost: u64,
    /// Received with other bytes.
    pub changed: u64,
    /// Extra copies found (left queued, or drained as strays).
    pub extra: u64,
}

/// Hops and virtual time of one kind of event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Converge {
    /// Events measured.
    pub events: u64,
    /// Hops until converged: the sum (for the mean) and the largest.
    pub hops_sum: u64,
    /// The largest.
    pub hops_max: u64,
    /// Virtual milliseconds until converged, the largest.
    pub ms_max: u64,
}

impl Converge {
    fn add(&mut self, hops: u64, ms: u64) {
        self.events += 1;
        self.hops_sum += hops;
        self.hops_max = self.hops_max.max(hops);
        self.ms_max = self.ms_max.max(ms);
    }

    /// Mean hops.
    pub fn mean(&self) -> f64 {
        self.hops_sum as f64 / self.events.max(1) as f64
    }
}

/// Route lookups and idle `progress` calls at one node.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Lookup {
    /// Its peers.
    pub peers: usize,
    /// Nanoseconds per lookup (wall clock, this machine).
    pub ns: f64,
    /// Nanoseconds per `progress` with nothing to do (nothing arrived, no timer due).
    pub progress_ns: f64,
    /// Nanoseconds to find the connection an incoming control frame belongs to, over the
    /// node's endpoints in turn.
    pub frame_ns: f64,
}

/// Everything a run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Connections opened by the topology.
    pub connections: u64,
    /// Peers per process: mean and largest.
    pub degree_mean: f64,
    /// The largest.
    pub degree_max: usize,
    /// Phase 1: the handshakes (with `libs - 1` names in each directory).
    pub handshake: Traffic,
    /// Hops until every directory had every name.
    pub handshake_hops: u64,
    /// Phase 2: one registration in every process.
    pub registration: Traffic,
    /// Registrations made in phase 2.
    pub registrations: u64,
    /// Sum over those registrations of the registering process's peers.
    pub registration_peers: u64,
    /// Hops until every peer routed to every new name.
    pub registration_hops: u64,
    /// Phase 3: heartbeats, over this many virtual milliseconds.
    pub steady: Traffic,
    /// Its length.
    pub steady_ms: u64,
    /// Phase 4: a release, until no peer routes to the name and every peer confirmed.
    pub release: Converge,
    /// A registration again, until every peer routes to the new id.
    pub reregister: Converge,
    /// The control traffic of the churn phase.
    pub churn: Traffic,
    /// Phase 5: kills, until every peer saw the process down.
    pub kill: Converge,
    /// Restarts with new identities, until every directory on both sides converged.
    pub restart: Converge,
    /// The control traffic of the restarts.
    pub restart_traffic: Traffic,
    /// Connections the restarted processes opened.
    pub restart_connections: u64,
    /// Phase 6: dropped connections, until dialled back and converged.
    pub drop: Converge,
    /// Memory after phase 2 (tables as a running cluster holds them).
    pub memory: Memory,
    /// Memory at the end (after the churn and faults).
    pub memory_end: Memory,
    /// The simulator's whole heap per connection end after phase 2 (fabric included), if the
    /// caller could measure it.
    pub heap_per_connection: Option<f64>,
    /// Route lookups at the node with the fewest peers and at the one with the most.
    pub lookup: [Lookup; 2],
    /// Exactly-once over every sample.
    pub delivery: Delivery,
    /// Route checks made (lookups), and what they found wrong.
    pub route_checks: u64,
    /// Routes seen pointing at an id the peer had given to another library.
    pub wrong_routes: u64,
    /// Routes found not matching the peer's current id at a quiet point.
    pub unsettled_routes: u64,
    /// Hops simulated.
    pub hops: u64,
    /// Virtual milliseconds simulated.
    pub virtual_ms: u64,
    /// ucx-py's `EndpointReuse` on the same connections ([`reuse::endpoint_reuse`]): one
    /// virtual connect per library per pair.
    pub reuse: reuse::ReuseCost,
    /// Every failure, in words (empty: the run passed).
    pub failures: Vec<String>,
}

/// One process of the simulation.
struct Slot {
    node: Node,
    /// By library index: its id here, while registered.
    libs: Vec<Option<LibId>>,
    alive: bool,
    /// Restarts so far (each gets a new identity).
    generation: u64,
}

/// What a route lookup found ([`Sim::route`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// The peer's id for the name.
    Id(u16),
    /// The peer has not announced it.
    Missing,
    /// No established connection.
    NoConnection,
}

/// The running simulation.
pub struct Sim {
    cfg: Config,
    fab: Fabric,
    slots: Vec<Slot>,
    names: Vec<String>,
    rng: Rng,
    edges: Vec<(usize, usize)>,
    adj: Vec<Vec<usize>>,
    next_process: usize,
    next_payload: u64,
    /// Control traffic of nodes replaced by a restart.
    retired: ControlSent,
    report: Report,
    /// Check the routes of these processes at every hop (phases 4–6: the ones changing).
    focus: Vec<usize>,
}

/// The layout every process uses.
const LAYOUT: TagLayout = TagLayout::DEFAULT;
/// Hops a phase may take before the run fails (a protocol that does not converge).
const MAX_HOPS: u64 = 200;
/// How far virtual time moves per tick when waiting on timers.
const TICK_MS: u64 = 50;
/// Longest virtual wait for a timer-driven recovery.
const MAX_WAIT_MS: u64 = 60_000;

impl Sim {
    /// A cluster of `cfg.procs` processes, none connected yet.
    pub fn new(cfg: Config) -> Result<Sim, String> {
        cfg.check()?;
        let mut rng = Rng::new(cfg.seed);
        let edges = cfg.topology.edges(cfg.procs, &mut rng);
        let mut adj = vec![Vec::new(); cfg.procs];
        for &(a, b) in &edges {
            adj[a].push(b);
            adj[b].push(a);
        }
        let mut fab = Fabric::new();
        fab.set_hold(true);
        let names = (0..cfg.libs).map(|i| format!("sim.lib{i}")).collect();
        let mut sim = Sim {
            slots: Vec::with_capacity(cfg.procs),
            fab,
            names,
            rng,
            edges,
            adj,
            next_process: 0,
            next_payload: 1,
            retired: ControlSent::default(),
            report: Report::default(),
            focus: Vec::new(),
            cfg,
        };
        for p in 0..sim.cfg.procs {
            let node = sim.new_node(p, 0);
            sim.slots.push(Slot {
                node,
                libs: vec![None; sim.cfg.libs],
                alive: true,
                generation: 0,
            });
        }
        Ok(sim)
    }

    fn new_node(&mut self, slot: usize, generation: u64) -> Node {
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&self.cfg.seed.to_le_bytes());
        seed[8..16].copy_from_slice(&(slot as u64).to_le_bytes());
        seed[16..24].copy_from_slice(&generation.to_le_bytes());
        seed[24] = 0x51;
        let process = ProcessId(self.next_process);
        self.next_process += 1;
        Node::with_layout(&mut self.fab, process, Identity::from_seed(&seed), LAYOUT)
    }

    /// Runs every phase; `heap` says how many bytes the process's heap holds now (0 if
    /// unknown).
    pub fn run(mut self, heap: &dyn Fn() -> usize) -> Report {
        let degrees: Vec<usize> = self.adj.iter().map(Vec::len).collect();
        self.report.connections = self.edges.len() as u64;
        self.report.degree_mean = degrees.iter().sum::<usize>() as f64 / degrees.len() as f64;
        self.report.degree_max = degrees.iter().copied().max().unwrap_or(0);
        self.report.reuse = reuse::endpoint_reuse(self.cfg.procs, &self.edges, self.cfg.libs);
        let before = heap();
        self.phase_connect();
        self.phase_register();
        self.report.memory = self.memory();
        let ends = self.report.memory.connection_ends;
        let after = heap();
        if after > 0 && ends > 0 {
            self.report.heap_per_connection =
                Some(after.saturating_sub(before) as f64 / ends as f64);
        }
        self.report.lookup = self.lookups();
        self.sample("registered");
        self.phase_steady();
        self.phase_churn();
        self.sample("churned");
        self.phase_kill();
        self.sample("restarted");
        self.phase_drop();
        self.sample("dropped");
        self.report.memory_end = self.memory();
        self.report.virtual_ms = self.fab.now_ms();
        let d = self.report.delivery;
        if d.once != d.sent || d.extra != 0 {
            self.fail(format!(
                "exactly-once: {} sent, {} once, {} lost, {} changed, {} extra",
                d.sent, d.once, d.lost, d.changed, d.extra
            ));
        }
        self.report
    }

    fn fail(&mut self, what: String) {
        if self.report.failures.len() < 20 {
            self.report.failures.push(what);
        }
    }

    // --- hops --------------------------------------------------------------------------

    /// One hop: everything in flight delivered, then every live node progresses once.
    fn hop(&mut self) {
        self.fab.deliver_all();
        for s in self.slots.iter_mut().filter(|s| s.alive) {
            s.node.progress(&mut self.fab);
        }
        self.report.hops += 1;
        if !self.focus.is_empty() {
            self.check_routes(false);
        }
    }

    /// Nothing in flight, and nothing waiting for a node to look at it.
    fn quiet(&self) -> bool {
        self.fab.in_flight().is_empty()
            && !(self.slots.iter()).any(|s| s.alive && self.fab.has_work(s.node.worker()))
    }

    /// Hops until `done` (checked before each), at most [`MAX_HOPS`]; then on until quiet.
    /// Returns the hops `done` took, or `None` if it never came.
    fn hops_until(&mut self, what: &str, done: impl Fn(&Sim) -> bool) -> Option<u64> {
        let mut hops = 0;
        while !done(self) {
            if hops == MAX_HOPS {
                self.fail(format!("{what}: not converged after {MAX_HOPS} hops"));
                return None;
            }
            self.hop();
            hops += 1;
        }
        self.settle();
        Some(hops)
    }

    /// Hops until quiet.
    fn settle(&mut self) {
        let mut n = 0;
        while !self.quiet() {
            if n == MAX_HOPS {
                self.fail(format!("traffic still flowing after {MAX_HOPS} hops"));
                return;
            }
            self.hop();
            n += 1;
        }
    }

    /// Virtual time in ticks (each settled) until `done`; returns (hops, ms).
    fn wait_until(&mut self, what: &str, done: impl Fn(&Sim) -> bool) -> Option<(u64, u64)> {
        let (start_hops, start_ms) = (self.report.hops, self.fab.now_ms());
        self.settle();
        while !done(self) {
            if self.fab.now_ms() - start_ms >= MAX_WAIT_MS {
                self.fail(format!("{what}: not back after {MAX_WAIT_MS} virtual ms"));
                return None;
            }
            self.fab.advance(TICK_MS);
            self.hop();
            self.settle();
        }
        Some((self.report.hops - start_hops, self.fab.now_ms() - start_ms))
    }

    fn sent(&self) -> ControlSent {
        let mut t = self.retired;
        for s in &self.slots {
            t += s.node.control_sent();
        }
        t
    }

    // --- routes ------------------------------------------------------------------------

    /// What `q` routes to for library `x` on `r`.
    fn route(&self, q: usize, r: usize, x: usize) -> Option<Seen> {
        let lib = self.slots[q].libs[x]?;
        let peer = self.slots[r].node.token();
        Some(match self.slots[q].node.route_tag(lib, peer, 0) {
            Ok(Some((_, tag))) => Seen::Id(LAYOUT.namespace_of(tag)),
            Ok(None) => Seen::Missing,
            Err(_) => Seen::NoConnection,
        })
    }

    /// `r`'s id for library `x` now.
    fn id_of(&self, r: usize, x: usize) -> Option<u16> {
        let lib = self.slots[r].libs[x]?;
        Some(self.slots[r].node.namespace(lib)?.id())
    }

    /// Whether every route between `r` and its peers, both ways, is exactly the other side's
    /// current id for every library both have (and absent where the other has none).
    fn settled_at(&self, r: usize) -> bool {
        (self.adj[r].iter()).all(|&q| self.pair_settled(q, r) && self.pair_settled(r, q))
    }

    /// Whether `q`'s routes to `r` are exact (see [`settled_at`](Self::settled_at)); a pair
    /// with a side down counts as settled.
    fn pair_settled(&self, q: usize, r: usize) -> bool {
        if !self.slots[q].alive || !self.slots[r].alive {
            return true;
        }
        (0..self.cfg.libs).all(|x| self.route(q, r, x).is_none_or(|s| self.exact(r, x, s)))
    }

    /// Whether `seen` (a route to library `x` on `r`) is `r`'s current id for it, or missing
    /// where `r` has none.
    fn exact(&self, r: usize, x: usize, seen: Seen) -> bool {
        match self.id_of(r, x) {
            Some(id) => seen == Seen::Id(id),
            None => seen == Seen::Missing,
        }
    }

    fn all_settled(&self) -> bool {
        (self.edges.iter()).all(|&(a, b)| self.pair_settled(a, b) && self.pair_settled(b, a))
    }

    /// The safety check: no route points at an id its peer has given to another library (a
    /// message sent on it would reach that library). With `exact`: also every route is the
    /// peer's current id (at quiet points).
    fn check_routes(&mut self, exact: bool) {
        let mut wrong = Vec::new();
        let mut unsettled = 0;
        let mut checks = 0;
        // Between hops only the processes changing can change routes; at quiet points, all.
        let pairs: Vec<(usize, usize)> = if exact || self.focus.is_empty() {
            self.edges.clone()
        } else {
            let f = &self.focus;
            f.iter()
                .flat_map(|&r| self.adj[r].iter().map(move |&q| (q, r)))
                .collect()
        };
        for (a, b) in pairs {
            for (q, r) in [(a, b), (b, a)] {
                if !self.slots[q].alive || !self.slots[r].alive {
                    continue;
                }
                for x in 0..self.cfg.libs {
                    let Some(seen) = self.route(q, r, x) else {
                        continue;
                    };
                    checks += 1;
                    if let Seen::Id(id) = seen {
                        if let Some((_, name)) = self.slots[r].node.registry().name_of(id) {
                            if name.as_str() != self.names[x] {
                                wrong.push(format!(
                                    "process {q} routes {} on process {r} to id {id}, which there is {}",
                                    self.names[x],
                                    name.as_str()
                                ));
                            }
                        }
                    }
                    if exact && !self.exact(r, x, seen) {
                        unsettled += 1;
                    }
                }
            }
        }
        self.report.route_checks += checks;
        self.report.wrong_routes += wrong.len() as u64;
        self.report.unsettled_routes += unsettled;
        for w in wrong {
            self.fail(format!("wrong route: {w}"));
        }
        if unsettled > 0 {
            self.fail(format!(
                "{unsettled} routes not the peer's current id at a quiet point"
            ));
        }
    }

    // --- phases ------------------------------------------------------------------------

    /// Registers library `x` at `p`.
    fn register(&mut self, p: usize, x: usize) {
        match self.slots[p].node.register(&self.names[x]) {
            Ok(lib) => self.slots[p].libs[x] = Some(lib),
            Err(e) => self.fail(format!("process {p}: register {}: {e}", self.names[x])),
        }
    }

    fn phase_connect(&mut self) {
        let libs = self.cfg.libs;
        for p in 0..self.cfg.procs {
            let mut order: Vec<usize> = (0..libs - 1).collect();
            self.rng.shuffle(&mut order);
            for x in order {
                self.register(p, x);
            }
        }
        let t0 = self.sent();
        for i in 0..self.edges.len() {
            let (a, b) = self.edges[i];
            let w = self.slots[b].node.worker();
            if let Err(e) = self.slots[a].node.connect(&mut self.fab, w) {
                self.fail(format!("connect {a} -> {b}: {e}"));
            }
        }
        let hops = self.hops_until("handshakes", Sim::all_settled);
        self.report.handshake_hops = hops.unwrap_or(0);
        self.report.handshake = Traffic::between(t0, self.sent());
        self.check_routes(true);
    }

    fn phase_register(&mut self) {
        let t0 = self.sent();
        let last = self.cfg.libs - 1;
        let mut order: Vec<usize> = (0..self.cfg.procs).collect();
        self.rng.shuffle(&mut order);
        for p in order {
            self.register(p, last);
            self.report.registrations += 1;
            self.report.registration_peers += self.adj[p].len() as u64;
        }
        let hops = self.hops_until("registrations", Sim::all_settled);
        self.report.registration_hops = hops.unwrap_or(0);
        self.report.registration = Traffic::between(t0, self.sent());
        self.check_routes(true);
    }

    fn phase_steady(&mut self) {
        let t0 = self.sent();
        let start = self.fab.now_ms();
        while self.fab.now_ms() - start < self.cfg.steady_ms {
            self.fab.advance(100);
            self.hop();
            self.settle();
        }
        self.report.steady = Traffic::between(t0, self.sent());
        self.report.steady_ms = self.fab.now_ms() - start;
        self.check_routes(true);
    }

    fn phase_churn(&mut self) {
        let t0 = self.sent();
        for _ in 0..self.cfg.churn {
            let r = self.rng.below(self.cfg.procs);
            let x = self.rng.below(self.cfg.libs);
            let Some(lib) = self.slots[r].libs[x].take() else {
                continue;
            };
            let old = self.slots[r].node.namespace(lib).map(|n| n.id());
            self.focus = vec![r];
            self.slots[r].node.release(&mut self.fab, lib);
            // Released: until no peer routes to it, and the id is free again (every peer
            // confirmed the withdrawal: R7).
            let freed = move |s: &Sim| {
                s.settled_at(r)
                    && old.is_none_or(|id| s.slots[r].node.registry().name_of(id).is_none())
                    && old.is_none_or(|id| !s.slots[r].node.registry().is_quarantined(id))
            };
            if let Some(h) = self.hops_until("release", freed) {
                self.report.release.add(h, 0);
            }
            self.register(r, x);
            let settled = move |s: &Sim| s.settled_at(r);
            if let Some(h) = self.hops_until("registration again", settled) {
                self.report.reregister.add(h, 0);
            }
        }
        self.focus.clear();
        self.report.churn = Traffic::between(t0, self.sent());
        self.check_routes(true);
    }

    fn phase_kill(&mut self) {
        let mut victims: Vec<usize> = (0..self.cfg.procs).collect();
        self.rng.shuffle(&mut victims);
        victims.truncate(self.cfg.kills);
        self.focus = victims.clone();
        let tokens: Vec<u64> = victims
            .iter()
            .map(|&v| self.slots[v].node.token())
            .collect();
        for &v in &victims {
            let process = self.fab.process_of(self.slots[v].node.worker());
            self.fab.kill(process);
            self.slots[v].alive = false;
        }
        let down = |s: &Sim| {
            victims.iter().zip(&tokens).all(|(&v, &t)| {
                (s.adj[v].iter())
                    .all(|&q| !s.slots[q].alive || s.slots[q].node.live_connections_to(t) == 0)
            })
        };
        if let Some(h) = self.hops_until("peers seeing the kills", down) {
            for _ in &victims {
                self.report.kill.add(h, 0);
            }
        }
        // Restarted: a new process with a new identity, its libraries in a new order, dialling
        // the peers the old one had.
        let t0 = self.sent();
        for &v in &victims {
            self.retired += self.slots[v].node.control_sent();
            let generation = self.slots[v].generation + 1;
            let node = self.new_node(v, generation);
            self.slots[v] = Slot {
                node,
                libs: vec![None; self.cfg.libs],
                alive: true,
                generation,
            };
            let mut order: Vec<usize> = (0..self.cfg.libs).collect();
            self.rng.shuffle(&mut order);
            for x in order {
                self.register(v, x);
            }
        }
        for &v in &victims {
            for i in 0..self.adj[v].len() {
                let q = self.adj[v][i];
                if !self.slots[q].alive {
                    continue; // a peer killed too: it dials this one
                }
                let w = self.slots[q].node.worker();
                match self.slots[v].node.connect(&mut self.fab, w) {
                    Ok(()) => self.report.restart_connections += 1,
                    Err(e) => self.fail(format!("restart {v}: connect to {q}: {e}")),
                }
            }
        }
        let back = |s: &Sim| victims.iter().all(|&v| s.settled_at(v));
        if let Some(h) = self.hops_until("restarts", back) {
            for _ in &victims {
                self.report.restart.add(h, 0);
            }
        }
        self.focus.clear();
        self.report.restart_traffic = Traffic::between(t0, self.sent());
        self.check_routes(true);
    }

    fn phase_drop(&mut self) {
        let mut dropped = Vec::new();
        for _ in 0..self.cfg.drops {
            let (a, b) = self.edges[self.rng.below(self.edges.len())];
            let (pa, pb) = (
                self.fab.process_of(self.slots[a].node.worker()),
                self.fab.process_of(self.slots[b].node.worker()),
            );
            // A reset: every endpoint between them fails; the network is back at once, and
            // the nodes dial each other again on their own schedule.
            self.fab.partition(pa, pb);
            self.fab.heal(pa, pb);
            dropped.push((a, b));
            self.focus.push(a);
        }
        let back = |s: &Sim| {
            dropped.iter().all(|&(a, b)| {
                let tb = s.slots[b].node.token();
                s.slots[a].node.live_connections_to(tb) == 1
                    && s.pair_settled(a, b)
                    && s.pair_settled(b, a)
            })
        };
        if let Some((h, ms)) = self.wait_until("dropped connections", back) {
            for _ in &dropped {
                self.report.drop.add(h, ms);
            }
        }
        self.focus.clear();
        self.check_routes(true);
    }

    // --- measurements ------------------------------------------------------------------

    fn memory(&self) -> Memory {
        let mut m = Memory::default();
        let (mut grows, mut routes, mut total) = (0usize, 0usize, 0usize);
        let (mut table, mut index, mut pairs) = (0usize, 0usize, 0usize);
        let mut live = 0;
        for s in self.slots.iter().filter(|s| s.alive) {
            let f: Footprint = s.node.footprint();
            live += 1;
            m.connection_ends += f.connections;
            grows += f.per_connection() * f.connections;
            routes += f.route_cache;
            (table, index, pairs) = (table + f.table, index + f.peer_index, pairs + f.pairs);
            total += f.total();
            m.per_node_max = m.per_node_max.max(f.total());
            m.gone_max = m.gone_max.max(f.gone_peers);
            if let (Some(session), Some(directory)) = (
                f.sessions.checked_div(f.connections),
                f.directories.checked_div(f.connections),
            ) {
                (m.session, m.directory) = (session, directory);
            }
        }
        let ends = m.connection_ends.max(1) as f64;
        m.per_connection = grows as f64 / ends;
        m.route_cache = routes as f64 / ends;
        (m.table, m.peer_index, m.pairs) = (
            table as f64 / ends,
            index as f64 / ends,
            pairs as f64 / ends,
        );
        m.per_node_mean = total as f64 / live.max(1) as f64;
        m
    }

    /// Route lookups at the live node with the fewest peers and at the one with the most, over
    /// its peers and libraries in turn.
    fn lookups(&mut self) -> [Lookup; 2] {
        let live: Vec<usize> = (0..self.slots.len())
            .filter(|&p| self.slots[p].alive)
            .collect();
        let min = live.iter().copied().min_by_key(|&p| self.adj[p].len());
        let max = live.iter().copied().max_by_key(|&p| self.adj[p].len());
        [min, max].map(|p| {
            p.map_or(Lookup::default(), |p| Lookup {
                peers: self.adj[p].len(),
                ns: self.time_lookups(p),
                progress_ns: self.time_progress(p),
                frame_ns: self.time_frame_lookups(p),
            })
        })
    }

    /// Nanoseconds per route lookup at `p`, over its peers and libraries in turn (0 with none).
    fn time_lookups(&self, p: usize) -> f64 {
        let s = &self.slots[p];
        let peers: Vec<u64> = self.adj[p]
            .iter()
            .map(|&q| self.slots[q].node.token())
            .collect();
        let libs: Vec<LibId> = s.libs.iter().flatten().copied().collect();
        if peers.is_empty() || libs.is_empty() {
            return 0.0;
        }
        const N: usize = 200_000;
        let start = Instant::now();
        let mut acc = 0u64;
        for i in 0..N {
            let peer = peers[i % peers.len()];
            let lib = libs[(i / peers.len()) % libs.len()];
            if let Ok(Some((_, tag))) = s.node.route_tag(lib, peer, i as u64 & 0xffff) {
                acc = acc.wrapping_add(tag);
            }
        }
        std::hint::black_box(acc);
        start.elapsed().as_nanos() as f64 / N as f64
    }

    /// Nanoseconds per connection lookup of an incoming frame at `p` (what every control
    /// frame and endpoint error costs before the engine reads it), over its endpoints in turn.
    fn time_frame_lookups(&self, p: usize) -> f64 {
        let node = &self.slots[p].node;
        let eps: Vec<_> = (self.adj[p].iter())
            .filter_map(|&q| node.endpoint_to(self.slots[q].node.token()))
            .collect();
        if eps.is_empty() {
            return 0.0;
        }
        const N: usize = 200_000;
        let start = Instant::now();
        let mut found = 0usize;
        for i in 0..N {
            found += usize::from(node.connection_of(eps[i % eps.len()]).is_some());
        }
        std::hint::black_box(found);
        start.elapsed().as_nanos() as f64 / N as f64
    }

    /// Idle `progress` calls at `p`: the cluster is quiet and time stands still, so nothing
    /// arrives and no timer is due.
    fn time_progress(&mut self, p: usize) -> f64 {
        const N: u32 = 2_000;
        let start = Instant::now();
        for _ in 0..N {
            self.slots[p].node.progress(&mut self.fab);
        }
        start.elapsed().as_nanos() as f64 / f64::from(N)
    }

    /// Messages waiting unexpected in every live process's worker.
    fn queued(&self) -> u64 {
        (self.slots.iter().filter(|s| s.alive))
            .map(|s| self.fab.unexpected_len(s.node.worker()) as u64)
            .sum()
    }

    /// Sends `cfg.sample` messages between random connected pairs, each with a receive posted
    /// for it from its sender, and checks that each arrives exactly once, unchanged.
    fn sample(&mut self, what: &str) {
        self.sample_with(what, false);
    }

    /// [`sample`](Self::sample); with `duplicate`, the first message also goes a second time,
    /// by hand on the same endpoint with the same tag (the check's control: it must count it).
    fn sample_with(&mut self, what: &str, duplicate: bool) {
        let mut pending: Vec<(usize, OpId, usize, OpId, Vec<u8>)> = Vec::new();
        let strays0: u64 = self.slots.iter().map(|s| s.node.stray()).sum();
        let queued0 = self.queued();
        for i in 0..self.cfg.sample {
            let (a, b) = self.edges[self.rng.below(self.edges.len())];
            let (src, dst) = if self.rng.below(2) == 0 {
                (a, b)
            } else {
                (b, a)
            };
            let x = self.rng.below(self.cfg.libs);
            let (Some(ls), Some(ld)) = (self.slots[src].libs[x], self.slots[dst].libs[x]) else {
                continue;
            };
            let payload = self.next_payload;
            self.next_payload = (self.next_payload + 1) & 0xffff_ffff;
            // Every 16th is a rendezvous message (completes at the sender only when matched).
            let len = if i % 16 == 15 {
                RNDV_THRESHOLD + 1000
            } else {
                8 + i % 64
            };
            let mut data = format!("{what} {src}->{dst} {payload} ").into_bytes();
            data.resize(len.max(data.len()), (payload & 0xff) as u8);
            let (ts, td) = (self.slots[src].node.token(), self.slots[dst].node.token());
            let r = self.slots[dst]
                .node
                .recv_from(&mut self.fab, ld, ts, payload);
            let s = self.slots[src]
                .node
                .send(&mut self.fab, ls, td, payload, &data, 10_000);
            if duplicate && pending.is_empty() {
                if let Ok(Some((ep, tag))) = self.slots[src].node.route_tag(ls, td, payload) {
                    if let Err(e) = self.fab.tag_send(ep, tag, &data) {
                        self.fail(format!("the duplicate could not be sent: {e}"));
                    }
                }
            }
            pending.push((dst, r, src, s, data));
        }
        let mut d = Delivery {
            sent: pending.len() as u64,
            ..Delivery::default()
        };
        let mut hops = 0;
        while !pending.is_empty() && hops < MAX_HOPS {
            self.hop();
            hops += 1;
            pending.retain(|(dst, r, src, s, data)| {
                let Some(got) = self.slots[*dst].node.take(*r) else {
                    return true;
                };
                match got {
                    Ok(Some(bytes)) if bytes == *data => d.once += 1,
                    Ok(_) => d.changed += 1,
                    Err(_) => d.lost += 1,
                }
                // The send's result is taken too, so nothing is left behind.
                drop(self.slots[*src].node.take(*s));
                false
            });
        }
        d.lost += pending.len() as u64;
        self.settle();
        // Let the stray sweep run (it is timed), then count what is left or was drained.
        self.fab.advance(tagspace_mock::node::DRAIN_INTERVAL_MS);
        self.hop();
        self.settle();
        let strays: u64 = self.slots.iter().map(|s| s.node.stray()).sum();
        d.extra = (strays - strays0) + self.queued().saturating_sub(queued0);
        let t = &mut self.report.delivery;
        t.sent += d.sent;
        t.once += d.once;
        t.lost += d.lost;
        t.changed += d.changed;
        t.extra += d.extra;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(procs: usize, topology: Topology) -> Config {
        Config {
            topology,
            sample: 64,
            steady_ms: 3_000,
            ..Config::new(procs)
        }
    }

    #[test]
    fn every_topology_passes_every_check() {
        for topology in [Topology::Mesh, Topology::Random(3), Topology::Dask(2)] {
            let r = Sim::new(small(24, topology)).unwrap().run(&|| 0);
            assert!(r.failures.is_empty(), "{topology}: {:?}", r.failures);
            assert_eq!(r.delivery.once, r.delivery.sent, "{topology}");
            assert!(r.delivery.sent >= 4 * 60, "{topology}: the samples ran");
            assert!(r.route_checks > 0 && r.kill.events == 1 && r.drop.events > 0);
            assert!(r.release.events > 0 && r.reregister.events > 0);
        }
    }

    /// The scaling claim itself: what a connection and a registration cost does not depend on
    /// how many processes there are.
    #[test]
    fn control_cost_per_connection_is_the_same_at_any_size() {
        let a = Sim::new(small(16, Topology::Random(4))).unwrap().run(&|| 0);
        let b = Sim::new(small(96, Topology::Random(4))).unwrap().run(&|| 0);
        assert!(a.failures.is_empty() && b.failures.is_empty());
        let per_conn = |r: &Report| r.handshake.per(r.connections);
        assert_eq!(per_conn(&a), per_conn(&b));
        let per_peer = |r: &Report| r.registration.per(r.registration_peers);
        assert_eq!(per_peer(&a), per_peer(&b));
        assert_eq!(per_conn(&a).0, 12.0, "the handshake's frames");
        assert_eq!(per_peer(&a).0, 1.0, "one announcement per peer");
        assert!(a.registration_hops <= 2 && b.registration_hops <= 2);
        let (ma, mb) = (a.memory.per_connection, b.memory.per_connection);
        assert!((ma - mb).abs() < 64.0, "{ma} vs {mb}");
        // The budget: a connection (one end) with 8 libraries in at most 2 KB.
        assert!(mb <= 2048.0, "{mb} bytes per connection");
    }

    fn connected(procs: usize) -> Sim {
        let mut sim = Sim::new(small(procs, Topology::Random(3))).unwrap();
        sim.phase_connect();
        sim.phase_register();
        assert!(sim.report.failures.is_empty(), "{:?}", sim.report.failures);
        sim
    }

    /// The exactly-once check's control: one message sent twice is counted as extra.
    #[test]
    fn a_duplicated_message_is_caught() {
        let mut sim = connected(12);
        sim.sample_with("control", true);
        let d = sim.report.delivery;
        assert_eq!((d.once, d.extra), (d.sent, 1), "{d:?}");
        sim.sample("again");
        assert_eq!(sim.report.delivery.extra, 1, "nothing more");
    }

    /// The route check's control: an id handed to another library while peers still route to
    /// it (R7 skipped by force) is found.
    #[test]
    fn a_route_to_a_reused_id_is_caught() {
        let mut sim = connected(12);
        let r = 0;
        let lib = sim.slots[r].libs[2].take().unwrap();
        let id = sim.slots[r].node.namespace(lib).unwrap().id();
        sim.slots[r].node.release(&mut sim.fab, lib);
        let reg = sim.slots[r].node.registry();
        while reg.is_quarantined(id) {
            reg.unpin(id); // every peer's pin dropped without its acknowledgement
        }
        std::mem::forget(reg.register_at("sim.intruder", id).unwrap());
        sim.focus = vec![r];
        sim.check_routes(false);
        let peers = sim.adj[r].len() as u64;
        assert_eq!(sim.report.wrong_routes, peers, "{:?}", sim.report.failures);
        // Its nodes would give back the pins taken by force above when dropped.
        std::mem::forget(sim);
        // Without the forced reuse the same check finds nothing.
        let mut clean = connected(12);
        let lib = clean.slots[r].libs[2].take().unwrap();
        clean.slots[r].node.release(&mut clean.fab, lib);
        clean.focus = vec![r];
        clean.check_routes(false);
        assert_eq!(clean.report.wrong_routes, 0);
    }

    #[test]
    fn bad_configurations_are_refused_by_name() {
        let bad = |c: Config, what: &str| {
            let e = Sim::new(c).err().expect("refused");
            assert!(e.contains(what), "{e}");
        };
        bad(Config::new(1), "procs");
        bad(
            Config {
                libs: 0,
                ..Config::new(8)
            },
            "libs",
        );
        bad(
            Config {
                kills: 8,
                ..Config::new(8)
            },
            "kills",
        );
        bad(
            Config {
                topology: Topology::Random(0),
                ..Config::new(8)
            },
            "peer",
        );
    }
}
