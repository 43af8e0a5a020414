//! The conformance cases. Each takes a fresh cluster and panics with a message on failure.

use crate::{wait, Cluster, Lib, Proc};

const T: u64 = 1_000; // default send timeout, ms
const ROUNDS: usize = 20;

/// Spawns `n` processes and connects every pair once (lower index connects).
pub fn mesh<C: Cluster + ?Sized>(c: &mut C, n: usize) -> Vec<Proc> {
    let procs: Vec<Proc> = (0..n).map(|_| c.spawn()).collect();
    for i in 0..n {
        for j in i + 1..n {
            c.connect(procs[i], procs[j]).expect("connect");
        }
    }
    c.settle();
    procs
}

fn ok<C: Cluster + ?Sized>(c: &mut C, p: Proc, op: u64) -> Option<Vec<u8>> {
    match wait(c, p, op, ROUNDS) {
        Some(Ok(d)) => d,
        Some(Err(e)) => panic!("operation failed: {e}"),
        None => panic!("operation did not finish"),
    }
}

fn register_all<C: Cluster + ?Sized>(c: &mut C, p: Proc, names: &[&str]) -> Vec<Lib> {
    names
        .iter()
        .map(|n| c.register(p, n).expect("register"))
        .collect()
}

/// Three libraries share one endpoint; each gets exactly its own messages and inbox traffic.
pub fn isolation_three_libraries_one_endpoint<C: Cluster + ?Sized>(c: &mut C) {
    let names = ["dask", "cuml", "blazingsql"];
    let p = mesh(c, 2);
    let (a, b) = (p[0], p[1]);
    let la = register_all(c, a, &names);
    let rev: Vec<&str> = names.iter().rev().copied().collect();
    let lb_rev = register_all(c, b, &rev);
    let lb: Vec<Lib> = (0..3).map(|k| lb_rev[2 - k]).collect();
    c.settle();
    let mut sends = Vec::new();
    for k in 0..3 {
        for seq in 0..50u64 {
            let data = format!("{}:{seq}", names[k]);
            sends.push(c.send(a, la[k], b, seq, data.as_bytes(), T));
        }
        let op = c.send_inbox(a, la[k], b, format!("begin:{}", names[k]).as_bytes(), T);
        sends.push(op);
    }
    c.settle();
    for op in sends {
        ok(c, a, op);
    }
    for k in 0..3 {
        for seq in 0..50u64 {
            let op = c.recv(b, lb[k], seq);
            let got = ok(c, b, op).expect("data");
            assert_eq!(
                got,
                format!("{}:{seq}", names[k]).as_bytes(),
                "misdelivered"
            );
        }
        let inbox = c.probe_inbox(b, lb[k]).expect("inbox message");
        assert_eq!(inbox, format!("begin:{}", names[k]).as_bytes());
        assert_eq!(c.probe_inbox(b, lb[k]), None, "inbox delivered twice");
        assert_eq!(c.counters(b, lb[k]).received, 51);
        assert_eq!(c.counters(a, la[k]).sent, 51);
    }
    assert_eq!(c.live_connections(a, b), 1, "one shared endpoint per peer");
    assert_eq!(c.unexpected(b), 0);
}

/// Each peer's tags are its own (the pair field): two peers send the same payload to the same
/// library, and receives tied to each sender take only that sender's message — the one posted
/// first does not take the other peer's, which arrives first. A receive from any peer takes
/// either; a copy of the tag with a pair value nobody was given (what a process that never
/// proved itself here can send, here through a proven peer's endpoint) is taken by none, and
/// the drain counts it.
pub fn a_peers_tags_match_only_its_own_receives<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 3);
    let (a, b, x) = (p[0], p[1], p[2]);
    let la = c.register(a, "lib").unwrap();
    let lb = c.register(b, "lib").unwrap();
    let lx = c.register(x, "lib").unwrap();
    c.settle();
    let from_a = c.recv_from(b, lb, a, 7);
    let from_x = c.recv_from(b, lb, x, 7);
    // x's message comes first: it must wait for the receive tied to x, not take a's.
    let s = c.send(x, lx, b, 7, b"from-x", T);
    ok(c, x, s);
    c.settle();
    assert_eq!(
        c.take(b, from_a),
        None,
        "a's receive took another peer's message"
    );
    assert_eq!(ok(c, b, from_x).unwrap(), b"from-x");
    let s = c.send(a, la, b, 7, b"from-a", T);
    ok(c, a, s);
    assert_eq!(ok(c, b, from_a).unwrap(), b"from-a");
    // A receive from any peer takes a proven peer's message, never a made-up one.
    let layout = c.layout();
    let forged = layout.base(c.namespace_id(b, lb)) | 9;
    let strays = c.stray(b);
    let any = c.recv(b, lb, 9);
    c.legacy_send(x, b, forged, b"forged");
    c.settle();
    assert_eq!(
        c.take(b, any),
        None,
        "a receive from any peer took a forged tag"
    );
    assert!(c.stray(b) > strays, "the forged message is counted");
    let s = c.send(a, la, b, 9, b"real", T);
    ok(c, a, s);
    assert_eq!(ok(c, b, any).unwrap(), b"real");
    c.settle();
    assert_eq!(c.unexpected(b), 0, "nothing forged left waiting");
}

/// A legacy library outside tagspace shares the worker: its peeking wildcard probes lose
/// nothing, its own tags (namespace field 0) never reach a tagspace library, and its full
/// wildcard probe *with remove* does steal — which is why libraries must use tagspace.
pub fn legacy_wildcard_probe_outside_tagspace<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 2);
    let (a, b) = (p[0], p[1]);
    let la = register_all(c, a, &["dask", "blazingsql"]);
    let lb = register_all(c, b, &["dask", "blazingsql"]);
    c.settle();
    let legacy_tag = 0x0000_0000_0000_0000u64; // BlazingSQL's old "begin" tag, ns field 0
    c.legacy_send(a, b, legacy_tag, b"legacy-begin");
    let s1 = c.send(a, la[0], b, 0, b"dask:0", T);
    let s2 = c.send(a, la[1], b, 0x1_0000, b"blazing:1", T);
    c.settle();
    ok(c, a, s1);
    ok(c, a, s2);
    // BlazingSQL's old probe (low 16 bits zero) and Spark's (mask 0), without remove: they see
    // messages but take none.
    assert!(c.legacy_probe(b, 0, 0xFFFF, false).is_some());
    assert!(c.legacy_probe(b, u64::MAX, 0, false).is_some());
    // tagspace receives still get exactly their own.
    let r = c.recv(b, lb[0], 0);
    assert_eq!(ok(c, b, r).unwrap(), b"dask:0");
    let r = c.recv(b, lb[1], 0x1_0000);
    assert_eq!(ok(c, b, r).unwrap(), b"blazing:1");
    // The legacy message never went to a tagspace library, and was not drained as stray
    // (id 0 belongs to legacy code): the legacy library can still take it.
    c.advance_ms(50);
    assert_eq!(c.stray(b), 0);
    assert_eq!(
        c.legacy_probe(b, legacy_tag, u64::MAX, true),
        Some(legacy_tag)
    );
    // A full-wildcard probe with remove takes whatever is oldest, tagspace's included: code
    // outside tagspace on a shared worker can still steal.
    let s3 = c.send(a, la[0], b, 5, b"dask:5", T);
    c.settle();
    ok(c, a, s3);
    let stolen = c
        .legacy_probe(b, u64::MAX, 0, true)
        .expect("wildcard takes it");
    assert_eq!(
        c.layout().namespace_of(stolen),
        c.layout().namespace_of((2u64) << 56)
    );
}

