//! `tagspace-demo faults`: a fault that heals, and the processes recover by themselves.
//!
//! `tagspace-demo faults [--procs N] [--messages M] [--transport tcp|shm] [--away SECS]
//! (--stop S | --restart K | --hosts 2 --spawn-via CMD --cut-link CMD --heal-link CMD)` starts
//! N processes that connect to each other and register one library, then:
//! 1. round 1: every process sends each other M messages (every fourth 64 KiB, rendezvous),
//!    received with receives tied to the sender; all must arrive exactly once;
//! 2. the fault: process S stopped (SIGSTOP), or the link between two emulated hosts cut
//!    (`scripts/two-hosts.sh --heal`); every pair it separates must see `PeerDown` on each
//!    side that still runs (the time from the fault is printed);
//! 3. meanwhile each running process sends one message to each peer it knows is down: it
//!    must fail with `PeerDown` (nothing is queued for later);
//! 4. SECS after the fault it heals (SIGCONT, or the link back up): every separated pair must
//!    see `PeerUp` on both sides again, with nobody reconnecting by hand — the nodes dial back
//!    the peers they lost (the time from the heal is printed);
//! 5. round 2 as round 1: exactly once; then nothing is left in any queue (nothing was
//!    delivered twice, nothing retransmitted).
//!
//! `--restart K` is the fault a process does not come back from: after round 1 process K is
//! killed (SIGKILL); every other process must see `PeerDown`, and its sends to K fail at once;
//! then a new process starts in its place — a new identity at a new address, which dials
//! every other process — and every pair must see `PeerUp`; round 2 runs among them all,
//! exactly once. The parent prints how long the full mesh took to come up, and each
//! process's peak resident memory.
//!
//! `--stick W` (shared memory, 3 or more processes) is the fault that needs a new worker:
//! process W streams 8 000-byte messages to process V = W + 1 (mod N), and is stopped
//! (SIGSTOP) at a random moment until it is caught between reserving a slot in V's
//! shared-memory receive FIFO and filling it — V then hears nobody (another process's message
//! to V is not read within 3 s; else W resumes and is stopped again, at most
//! [`STICK_TRIES`] times) — and W is killed there. V must see every peer go down, find
//! itself deaf, replace its worker (`REPLACED`) and get every live peer back by itself; a
//! receive V posted before the fault must take a message sent after it; round 2 runs among
//! the survivors, exactly once. `--keep-worker` (the control) turns the replacement off: the
//! run then fails, V cut off for good.
//!
//! The last line is the verdict, starting with `OK` (exit 0) or `FAILED` (exit 1).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Child, Command, ExitCode};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tagspace_ucx::node::{
    Backoff, LibId, Liveness, Node, NodeConfig, NodeError, OpId, PeerEvent, Redial,
};
use tagspace_ucx::ucp::{ucx_version, Config};

use super::demo::{
    check, message, now_ns, peak_rss_kib, spawn_child, stdin_lines, wait_child, ChildLines, LARGE,
    TIMEOUT,
};

const USAGE: &str = "usage: tagspace-demo faults [--procs N] [--messages M] [--transport \
tcp|shm] [--away SECS] (--stop S | --restart K | --stick W [--keep-worker] | --hosts 2 \
--spawn-via CMD --cut-link CMD --heal-link CMD)";

/// The heartbeat here: a stopped process is cut off within this (short, so that the job is;
/// long enough that a loaded 2-core machine's scheduling does not cut off a running one).
const LIVENESS: Liveness = Liveness {
    interval_ms: 500,
    timeout_ms: 5_000,
};
/// How lost peers are dialled back here: soon, and at most 2 s apart.
const BACKOFF: Backoff = Backoff {
    first_ms: 200,
    max_ms: 2_000,
    give_up_ms: 120_000,
};
/// What [`Parent::next`] hands out for a process whose output ended.
const EOF: &str = "<eof>";
/// The payload of the sends to a peer known down (step 3).
const PROBE_PAYLOAD: u64 = 0xf_ffff;
/// `--stick`: the payload of the one-message pokes ("does V still hear?"), of W's stream,
/// the stream's message size (eager: below the rendezvous threshold, so each is copied into
/// V's FIFO between the slot's reservation and its flag) and how many of its sends and of
/// V's receives are in flight at once.
const POKE_PAYLOAD: u64 = 0xf_fffe;
const STREAM_PAYLOAD: u64 = 0xf_fffd;
const STREAM_LEN: usize = 8_000;
const STREAM_WINDOW: usize = 16;
/// `--stick`: how many times W is stopped at most before the run gives up catching it
/// mid-send (one stop in about 30 catches it in a debug build; a stop that misses costs
/// about 0.1 s), and how long V may take to answer a poke while its queue still works (a
/// loaded machine's scheduling must not pass for a stuck queue).
const STICK_TRIES: usize = 300;
const POKE_WAIT: Duration = Duration::from_secs(3);

