//! The heartbeat (`Liveness`) on real UCX: a peer that stops answering PINGs is cut off with
//! `CloseReason::Unresponsive`, and what was in flight to it ends with `PeerDown` instead of
//! waiting for ever; a peer that keeps progressing is never cut off, however long it runs and
//! however the clock jumps. (The multi-process case — a process whose shared-memory receive
//! queue a kill left stuck, and a stopped process — is the demo's `--stop` and `--kill` over
//! shm: `adapter-ucx/tests/multiprocess.rs`.)

mod common;

use tagspace_core::wire::CloseReason;
use tagspace_ucx::node::{Clock, Liveness, NodeError, PeerEvent, LIVENESS_TICK_MAX_MS};

const LIVENESS: Liveness = Liveness {
    interval_ms: 1000,
    timeout_ms: 10_000,
};

fn manual_pair(
    clock: &Clock,
) -> (
    tagspace_ucx::node::Node,
    tagspace_ucx::node::LibId,
    tagspace_ucx::node::Node,
    tagspace_ucx::node::LibId,
) {
    let (mut a, la) = common::dask_node_with(|c| {
        c.clock = clock.clone();
        c.liveness = Some(LIVENESS);
    });
    let (mut b, lb) = common::dask_node_with(|c| {
        c.clock = Clock::manual();
        c.liveness = Some(LIVENESS);
    });
    a.listen(la).unwrap();
    b.connect(a.listen_addr().unwrap()).unwrap();
    common::progress_until(&mut a, &mut b, "no connection", |a, b| {
        a.route_tag(la, b.token(), 0).ok().flatten().is_some()
            && b.route_tag(lb, a.token(), 0).ok().flatten().is_some()
    });
    (a, la, b, lb)
}

#[test]
fn a_peer_that_stops_answering_is_cut_off_and_its_sends_end() {
    let clock = Clock::manual();
    let (mut a, la, b, _lb) = manual_pair(&clock);
    while let Some(PeerEvent::Up { .. }) = a.peer_event(la) {}
    // A rendezvous send (above the 8 KiB threshold): it can only finish when `b` answers, and
    // `b` no longer calls progress from here on.
    let op = a.send(la, b.token(), 7, vec![5u8; 64 * 1024], 1000);
    for _ in 0..200 {
        a.progress();
    }
    assert!(
        !a.is_done(op),
        "a rendezvous send finished without its receiver"
    );

    // Time passes in steps no larger than one tick: the first PING goes out, then waits.
    let mut waited = 0;
    while a.stats().liveness_timeouts == 0 {
        assert!(
            waited <= LIVENESS.interval_ms + LIVENESS.timeout_ms + 2 * LIVENESS_TICK_MAX_MS,
            "not cut off after {waited} ms"
        );
        clock.advance(LIVENESS_TICK_MAX_MS / 2);
        waited += LIVENESS_TICK_MAX_MS / 2;
        a.progress();
    }
    assert!(
        waited >= LIVENESS.timeout_ms,
        "cut off after {waited} ms, before the timeout"
    );
    assert!(a.stats().heartbeats_sent >= 1);
    assert_eq!(a.live_connections_to(b.token()), 0);
    match a.peer_event(la) {
        Some(PeerEvent::Down {
            peer,
            cause: None,
            reason: Some(CloseReason::Unresponsive),
        }) => assert_eq!(peer, b.token()),
        other => panic!("want Down(Unresponsive), got {other:?}"),
    }
    for _ in 0..10 {
        a.progress();
    }
    match a.take(op) {
        Some(Err(NodeError::PeerDown { peer, cause: None })) => assert_eq!(peer, b.token()),
        other => panic!("the send did not end with PeerDown: {other:?}"),
    }
    // The rendezvous UCX still held was given up: its endpoint is force-closed, never flushed
    // (UCX 1.13 aborts on a flush-closed endpoint that still has it).
    assert_eq!(a.stats().stuck_closes, 1);
    drop(b);
    a.shutdown(500);
}

#[test]
fn a_long_pause_of_our_own_is_not_held_against_the_peer() {
    let clock = Clock::manual();
    let (mut a, _la, mut b, _lb) = manual_pair(&clock);
    // A PING goes out; then this node "computes" for a minute without calling progress.
    clock.advance(LIVENESS.interval_ms);
    a.progress();
    assert!(a.stats().heartbeats_sent >= 1);
    clock.advance(60_000);
    // The peer had no chance to be heard meanwhile: its PONG is handled now.
    common::progress_until(&mut a, &mut b, "no PONG", |a, _| {
        a.stats().heartbeats_received >= 1
    });
    assert_eq!(a.stats().liveness_timeouts, 0);
    assert_eq!(a.live_connections_to(b.token()), 1);
    a.shutdown(500);
    b.shutdown(500);
}

