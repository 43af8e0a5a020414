//! Properties checked by the fuzz targets, kept in a library so that `tests/regressions.rs` can
//! replay every saved input (`regressions/<target>/*`) through exactly the same code.
//!
//! Each check panics only when the property fails; inputs it cannot judge are skipped, with the
//! reason in a comment where that happens.

use arbitrary::Arbitrary;
use tagspace_core::layout::{TagLayout, MAX_FIELDS, MAX_NAMESPACE_BITS, MIN_NAMESPACE_BITS};
use tagspace_core::session::{Phase, Session};
use tagspace_core::wire::{self, Role};
use tagspace_core::Identity;
use tagspace_core::{overlap, RawMatcher, Registry, RegistryError};

/// `wire_decode`: any bytes decode to a frame or an error (never a panic), and a decoded frame
/// re-encodes to exactly the input (the encoding is canonical).
pub fn check_wire(bytes: &[u8]) {
    if let Ok(frame) = wire::decode(bytes) {
        let mut out = vec![0u8; wire::MAX_FRAME_LEN];
        let n = frame
            .encode(&mut out)
            .expect("a decoded frame must re-encode");
        assert_eq!(&out[..n], bytes, "decode/encode is not a round trip");
    }
}

/// `ipc_descriptor`: any bytes decode to a CUDA IPC descriptor or an error (never a panic); a
/// decoded descriptor re-encodes to exactly the input and describes a non-empty, non-overflowing
/// range.
pub fn check_ipc_descriptor(bytes: &[u8]) {
    use tagspace_core::ipc::IpcDescriptor;
    if let Ok(d) = IpcDescriptor::decode(bytes) {
        assert_eq!(
            &d.encode()[..],
            bytes,
            "descriptor decode/encode is not a round trip"
        );
        assert!(d.len > 0 && d.offset.checked_add(d.len).is_some());
    }
}

/// Input of `tag_algebra`.
#[derive(Arbitrary, Debug)]
pub struct AlgebraInput {
    ns_shift: u8,
    ns_width: u8,
    fields: Vec<(u8, u8)>,
    a: (u64, u64),
    b: (u64, u64),
    small_bits: u8,
    payloads: (u64, u64, u64, u64),
}

/// `tag_algebra`: layout validation equals a bit-by-bit reference; `overlap` equals brute force
/// where masks are confined to a few low bits; namespaces built from any valid layout never
/// overlap (T1–T5).
pub fn check_algebra(input: &AlgebraInput) {
    // T5 against a reference that claims bits one by one.
    let (s, w) = (input.ns_shift as u32, input.ns_width as u32);
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"];
    let fields = &input.fields[..input.fields.len().min(names.len())];
    let mut builder = TagLayout::builder(s, w);
    for (i, &(fs, fw)) in fields.iter().enumerate() {
        builder = builder.field(names[i], fs as u32, fw as u32);
    }
    let got = builder.build();
    let mut ok = (MIN_NAMESPACE_BITS..=MAX_NAMESPACE_BITS).contains(&w) && s + w <= 64;
    let mut used = [false; 64];
    if ok {
        for bit in s..s + w {
            used[bit as usize] = true;
        }
    }
    ok &= fields.len() <= MAX_FIELDS;
    for &(fs, fw) in fields {
        let (fs, fw) = (fs as u32, fw as u32);
        if !ok {
            break;
        }
        if fw == 0 || fs + fw > 64 {
            ok = false;
            break;
        }
        for bit in fs..fs + fw {
            ok &= !used[bit as usize];
            used[bit as usize] = true;
        }
    }
    assert_eq!(got.is_ok(), ok, "layout validation disagrees: {got:?}");

    // T4 against brute force over the low k bits (masks confined there; tags are not).
    let k = (input.small_bits % 11) as u32;
    let low = (1u64 << k) - 1;
    let a = RawMatcher::new(input.a.0, input.a.1 & low);
    let b = RawMatcher::new(input.b.0, input.b.1 & low);
    let brute = (0..=low).find(|&t| a.matches(t) && b.matches(t));
    match overlap(a, b) {
        Some(w) => assert!(a.matches(w) && b.matches(w), "bad witness {w:#x}"),
        None => assert_eq!(brute, None, "overlap missed a common tag"),
    }
    assert_eq!(overlap(a, b).is_some(), brute.is_some());

    // T1/T2 on the fuzzed layout, if it is valid.
    if let Ok(layout) = got {
        let reg: Registry<32> = Registry::new(layout);
        let (x, y) = (reg.register("x").unwrap(), reg.register("y").unwrap());
        let (p1, m1, p2, m2) = input.payloads;
        let pm = layout.payload_mask();
        let mx = x.matcher(p1 & pm, m1).unwrap();
        let my = y.matcher(p2 & pm, m2).unwrap();
        assert_eq!(overlap(mx.raw(), my.raw()), None, "namespaces overlap");
        assert_eq!(mx.mask() & layout.namespace_mask(), layout.namespace_mask());
        if let Ok(t) = x.tag(p1) {
            assert_eq!(layout.namespace_of(t.raw()), x.id());
            assert_eq!(x.payload_of(t), p1, "payload truncated");
        }
    }
}

