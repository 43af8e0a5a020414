//! The demo itself (see `main.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tagspace_core::wellknown::control_am_id;
use tagspace_core::wire::CloseReason;
use tagspace_ucx::node::{LibId, Liveness, Node, NodeConfig, OpId, PeerEvent};
use tagspace_ucx::ucp::{ucx_version, Config, Request, Started, UCX_API_BUILT};

/// The well-known dask, cuml and blazingsql, and a library with a dynamic id.
const LIBS: [&str; 4] = ["dask", "cuml", "blazingsql", "shuffle-engine"];
const NL: usize = LIBS.len();
const LEGACY_TAG: u64 = 0x42; // namespace field 0: outside tagspace
const STRAY_ID: u64 = 200;
const STRAYS_PER_PEER: usize = 5;
const LEGACY_PER_PEER: usize = 20;
pub(crate) const LARGE: usize = 64 * 1024;
const SMALL: usize = 64;
const HEADER: usize = 24;
const WINDOW: usize = 32;
pub(crate) const TIMEOUT: Duration = Duration::from_secs(60);
/// The heartbeat's timeout here: well inside TIMEOUT, so that a process whose shared-memory
/// receive queue a kill left stuck is cut off (and its peers go on) before the demo gives up.
const LIVENESS_TIMEOUT_MS: u64 = 10_000;

pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match Opts::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tagspace-demo: {e}\n{}", USAGE);
            return ExitCode::from(2);
        }
    };
    let r = if opts.peer_index.is_some() {
        peer(&opts)
    } else {
        parent(&opts)
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tagspace-demo: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: tagspace-demo [--procs N] [--messages M] [--transport tcp|shm] \
[--simultaneous] [--kill K] [--stop S] [--hostile H] [--hosts N --spawn-via CMD [--cut-link CMD]]";

#[derive(Clone, Debug)]
struct Opts {
    procs: usize,
    messages: usize,
    transport: String,
    simultaneous: bool,
    kill: Option<usize>,
    /// Parent: SIGSTOP this process halfway through its sends, for good (a process that no
    /// longer calls progress: only the heartbeat can tell).
    stop: Option<usize>,
    hostile: Option<usize>,
    peer_index: Option<usize>,
    /// Emulated hosts: process i runs on host `i * hosts / procs` (see `scripts/two-hosts.sh`).
    hosts: usize,
    /// Parent: each child is started as `sh -c 'CMD "$@"' - HOST EXE ARGS…`, so that CMD can
    /// put it in its host's namespaces and append `--listen IP`.
    spawn_via: Option<String>,
    /// Parent: a shell command that cuts the link between the hosts, run when process 0 is
    /// halfway through its sends. Children get `--expect-cut`.
    cut_link: Option<String>,
    expect_cut: bool,
    /// Child: the address to listen on (default 127.0.0.1).
    listen: Option<std::net::IpAddr>,
}

impl Opts {
    fn parse(args: &[String]) -> Result<Opts, String> {
        let mut o = Opts {
            procs: 4,
            messages: 100,
            transport: "tcp".into(),
            simultaneous: false,
            kill: None,
            stop: None,
            hostile: None,
            peer_index: None,
            hosts: 1,
            spawn_via: None,
            cut_link: None,
            expect_cut: false,
            listen: None,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut num = |what: &str| -> Result<usize, String> {
                it.next()
                    .ok_or(format!("{what} needs a value"))?
                    .parse()
                    .map_err(|_| format!("{what} needs a number"))
            };
            match a.as_str() {
                "--procs" => o.procs = num("--procs")?,
                "--messages" => o.messages = num("--messages")?,
                "--kill" => o.kill = Some(num("--kill")?),
                "--stop" => o.stop = Some(num("--stop")?),
                "--hostile" => o.hostile = Some(num("--hostile")?),
                "--peer" => o.peer_index = Some(num("--peer")?),
                "--simultaneous" => o.simultaneous = true,
                "--hosts" => o.hosts = num("--hosts")?,
                "--spawn-via" => {
                    o.spawn_via = Some(it.next().ok_or("--spawn-via needs a command")?.clone())
                }
                "--cut-link" => {
                    o.cut_link = Some(it.next().ok_or("--cut-link needs a command")?.clone())
                }
                "--expect-cut" => o.expect_cut = true,
                "--listen" => {
                    let ip = it.next().ok_or("--listen needs an IP address")?;
                    o.listen = Some(
                        ip.parse()
                            .map_err(|_| format!("--listen: bad IP address {ip:?}"))?,
                    );
                }
                "--transport" => {
                    o.transport = it.next().ok_or("--transport needs tcp or shm")?.clone();
                    if o.transport != "tcp" && o.transport != "shm" {
                        return Err(format!("unknown transport {:?}", o.transport));
                    }
                }
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if !(2..=64).contains(&o.procs) {
            return Err("--procs must be 2..=64".into());
        }
        if o.messages == 0 || o.messages > 100_000 {
            return Err("--messages must be 1..=100000".into());
        }
        if o.hosts == 0 || o.hosts > o.procs {
            return Err("--hosts must be 1..=procs".into());
        }
        if o.hosts > 1 && o.spawn_via.is_none() && o.peer_index.is_none() {
            return Err("--hosts needs --spawn-via (see scripts/two-hosts.sh)".into());
        }
        let disturbed = o.kill.is_some() || o.stop.is_some() || o.hostile.is_some();
        if o.cut_link.is_some() && (o.hosts < 2 || disturbed) {
            return Err(
                "--cut-link needs --hosts 2 or more, without --kill, --stop or --hostile".into(),
            );
        }
        if o.stop.is_some() && (o.kill.is_some() || o.hostile.is_some()) {
            return Err("--stop goes without --kill and --hostile".into());
        }
        for (k, v) in [
            ("--kill", o.kill),
            ("--stop", o.stop),
            ("--hostile", o.hostile),
        ] {
            if v.is_some_and(|v| v >= o.procs) {
                return Err(format!("{k} names no process"));
            }
        }
        Ok(o)
    }

    fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            "--procs".into(),
            self.procs.to_string(),
            "--messages".into(),
            self.messages.to_string(),
            "--transport".into(),
            self.transport.clone(),
        ];
        if self.simultaneous {
            v.push("--simultaneous".into());
        }
        if let Some(h) = self.hostile {
            v.extend(["--hostile".into(), h.to_string()]);
        }
        if let Some(s) = self.stop {
            // The process to be stopped must know it (it stops itself at MID, see `peer`).
            v.extend(["--stop".into(), s.to_string()]);
        }
        v.extend(["--hosts".into(), self.hosts.to_string()]);
        if self.cut_link.is_some() {
            v.push("--expect-cut".into());
        }
        v
    }

    /// The emulated host process `i` runs on.
    fn host_of(&self, i: usize) -> usize {
        i * self.hosts / self.procs
    }

    /// Whether `a` and `b` can still talk at the end (not cut apart by `--cut-link`).
    fn linked(&self, a: usize, b: usize) -> bool {
        !(self.cut_link.is_some() || self.expect_cut) || self.host_of(a) == self.host_of(b)
    }

    fn ucx(&self) -> Config {
        let mut c = if self.transport == "shm" {
            Config::shm()
        } else {
            Config::tcp()
        };
        c.rndv_thresh = Some(8192);
        c
    }
}

pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec. CLOCK_MONOTONIC is shared by every process on the host.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A data message: lib, src, dst, seq, send time, then a pattern the receiver checks.
pub(crate) fn message(lib: usize, src: usize, dst: usize, seq: usize) -> Vec<u8> {
    let len = if seq % 4 == 3 { LARGE } else { SMALL };
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&(lib as u32).to_le_bytes());
    v.extend_from_slice(&(src as u32).to_le_bytes());
    v.extend_from_slice(&(dst as u32).to_le_bytes());
    v.extend_from_slice(&(seq as u32).to_le_bytes());
    v.extend_from_slice(&now_ns().to_le_bytes());
    let fill = (seq as u8) ^ (src as u8) ^ (lib as u8);
    v.resize(len, fill);
    v
}

