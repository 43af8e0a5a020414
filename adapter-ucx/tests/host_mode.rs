//! Host mode (issue 12): tagspace on a worker and endpoints that a "host" owns — here a host
//! written on plain libucp (`ucx1-sys` calls only, no tagspace wrapper), as ucxx or a C++
//! engine is. The host keeps its own traffic on the same worker and endpoints: random 64-bit
//! tags as ucxx's hashed tags are (some forced into tagspace's namespace ids and into the
//! control id), RAFT-style `(tag << 31) | rank` tags, and Active Messages on AM id 0 (ucxx's
//! id), some received by receives posted early and some left unexpected until the end.
//! Three tagspace libraries registered in different orders run beside it. Checked: every
//! host message reaches the host (0 stolen), every tagspace message the right library
//! (0 misdelivered), a release is quarantined and confirmed over exact ack receives, the
//! host's progress thread on a MULTI worker, `peer_failed`, `detach`, and that dropping the
//! node leaves the host's worker working (its AM handlers gone, the host's kept).

use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tagspace_core::engine::PeerEvent;
use tagspace_core::wellknown::CONTROL_ID;
use tagspace_core::TagLayout;
use tagspace_ucx::node::{HostProgress, LibId, Node, NodeConfig, NodeError, Role};
use tagspace_ucx::ucp::{Config, ThreadMode};
use ucx1_sys as sys;

mod rawhost;
use rawhost::*;

const LIBS: [&str; 3] = ["dask", "cuml", "blazingsql"];

fn progress_all(hosts: &[&RawHost], nodes: &mut [&mut Node]) {
    for h in hosts {
        h.progress();
    }
    for n in nodes.iter_mut() {
        n.progress();
    }
}

fn until(
    hosts: &[&RawHost],
    nodes: &mut [&mut Node],
    what: &str,
    mut done: impl FnMut(&mut [&mut Node]) -> bool,
) {
    let start = Instant::now();
    while !done(nodes) {
        assert!(start.elapsed() < Duration::from_secs(30), "{what}");
        progress_all(hosts, nodes);
    }
}

fn register_all(n: &mut Node, order: &[usize]) -> Vec<LibId> {
    let mut ids = vec![LibId(usize::MAX); 3];
    for &i in order {
        ids[i] = n.register(LIBS[i]).unwrap();
        n.listen(ids[i]).unwrap();
    }
    ids
}