/// One step of the `session` scenario.
#[derive(Arbitrary, Debug)]
pub enum Op {
    /// Side A (or B) registers name `k % 8`.
    Register { b_side: bool, k: u8 },
    /// Side A (or B) releases name `k % 8`, if held.
    Release { b_side: bool, k: u8 },
    /// Deliver up to `n` pending frames from A to B (or B to A).
    Pump { from_b: bool, n: u8 },
    /// A hostile peer hands raw bytes to a third session, which must fail cleanly.
    Hostile { bytes: Vec<u8> },
    /// A hostile peer claims B's key in a HELLO (with its own nonce) to a fresh session of A's
    /// process and follows with any PROOF: the session must never establish (P6).
    Forge {
        nonce: [u8; 16],
        signature: [u8; 64],
    },
    /// Side A (or B) starts a heartbeat (a PING, if none waits for its PONG).
    Ping { b_side: bool },
    /// Side A (or B) gives its peer a pair value (what the engine does once the peer is
    /// proven; ignored before, and any value after the first).
    Grant { b_side: bool, value: u16 },
    /// Side A (or B) tells its peer where it listens (port `port` on 10.0.0.1; 0: stops
    /// telling), as a node does when proven and again when its address changes.
    Advertise { b_side: bool, port: u16 },
}

/// Input of `session`.
#[derive(Arbitrary, Debug)]
pub struct SessionInput {
    ops: Vec<Op>,
    seed_a: u8,
    seed_b: u8,
}

const NAMES: [&str; 8] = [
    "dask",
    "cuml",
    "blazingsql",
    "e1",
    "e2",
    "e3",
    "e4",
    "legacy",
];
type Reg = Registry<32>;

fn layout() -> TagLayout {
    TagLayout::builder(59, 5).pair(16, 16).build_or_panic()
}

/// The ack tag messages `from` owes `to` (the tag half of R7's acknowledgement), delivered.
fn deliver_ack_tags(from: &mut Session<32>, to: &mut Session<32>, reg: &Reg) {
    while let Some(tag) = from.poll_ack_tag(reg.layout()) {
        let (id, seq) = wire::parse_ack_tag(reg.layout(), tag).expect("an ack tag parses");
        assert!(to.on_ack_tag(id, seq), "an honest ack tag is accepted");
    }
}

/// Unpins the ids whose withdrawal the peer confirmed (what an adapter does after draining).
fn unpin_confirmed(s: &mut Session<32>, reg: &Reg) {
    while let Some(id) = s.take_confirmed() {
        reg.unpin(id);
    }
}