/// P1: the same names registered in different orders (so with different ids) route correctly.
pub fn different_registration_orders<C: Cluster + ?Sized>(c: &mut C) {
    let names = ["engine-a", "engine-b", "engine-c"];
    let procs: Vec<Proc> = (0..3).map(|_| c.spawn()).collect();
    let mut libs = Vec::new();
    for (i, &p) in procs.iter().enumerate() {
        // A filler in some processes shifts the dynamic ids further.
        if i == 1 {
            c.register(p, "filler").unwrap();
        }
        let mut order: Vec<usize> = (0..3).collect();
        order.rotate_left(i);
        let mut l = vec![0; 3];
        for k in order {
            l[k] = c.register(p, names[k]).unwrap();
        }
        libs.push(l);
    }
    for i in 0..3 {
        for j in i + 1..3 {
            c.connect(procs[i], procs[j]).unwrap();
        }
    }
    c.settle();
    for (i, &src) in procs.iter().enumerate() {
        for (j, &dst) in procs.iter().enumerate() {
            if i == j {
                continue;
            }
            for k in 0..3 {
                let payload = (i * 10 + k) as u64;
                let op = c.send(src, libs[i][k], dst, payload, names[k].as_bytes(), T);
                ok(c, src, op);
                let r = c.recv(dst, libs[j][k], payload);
                assert_eq!(ok(c, dst, r).unwrap(), names[k].as_bytes());
            }
        }
    }
}

/// P2: a send to a name the peer never registers waits for the deadline, then fails clearly.
pub fn send_to_missing_name_waits_then_fails<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 2);
    let only = c.register(p[0], "only-here").unwrap();
    c.settle();
    let op = c.send(p[0], only, p[1], 1, b"x", 50);
    c.settle();
    assert!(c.take(p[0], op).is_none(), "gave up before the deadline");
    c.advance_ms(60);
    let err = wait(c, p[0], op, ROUNDS)
        .expect("finished")
        .expect_err("must fail");
    assert!(
        err.contains("only-here") && err.contains("not registered"),
        "{err}"
    );
    assert_eq!(c.counters(p[0], only).failed, 1);
}

/// P2: a send waits for a peer that registers the name before the deadline.
pub fn send_waits_for_late_announcement<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 2);
    let a = c.register(p[0], "late").unwrap();
    c.settle();
    let op = c.send(p[0], a, p[1], 3, b"hello", 100);
    c.advance_ms(20);
    assert!(c.take(p[0], op).is_none());
    let b = c.register(p[1], "late").unwrap();
    c.settle();
    ok(c, p[0], op);
    let r = c.recv(p[1], b, 3);
    assert_eq!(ok(c, p[1], r).unwrap(), b"hello");
}

/// A send issued while the connection is still handshaking waits for it instead of failing;
/// a send to a peer nobody connects to fails at the deadline, saying so.
pub fn send_during_handshake_waits<C: Cluster + ?Sized>(c: &mut C) {
    let (a, b, lonely) = (c.spawn(), c.spawn(), c.spawn());
    let la = c.register(a, "dask").unwrap();
    let lb = c.register(b, "dask").unwrap();
    c.connect(a, b).unwrap();
    let op = c.send(a, la, b, 1, b"early", T); // before any progress: no HELLO yet
    let r = c.recv(b, lb, 1);
    assert_eq!(ok(c, b, r).unwrap(), b"early");
    ok(c, a, op);
    let never = c.send(a, la, lonely, 1, b"x", 30);
    c.advance_ms(40);
    let err = wait(c, a, never, ROUNDS)
        .expect("finished")
        .expect_err("no connection");
    assert!(err.contains("no open connection"), "{err}");
}

/// P4: two processes connecting to each other at once end with one connection.
pub fn simultaneous_connect_keeps_one<C: Cluster + ?Sized>(c: &mut C) {
    let (a, b) = (c.spawn(), c.spawn());
    let la = c.register(a, "dask").unwrap();
    let lb = c.register(b, "dask").unwrap();
    c.connect(a, b).unwrap();
    c.connect(b, a).unwrap();
    c.settle();
    assert_eq!(c.live_connections(a, b), 1);
    assert_eq!(c.live_connections(b, a), 1);
    for (src, ls, dst, ld) in [(a, la, b, lb), (b, lb, a, la)] {
        let op = c.send(src, ls, dst, 9, b"ping", T);
        ok(c, src, op);
        let r = c.recv(dst, ld, 9);
        assert_eq!(ok(c, dst, r).unwrap(), b"ping");
    }
    assert_eq!(c.protocol_errors(a) + c.protocol_errors(b), 0);
}

/// P5: malformed control bytes close that peer's connection only.
pub fn malformed_control_bytes_close_only_that_peer<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 3);
    let (a, hostile, good) = (p[0], p[1], p[2]);
    let la = c.register(a, "dask").unwrap();
    let lg = c.register(good, "dask").unwrap();
    c.settle();
    c.inject_control(hostile, a, b"TS\x01\x02\x00\x09\x00\x10\x40garbage");
    c.settle();
    assert_eq!(c.protocol_errors(a), 1);
    assert_eq!(
        c.live_connections(a, hostile),
        0,
        "hostile peer must be cut off"
    );
    assert_eq!(c.live_connections(a, good), 1);
    let op = c.send(a, la, good, 1, b"still fine", T);
    ok(c, a, op);
    let r = c.recv(good, lg, 1);
    assert_eq!(ok(c, good, r).unwrap(), b"still fine");
}

