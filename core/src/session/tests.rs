//! The session's unit tests.

extern crate std;
use super::*;
use crate::RegistryError;
use std::vec;
use std::vec::Vec;

type Reg = Registry<64>;

fn reg() -> Reg {
    Registry::new(TagLayout::DEFAULT)
}

/// Moves every pending frame from `from` to `to`; returns the events `to` saw.
fn pump(from: &mut Session<64>, fr: &Reg, to: &mut Session<64>) -> Vec<Event> {
    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
    let mut events = Vec::new();
    while let Some(n) = from.poll_transmit(fr, &mut buf).unwrap() {
        if let Some(e) = to.handle(&buf[..n]).unwrap() {
            events.push(e);
        }
    }
    events
}

fn ident(seed: u8) -> identity::Identity {
    identity::Identity::from_seed(&[seed; 32])
}

/// Pumps both ways until neither side has anything to say (HELLOs, then PROOFs).
fn settle(a: &mut Session<64>, ra: &Reg, b: &mut Session<64>, rb: &Reg) {
    for _ in 0..4 {
        pump(a, ra, b);
        pump(b, rb, a);
    }
}

fn pair(ra: &Reg, rb: &Reg) -> (Session<64>, Session<64>) {
    let mut a = Session::new(Role::Initiator, &ident(10), ra.layout());
    let mut b = Session::new(Role::Acceptor, &ident(20), rb.layout());
    settle(&mut a, ra, &mut b, rb);
    assert!(a.is_established() && b.is_established());
    // what the engine does once a peer is proven: give it its pair value
    a.grant_pair(0x11);
    b.grant_pair(0x22);
    settle(&mut a, ra, &mut b, rb);
    assert!(a.is_paired() && b.is_paired());
    (a, b)
}

#[test]
fn routes_wait_for_the_peers_pair_value_and_bad_pairs_are_refused() {
    let (ra, rb) = (reg(), reg());
    let la = ra.register("x").unwrap();
    let lb = rb.register("x").unwrap();
    let mut a = Session::new(Role::Initiator, &ident(10), ra.layout());
    let mut b = Session::new(Role::Acceptor, &ident(20), rb.layout());
    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
    // a PAIR before the peer proved itself is refused (and a grant then is ignored)
    let n = Frame::Pair { value: 5 }.encode(&mut buf).unwrap();
    let mut early = Session::<64>::new(Role::Acceptor, &ident(30), rb.layout());
    assert!(matches!(
        early.handle(&buf[..n]),
        Err(SessionError::Unexpected { frame: "PAIR", .. })
    ));
    b.grant_pair(7);
    assert_eq!(b.pair_granted(), None, "granted before the peer was proven");
    settle(&mut a, &ra, &mut b, &rb);
    assert!(a.is_established() && b.is_established());
    assert_eq!(a.route(&la), None, "no route before the peer's PAIR");
    assert_eq!(
        pump(&mut b, &rb, &mut a),
        vec![],
        "nothing granted, nothing sent"
    );
    b.grant_pair(0x1234);
    b.grant_pair(0x9999); // a second grant changes nothing
    assert_eq!(pump(&mut b, &rb, &mut a), vec![Event::Paired]);
    let route = a.route(&la).unwrap();
    assert_eq!((route.remote_id(), route.pair()), (lb.id(), 0x1234));
    assert_eq!(lb.pair_of(la.remote_tag(route, 3).unwrap()), 0x1234);
    // a second PAIR, a zero one or one wider than the field closes the session
    for value in [0x1234, 0, 1 << 24] {
        let (mut a2, _) = pair(&ra, &rb);
        let n = Frame::Pair { value }.encode(&mut buf).unwrap();
        assert!(
            matches!(
                a2.handle(&buf[..n]),
                Err(SessionError::Unexpected { frame: "PAIR", .. })
            ),
            "{value:#x}"
        );
    }
    // a layout without a pair field routes at once and refuses any PAIR
    let plain = TagLayout::builder(56, 8).build().unwrap();
    let (rc, rd): (Reg, Reg) = (Registry::new(plain), Registry::new(plain));
    let lc = rc.register("x").unwrap();
    let mut c = Session::new(Role::Initiator, &ident(10), rc.layout());
    let mut d = Session::new(Role::Acceptor, &ident(20), rd.layout());
    settle(&mut c, &rc, &mut d, &rd);
    assert_eq!(
        c.route(&lc).map(|r| r.pair()),
        None,
        "d registered nothing yet"
    );
    let _ld = rd.register("x").unwrap();
    settle(&mut c, &rc, &mut d, &rd);
    assert_eq!(c.route(&lc).map(|r| r.pair()), Some(0));
    let n = Frame::Pair { value: 5 }.encode(&mut buf).unwrap();
    assert!(c.handle(&buf[..n]).is_err());
}