fn host_side_by_side(ucx: Config, b_progress: HostProgress) {
    let (ha, hb, a_ep, b_ep) = host_pair(&ucx, sys::ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE);
    let hosts = [&ha, &hb];
    let (reg_a, reg_b) = (registry(), registry());
    // SAFETY: the hosts' workers outlive the nodes (dropped below, before the hosts).
    let mut a =
        unsafe { Node::adopt_with_registry(ha.worker, host_cfg(), HostProgress::Node, reg_a) }
            .expect("adopt A");
    let mut b = unsafe { Node::adopt_with_registry(hb.worker, host_cfg(), b_progress, reg_b) }
        .expect("adopt B");
    assert_eq!(a.host().unwrap().thread_mode, ThreadMode::Single);
    let la = register_all(&mut a, &[0, 1, 2]);
    let lb = register_all(&mut b, &[2, 0, 1]);
    // A dynamic name (the three above are well-known, with static ids never quarantined).
    let scratch_a = a.register("scratch-space").unwrap();
    let scratch_b = b.register("scratch-space").unwrap();
    // A attaches and talks first; B attaches later: its HELLO waits for B (kept, bounded).
    // SAFETY: live endpoints, kept until detach / the node's drop.
    unsafe { a.attach(a_ep, Role::Initiator) }.unwrap();
    for _ in 0..200 {
        progress_all(&hosts, &mut [&mut a, &mut b]);
    }
    assert!(matches!(
        unsafe { a.attach(a_ep, Role::Initiator) },
        Err(NodeError::Usage(_))
    ));
    unsafe { b.attach(b_ep, Role::Acceptor) }.unwrap();
    let (ta, tb) = (a.token(), b.token());
    until(&hosts, &mut [&mut a, &mut b], "handshake", |n| {
        (0..3).all(|i| {
            n[0].route_tag(la[i], tb, 0).ok().flatten().is_some()
                && n[1].route_tag(lb[i], ta, 0).ok().flatten().is_some()
        }) && n[0].route_tag(scratch_a, tb, 0).ok().flatten().is_some()
    });

    // The host's own traffic A → B on the same endpoint, next to tagspace's.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut forced: Vec<u16> = lb.iter().map(|l| b.namespace(*l).unwrap().id()).collect();
    forced.push(CONTROL_ID);
    forced.push(200); // an id nobody registered (the stray sweep's prey in own-worker mode)
    let released = b.namespace(scratch_b).unwrap().id();
    forced.push(released); // the id B releases below: the host's messages in it stay its own
    let tags = host_tags(&mut rng, &forced, 300);
    let early: Vec<u64> = tags.iter().copied().step_by(2).collect();
    let late: Vec<u64> = tags.iter().copied().skip(1).step_by(2).collect();
    let mut early_bufs: Vec<Vec<u8>> = early.iter().map(|_| vec![0u8; 16]).collect();
    let early_recvs: Vec<Pending> = early
        .iter()
        .zip(early_bufs.iter_mut())
        .map(|(&t, buf)| hb.recv(t, buf))
        .collect();
    let bodies: HashMap<u64, Vec<u8>> = tags
        .iter()
        .map(|&t| (t, t.to_le_bytes().to_vec()))
        .collect();
    let mut host_sends = Vec::new();
    for (k, &t) in tags.iter().enumerate() {
        host_sends.push(ha.send(a_ep, t, &bodies[&t]));
        if k % 10 == 0 {
            host_sends.push(ha.am_send(a_ep, 0, &bodies[&t]));
        }
        // tagspace traffic interleaved: each library sends to its peer's same-named library.
        let i = k % 3;
        a.send(
            la[i],
            tb,
            k as u64,
            format!("{}:{k}", LIBS[i]).into_bytes(),
            10_000,
        );
    }
    let mut recvs = Vec::new();
    for k in 0..tags.len() {
        let i = k % 3;
        recvs.push((i, k, b.recv(lb[i], k as u64, 64)));
    }
    let mut got = 0;
    until(&hosts, &mut [&mut a, &mut b], "tagspace traffic", |n| {
        for (i, k, op) in &recvs {
            if let Some(r) = n[1].take(*op) {
                let data = r.expect("tagspace receive").expect("data");
                assert_eq!(
                    data,
                    format!("{}:{k}", LIBS[*i]).into_bytes(),
                    "misdelivered"
                );
                got += 1;
            }
        }
        got == recvs.len()
    });
    for s in host_sends {
        s.wait(&ha, &[&hb]);
    }
    for r in early_recvs {
        r.wait(&hb, &[&ha]);
    }
    for (t, buf) in early.iter().zip(&early_bufs) {
        assert_eq!(&buf[..8], &bodies[t][..], "host message {t:#x} corrupted");
    }
    // A release on B while the host's unexpected messages (some in the control namespace, in
    // B's ids, in the id released) sit in the queue: A confirms over the exact ack receive,
    // and the id then stays quarantined while the host's messages wait in it.
    b.release(scratch_b);
    assert!(reg_b.is_quarantined(released));
    until(&hosts, &mut [&mut a, &mut b], "withdrawal confirmed", |n| {
        n[1].stats().acks_received >= 1
    });
    assert!(late
        .iter()
        .any(|&t| TagLayout::DEFAULT.namespace_of(t) == released));
    for _ in 0..100 {
        progress_all(&hosts, &mut [&mut a, &mut b]);
    }
    assert!(
        reg_b.is_quarantined(released),
        "the host's messages wait in the id"
    );
    assert_eq!(b.quarantine_held(), 1);
    // 0 stolen: every late message still waits, exactly once, for the host — after long
    // enough for own-worker mode's periodic stray sweep (every DRAIN_INTERVAL_MS) to have run.
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(5 * tagspace_ucx::node::DRAIN_INTERVAL_MS) {
        progress_all(&hosts, &mut [&mut a, &mut b]);
    }
    for &t in &late {
        assert!(
            hb.has_unexpected(t),
            "host message {t:#x} (namespace {}) was taken",
            TagLayout::DEFAULT.namespace_of(t)
        );
        let mut buf = [0u8; 16];
        hb.recv(t, &mut buf).wait(&hb, &[&ha]);
        assert_eq!(&buf[..8], &bodies[&t][..]);
        assert!(!hb.has_unexpected(t), "host message {t:#x} duplicated");
    }
    // With the host's messages received, nothing waits in the released id: it is free.
    until(&hosts, &mut [&mut a, &mut b], "released id freed", |_| {
        !reg_b.is_quarantined(released)
    });
    assert_eq!(b.quarantine_held(), 0);
    assert_eq!(hb.events.am0.lock().unwrap().len(), tags.len().div_ceil(10));
    assert_eq!(
        b.stats().stray,
        0,
        "tagspace counted host traffic as its strays"
    );
    for i in 0..3 {
        let c = b.counters(lb[i]);
        assert_eq!(c.received as usize, tags.len() / 3, "{}", LIBS[i]);
    }

    // A rendezvous send (4 MiB: above every UCX's threshold; 1.22 sends 64 KiB eagerly) `a`
    // never receives is in flight on the endpoint when it is detached:
    // it ends with PeerDown, and UCX still has it — the host must force-close the endpoint
    // (UCX >= 1.13 aborts destroying a flush-closed one with it; RawHost::close forces).
    let stuck = b.send(lb[0], ta, 424_242, vec![7u8; 4 << 20], 1000);
    for _ in 0..50 {
        progress_all(&hosts, &mut [&mut a, &mut b]);
    }
    assert!(
        !b.is_done(stuck),
        "a rendezvous send finished without its receiver"
    );
    assert!(!b.sends_given_up_on(b_ep));
    // Detach: the peer hears an orderly close; tagspace no longer uses the endpoint.
    b.detach(b_ep).unwrap();
    assert!(matches!(b.detach(b_ep), Err(NodeError::Usage(_))));
    assert!(matches!(
        b.take(stuck),
        Some(Err(NodeError::PeerDown { peer, .. })) if peer == ta
    ));
    assert!(b.sends_given_up_on(b_ep), "UCX still has the given-up send");
    until(
        &hosts,
        &mut [&mut a, &mut b],
        "peer down after detach",
        |n| {
            let mut down = false;
            while let Some(ev) = n[0].peer_event(la[0]) {
                down |= matches!(ev, PeerEvent::Down { peer, cause: None, .. } if peer == tb);
            }
            down
        },
    );
    drop(a);
    drop(b);
    // The host's worker still works after tagspace left: its own traffic and AM id 0 handler,
    // and an AM on tagspace's old control id is dropped by UCX (no handler, no crash).
    let control_am = CONTROL_ID as u32 * TagLayout::DEFAULT.am_ids_per_namespace();
    let after = ha.am_send(a_ep, control_am, b"late control frame");
    let mut buf = [0u8; 16];
    let r = hb.recv(0x5eed, &mut buf);
    ha.send(a_ep, 0x5eed, b"after").wait(&ha, &[&hb]);
    r.wait(&hb, &[&ha]);
    after.wait(&ha, &[&hb]);
    assert_eq!(&buf[..5], b"after");
    let am0 = hb.events.am0.lock().unwrap().len();
    ha.am_send(a_ep, 0, b"am0 after").wait(&ha, &[&hb]);
    let start = Instant::now();
    while hb.events.am0.lock().unwrap().len() == am0 {
        assert!(start.elapsed() < Duration::from_secs(30), "host AM 0 lost");
        hb.progress();
        ha.progress();
    }
    ha.close(a_ep, &[&hb]);
    hb.close(b_ep, &[&ha]);
}