/// Checks a received message; `Some(send time)` if it is exactly the expected one.
pub(crate) fn check(data: &[u8], lib: usize, src: usize, dst: usize, seq: usize) -> Option<u64> {
    if data.len() < HEADER {
        return None;
    }
    let w = |i: usize| u32::from_le_bytes(data[i * 4..i * 4 + 4].try_into().unwrap()) as usize;
    let len = if seq % 4 == 3 { LARGE } else { SMALL };
    let fill = (seq as u8) ^ (src as u8) ^ (lib as u8);
    let ok = (w(0), w(1), w(2), w(3)) == (lib, src, dst, seq)
        && data.len() == len
        && data[HEADER..].iter().all(|&b| b == fill);
    ok.then(|| u64::from_le_bytes(data[16..24].try_into().unwrap()))
}

/// The tag payload of message `seq` from process `src`: the sender above bit 20, the sequence
/// below (`--messages` is at most 100 000 < 2^20).
pub(crate) fn payload_for(src: usize, seq: usize) -> u64 {
    ((src as u64) << 20) | seq as u64
}

/// The sender a payload made by [`payload_for`] names.
pub(crate) fn sender_of_payload(payload: u64) -> usize {
    (payload >> 20) as usize
}

// ---------------------------------------------------------------------------------------------
// The peer process.

struct Peer {
    index: usize,
    token: u64,
    addr: SocketAddr,
}

#[derive(Default)]
struct LibStats {
    sent: u64,
    received: u64,
    misdelivered: u64,
    failed: u64,
    leftover: u64,
    lat_small: Vec<u64>,
    lat_large: Vec<u64>,
}

pub(crate) fn stdin_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) => {
                    if tx.send(l).is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    });
    rx
}