#[test]
fn the_listener_address_goes_only_to_a_proven_peer_and_is_taken_only_from_one() {
    let (ra, rb) = (reg(), reg());
    let addr = wire::Address::Ip("10.0.0.7:4242".parse().unwrap());
    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
    // before the peer is proven, an ADDRESS is refused
    let mut c = Session::<64>::new(Role::Acceptor, &ident(20), rb.layout());
    let n = Frame::Address(addr).encode(&mut buf).unwrap();
    assert!(matches!(
        c.handle(&buf[..n]),
        Err(SessionError::Unexpected {
            frame: "ADDRESS",
            ..
        })
    ));
    // told once established (not in the handshake), and again when it changes
    let mut a = Session::new(Role::Initiator, &ident(10), ra.layout());
    let mut b = Session::new(Role::Acceptor, &ident(20), rb.layout());
    a.set_advertised(Some(addr));
    let n = a.poll_transmit(&ra, &mut buf).unwrap().unwrap();
    assert!(matches!(wire::decode(&buf[..n]), Ok(Frame::Hello(_))));
    b.handle(&buf[..n]).unwrap();
    assert_eq!(
        a.poll_transmit(&ra, &mut buf).unwrap(),
        None,
        "b not proven"
    );
    settle(&mut a, &ra, &mut b, &rb);
    assert_eq!(b.peer_addr(), Some(addr));
    assert_eq!(a.peer_addr(), None, "b told nothing");
    let moved = wire::Address::Local(9);
    assert!(a.set_advertised(Some(moved)));
    assert!(!a.set_advertised(Some(moved)));
    settle(&mut a, &ra, &mut b, &rb);
    assert_eq!(b.peer_addr(), Some(moved));
}

#[test]
fn a_ping_is_answered_once_and_one_waits_at_a_time() {
    let (ra, rb) = (reg(), reg());
    let mut a: Session<64> = Session::new(Role::Initiator, &ident(10), ra.layout());
    let mut b: Session<64> = Session::new(Role::Acceptor, &ident(20), rb.layout());
    assert!(!a.ping(), "no heartbeat before the handshake");
    settle(&mut a, &ra, &mut b, &rb);
    assert!(a.ping());
    assert!(!a.ping(), "one PING waits at a time");
    assert!(a.ping_outstanding());
    pump(&mut a, &ra, &mut b);
    assert!(a.ping_outstanding(), "not answered until the PONG arrives");
    pump(&mut b, &rb, &mut a);
    assert!(!a.ping_outstanding());
    assert!(a.ping(), "the next one may go");
    settle(&mut a, &ra, &mut b, &rb);
    assert!(!a.ping_outstanding() && a.is_established() && b.is_established());
}

#[test]
fn an_unasked_or_stale_pong_is_a_protocol_error() {
    let (ra, rb) = (reg(), reg());
    let (mut a, _b) = pair(&ra, &rb);
    let mut buf = [0u8; 16];
    let n = Frame::Pong { seq: 1 }.encode(&mut buf).unwrap();
    assert!(matches!(
        a.handle(&buf[..n]),
        Err(SessionError::Unexpected { frame: "PONG", .. })
    ));
    assert_eq!(a.phase(), Phase::Closing(CloseReason::ProtocolError));

    let (mut a, _b) = pair(&ra, &rb);
    assert!(a.ping());
    // Answered before it was even sent: forged.
    assert!(a.handle(&buf[..n]).is_err());

    let (mut a, mut b) = pair(&ra, &rb);
    assert!(a.ping());
    pump(&mut a, &ra, &mut b);
    let n = Frame::Pong { seq: 2 }.encode(&mut buf).unwrap();
    assert!(a.handle(&buf[..n]).is_err(), "wrong seq");
}

