//! What the routed send path costs per message against the raw path, with many connections
//! open: `Node::route_tag` (the connection serving the peer, its cached route, the checked
//! tag) against what code on raw UCX does per message (`Node::endpoint_to`, then a fixed tag).
//!
//! A hub connected to P peers over TCP loopback (P = 128 unless given); then `calls` lookups of
//! the farthest peer each way, in the same run.
//!
//! `cargo run --release -p tagspace-ucx --example route_cost` prints ns per call and the ratio.
//! Wall time on a shared VM swings (±30 %); `scripts/route-cost.sh` counts instructions instead,
//! running this binary under callgrind as `route_cost MODE PEERS CALLS` (`raw` or `routed`, no
//! timing), inside the measured function only.

use std::hint::black_box;
use std::time::{Duration, Instant};
use tagspace_core::{Registry, TagLayout};
use tagspace_ucx::node::{Clock, LibId, Node, NodeConfig};
use tagspace_ucx::ucp::Config;

/// A tag in namespace field 0, outside tagspace (what raw code sends with).
const RAW_TAG: u64 = 0x00ff_0000_0000_0001;

fn node(listen: bool) -> (Node, LibId) {
    let reg: &'static Registry<256> = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
    let mut cfg = NodeConfig::loopback(Config::tcp());
    // Time stands still: under callgrind no handshake deadline passes.
    cfg.clock = Clock::manual();
    if !listen {
        cfg.listen = None;
    }
    let mut n = Node::with_registry(cfg, reg).expect("UCX node");
    let lib = n.register("dask").unwrap();
    n.register("cuml").unwrap();
    (n, lib)
}

/// A hub connected to `peers` nodes, routes usable both ways; the hub's library and the last
/// peer's token.
fn hub(peers: usize) -> (Node, Vec<Node>, LibId, u64) {
    let (mut hub, lib) = node(false);
    let mut others = Vec::new();
    for _ in 0..peers {
        let (mut p, lp) = node(true);
        hub.connect(p.listen_addr().unwrap()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(600);
        let routed =
            |a: &Node, la: LibId, b: &Node| a.route_tag(la, b.token(), 0).ok().flatten().is_some();
        while !(routed(&hub, lib, &p) && routed(&p, lp, &hub)) {
            assert!(Instant::now() < deadline, "no connection");
            hub.progress();
            p.progress();
            for o in others.iter_mut() {
                Node::progress(o);
            }
        }
        others.push(p);
    }
    let far = others.last().expect("a peer").token();
    (hub, others, lib, far)
}

/// `calls` raw lookups: the endpoint, a fixed tag (not inlined: callgrind counts inside it).
#[inline(never)]
fn raw(hub: &Node, far: u64, calls: u64) -> u64 {
    let mut sink = 0;
    for i in 0..calls {
        let ep = hub.endpoint_to(black_box(far)).expect("endpoint");
        sink ^= ep.as_raw() as u64 ^ RAW_TAG ^ (black_box(i) & 0xffff);
    }
    sink
}

/// `calls` routed lookups: `route_tag` for payload `i` (not inlined, as `raw`).
#[inline(never)]
fn routed(hub: &Node, lib: LibId, far: u64, calls: u64) -> u64 {
    let mut sink = 0;
    for i in 0..calls {
        let (ep, tag) = hub
            .route_tag(lib, black_box(far), black_box(i) & 0xffff)
            .expect("route")
            .expect("routed");
        sink ^= ep.as_raw() as u64 ^ tag;
    }
    sink
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [mode, peers, calls] = &args[..] {
        // One configuration, for callgrind (scripts/route-cost.sh).
        let (hub, others, lib, far) = hub(peers.parse().expect("PEERS"));
        let calls: u64 = calls.parse().expect("CALLS");
        let sink = match mode.as_str() {
            "raw" => raw(&hub, far, calls),
            "routed" => routed(&hub, lib, far, calls),
            other => panic!("mode {other}: raw or routed"),
        };
        black_box(sink);
        drop(others);
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let (peers, calls) = if quick {
        (8, 100_000)
    } else {
        (128, 20_000_000)
    };
    let (hub, others, lib, far) = hub(peers);
    let (mut t_raw, mut t_routed) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let t = Instant::now();
        black_box(raw(&hub, far, calls));
        t_raw.push(t.elapsed().as_nanos() as f64 / calls as f64);
        let t = Instant::now();
        black_box(routed(&hub, lib, far, calls));
        t_routed.push(t.elapsed().as_nanos() as f64 / calls as f64);
    }
    let (r, s) = (median(&mut t_raw), median(&mut t_routed));
    println!(
        "per-message lookup, {peers} connections open (ns per call, median of 5 blocks): \
         endpoint_to + fixed tag {r:.1}, route_tag {s:.1}, ratio {:.2}",
        s / r
    );
    drop(others);
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
