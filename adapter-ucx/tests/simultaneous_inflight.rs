//! P4 without loss: data sent on a connection before both sides settle a simultaneous connect
//! must arrive even when that connection is the one superseded.

mod common;

use std::time::{Duration, Instant};
use tagspace_ucx::node::{LibId, Node, OpId};

/// Rendezvous above 8 KiB: a large send on the superseded connection needs it alive until the
/// receiver has pulled the data, which happens only after it posts the receive.
fn node() -> (Node, LibId) {
    common::dask_node()
}

#[test]
fn data_sent_before_settling_arrives() {
    const N: u64 = 50;
    for round in 0..5 {
        let (mut a, la) = node();
        let (mut b, lb) = node();
        a.connect(b.listen_addr().unwrap()).unwrap();
        b.connect(a.listen_addr().unwrap()).unwrap();
        // Send from both sides as soon as each has *a* connection, before duplicates settle.
        let (mut sa, mut sb): (Vec<OpId>, Vec<OpId>) = (Vec::new(), Vec::new());
        let deadline = Instant::now() + Duration::from_secs(20);
        while sa.is_empty() || sb.is_empty() {
            assert!(Instant::now() < deadline, "no connection");
            a.progress();
            if sa.is_empty() && a.route_tag(la, b.token(), 0).ok().flatten().is_some() {
                sa = (0..N)
                    .map(|i| a.send(la, b.token(), i, vec![1; 64 * 1024], 5000))
                    .collect();
            }
            b.progress();
            if sb.is_empty() && b.route_tag(lb, a.token(), 0).ok().flatten().is_some() {
                sb = (0..N)
                    .map(|i| b.send(lb, a.token(), i, vec![2; 64 * 1024], 5000))
                    .collect();
            }
        }
        let ra: Vec<OpId> = (0..N).map(|i| a.recv(la, i, 1 << 20)).collect();
        let rb: Vec<OpId> = (0..N).map(|i| b.recv(lb, i, 1 << 20)).collect();
        let all_done = |n: &Node, ops: &[OpId]| ops.iter().all(|o| n.is_done(*o));
        while !(all_done(&a, &sa) && all_done(&a, &ra) && all_done(&b, &sb) && all_done(&b, &rb)) {
            assert!(
                Instant::now() < deadline,
                "round {round}: lost messages: a received {}/{N}, b received {}/{N}",
                ra.iter().filter(|o| a.is_done(**o)).count(),
                rb.iter().filter(|o| b.is_done(**o)).count()
            );
            a.progress();
            b.progress();
        }
        for (n, ops) in [(&mut a, ra), (&mut b, rb)] {
            for op in ops {
                n.take(op).unwrap().expect("received");
            }
        }
        assert_eq!(a.live_connections_to(b.token()), 1);
        assert_eq!(b.live_connections_to(a.token()), 1);
        a.shutdown(200);
        b.shutdown(200);
    }
}
