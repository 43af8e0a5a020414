//! Beside libraries that do not use tagspace (invariant F1), on real UCX: a foreign library on
//! plain libucp shares each node's worker and runs a real library's probe loop while two
//! tagspace libraries stream to each other in both directions with small payloads (0, 1, 2,
//! ..., the values a library's tags carry).
//!
//! - rapidsmpf's `recv_any`: `ucp_tag_probe_nb(op << 3 | stage, 0xFFFFFFFF, remove)` — it takes
//!   any message whose low 32 bits equal its tag.
//! - BlazingSQL's begin-transmission probe: `ucp_tag_probe_nb(0, 0xFFFF000000000000)`, then a
//!   full-mask receive of the tag it found.
//!
//! Each runs twice. The control run uses a layout in the probe's reach (the default layout for
//! rapidsmpf; for BlazingSQL the layout chosen against rapidsmpf alone, whose tags have zero top
//! bits), and asserts that the probe *does* take tagspace messages, so the check can fail. The
//! guarded run uses the layout `tagspace layout --against` chooses and asserts that nothing is
//! taken and every message reaches its library exactly once, intact. Over TCP and shared
//! memory.

use std::collections::HashSet;
use std::time::{Duration, Instant};
use tagspace_core::foreign::{self, choose_layout};
use tagspace_core::{RawMatcher, TagLayout};
use tagspace_ucx::node::{HostProgress, LibId, Node, OpId, Role};
use tagspace_ucx::ucp::Config;
use ucx1_sys as sys;

mod rawhost;
use rawhost::*;

const LIBS: [&str; 2] = ["shuffle-engine", "collectives"];
/// Messages per library and direction.
const N: u64 = 200;

#[derive(Clone, Copy, Debug)]
enum Probe {
    /// rapidsmpf's recv_any over ops 0..64, stages 0..8 (tags 0..512).
    Rapidsmpf,
    /// BlazingSQL's begin-transmission probe.
    Blazingsql,
}

impl Probe {
    /// One pass of the foreign library's loop on `host`'s worker: what it took.
    fn pass(self, host: &RawHost) -> Vec<(u64, Vec<u8>)> {
        let mut taken = Vec::new();
        match self {
            Probe::Rapidsmpf => {
                for op in 0..64u64 {
                    for stage in 0..8u64 {
                        while let Some(m) = host.probe_take(op << 3 | stage, 0xFFFF_FFFF, true) {
                            taken.push(m);
                        }
                    }
                }
            }
            Probe::Blazingsql => {
                while let Some(m) = host.probe_take(0, 0xFFFF_0000_0000_0000, false) {
                    taken.push(m);
                }
            }
        }
        taken
    }
}

struct Outcome {
    /// Tagspace messages the foreign probe took (tags whose namespace is managed).
    stolen: usize,
    /// Tagspace messages delivered to their library.
    delivered: usize,
}

fn body(lib: usize, dir: usize, k: u64) -> Vec<u8> {
    format!("{}:{dir}:{k}", LIBS[lib]).into_bytes()
}

fn run(ucx: &Config, layout: TagLayout, probe: Probe) -> Outcome {
    let (ha, hb, a_ep, b_ep) = host_pair(ucx, sys::ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE);
    let hosts = [&ha, &hb];
    // SAFETY: the hosts' workers outlive the nodes (dropped below, before the hosts).
    let mut a = unsafe {
        Node::adopt_with_registry(
            ha.worker,
            host_cfg(),
            HostProgress::Node,
            registry_with(layout),
        )
    }
    .expect("adopt A");
    let mut b = unsafe {
        Node::adopt_with_registry(
            hb.worker,
            host_cfg(),
            HostProgress::Node,
            registry_with(layout),
        )
    }
    .expect("adopt B");
    let la: Vec<LibId> = LIBS.iter().map(|l| a.register(l).unwrap()).collect();
    let lb: Vec<LibId> = LIBS.iter().rev().map(|l| b.register(l).unwrap()).collect();
    let lb = [lb[1], lb[0]]; // registered in the other order: other ids
                             // SAFETY: live endpoints, kept until the nodes' drop.
    unsafe { a.attach(a_ep, Role::Initiator) }.unwrap();
    unsafe { b.attach(b_ep, Role::Acceptor) }.unwrap();
    let (ta, tb) = (a.token(), b.token());
    let pump = |a: &mut Node, b: &mut Node| {
        for h in hosts {
            h.progress();
        }
        a.progress();
        b.progress();
    };
    let start = Instant::now();
    while !(0..2).all(|i| {
        a.route_tag(la[i], tb, 0).ok().flatten().is_some()
            && b.route_tag(lb[i], ta, 0).ok().flatten().is_some()
    }) {
        assert!(start.elapsed() < Duration::from_secs(30), "handshake");
        pump(&mut a, &mut b);
    }

    // Both directions, both libraries: sends first, so most messages wait unexpected (where
    // a probe finds them) until the receives are posted, a few passes of the probe later.
    let mut sends: Vec<(usize, OpId)> = Vec::new();
    for k in 0..N {
        for i in 0..2 {
            sends.push((0, a.send(la[i], tb, k, body(i, 0, k), 10_000)));
            sends.push((1, b.send(lb[i], ta, k, body(i, 1, k), 10_000)));
        }
    }
    let mut stolen_tags = Vec::new();
    for _ in 0..20 {
        pump(&mut a, &mut b);
        for (h, _) in [(&ha, 0), (&hb, 1)] {
            stolen_tags.extend(probe.pass(h));
        }
    }
    // (receiver, library, direction, payload, op)
    let mut recvs: Vec<(usize, usize, usize, u64, OpId)> = Vec::new();
    for k in 0..N {
        for i in 0..2 {
            recvs.push((1, i, 0, k, b.recv(lb[i], k, 64)));
            recvs.push((0, i, 1, k, a.recv(la[i], k, 64)));
        }
    }
    let total = recvs.len();
    let mut delivered = HashSet::new();
    let start = Instant::now();
    let layout_tag =
        |t: u64| layout.namespace_of(t) != 0 && t & layout.guard_mask() == layout.guard_value();
    loop {
        pump(&mut a, &mut b);
        for (h, _) in [(&ha, 0), (&hb, 1)] {
            stolen_tags.extend(probe.pass(h));
        }
        for &(who, i, dir, k, op) in &recvs {
            let n = if who == 0 { &mut a } else { &mut b };
            if let Some(r) = n.take(op) {
                let data = r.expect("tagspace receive").expect("data");
                assert_eq!(data, body(i, dir, k), "misdelivered");
                assert!(delivered.insert((who, i, k)), "delivered twice: {i} {k}");
            }
        }
        let stolen = stolen_tags.iter().filter(|(t, _)| layout_tag(*t)).count();
        if delivered.len() + stolen >= total {
            break;
        }
        // a stolen message's receive never completes: stop when nothing more can come
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{} delivered, {stolen} stolen, of {total}",
            delivered.len()
        );
    }
    for (who, op) in sends {
        let n = if who == 0 { &mut a } else { &mut b };
        let _ = n.take(op);
    }
    let stolen: Vec<&(u64, Vec<u8>)> = stolen_tags.iter().filter(|(t, _)| layout_tag(*t)).collect();
    // what was stolen is tagspace's messages (their bodies prove it), not the foreign one's own
    for (t, data) in &stolen {
        let text = String::from_utf8_lossy(data);
        assert!(LIBS.iter().any(|l| text.starts_with(l)), "{t:#x}: {text}");
    }
    let out = Outcome {
        stolen: stolen.len(),
        delivered: delivered.len(),
    };
    drop(a);
    drop(b);
    ha.close(a_ep, &[&hb]);
    hb.close(b_ep, &[&ha]);
    out
}

