//! R7 on real UCX, the failure side: a connected peer that never acknowledges a withdrawal
//! cannot keep the id quarantined for ever — after `ACK_TIMEOUT_MS` without an answer its
//! connection is closed and its pins go. (The acknowledged path is the conformance case
//! `released_id_is_quarantined_until_peers_confirm`.)

mod common;

use tagspace_core::{Registry, TagLayout};
use tagspace_ucx::node::{Clock, Node, NodeConfig, ACK_TIMEOUT_MS, CLOSED_PIN_LINGER_MS};
use tagspace_ucx::ucp::Config;

fn node(clock: Clock) -> (Node, &'static Registry<256>) {
    let reg: &'static Registry<256> = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
    let cfg = NodeConfig {
        clock,
        ..NodeConfig::loopback(Config::tcp())
    };
    (Node::with_registry(cfg, reg).expect("UCX node"), reg)
}

#[test]
fn a_peer_that_never_acknowledges_is_cut_off_and_its_pins_go() {
    let clock = Clock::manual();
    let (mut a, reg_a) = node(clock.clone());
    let (mut b, _) = node(Clock::manual());
    let la = a.register("to-release").unwrap();
    let lb = b.register("to-release").unwrap();
    b.connect(a.listen_addr().unwrap()).unwrap();
    common::progress_until(&mut a, &mut b, "no connection", |a, b| {
        a.route_tag(la, b.token(), 0).ok().flatten().is_some()
            && b.route_tag(lb, a.token(), 0).ok().flatten().is_some()
    });
    b.withhold_acks_for_test(a.token()).unwrap();
    let id = a.namespace(la).unwrap().id();
    a.release(la);
    common::progress_until(&mut a, &mut b, "withdrawal not seen", |a, b| {
        b.route_tag(lb, a.token(), 0).ok().flatten().is_none()
    });
    for _ in 0..100 {
        a.progress();
        b.progress();
    }
    assert!(
        reg_a.is_quarantined(id),
        "unacknowledged: still quarantined"
    );
    clock.advance(ACK_TIMEOUT_MS - 1);
    for _ in 0..100 {
        a.progress();
        b.progress();
    }
    assert!(reg_a.is_quarantined(id));
    assert_eq!(a.stats().ack_timeouts, 0);
    assert_eq!(a.live_connections_to(b.token()), 1);
    clock.advance(2);
    common::progress_until(&mut a, &mut b, "not cut off", |a, b| {
        a.stats().ack_timeouts == 1 && a.live_connections_to(b.token()) == 0
    });
    // The closed connection's pins linger: b may still have sent to the id before it saw the
    // close (over shared memory that can still arrive), so the id stays quarantined a while.
    for _ in 0..100 {
        a.progress();
        b.progress();
    }
    assert!(
        reg_a.is_quarantined(id),
        "pins given back at the close, not after CLOSED_PIN_LINGER_MS"
    );
    clock.advance(CLOSED_PIN_LINGER_MS);
    common::progress_until(&mut a, &mut b, "pins not given back", |_, _| {
        !reg_a.is_quarantined(id)
    });
    a.shutdown(500);
    b.shutdown(500);
}