fn peer(o: &Opts) -> Result<(), String> {
    let me = o.peer_index.unwrap_or(0);
    let input = stdin_lines();
    let mut cfg = NodeConfig::loopback(o.ucx());
    cfg.liveness = Some(Liveness {
        timeout_ms: LIVENESS_TIMEOUT_MS,
        ..Liveness::default()
    });
    if let Some(ip) = o.listen {
        cfg.listen = Some(SocketAddr::new(ip, 0));
    }
    let mut node = Node::new(cfg).map_err(|e| e.to_string())?;
    // Each process registers the three libraries in a different order.
    let mut order: Vec<usize> = (0..LIBS.len()).collect();
    order.rotate_left(me % LIBS.len());
    if me % 2 == 1 {
        order.reverse();
    }
    let mut libs = [LibId(0); NL];
    // Scratch namespaces first, a different number per process, so that the dynamic ids of
    // the same name differ between processes (only the directory makes them meet, P1).
    let mut scratch = Vec::new();
    for j in 0..me % 3 {
        scratch.push(
            node.register(&format!("scratch-{me}-{j}"))
                .map_err(|e| e.to_string())?,
        );
    }
    for &k in &order {
        libs[k] = node.register(LIBS[k]).map_err(|e| e.to_string())?;
    }
    node.listen(libs[0]).map_err(|e| e.to_string())?;
    let addr = node.listen_addr().map_err(|e| e.to_string())?;
    let ids: Vec<String> = (0..NL)
        .map(|k| format!("{}={}", LIBS[k], node.namespace(libs[k]).unwrap().id()))
        .collect();
    println!("ADDR {addr} {:x} {}", node.token(), ids.join(","));
    let line = recv_line(&input, &mut node, "PEERS")?;
    let mut peers = Vec::new();
    for (i, p) in line.split_whitespace().skip(1).enumerate() {
        let (a, t) = p.split_once(',').ok_or("bad PEERS line")?;
        peers.push(Peer {
            index: i,
            addr: a.parse().map_err(|_| "bad address")?,
            token: u64::from_str_radix(t, 16).map_err(|_| "bad token")?,
        });
    }
    for p in &peers {
        if p.index != me && (p.index < me || o.simultaneous) {
            node.connect(p.addr).map_err(|e| e.to_string())?;
        }
    }
    let others: Vec<&Peer> = peers.iter().filter(|p| p.index != me).collect();
    let start = Instant::now();
    let by_token: HashMap<u64, usize> = others.iter().map(|p| (p.token, p.index)).collect();
    let mut dead: HashSet<usize> = HashSet::new();
    // Wait for a connection to every peer (a peer that cut us off already counts as done).
    while others
        .iter()
        .any(|p| node.live_connections_to(p.token) == 0 && !dead.contains(&p.index))
    {
        if start.elapsed() > TIMEOUT {
            let missing: Vec<String> = others
                .iter()
                .filter(|p| node.live_connections_to(p.token) == 0 && !dead.contains(&p.index))
                .map(|p| p.index.to_string())
                .collect();
            return Err(format!(
                "connections not established in time (to processes {})",
                missing.join(", ")
            ));
        }
        node.wait(1).map_err(|e| e.to_string())?;
        while let Some(ev) = node.peer_event(libs[0]) {
            if let PeerEvent::Down { peer, .. } = ev {
                if let Some(&i) = by_token.get(&peer) {
                    dead.insert(i);
                }
            }
        }
    }

    if o.hostile == Some(me) {
        // Malformed control frames (a HELLO with a truncated body) to everyone, then nothing.
        // Sent as any process on the network could: an Active Message on the control
        // namespace's first AM id, on the shared endpoint.
        let control_am = control_am_id(node.layout());
        let mut pending: Vec<Request> = Vec::new();
        for p in &others {
            let garbage = b"TS\x01\x01\x00\x09\x00\x10\x40garbage".to_vec();
            if let Some(Ok(Started::Pending(r))) = node
                .endpoint_to(p.token)
                .map(|ep| ep.am_send(control_am, garbage))
            {
                pending.push(r);
            }
        }
        println!("DONE hostile");
        wait_exit(&input, &mut node);
        drop(pending);
        return Ok(());
    }

    // The sends: per peer and library an inbox "begin", then the data; interleaved so that
    // every library is busy on every endpoint at once.
    let mut queue: Vec<(usize, usize, Option<usize>)> = Vec::new(); // (lib, dst, seq)
    for p in &others {
        if Some(p.index) == o.hostile {
            continue;
        }
        for k in 0..NL {
            queue.push((k, p.index, None));
        }
    }
    for seq in 0..o.messages {
        for p in &others {
            if Some(p.index) == o.hostile {
                continue;
            }
            for k in 0..NL {
                queue.push((k, p.index, Some(seq)));
            }
        }
    }
    queue.reverse();
    let total_sends = queue.len();
    let token_of = |i: usize| peers[i].token;
    let mut stats: Vec<LibStats> = (0..NL).map(|_| LibStats::default()).collect();
    let mut sends: HashMap<OpId, (usize, usize)> = HashMap::new();
    let mut recvs: HashMap<OpId, (usize, usize, usize)> = HashMap::new();
    let mut sent_to: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    let mut recv_from: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    let mut begun: HashSet<(usize, usize)> = HashSet::new();
    let mut mid_said = false;
    let mut issued = 0;

    // Raw traffic outside tagspace on the shared endpoints: the legacy library and strays.
    let mut raw_reqs: Vec<Request> = Vec::new();
    for p in &others {
        let Some(ep) = node.endpoint_to(p.token) else {
            continue;
        };
        for i in 0..LEGACY_PER_PEER {
            let data = format!("legacy {me}>{} #{i}", p.index).into_bytes();
            if let Ok(Started::Pending(r)) = ep.tag_send(LEGACY_TAG, data) {
                raw_reqs.push(r);
            }
        }
        let f = node.layout().namespace_field();
        for i in 0..STRAYS_PER_PEER {
            if let Ok(Started::Pending(r)) =
                ep.tag_send((STRAY_ID << f.shift()) | i as u64, b"nobody".to_vec())
            {
                raw_reqs.push(r);
            }
        }
    }
    let mut legacy_got: Vec<String> = Vec::new();
    let mut legacy_mis = 0u64;
    let mut legacy_peeks = 0u64;
    let mut legacy_pending: Vec<(Request, u64)> = Vec::new();

    let expect_from = |dead: &HashSet<usize>| -> Vec<usize> {
        others
            .iter()
            .map(|p| p.index)
            .filter(|i| !dead.contains(i) && Some(*i) != o.hostile)
            .collect()
    };
    loop {
        if start.elapsed() > TIMEOUT {
            let live = expect_from(&dead);
            let unbegun = live
                .iter()
                .flat_map(|&i| (0..NL).map(move |k| (i, k)))
                .filter(|ik| !begun.contains(ik))
                .count();
            // Per peer, to tell a stalled pair from a stalled process.
            let mut per_peer: BTreeMap<usize, (usize, usize, usize)> = BTreeMap::new();
            for &(_, dst) in sends.values() {
                per_peer.entry(dst).or_default().0 += 1;
            }
            for &(_, dst, _) in &queue {
                per_peer.entry(dst).or_default().1 += 1;
            }
            for &(_, src, _) in recvs.values() {
                per_peer.entry(src).or_default().2 += 1;
            }
            let detail: Vec<String> = per_peer
                .iter()
                .map(|(p, (f, q, r))| {
                    let state = if dead.contains(p) { " (down)" } else { "" };
                    format!("{p}{state}: {f} in flight + {q} queued to it, {r} receives from it")
                })
                .collect();
            return Err(format!(
                "timed out: {} sends and {} receives unfinished, {} begin messages missing, \
                 {}/{} legacy messages, {}/{} strays drained; per peer: {}",
                sends.len() + queue.len(),
                recvs.len(),
                unbegun,
                legacy_got.len(),
                LEGACY_PER_PEER * live.len(),
                node.stray_for(STRAY_ID as u16),
                STRAYS_PER_PEER * live.len(),
                detail.join("; ")
            ));
        }
        if !node.progress() {
            node.wait(1).map_err(|e| e.to_string())?;
        }
        while let Some(ev) = node.peer_event(libs[0]) {
            if let PeerEvent::Down {
                peer,
                cause,
                reason,
            } = ev
            {
                if let Some(&i) = by_token.get(&peer) {
                    eprintln!(
                        "peer {me}: process {i} went down ({})",
                        match (cause, reason) {
                            (Some(e), _) => e.to_string(),
                            (None, Some(r)) => format!("closed: {r:?}"),
                            (None, None) => "closed".to_string(),
                        }
                    );
                    if reason == Some(CloseReason::Unresponsive) {
                        // No PONG in time, on one side or the other (see `Liveness`).
                        println!("SILENT {i}");
                    }
                    // Its receives (posted with `recv_from`) fail with PeerDown by themselves.
                    dead.insert(i);
                    println!("DOWN {i} {}", now_ns());
                }
            }
        }
        // Sends, WINDOW at a time.
        while sends.len() < WINDOW {
            let Some((k, dst, seq)) = queue.pop() else {
                break;
            };
            if dead.contains(&dst) {
                continue;
            }
            issued += 1;
            let op = match seq {
                None => node.send_inbox(
                    libs[k],
                    token_of(dst),
                    format!("begin {me} {}", o.messages).into_bytes(),
                    10_000,
                ),
                Some(s) => node.send(
                    libs[k],
                    token_of(dst),
                    payload_for(me, s),
                    message(k, me, dst, s),
                    10_000,
                ),
            };
            sends.insert(op, (k, dst));
        }
        if !mid_said && issued * 2 >= total_sends {
            mid_said = true;
            println!("MID");
            if o.stop == Some(me) {
                // The parent stops this process now. Under load its SIGSTOP may come late, and
                // a process that went on and finished its sends meanwhile would leave its peers
                // nothing to wait for: they would end before the heartbeat could cut it off.
                // So it sends nothing more and stops answering at once, as stopped.
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
        let done: Vec<OpId> = sends
            .keys()
            .copied()
            .filter(|op| node.is_done(*op))
            .collect();
        for op in done {
            let (k, dst) = sends.remove(&op).unwrap();
            match node.take(op) {
                Some(Ok(_)) => {
                    stats[k].sent += 1;
                    *sent_to.entry((dst, k)).or_default() += 1;
                }
                Some(Err(e)) => {
                    stats[k].failed += 1;
                    if !dead.contains(&dst) {
                        eprintln!("peer {me}: send to {dst} failed: {e}");
                    }
                }
                None => {}
            }
        }
        // Inbox: a begin message opens the exact receives for that sender.
        for k in 0..NL {
            while let Ok(Some(op)) = node.probe_inbox(libs[k], 1024) {
                let r = wait_op(&mut node, op)?;
                let text = String::from_utf8_lossy(&r).to_string();
                let mut w = text.split_whitespace();
                let (Some("begin"), Some(src), Some(n)) = (w.next(), w.next(), w.next()) else {
                    stats[k].misdelivered += 1;
                    continue;
                };
                let (src, n): (usize, usize) = match (src.parse(), n.parse()) {
                    (Ok(s), Ok(n)) if n <= 100_000 && s < peers.len() => (s, n),
                    _ => {
                        stats[k].misdelivered += 1;
                        continue;
                    }
                };
                if !begun.insert((src, k)) {
                    stats[k].misdelivered += 1; // a second begin: duplicated
                    continue;
                }
                for s in 0..n {
                    let op = node.recv_from(libs[k], token_of(src), payload_for(src, s), LARGE);
                    recvs.insert(op, (k, src, s));
                }
            }
        }
        let done: Vec<OpId> = recvs
            .keys()
            .copied()
            .filter(|op| node.is_done(*op))
            .collect();
        for op in done {
            let (k, src, s) = recvs.remove(&op).unwrap();
            match node.take(op) {
                Some(Ok(Some(data))) => {
                    let t = now_ns();
                    match check(&data, k, src, me, s) {
                        Some(t0) => {
                            stats[k].received += 1;
                            *recv_from.entry((src, k)).or_default() += 1;
                            let lat = t.saturating_sub(t0);
                            if data.len() == LARGE {
                                stats[k].lat_large.push(lat);
                            } else {
                                stats[k].lat_small.push(lat);
                            }
                        }
                        None => stats[k].misdelivered += 1,
                    }
                }
                Some(Ok(None)) => stats[k].misdelivered += 1,
                Some(Err(e)) if !dead.contains(&src) => {
                    stats[k].failed += 1;
                    eprintln!("peer {me}: receive from {src} failed: {e}");
                }
                Some(Err(_)) | None => {}
            }
        }
        // The legacy library: peeks with a full wildcard (never removes), takes its own tag.
        let w = node.worker().clone();
        if w.tag_probe(0, 0).is_some() {
            legacy_peeks += 1;
        }
        while let Ok(Some((info, r))) = w.tag_probe_take(LEGACY_TAG, u64::MAX, 1024) {
            legacy_pending.push((r, info.tag));
        }
        let mut still = Vec::new();
        for (mut r, tag) in legacy_pending.drain(..) {
            match r.test() {
                None => still.push((r, tag)),
                Some(Ok(tagspace_ucx::ucp::Completion::Received { data, .. })) => {
                    if tag != LEGACY_TAG || !data.starts_with(b"legacy ") {
                        legacy_mis += 1;
                    }
                    legacy_got.push(String::from_utf8_lossy(&data).to_string());
                }
                Some(_) => legacy_mis += 1,
            }
        }
        legacy_pending = still;
        raw_reqs.retain_mut(|r| r.test().is_none());

        let live = expect_from(&dead);
        let all_begun = live
            .iter()
            .all(|&i| (0..NL).all(|k| begun.contains(&(i, k))));
        let legacy_done = legacy_got.len() >= LEGACY_PER_PEER * live.len();
        let strays_in = node.stray_for(STRAY_ID as u16) >= (STRAYS_PER_PEER * live.len()) as u64;
        // Cut apart from the other host: also wait until every peer there is known down.
        let cut_seen = !o.expect_cut
            || others
                .iter()
                .all(|p| o.linked(me, p.index) || dead.contains(&p.index));
        if queue.is_empty()
            && cut_seen
            && sends.is_empty()
            && all_begun
            && recvs.is_empty()
            && legacy_done
            && strays_in
        {
            break;
        }
    }
    // Anything left for our namespaces from a live peer would be a duplicate. From a dead
    // one it is a message that arrived after its peer was declared down (D3 failed the
    // receive meant for it at once): late, not delivered, not duplicated.
    for _ in 0..20 {
        node.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut late = 0;
    for k in 0..NL {
        let ns = node.namespace(libs[k]).unwrap();
        let m = ns.matcher_any();
        let payload_of = |tag: u64| ns.payload_of(tagspace_core::Tag::from_raw(tag));
        let mut left = Vec::new();
        while let Ok(Some((info, r))) = node.worker().tag_probe_take(m.tag(), m.mask(), LARGE) {
            left.push(payload_of(info.tag));
            drop(r);
        }
        for p in left {
            if dead.contains(&sender_of_payload(p)) {
                late += 1;
            } else {
                stats[k].leftover += 1;
            }
        }
    }
    if late > 0 {
        eprintln!("peer {me}: {late} message(s) from dead peers arrived after they went down");
    }
    for k in 0..NL {
        let s = &stats[k];
        println!(
            "STAT {} {} {} {} {} {} {}",
            LIBS[k],
            s.sent,
            s.received,
            s.misdelivered,
            node.stray_for(node.namespace(libs[k]).unwrap().id()),
            s.failed,
            s.leftover
        );
        println!("LAT {} small {}", LIBS[k], join(&s.lat_small));
        println!("LAT {} large {}", LIBS[k], join(&s.lat_large));
    }
    println!(
        "STAT legacy {} {} {} 0 0 0",
        LEGACY_PER_PEER * others.len(),
        legacy_got.len(),
        legacy_mis
    );
    println!("PEEKS {legacy_peeks}");
    println!("STRAY {}", node.stray_for(STRAY_ID as u16));
    for ((dst, k), n) in &sent_to {
        println!("SENT {dst} {k} {n}");
    }
    for ((src, k), n) in &recv_from {
        println!("RECV {src} {k} {n}");
    }
    for p in &others {
        println!("CONN {} {}", p.index, node.live_connections_to(p.token));
    }
    println!("PROTO {}", node.protocol_errors().len());
    println!("CTRL {}", node.stats().control_sent);
    println!("DONE");
    wait_exit(&input, &mut node);
    Ok(())
}

fn join(v: &[u64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

fn wait_op(node: &mut Node, op: OpId) -> Result<Vec<u8>, String> {
    let start = Instant::now();
    loop {
        if let Some(r) = node.take(op) {
            return r.map(Option::unwrap_or_default).map_err(|e| e.to_string());
        }
        if start.elapsed() > TIMEOUT {
            return Err("a receive did not finish".into());
        }
        node.progress();
    }
}

fn recv_line(
    input: &mpsc::Receiver<String>,
    node: &mut Node,
    want: &str,
) -> Result<String, String> {
    let start = Instant::now();
    loop {
        match input.try_recv() {
            Ok(l) if l.starts_with(want) => return Ok(l),
            Ok(_) => {}
            Err(mpsc::TryRecvError::Disconnected) => return Err("parent went away".into()),
            Err(mpsc::TryRecvError::Empty) => {
                if start.elapsed() > TIMEOUT {
                    return Err(format!("no {want} line from the parent"));
                }
                let _ = node.wait(1);
            }
        }
    }
}

/// Keeps progressing (others may still need us) until the parent says EXIT, then closes.
fn wait_exit(input: &mpsc::Receiver<String>, node: &mut Node) {
    let _ = recv_line(input, node, "EXIT");
    node.shutdown(1000);
}

// ---------------------------------------------------------------------------------------------
// The parent.

#[derive(Default)]
struct Report {
    stat: BTreeMap<String, [u64; 6]>,
    lat_small: BTreeMap<String, Vec<u64>>,
    lat_large: BTreeMap<String, Vec<u64>>,
    sent: HashMap<(usize, usize), u64>,
    recv: HashMap<(usize, usize), u64>,
    conns: HashMap<usize, u64>,
    stray: u64,
    peeks: u64,
    proto: u64,
    ctrl: u64,
    ids: String,
    done: bool,
    /// Peer index → when this process heard it went down (monotonic ns).
    down: HashMap<usize, u64>,
    /// Peers whose connection the heartbeat ended (no PONG in time, here or there).
    silent: BTreeSet<usize>,
}

fn parent(o: &Opts) -> Result<(), String> {
    let (major, minor, release) = ucx_version();
    println!(
        "tagspace demo: {} processes, {} messages per library per peer, UCX {major}.{minor}.{release} \
         loaded (API {}.{} built), transport {}",
        o.procs, o.messages, UCX_API_BUILT.0, UCX_API_BUILT.1, o.transport
    );
    let (mut children, rx) = spawn_children(o.procs, o.spawn_via.as_deref(), |i| {
        (o.host_of(i), {
            let mut args = o.to_args();
            args.extend(["--peer".into(), i.to_string()]);
            args
        })
    })?;
    let result = run_parent(o, &mut children, &rx);
    if let Some(c) = o.stop.and_then(|i| children.get_mut(i)) {
        let _ = c.kill(); // stopped for good: SIGKILL still ends it
    }
    for c in &mut children {
        if let Some(stdin) = c.stdin.as_mut() {
            let _ = writeln!(stdin, "EXIT");
        }
    }
    let mut exit_failures = Vec::new();
    for (i, c) in children.iter_mut().enumerate() {
        if let Err(why) = wait_child(c, Duration::from_secs(10)) {
            if Some(i) != o.kill && Some(i) != o.stop {
                exit_failures.push(format!("process {i}: {why}"));
            }
        }
    }
    let reports = result?;
    if !exit_failures.is_empty() {
        return Err(format!("not a clean exit: {}", exit_failures.join("; ")));
    }
    verdict(o, &reports)
}

/// The lines each child prints, as `(child, line)`; `(child, None)` when its output ends.
pub(crate) type ChildLines = mpsc::Receiver<(usize, Option<String>)>;

/// Starts `procs` copies of this executable, child `i` with `args(i)` = (its emulated host,
/// its arguments) — through `sh -c 'VIA "$@"' - HOST EXE ARGS…` when `via` is given (see
/// `scripts/two-hosts.sh`) — with piped stdin and a thread forwarding each one's stdout.
pub(crate) fn spawn_children(
    procs: usize,
    via: Option<&str>,
    args: impl Fn(usize) -> (usize, Vec<String>),
) -> Result<(Vec<Child>, ChildLines), String> {
    let (tx, rx) = mpsc::channel::<(usize, Option<String>)>();
    let children = (0..procs)
        .map(|i| {
            let (host, args) = args(i);
            spawn_child(i, via, host, &args, &tx)
        })
        .collect::<Result<Vec<Child>, String>>()?;
    Ok((children, rx))
}

/// Starts one copy of this executable as child `i` (see [`spawn_children`]); its stdout lines
/// go to `tx` as `(i, line)`, then `(i, None)`.
pub(crate) fn spawn_child(
    i: usize,
    via: Option<&str>,
    host: usize,
    args: &[String],
    tx: &mpsc::Sender<(usize, Option<String>)>,
) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = match via {
        None => Command::new(&exe),
        Some(via) => {
            let mut c = Command::new("sh");
            c.args(["-c", &format!("{via} \"$@\""), "-"])
                .arg(host.to_string())
                .arg(&exe);
            c
        }
    };
    let mut child = cmd
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning process {i}: {e}"))?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let tx = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            match line {
                Ok(l) => {
                    let _ = tx.send((i, Some(l)));
                }
                Err(_) => break,
            }
        }
        let _ = tx.send((i, None));
    });
    Ok(child)
}