#[test]
fn peers_that_keep_progressing_are_never_cut_off() {
    let clock = Clock::manual();
    let (mut a, la, mut b, lb) = manual_pair(&clock);
    // Five simulated minutes of both sides progressing, with traffic both ways.
    for round in 0..600u64 {
        clock.advance(500);
        let x = a.send(la, b.token(), round, vec![1u8; 100], 1000);
        let y = b.send(lb, a.token(), round, vec![2u8; 100], 1000);
        let rx = b.recv(lb, round, 100);
        let ry = a.recv(la, round, 100);
        common::progress_until(&mut a, &mut b, "traffic stalled", |a, b| {
            a.is_done(x) && b.is_done(y) && b.is_done(rx) && a.is_done(ry)
        });
        for op in [x, ry] {
            assert!(matches!(a.take(op), Some(Ok(_))));
        }
        for op in [y, rx] {
            assert!(matches!(b.take(op), Some(Ok(_))));
        }
    }
    assert_eq!(a.stats().liveness_timeouts + b.stats().liveness_timeouts, 0);
    assert!(
        a.stats().heartbeats_sent >= 100,
        "{} PINGs and PONGs",
        a.stats().heartbeats_sent
    );
    assert!(
        a.stats().heartbeats_received >= 100,
        "b answered {}",
        a.stats().heartbeats_received
    );
    assert_eq!(a.live_connections_to(b.token()), 1);
    a.shutdown(500);
    b.shutdown(500);
}

/// The engine's `poll_timeout` on a real node: it names the next timed event — a waiting
/// send's deadline (P2), the next PING (`wait` caps its sleep by it).
#[test]
fn poll_timeout_names_the_next_timed_event() {
    let clock = Clock::manual();
    let (mut a, la, mut b, _lb) = manual_pair(&clock);
    // The heartbeat's next PING (or its PONG's deadline) bounds it.
    let t = a
        .poll_timeout_ms()
        .expect("an established connection is timed");
    assert!(t <= LIVENESS.timeout_ms, "{t}");
    // A send to a name the peer has not announced waits at most 300 ms (P2).
    let lx = a.register("not-on-b").unwrap();
    let op = a.send(lx, b.token(), 1, vec![1], 300);
    a.progress();
    assert!(!a.is_done(op));
    let t = a.poll_timeout_ms().unwrap();
    assert!(t <= 300, "the waiting send's deadline: {t}");
    // Time passes (manual clock): the deadline is due now.
    clock.advance(300);
    assert_eq!(a.poll_timeout_ms(), Some(0));
    a.progress();
    assert!(matches!(
        a.take(op),
        Some(Err(NodeError::PeerLacksNamespace { .. }))
    ));
    let _ = la;
    a.shutdown(500);
    b.shutdown(500);
}

/// What became of a node that heard nobody (see [`deaf_node`]).
struct AfterDeaf {
    replaced: u64,
    /// Whether `a` listens at the same address after it.
    same_addr: bool,
    back: bool,
    carried: Option<Vec<u8>>,
    moved: Option<Vec<u8>>,
    /// With `release`: the carried messages the release dropped.
    released: u64,
}

