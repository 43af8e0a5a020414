//! D3 on real UCX: a peer that fails ends exactly the operations that can only finish through
//! it, with `PeerDown`, whatever UCX does with their requests — and touches nothing of a live
//! peer. The deadlines below only stop a hung test; nothing asserts how long anything takes.

mod common;

use std::time::{Duration, Instant};
use tagspace_ucx::node::{LibId, Node, NodeError, OpId};
use tagspace_ucx::ucp::Status;

const BIG: usize = 1 << 20;

fn node() -> (Node, LibId) {
    common::dask_node()
}

fn hang_guard(start: Instant, what: &str) {
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "hung: {what} (D3 says it must end)"
    );
}

/// `a` connected to each of `others`, every connection established with `lib` announced.
fn connect_all(a: &mut Node, la: LibId, others: &mut [&mut Node]) {
    for o in others.iter_mut() {
        a.connect(o.listen_addr().unwrap()).unwrap();
    }
    let start = Instant::now();
    while others
        .iter()
        .any(|o| a.route_tag(la, o.token(), 0).ok().flatten().is_none())
    {
        hang_guard(start, "connecting");
        a.progress();
        for o in others.iter_mut() {
            o.progress();
        }
    }
}

fn wait_done(a: &mut Node, op: OpId, live: &mut [&mut Node], what: &str) {
    let start = Instant::now();
    while !a.is_done(op) {
        hang_guard(start, what);
        a.progress();
        for o in live.iter_mut() {
            o.progress();
        }
    }
}

/// A receive matched to a rendezvous of a peer that then dies (it never answers the
/// receiver's request for the data) fails with `PeerDown` naming that peer; a receive from a
/// live peer and an untied receive are not touched, and the live peer's message still arrives.
#[test]
fn receive_matched_to_a_dead_peers_rendezvous_fails_with_peer_down() {
    let (mut a, la) = node();
    let (mut b, lb) = node();
    let (mut c, lc) = node();
    connect_all(&mut a, la, &mut [&mut b, &mut c]);
    let (tb, tc) = (b.token(), c.token());
    // b and c know a's directory too.
    let start = Instant::now();
    while b.route_tag(lb, a.token(), 0).ok().flatten().is_none()
        || c.route_tag(lc, a.token(), 0).ok().flatten().is_none()
    {
        hang_guard(start, "handshake");
        a.progress();
        b.progress();
        c.progress();
    }

    // b starts a 1 MiB rendezvous send and progresses only until its request-to-send has
    // reached a's unexpected queue; from then on b never progresses again.
    let send = b.send(lb, a.token(), 1, vec![7; BIG], 5000);
    let m = a.matcher_from(la, tb, 1).unwrap();
    let start = Instant::now();
    while a.worker().tag_probe(m.tag(), m.mask()).is_none() {
        hang_guard(start, "rendezvous request to arrive");
        b.progress();
        a.progress();
    }
    assert!(
        !b.is_done(send),
        "a 1 MiB rendezvous send cannot finish before it is received"
    );
    // Matched at once to b's rendezvous; the data can only come from b.
    let from_b = a.recv_from(la, tb, 1, BIG);
    let from_c = a.recv_from(la, tc, 2, BIG);
    let untied = a.recv(la, 3, BIG);
    for _ in 0..50 {
        a.progress();
    }
    assert!(
        !a.is_done(from_b),
        "b never progresses: its data cannot have arrived"
    );

    drop(b); // b dies: its endpoints are force-closed, its worker destroyed

    wait_done(&mut a, from_b, &mut [&mut c], "receive from the dead peer");
    match a.take(from_b) {
        Some(Err(NodeError::PeerDown { peer, cause })) => {
            assert_eq!(peer, tb);
            assert!(cause.is_some(), "a failure, not an orderly close");
        }
        other => panic!("expected PeerDown from b, got {other:?}"),
    }
    // Nothing of the live peer was touched.
    assert!(!a.is_done(from_c));
    assert!(!a.is_done(untied));
    let sc = c.send(lc, a.token(), 2, vec![9; BIG], 5000);
    wait_done(&mut a, from_c, &mut [&mut c], "receive from the live peer");
    assert_eq!(a.take(from_c).unwrap().unwrap().unwrap(), vec![9; BIG]);
    wait_done(&mut c, sc, &mut [&mut a], "send of the live peer");
    c.take(sc).unwrap().unwrap();
    // Cancel keeps UCX's meaning for a receive that is not tied to the dead peer.
    a.cancel(untied);
    wait_done(&mut a, untied, &mut [&mut c], "cancelled receive");
    match a.take(untied) {
        Some(Err(NodeError::Transport(e))) => assert_eq!(e.status, Status::CANCELED),
        other => panic!("expected UCX's CANCELED, got {other:?}"),
    }
    // A receive posted for a peer already known to have failed fails at once.
    let late = a.recv_from(la, tb, 4, BIG);
    assert!(matches!(
        a.take(late),
        Some(Err(NodeError::PeerDown { peer, .. })) if peer == tb
    ));
    a.shutdown(500);
    c.shutdown(500);
}

/// Sends in flight to a peer that dies finish with `PeerDown` (the data is lost with the peer),
/// while sends to a live peer on the same node complete.
#[test]
fn sends_to_a_dead_peer_fail_with_peer_down() {
    let (mut a, la) = node();
    let (mut b, _lb) = node();
    let (mut c, lc) = node();
    connect_all(&mut a, la, &mut [&mut b, &mut c]);
    let (tb, tc) = (b.token(), c.token());
    // Rendezvous sends b never receives: they can only end through b.
    let to_b: Vec<OpId> = (0..8)
        .map(|i| a.send(la, tb, i, vec![1; BIG], 5000))
        .collect();
    let to_c: Vec<OpId> = (0..8)
        .map(|i| a.send(la, tc, i, vec![2; BIG], 5000))
        .collect();
    for _ in 0..50 {
        a.progress();
    }
    drop(b);
    let recvs: Vec<OpId> = (0..8).map(|i| c.recv_from(lc, a.token(), i, BIG)).collect();
    let start = Instant::now();
    while !(to_b.iter().chain(&to_c).all(|o| a.is_done(*o)) && recvs.iter().all(|o| c.is_done(*o)))
    {
        hang_guard(start, "sends to a dead and a live peer");
        a.progress();
        c.progress();
    }
    for op in to_b {
        match a.take(op) {
            Some(Err(NodeError::PeerDown { peer, .. })) => assert_eq!(peer, tb),
            other => panic!("expected PeerDown from b, got {other:?}"),
        }
    }
    for op in to_c {
        a.take(op).unwrap().expect("send to the live peer");
    }
    for op in recvs {
        assert_eq!(c.take(op).unwrap().unwrap().unwrap(), vec![2; BIG]);
    }
    a.shutdown(500);
    c.shutdown(500);
}
