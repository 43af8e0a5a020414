//! What one `Node::progress()` costs as the pending operations grow (D6: it moves along only
//! the operations something happened to, so the cost does not grow with them).
//!
//! Two nodes on one thread over TCP loopback; node `a` has N receives tied to `b` posted for
//! payloads nothing is sent to, for N = 1, 100 and 10 000, and then:
//! - **idle**: `a.progress()` with no traffic;
//! - **one**: `b` sends one 8-byte message to a receive of `a`'s, and `a` progresses until that
//!   receive has completed (one completion per call: the number of calls is printed), then
//!   posts it again.
//!
//! `cargo run --release -p tagspace-ucx --example progress_cost` prints ns per call for each N
//! and the ratio N = 10 000 / N = 1, all measured in the same run. Wall time on a shared VM
//! swings (±30 %); `scripts/progress-cost.sh` counts instructions instead, running this
//! binary under callgrind as `progress_cost MODE N CALLS` (one configuration, no timing).

use std::time::{Duration, Instant};
use tagspace_core::{Registry, TagLayout};
use tagspace_ucx::node::{Clock, LibId, Node, NodeConfig, OpId};
use tagspace_ucx::ucp::Config;

const COUNTS: [usize; 3] = [1, 100, 10_000];
/// Payloads of the receives that never match start here.
const IDLE_BASE: u64 = 1 << 20;

struct Pair {
    a: Node,
    b: Node,
    la: LibId,
    lb: LibId,
    _pending: Vec<OpId>,
}

fn node() -> (Node, LibId) {
    let reg: &'static Registry<256> = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
    let mut cfg = NodeConfig::loopback(Config::tcp());
    // Time stands still for the nodes: under callgrind (tens of times slower) no handshake
    // deadline passes, and no timed work (sweeps, deadlines) differs from one run to the next.
    cfg.clock = Clock::manual();
    let mut n = Node::with_registry(cfg, reg).expect("UCX node");
    let lib = n.register("dask").unwrap();
    (n, lib)
}

/// Two connected nodes, `a` with `pending` receives tied to `b` that never match.
fn pair(pending: usize) -> Pair {
    let (mut a, la) = node();
    let (mut b, lb) = node();
    b.connect(a.listen_addr().unwrap()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    let routed =
        |x: &Node, lx: LibId, y: &Node| x.route_tag(lx, y.token(), 0).ok().flatten().is_some();
    while !(routed(&a, la, &b) && routed(&b, lb, &a)) {
        assert!(Instant::now() < deadline, "no connection");
        a.progress();
        b.progress();
    }
    let peer = b.token();
    let pending = (0..pending as u64)
        .map(|i| a.recv_from(la, peer, IDLE_BASE + i, 64))
        .collect();
    // Let the connection go quiet (acks, the first sweep) before anything is counted.
    for _ in 0..1000 {
        a.progress();
        b.progress();
    }
    Pair {
        a,
        b,
        la,
        lb,
        _pending: pending,
    }
}

/// `calls` idle progress calls (not inlined: callgrind counts inside it alone).
#[inline(never)]
fn idle(p: &mut Pair, calls: u64) {
    for _ in 0..calls {
        p.a.progress();
    }
}

/// `messages` round trips of one completion each; returns the progress calls `a` made (not
/// inlined: callgrind counts inside it alone).
#[inline(never)]
fn one_each(p: &mut Pair, messages: u64) -> u64 {
    let (peer_a, peer_b) = (p.a.token(), p.b.token());
    let mut calls = 0;
    for _ in 0..messages {
        let r = p.a.recv_from(p.la, peer_b, 7, 64);
        let s = p.b.send(p.lb, peer_a, 7, vec![1; 8], 10_000);
        loop {
            calls += 1;
            p.a.progress();
            if let Some(got) = p.a.take(r) {
                got.expect("received");
                break;
            }
            p.b.progress();
        }
        while p.b.take(s).is_none() {
            p.b.progress();
        }
    }
    calls
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [mode, n, calls] = &args[..] {
        // One configuration, for callgrind (scripts/progress-cost.sh).
        let mut p = pair(n.parse().expect("N"));
        let calls: u64 = calls.parse().expect("CALLS");
        match mode.as_str() {
            "idle" => idle(&mut p, calls),
            "one" => drop(one_each(&mut p, calls)),
            other => panic!("mode {other}: idle or one"),
        }
        // Not a tail call: callgrind's --toggle-collect sees the measured function entered.
        std::hint::black_box(&mut p);
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let (idle_calls, messages) = if quick {
        (2_000, 200)
    } else {
        (200_000, 20_000)
    };
    println!("Node::progress() with N receives pending (ns per call; median of 5 blocks)");
    println!(
        "{:>8} {:>12} {:>16} {:>14}",
        "N", "idle", "one completion", "calls/message"
    );
    let mut rows = Vec::new();
    for n in COUNTS {
        let mut p = pair(n);
        let (mut t_idle, mut t_one, mut per) = (Vec::new(), Vec::new(), 0.0);
        for _ in 0..5 {
            let t = Instant::now();
            idle(&mut p, idle_calls);
            t_idle.push(t.elapsed().as_nanos() as f64 / idle_calls as f64);
            let t = Instant::now();
            let calls = one_each(&mut p, messages);
            t_one.push(t.elapsed().as_nanos() as f64 / calls as f64);
            per = calls as f64 / messages as f64;
        }
        let (i, o) = (median(&mut t_idle), median(&mut t_one));
        println!("{n:>8} {i:>12.0} {o:>16.0} {per:>14.2}");
        rows.push((i, o));
    }
    let (first, last) = (rows[0], rows[rows.len() - 1]);
    println!(
        "ratio N=10000 / N=1: idle {:.2}, one completion {:.2}",
        last.0 / first.0,
        last.1 / first.1
    );
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
