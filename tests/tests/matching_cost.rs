//! Why tagspace needs no partial masks (D1), shown deterministically with the mock matcher's
//! comparison counter: the cost of matching one dask message while another library has N
//! receives pending, for N = 1 … 10 000.
//!
//! * tagspace: the other library's pending receives are exact (full mask), so they sit in
//!   hash buckets and the dask arrival compares against its own bucket only: flat.
//! * a partial-mask scheme (BlazingSQL's "low 16 bits" probe style, as pending receives): every
//!   pending receive sits in the one wildcard queue, and every arrival on the worker, dask's
//!   included, walks it: linear.
//!
//! Measured (`cargo test -p tagspace-tests --test matching_cost -- --nocapture`): 1, 1, 2, 2, 11
//! comparisons for tagspace at 1, 10, 100, 1 000, 10 000 pending; 2, 11, 101, 1 001, 10 001 for
//! the partial-mask scheme.

use tagspace_tests::mock::MockCluster;
use tagspace_tests::{suite::mesh, Cluster};

fn arrival_cost(pending: u64, partial: bool) -> u64 {
    let mut c = MockCluster::new();
    let p = mesh(&mut c, 2);
    let (a, b) = (p[0], p[1]);
    let dask_a = c.register(a, "dask").unwrap();
    let dask_b = c.register(b, "dask").unwrap();
    let blazing_b = c.register(b, "blazingsql").unwrap();
    c.settle();
    let worker = c.nodes[b].worker();
    if partial {
        // What a partial-mask library does: receives that ignore some payload bits.
        let ns = c.nodes[b]
            .namespace(tagspace_mock::node::LibId(blazing_b))
            .unwrap();
        let matchers: Vec<_> = (0..pending)
            .map(|i| ns.matcher(i << 16, !0xFFFF).unwrap())
            .collect();
        for m in matchers {
            c.fabric.tag_recv(worker, m.tag(), m.mask()).unwrap();
        }
    } else {
        for i in 0..pending {
            c.recv_from(b, blazing_b, a, i << 16);
        }
    }
    let r = c.recv_from(b, dask_b, a, 42);
    let before = c.fabric.comparisons(worker);
    c.send(a, dask_a, b, 42, b"x", 1000);
    let cost = c.fabric.comparisons(worker) - before;
    c.settle();
    assert_eq!(c.take(b, r).unwrap().unwrap().unwrap(), b"x");
    cost
}

#[test]
fn tagspace_data_path_is_flat_partial_masks_are_linear() {
    let mut rows = Vec::new();
    for n in [1u64, 10, 100, 1_000, 10_000] {
        let (exact, partial) = (arrival_cost(n, false), arrival_cost(n, true));
        println!(
            "pending {n:>6}: tagspace {exact:>3} comparisons, partial-mask scheme {partial:>6}"
        );
        rows.push((n, exact, partial));
    }
    for &(n, exact, partial) in &rows {
        // Flat up to UCX's hash-bucket load: N exact receives spread over 1021 buckets, so the
        // arrival meets about N/1021 same-bucket neighbours, never the other library's N.
        let bucket_load = n.div_ceil(tagspace_mock::matching::HASH_BUCKETS as u64);
        assert!(
            exact <= 1 + 2 * bucket_load,
            "tagspace cost {exact} at {n} pending: {rows:?}"
        );
        // Linear: the arrival walks every pending partial-mask receive.
        assert!(
            partial > n,
            "partial-mask cost {partial} at {n} pending: {rows:?}"
        );
    }
    for w in rows.windows(2) {
        assert!(
            w[1].2 > w[0].2,
            "partial-mask cost must grow with pending receives"
        );
    }
}