/// Three nodes on one manual clock; `a` knows `b` and `c`. `b` sends `a` a message `a` has not
/// received yet and `a` posts a receive from any peer; then `a`'s worker drops every control
/// frame that arrives (a stuck receive queue, as a killed shared-memory writer leaves it), so
/// its heartbeat cuts both peers off and theirs cut `a` off. With `replace`, `a` replaces its
/// worker, and everyone dials again. Reports whether `a` got both peers back within 60
/// simulated seconds, and, once back, the message sent before the fault and what the receive
/// posted before it took from `c` — or, with `release`, how many carried messages releasing
/// the namespace dropped (R7: nothing carried outlives its name).
fn deaf_node(replace: bool, release: bool) -> AfterDeaf {
    const FAST: Liveness = Liveness {
        interval_ms: 500,
        timeout_ms: 3_000,
    };
    let clock = Clock::manual();
    let node = || {
        common::dask_node_with(|c| {
            c.clock = clock.clone();
            c.liveness = Some(FAST);
            c.replace_deaf_worker = replace;
        })
    };
    let ((mut a, la), (mut b, lb), (mut c, lc)) = (node(), node(), node());
    for (n, l) in [(&mut a, la), (&mut b, lb), (&mut c, lc)] {
        n.listen(l).unwrap();
    }
    b.connect(a.listen_addr().unwrap()).unwrap();
    c.connect(a.listen_addr().unwrap()).unwrap();
    let all = |a: &mut tagspace_ucx::node::Node,
               b: &mut tagspace_ucx::node::Node,
               c: &mut tagspace_ucx::node::Node| {
        a.progress();
        b.progress();
        c.progress();
    };
    let routed = |a: &tagspace_ucx::node::Node,
                  b: &tagspace_ucx::node::Node,
                  c: &tagspace_ucx::node::Node| {
        a.route_tag(la, b.token(), 0).ok().flatten().is_some()
            && a.route_tag(la, c.token(), 0).ok().flatten().is_some()
            && b.route_tag(lb, a.token(), 0).ok().flatten().is_some()
            && c.route_tag(lc, a.token(), 0).ok().flatten().is_some()
    };
    let start = std::time::Instant::now();
    while !routed(&a, &b, &c) {
        assert!(start.elapsed().as_secs() < 30, "no connections");
        all(&mut a, &mut b, &mut c);
    }
    // `b`'s message arrives at `a`'s worker and waits there, unreceived.
    let sent = b.send(lb, a.token(), 5, b"before the fault".to_vec(), 1000);
    while !b.is_done(sent) || a.oldest_waiting(la).unwrap().is_none() {
        assert!(start.elapsed().as_secs() < 30, "the message did not arrive");
        all(&mut a, &mut b, &mut c);
    }
    assert!(b.take(sent).unwrap().is_ok());
    let any = a.recv(la, 9, 64);

    let addr = a.listen_addr().unwrap();
    a.deafen_for_test();
    let (bt, ct) = (b.token(), c.token());
    let mut back = false;
    for _ in 0..(60_000 / 250) {
        clock.advance(250);
        for _ in 0..20 {
            all(&mut a, &mut b, &mut c);
        }
        if a.stats().liveness_timeouts >= 2
            && a.live_connections_to(bt) > 0
            && a.live_connections_to(ct) > 0
            && routed(&a, &b, &c)
        {
            back = true;
            break;
        }
    }
    let mut after = AfterDeaf {
        replaced: a.stats().workers_replaced,
        same_addr: a.listen_addr().ok() == Some(addr),
        back,
        carried: None,
        moved: None,
        released: 0,
    };
    if !back {
        return after;
    }
    assert_eq!(a.stats().deaf, 1);
    assert_eq!(a.stats().carried, 1, "{:?}", a.stats());
    if release {
        let dropped = a.stats().carry_dropped;
        a.release(la);
        after.released = a.stats().carry_dropped - dropped;
        return after;
    }
    let carried = a.recv_from(la, bt, 5, 64);
    let sent = c.send(lc, a.token(), 9, b"after".to_vec(), 1000);
    for _ in 0..2000 {
        all(&mut a, &mut b, &mut c);
        if a.is_done(carried) && a.is_done(any) {
            break;
        }
    }
    after.carried = a.take(carried).and_then(|r| r.ok().flatten());
    after.moved = a.take(any).and_then(|r| r.ok().flatten());
    assert!(c.take(sent).is_some_and(|r| r.is_ok()));
    after
}

#[test]
fn a_node_that_hears_nobody_replaces_its_worker_and_gets_its_peers_back() {
    let after = deaf_node(true, false);
    assert_eq!(after.replaced, 1);
    assert!(after.same_addr, "listens elsewhere after the replacement");
    assert!(after.back, "the deaf node did not get its peers back");
    assert_eq!(after.carried.as_deref(), Some(&b"before the fault"[..]));
    assert_eq!(after.moved.as_deref(), Some(&b"after"[..]));
}

/// The control: the same fault, the worker kept. Nobody gets `a` back (every HELLO to it goes
/// unread), which is what the test above shows the replacement fixes.
#[test]
fn without_a_new_worker_a_node_that_hears_nobody_stays_cut_off() {
    let after = deaf_node(false, false);
    assert_eq!(after.replaced, 0);
    assert!(
        !after.back,
        "a deaf node got its peers back without a new worker"
    );
}

/// A namespace released after its worker was replaced drops what was carried over for it
/// (counted `carry_dropped`), as a release forgets what waits in UCX's queue for it.
#[test]
fn a_released_namespace_drops_what_was_carried_for_it() {
    let after = deaf_node(true, true);
    assert!(after.back);
    assert_eq!(after.released, 1);
}