#[test]
fn a_ping_before_the_hello_is_refused() {
    let ra = reg();
    let mut a: Session<64> = Session::new(Role::Acceptor, &ident(10), ra.layout());
    let mut buf = [0u8; 16];
    let n = Frame::Ping { seq: 1 }.encode(&mut buf).unwrap();
    assert!(a.handle(&buf[..n]).is_err());
}

#[test]
fn different_registration_orders_route_by_name() {
    let (ra, rb) = (reg(), reg());
    let a_libs: Vec<_> = ["x", "y", "z"]
        .iter()
        .map(|n| ra.register(n).unwrap())
        .collect();
    let b_libs: Vec<_> = ["z", "x", "y"]
        .iter()
        .map(|n| rb.register(n).unwrap())
        .collect();
    let (a, b) = pair(&ra, &rb);
    for la in &a_libs {
        let lb = b_libs.iter().find(|l| l.name() == la.name()).unwrap();
        assert_eq!(a.route(la).unwrap().remote_id(), lb.id());
        assert_eq!(b.route(lb).unwrap().remote_id(), la.id());
        // the tag a sends lands in b's namespace of the same name
        let tag = la.remote_tag(a.route(la).unwrap(), 9).unwrap();
        assert!(lb.owns(tag));
    }
}

/// Moves ack tag messages both ways (as the adapters do over UCX) and unpins what the
/// peers confirmed; returns the ids each side confirmed.
fn exchange_acks(
    a: &mut Session<64>,
    ra: &Reg,
    b: &mut Session<64>,
    rb: &Reg,
) -> (Vec<u16>, Vec<u16>) {
    settle(a, ra, b, rb);
    let layout = *ra.layout();
    while let Some(tag) = b.poll_ack_tag(&layout) {
        let (id, seq) = wire::parse_ack_tag(&layout, tag).unwrap();
        assert!(a.on_ack_tag(id, seq));
    }
    while let Some(tag) = a.poll_ack_tag(&layout) {
        let (id, seq) = wire::parse_ack_tag(&layout, tag).unwrap();
        assert!(b.on_ack_tag(id, seq));
    }
    let mut done = (Vec::new(), Vec::new());
    while let Some(id) = a.take_confirmed() {
        ra.unpin(id);
        done.0.push(id);
    }
    while let Some(id) = b.take_confirmed() {
        rb.unpin(id);
        done.1.push(id);
    }
    done
}

#[test]
fn announcements_follow_the_registry() {
    let (ra, rb) = (reg(), reg());
    let (mut a, mut b) = pair(&ra, &rb);
    let late = ra.register("late").unwrap();
    let ev = pump(&mut a, &ra, &mut b);
    assert_eq!(
        ev,
        vec![Event::Announced {
            name: Name::new("late").unwrap(),
            id: late.id()
        }]
    );
    assert_eq!(b.directory().lookup(late.name()), Some(late.id()));
    let id = late.id();
    drop(late);
    // R7: the peer was told about "late", so its id is quarantined, not reused
    assert!(ra.is_quarantined(id));
    let again = ra.register("again").unwrap();
    assert_ne!(again.id(), id);
    let ev = pump(&mut a, &ra, &mut b);
    assert_eq!(
        ev,
        vec![
            Event::Withdrawn {
                name: Name::new("late").unwrap(),
                id
            },
            Event::Announced {
                name: Name::new("again").unwrap(),
                id: again.id()
            }
        ]
    );
    assert!(pump(&mut a, &ra, &mut b).is_empty());
    // b acknowledges by frame and by tag; then a confirms and the id is free again
    assert_eq!(exchange_acks(&mut a, &ra, &mut b, &rb), (vec![id], vec![]));
    assert!(!ra.is_quarantined(id));
    let reused = ra.register_at("reused", id).unwrap();
    let ev = pump(&mut a, &ra, &mut b);
    assert_eq!(
        ev,
        vec![Event::Announced {
            name: Name::new("reused").unwrap(),
            id: reused.id()
        }]
    );
}