/// `session`: two sessions driven by any sequence of local registrations, releases and partial
/// deliveries converge: once every frame is delivered, each side's directory equals the other
/// side's live registry (P1). Hostile bytes never panic a session, and a failed session queues
/// a CLOSE.
pub fn check_session(input: &SessionInput) {
    if input.seed_a == input.seed_b {
        return; // one identity on both sides is refused by design (SameToken)
    }
    let ia = Identity::from_seed(&[input.seed_a; 32]);
    let ib = Identity::from_seed(&[input.seed_b; 32]);
    let (ra, rb): (Reg, Reg) = (Registry::new(layout()), Registry::new(layout()));
    let mut held_a: Vec<Option<_>> = (0..NAMES.len()).map(|_| None).collect();
    let mut held_b: Vec<Option<_>> = (0..NAMES.len()).map(|_| None).collect();
    let mut sa: Session<32> = Session::new(Role::Initiator, &ia, ra.layout());
    let mut sb: Session<32> = Session::new(Role::Acceptor, &ib, rb.layout());
    let mut victim: Session<32> = Session::new(Role::Acceptor, &ib, rb.layout());
    // The address each side tells now (`None`: none, or it stopped telling).
    let mut told: [Option<wire::Address>; 2] = [None, None];
    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];

    for op in input.ops.iter().take(256) {
        match *op {
            Op::Register { b_side, k } => {
                let k = k as usize % NAMES.len();
                let (reg, held) = if b_side {
                    (&rb, &mut held_b)
                } else {
                    (&ra, &mut held_a)
                };
                if held[k].is_none() {
                    // R7: ids whose withdrawal is not yet acknowledged are quarantined; the
                    // registry says so instead of handing them out
                    match reg.register(NAMES[k]) {
                        Ok(ns) => held[k] = Some(ns),
                        Err(RegistryError::Quarantined { .. }) => {}
                        Err(e) => panic!("a free name must register: {e}"),
                    }
                }
            }
            Op::Release { b_side, k } => {
                let held = if b_side { &mut held_b } else { &mut held_a };
                held[k as usize % NAMES.len()] = None;
            }
            Op::Pump { from_b, n } => {
                let (from, fr, to) = if from_b {
                    (&mut sb, &rb, &mut sa)
                } else {
                    (&mut sa, &ra, &mut sb)
                };
                for _ in 0..n {
                    match from.poll_transmit(fr, &mut buf).expect("poll_transmit") {
                        Some(len) => {
                            to.handle(&buf[..len]).expect("honest frames are accepted");
                        }
                        None => break,
                    }
                }
                deliver_ack_tags(from, to, fr);
                unpin_confirmed(to, if from_b { &ra } else { &rb });
            }
            Op::Hostile { ref bytes } => {
                if victim.handle(bytes).is_err() {
                    assert!(matches!(victim.phase(), Phase::Closing(_) | Phase::Closed));
                    for id in victim.finish() {
                        rb.unpin(id);
                    }
                    victim = Session::new(Role::Acceptor, &ib, rb.layout());
                }
            }
            Op::Forge {
                nonce,
                ref signature,
            } => {
                let mut target: Session<32> = Session::new(Role::Acceptor, &ia, ra.layout());
                let n = wire::HelloEncoder::new(
                    &mut buf,
                    ra.layout().fingerprint(),
                    Role::Initiator,
                    5,
                    ib.public_key(),
                    &nonce,
                )
                .expect("hello")
                .finish();
                assert_eq!(target.handle(&buf[..n]), Ok(None));
                let n = wire::Frame::Proof {
                    signature: *signature,
                }
                .encode(&mut buf)
                .expect("proof");
                assert!(target.handle(&buf[..n]).is_err(), "a forged proof verified");
                assert_eq!(target.peer(), None);
            }
            Op::Ping { b_side } => {
                let s = if b_side { &mut sb } else { &mut sa };
                let waiting = s.ping_outstanding();
                let queued = s.ping();
                assert!(!(queued && waiting), "a second PING while one waits");
                assert_eq!(queued, s.is_established() && !waiting);
            }
            Op::Advertise { b_side, port } => {
                let s = if b_side { &mut sb } else { &mut sa };
                let addr = (port != 0)
                    .then(|| wire::Address::Ip(std::net::SocketAddr::from(([10, 0, 0, 1], port))));
                s.set_advertised(addr);
                told[usize::from(b_side)] = addr;
            }
            Op::Grant { b_side, value } => {
                let s = if b_side { &mut sb } else { &mut sa };
                let before = s.pair_granted();
                s.grant_pair(value as u32);
                let after = s.pair_granted();
                match before {
                    Some(v) => assert_eq!(after, Some(v), "a pair value changed"),
                    None if s.is_established() && value != 0 => {
                        assert_eq!(after, Some(value as u32))
                    }
                    None => assert_eq!(after, None, "granted before the peer was proven"),
                }
            }
        }
    }
    // Deliver everything, both ways, until quiet; each side gives its value once its peer is
    // proven (a no-op where one already did), so each routes with the value the other gave.
    loop {
        let mut moved = false;
        for (s, v) in [(&mut sa, 0x00a1), (&mut sb, 0x00b2)] {
            s.grant_pair(v);
        }
        while let Some(len) = sa.poll_transmit(&ra, &mut buf).unwrap() {
            sb.handle(&buf[..len]).unwrap();
            moved = true;
        }
        while let Some(len) = sb.poll_transmit(&rb, &mut buf).unwrap() {
            sa.handle(&buf[..len]).unwrap();
            moved = true;
        }
        if !moved {
            break;
        }
    }
    for id in victim.finish() {
        rb.unpin(id);
    }
    deliver_ack_tags(&mut sa, &mut sb, &ra);
    deliver_ack_tags(&mut sb, &mut sa, &rb);
    unpin_confirmed(&mut sa, &ra);
    unpin_confirmed(&mut sb, &rb);
    // R7: every withdrawal was acknowledged both ways, so nothing stays quarantined
    assert_eq!(ra.quarantined_count(), 0, "ids left in quarantine on A");
    assert_eq!(rb.quarantined_count(), 0, "ids left in quarantine on B");
    assert!(sa.is_established() && sb.is_established());
    assert!(sa.is_paired() && sb.is_paired(), "a PAIR was lost");
    assert_eq!(sa.peer_pair(), sb.pair_granted());
    assert_eq!(sb.peer_pair(), sa.pair_granted());
    // Each side knows the address the other tells now (one that stopped telling leaves the
    // peer with what it told before, if anything).
    for (peer, now) in [(&sb, told[0]), (&sa, told[1])] {
        if now.is_some() {
            assert_eq!(peer.peer_addr(), now, "an address was lost");
        }
    }
    // Every PING was answered once everything was delivered.
    assert!(
        !sa.ping_outstanding() && !sb.ping_outstanding(),
        "a PING without its PONG"
    );
    for (session, reg) in [(&sb, &ra), (&sa, &rb)] {
        let mut live = Vec::new();
        reg.for_each_live(|t, n| live.push((*n, t.id)));
        live.sort();
        let dir: Vec<_> = session.directory().iter().map(|(n, i)| (*n, i)).collect();
        assert_eq!(dir, live, "directory did not converge");
    }
    let a_lower = ia.token() < ib.token();
    assert_eq!(sa.survives_duplicate(), Some(a_lower));
    assert_eq!(sb.survives_duplicate(), Some(a_lower));
    assert_eq!(sa.peer().map(|p| p.token), Some(ib.token()));
}