fn rapidsmpf() -> RawMatcher {
    foreign::preset("rapidsmpf").unwrap().pattern
}

fn blazingsql() -> RawMatcher {
    foreign::preset("blazingsql").unwrap().pattern
}

fn check(ucx: Config, probe: Probe, control: TagLayout, guarded: TagLayout, what: &str) {
    let total = (4 * N) as usize;
    let c = run(&ucx, control, probe);
    eprintln!(
        "{what}: control layout {}: {} of {total} tagspace messages taken by the foreign probe, {} delivered",
        control.spec(),
        c.stolen,
        c.delivered
    );
    assert!(
        c.stolen > 0,
        "control run: the probe took nothing, so this test cannot fail"
    );
    assert_eq!(c.stolen + c.delivered, total);
    let g = run(&ucx, guarded, probe);
    eprintln!(
        "{what}: guarded layout {}: {} taken, {} of {total} delivered",
        guarded.spec(),
        g.stolen,
        g.delivered
    );
    assert_eq!(g.stolen, 0, "guarded run: tagspace messages taken");
    assert_eq!(
        g.delivered, total,
        "guarded run: every message exactly once"
    );
}

fn rapidsmpf_case(ucx: Config, what: &str) {
    let guarded = choose_layout(&[rapidsmpf()], 8, &[]).unwrap();
    assert!(TagLayout::DEFAULT.reach(rapidsmpf()).is_reachable());
    assert!(!guarded.reach(rapidsmpf()).is_reachable());
    check(ucx, Probe::Rapidsmpf, TagLayout::DEFAULT, guarded, what);
}

fn blazingsql_case(ucx: Config, what: &str) {
    // the layout chosen against rapidsmpf alone, its pair field moved below bit 48, puts
    // zeros in the top 16 bits of every tag: BlazingSQL's probe reaches it (where the chooser
    // puts the pair field, the top bits, its random values keep the probe off the actual
    // traffic, but F1 asks for every tag tagspace can build); chosen against both, neither does
    let rapidsmpf_only = choose_layout(&[rapidsmpf()], 8, &[]).unwrap();
    assert!(rapidsmpf_only.reach(blazingsql()).is_reachable());
    let ns = rapidsmpf_only.namespace_field();
    let control = TagLayout::builder(ns.shift(), ns.width())
        .pair(32, 16)
        .build()
        .unwrap();
    assert!(control.reach(blazingsql()).is_reachable());
    let guarded = choose_layout(&[rapidsmpf(), blazingsql()], 8, &[]).unwrap();
    check(ucx, Probe::Blazingsql, control, guarded, what);
}

#[test]
fn rapidsmpf_recv_any_beside_tagspace_over_tcp() {
    rapidsmpf_case(Config::tcp(), "rapidsmpf tcp");
}

#[test]
fn rapidsmpf_recv_any_beside_tagspace_over_shm() {
    rapidsmpf_case(Config::shm(), "rapidsmpf shm");
}

#[test]
fn blazingsql_probe_beside_tagspace_over_tcp() {
    blazingsql_case(Config::tcp(), "blazingsql tcp");
}

#[test]
fn blazingsql_probe_beside_tagspace_over_shm() {
    blazingsql_case(Config::shm(), "blazingsql shm");
}