/// R7: one half of the acknowledgement is not enough, a wrong `seq` is refused, and a
/// session that ends gives its pins back.
#[test]
fn quarantine_needs_both_halves_and_ends_with_the_session() {
    let (ra, rb) = (reg(), reg());
    let (mut a, mut b) = pair(&ra, &rb);
    let x = ra.register("x").unwrap();
    let id = x.id();
    settle(&mut a, &ra, &mut b, &rb);
    drop(x);
    settle(&mut a, &ra, &mut b, &rb); // WITHDRAW over, W-ACK back
    assert!(
        ra.is_quarantined(id),
        "the frame half alone does not confirm"
    );
    assert_eq!(a.awaiting_acks(), 1);
    assert_eq!(a.take_confirmed(), None);
    let layout = *ra.layout();
    let tag = b.poll_ack_tag(&layout).unwrap();
    let (tid, seq) = wire::parse_ack_tag(&layout, tag).unwrap();
    // What an adapter posts exact receives for is exactly the tag the peer sends.
    assert_eq!(a.awaited_ack_tags().collect::<Vec<_>>(), [(tid, seq)]);
    assert!(!a.on_ack_tag(tid, seq.wrapping_add(1)), "wrong seq");
    assert!(a.on_ack_tag(tid, seq));
    assert_eq!(a.awaited_ack_tags().count(), 0);
    assert_eq!(a.awaiting_acks(), 0);
    assert_eq!(a.take_confirmed(), Some(id));
    ra.unpin(id);
    assert!(!ra.is_quarantined(id));

    // a peer that never acknowledges: the connection's end releases the pin
    let y = ra.register("y").unwrap();
    let yid = y.id();
    settle(&mut a, &ra, &mut b, &rb);
    drop(y);
    pump(&mut a, &ra, &mut b);
    assert!(ra.is_quarantined(yid));
    assert_eq!(a.awaiting_acks(), 1);
    for id in a.finish() {
        ra.unpin(id);
    }
    assert!(!ra.is_quarantined(yid));
    // a forged frame half for a withdrawal that is not waiting is a protocol error
    let (mut a, _b) = pair(&ra, &rb);
    let mut buf = [0u8; 64];
    let n = Frame::WithdrawAck { id: yid, seq: 5 }
        .encode(&mut buf)
        .unwrap();
    assert!(matches!(
        a.handle(&buf[..n]),
        Err(SessionError::Unexpected {
            frame: "WITHDRAW-ACK",
            ..
        })
    ));
}

/// A registry none of whose free ids is usable says so.
#[test]
fn only_quarantined_ids_is_a_clear_error() {
    let ra: Registry<18> = Registry::new(TagLayout::DEFAULT); // dynamic ids 16 and 17
    let rb = reg();
    let mut a = Session::<64>::new(Role::Initiator, &ident(1), ra.layout());
    let mut b = Session::<64>::new(Role::Acceptor, &ident(2), rb.layout());
    let (p, q) = (ra.register("p").unwrap(), ra.register("q").unwrap());
    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
    for _ in 0..4 {
        while let Some(n) = a.poll_transmit(&ra, &mut buf).unwrap() {
            b.handle(&buf[..n]).unwrap();
        }
        while let Some(n) = b.poll_transmit(&rb, &mut buf).unwrap() {
            a.handle(&buf[..n]).unwrap();
        }
    }
    assert!(a.is_established());
    drop((p, q));
    assert_eq!(
        ra.register("r").map(|n| n.id()),
        Err(RegistryError::Quarantined { ids: 2 })
    );
    for id in a.finish() {
        ra.unpin(id);
    }
    assert!(ra.register("r").is_ok());
}