/// D5: a peer that sends more control frames in a second than the per-connection limit
/// (`PeerLimits`, the core engine's, default 1 024) is cut off — valid frames too (ADDRESS
/// frames here, each of which a proven peer may send) — and only that peer. (Not PINGs: the
/// flooder here is an honest node whose frames are injected beside its own, and its session
/// rightly closes on the PONGs it never asked for; where that close overtook the flood, on
/// UCX 1.22 over shared memory, the flood was never counted.)
pub fn a_peer_flooding_control_frames_is_cut_off_alone<C: Cluster + ?Sized>(c: &mut C) {
    use tagspace_core::wire::{Address, Frame};
    let p = mesh(c, 3);
    let (a, flooder, good) = (p[0], p[1], p[2]);
    let la = c.register(a, "dask").unwrap();
    let lg = c.register(good, "dask").unwrap();
    c.settle();
    let mut buf = [0u8; 64];
    for port in 0..1100u16 {
        let addr = Address::Ip(core::net::SocketAddr::from(([127, 0, 0, 1], 20_000 + port)));
        let n = Frame::Address(addr)
            .encode(&mut buf)
            .expect("an ADDRESS fits");
        c.inject_control(flooder, a, &buf[..n]);
    }
    c.settle();
    assert_eq!(c.flood_closes(a), 1, "the flooder is cut off for its flood");
    assert_eq!(c.live_connections(a, flooder), 0);
    assert_eq!(c.flood_closes(good), 0);
    assert_eq!(c.live_connections(a, good), 1);
    let op = c.send(a, la, good, 1, b"still fine", T);
    ok(c, a, op);
    let r = c.recv(good, lg, 1);
    assert_eq!(ok(c, good, r).unwrap(), b"still fine");
}

/// D5 for tag messages: where a library receives only through the node and holds its backlog,
/// a proven peer that leaves more than the limit waiting there is cut off alone (`Flood`) and
/// nothing of its flood stays; another peer's messages waiting in the same namespace are all
/// received, once each, in the order sent. (The UCX suite's control run, without the limit,
/// has every flood message waiting: `adapter-ucx/tests/backlog.rs`.)
pub fn a_peer_over_a_held_backlog_is_cut_off_alone<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 3);
    let (a, flooder, good) = (p[0], p[1], p[2]);
    let la = c.register(a, "dask").unwrap();
    let lf = c.register(flooder, "dask").unwrap();
    let lg = c.register(good, "dask").unwrap();
    c.settle();
    c.hold_backlog(a, la, 20).unwrap();
    let honest: Vec<u64> = (0..10u8).map(|i| c.send(good, lg, a, 7, &[i], T)).collect();
    c.advance_ms(20);
    for i in 0..100u64 {
        c.send(flooder, lf, a, 1000 + i, b"flood", T);
    }
    c.advance_ms(20);
    c.advance_ms(20);
    assert_eq!(c.flood_closes(a), 1, "the flooder is cut off");
    assert_eq!(c.live_connections(a, flooder), 0);
    assert_eq!(c.live_connections(a, good), 1);
    for i in 0..10u8 {
        let r = c.recv_from(a, la, good, 7);
        assert_eq!(ok(c, a, r).unwrap(), vec![i], "in the order sent");
    }
    for s in honest {
        ok(c, good, s);
    }
    assert_eq!(c.unexpected(a), 0, "nothing of the flood waits");
}

/// A HELLO claiming `victim`'s public key (all a peer without its secret key can copy), and a
/// PROOF of made-up bytes.
fn forged_handshake(layout: &tagspace_core::TagLayout, victim: Proc) -> (Vec<u8>, Vec<u8>) {
    use tagspace_core::wire::{Frame, HelloEncoder, Role, MAX_FRAME_LEN};
    let mut buf = vec![0u8; MAX_FRAME_LEN];
    let mut e = HelloEncoder::new(
        &mut buf,
        layout.fingerprint(),
        Role::Initiator,
        layout.namespace_field().width() as u8,
        crate::identity(victim).public_key(),
        &[0x42; 16],
    )
    .unwrap();
    e.push(16, &tagspace_core::Name::new("dask").unwrap())
        .unwrap();
    let n = e.finish();
    let hello = buf[..n].to_vec();
    let n = Frame::Proof {
        signature: [0x42; 64],
    }
    .encode(&mut buf)
    .unwrap();
    (hello, buf[..n].to_vec())
}

/// P6: a connection that claims another process's identity is never indexed as that process,
/// whether it comes before the real one or while it is connected, and cannot supersede it; a
/// PROOF it made up closes it as a protocol error.
pub fn claimed_identity_is_not_a_peer<C: Cluster + ?Sized>(c: &mut C) {
    let (a, b) = (c.spawn(), c.spawn());
    let la = c.register(a, "dask").unwrap();
    let lb = c.register(b, "dask").unwrap();
    let (hello, proof) = forged_handshake(&c.layout(), b);
    // the claim comes first and never proves anything
    c.raw_control(a, std::slice::from_ref(&hello));
    c.settle();
    assert_eq!(c.live_connections(a, b), 0, "an unproven claim was indexed");
    assert_eq!(
        c.protocol_errors(a),
        0,
        "the claim is pending, not yet refused"
    );
    c.connect(b, a).unwrap();
    c.settle();
    assert_eq!(c.live_connections(a, b), 1);
    let op = c.send(a, la, b, 1, b"to the real b", T);
    ok(c, a, op);
    let r = c.recv(b, lb, 1);
    assert_eq!(ok(c, b, r).unwrap(), b"to the real b");
    // with the real b connected: the claim and a made-up proof
    c.raw_control(a, &[hello, proof]);
    c.settle();
    assert_eq!(c.protocol_errors(a), 1, "the forged proof is refused");
    assert_eq!(c.live_connections(a, b), 1, "the real connection stays");
    let op = c.send(a, la, b, 2, b"still the real b", T);
    ok(c, a, op);
    let r = c.recv(b, lb, 2);
    assert_eq!(ok(c, b, r).unwrap(), b"still the real b");
}