#[test]
fn three_libraries_share_a_hosts_worker_and_endpoints_over_tcp() {
    host_side_by_side(Config::tcp(), HostProgress::Host);
}

#[test]
fn three_libraries_share_a_hosts_worker_and_endpoints_over_shm() {
    host_side_by_side(Config::shm(), HostProgress::Node);
}

#[test]
fn a_host_progress_thread_on_a_multi_worker() {
    let ucx = Config::tcp();
    let (ha, hb, a_ep, b_ep) = host_pair(&ucx, sys::ucs_thread_mode_t::UCS_THREAD_MODE_MULTI);
    // SAFETY: the workers outlive the nodes.
    let mut a =
        unsafe { Node::adopt_with_registry(ha.worker, host_cfg(), HostProgress::Host, registry()) }
            .unwrap();
    let mut b =
        unsafe { Node::adopt_with_registry(hb.worker, host_cfg(), HostProgress::Host, registry()) }
            .unwrap();
    let info = a.host().unwrap();
    if info.thread_mode != ThreadMode::Multi {
        // UCX built without --enable-mt (ucx1-sys's bundled 1.12.1) hands out SINGLE workers
        // whatever was asked; scripts/ucx-matrix.sh runs this test on 1.13.1 and 1.22.
        eprintln!(
            "a_host_progress_thread_on_a_multi_worker: not run: UCX {:?} gave a {:?} worker",
            info.ucx_version, info.thread_mode
        );
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let progress = progress_thread(&[ha.worker, hb.worker], &stop, Duration::ZERO);
    assert!(matches!(a.wait(1), Err(NodeError::Usage(_))));
    let la = register_all(&mut a, &[0, 1, 2]);
    let lb = register_all(&mut b, &[1, 2, 0]);
    unsafe { a.attach(a_ep, Role::Initiator) }.unwrap();
    unsafe { b.attach(b_ep, Role::Acceptor) }.unwrap();
    let (ta, tb) = (a.token(), b.token());
    let start = Instant::now();
    while !(0..3).all(|i| {
        a.route_tag(la[i], tb, 0).ok().flatten().is_some()
            && b.route_tag(lb[i], ta, 0).ok().flatten().is_some()
    }) {
        assert!(start.elapsed() < Duration::from_secs(30), "handshake");
        a.progress();
        b.progress();
    }
    // The host's own traffic from another thread of its own, concurrently.
    let a_ep_int = a_ep as usize;
    let host_lib = std::thread::spawn(move || {
        let bodies: Vec<[u8; 8]> = (0..200u64).map(|k| k.to_le_bytes()).collect();
        let mut reqs = Vec::new();
        for (k, body) in bodies.iter().enumerate() {
            // SAFETY: a MULTI worker's endpoint; each body outlives its request.
            unsafe {
                let param: sys::ucp_request_param_t = std::mem::zeroed();
                let p = sys::ucp_tag_send_nbx(
                    a_ep_int as sys::ucp_ep_h,
                    body.as_ptr() as *const c_void,
                    8,
                    0x7700_0000_0000_0000 | k as u64,
                    &param,
                );
                assert!(!is_err(p));
                reqs.push(Pending(p));
            }
        }
        while !reqs.iter().all(Pending::done) {
            std::thread::yield_now();
        }
        reqs.into_iter().for_each(Pending::free);
    });
    let mut ops = Vec::new();
    for k in 0..600u64 {
        let i = (k % 3) as usize;
        a.send(la[i], tb, k, k.to_le_bytes().to_vec(), 10_000);
        ops.push((k, 1, b.recv(lb[i], k, 8)));
        b.send(lb[i], ta, k, k.to_le_bytes().to_vec(), 10_000);
        ops.push((k, 0, a.recv(la[i], k, 8)));
    }
    let mut left = ops.len();
    let start = Instant::now();
    while left > 0 {
        assert!(start.elapsed() < Duration::from_secs(30), "{left} left");
        a.progress();
        b.progress();
        ops.retain(|(k, side, op)| {
            let node = if *side == 0 { &mut a } else { &mut b };
            match node.take(*op) {
                Some(r) => {
                    assert_eq!(r.unwrap().unwrap(), k.to_le_bytes().to_vec());
                    left -= 1;
                    false
                }
                None => true,
            }
        });
    }
    host_lib.join().unwrap();
    // Every host message is still there for the host, whichever thread progressed.
    for k in 0..200u64 {
        let mut buf = [0u8; 8];
        let r = hb.recv(0x7700_0000_0000_0000 | k, &mut buf);
        let start = Instant::now();
        while !r.done() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "host message {k} lost"
            );
            std::thread::yield_now();
        }
        r.free();
        assert_eq!(buf, k.to_le_bytes());
    }
    // peer_failed: the host's error handler would call it; tagspace fails what waits on B.
    let waiting = a.recv_from(la[0], tb, 999_999, 8);
    a.peer_failed(a_ep, -25);
    let start = Instant::now();
    while !a.is_done(waiting) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "peer_failed not handled"
        );
        a.progress();
        b.progress();
    }
    assert!(matches!(
        a.take(waiting),
        Some(Err(NodeError::PeerDown { peer, cause: Some(_) })) if peer == tb
    ));
    assert_eq!(a.live_connections_to(tb), 0);
    drop(a);
    drop(b);
    stop.store(true, Ordering::Relaxed);
    progress.join().unwrap();
    ha.close(a_ep, &[&hb]);
    hb.close(b_ep, &[&ha]);
}