#[test]
fn a_name_moving_to_a_lower_id_is_withdrawn_first() {
    // Found by the session fuzz target (fuzz/regressions/session/crash-841f...): a name
    // re-registered at a lower id was announced before its old id was withdrawn. Under R7
    // both ids stay quarantined until acknowledged, so the move needs the acks first.
    let (ra, rb) = (reg(), reg());
    let x = ra.register("x").unwrap();
    let e1 = ra.register("e1").unwrap();
    let (low, high) = (x.id(), e1.id());
    let (mut a, mut b) = pair(&ra, &rb);
    drop(x);
    drop(e1);
    let ev = pump(&mut a, &ra, &mut b);
    let name = |s| Name::new(s).unwrap();
    assert_eq!(
        ev,
        vec![
            Event::Withdrawn {
                name: name("x"),
                id: low
            },
            Event::Withdrawn {
                name: name("e1"),
                id: high
            },
        ]
    );
    assert_eq!(
        exchange_acks(&mut a, &ra, &mut b, &rb),
        (vec![low, high], vec![])
    );
    let e1 = ra.register_at("e1", low).unwrap();
    let ev = pump(&mut a, &ra, &mut b);
    assert_eq!(
        ev,
        vec![Event::Announced {
            name: name("e1"),
            id: e1.id()
        }]
    );
    assert_eq!(b.directory().lookup(&name("e1")), Some(low));
}

#[test]
fn layout_mismatch_closes_with_reason() {
    let ra = reg();
    let other = TagLayout::builder(48, 8).build().unwrap();
    let rb: Reg = Registry::new(other);
    let mut a = Session::<64>::new(Role::Initiator, &ident(1), ra.layout());
    let mut b = Session::<64>::new(Role::Acceptor, &ident(2), rb.layout());
    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
    let n = a.poll_transmit(&ra, &mut buf).unwrap().unwrap();
    assert!(matches!(
        b.handle(&buf[..n]),
        Err(SessionError::LayoutMismatch { .. })
    ));
    let n = b.poll_transmit(&rb, &mut buf).unwrap().unwrap();
    assert_eq!(
        wire::decode(&buf[..n]),
        Ok(Frame::Close {
            reason: CloseReason::LayoutMismatch
        })
    );
    assert_eq!(b.phase(), Phase::Closed);
    // a's own CLOSE crossing ours is fine; anything else after closing is refused
    assert_eq!(
        b.handle(&buf[..n]),
        Ok(Some(Event::Closed {
            reason: CloseReason::LayoutMismatch
        }))
    );
    let n = Frame::Withdraw { id: 20, seq: 0 }.encode(&mut buf).unwrap();
    assert_eq!(b.handle(&buf[..n]), Err(SessionError::Closed));
}

/// HELLO, ANNOUNCE and WITHDRAW check ids the same way, against this side's width: a HELLO
/// that declares a wider namespace field cannot slip in ids this side cannot use.
#[test]
fn every_frame_checks_ids_against_this_sides_width() {
    let ra = reg();
    let layout = *ra.layout();
    let bits = layout.namespace_field().width() as u8;
    assert_eq!(bits, 8);
    let out_of_range = |id: u16| {
        Err(SessionError::from(WireError::IdOutOfRange {
            id,
            namespace_bits: bits,
        }))
    };
    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
    for id in [300u16, 4000, 65535] {
        let mut a = Session::<64>::new(Role::Initiator, &ident(10), &layout);
        let mut e = wire::HelloEncoder::new(
            &mut buf,
            layout.fingerprint(),
            Role::Acceptor,
            16, // declares a 16-bit namespace field
            ident(20).public_key(),
            &[0; 16],
        )
        .unwrap();
        e.push(2, &Name::new("dask").unwrap()).unwrap();
        e.push(id, &Name::new("evil").unwrap()).unwrap();
        let n = e.finish();
        assert_eq!(a.handle(&buf[..n]), out_of_range(id), "HELLO with id {id}");
        assert!(a.directory().is_empty());
        assert!(!a.is_established());
    }
    let rb = reg();
    for frame in [
        Frame::Announce {
            id: 4000,
            name: Name::new("evil").unwrap(),
        },
        Frame::Withdraw { id: 4000, seq: 0 },
    ] {
        let (mut a, _b) = pair(&ra, &rb);
        let n = frame.encode(&mut buf).unwrap();
        assert_eq!(a.handle(&buf[..n]), out_of_range(4000), "{frame:?}");
    }
}