/// The heartbeat (core `engine::Deadlines`, default `Liveness`: a PING a second, 30 s to
/// answer): a peer that stops calling `progress` but stays alive — the transport sees nothing
/// wrong — is cut off once its PING has waited the timeout, not before; a send in flight to it
/// ends instead of waiting for ever; peers that progress are never cut off, however much time
/// passes.
pub fn a_peer_that_stops_progressing_is_cut_off<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 3);
    let (a, b, z) = (p[0], p[1], p[2]);
    let la = c.register(a, "dask").unwrap();
    for q in [b, z] {
        c.register(q, "dask").unwrap();
    }
    c.settle();
    for _ in 0..45 {
        c.advance_ms(1000);
    }
    for (x, y) in [(a, b), (a, z), (b, z)] {
        assert_eq!(
            c.live_connections(x, y),
            1,
            "{x}-{y} cut off while progressing"
        );
    }
    c.freeze(z);
    // Rendezvous-sized: it can only finish when z takes part.
    let op = c.send(a, la, z, 9, &[7u8; 64 * 1024], T);
    for _ in 0..20 {
        c.advance_ms(1000);
    }
    assert_eq!(c.live_connections(a, z), 1, "cut off before the timeout");
    assert!(
        c.take(a, op).is_none(),
        "the send to a frozen peer finished"
    );
    for _ in 0..15 {
        c.advance_ms(1000);
    }
    assert_eq!(c.live_connections(a, z), 0, "a frozen peer was not cut off");
    assert_eq!(c.live_connections(b, z), 0, "a frozen peer was not cut off");
    assert_eq!(
        c.live_connections(a, b),
        1,
        "the others keep their connection"
    );
    assert!(
        matches!(wait(c, a, op, ROUNDS), Some(Err(_))),
        "the send to the frozen peer did not end with an error"
    );
}

/// Sends `payload` from `x` to `y` (a receive tied to `x` posted first) and checks it arrives
/// once: a second receive for the same payload from `x` finds nothing.
fn exactly_once<C: Cluster + ?Sized>(c: &mut C, libs: &[Lib], x: Proc, y: Proc, payload: u64) {
    let want = format!("{payload} from {x} to {y}").into_bytes();
    let r = c.recv_from(y, libs[y], x, payload);
    let s = c.send(x, libs[x], y, payload, &want, T);
    ok(c, x, s);
    assert_eq!(ok(c, y, r), Some(want), "{x} -> {y}");
    let again = c.recv_from(y, libs[y], x, payload);
    for _ in 0..3 {
        c.advance_ms(100);
    }
    assert!(c.take(y, again).is_none(), "{x} -> {y}: delivered twice");
}

/// Advances time in `step_ms` steps, at most `steps`, until `done`; whether it got there.
fn advance_until<C: Cluster + ?Sized>(
    c: &mut C,
    step_ms: u64,
    steps: usize,
    mut done: impl FnMut(&C) -> bool,
) -> bool {
    for _ in 0..steps {
        if done(c) {
            return true;
        }
        c.advance_ms(step_ms);
    }
    done(c)
}

/// A process stopped (SIGSTOP) past the heartbeat's timeout is cut off by its peers; when it
/// resumes it rejoins by itself — its peers, whose heartbeat cut it off, dial it back, the
/// same identities prove themselves again — and traffic resumes, exactly once each way. What
/// was sent to it while it was away failed (`PeerDown`); nothing is retransmitted. The stopped
/// process is the middle token of three, so that each rank of the redial's connection against
/// the old one is met.
pub fn a_stopped_process_rejoins_when_it_resumes<C: Cluster + ?Sized>(c: &mut C) {
    let mut p = mesh(c, 3);
    let libs: Vec<Lib> = p.iter().map(|&q| c.register(q, "dask").unwrap()).collect();
    p.sort_by_key(|&q| crate::identity(q).token());
    let (lo, z, hi) = (p[0], p[1], p[2]);
    c.settle();
    exactly_once(c, &libs, lo, z, 1);
    c.freeze(z);
    let cut_off = advance_until(c, 1000, 40, |c| {
        c.live_connections(lo, z) == 0 && c.live_connections(hi, z) == 0
    });
    assert!(cut_off, "the stopped process was not cut off");
    assert_eq!(c.live_connections(lo, hi), 1, "the others keep theirs");
    let lost = c.send(lo, libs[lo], z, 2, b"while stopped", T);
    assert!(
        matches!(wait(c, lo, lost, ROUNDS), Some(Err(_))),
        "a send to a process cut off did not fail"
    );
    c.thaw(z);
    let back = advance_until(c, 500, 80, |c| {
        [(lo, z), (z, lo), (hi, z), (z, hi)]
            .iter()
            .all(|&(x, y)| c.live_connections(x, y) == 1)
    });
    assert!(back, "the resumed process did not rejoin both peers");
    for (x, y) in [(lo, z), (z, lo), (hi, z), (z, hi)] {
        exactly_once(c, &libs, x, y, 3);
    }
    let r = c.recv_from(z, libs[z], lo, 2);
    c.advance_ms(1000);
    assert!(c.take(z, r).is_none(), "what failed while stopped arrived");
    assert!(
        c.reconnects(lo) + c.reconnects(z) + c.reconnects(hi) >= 2,
        "each pair came back by a dial"
    );
}

/// The link between two processes fails while both live: each sees the other go, the
/// process beside them keeps both, and once the link works again the pair reconnects by
/// itself (each side that saw the failure dials; the redials settle on one connection) and traffic resumes exactly once each way.
pub fn a_cut_link_reconnects_when_it_heals<C: Cluster + ?Sized>(c: &mut C) {
    let mut p = mesh(c, 3);
    let libs: Vec<Lib> = p.iter().map(|&q| c.register(q, "dask").unwrap()).collect();
    c.settle();
    let bystander = p.pop().unwrap();
    let (a, b) = (p[0], p[1]);
    exactly_once(c, &libs, a, b, 1);
    c.cut(a, b);
    c.settle();
    assert_eq!(c.live_connections(a, b), 0, "the cut was not seen");
    let lost = c.send(a, libs[a], b, 2, b"across the cut", T);
    assert!(
        matches!(wait(c, a, lost, ROUNDS), Some(Err(_))),
        "a send across a cut link did not fail"
    );
    for q in [a, b] {
        assert_eq!(
            c.live_connections(q, bystander),
            1,
            "{q} lost the bystander"
        );
    }
    c.advance_ms(2000);
    c.heal(a, b);
    let back = advance_until(c, 1000, 60, |c| {
        c.live_connections(a, b) == 1 && c.live_connections(b, a) == 1
    });
    assert!(back, "the pair did not reconnect");
    exactly_once(c, &libs, a, b, 3);
    exactly_once(c, &libs, b, a, 4);
    assert!(c.reconnects(a) + c.reconnects(b) >= 1);
}

