//! A HELLO with the registry's full capacity of names — far above UCX's eager and rendezvous
//! thresholds — still completes the handshake, over TCP and over shared memory (the issue:
//! a 17 KB HELLO went out as a rendezvous AM, which the receiver dropped, so an honest process
//! with about 120 names or more never connected).

use std::time::{Duration, Instant};
use tagspace_core::name::MAX_NAME_LEN;
use tagspace_core::{Registry, TagLayout};
use tagspace_ucx::node::{LibId, Node, NodeConfig};
use tagspace_ucx::ucp::Config;

/// A node whose registry is full: every id of the default layout holds a 64-byte name.
fn full_node(ucx: Config, salt: usize) -> (Node, Vec<LibId>) {
    let reg: &'static Registry<256> = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
    let mut n = Node::with_registry(NodeConfig::loopback(ucx), reg).expect("UCX node");
    // the well-known names (ids 2..16), then dynamic ids until the registry is full
    let mut libs: Vec<LibId> = tagspace_core::wellknown::WELL_KNOWN
        .iter()
        .map(|(name, _)| n.register(name).unwrap())
        .collect();
    for i in 0.. {
        // the same names on both sides, registered in a different order
        let k = (i * 7 + salt) % 240;
        let name = format!("{k:03}-{}", "n".repeat(MAX_NAME_LEN - 4));
        match n.register(&name) {
            Ok(l) => libs.push(l),
            Err(_) => break,
        }
    }
    (n, libs)
}

fn full_registries_connect(ucx: Config) {
    let (mut a, la) = full_node(ucx.clone(), 0);
    let (mut b, lb) = full_node(ucx, 3);
    let full = tagspace_core::wellknown::WELL_KNOWN.len() + 240;
    assert_eq!(
        la.len(),
        full,
        "every well-known name and every dynamic id in use"
    );
    b.connect(a.listen_addr().unwrap()).unwrap();
    let start = Instant::now();
    let routed = |a: &Node, la: &[LibId], b: &Node| {
        la.iter()
            .all(|&l| a.route_tag(l, b.token(), 0).ok().flatten().is_some())
    };
    while !(routed(&a, &la, &b) && routed(&b, &lb, &a)) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "handshake with full registries did not complete: {:?} / {:?}; errors {:?}",
            a.stats(),
            b.stats(),
            a.protocol_errors()
        );
        a.progress();
        b.progress();
    }
    assert_eq!(a.stats().am_dropped + b.stats().am_dropped, 0);
    a.shutdown(500);
    b.shutdown(500);
}

#[test]
fn a_full_registry_handshakes_over_tcp() {
    full_registries_connect(Config {
        rndv_thresh: Some(8192),
        ..Config::tcp()
    });
}

#[test]
fn a_full_registry_handshakes_over_shared_memory() {
    full_registries_connect(Config::shm());
}