/// This process's peak resident memory (`VmHWM`), in KiB; 0 where `/proc` does not say.
pub(crate) fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    (status.lines())
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Waits for a child to exit; `Err` says how it did not exit cleanly.
pub(crate) fn wait_child(c: &mut Child, limit: Duration) -> Result<(), String> {
    let start = Instant::now();
    loop {
        match c.try_wait() {
            Ok(Some(s)) if s.success() => return Ok(()),
            Ok(Some(s)) => return Err(s.to_string()),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = c.kill();
                let _ = c.wait();
                return Err(format!(
                    "did not exit within {} s (killed)",
                    limit.as_secs()
                ));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn run_parent(
    o: &Opts,
    children: &mut [Child],
    rx: &mpsc::Receiver<(usize, Option<String>)>,
) -> Result<Vec<Report>, String> {
    let mut reports: Vec<Report> = (0..o.procs).map(|_| Report::default()).collect();
    let mut addrs: Vec<Option<String>> = vec![None; o.procs];
    let deadline = Instant::now() + TIMEOUT + Duration::from_secs(30);
    let mut killed = false;
    let mut stopped = false;
    let mut cut_at: Option<u64> = None;
    let mut closed = vec![false; o.procs];
    loop {
        let live_done =
            (0..o.procs).all(|i| Some(i) == o.kill || Some(i) == o.stop || reports[i].done);
        if live_done {
            return Ok(reports);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let (i, line) = rx
            .recv_timeout(left)
            .map_err(|_| "timed out waiting for the peers")?;
        let Some(line) = line else {
            closed[i] = true;
            if Some(i) != o.kill && Some(i) != o.stop && !reports[i].done {
                return Err(format!("process {i} ended before reporting"));
            }
            continue;
        };
        let mut w = line.split_whitespace();
        match w.next() {
            Some("ADDR") => {
                let addr = w.next().unwrap_or_default();
                let token = w.next().unwrap_or_default();
                reports[i].ids = w.next().unwrap_or_default().to_string();
                addrs[i] = Some(format!("{addr},{token}"));
                if addrs.iter().all(Option::is_some) {
                    let all: Vec<String> = addrs.iter().flatten().cloned().collect();
                    let msg = format!("PEERS {}", all.join(" "));
                    for c in children.iter_mut() {
                        if let Some(stdin) = c.stdin.as_mut() {
                            writeln!(stdin, "{msg}").map_err(|e| e.to_string())?;
                        }
                    }
                }
            }
            Some("MID") if i == 0 && cut_at.is_none() && o.cut_link.is_some() => {
                let cmd = o.cut_link.as_deref().unwrap_or_default();
                let t = now_ns();
                let st = Command::new("sh")
                    .args(["-c", cmd])
                    .status()
                    .map_err(|e| format!("--cut-link: {e}"))?;
                if !st.success() {
                    return Err(format!("--cut-link command failed: {cmd}"));
                }
                cut_at = Some(t);
                println!("link between the hosts cut ({cmd}) while process 0 was halfway through its sends");
            }
            Some("DOWN") => {
                let nums: Vec<u64> = w.filter_map(|s| s.parse().ok()).collect();
                if let [p, t] = nums[..] {
                    reports[i]
                        .down
                        .insert(p as usize, t.saturating_sub(cut_at.unwrap_or(t)));
                }
            }
            Some("MID") if Some(i) == o.kill && !killed => {
                killed = true;
                // SIGKILL: no chance to close anything.
                children[i].kill().map_err(|e| e.to_string())?;
                println!("process {i} killed (SIGKILL) halfway through its sends");
            }
            Some("MID") if Some(i) == o.stop && !stopped => {
                stopped = true;
                let st = Command::new("kill")
                    .args(["-STOP", &children[i].id().to_string()])
                    .status()
                    .map_err(|e| format!("kill -STOP: {e}"))?;
                if !st.success() {
                    return Err(format!("kill -STOP {} failed", children[i].id()));
                }
                println!(
                    "process {i} stopped (SIGSTOP) halfway through its sends, for good: it no \
                     longer calls progress"
                );
            }
            Some("STAT") => {
                let name = w.next().unwrap_or_default().to_string();
                let mut v = [0u64; 6];
                for x in v.iter_mut() {
                    *x = w.next().and_then(|s| s.parse().ok()).unwrap_or(0);
                }
                let e = reports[i].stat.entry(name).or_insert([0; 6]);
                for (a, b) in e.iter_mut().zip(v) {
                    *a += b;
                }
            }
            Some("LAT") => {
                let name = w.next().unwrap_or_default().to_string();
                let class = w.next().unwrap_or_default();
                let vals: Vec<u64> = w
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .filter_map(|s| s.parse().ok())
                    .collect();
                let m = if class == "large" {
                    &mut reports[i].lat_large
                } else {
                    &mut reports[i].lat_small
                };
                m.entry(name).or_default().extend(vals);
            }
            Some(k @ ("SENT" | "RECV" | "CONN")) => {
                let nums: Vec<u64> = w.filter_map(|s| s.parse().ok()).collect();
                match (k, nums.as_slice()) {
                    ("SENT", [p, l, n]) => {
                        reports[i].sent.insert((*p as usize, *l as usize), *n);
                    }
                    ("RECV", [p, l, n]) => {
                        reports[i].recv.insert((*p as usize, *l as usize), *n);
                    }
                    ("CONN", [p, n]) => {
                        reports[i].conns.insert(*p as usize, *n);
                    }
                    _ => return Err(format!("process {i}: bad line {line:?}")),
                }
            }
            Some("SILENT") => {
                if let Some(p) = w.next().and_then(|s| s.parse().ok()) {
                    reports[i].silent.insert(p);
                }
            }
            Some("STRAY") => reports[i].stray = w.next().and_then(|s| s.parse().ok()).unwrap_or(0),
            Some("PEEKS") => reports[i].peeks = w.next().and_then(|s| s.parse().ok()).unwrap_or(0),
            Some("PROTO") => reports[i].proto = w.next().and_then(|s| s.parse().ok()).unwrap_or(0),
            Some("CTRL") => reports[i].ctrl = w.next().and_then(|s| s.parse().ok()).unwrap_or(0),
            Some("DONE") => reports[i].done = true,
            _ => {}
        }
    }
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v[i] as f64 / 1000.0
}

fn verdict(o: &Opts, reports: &[Report]) -> Result<(), String> {
    let survivors: Vec<usize> = (0..o.procs)
        .filter(|&i| Some(i) != o.kill && Some(i) != o.stop && Some(i) != o.hostile)
        .collect();
    for (i, r) in reports.iter().enumerate() {
        if !r.ids.is_empty() {
            println!("process {i}: namespace ids {}", r.ids);
        }
    }
    // Per-namespace table over all processes.
    let mut total: BTreeMap<String, [u64; 6]> = BTreeMap::new();
    for r in reports {
        for (n, v) in &r.stat {
            let e = total.entry(n.clone()).or_insert([0; 6]);
            for (a, b) in e.iter_mut().zip(v) {
                *a += b;
            }
        }
    }
    println!(
        "\n{:<22} {:>8} {:>8} {:>13} {:>6} {:>7} {:>9}",
        "namespace", "sent", "received", "misdelivered", "stray", "failed", "leftover"
    );
    for n in LIBS
        .iter()
        .map(|s| s.to_string())
        .chain(["legacy".to_string()])
    {
        let v = total.get(&n).copied().unwrap_or_default();
        let label = if n == "legacy" {
            "legacy (no tagspace)".to_string()
        } else {
            n.clone()
        };
        println!(
            "{label:<22} {:>8} {:>8} {:>13} {:>6} {:>7} {:>9}",
            v[0], v[1], v[2], v[3], v[4], v[5]
        );
    }
    let stray: u64 = reports.iter().map(|r| r.stray).sum();
    println!(
        "{:<22} {:>8} {:>8} {:>13} {:>6}",
        "unregistered id 200", "-", "-", "-", stray
    );
    println!(
        "legacy wildcard peeks that saw a message: {} (none removed anything)",
        reports.iter().map(|r| r.peeks).sum::<u64>()
    );
    println!(
        "\none-way latency, send call to receive completion (µs): {:<10} {:>8} {:>8} {:>8} {:>8}",
        "", "p50", "p90", "p99", "max"
    );
    for n in LIBS {
        for (class, pick) in [("64 B", false), ("64 KiB", true)] {
            let mut v: Vec<u64> = reports
                .iter()
                .flat_map(|r| {
                    let m = if pick { &r.lat_large } else { &r.lat_small };
                    m.get(n).cloned().unwrap_or_default()
                })
                .collect();
            println!(
                "  {:<15} {:<7} n={:<6} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
                n,
                class,
                v.len(),
                pct(&mut v, 0.5),
                pct(&mut v, 0.9),
                pct(&mut v, 0.99),
                pct(&mut v, 1.0)
            );
        }
    }
    println!(
        "  (under load: every process streams to every peer with {WINDOW} sends in flight and \
         polls; see the benchmarks for unloaded ping-pong latency)"
    );
    let ctrl: Vec<u64> = survivors.iter().map(|&i| reports[i].ctrl).collect();
    println!("control frames sent per process: {ctrl:?}");

    let mut problems = Vec::new();
    for (n, v) in &total {
        if v[2] > 0 {
            problems.push(format!("{n}: {} misdelivered", v[2]));
        }
        if v[5] > 0 {
            problems.push(format!("{n}: {} left over (duplicated)", v[5]));
        }
    }
    // A kill (or a SIGSTOP, for as long as it lasts) over shared memory can leave a survivor's
    // receive queue stuck: UCX's FIFO has each sender reserve a slot and then fill it, and the
    // receiver reads in order, so a sender killed or stopped in between blocks everything
    // behind it (README, "A peer killed over shared memory"). That process hears nobody; the
    // heartbeat cuts it off from every peer (`Liveness`) instead of letting the whole run hang.
    // Its traffic is then checked for misdelivery and duplicates only. Anywhere else a
    // connection the heartbeat ended is a problem.
    let culprit = o.kill.or(o.stop);
    let shm_kill = culprit.is_some() && o.transport == "shm";
    let stuck: Vec<usize> = survivors
        .iter()
        .copied()
        .filter(|&w| {
            let peers: Vec<usize> = survivors.iter().copied().filter(|&b| b != w).collect();
            // Either side's heartbeat may fire first: the other then sees its endpoint
            // closed (a reset), not a silent peer.
            let silent =
                |b: &usize| reports[w].silent.contains(b) || reports[*b].silent.contains(&w);
            shm_kill && !peers.is_empty() && peers.iter().all(silent)
        })
        .collect();
    for &w in &stuck {
        println!(
            "process {w}: its shared-memory receive queue stopped when process {} was {} \
             mid-send (UCX's FIFO cannot recover); the heartbeat cut it off from every peer \
             ({LIVENESS_TIMEOUT_MS} ms without a PONG); its messages are checked for \
             misdelivery and duplicates only",
            culprit.unwrap_or_default(),
            if o.kill.is_some() {
                "killed"
            } else {
                "stopped"
            }
        );
    }
    for &a in &survivors {
        if let Some(s) = o.stop {
            // UCX sees a live process; only the heartbeat can end its connections.
            if !reports[a].silent.contains(&s) {
                problems.push(format!(
                    "process {a}: the heartbeat did not cut off stopped process {s}"
                ));
            }
        }
        for &b in &reports[a].silent {
            // Expected: a stuck or stopped process, and peers across a cut link (the heartbeat
            // notices a cut before TCP gives up retransmitting).
            let expected = stuck.contains(&a)
                || stuck.contains(&b)
                || Some(b) == o.stop
                || (o.cut_link.is_some() && !o.linked(a, b));
            if !expected {
                problems.push(format!(
                    "process {a}: the heartbeat ended its connection to {b} (no PONG in time)"
                ));
            }
        }
    }
    let survivors: Vec<usize> = survivors
        .into_iter()
        .filter(|i| !stuck.contains(i))
        .collect();
    for &w in &stuck {
        for &b in &survivors {
            for (k, lib) in LIBS.iter().enumerate() {
                for (x, y) in [(w, b), (b, w)] {
                    let r = reports[y].recv.get(&(x, k)).copied().unwrap_or(0);
                    if r > o.messages as u64 {
                        problems.push(format!("{lib}: {x}->{y} received {r}"));
                    }
                }
            }
        }
    }
    let m = o.messages as u64;
    if o.cut_link.is_some() {
        let mut delays = Vec::new();
        for &a in &survivors {
            for &b in &survivors {
                match (o.linked(a, b), reports[a].down.get(&b)) {
                    (true, Some(_)) if a != b => {
                        problems.push(format!("{a} saw {b} go down, but they share a host"))
                    }
                    (false, None) => {
                        problems.push(format!("{a} never saw {b} go down after the cut"))
                    }
                    (false, Some(&d)) => delays.push(d / 1_000_000),
                    _ => {}
                }
            }
        }
        delays.sort_unstable();
        if let (Some(lo), Some(hi)) = (delays.first(), delays.last()) {
            println!(
                "link cut → PeerDown, per process and peer across the cut: {} reports, {lo}..{hi} ms",
                delays.len()
            );
        }
    }
    for &a in &survivors {
        for &b in &survivors {
            if a == b {
                continue;
            }
            for (k, lib) in LIBS.iter().enumerate() {
                let s = reports[a].sent.get(&(b, k)).copied().unwrap_or(0);
                let r = reports[b].recv.get(&(a, k)).copied().unwrap_or(0);
                if !o.linked(a, b) {
                    // Cut apart mid-stream: losses are expected (a send can even fail after
                    // its data arrived), duplicates never (those would show as leftovers).
                    if r > m {
                        problems.push(format!("{lib}: {a}->{b} received {r} of {m}"));
                    }
                    continue;
                }
                if s != m + 1 || r != m {
                    problems.push(format!(
                        "{lib}: {a}->{b} sent {s} (want {}), received {r} (want {m})",
                        m + 1
                    ));
                }
            }
            if o.simultaneous && reports[a].conns.get(&b) != Some(&1) {
                problems.push(format!(
                    "{a} has {:?} connections to {b} (want 1)",
                    reports[a].conns.get(&b)
                ));
            }
        }
        let linked = survivors
            .iter()
            .filter(|&&b| b != a && o.linked(a, b))
            .count();
        let want_legacy = (LEGACY_PER_PEER * linked) as u64;
        let got = reports[a].stat.get("legacy").map_or(0, |v| v[1]);
        if got < want_legacy {
            problems.push(format!("legacy: process {a} got {got} of {want_legacy}"));
        }
        let want_stray = (STRAYS_PER_PEER * linked) as u64;
        if reports[a].stray < want_stray {
            problems.push(format!(
                "process {a} drained {} stray messages, want at least {want_stray}",
                reports[a].stray
            ));
        }
        if o.hostile.is_some() && reports[a].proto != 1 {
            problems.push(format!(
                "process {a} saw {} protocol errors (want 1: the hostile peer)",
                reports[a].proto
            ));
        }
        if let Some(h) = o.hostile {
            if reports[a].conns.get(&h).copied().unwrap_or(0) != 0 {
                problems.push(format!("process {a} still talks to hostile process {h}"));
            }
        }
    }
    if problems.is_empty() {
        println!("\nOK: every message between live processes arrived once, in its own namespace");
        Ok(())
    } else {
        for p in &problems {
            println!("PROBLEM: {p}");
        }
        Err(format!("{} problems", problems.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The leftover count tells a late message from a killed peer apart from a duplicate by
    /// the sender in its payload: it must read the sender from the bits it was written to.
    #[test]
    fn a_payload_names_its_sender() {
        for src in [0, 1, 7, 4095] {
            for seq in [0, 1, 99_999, 100_000] {
                assert_eq!(sender_of_payload(payload_for(src, seq)), src);
            }
        }
        assert_ne!(payload_for(1, 0), payload_for(0, 1));
    }
}