#[test]
fn adopting_checks_what_it_is_given() {
    let ha = RawHost::new(
        &Config::tcp(),
        sys::ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE,
    );
    // SAFETY: NULL is refused before use; the worker is live.
    let null = unsafe { Node::adopt(ptr::null_mut(), host_cfg(), HostProgress::Node) };
    assert!(matches!(null, Err(NodeError::Usage(_))));
    let listening = unsafe {
        Node::adopt_with_registry(
            ha.worker,
            NodeConfig::loopback(Config::tcp()),
            HostProgress::Node,
            registry(),
        )
    };
    assert!(matches!(listening, Err(NodeError::Usage(_))));
    let mut n =
        unsafe { Node::adopt_with_registry(ha.worker, host_cfg(), HostProgress::Node, registry()) }
            .unwrap();
    assert!(matches!(
        unsafe { n.attach(ptr::null_mut(), Role::Initiator) },
        Err(NodeError::Usage(_))
    ));
    assert!(matches!(
        n.detach(0x1000 as sys::ucp_ep_h),
        Err(NodeError::Usage(_))
    ));
    n.peer_failed(0x1000 as sys::ucp_ep_h, -25); // not attached: ignored
    n.progress();
}

/// A hostile peer on plain libucp sends control frames before the host attached its endpoint:
/// the node keeps only a bounded number of them, and garbage among them, once the host
/// attaches, ends that connection with a protocol error and nothing else.
#[test]
fn frames_before_attach_are_bounded_and_garbage_is_refused() {
    use tagspace_ucx::node::{EARLY_BYTES_MAX, UNATTACHED_FRAMES_MAX};
    let ucx = Config::tcp();
    let hostile = RawHost::new(&ucx, sys::ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE);
    let hb = RawHost::new(&ucx, sys::ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE);
    let h_ep = hostile.connect(&hb.address());
    let b_ep = hb.connect(&hostile.address());
    // SAFETY: the worker outlives the node.
    let mut b =
        unsafe { Node::adopt_with_registry(hb.worker, host_cfg(), HostProgress::Node, registry()) }
            .unwrap();
    let control_am = CONTROL_ID as u32 * TagLayout::DEFAULT.am_ids_per_namespace();
    let frame = [0xa5u8; 100];
    let sent = 1000;
    for _ in 0..sent {
        hostile
            .am_send_reply(h_ep, control_am, &frame)
            .wait(&hostile, &[&hb]);
        b.progress();
    }
    let kept = UNATTACHED_FRAMES_MAX.min(EARLY_BYTES_MAX / frame.len()) as u64;
    let start = Instant::now();
    while b.stats().unattached_dropped < sent - kept {
        assert!(start.elapsed() < Duration::from_secs(30), "{:?}", b.stats());
        hostile.progress();
        b.progress();
    }
    for _ in 0..100 {
        hostile.progress();
        b.progress();
    }
    assert_eq!(
        b.stats().unattached_dropped,
        sent - kept,
        "bounded, oldest dropped"
    );
    assert_eq!(
        b.stats().protocol_errors,
        0,
        "nothing is parsed before attach"
    );
    // SAFETY: a live endpoint of B's worker, kept until the node's drop.
    unsafe { b.attach(b_ep, Role::Acceptor) }.unwrap();
    // The kept frames are replayed into the new connection: more than its wire-up bound
    // (EARLY_FRAMES_MAX) or, within it, garbage — either way the connection is closed.
    let start = Instant::now();
    while b.stats().protocol_errors + b.stats().early_overflows == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "garbage accepted: {:?}",
            b.stats()
        );
        hostile.progress();
        b.progress();
    }
    assert_eq!(b.stats().protocol_errors + b.stats().early_overflows, 1);
    assert!(b.peers().is_empty());
    b.detach(b_ep).unwrap();
    drop(b);
    hostile.close(h_ep, &[&hb]);
    hb.close(b_ep, &[&hostile]);
}