/// One step of the `network` scenario: several mock nodes (each a process with its own
/// registry) on one fabric that holds every message in flight until a step delivers it.
#[derive(Arbitrary, Debug)]
pub enum NetOp {
    /// Process `p` registers name `n`.
    Register { p: u8, n: u8 },
    /// Process `p` releases name `n`, if it holds it.
    Release { p: u8, n: u8 },
    /// Process `p` releases and registers name `n` again, `times` times in a row (the
    /// release/register churn that brings quarantined ids round: 240 dynamic ids).
    Churn { p: u8, n: u8, times: u8 },
    /// Process `p` opens a connection to `q` (again: a duplicate connection, P4).
    Connect { p: u8, q: u8 },
    /// Process `p`'s library `n` sends a message to `q`'s `n` (waiting up to 50 ms for the route).
    Send { p: u8, q: u8, n: u8 },
    /// Delivers the oldest held message of one lane (`pick` among those with one in flight):
    /// lanes and endpoints are reordered against each other, never within themselves.
    Deliver { pick: u8 },
    /// Delivers everything in flight.
    DeliverAll,
    /// `rounds % 4 + 1` rounds of: deliver everything, progress every live process (what lets
    /// handshakes and announcements finish between the steps that race them).
    Settle { rounds: u8 },
    /// Process `p` runs `progress`.
    Progress { p: u8 },
    /// The clock moves on by `ms` (deadlines, heartbeats).
    Advance { ms: u16 },
    /// Process `p` is killed (`kill -9`): what it had in flight is lost (as over TCP).
    Kill { p: u8 },
}