/// R7: a released id is not handed out again until the peers told about it have confirmed
/// that nothing more can arrive for it; then what did arrive is drained as strays, so a message
/// sent to the old name never reaches the name that takes the id next.
pub fn released_id_is_quarantined_until_peers_confirm<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 2);
    let (a, b) = (p[0], p[1]);
    let old = c.register(a, "old-name").unwrap();
    let lb = c.register(b, "old-name").unwrap();
    let id = c.namespace_id(a, old);
    c.settle();
    // A message to the old name that its library never receives: it waits in a's queue.
    let op = c.send(b, lb, a, 5, b"for the old name", T);
    ok(c, b, op);
    c.settle();
    let strays = c.stray(a);
    c.release(a, old);
    // Before b has confirmed, every other free id is handed out, never this one.
    let mut taken = Vec::new();
    let err = loop {
        match c.register(a, &format!("filler-{}", taken.len())) {
            Ok(l) => {
                assert_ne!(c.namespace_id(a, l), id, "a quarantined id was handed out");
                taken.push(l);
            }
            Err(e) => break e,
        }
    };
    assert!(err.contains("quarantined"), "{err}");
    // b acknowledges (frame and tag); a drains what came for the id and frees it.
    c.settle();
    assert_eq!(
        c.stray(a),
        strays + 1,
        "the old name's message is drained as a stray"
    );
    let new = c.register(a, "new-name").unwrap();
    assert_eq!(c.namespace_id(a, new), id, "the only free id");
    let r = c.recv(a, new, 5);
    c.settle();
    assert_eq!(
        c.take(a, r),
        None,
        "the old name's message reached the new name"
    );
}

/// R7 with traffic: b streams to a's name while a releases it, and the id comes round to the
/// next name (every other id is taken), over several release/register cycles. Nothing sent to
/// a released name ever completes a receive of the name that took its id; its messages are
/// counted as strays. And a receive the released library left posted takes nothing meant for
/// the next name (release cancels it).
pub fn released_names_messages_in_flight_never_reach_the_next_owner<C: Cluster + ?Sized>(
    c: &mut C,
) {
    const CYCLES: u64 = 3;
    const N: u64 = 20;
    const FIRST: u64 = 1_000_000; // + cycle: the payload of the next name's first message
    let p = mesh(c, 2);
    let (a, b) = (p[0], p[1]);
    let mut cur = c.register(a, "name-0").unwrap();
    let id = c.namespace_id(a, cur);
    // Every other free id taken: the released id is the one handed out next.
    let mut fillers = 0;
    while c.register(a, &format!("filler-{fillers}")).is_ok() {
        fillers += 1;
    }
    assert!(fillers > 0);
    let mut lb = c.register(b, "name-0").unwrap();
    c.settle(); // b routes name-0 to a's id
    let mut stale_receives = Vec::new();
    for k in 0..CYCLES {
        let (name, next) = (format!("name-{k}"), format!("name-{}", k + 1));
        let sends: Vec<_> = (0..N)
            .map(|i| {
                let payload = k * 100 + i;
                c.send(b, lb, a, payload, format!("{name}:{i}").as_bytes(), T)
            })
            .collect();
        // A receive the library leaves posted when it goes.
        let orphan = c.recv(a, cur, FIRST + k);
        let strays = c.stray(a);
        c.release(a, cur); // b's messages in flight
        let err = c.register(a, &next).unwrap_err();
        assert!(err.contains("quarantined"), "cycle {k}: {err}");
        for op in sends {
            ok(c, b, op);
        }
        c.settle();
        assert_eq!(
            c.stray(a),
            strays + N,
            "cycle {k}: the released name's messages are strays"
        );
        cur = c.register(a, &next).unwrap();
        assert_eq!(c.namespace_id(a, cur), id, "cycle {k}: the only free id");
        // Receives of the new name for exactly the old name's payloads: none may complete.
        stale_receives.extend((0..N).map(|i| (k, c.recv(a, cur, k * 100 + i))));
        c.release(b, lb);
        lb = c.register(b, &next).unwrap();
        c.settle(); // b routes the new name to the same id
                    // The new name's first message carries the payload the released library waited on.
        let r = c.recv(a, cur, FIRST + k);
        let s = c.send(b, lb, a, FIRST + k, format!("{next}:first").as_bytes(), T);
        ok(c, b, s);
        assert_eq!(
            ok(c, a, r).as_deref(),
            Some(format!("{next}:first").as_bytes()),
            "cycle {k}: the new name's message"
        );
        assert!(
            !matches!(c.take(a, orphan), Some(Ok(_))),
            "cycle {k}: a receive of the released {name} completed"
        );
        for &(cycle, r) in &stale_receives {
            assert!(
                !matches!(c.take(a, r), Some(Ok(_))),
                "a message sent to name-{cycle} completed a receive of {next}"
            );
        }
    }
}

/// D2: messages for an id nobody registered are counted and drained, not left queued.
pub fn stray_messages_counted_and_drained<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 2);
    c.register(p[1], "dask").unwrap();
    c.settle();
    let f = c.layout().namespace_field();
    for i in 0..100u64 {
        c.legacy_send(p[0], p[1], (200u64 << f.shift()) | i, b"nobody");
    }
    c.advance_ms(50);
    assert_eq!(c.stray(p[1]), 100);
    assert_eq!(c.unexpected(p[1]), 0);
}

/// D3: a peer dying mid-stream fails only the operations towards it; nothing delivered to the
/// others is lost or duplicated.
pub fn peer_failure_mid_stream<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 3);
    let (a, dying, other) = (p[0], p[1], p[2]);
    let la = c.register(a, "dask").unwrap();
    let ld = c.register(dying, "dask").unwrap();
    let lo = c.register(other, "dask").unwrap();
    c.settle();
    let big = vec![7u8; 64 * 1024]; // rendezvous: completes only when matched
    let to_dying: Vec<u64> = (0..20).map(|s| c.send(a, la, dying, s, &big, T)).collect();
    let to_other: Vec<u64> = (0..20).map(|s| c.send(a, la, other, s, &big, T)).collect();
    for s in 0..10u64 {
        let r = c.recv(dying, ld, s);
        ok(c, dying, r);
    }
    c.kill(dying);
    c.settle();
    let down = format!(
        "connection to peer {:#x} failed: ",
        crate::identity(dying).token()
    );
    let (mut done, mut failed) = (0, 0);
    for op in to_dying {
        match wait(c, a, op, ROUNDS).expect("finished") {
            Ok(_) => done += 1,
            Err(e) => {
                assert!(e.starts_with(&down), "not PeerDown naming the peer: {e}");
                failed += 1;
            }
        }
    }
    assert_eq!((done, failed), (10, 10));
    for s in 0..20u64 {
        let r = c.recv(other, lo, s);
        assert_eq!(ok(c, other, r).unwrap(), big);
    }
    for op in to_other {
        ok(c, a, op);
    }
    assert_eq!(c.counters(other, lo).received, 20);
    assert_eq!(c.counters(a, la).failed, 10);
    assert_eq!(c.unexpected(other), 0, "nothing duplicated");
}