/// On a host's worker a peer lost to a fault is not dialled (the host owns the endpoints): it
/// is reported to the host once, with where the peer said it listens; a side that knows no
/// address for its peer (B: A told none) reports nothing.
#[test]
fn a_peer_lost_to_a_fault_is_reported_to_the_host_not_dialled() {
    let (ha, hb, a_ep, b_ep) = host_pair(
        &Config::tcp(),
        sys::ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE,
    );
    let hosts = [&ha, &hb];
    let addr_b: std::net::SocketAddr = "10.9.8.7:13337".parse().unwrap();
    let cfg_b = NodeConfig {
        advertise: Some(addr_b),
        ..host_cfg()
    };
    // SAFETY: the hosts' workers outlive the nodes (dropped below, before the hosts).
    let mut a =
        unsafe { Node::adopt_with_registry(ha.worker, host_cfg(), HostProgress::Node, registry()) }
            .unwrap();
    let mut b =
        unsafe { Node::adopt_with_registry(hb.worker, cfg_b, HostProgress::Node, registry()) }
            .unwrap();
    register_all(&mut a, &[0]);
    register_all(&mut b, &[0]);
    // SAFETY: live endpoints, kept until detach / the node's drop.
    unsafe { a.attach(a_ep, Role::Initiator) }.unwrap();
    unsafe { b.attach(b_ep, Role::Acceptor) }.unwrap();
    let (ta, tb) = (a.token(), b.token());
    until(&hosts, &mut [&mut a, &mut b], "handshake", |n| {
        n[0].live_connections_to(tb) == 1 && n[1].live_connections_to(ta) == 1
    });
    for _ in 0..100 {
        progress_all(&hosts, &mut [&mut a, &mut b]);
    }
    // The host's endpoint to B failed (its error handler reports it).
    a.peer_failed(a_ep, -25);
    until(&hosts, &mut [&mut a, &mut b], "A sees B go", |n| {
        n[0].live_connections_to(tb) == 0
    });
    // Reported at the first dial's time (200 ms less up to 100, the default backoff): a CLOSE
    // that comes late behind the endpoint's failure has that long to cancel it.
    let lost = Instant::now();
    let mut report = None;
    until(&hosts, &mut [&mut a, &mut b], "no report", |n| {
        report = report.or_else(|| n[0].take_reconnect_needed());
        report.is_some()
    });
    assert!(
        lost.elapsed() >= Duration::from_millis(90),
        "reported before its time"
    );
    assert_eq!(report, Some((tb, addr_b)));
    for _ in 0..200 {
        progress_all(&hosts, &mut [&mut a, &mut b]);
    }
    assert_eq!(a.take_reconnect_needed(), None, "reported once");
    assert_eq!(a.stats().redials, 0, "nothing dialled on a host's worker");
    b.peer_failed(b_ep, -25);
    until(&hosts, &mut [&mut a, &mut b], "B sees A go", |n| {
        n[1].live_connections_to(ta) == 0
    });
    assert_eq!(
        b.take_reconnect_needed(),
        None,
        "A told no address: B cannot dial it"
    );
    drop((a, b));
}