/// Input of `network`.
#[derive(Arbitrary, Debug)]
pub struct NetInput {
    ops: Vec<NetOp>,
}

const PROCS: usize = 3;
const NET_NAMES: [&str; 3] = ["foo", "bar", "baz"];

struct NetProc {
    node: tagspace_mock::node::Node,
    libs: [Option<tagspace_mock::node::LibId>; NET_NAMES.len()],
    alive: bool,
}

thread_local! {
    /// One registry per simulated process, made once and reset for every scenario: a leaked
    /// registry per node would grow without bound over millions of runs.
    static NET_REGISTRIES: [*mut Registry<{ tagspace_mock::node::CAP }>; PROCS] =
        core::array::from_fn(|_| {
            Box::into_raw(Box::new(Registry::new(net_layout())))
        });
}

/// `network`: misdelivery and stale routes under any interleaving of registrations, releases,
/// connections (duplicates included), sends, partial and reordered delivery, time and kills.
/// After every step:
/// * every message waiting in a library's namespace was sent to that library's *name* — none
///   sent to a released name ever lands in the name that took its id next (R7);
/// * a route a node holds to a peer's id leads to a name the peer still holds there, or to an
///   id the peer keeps quarantined (never to a freed or reused id);
///
/// and once the network is quiet (everything delivered, every live node progressed), each
/// node routes every name it shares with a live, connected peer to that peer's id (P1).
pub fn check_network(input: &NetInput) {
    use tagspace_mock::fabric::{Fabric, ProcessId};
    use tagspace_mock::node::Node;

    let mut fab = Fabric::new();
    fab.set_hold(true);
    let registries = NET_REGISTRIES.with(|r| *r);
    let mut procs: Vec<NetProc> = (0..PROCS)
        .map(|i| {
            // SAFETY: the registries are only reached through the nodes of one scenario, which
            // are all dropped before the next scenario resets them; nothing keeps a reference.
            let reg: &'static Registry<{ tagspace_mock::node::CAP }> = unsafe {
                registries[i].write(Registry::new(net_layout()));
                &*registries[i]
            };
            let mut seed = [0x3c; 32];
            seed[0] = i as u8;
            NetProc {
                node: Node::with_registry(&mut fab, ProcessId(i), Identity::from_seed(&seed), reg),
                libs: [None; NET_NAMES.len()],
                alive: true,
            }
        })
        .collect();
    let tokens: Vec<u64> = procs.iter().map(|p| p.node.token()).collect();
    let mut seq = 0u64;
    let trace = std::env::var_os("NET_TRACE").is_some();
    for op in input.ops.iter().take(200) {
        if trace {
            eprintln!("op {op:?} in flight {:?}", fab.in_flight());
        }
        match *op {
            NetOp::Register { p, n } => {
                let (p, n) = (p as usize % PROCS, n as usize % NET_NAMES.len());
                let pr = &mut procs[p];
                if pr.alive && pr.libs[n].is_none() {
                    // A clear error (all ids quarantined) is allowed; the scenario goes on.
                    pr.libs[n] = pr.node.register(NET_NAMES[n]).ok();
                }
            }
            NetOp::Release { p, n } => {
                let (p, n) = (p as usize % PROCS, n as usize % NET_NAMES.len());
                let pr = &mut procs[p];
                if let (true, Some(lib)) = (pr.alive, pr.libs[n].take()) {
                    pr.node.release(&mut fab, lib);
                }
            }
            NetOp::Churn { p, n, times } => {
                let (p, n) = (p as usize % PROCS, n as usize % NET_NAMES.len());
                for _ in 0..times {
                    let pr = &mut procs[p];
                    if !pr.alive {
                        break;
                    }
                    if let Some(lib) = pr.libs[n].take() {
                        pr.node.release(&mut fab, lib);
                    }
                    pr.libs[n] = pr.node.register(NET_NAMES[n]).ok();
                    // Whatever waits in the id the name lands on must be this name's.
                    check_net_delivery(&mut fab, &procs);
                }
            }
            NetOp::Connect { p, q } => {
                let (p, q) = (p as usize % PROCS, q as usize % PROCS);
                if p != q && procs[p].alive {
                    let to = procs[q].node.worker();
                    let _ = procs[p].node.connect(&mut fab, to);
                }
            }
            NetOp::Send { p, q, n } => {
                let (p, q, n) = (
                    p as usize % PROCS,
                    q as usize % PROCS,
                    n as usize % NET_NAMES.len(),
                );
                let pr = &mut procs[p];
                if let (true, true, Some(lib)) = (pr.alive, p != q, pr.libs[n]) {
                    seq += 1;
                    let mut data = vec![n as u8, p as u8];
                    data.extend_from_slice(&seq.to_le_bytes());
                    pr.node.send(&mut fab, lib, tokens[q], seq, &data, 50);
                }
            }
            NetOp::Deliver { pick } => {
                let lanes = fab.in_flight();
                if !lanes.is_empty() {
                    let (ep, lane) = lanes[pick as usize % lanes.len()];
                    fab.deliver(ep, lane);
                }
            }
            NetOp::DeliverAll => fab.deliver_all(),
            NetOp::Settle { rounds } => {
                for _ in 0..rounds % 4 + 1 {
                    fab.deliver_all();
                    for pr in procs.iter_mut().filter(|pr| pr.alive) {
                        pr.node.progress(&mut fab);
                    }
                }
            }
            NetOp::Progress { p } => {
                let pr = &mut procs[p as usize % PROCS];
                if pr.alive {
                    pr.node.progress(&mut fab);
                }
            }
            NetOp::Advance { ms } => fab.advance(ms as u64),
            NetOp::Kill { p } => {
                let p = p as usize % PROCS;
                if procs[p].alive {
                    fab.kill(ProcessId(p));
                    procs[p].alive = false;
                }
            }
        }
        check_net_delivery(&mut fab, &procs);
        check_net_routes(&procs, &tokens);
    }
    // Quiet: deliver everything and let every live node handle it, a few rounds (frames
    // answer frames), without letting deadlines pass.
    for _round in 0..8 {
        if trace {
            eprintln!("quiet round {_round}: in flight {:?}", fab.in_flight());
        }
        fab.deliver_all();
        for pr in procs.iter_mut().filter(|pr| pr.alive) {
            pr.node.progress(&mut fab);
        }
        check_net_delivery(&mut fab, &procs);
        check_net_routes(&procs, &tokens);
    }
    for (p, a) in procs.iter().enumerate().filter(|(_, a)| a.alive) {
        for (q, b) in procs.iter().enumerate().filter(|(_, b)| b.alive) {
            if p == q || a.node.live_connections_to(tokens[q]) == 0 {
                continue;
            }
            for (n, name) in NET_NAMES.iter().enumerate() {
                let (Some(la), Some(lb)) = (a.libs[n], b.libs[n]) else {
                    continue;
                };
                let want = b.node.namespace(lb).expect("registered").id();
                let got = a.node.route_tag(la, tokens[q], 0);
                let id = match got {
                    Ok(Some((_, tag))) => ns_id(tag),
                    other => {
                        panic!("quiet network: {p} has no route to {q}'s {name} (id {want}): {other:?}")
                    }
                };
                assert_eq!(id, want, "quiet network: {p} routes {q}'s {name}");
            }
        }
    }
    for pr in procs.iter_mut().filter(|pr| pr.alive) {
        for lib in pr.libs.iter_mut().filter_map(Option::take) {
            pr.node.release(&mut fab, lib);
        }
    }
}