#[test]
fn protocol_violations_fail_the_session_only() {
    let (ra, rb) = (reg(), reg());
    let _x = rb.register("x").unwrap();
    let (mut a, mut b) = pair(&ra, &rb);
    let before = a.directory().len();
    let mut buf = [0u8; 128];
    let n = Frame::Withdraw { id: 40, seq: 7 }.encode(&mut buf).unwrap();
    assert_eq!(a.handle(&buf[..n]), Err(SessionError::UnknownId { id: 40 }));
    assert_eq!(a.directory().len(), before);
    assert!(matches!(
        a.phase(),
        Phase::Closing(CloseReason::ProtocolError)
    ));
    // b is unaffected and can still talk to others
    assert!(b.is_established());
    b.close(CloseReason::Normal);
    let mut out = vec![0u8; 64];
    assert!(b.poll_transmit(&rb, &mut out).unwrap().is_some());
    assert_eq!(b.poll_transmit(&rb, &mut out).unwrap(), None);
}

#[test]
fn announce_before_hello_and_duplicates_are_refused() {
    let ra = reg();
    let mut s = Session::<64>::new(Role::Acceptor, &ident(1), ra.layout());
    let mut buf = [0u8; 256];
    let n = Frame::Announce {
        id: 20,
        name: Name::new("q").unwrap(),
    }
    .encode(&mut buf)
    .unwrap();
    assert!(matches!(
        s.handle(&buf[..n]),
        Err(SessionError::Unexpected { .. })
    ));

    let mut s = Session::<64>::new(Role::Acceptor, &ident(1), ra.layout());
    let mut e = HelloEncoder::new(
        &mut buf,
        ra.layout().fingerprint(),
        Role::Initiator,
        8,
        ident(2).public_key(),
        &[0; 16],
    )
    .unwrap();
    e.push(20, &Name::new("q").unwrap()).unwrap();
    e.push(21, &Name::new("q").unwrap()).unwrap();
    let n = e.finish();
    assert_eq!(
        s.handle(&buf[..n]),
        Err(SessionError::DuplicateName {
            name: Name::new("q").unwrap()
        })
    );
    assert!(s.directory().is_empty());
}

#[test]
fn role_and_token_checks() {
    let ra = reg();
    let mut a = Session::<64>::new(Role::Initiator, &ident(5), ra.layout());
    let mut b = Session::<64>::new(Role::Initiator, &ident(6), ra.layout());
    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
    let n = a.poll_transmit(&ra, &mut buf).unwrap().unwrap();
    assert_eq!(b.handle(&buf[..n]), Err(SessionError::RoleConflict));
    let mut c = Session::<64>::new(Role::Acceptor, &ident(5), ra.layout());
    assert_eq!(c.handle(&buf[..n]), Err(SessionError::SameToken));
}

#[test]
fn simultaneous_connect_keeps_exactly_one() {
    let (ra, rb) = (reg(), reg());
    for (sa, sb) in [(1u8, 2u8), (2, 1), (3, 4), (4, 3)] {
        let (ia, ib) = (ident(sa), ident(sb));
        let (ta, tb) = (ia.token(), ib.token());
        // connection 1: a opened it; connection 2: b opened it
        let mut a1 = Session::<64>::new(Role::Initiator, &ia, ra.layout());
        let mut b1 = Session::<64>::new(Role::Acceptor, &ib, rb.layout());
        let mut b2 = Session::<64>::new(Role::Initiator, &ib, rb.layout());
        let mut a2 = Session::<64>::new(Role::Acceptor, &ia, ra.layout());
        settle(&mut a1, &ra, &mut b1, &rb);
        settle(&mut b2, &rb, &mut a2, &ra);
        let keep1 = a1.survives_duplicate().unwrap();
        assert_eq!(keep1, b1.survives_duplicate().unwrap());
        let keep2 = a2.survives_duplicate().unwrap();
        assert_eq!(keep2, b2.survives_duplicate().unwrap());
        assert!(keep1 ^ keep2, "exactly one connection survives");
        assert_eq!(keep1, ta < tb);
    }
}