/// D3 for receives: a peer dies with one receive tied to it (`recv_from`) matched to its
/// message — a rendezvous whose data it never sent (UCX), a message still in flight (mock) —
/// and one still waiting: both end with `PeerDown` naming the peer and the failure, the same
/// error on every adapter; a receive from any peer and one tied to another peer wait on.
pub fn receives_tied_to_a_dying_peer_end_with_peer_down<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 3);
    let (a, dying, other) = (p[0], p[1], p[2]);
    let la = c.register(a, "dask").unwrap();
    let ld = c.register(dying, "dask").unwrap();
    let lo = c.register(other, "dask").unwrap();
    c.settle();
    c.hold(true);
    let big = vec![9u8; 64 * 1024]; // rendezvous: its data moves only when the sender progresses
    let started = c.send(dying, ld, a, 1, &big, T);
    c.freeze(dying);
    let matched = c.recv_from(a, la, dying, 1);
    let waiting = c.recv_from(a, la, dying, 2);
    let any = c.recv(a, la, 3);
    let tied_to_other = c.recv_from(a, la, other, 4);
    c.settle();
    assert_eq!(
        c.take(a, matched),
        None,
        "no data without the sender's progress"
    );
    assert_eq!(c.take(a, waiting), None);
    let _ = started;
    c.kill(dying);
    c.hold(false);
    c.settle();
    let token = crate::identity(dying).token();
    let down = format!("connection to peer {token:#x} failed: ");
    for (what, op) in [("matched", matched), ("waiting", waiting)] {
        match wait(c, a, op, ROUNDS) {
            Some(Err(e)) => assert!(e.starts_with(&down), "{what} receive: {e}"),
            r => panic!("{what} receive tied to the dead peer: {r:?}, not PeerDown"),
        }
    }
    assert_eq!(c.take(a, any), None, "a receive from any peer waits on");
    assert_eq!(
        c.take(a, tied_to_other),
        None,
        "another peer's receive waits on"
    );
    let s3 = c.send(other, lo, a, 3, b"any", T);
    let s4 = c.send(other, lo, a, 4, b"other", T);
    ok(c, other, s3);
    ok(c, other, s4);
    assert_eq!(ok(c, a, any).unwrap(), b"any");
    assert_eq!(ok(c, a, tied_to_other).unwrap(), b"other");
    let after = c.recv_from(a, la, dying, 5);
    match wait(c, a, after, ROUNDS) {
        Some(Err(e)) => assert!(e.starts_with(&down), "posted after the failure: {e}"),
        r => panic!("a receive posted for a dead peer: {r:?}"),
    }
}

/// A released library's receives end with `NoSuchLibrary` on every adapter (left posted, one
/// would take a message meant for the next name to get the id); a receive of another library
/// waits on.
pub fn a_released_librarys_receives_end_with_no_such_library<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 2);
    let (a, b) = (p[0], p[1]);
    let gone = c.register(a, "ucx-py").unwrap();
    let stays = c.register(a, "dask").unwrap();
    let lb = c.register(b, "dask").unwrap();
    c.settle();
    let from_b = c.recv_from(a, gone, b, 1);
    let any = c.recv(a, gone, 2);
    let kept = c.recv(a, stays, 1);
    c.settle();
    c.release(a, gone);
    c.settle();
    for op in [from_b, any] {
        match wait(c, a, op, ROUNDS) {
            Some(Err(e)) => assert_eq!(e, "no such library handle"),
            r => panic!("a released library's receive: {r:?}"),
        }
    }
    assert_eq!(
        c.take(a, kept),
        None,
        "the other library's receive waits on"
    );
    let s = c.send(b, lb, a, 1, b"kept", T);
    ok(c, b, s);
    assert_eq!(ok(c, a, kept).unwrap(), b"kept");
}

/// Messages with the same tag from one sender are received in send order.
pub fn ordering_per_sender<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 2);
    let a = c.register(p[0], "cuml").unwrap();
    let b = c.register(p[1], "cuml").unwrap();
    c.settle();
    let ops: Vec<u64> = (0..100u32)
        .map(|i| c.send(p[0], a, p[1], 7, &i.to_le_bytes(), T))
        .collect();
    for op in ops {
        ok(c, p[0], op);
    }
    for i in 0..100u32 {
        let r = c.recv(p[1], b, 7);
        assert_eq!(ok(c, p[1], r).unwrap(), i.to_le_bytes());
    }
}

/// AM ids are namespaced: two libraries both using local AM id 0 (as ucx-py and ucxx use UCX
/// AM id 0) each get only their own messages.
pub fn active_messages_are_namespaced<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 2);
    let la = register_all(c, p[0], &["ucx-py", "ucxx"]);
    let lb = register_all(c, p[1], &["ucxx", "ucx-py"]);
    c.am_listen(p[1], lb[0], 0);
    c.am_listen(p[1], lb[1], 0);
    c.settle();
    let o1 = c.am_send(p[0], la[0], p[1], 0, b"from ucx-py");
    let o2 = c.am_send(p[0], la[1], p[1], 0, b"from ucxx");
    ok(c, p[0], o1);
    ok(c, p[0], o2);
    c.settle();
    assert_eq!(c.am_take(p[1], lb[1], 0).unwrap(), b"from ucx-py");
    assert_eq!(c.am_take(p[1], lb[0], 0).unwrap(), b"from ucxx");
    assert_eq!(c.am_take(p[1], lb[0], 0), None);
}

/// As many namespaces as the registry holds, all routed.
pub fn registry_capacity_namespaces<C: Cluster + ?Sized>(c: &mut C) {
    let p = mesh(c, 2);
    let mut libs = Vec::new();
    let err = loop {
        let name = format!("ns-{}", libs.len());
        match c.register(p[0], &name) {
            Ok(l) => {
                let lb = c.register(p[1], &name).expect("same capacity");
                libs.push((name, l, lb));
            }
            Err(e) => break e,
        }
    };
    assert!(err.contains("in use"), "exhaustion must say so: {err}");
    assert!(libs.len() >= 200, "only {} namespaces", libs.len());
    c.settle();
    for (i, (name, la, lb)) in libs.iter().enumerate() {
        let op = c.send(p[0], *la, p[1], i as u64, name.as_bytes(), T);
        ok(c, p[0], op);
        let r = c.recv(p[1], *lb, i as u64);
        assert_eq!(ok(c, p[1], r).unwrap(), name.as_bytes());
    }
}