/// The mock node's layout (its registry holds 256 ids, 240 of them dynamic: `Churn` brings a
/// released id round again, ids being reused least recently released first).
fn net_layout() -> TagLayout {
    TagLayout::DEFAULT
}

fn ns_id(tag: u64) -> u16 {
    let f = net_layout().namespace_field();
    ((tag & f.mask()) >> f.shift()) as u16
}

/// Takes every message waiting in each live library's namespace (as the library would) and
/// checks it was sent to that library's name.
fn check_net_delivery(fab: &mut tagspace_mock::fabric::Fabric, procs: &[NetProc]) {
    let f = net_layout().namespace_field();
    for (q, pr) in procs.iter().enumerate().filter(|(_, pr)| pr.alive) {
        for (n, lib) in pr.libs.iter().enumerate() {
            let Some(ns) = lib.and_then(|l| pr.node.namespace(l)) else {
                continue;
            };
            let tag = (ns.id() as u64) << f.shift();
            while let Ok(Some(m)) = fab.tag_probe(pr.node.worker(), tag, f.mask(), true) {
                assert!(
                    m.data.first() == Some(&(n as u8)),
                    "misdelivered: {q}'s {} (id {}) got a message sent to name {:?} by {:?}",
                    NET_NAMES[n],
                    ns.id(),
                    m.data.first().map(|&i| NET_NAMES.get(i as usize)),
                    m.data.get(1),
                );
            }
        }
    }
}

