//! The caller's-buffer path: `Endpoint::tag_send_from` and `Worker::tag_recv_into`, between two
//! workers on their own threads (so UCX uses its inter-process transports), over TCP and shared
//! memory: messages already waiting (taken by an exact probe) and receives posted before the
//! message arrives, eager and rendezvous. `scripts/ucx-matrix.sh` runs this binary on each UCX.

mod common;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;
use tagspace_ucx::node::NodeError;
use tagspace_ucx::ucp::{Config, Endpoint, Status, Worker};

/// Every receive here gives up after this (a failing sender must not hang the test).
const WAIT: Option<Duration> = Some(Duration::from_secs(30));
const BIG: usize = 1 << 20; // over every transport's rendezvous threshold

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i % 251) as u8))
        .collect()
}

/// Runs `sender` and `receiver` on two threads, each with its own worker on its own context,
/// the sender connected to the receiver; `go` lets the receiver pace the sender.
fn pair(
    cfg: Config,
    sender: impl FnOnce(&Worker, &Endpoint, &mpsc::Receiver<()>) + Send + 'static,
    receiver: impl FnOnce(&Worker, &mpsc::Sender<()>) + Send + 'static,
) {
    let (addr_tx, addr_rx) = mpsc::channel::<Vec<u8>>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (end_tx, end_rx) = mpsc::channel::<()>();
    let cfg2 = cfg.clone();
    let r = thread::spawn(move || {
        let w = Worker::new(&cfg2).expect("receiver worker");
        addr_tx.send(w.address().expect("address")).unwrap();
        // A failed check must not leave the sender blocked on this worker: keep progressing
        // (and let go of `go`) until the sender has finished, then fail.
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| receiver(&w, &go_tx)));
        drop(go_tx);
        while matches!(end_rx.try_recv(), Err(mpsc::TryRecvError::Empty)) {
            w.progress();
        }
        if let Err(p) = outcome {
            std::panic::resume_unwind(p);
        }
    });
    let s = thread::spawn(move || {
        let w = Worker::new(&cfg).expect("sender worker");
        let addr = addr_rx.recv().unwrap();
        // SAFETY: the address came from a live worker's `address()`.
        let ep = unsafe { Endpoint::connect_address(&w, &addr) }.expect("connect");
        sender(&w, &ep, &go_rx);
        if let Some(req) = ep.close(false) {
            let _ = req.wait();
        }
        end_tx.send(()).unwrap();
    });
    s.join().expect("sender");
    r.join().expect("receiver");
}

fn messages_waiting_and_posted_arrive_whole(cfg: Config) {
    pair(
        cfg,
        |_, ep, go| {
            // Waiting (unexpected) before the receiver asks: small, one too long, one large.
            ep.tag_send_from(1, &pattern(1, 8)).unwrap();
            ep.tag_send_from(2, &pattern(2, 100)).unwrap();
            ep.tag_send_from(3, &pattern(3, 4000)).unwrap();
            // Posted before they arrive: the receiver is already waiting.
            go.recv().unwrap();
            thread::sleep(Duration::from_millis(20));
            ep.tag_send_from(4, &pattern(4, 16)).unwrap();
            ep.tag_send_from(5, &pattern(5, BIG)).unwrap();
            ep.tag_send_from(0x55_0000_0006, &pattern(6, 24)).unwrap();
        },
        |w, go| {
            // Let the first three arrive unexpected.
            while w.tag_probe(3, u64::MAX).is_none() {
                w.progress();
            }
            let mut buf = vec![0u8; 64];
            // Receive out of order: the exact tag decides.
            let info = w
                .tag_recv_into(3, u64::MAX, &mut vec![0u8; 8192], WAIT)
                .unwrap();
            assert_eq!((info.tag, info.len), (3, 4000));
            let info = w.tag_recv_into(1, u64::MAX, &mut buf, WAIT).unwrap();
            assert_eq!((info.tag, info.len), (1, 8));
            assert_eq!(&buf[..8], &pattern(1, 8)[..]);
            // Too long for the buffer: a clear error, nothing else lost.
            let e = w.tag_recv_into(2, u64::MAX, &mut buf, WAIT).unwrap_err();
            assert_eq!(e.status, Status::MESSAGE_TRUNCATED, "{e:?}");
            assert!(
                w.tag_probe(2, u64::MAX).is_none(),
                "the truncated message is consumed"
            );

            go.send(()).unwrap();
            let info = w.tag_recv_into(4, u64::MAX, &mut buf, WAIT).unwrap();
            assert_eq!((info.tag, info.len), (4, 16));
            assert_eq!(&buf[..16], &pattern(4, 16)[..]);
            let mut big = vec![0u8; BIG];
            let info = w.tag_recv_into(5, u64::MAX, &mut big, WAIT).unwrap();
            assert_eq!((info.tag, info.len), (5, BIG));
            assert!(big == pattern(5, BIG), "rendezvous data intact");
            // A partial mask reports the sender's full tag.
            let info = w
                .tag_recv_into(0x55_0000_0000, 0xffff_0000_0000, &mut buf, WAIT)
                .unwrap();
            assert_eq!((info.tag, info.len), (0x55_0000_0006, 24));
            assert_eq!(&buf[..24], &pattern(6, 24)[..]);
        },
    );
}

