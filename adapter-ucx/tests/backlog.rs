//! Held namespaces (`Node::hold_backlog`) on real UCX: a library that receives only through the
//! node gets its peers' unexpected messages counted per peer. An honest peer's messages are
//! received exactly once, in order, by every kind of receive; a proven peer that floods its own
//! pair's tags is cut off (`Flood`) with the node's memory bounded; the control run shows the
//! same flood piling up without the limit.

mod common;

use std::time::{Duration, Instant};
use tagspace_ucx::node::{BacklogLimit, LibId, Node, NodeError, OpId};
use tagspace_ucx::ucp::{Started, Status};

fn pair() -> (Node, LibId, Node, LibId) {
    let (mut a, la) = common::dask_node();
    let (mut b, lb) = common::dask_node();
    common::connect(&mut a, la, &mut b, lb);
    (a, la, b, lb)
}

fn wait_all(a: &mut Node, b: &mut Node, ops_a: &[OpId], ops_b: &[OpId]) {
    common::progress_until(a, b, "operations stalled", |a, b| {
        ops_a.iter().all(|&o| a.is_done(o)) && ops_b.iter().all(|&o| b.is_done(o))
    });
}

fn data(op: Option<Result<Option<Vec<u8>>, NodeError>>) -> Vec<u8> {
    op.expect("done").expect("received").expect("data")
}

/// Lets `a` make held-namespace passes (every `DRAIN_INTERVAL_MS`) until `done`.
fn settle(a: &mut Node, b: &mut Node, what: &str, done: impl FnMut(&Node, &Node) -> bool) {
    let mut done = done;
    common::progress_until(a, b, what, |a, b| {
        std::thread::sleep(Duration::from_millis(1));
        done(a, b)
    });
}

#[test]
fn held_messages_reach_every_kind_of_receive_once_and_in_order() {
    let (mut a, la, mut b, lb) = pair();
    a.hold_backlog(la, BacklogLimit::DEFAULT).unwrap();
    let ta = a.token();
    let tb = b.token();
    // Everything is sent before any receive is posted: all of it waits, unexpected.
    let mut sends = Vec::new();
    for (p, d) in [(7u64, 1u8), (7, 2), (8, 3), (7, 4), (9, 5), (10, 6)] {
        sends.push(b.send(lb, ta, p, vec![d; 100], 5000));
    }
    let big: Vec<u8> = (0..256 * 1024).map(|i| i as u8).collect(); // rendezvous (> 8 KiB)
    sends.push(b.send(lb, ta, 11, big.clone(), 5000));
    sends.push(b.send(lb, ta, 12, vec![9; 100], 5000)); // for a receive too short
    sends.push(b.send_inbox(lb, ta, b"inbox".to_vec(), 5000));
    // The big one completes only once it is received.
    settle(&mut a, &mut b, "not held", |a, _| a.stats().held == 9);
    assert!(sends[..6].iter().all(|&s| b.is_done(s)));
    let oldest = a.oldest_waiting(la).unwrap().expect("the backlog's oldest");
    assert_eq!(oldest.len, 100);
    assert_eq!(a.sender_of(oldest.tag), Some(tb));

    // Tied receives of one tag: in the order sent.
    let r: Vec<OpId> = (0..3).map(|_| a.recv_from(la, tb, 7, 1024)).collect();
    let any = a.recv(la, 8, 1024);
    let big_r = a.recv_from(la, tb, 11, big.len());
    let short = a.recv(la, 12, 10);
    let inbox = a
        .probe_inbox(la, 64)
        .unwrap()
        .expect("the held inbox message");
    let mut ops = r.clone();
    ops.extend([any, big_r, short, inbox]);
    wait_all(&mut a, &mut b, &ops, &sends);
    let got: Vec<u8> = r.iter().map(|&o| data(a.take(o))[0]).collect();
    assert_eq!(got, [1, 2, 4], "one tag's messages in the order sent");
    assert_eq!(data(a.take(any)), vec![3; 100]);
    assert_eq!(data(a.take(big_r)), big, "the rendezvous message, whole");
    match a.take(short) {
        Some(Err(NodeError::Transport(e))) => assert_eq!(e.status, Status::MESSAGE_TRUNCATED),
        other => panic!("a receive shorter than the message: {other:?}"),
    }
    assert_eq!(data(a.take(inbox)), b"inbox");
    // The blocking receives into the caller's buffer.
    let mut buf = [0u8; 256];
    let n = a.recv_into_from(la, tb, 9, &mut buf, Some(Duration::from_secs(5)));
    assert_eq!(&buf[..n.unwrap()], &[5; 100][..]);
    let n = a.recv_into(la, 10, &mut buf, Some(Duration::from_secs(5)));
    assert_eq!(&buf[..n.unwrap()], &[6; 100][..]);
    for s in sends {
        b.take(s).unwrap().unwrap();
    }
    // Nothing held twice, nothing left, nobody cut off.
    assert_eq!(a.oldest_waiting(la).unwrap(), None);
    let r = a.recv(la, 7, 64);
    for _ in 0..200 {
        a.progress();
        b.progress();
    }
    assert!(!a.is_done(r), "a message was received twice");
    a.cancel(r);
    assert_eq!(a.stats().backlog_floods, 0);
    assert_eq!(a.live_connections_to(tb), 1);
    a.shutdown(500);
    b.shutdown(500);
}