/// A route to a peer's id leads to a name the peer still holds there, or to an id it keeps
/// quarantined for this node's confirmation.
fn check_net_routes(procs: &[NetProc], tokens: &[u64]) {
    for (p, a) in procs.iter().enumerate().filter(|(_, a)| a.alive) {
        for (q, b) in procs.iter().enumerate().filter(|(_, b)| b.alive) {
            if p == q {
                continue;
            }
            if b.node.live_connections_to(tokens[p]) == 0 {
                // The peer closed its side and gave that connection's pins back; this node has
                // not seen the close yet, but the closed endpoint takes no more sends here (and
                // over TCP). Over shared memory it could: the README's residual R7 window.
                continue;
            }
            for (n, name) in NET_NAMES.iter().enumerate() {
                let Some(la) = a.libs[n] else { continue };
                let Ok(Some((_, tag))) = a.node.route_tag(la, tokens[q], 0) else {
                    continue;
                };
                let id = ns_id(tag);
                let held = b.libs[n]
                    .and_then(|lb| b.node.namespace(lb))
                    .is_some_and(|ns| ns.id() == id);
                assert!(
                    held || b.node.registry().is_quarantined(id),
                    "{p} routes {} to {q}'s id {id}, which {q} neither holds for it nor keeps \
                     quarantined (there: {:?}; connections {p}->{q} {}, {q}->{p} {})",
                    name,
                    b.node.registry().name_of(id).map(|(_, name)| name),
                    a.node.live_connections_to(tokens[q]),
                    b.node.live_connections_to(tokens[p]),
                );
            }
        }
    }
}