fn a_receive_that_times_out_takes_nothing_later(cfg: Config) {
    pair(
        cfg,
        |_, ep, go| {
            go.recv().unwrap();
            ep.tag_send_from(9, &pattern(9, 32)).unwrap();
        },
        |w, go| {
            let mut buf = vec![0u8; 64];
            let e = w
                .tag_recv_into(9, u64::MAX, &mut buf, Some(Duration::from_millis(50)))
                .unwrap_err();
            assert_eq!(e.status, Status::TIMED_OUT, "{e:?}");
            // The cancelled receive is gone: the message sent now waits for the next one.
            go.send(()).unwrap();
            while w.tag_probe(9, u64::MAX).is_none() {
                w.progress();
            }
            let info = w.tag_recv_into(9, u64::MAX, &mut buf, WAIT).unwrap();
            assert_eq!((info.tag, info.len), (9, 32));
            assert_eq!(&buf[..32], &pattern(9, 32)[..]);
        },
    );
}

fn many_small_messages_in_a_row(cfg: Config) {
    const N: u64 = 20_000;
    pair(
        cfg,
        |_, ep, _| {
            for i in 0..N {
                ep.tag_send_from(i, &i.to_le_bytes()).unwrap();
            }
        },
        |w, _| {
            let mut buf = [0u8; 8];
            for i in 0..N {
                let info = w.tag_recv_into(i, u64::MAX, &mut buf, WAIT).unwrap();
                assert_eq!((info.tag, info.len, u64::from_le_bytes(buf)), (i, 8, i));
            }
        },
    );
}

#[test]
fn tcp_waiting_and_posted() {
    messages_waiting_and_posted_arrive_whole(Config::tcp());
}

#[test]
fn shm_waiting_and_posted() {
    messages_waiting_and_posted_arrive_whole(Config::shm());
}

#[test]
fn tcp_timeout() {
    a_receive_that_times_out_takes_nothing_later(Config::tcp());
}

#[test]
fn shm_timeout() {
    a_receive_that_times_out_takes_nothing_later(Config::shm());
}

#[test]
fn tcp_stream() {
    many_small_messages_in_a_row(Config::tcp());
}

#[test]
fn shm_stream() {
    many_small_messages_in_a_row(Config::shm());
}

/// The node's own caller's-buffer path: `Node::send_from` / `Node::recv_into`, counted, with
/// clear errors for a peer without the name and for a buffer too small.
#[test]
fn node_send_from_and_recv_into() {
    let (mut a, la) = common::dask_node();
    let (mut b, lb) = common::dask_node();
    let only_a = a.register("only-on-a").unwrap();
    a.connect(b.listen_addr().unwrap()).unwrap();
    let bt = b.token();
    common::progress_until(&mut a, &mut b, "route to b's dask", |a, _| {
        a.route_tag(la, bt, 0).ok().flatten().is_some()
    });
    let mut buf = [0u8; 64];
    for i in 0..100u64 {
        a.send_from(la, bt, i, &pattern(i as u8, 40)).unwrap();
    }
    for i in (0..100u64).rev() {
        let n = b.recv_into(lb, i, &mut buf, WAIT).unwrap();
        assert_eq!(&buf[..n], &pattern(i as u8, 40)[..]);
    }
    // Errors: a name the peer never announced, and a buffer too small (message consumed).
    let e = a.send_from(only_a, bt, 1, b"x").unwrap_err();
    assert!(
        matches!(e, NodeError::PeerLacksNamespace { peer, waited_ms: 0, .. } if peer == bt),
        "{e}"
    );
    a.send_from(la, bt, 7, &[1u8; 65]).unwrap();
    let e = b.recv_into(lb, 7, &mut buf, WAIT).unwrap_err();
    assert!(
        matches!(&e, NodeError::Transport(t) if t.status == Status::MESSAGE_TRUNCATED),
        "{e}"
    );
    assert_eq!(a.counters(la).sent, 101);
    assert_eq!(b.counters(lb).received, 100);
    assert_eq!(b.counters(lb).failed, 1);
    assert_eq!(a.counters(only_a).failed, 1);
}
