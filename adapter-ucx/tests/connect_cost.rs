//! P3 on real UCX: connecting costs the same, constant number of control frames (a HELLO and a
//! PROOF each way) whatever the
//! number of endpoints already open (ucx-py's EndpointReuse handshake grew with every endpoint).

use std::time::{Duration, Instant};
use tagspace_core::{Registry, TagLayout};
use tagspace_ucx::node::{Node, NodeConfig};
use tagspace_ucx::ucp::Config;

fn node(listen: bool) -> Node {
    let reg: &'static Registry<256> = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
    let mut cfg = NodeConfig::loopback(Config::tcp());
    if !listen {
        cfg.listen = None;
    }
    let mut n = Node::with_registry(cfg, reg).expect("UCX node");
    n.register("dask").unwrap();
    n.register("cuml").unwrap();
    n
}

#[test]
fn kth_connection_costs_one_frame_each_way() {
    const PEERS: usize = 24;
    let mut hub = node(false);
    let mut peers: Vec<Node> = (0..PEERS).map(|_| node(true)).collect();
    let mut sent = Vec::new();
    let mut received = Vec::new();
    for p in peers.iter_mut() {
        let (s0, r0) = (hub.stats().control_sent, p.stats().control_received);
        hub.connect(p.listen_addr().unwrap()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while hub.live_connections_to(p.token()) == 0 || p.live_connections_to(hub.token()) == 0 {
            assert!(Instant::now() < deadline, "connection not established");
            hub.progress();
            p.progress();
        }
        // Let anything else the handshake would send arrive before counting.
        let quiet = Instant::now() + Duration::from_millis(20);
        while Instant::now() < quiet {
            hub.progress();
            p.progress();
        }
        sent.push(hub.stats().control_sent - s0);
        received.push(p.stats().control_received - r0);
    }
    // HELLO, PROOF (P6) and PAIR, whatever the number of connections already open.
    assert!(
        sent.iter().all(|&n| n == 3),
        "frames the hub sent per connection: {sent:?}"
    );
    assert!(
        received.iter().all(|&n| n == 3),
        "frames each peer received: {received:?}"
    );
    assert_eq!(hub.peers().len(), PEERS);
    for p in peers.iter_mut() {
        p.shutdown(100);
    }
    hub.shutdown(500);
}