/// 64 processes, each connected to a hub and its ring neighbours, all talking.
pub fn many_processes<C: Cluster + ?Sized>(c: &mut C) {
    let n = 64;
    let procs: Vec<Proc> = (0..n).map(|_| c.spawn()).collect();
    let libs: Vec<Lib> = procs
        .iter()
        .map(|&p| c.register(p, "dask").unwrap())
        .collect();
    for i in 1..n {
        c.connect(procs[i], procs[0]).unwrap();
        if i + 1 < n {
            c.connect(procs[i], procs[i + 1]).unwrap();
        }
    }
    c.connect(procs[n - 1], procs[1]).unwrap();
    c.settle();
    for i in 1..n {
        let next = if i + 1 < n { i + 1 } else { 1 };
        for (dst, payload) in [(0, i as u64), (next, 1_000 + i as u64)] {
            let op = c.send(
                procs[i],
                libs[i],
                procs[dst],
                payload,
                &(i as u32).to_le_bytes(),
                T,
            );
            ok(c, procs[i], op);
        }
    }
    for i in 1..n {
        let r = c.recv(procs[0], libs[0], i as u64);
        assert_eq!(ok(c, procs[0], r).unwrap(), (i as u32).to_le_bytes());
        let prev = if i > 1 { i - 1 } else { n - 1 };
        let r = c.recv(procs[i], libs[i], 1_000 + prev as u64);
        assert_eq!(ok(c, procs[i], r).unwrap(), (prev as u32).to_le_bytes());
    }
}

/// Seeded random interleaving of sends, receives (posted before or after the message), settles
/// and time among 6 processes and 5 names, plus release/re-register churn (issue 11): each
/// process holds one of two churn names at a time, swaps it at random moments while messages to
/// it are in flight, and has its registry filled so that the few free ids come round within a
/// few swaps. Checked: every message to a fixed name arrives exactly once, intact, in the
/// namespace it was sent to; a message to a churn name is received at most once and only by a
/// receive on that same name (R7: never by the next owner of its id); nothing is left over.
pub fn randomized_exactly_once<C: Cluster + ?Sized>(c: &mut C) {
    let names = ["dask", "cuml", "blazingsql", "engine-x", "engine-y"];
    let churn_names = ["churn-a", "churn-b"];
    let n = 6;
    let procs: Vec<Proc> = (0..n).map(|_| c.spawn()).collect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    // Random registration order per process.
    let mut libs = vec![vec![0; names.len()]; n];
    for &p in &procs {
        let mut order: Vec<usize> = (0..names.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rnd(i as u64 + 1) as usize);
        }
        for k in order {
            libs[p][k] = c.register(p, names[k]).unwrap();
        }
    }
    // Churn: one of two names each, and every other id taken but a few, so that a released id
    // is soon the least recently released free one (and handed out again once confirmed).
    let mut churn: Vec<(usize, Lib)> = procs
        .iter()
        .map(|&p| (0, c.register(p, churn_names[0]).unwrap()))
        .collect();
    for &p in &procs {
        let mut fill = Vec::new();
        while let Ok(l) = c.register(p, &format!("fill-{}", fill.len())) {
            fill.push(l);
        }
        // Two free ids and the churn name's own: three in the cycle, so that an id comes
        // round to the *other* name (and to each name's old messages' payloads).
        for l in fill.into_iter().rev().take(2) {
            c.release(p, l);
        }
    }
    for i in 0..n {
        for j in i + 1..n {
            c.connect(procs[i], procs[j]).unwrap();
        }
    }
    c.settle();
    struct Msg {
        src: Proc,
        dst: Proc,
        lib: usize,
        payload: u64,
        send: Option<u64>,
        recv: Option<u64>,
    }
    /// A message to a churn name: the name it was sent to, and the name of the library whose
    /// receive was posted for it (the receiver may have swapped names in between).
    struct ChurnMsg {
        dst: Proc,
        name: usize,
        recv: Option<(u64, usize)>,
        payload: u64,
    }
    let mut msgs: Vec<Msg> = Vec::new();
    let mut churned: Vec<ChurnMsg> = Vec::new();
    let mut swaps = 0;
    for step in 0..3000u64 {
        match rnd(12) {
            0..=4 => {
                let (src, dst) = (rnd(n as u64) as usize, rnd(n as u64) as usize);
                if src == dst {
                    continue;
                }
                let lib = rnd(names.len() as u64) as usize;
                msgs.push(Msg {
                    src,
                    dst,
                    lib,
                    payload: step,
                    send: None,
                    recv: None,
                });
                // Half the time the receive is posted first (expected path), half later.
                if rnd(2) == 0 {
                    let m = msgs.last_mut().unwrap();
                    m.recv = Some(c.recv(dst, libs[dst][lib], step));
                }
                let m = msgs.last_mut().unwrap();
                let data = format!("{src}>{dst}:{}:{step}", names[lib]);
                m.send = Some(c.send(src, libs[src][lib], dst, step, data.as_bytes(), T));
            }
            5..=7 => {
                if let Some(m) = msgs.iter_mut().find(|m| m.recv.is_none()) {
                    m.recv = Some(c.recv(m.dst, libs[m.dst][m.lib], m.payload));
                }
            }
            8 => c.settle(),
            9 => c.advance_ms(1),
            10 => {
                // A message to the churn name the sender holds; the receiver may hold the
                // other one (then the send waits, and fails at its deadline), or swap later.
                let (src, dst) = (rnd(n as u64) as usize, rnd(n as u64) as usize);
                if src == dst {
                    continue;
                }
                // Few payloads: a receive on one name could match a message sent to the other
                // under the same payload if the id came round too early (R7).
                let payload = step % 4;
                let (name, lib) = churn[src];
                let data = format!("{src}>{dst}:{}:{step}", churn_names[name]);
                c.send(src, lib, dst, payload, data.as_bytes(), T);
                let recv = (rnd(2) == 0).then(|| {
                    let (rname, rlib) = churn[dst];
                    (c.recv(dst, rlib, payload), rname)
                });
                churned.push(ChurnMsg {
                    dst,
                    name,
                    recv,
                    payload,
                });
            }
            _ => {
                // Swap a process's churn name while messages to it may be in flight.
                let p = rnd(n as u64) as usize;
                let (name, lib) = churn[p];
                c.release(p, lib);
                let next = 1 - name;
                let got = match c.register(p, churn_names[next]) {
                    Ok(l) => l,
                    // Every free id still quarantined (R7: a clear error, not a wait): let
                    // the peers confirm, then there is one.
                    Err(e) => {
                        assert!(e.contains("quarantine"), "{e}");
                        c.settle();
                        c.register(p, churn_names[next]).expect("a confirmed id")
                    }
                };
                churn[p] = (next, got);
                swaps += 1;
            }
        }
    }
    for m in &mut msgs {
        if m.recv.is_none() {
            m.recv = Some(c.recv(m.dst, libs[m.dst][m.lib], m.payload));
        }
    }
    for m in &mut churned {
        if m.recv.is_none() {
            let (rname, rlib) = churn[m.dst];
            m.recv = Some((c.recv(m.dst, rlib, m.payload), rname));
        }
    }
    c.settle();
    assert!(msgs.len() > 1000);
    assert!(
        churned.len() > 100 && swaps > 100,
        "{} {swaps}",
        churned.len()
    );
    for m in &msgs {
        ok(c, m.src, m.send.unwrap());
        let got = ok(c, m.dst, m.recv.unwrap()).expect("data");
        let want = format!("{}>{}:{}:{}", m.src, m.dst, names[m.lib], m.payload);
        assert_eq!(String::from_utf8_lossy(&got), want);
    }
    let mut delivered = std::collections::BTreeSet::new();
    for m in &churned {
        let (recv, rname) = m.recv.expect("posted");
        // Everything deliverable has arrived by now: a receive not done never will be (its
        // message went to the other name, was sent to a name released meanwhile and drained
        // as a stray, or its send is still waiting for a route).
        if let Some(Ok(Some(data))) = c.take(m.dst, recv) {
            let data = String::from_utf8_lossy(&data).into_owned();
            assert!(
                data.contains(&format!(">{}:{}:", m.dst, churn_names[rname])),
                "a receive on {} took {data:?} (its own message went to {})",
                churn_names[rname],
                churn_names[m.name]
            );
            assert!(delivered.insert(data.clone()), "received twice: {data}");
        }
    }
    assert!(
        !delivered.is_empty(),
        "no churn message was delivered at all"
    );
    for &p in &procs {
        assert_eq!(c.unexpected(p), 0, "leftover (duplicated) messages in {p}");
    }
}