#[derive(Clone, Debug)]
struct Opts {
    procs: usize,
    messages: usize,
    transport: String,
    away_s: u64,
    stop: Option<usize>,
    /// Parent: kill -9 this process after round 1, then start a new one (a new identity) in
    /// its place.
    restart: Option<usize>,
    /// Child: the new process `--restart` starts: it dials every other process.
    join: bool,
    stick: Option<usize>,
    keep_worker: bool,
    hosts: usize,
    spawn_via: Option<String>,
    cut_link: Option<String>,
    heal_link: Option<String>,
    peer_index: Option<usize>,
    listen: Option<std::net::IpAddr>,
}

impl Opts {
    fn parse(args: &[String]) -> Result<Opts, String> {
        let mut o = Opts {
            procs: 3,
            messages: 40,
            transport: "tcp".into(),
            away_s: 8,
            stop: None,
            restart: None,
            join: false,
            stick: None,
            keep_worker: false,
            hosts: 1,
            spawn_via: None,
            cut_link: None,
            heal_link: None,
            peer_index: None,
            listen: None,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |what: &str| -> Result<String, String> {
                it.next().cloned().ok_or(format!("{what} needs a value"))
            };
            let num = |what: &str, v: String| -> Result<usize, String> {
                v.parse().map_err(|_| format!("{what} needs a number"))
            };
            match a.as_str() {
                "--procs" => o.procs = num(a, value(a)?)?,
                "--messages" => o.messages = num(a, value(a)?)?,
                "--away" => o.away_s = num(a, value(a)?)? as u64,
                "--stop" => o.stop = Some(num(a, value(a)?)?),
                "--restart" => o.restart = Some(num(a, value(a)?)?),
                "--join" => o.join = true,
                "--stick" => o.stick = Some(num(a, value(a)?)?),
                "--keep-worker" => o.keep_worker = true,
                "--hosts" => o.hosts = num(a, value(a)?)?,
                "--peer" => o.peer_index = Some(num(a, value(a)?)?),
                "--spawn-via" => o.spawn_via = Some(value(a)?),
                "--cut-link" => o.cut_link = Some(value(a)?),
                "--heal-link" => o.heal_link = Some(value(a)?),
                "--listen" => {
                    let ip = value(a)?;
                    o.listen = Some(ip.parse().map_err(|_| format!("--listen: bad IP {ip:?}"))?);
                }
                "--transport" => {
                    o.transport = value(a)?;
                    if o.transport != "tcp" && o.transport != "shm" {
                        return Err(format!("unknown transport {:?}", o.transport));
                    }
                }
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if !(2..=32).contains(&o.procs) {
            return Err("--procs must be 2..=32".into());
        }
        if o.messages == 0 || o.messages > 10_000 {
            return Err("--messages must be 1..=10000".into());
        }
        if o.peer_index.is_none() {
            let cut = o.cut_link.is_some() && o.heal_link.is_some() && o.spawn_via.is_some();
            match (o.stop.or(o.restart), o.stick, cut) {
                (Some(s), None, false)
                    if s < o.procs
                        && o.hosts == 1
                        && !(o.stop.is_some() && o.restart.is_some()) => {}
                (None, Some(w), false) if w < o.procs && o.hosts == 1 => {
                    if o.transport != "shm" || o.procs < 3 {
                        return Err("--stick needs --transport shm and 3 or more processes \
                                    (the stuck one must lose two peers)"
                            .into());
                    }
                }
                (None, None, true) if o.hosts == 2 => {}
                _ => {
                    return Err(
                        "name one fault: --stop S (a process), --restart K (a process \
                                killed and started again), --stick W (a writer caught \
                                mid-send), or --hosts 2 with --spawn-via, --cut-link and \
                                --heal-link"
                            .into(),
                    )
                }
            }
        }
        Ok(o)
    }

    fn host_of(&self, i: usize) -> usize {
        i * self.hosts / self.procs
    }

    /// The pairs `(a, b)` the fault separates: `a` must see `b` go down and come back.
    fn separated(&self) -> Vec<(usize, usize)> {
        let all = (0..self.procs).flat_map(|a| (0..self.procs).map(move |b| (a, b)));
        match self.stop.or(self.restart) {
            Some(s) => all.filter(|&(a, b)| a != b && (a == s || b == s)).collect(),
            None => all
                .filter(|&(a, b)| self.host_of(a) != self.host_of(b))
                .collect(),
        }
    }

    /// Whether process `i` runs during the fault (and, for `--stick`, after it).
    fn runs(&self, i: usize) -> bool {
        self.stop != Some(i) && self.stick != Some(i) && self.restart != Some(i)
    }

    /// `--stick`: the process whose receive queue the writer sticks.
    fn victim(&self) -> Option<usize> {
        self.stick.map(|w| (w + 1) % self.procs)
    }
}

pub fn main(args: &[String]) -> ExitCode {
    let o = match Opts::parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tagspace-demo faults: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let r = if o.peer_index.is_some() {
        peer(&o)
    } else {
        parent(&o)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A process.

/// One round's operations in a process: sends by op → peer, receives by op → (peer, seq).
#[derive(Default)]
struct Round {
    n: u64,
    sends: HashMap<OpId, usize>,
    recvs: HashMap<OpId, (usize, usize)>,
    sent: u64,
    received: u64,
    failed: Vec<String>,
}

fn peer(o: &Opts) -> Result<(), String> {
    let me = o.peer_index.unwrap_or(0);
    let mut ucx = if o.transport == "shm" {
        Config::shm()
    } else {
        Config::tcp()
    };
    ucx.rndv_thresh = Some(8192);
    let mut cfg = NodeConfig::loopback(ucx);
    cfg.liveness = Some(LIVENESS);
    cfg.redial = Redial::Dial(BACKOFF);
    cfg.replace_deaf_worker = !o.keep_worker;
    if let Some(ip) = o.listen {
        cfg.listen = Some(SocketAddr::new(ip, 0));
    }
    let mut node = Node::new(cfg).map_err(|e| e.to_string())?;
    let lib = node.register("faults").map_err(|e| e.to_string())?;
    node.listen(lib).map_err(|e| e.to_string())?;
    let addr = node.listen_addr().map_err(|e| e.to_string())?;
    println!("ADDR {addr} {:x}", node.token());
    let input = stdin_lines();
    let mut peers: Vec<(SocketAddr, u64)> = Vec::new();
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut down: HashSet<usize> = HashSet::new();
    // Peers up before the parent said who they are (a process started again, whose JOIN line
    // this one has not read yet): token → when.
    let mut unknown_up: HashMap<u64, u64> = HashMap::new();
    let mut round: Option<Round> = None;
    let mut probes: HashMap<OpId, usize> = HashMap::new();
    let mut probe_errors: Vec<String> = Vec::new();
    let mut ready = false;
    // `--stick`: a receive from any peer for pokes, always posted (on the victim it is posted
    // before the fault and must work after it), the victim's receives for the writer's
    // stream, and the writer's stream (its target and its sends in flight).
    let mut poke = node.recv(lib, POKE_PAYLOAD, 64);
    let mut sink: Option<Vec<OpId>> = None;
    let mut stream: Option<(usize, Vec<OpId>)> = None;
    // Pokes sent: the victim answers (or not); the sends themselves are not judged.
    let mut pokes: Vec<OpId> = Vec::new();
    let mut replaced = 0;
    loop {
        // A writer never sleeps: the longer it spends copying into the victim's FIFO, the
        // likelier a stop catches it there.
        if !node.progress() && stream.is_none() {
            node.wait(1).map_err(|e| e.to_string())?;
        }
        if node.is_done(poke) {
            match node.take(poke) {
                Some(Ok(_)) => println!("POKED {}", now_ns()),
                other => eprintln!("peer {me}: a poke receive ended with {other:?}"),
            }
            poke = node.recv(lib, POKE_PAYLOAD, 64);
        }
        if let Some(ops) = &mut sink {
            ops.retain(|&op| !node.is_done(op) || node.take(op).is_none());
            while ops.len() < STREAM_WINDOW {
                ops.push(node.recv(lib, STREAM_PAYLOAD, STREAM_LEN));
            }
        }
        pokes.retain(|&op| !node.is_done(op) || node.take(op).is_none());
        if let Some((j, ops)) = &mut stream {
            ops.retain(|&op| !node.is_done(op) || node.take(op).is_none());
            while ops.len() < STREAM_WINDOW && !down.contains(j) {
                let data = vec![0x5a; STREAM_LEN];
                ops.push(node.send(lib, peers[*j].1, STREAM_PAYLOAD, data, 10_000));
            }
        }
        if node.stats().workers_replaced != replaced {
            replaced = node.stats().workers_replaced;
            println!("REPLACED {replaced} {}", now_ns());
        }
        while let Some(ev) = node.peer_event(lib) {
            let (what, peer) = match ev {
                PeerEvent::Up { peer } => ("UP", peer),
                PeerEvent::Down {
                    peer,
                    cause,
                    reason,
                } => {
                    let j = index.get(&peer).copied().unwrap_or(usize::MAX);
                    let why = cause.map_or(format!("{reason:?}"), |e| e.to_string());
                    eprintln!("peer {me}: process {j} went down ({why})");
                    ("DOWN", peer)
                }
            };
            match index.get(&peer) {
                Some(&j) => {
                    if what == "UP" {
                        down.remove(&j);
                    } else {
                        down.insert(j);
                    }
                    println!("{what} {j} {}", now_ns());
                }
                None if what == "UP" => drop(unknown_up.insert(peer, now_ns())),
                None => drop(unknown_up.remove(&peer)),
            }
        }
        if !peers.is_empty() && !ready && (0..peers.len()).all(|j| j == me || up(&node, &peers, j))
        {
            ready = true;
            println!("READY");
        }
        match input.try_recv() {
            Ok(line) => {
                let mut w = line.split_whitespace();
                match w.next() {
                    Some("PEERS") => {
                        for p in w {
                            let (a, t) = p.split_once(',').ok_or("bad PEERS line")?;
                            let token = u64::from_str_radix(t, 16).map_err(|_| "bad token")?;
                            index.insert(token, peers.len());
                            peers.push((a.parse().map_err(|_| "bad address")?, token));
                        }
                        // Each pair once: the later process dials; one started in place of a
                        // killed one is the latest of all.
                        let dial = if o.join { peers.len() } else { me };
                        for (j, &(a, _)) in peers.iter().enumerate().take(dial) {
                            if j != me {
                                node.connect(a)
                                    .map_err(|e| format!("connecting to {j}: {e}"))?;
                            }
                        }
                    }
                    Some("JOIN") => {
                        // Process j was started again: a new identity at a new address.
                        let (j, p) = (w.next(), w.next());
                        let j: usize = (j.and_then(|j| j.parse().ok()))
                            .filter(|&j| j < peers.len() && j != me)
                            .ok_or("bad JOIN line")?;
                        let (a, t) = p.and_then(|p| p.split_once(',')).ok_or("bad JOIN line")?;
                        let token = u64::from_str_radix(t, 16).map_err(|_| "bad token")?;
                        index.remove(&peers[j].1);
                        index.insert(token, j);
                        peers[j] = (a.parse().map_err(|_| "bad address")?, token);
                        if let Some(t) = unknown_up.remove(&token) {
                            down.remove(&j);
                            println!("UP {j} {t}");
                        }
                    }
                    Some("ROUND") => {
                        let n: u64 = w.next().and_then(|n| n.parse().ok()).ok_or("bad ROUND")?;
                        round = Some(start_round(&mut node, lib, o, me, &peers, &down, n));
                    }
                    Some("SINK") => sink = Some(Vec::new()),
                    Some(cmd @ ("STREAM" | "POKE")) => {
                        let j: usize = (w.next().and_then(|j| j.parse().ok()))
                            .filter(|&j| j < peers.len() && j != me)
                            .ok_or(format!("bad {cmd} line"))?;
                        if cmd == "STREAM" {
                            stream = Some((j, Vec::new()));
                        } else {
                            pokes.push(node.send(lib, peers[j].1, POKE_PAYLOAD, vec![1], 5_000));
                        }
                    }
                    Some("PROBE") => {
                        for &j in &down {
                            let op = node.send(lib, peers[j].1, PROBE_PAYLOAD, vec![0; 8], 5_000);
                            probes.insert(op, j);
                        }
                        if probes.is_empty() {
                            println!("PROBE 0 0");
                        }
                    }
                    Some("EXIT") => return finish(&mut node, lib),
                    _ => return Err(format!("unknown command {line:?}")),
                }
            }
            Err(mpsc::TryRecvError::Empty) => {}
            Err(mpsc::TryRecvError::Disconnected) => return Err("parent went away".into()),
        }
        if let Some(r) = &mut round {
            if advance_round(&mut node, me, r) {
                println!(
                    "ROUND {} {} {} {}",
                    r.n,
                    r.sent,
                    r.received,
                    if r.failed.is_empty() {
                        "-".to_string()
                    } else {
                        r.failed.join(";").replace(' ', "_")
                    }
                );
                round = None;
            }
        }
        if !probes.is_empty() {
            let done: Vec<OpId> = probes
                .keys()
                .copied()
                .filter(|&op| node.is_done(op))
                .collect();
            for op in done {
                let j = probes.remove(&op).unwrap_or_default();
                match node.take(op) {
                    Some(Err(NodeError::PeerDown { .. })) => {}
                    other => probe_errors.push(format!("to {j}: {other:?}").replace(' ', "_")),
                }
                if probes.is_empty() {
                    let n = down.len();
                    println!("PROBE {n} {}", n - probe_errors.len().min(n));
                    for e in probe_errors.drain(..) {
                        eprintln!("peer {me}: a send to a peer known down: {e}");
                    }
                }
            }
        }
    }
}

fn up(node: &Node, peers: &[(SocketAddr, u64)], j: usize) -> bool {
    node.live_connections_to(peers[j].1) > 0
}

fn start_round(
    node: &mut Node,
    lib: LibId,
    o: &Opts,
    me: usize,
    peers: &[(SocketAddr, u64)],
    down: &HashSet<usize>,
    n: u64,
) -> Round {
    let mut r = Round {
        n,
        ..Round::default()
    };
    for (j, &(_, token)) in peers.iter().enumerate() {
        if j == me || down.contains(&j) {
            continue;
        }
        for s in 0..o.messages {
            let payload = (n << 20) | s as u64;
            let op = node.recv_from(lib, token, payload, LARGE);
            r.recvs.insert(op, (j, s));
            let data = message(n as usize, me, j, s);
            let op = node.send(lib, token, payload, data, 10_000);
            r.sends.insert(op, j);
        }
    }
    r
}

/// Moves round `r` along; `true` once every operation of it finished.
fn advance_round(node: &mut Node, me: usize, r: &mut Round) -> bool {
    let done: Vec<OpId> = r
        .sends
        .keys()
        .copied()
        .filter(|&op| node.is_done(op))
        .collect();
    for op in done {
        let j = r.sends.remove(&op).unwrap_or_default();
        match node.take(op) {
            Some(Ok(_)) => r.sent += 1,
            Some(Err(e)) => r.failed.push(format!("send to {j}: {e}")),
            None => {}
        }
    }
    let done: Vec<OpId> = r
        .recvs
        .keys()
        .copied()
        .filter(|&op| node.is_done(op))
        .collect();
    for op in done {
        let (j, s) = r.recvs.remove(&op).unwrap_or_default();
        match node.take(op) {
            Some(Ok(Some(data))) if check(&data, r.n as usize, j, me, s).is_some() => {
                r.received += 1
            }
            Some(Ok(_)) => r.failed.push(format!("receive from {j}: wrong message")),
            Some(Err(e)) => r.failed.push(format!("receive from {j}: {e}")),
            None => {}
        }
    }
    r.sends.is_empty() && r.recvs.is_empty()
}

/// What is left in the library's namespace (a second copy of something, or a late message),
/// then the counts; closes.
fn finish(node: &mut Node, lib: LibId) -> Result<(), String> {
    for _ in 0..50 {
        node.progress();
        std::thread::sleep(Duration::from_millis(2));
    }
    let m = node.namespace(lib).ok_or("library gone")?.matcher_any();
    let mut left = 0;
    while let Ok(Some((_, r))) = node.worker().tag_probe_take(m.tag(), m.mask(), LARGE) {
        drop(r);
        left += 1;
    }
    let s = node.stats();
    println!(
        "DONE {left} {} {} {} {}",
        s.reconnects,
        s.redials,
        s.redials_given_up,
        peak_rss_kib()
    );
    node.shutdown(1000);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The parent.

struct Parent<'a> {
    o: &'a Opts,
    /// Every child started, in order: a process started again (`--restart`) is child `procs`.
    children: Vec<Child>,
    rx: ChildLines,
    /// For children started later.
    tx: mpsc::Sender<(usize, Option<String>)>,
    /// Per child, the events seen: (kind, peer) → times (monotonic ns).
    events: Vec<BTreeMap<(String, usize), Vec<u64>>>,
    /// The children that take part in the next round.
    members: Vec<usize>,
    /// Each process's `address,token`, by process index (as in the PEERS line).
    addrs: Vec<String>,
}

impl Parent<'_> {
    fn tell(&mut self, i: usize, line: &str) -> Result<(), String> {
        let stdin = self.children[i].stdin.as_mut().ok_or("no stdin")?;
        writeln!(stdin, "{line}").map_err(|e| format!("telling process {i}: {e}"))
    }

    /// The next line within `limit` (an UP or DOWN event is recorded too).
    fn next(&mut self, limit: Instant) -> Result<(usize, Vec<String>), String> {
        let left = limit.saturating_duration_since(Instant::now());
        let (i, line) = self.rx.recv_timeout(left).map_err(|_| "timed out")?;
        // A process's output ends when it exits: after its DONE, or early (the caller says).
        let line = line.unwrap_or_else(|| EOF.to_string());
        let w: Vec<String> = line.split_whitespace().map(String::from).collect();
        match w.first().map(String::as_str) {
            Some(kind @ ("UP" | "DOWN" | "REPLACED")) if w.len() == 3 => {
                let (Ok(p), Ok(t)) = (w[1].parse(), w[2].parse()) else {
                    return Err(format!("process {i}: bad line {line:?}"));
                };
                self.events[i].entry((kind.into(), p)).or_default().push(t);
            }
            Some("FAILED:") => return Err(format!("process {i}: {line}")),
            _ => {}
        }
        Ok((i, w))
    }

    /// Waits for one line starting with `what` from each process in `from`.
    fn collect(&mut self, what: &str, from: &[usize]) -> Result<Vec<Vec<String>>, String> {
        let limit = Instant::now() + TIMEOUT;
        let mut got: Vec<Option<Vec<String>>> = vec![None; self.children.len()];
        while from.iter().any(|&i| got[i].is_none()) {
            let (i, w) = self
                .next(limit)
                .map_err(|e| format!("waiting for {what}: {e}"))?;
            match w.first().map(String::as_str) {
                Some(k) if k == what => got[i] = Some(w),
                Some(EOF) if from.contains(&i) && got[i].is_none() => {
                    return Err(format!("waiting for {what}: process {i} ended early"))
                }
                _ => {}
            }
        }
        Ok(got.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// Waits until each separated pair `(a, b)` whose `a` runs has seen `kind` of `b` after
    /// `since`; the longest wait from `since`, in ms.
    fn await_events(
        &mut self,
        kind: &str,
        since: u64,
        pairs: &[(usize, usize)],
    ) -> Result<f64, String> {
        let limit = Instant::now() + TIMEOUT;
        loop {
            let times: Vec<Option<u64>> = pairs
                .iter()
                .map(|&(a, b)| {
                    let seen = self.events[a].get(&(kind.to_string(), b))?;
                    seen.iter().copied().find(|&t| t >= since)
                })
                .collect();
            if times.iter().all(Option::is_some) {
                let worst = times.iter().flatten().map(|t| t - since).max().unwrap_or(0);
                return Ok(worst as f64 / 1e6);
            }
            let next = self.next(limit).and_then(|(i, w)| match w.first() {
                // The writer `--stick` killed, or the process `--restart` killed, ends, as it
                // should.
                Some(k) if k == EOF && self.o.stick != Some(i) && self.o.restart != Some(i) => {
                    Err(format!("process {i} ended early"))
                }
                _ => Ok(()),
            });
            if let Err(e) = next {
                let missing: Vec<String> = (pairs.iter().zip(&times))
                    .filter(|(_, t)| t.is_none())
                    .map(|(&(a, b), _)| format!("{a} of {b}"))
                    .collect();
                return Err(format!("waiting for {kind} ({}): {e}", missing.join(", ")));
            }
        }
    }

    /// Whether process `i` prints a line starting with `what` within `wait` (other lines are
    /// recorded as ever).
    fn await_line(&mut self, i: usize, what: &str, wait: Duration) -> Result<bool, String> {
        let limit = Instant::now() + wait;
        loop {
            match self.next(limit) {
                Ok((j, w)) if j == i && w.first().is_some_and(|k| k == what) => return Ok(true),
                Ok((j, w)) if j == i && w.first().is_some_and(|k| k == EOF) => {
                    return Err(format!("process {i} ended early"))
                }
                Ok(_) => {}
                Err(_) if Instant::now() >= limit => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }

    /// A round: every member sends every other `messages`; all must arrive exactly once.
    fn round(&mut self, n: u64) -> Result<(), String> {
        let all = self.members.clone();
        for &i in &all {
            self.tell(i, &format!("ROUND {n}"))?;
        }
        let want = (self.o.messages * (all.len() - 1)) as u64;
        for (i, w) in self.collect("ROUND", &all)?.iter().enumerate() {
            if !all.contains(&i) {
                continue;
            }
            let num = |k: usize| w.get(k).and_then(|v| v.parse::<u64>().ok());
            if (num(1), num(2), num(3)) != (Some(n), Some(want), Some(want)) {
                return Err(format!(
                    "round {n}: process {i} sent/received {:?}/{:?} of {want}: {}",
                    num(2),
                    num(3),
                    w.get(4).map_or("", String::as_str)
                ));
            }
        }
        println!(
            "round {n}: {} messages, each delivered exactly once",
            want * all.len() as u64
        );
        Ok(())
    }

    fn shell(&self, what: &str, cmd: &str) -> Result<(), String> {
        let st = Command::new("sh")
            .args(["-c", cmd])
            .status()
            .map_err(|e| format!("{what}: {e}"))?;
        if st.success() {
            Ok(())
        } else {
            Err(format!("{what} failed: {cmd}"))
        }
    }

    fn signal(&self, i: usize, sig: &str) -> Result<(), String> {
        self.shell(
            &format!("kill {sig}"),
            &format!("kill {sig} {}", self.children[i].id()),
        )
    }

    fn run(&mut self) -> Result<String, String> {
        let o = self.o;
        let all: Vec<usize> = (0..o.procs).collect();
        let addrs = self.collect("ADDR", &all)?;
        self.addrs = addrs.iter().map(|w| format!("{},{}", w[1], w[2])).collect();
        let mesh_at = Instant::now();
        for i in all.clone() {
            self.tell(i, &format!("PEERS {}", self.addrs.join(" ")))?;
        }
        self.collect("READY", &all)?;
        println!(
            "full mesh: {} processes, {} connections up in {} ms",
            o.procs,
            o.procs * (o.procs - 1) / 2,
            mesh_at.elapsed().as_millis()
        );
        let round_at = Instant::now();
        self.round(1)?;
        println!("round 1 took {} ms", round_at.elapsed().as_millis());
        if let Some(w) = o.stick {
            return self.stick(w);
        }
        if let Some(k) = o.restart {
            return self.restart(k);
        }

        let pairs = o.separated();
        let watching: Vec<(usize, usize)> =
            pairs.iter().copied().filter(|&(a, _)| o.runs(a)).collect();
        let fault_at = now_ns();
        let fault = match (o.stop, &o.cut_link) {
            (Some(s), _) => {
                self.signal(s, "-STOP")?;
                format!("process {s} stopped (SIGSTOP)")
            }
            (None, Some(cmd)) => {
                self.shell("--cut-link", cmd)?;
                "link between the hosts cut".to_string()
            }
            (None, None) => unreachable!("parse names a fault"),
        };
        println!("{fault}");
        let down_ms = self.await_events("DOWN", fault_at, &watching)?;
        println!("every separated pair saw PeerDown within {down_ms:.0} ms of the fault");
        let probed = self.probe(watching.len())?;
        let heal_at_ns = fault_at + o.away_s * 1_000_000_000;
        std::thread::sleep(Duration::from_nanos(heal_at_ns.saturating_sub(now_ns())));
        let healed_at = now_ns();
        match (o.stop, &o.heal_link) {
            (Some(s), _) => self.signal(s, "-CONT")?,
            (None, Some(cmd)) => self.shell("--heal-link", cmd)?,
            (None, None) => unreachable!("parse names a fault"),
        }
        println!("healed after {} s", o.away_s);
        let up_ms = self.await_events("UP", healed_at, &pairs)?;
        println!("every separated pair saw PeerUp again within {up_ms:.0} ms of the heal");
        self.round(2)?;
        let (reconnects, redials) = self.done()?;
        Ok(format!(
            "OK: {fault} for {} s: PeerDown within {down_ms:.0} ms, PeerUp again within {up_ms:.0} \
             ms of the heal ({reconnects} reconnects, {redials} dials), {probed} sends during the \
             fault failed with PeerDown, rounds before and after exactly once, 0 duplicates",
            o.away_s
        ))
    }
}

impl Parent<'_> {
    /// During a fault: every running process sends once to each peer it knows is down; each
    /// send must fail at once with `PeerDown`. Returns how many were sent.
    fn probe(&mut self, separated: usize) -> Result<u64, String> {
        let running: Vec<usize> = (0..self.o.procs).filter(|&i| self.o.runs(i)).collect();
        for &i in &running {
            self.tell(i, "PROBE")?;
        }
        let (mut probed, mut peer_down) = (0, 0);
        for w in self.collect("PROBE", &running)? {
            let num = |k: usize| w.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            (probed, peer_down) = (probed + num(1), peer_down + num(2));
        }
        if probed != peer_down || probed < separated as u64 {
            return Err(format!(
                "sends to peers known down: {peer_down} of {probed} failed with PeerDown \
                 ({separated} pairs separated)"
            ));
        }
        println!("{probed} sends to peers known down failed at once with PeerDown");
        Ok(probed)
    }

    /// Tells every member to finish: nothing may be left over in any (a duplicate or a late
    /// message); prints their peak resident memory. Returns (reconnects, dials) summed.
    fn done(&mut self) -> Result<(u64, u64), String> {
        let members = self.members.clone();
        for &i in &members {
            self.tell(i, "EXIT")?;
        }
        let (mut reconnects, mut redials, mut rss) = (0, 0, Vec::new());
        for (i, w) in self.collect("DONE", &members)?.iter().enumerate() {
            if !members.contains(&i) {
                continue;
            }
            let num = |k: usize| w.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            if num(1) != 0 {
                return Err(format!(
                    "process {i}: {} messages left over (duplicates)",
                    num(1)
                ));
            }
            reconnects += num(2);
            redials += num(3);
            rss.push(num(5));
        }
        let (min, max) = (rss.iter().min(), rss.iter().max());
        if let (Some(min), Some(max)) = (min, max) {
            let mean = rss.iter().sum::<u64>() / rss.len() as u64;
            println!(
                "peak resident memory per process: {:.1} MiB min, {:.1} mean, {:.1} max",
                *min as f64 / 1024.0,
                mean as f64 / 1024.0,
                *max as f64 / 1024.0
            );
        }
        Ok((reconnects, redials))
    }

    /// `--restart K`: kills K (SIGKILL) after round 1, then starts a new process in its place
    /// — a new identity, at a new address, dialling every other process — and checks that
    /// every other process saw the old one go down and the new one come up, and that round 2
    /// among them all is exactly once.
    fn restart(&mut self, k: usize) -> Result<String, String> {
        let o = self.o;
        let survivors: Vec<usize> = (0..o.procs).filter(|&i| i != k).collect();
        let killed_at = now_ns();
        self.signal(k, "-KILL")?;
        self.members.retain(|&i| i != k);
        println!("process {k} killed (SIGKILL)");
        let watching: Vec<(usize, usize)> = survivors.iter().map(|&a| (a, k)).collect();
        let down_ms = self.await_events("DOWN", killed_at, &watching)?;
        println!(
            "every other process saw PeerDown of process {k} within {down_ms:.0} ms of the kill"
        );
        let probed = self.probe(watching.len())?;
        let n = self.children.len();
        let mut args = child_args(o, k);
        args.push("--join".into());
        let started_at = now_ns();
        let child = spawn_child(n, o.spawn_via.as_deref(), o.host_of(k), &args, &self.tx)?;
        self.children.push(child);
        let addr = self.collect("ADDR", &[n])?;
        let entry = format!("{},{}", addr[n][1], addr[n][2]);
        // The others learn who it is before it dials them.
        for &i in &survivors {
            self.tell(i, &format!("JOIN {k} {entry}"))?;
        }
        self.addrs[k] = entry;
        self.tell(n, &format!("PEERS {}", self.addrs.join(" ")))?;
        // Its READY first: it may come before the last of the others' UP lines, which are
        // recorded meanwhile (a READY that came while waiting for events would be lost).
        self.collect("READY", &[n])?;
        let pairs: Vec<(usize, usize)> = survivors.iter().flat_map(|&a| [(a, k), (n, a)]).collect();
        let up_ms = self.await_events("UP", started_at, &pairs)?;
        self.members.push(n);
        println!(
            "process {k} started again (a new identity): connected to all {} others within \
             {up_ms:.0} ms of its start",
            survivors.len()
        );
        self.round(2)?;
        self.done()?;
        Ok(format!(
            "OK: process {k} killed (-9): PeerDown within {down_ms:.0} ms; started again as a new \
             identity, connected to all {} others within {up_ms:.0} ms; {probed} sends during the \
             gap failed with PeerDown; rounds before and after exactly once, 0 duplicates",
            survivors.len()
        ))
    }

    /// `--stick W`: catches W mid-send into V's FIFO, kills it there, and checks that V
    /// replaces its worker and gets its peers back (see the module's doc).
    fn stick(&mut self, w: usize) -> Result<String, String> {
        let o = self.o;
        let v = o.victim().ok_or("no victim")?;
        let others: Vec<usize> = (0..o.procs).filter(|&i| i != w && i != v).collect();
        let l = others[0];
        self.tell(v, "SINK")?;
        self.tell(w, &format!("STREAM {v}"))?;
        std::thread::sleep(Duration::from_millis(300));
        let mut tries = 0;
        let mut stopped_at;
        loop {
            if tries == STICK_TRIES {
                return Err(format!(
                    "process {w} was never caught mid-send in {STICK_TRIES} stops"
                ));
            }
            tries += 1;
            // A moment that is not in step with anything.
            std::thread::sleep(Duration::from_micros(1_000 + now_ns() % 29_000));
            stopped_at = now_ns();
            self.signal(w, "-STOP")?;
            std::thread::sleep(Duration::from_millis(100));
            self.tell(l, &format!("POKE {v}"))?;
            if !self.await_line(v, "POKED", POKE_WAIT)? {
                break;
            }
            self.signal(w, "-CONT")?;
        }
        println!(
            "process {v}'s shared-memory receive queue stuck: process {w} stopped mid-send \
             (stop {tries}), a poke from process {l} not read in {} ms; process {w} killed there",
            POKE_WAIT.as_millis()
        );
        self.signal(w, "-KILL")?;
        self.members.retain(|&i| i != w);
        // Every live peer of V's goes down on both sides, V replaces its worker, and they
        // come back.
        let pairs: Vec<(usize, usize)> = others.iter().flat_map(|&b| [(v, b), (b, v)]).collect();
        let down_ms = self.await_events("DOWN", stopped_at, &pairs)?;
        println!(
            "process {v} and its live peers saw each other go down within {down_ms:.0} ms of \
             the stop"
        );
        let limit = Instant::now() + TIMEOUT;
        while !(self.events[v]).contains_key(&("REPLACED".to_string(), 1)) {
            self.next(limit)
                .map_err(|e| format!("waiting for process {v} to replace its worker: {e}"))?;
        }
        let replaced_at = self.events[v][&("REPLACED".to_string(), 1)][0];
        let replaced_ms = (replaced_at.saturating_sub(stopped_at)) as f64 / 1e6;
        println!("process {v} found itself deaf and replaced its worker {replaced_ms:.0} ms after the stop");
        let up_ms = self.await_events("UP", replaced_at, &pairs)?;
        println!("every live peer of process {v}'s came back within {up_ms:.0} ms of it");
        self.tell(l, &format!("POKE {v}"))?;
        if !self.await_line(v, "POKED", TIMEOUT)? {
            return Err(format!(
                "process {v}: the receive posted before the fault took nothing after it"
            ));
        }
        println!("a receive process {v} posted before the fault took a message sent after it");
        self.round(2)?;
        self.done()?;
        Ok(format!(
            "OK: process {v}'s receive queue stuck by process {w} caught mid-send (stop \
             {tries}) and killed: down within {down_ms:.0} ms of the stop, worker replaced \
             {replaced_ms:.0} ms after it, every live peer back within {up_ms:.0} ms of that, \
             a receive posted before the fault worked after it, round 2 exactly once, 0 \
             duplicates"
        ))
    }
}

fn parent(o: &Opts) -> Result<(), String> {
    let (major, minor, release) = ucx_version();
    println!(
        "tagspace faults: {} processes, {} messages per peer per round, UCX \
         {major}.{minor}.{release} loaded, transport {}",
        o.procs, o.messages, o.transport
    );
    let (tx, rx) = mpsc::channel();
    let mut p = Parent {
        o,
        children: Vec::new(),
        rx,
        tx,
        events: vec![BTreeMap::new(); o.procs + 1],
        members: (0..o.procs).collect(),
        addrs: Vec::new(),
    };
    for i in 0..o.procs {
        let args = child_args(o, i);
        match spawn_child(i, o.spawn_via.as_deref(), o.host_of(i), &args, &p.tx) {
            Ok(c) => p.children.push(c),
            Err(e) => {
                for c in &mut p.children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(e);
            }
        }
    }
    let result = p.run();
    if let Some(s) = o.stop {
        let _ = p.signal(s, "-CONT"); // never leave a stopped process behind
    }
    let mut exits = Vec::new();
    for (i, c) in p.children.iter_mut().enumerate() {
        if result.is_err() {
            let _ = c.kill();
        }
        let why = wait_child(c, Duration::from_secs(10));
        // The writer `--stick` killed, and the process `--restart` killed, do not exit cleanly.
        let killed = o.stick == Some(i) || o.restart == Some(i);
        if let (Err(why), false) = (why, killed) {
            exits.push(format!("process {i}: {why}"));
        }
    }
    let verdict = result?;
    if !exits.is_empty() {
        return Err(format!("not a clean exit: {}", exits.join("; ")));
    }
    println!("{verdict}");
    Ok(())
}

/// Child `i`'s arguments.
fn child_args(o: &Opts, i: usize) -> Vec<String> {
    let mut args = vec!["faults".to_string(), "--peer".into(), i.to_string()];
    for (k, v) in [
        ("--procs", o.procs.to_string()),
        ("--messages", o.messages.to_string()),
        ("--transport", o.transport.clone()),
        ("--hosts", o.hosts.to_string()),
    ] {
        args.extend([k.to_string(), v]);
    }
    if o.keep_worker {
        args.push("--keep-worker".into());
    }
    args
}