#[test]
fn hello_is_independent_of_endpoint_count() {
    // P3: the HELLO carries the namespace table, never a list of other endpoints, so its
    // size does not grow as sessions are added.
    let ra = reg();
    let _n = ra.register("x").unwrap();
    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
    let sizes: Vec<usize> = (0..100u8)
        .map(|i| {
            let mut s = Session::<64>::new(Role::Initiator, &ident(i), ra.layout());
            s.poll_transmit(&ra, &mut buf).unwrap().unwrap()
        })
        .collect();
    assert!(sizes.iter().all(|&n| n == sizes[0]));
}

/// The HELLO an attacker sends claiming `victim`'s key, with its own nonce.
fn claim_hello(
    buf: &mut [u8],
    layout: &TagLayout,
    role: Role,
    victim: &identity::Identity,
) -> usize {
    let mut e = HelloEncoder::new(
        buf,
        layout.fingerprint(),
        role,
        8,
        victim.public_key(),
        &[0x5a; 16],
    )
    .unwrap();
    e.push(2, &Name::new("dask").unwrap()).unwrap();
    e.finish()
}

/// P6: copying a token (the whole public key) is a claim; the PROOF needs the secret key.
#[test]
fn a_claimed_token_is_never_a_peer() {
    let ra = reg();
    let (victim, attacker) = (ident(20), ident(66));
    let mut a = Session::<64>::new(Role::Acceptor, &ident(10), ra.layout());
    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
    let n = claim_hello(&mut buf, ra.layout(), Role::Initiator, &victim);
    assert_eq!(a.handle(&buf[..n]), Ok(None));
    // between HELLO and PROOF: a claim only
    assert_eq!(a.phase(), Phase::Proving);
    assert_eq!(a.peer(), None);
    assert_eq!(a.survives_duplicate(), None);
    assert_eq!(a.claimed_token(), Some(victim.token()));
    // a signs its own PROOF (harmless: bound to this connection's nonces and a's key)
    let n = a.poll_transmit(&ra, &mut buf).unwrap().unwrap();
    assert!(matches!(wire::decode(&buf[..n]), Ok(Frame::Hello(_))));
    let n = a.poll_transmit(&ra, &mut buf).unwrap().unwrap();
    assert!(matches!(wire::decode(&buf[..n]), Ok(Frame::Proof { .. })));
    // the attacker signs with its own key: refused
    let fake = Party {
        public_key: *victim.public_key(),
        nonce: [0x5a; 16],
    };
    let t = identity::transcript(Role::Initiator, ra.layout().fingerprint(), &fake, &a.local);
    let signature = identity::sign(&attacker.signer(), &t);
    let n = Frame::Proof { signature }.encode(&mut buf).unwrap();
    assert_eq!(
        a.handle(&buf[..n]),
        Err(SessionError::Unproven {
            claimed: victim.token(),
            error: ProofError::BadSignature
        })
    );
    assert_eq!(a.peer(), None);
    assert_eq!(a.phase(), Phase::Closing(CloseReason::Unproven));
    // all-zero and random signatures too
    for sig in [[0u8; 64], [0xff; 64]] {
        let mut a = Session::<64>::new(Role::Acceptor, &ident(10), ra.layout());
        let n = claim_hello(&mut buf, ra.layout(), Role::Initiator, &victim);
        a.handle(&buf[..n]).unwrap();
        let n = Frame::Proof { signature: sig }.encode(&mut buf).unwrap();
        assert!(matches!(
            a.handle(&buf[..n]),
            Err(SessionError::Unproven { .. })
        ));
    }
}