/// `b` sends `n` messages of 64 B to `a`'s dask namespace with its own (valid) tags, as fast as
/// UCX takes them, `a` and `b` progressing between bursts; stops early when `b` can no longer
/// route to `a`. Returns how many went out and the longest `a.progress()` call.
fn flood(a: &mut Node, b: &mut Node, lb: LibId, n: u64) -> (u64, Duration) {
    let ta = a.token();
    let mut sent = 0;
    let mut longest = Duration::ZERO;
    let mut pending = Vec::new();
    while sent < n {
        for _ in 0..256.min(n - sent) {
            let Ok(Some((ep, tag))) = b.route_tag(lb, ta, sent % 4096) else {
                return (sent, longest);
            };
            if let Ok(Started::Pending(req)) = ep.tag_send(tag, vec![7u8; 64]) {
                pending.push(req);
            }
            sent += 1;
        }
        let t = Instant::now();
        a.progress();
        longest = longest.max(t.elapsed());
        b.progress();
        pending.retain_mut(|r| r.test().is_none());
    }
    (sent, longest)
}

/// How many messages `BACKLOG_FLOOD` (the README's long run: 2 000 000) or 40 000 by default.
fn flood_size() -> u64 {
    std::env::var("BACKLOG_FLOOD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40_000)
}

const LIMIT: BacklogLimit = BacklogLimit {
    messages: 1000,
    bytes: 1 << 20,
};

#[test]
fn a_proven_peer_flooding_its_own_tags_is_cut_off() {
    let (mut a, la, mut b, lb) = pair();
    // An honest third peer whose messages wait in the same namespace meanwhile.
    let (mut c, lc) = common::dask_node();
    common::connect(&mut a, la, &mut c, lc);
    a.hold_backlog(la, LIMIT).unwrap();
    let (ta, tb, tc) = (a.token(), b.token(), c.token());
    let honest: Vec<OpId> = (0..100)
        .map(|p| c.send(lc, ta, 90_000 + p, p.to_le_bytes().to_vec(), 10_000))
        .collect();
    settle(
        &mut a,
        &mut c,
        "the honest peer's messages not held",
        |a, _| a.stats().held >= 100,
    );
    let rss0 = common::rss_kib();
    let n = flood_size();
    let (sent, longest) = flood(&mut a, &mut b, lb, n);
    common::progress_until(&mut a, &mut b, "the flooder was not cut off", |a, b| {
        a.live_connections_to(tb) == 0 && b.live_connections_to(ta) == 0
    });
    // What was still on its way is dropped as it arrives.
    for _ in 0..200 {
        a.progress();
        b.progress();
        c.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
    let st = a.stats();
    eprintln!(
        "{sent} of {n} flood messages sent before the cut-off; held {} (100 honest), dropped \
         {}, longest progress {longest:?}; RSS {rss0} KiB before, {} KiB after",
        st.held,
        st.backlog_dropped,
        common::rss_kib()
    );
    assert_eq!(st.backlog_floods, 1);
    assert!(sent < n, "the flooder was never stopped");
    assert!(
        st.held <= 100 + LIMIT.messages as u64 + 1,
        "more than the limit held"
    );
    assert_eq!(a.live_connections_to(tc), 1, "the honest peer stays");
    // Nothing of the flooder's waits: only the honest messages, all of them, once each.
    let r: Vec<OpId> = (0..100)
        .map(|p| a.recv_from(la, tc, 90_000 + p, 64))
        .collect();
    common::progress_until(&mut a, &mut c, "honest messages lost", |a, c| {
        r.iter().all(|&o| a.is_done(o)) && honest.iter().all(|&o| c.is_done(o))
    });
    for (p, &o) in r.iter().enumerate() {
        assert_eq!(data(a.take(o)), (p as u64).to_le_bytes().to_vec());
    }
    assert_eq!(
        a.oldest_waiting(la).unwrap(),
        None,
        "the flood left messages"
    );

    // Proven again, the peer's messages are held again.
    common::connect(&mut a, la, &mut b, lb);
    let s = b.send(lb, ta, 5, b"back".to_vec(), 5000);
    settle(&mut a, &mut b, "not held after reconnecting", |a, _| {
        a.oldest_waiting(la).unwrap().is_some()
    });
    let r = a.recv_from(la, tb, 5, 64);
    wait_all(&mut a, &mut b, &[r], &[s]);
    assert_eq!(data(a.take(r)), b"back");
    for n in [&mut a, &mut b, &mut c] {
        n.shutdown(500);
    }
}

/// Control: the same flood without the limit is neither cut off nor bounded — every message
/// waits in UCX's queue for a receive that never comes.
#[test]
fn control_without_a_limit_the_flood_piles_up() {
    let (mut a, la, mut b, lb) = pair();
    let n = flood_size().min(40_000);
    let (sent, _) = flood(&mut a, &mut b, lb, n);
    for _ in 0..200 {
        a.progress();
        b.progress();
    }
    assert_eq!(sent, n);
    assert_eq!(a.stats().flood_closes, 0);
    assert_eq!(a.live_connections_to(b.token()), 1);
    // All of them wait: received one by one (any payload), every one is there.
    let mut buf = [0u8; 64];
    let space = a.namespace(la).unwrap().matcher_any();
    let mut waiting = 0u64;
    while a
        .worker()
        .tag_recv_into(space.tag(), space.mask(), &mut buf, Some(Duration::ZERO))
        .is_ok()
    {
        waiting += 1;
    }
    assert_eq!(waiting, n, "every flood message waited");
    assert!(waiting > LIMIT.messages as u64);
    a.shutdown(500);
    b.shutdown(500);
}

/// A message longer than the byte limit is not a flood: what waits of it is a rendezvous
/// header, charged at most `HELD_CHARGE_MAX`, and a peer with nothing held always gets one
/// message through.
#[test]
fn a_message_longer_than_the_byte_limit_does_not_cut_its_sender_off() {
    let (mut a, la, mut b, lb) = pair();
    a.hold_backlog(la, LIMIT).unwrap();
    let (ta, tb) = (a.token(), b.token());
    let big: Vec<u8> = (0..4 << 20).map(|i| (i % 251) as u8).collect();
    let s = b.send(lb, ta, 3, big.clone(), 10_000);
    settle(&mut a, &mut b, "not held", |a, _| a.stats().held == 1);
    assert_eq!(a.stats().backlog_floods, 0);
    let r = a.recv_from(la, tb, 3, big.len());
    wait_all(&mut a, &mut b, &[r], &[s]);
    assert_eq!(data(a.take(r)), big);
    assert_eq!(a.live_connections_to(tb), 1);
    a.shutdown(500);
    b.shutdown(500);
}

#[test]
fn hold_backlog_refuses_what_it_cannot_keep() {
    let (mut a, la) = common::dask_node();
    let zero = BacklogLimit {
        messages: 0,
        bytes: 1,
    };
    assert!(matches!(a.hold_backlog(la, zero), Err(NodeError::Usage(_))));
    let layout = tagspace_core::TagLayout::builder(56, 8).build().unwrap();
    let (mut n, ln) = common::dask_node_on(layout, |_| {});
    assert!(matches!(
        n.hold_backlog(ln, BacklogLimit::DEFAULT),
        Err(NodeError::Usage(_))
    ));
    a.release(la);
    assert!(matches!(
        a.hold_backlog(la, BacklogLimit::DEFAULT),
        Err(NodeError::NoSuchLibrary)
    ));
}

#[test]
fn releasing_a_held_library_drops_its_messages() {
    let (mut a, la, mut b, lb) = pair();
    a.hold_backlog(la, BacklogLimit::DEFAULT).unwrap();
    let ta = a.token();
    let mut s: Vec<OpId> = (0..5)
        .map(|p| b.send(lb, ta, p, vec![1; 32], 5000))
        .collect();
    // A rendezvous message completes at its sender only once received (or dropped).
    let big = b.send(lb, ta, 9, vec![2; 64 * 1024], 5000);
    settle(&mut a, &mut b, "not held", |a, _| a.stats().held == 6);
    assert!(!b.is_done(big), "held: its data not fetched yet");
    s.push(big);
    a.release(la);
    let la2 = a.register("dask").unwrap();
    assert_eq!(a.oldest_waiting(la2).unwrap(), None);
    wait_all(&mut a, &mut b, &[], &s);
    a.shutdown(500);
    b.shutdown(500);
}
