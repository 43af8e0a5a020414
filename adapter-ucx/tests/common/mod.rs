//! Helpers shared by the in-process UCX tests.
// Each test binary includes this module and uses only part of it.
#![allow(dead_code)]

use std::time::{Duration, Instant};
use tagspace_core::{Registry, TagLayout};
use tagspace_ucx::node::{LibId, Node, NodeConfig};
use tagspace_ucx::ucp::Config;

/// A node on its own registry (a "process" of its own), listening on loopback over TCP with
/// rendezvous above 8 KiB, with library "dask" registered.
pub fn dask_node() -> (Node, LibId) {
    dask_node_with(|_| {})
}

/// [`dask_node`], with its configuration changed by `edit` first.
pub fn dask_node_with(edit: impl FnOnce(&mut NodeConfig)) -> (Node, LibId) {
    dask_node_on(TagLayout::DEFAULT, edit)
}

/// [`dask_node_with`] on a registry of `layout`.
pub fn dask_node_on(layout: TagLayout, edit: impl FnOnce(&mut NodeConfig)) -> (Node, LibId) {
    let reg: &'static Registry<256> = Box::leak(Box::new(Registry::new(layout)));
    let ucx = Config {
        rndv_thresh: Some(8192),
        ..Config::tcp()
    };
    let mut cfg = NodeConfig::loopback(ucx);
    edit(&mut cfg);
    let mut n = Node::with_registry(cfg, reg).expect("UCX node");
    let lib = n.register("dask").unwrap();
    (n, lib)
}

/// Progresses both nodes until `done`; fails with `what` after 30 s.
pub fn progress_until(
    a: &mut Node,
    b: &mut Node,
    what: &str,
    mut done: impl FnMut(&Node, &Node) -> bool,
) {
    let start = Instant::now();
    while !done(a, b) {
        assert!(start.elapsed() < Duration::from_secs(30), "{what}");
        a.progress();
        b.progress();
    }
}

/// `b` connects to `a`; returns once each routes to the other's library (`la`, `lb`).
pub fn connect(a: &mut Node, la: LibId, b: &mut Node, lb: LibId) {
    b.connect(a.listen_addr().unwrap()).unwrap();
    progress_until(a, b, "no connection", |a, b| {
        b.route_tag(lb, a.token(), 0).ok().flatten().is_some()
            && a.route_tag(la, b.token(), 0).ok().flatten().is_some()
    });
}

/// Resident memory of this process, in KiB (Linux).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}