/// P6: a victim's real HELLO and PROOF, replayed on another connection, do not verify
/// there (the PROOF signs the other side's fresh nonce).
#[test]
fn a_replayed_handshake_is_refused() {
    let (ra, rb) = (reg(), reg());
    let (ia, ib) = (ident(10), ident(20));
    let mut a1 = Session::<64>::new(Role::Acceptor, &ia, ra.layout());
    let mut b = Session::<64>::new(Role::Initiator, &ib, rb.layout());
    let mut recorded = Vec::new();
    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
    for _ in 0..3 {
        while let Some(n) = b.poll_transmit(&rb, &mut buf).unwrap() {
            recorded.push(buf[..n].to_vec());
            a1.handle(&buf[..n]).unwrap();
        }
        pump(&mut a1, &ra, &mut b);
    }
    assert!(a1.is_established() && b.is_established());
    assert_eq!(recorded.len(), 2, "HELLO and PROOF");
    // the same bytes, to a fresh session of the same process
    let mut a2 = Session::<64>::new(Role::Acceptor, &ia, ra.layout());
    assert_eq!(a2.handle(&recorded[0]), Ok(None));
    assert!(matches!(
        a2.handle(&recorded[1]),
        Err(SessionError::Unproven {
            error: ProofError::BadSignature,
            ..
        })
    ));
    assert_eq!(a2.peer(), None);
}

#[test]
fn proof_out_of_order_and_bad_keys_are_refused() {
    let ra = reg();
    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
    let proof = Frame::Proof { signature: [1; 64] };
    let mut a = Session::<64>::new(Role::Acceptor, &ident(10), ra.layout());
    let n = proof.encode(&mut buf).unwrap();
    assert!(matches!(
        a.handle(&buf[..n]),
        Err(SessionError::Unexpected { frame: "PROOF", .. })
    ));
    let (mut a, _b) = pair(&ra, &reg());
    assert!(matches!(
        a.handle(&buf[..n]),
        Err(SessionError::Unexpected { frame: "PROOF", .. })
    ));
    // a small-order key is refused at the HELLO
    let mut weak = [0u8; 32];
    weak[0] = 1;
    let mut a = Session::<64>::new(Role::Acceptor, &ident(10), ra.layout());
    let n = HelloEncoder::new(
        &mut buf,
        ra.layout().fingerprint(),
        Role::Initiator,
        8,
        &weak,
        &[0; 16],
    )
    .unwrap()
    .finish();
    assert!(matches!(
        a.handle(&buf[..n]),
        Err(SessionError::Unproven {
            error: ProofError::BadPublicKey,
            ..
        })
    ));
}

/// Announcements sent between HELLO and PROOF are kept, but reported only as part of the
/// established directory.
#[test]
fn announcements_before_the_proof_are_held() {
    let (ra, rb) = (reg(), reg());
    let mut a = Session::<64>::new(Role::Initiator, &ident(10), ra.layout());
    let mut b = Session::<64>::new(Role::Acceptor, &ident(20), rb.layout());
    pump(&mut a, &ra, &mut b); // a's HELLO
    let late = ra.register("late").unwrap();
    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
    // b has a's HELLO: it sends HELLO, PROOF; a sends nothing more until it has b's HELLO
    let ev = pump(&mut a, &ra, &mut b);
    assert!(ev.is_empty(), "announce before proof is quiet: {ev:?}");
    assert_eq!(b.phase(), Phase::Proving);
    assert_eq!(b.directory().lookup(late.name()), Some(late.id()));
    let ev = pump(&mut b, &rb, &mut a);
    assert!(matches!(ev[..], [Event::Established { .. }]));
    let ev = pump(&mut a, &ra, &mut b);
    assert!(matches!(ev[..], [Event::Established { .. }]));
    assert_eq!(b.directory().lookup(late.name()), Some(late.id()));
    let _ = &mut buf;
}