/// Host mode (issue 12): a host's own libraries share the worker and the endpoint with three
/// tagspace libraries — ucxx-style random 64-bit tags (a third forced into every id tagspace
/// uses on the receiving side, the control id and an unregistered id) and RAFT-style
/// `(tag << 31) | rank` tags, both ways, sent before and between tagspace's traffic and left
/// unexpected. Checked: 0 misdelivered, every host message still there for the host (0 stolen,
/// 0 counted as strays however much time passes), and a released id held quarantined while a
/// host message waits in it, freed once the host took it.
pub fn host_libraries_coexist_with_tagspace<C: Cluster + ?Sized>(c: &mut C) {
    let names = ["dask", "cuml", "blazingsql"];
    let (a, b) = (c.spawn_hosted(), c.spawn_hosted());
    let la = register_all(c, a, &names);
    let rev: Vec<&str> = names.iter().rev().copied().collect();
    let lb_rev = register_all(c, b, &rev);
    let lb: Vec<Lib> = (0..3).map(|k| lb_rev[2 - k]).collect();
    // A dynamic name (well-known ids are never quarantined): released on `a` below.
    let scratch_a = c.register(a, "scratch-space").expect("register");
    c.register(b, "scratch-space").expect("register");
    c.connect(a, b).expect("connect");
    c.settle();
    let field = c.layout().namespace_field();
    let control = tagspace_core::wellknown::CONTROL_ID;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rng = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut host_tags = |c: &mut C, to: Proc, libs: &[Lib], n: usize| -> Vec<u64> {
        let mut ids: Vec<u16> = libs.iter().map(|&l| c.namespace_id(to, l)).collect();
        ids.extend([control, 200]);
        let mut tags = Vec::new();
        while tags.len() < n {
            let k = tags.len();
            let t = match k % 3 {
                0 => rng(),
                1 => {
                    (rng() & !field.mask()) | (u64::from(ids[(k / 3) % ids.len()]) << field.shift())
                }
                _ => ((rng() % 100_000) << 31) | (k as u64 % 4),
            };
            if !tags.contains(&t) {
                tags.push(t);
            }
        }
        tags
    };
    let to_b = host_tags(c, b, &lb, 60);
    let to_a = host_tags(c, a, &[la[0], la[1], la[2], scratch_a], 60);
    let host_send = |c: &mut C, from: Proc, to: Proc, tags: &[u64]| {
        for &t in tags {
            c.legacy_send(from, to, t, &t.to_le_bytes());
        }
    };
    host_send(c, a, b, &to_b[..30]);
    host_send(c, b, a, &to_a[..30]);
    let mut sends = Vec::new();
    for k in 0..3 {
        for seq in 0..20u64 {
            sends.push((
                a,
                c.send(a, la[k], b, seq, format!("a{k}:{seq}").as_bytes(), T),
            ));
            sends.push((
                b,
                c.send(b, lb[k], a, seq, format!("b{k}:{seq}").as_bytes(), T),
            ));
        }
    }
    host_send(c, a, b, &to_b[30..]);
    host_send(c, b, a, &to_a[30..]);
    c.settle();
    for (k, seq) in (0..3).flat_map(|k| (0..20u64).map(move |s| (k, s))) {
        let op = c.recv(b, lb[k], seq);
        assert_eq!(
            ok(c, b, op).expect("data"),
            format!("a{k}:{seq}").as_bytes(),
            "misdelivered"
        );
        let op = c.recv(a, la[k], seq);
        assert_eq!(
            ok(c, a, op).expect("data"),
            format!("b{k}:{seq}").as_bytes(),
            "misdelivered"
        );
    }
    // A withdrawal (R7) confirmed over exact ack receives; a's host messages in the released
    // id keep it held.
    c.release(a, scratch_a);
    for _ in 0..5 {
        c.advance_ms(100); // several stray-sweep intervals, had the sweep been on
    }
    assert_eq!(
        (c.stray(a), c.stray(b)),
        (0, 0),
        "a host message counted as stray"
    );
    assert_eq!(
        c.quarantine_held(a),
        1,
        "the released id is freed under a host message"
    );
    for (p, tags) in [(b, &to_b), (a, &to_a)] {
        for &t in tags.iter() {
            assert_eq!(
                c.legacy_probe(p, t, u64::MAX, true),
                Some(t),
                "host message {t:#x} stolen"
            );
        }
    }
    c.advance_ms(100);
    assert_eq!(
        c.quarantine_held(a),
        0,
        "the released id stays held after the host took its message"
    );
    for (p, op) in sends {
        ok(c, p, op);
    }
    assert_eq!(
        (c.unexpected(a), c.unexpected(b)),
        (0, 0),
        "something left over"
    );
}
