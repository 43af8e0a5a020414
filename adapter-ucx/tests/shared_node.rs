//! A shared node (issue 12: thread safety): libraries on several threads share one tagspace node
//! on a host's `UCS_THREAD_MODE_MULTI` worker, whose own progress thread runs UCX's callbacks,
//! while the host keeps its own raw traffic on the same worker and endpoints from another
//! thread. Per process (two hosts on plain libucp in this test process): a host progress
//! thread, a tagspace service thread, three library threads (registering concurrently, so in
//! a different order each run) that send and receive through the node *and* through the host's
//! own `ucp_tag_send_nbx`/`ucp_tag_recv_nbx` with [`Library::route`]/[`Library::matcher`], and a
//! host thread sending random 64-bit and RAFT-style tags and AMs on id 0. Checked: every
//! message reaches the right library exactly once, nothing is left over, every host message
//! reaches the host (0 stolen); then a peer failure reported from *inside a UCX callback* on
//! the progress thread while the other library threads keep the node busy (the deadlock the
//! lock order rules out) fails the waiting receive, and `detach` follows.
//!
//! Needs a UCX built with thread support (the system's 1.13.1 and the 1.22 wheel here;
//! `scripts/ucx-matrix.sh` runs it on both): on ucx1-sys's bundled 1.12.1 the worker comes back
//! SINGLE, the shared node is refused, and the test says "not run".

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tagspace_core::wellknown::CONTROL_ID;
use tagspace_ucx::node::{HostProgress, NodeError, Role};
use tagspace_ucx::shared::{Library, SharedNode};
use tagspace_ucx::ucp::Config;
use ucx1_sys as sys;

mod rawhost;
use rawhost::*;

const LIBS: [&str; 3] = ["dask", "cuml", "blazingsql"];
/// Messages per library and direction through the node, and through the host's data path.
const THROUGH_NODE: u64 = 300;
const THROUGH_HOST: u64 = 100;
/// Operations in flight per library thread at once.
const WINDOW: u64 = 50;
const HOST_MSGS: usize = 200;
const HOST_AMS: usize = 50;
/// The host's AM id whose handler reports the peer failed (from inside UCX).
const FAIL_AM: u32 = 1;
const DEADLINE: Duration = Duration::from_secs(60);

fn body(side: u8, lib: usize, k: u64) -> Vec<u8> {
    let mut b = vec![side, lib as u8];
    b.extend_from_slice(&k.to_le_bytes());
    b
}

/// What the host's handler on `FAIL_AM` needs: the node to tell, and the endpoint that failed.
struct FailOnAm {
    node: SharedNode,
    ep: usize,
    fired: AtomicUsize,
}

unsafe extern "C" fn fail_on_am(
    arg: *mut c_void,
    _header: *const c_void,
    _header_length: sys::size_t,
    _data: *mut c_void,
    _length: sys::size_t,
    _param: *const sys::ucp_am_recv_param_t,
) -> sys::ucs_status_t {
    // SAFETY: arg is the test's FailOnAm, alive until the handler is removed.
    let f = unsafe { &*(arg as *const FailOnAm) };
    // Inside UCX, holding its worker lock, on the host's progress thread: what a host's
    // endpoint error handler does.
    f.node.peer_failed(f.ep as sys::ucp_ep_h, -25); // UCS_ERR_CONNECTION_RESET
    f.fired.fetch_add(1, Ordering::SeqCst);
    sys::ucs_status_t::UCS_OK
}

fn set_host_am(worker: sys::ucp_worker_h, id: u32, arg: Option<*const FailOnAm>) {
    // SAFETY: a live MULTI worker; arg outlives the registration (removed with None).
    unsafe {
        let mut p: sys::ucp_am_handler_param_t = std::mem::zeroed();
        p.field_mask = (sys::ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_ID
            | sys::ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_CB
            | sys::ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_ARG
            | sys::ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_FLAGS)
            .0 as u64;
        p.id = id;
        p.flags = sys::ucp_am_cb_flags::UCP_AM_FLAG_WHOLE_MSG.0;
        p.cb = arg.map(|_| fail_on_am as _);
        p.arg = arg.map_or(ptr::null_mut(), |a| a as *mut c_void);
        assert_eq!(sys::ucp_worker_set_am_recv_handler(worker, &p) as i8, 0);
    }
}

fn spin_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < DEADLINE, "{what}");
        std::thread::yield_now();
    }
}

/// One library thread's traffic with its namesake on the peer: `THROUGH_NODE` messages each way
/// through the node, then `THROUGH_HOST` through the host's own tag calls, every received
/// body checked (from the other side, for this library, the payload it was received with).
fn library_traffic(lib: &Library, side: u8, i: usize, peer: u64, host_worker: usize) {
    spin_until("the peer announced the library", || {
        lib.node().progress();
        matches!(lib.route(peer, 0), Ok(Some(_)))
    });
    for base in (0..THROUGH_NODE).step_by(WINDOW as usize) {
        let recvs: Vec<_> = (base..base + WINDOW)
            .map(|k| (k, lib.recv_from(peer, k, 16)))
            .collect();
        let sends: Vec<_> = (base..base + WINDOW)
            .map(|k| lib.send(peer, k, body(side, i, k), 10_000))
            .collect();
        for s in sends {
            let r = lib.wait(s, DEADLINE).expect("send timed out");
            assert_eq!(r.unwrap(), None);
        }
        for (k, r) in recvs {
            let got = lib.wait(r, DEADLINE).expect("receive timed out");
            assert_eq!(got.unwrap().unwrap(), body(1 - side, i, k), "misdelivered");
        }
    }
    // The host's data path: its own receive with the library's matcher, its own send with
    // the route (endpoint + tag), concurrently with the other threads' routing.
    let w = host_worker as sys::ucp_worker_h;
    for base in (THROUGH_NODE..THROUGH_NODE + THROUGH_HOST).step_by(WINDOW as usize) {
        let mut inbox: Vec<Vec<u8>> = (0..WINDOW).map(|_| vec![0u8; 10]).collect();
        let out: Vec<Vec<u8>> = (base..base + WINDOW).map(|k| body(side, i, k)).collect();
        let mut pending = Vec::new();
        for (j, buf) in inbox.iter_mut().enumerate() {
            let (tag, mask) = lib.matcher(peer, base + j as u64).unwrap();
            assert_eq!(mask, u64::MAX, "D1: full masks");
            // SAFETY: a MULTI worker; the buffer outlives the request (waited below).
            let p = unsafe {
                let param: sys::ucp_request_param_t = std::mem::zeroed();
                sys::ucp_tag_recv_nbx(w, buf.as_mut_ptr() as *mut c_void, 10, tag, mask, &param)
            };
            assert!(!is_err(p));
            pending.push(Pending(p));
        }
        for (j, b) in out.iter().enumerate() {
            let (ep, tag) = lib.route(peer, base + j as u64).unwrap().unwrap();
            // SAFETY: the host's endpoint, attached; the body outlives the request.
            let p = unsafe {
                let param: sys::ucp_request_param_t = std::mem::zeroed();
                sys::ucp_tag_send_nbx(ep, b.as_ptr() as *const c_void, 10, tag, &param)
            };
            assert!(!is_err(p));
            pending.push(Pending(p));
        }
        spin_until("host-path messages", || pending.iter().all(Pending::done));
        pending.into_iter().for_each(Pending::free);
        for (j, got) in inbox.iter().enumerate() {
            assert_eq!(*got, body(1 - side, i, base + j as u64), "misdelivered");
        }
    }
    // Exactly once: no second copy of any payload waits in this library's namespace (the
    // host's random tags wait in it too, as they may: UCX's queue is shared, and tagspace never
    // takes them).
    for k in 0..THROUGH_NODE + THROUGH_HOST {
        let (tag, mask) = lib.matcher_any_peer(k).unwrap();
        // SAFETY: a probe without removal on a MULTI worker; info is an out-parameter.
        let found = unsafe {
            let mut info: sys::ucp_tag_recv_info_t = std::mem::zeroed();
            !sys::ucp_tag_probe_nb(w, tag, mask, 0, &mut info).is_null()
        };
        assert!(!found, "payload {k} of {} arrived twice", LIBS[i]);
    }
    let c = lib.counters();
    assert_eq!((c.sent, c.received), (THROUGH_NODE, THROUGH_NODE));
}

/// The host's own thread: random and RAFT-style tags (some in the control id and in ids
/// tagspace's libraries may hold) and AMs on id 0, all to the peer host, left unexpected.
fn host_traffic(ep: usize, tags: Vec<u64>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let bodies: Vec<[u8; 8]> = tags.iter().map(|t| t.to_le_bytes()).collect();
        let mut reqs = Vec::new();
        for (t, b) in tags.iter().zip(&bodies) {
            // SAFETY: a MULTI worker's endpoint; each body outlives its request.
            unsafe {
                let param: sys::ucp_request_param_t = std::mem::zeroed();
                let p = sys::ucp_tag_send_nbx(
                    ep as sys::ucp_ep_h,
                    b.as_ptr() as *const c_void,
                    8,
                    *t,
                    &param,
                );
                assert!(!is_err(p));
                reqs.push(Pending(p));
            }
        }
        for k in 0..HOST_AMS as u64 {
            let b = k.to_le_bytes();
            // SAFETY: as above; waited before `b` goes.
            let p = unsafe {
                let mut param: sys::ucp_request_param_t = std::mem::zeroed();
                param.op_attr_mask = sys::ucp_op_attr_t::UCP_OP_ATTR_FIELD_FLAGS as u32;
                param.flags = sys::ucp_send_am_flags::UCP_AM_SEND_FLAG_EAGER.0;
                sys::ucp_am_send_nbx(
                    ep as sys::ucp_ep_h,
                    0,
                    ptr::null(),
                    0,
                    b.as_ptr() as *const c_void,
                    8,
                    &param,
                )
            };
            assert!(!is_err(p));
            let p = Pending(p);
            spin_until("host AM", || p.done());
            p.free();
        }
        spin_until("host messages", || reqs.iter().all(Pending::done));
        reqs.into_iter().for_each(Pending::free);
    })
}

fn shared_libraries_on_threads(ucx: Config) {
    let Some((ha, hb, a_ep, b_ep, a, b)) = shared_pair(&ucx, "shared node") else {
        return;
    };
    let (ta, tb) = (a.token(), b.token());

    // The host's progress thread (UCX's callbacks, tagspace's among them, run here) and a
    // tagspace service thread per node.
    let stop = Arc::new(AtomicBool::new(false));
    let host_progress = progress_thread(&[ha.worker, hb.worker], &stop, Duration::ZERO);
    let service = service_threads(&[&a, &b], &stop, Duration::from_micros(50));
    let (wa, wb) = (ha.worker as usize, hb.worker as usize);
    // SAFETY: live endpoints of these workers, detached before being closed.
    unsafe { a.attach(a_ep, Role::Initiator) }.unwrap();
    unsafe { b.attach(b_ep, Role::Acceptor) }.unwrap();

    // The host's own traffic, forced into the control id and the ids the libraries get.
    let forced: Vec<u16> = vec![CONTROL_ID, 1, 2, 3, 4, 5, 6, 7, 8, 100, 200];
    let tags_ab = host_tags(&mut Rng(0x5eed), &forced, HOST_MSGS);
    let tags_ba = host_tags(&mut Rng(0xfeed), &forced, HOST_MSGS);
    let host_a = host_traffic(a_ep as usize, tags_ab.clone());
    let host_b = host_traffic(b_ep as usize, tags_ba.clone());

    // Six library threads, registering concurrently; A's keep their handles afterwards for
    // the failure phase.
    let start = Arc::new(Barrier::new(6));
    let mut threads = Vec::new();
    for (side, node, peer, w) in [(0u8, &a, tb, wa), (1u8, &b, ta, wb)] {
        for (i, name) in LIBS.iter().enumerate() {
            let (node, start) = (node.clone(), start.clone());
            threads.push(std::thread::spawn(move || {
                start.wait();
                let lib = node.register(name).unwrap();
                library_traffic(&lib, side, i, peer, w);
                lib
            }));
        }
    }
    let mut libs: Vec<Library> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let b_libs = libs.split_off(3);
    host_a.join().unwrap();
    host_b.join().unwrap();
    assert_eq!((a.peer_on(a_ep), b.peer_on(b_ep)), (Some(tb), Some(ta)));

    // The peer fails, as the host's error handler reports it: from inside a UCX callback on
    // the host's progress thread, while A's other libraries keep the node's lock busy.
    let fail = Box::new(FailOnAm {
        node: a.clone(),
        ep: a_ep as usize,
        fired: AtomicUsize::new(0),
    });
    set_host_am(ha.worker, FAIL_AM, Some(&*fail));
    let libs = Arc::new(libs);
    let failing = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (1..3)
        .map(|i| {
            let (libs, failing) = (libs.clone(), failing.clone());
            std::thread::spawn(move || {
                let mut k = 1_000_000;
                while !failing.load(Ordering::SeqCst) {
                    k += 1;
                    let op = libs[i].send(tb, k, body(0, i, k), 1_000);
                    libs[i].forget(op);
                    let _ = libs[i].route(tb, k);
                }
            })
        })
        .collect();
    // This thread's route cache holds the route to B's dask now...
    assert!(matches!(libs[0].route(tb, 7), Ok(Some(_))));
    let waiting = libs[0].recv_from(tb, 999_999, 16);
    hb.am_send(b_ep, FAIL_AM, b"fail").wait(&hb, &[]);
    let r = libs[0]
        .wait(waiting, DEADLINE)
        .expect("peer failure not seen");
    assert!(
        matches!(r, Err(NodeError::PeerDown { peer, cause: Some(_) }) if peer == tb),
        "{r:?}"
    );
    failing.store(true, Ordering::SeqCst);
    for t in busy {
        t.join().unwrap();
    }
    assert_eq!(fail.fired.load(Ordering::SeqCst), 1);
    assert_eq!(a.live_connections_to(tb), 0);
    assert_eq!(a.peer_on(a_ep), None);
    // ...and must not return it once the peer is down.
    assert!(
        matches!(libs[0].route(tb, 7), Err(NodeError::NoConnection { .. })),
        "a stale cached route"
    );
    // A shared node needs detach also after peer_failed (other threads may have been sending).
    a.detach(a_ep).unwrap();
    assert!(a.detach(a_ep).is_err(), "detached twice");
    set_host_am(ha.worker, FAIL_AM, None);
    drop(fail);

    // Every host message is still there for the host, whichever thread progressed.
    for (h, tags) in [(&hb, &tags_ab), (&ha, &tags_ba)] {
        for t in tags {
            let mut buf = [0u8; 8];
            let r = h.recv(*t, &mut buf);
            spin_until("host message stolen", || r.done());
            r.free();
            assert_eq!(buf, t.to_le_bytes());
        }
    }
    for h in [&ha, &hb] {
        spin_until("host AMs", || {
            h.events.am0.lock().unwrap().len() == HOST_AMS
        });
    }
    assert_eq!(
        a.stats().unattached_dropped + b.stats().unattached_dropped,
        0
    );

    drop(libs);
    drop(b_libs);
    stop.store(true, Ordering::Relaxed);
    for t in service {
        t.join().unwrap();
    }
    drop((a, b));
    host_progress.join().unwrap();
    ha.close(a_ep, &[&hb]);
    hb.close(b_ep, &[&ha]);
    eprintln!(
        "shared node: UCX {:?}: 6 library threads, {} tagspace messages each way per library \
         ({} through the node, {} on the host's path), {} host messages + {} AMs each way: \
         exactly once, 0 stolen; peer failure from inside a UCX callback handled",
        tagspace_ucx::ucp::ucx_version(),
        THROUGH_NODE + THROUGH_HOST,
        THROUGH_NODE,
        THROUGH_HOST,
        HOST_MSGS,
        HOST_AMS
    );
}

#[test]
fn libraries_on_threads_share_a_node_on_a_multi_worker_over_tcp() {
    shared_libraries_on_threads(Config::tcp());
}

#[test]
fn libraries_on_threads_share_a_node_on_a_multi_worker_over_shm() {
    shared_libraries_on_threads(Config::shm());
}

#[test]
fn a_shared_node_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<SharedNode>();
    check::<Library>();
}

#[test]
fn a_shared_node_refuses_what_it_cannot_share() {
    let host = RawHost::new(
        &Config::tcp(),
        sys::ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE,
    );
    // SAFETY: a live worker that outlives the (refused) nodes.
    let single = unsafe {
        SharedNode::adopt_with_registry(host.worker, host_cfg(), HostProgress::Host, registry())
    };
    assert!(
        matches!(single, Err(NodeError::Usage(m)) if m.contains("MULTI")),
        "{single:?}"
    );
    let manual = tagspace_ucx::node::NodeConfig {
        clock: tagspace_ucx::node::Clock::manual(),
        ..host_cfg()
    };
    // SAFETY: as above.
    let r = unsafe {
        SharedNode::adopt_with_registry(host.worker, manual, HostProgress::Host, registry())
    };
    assert!(
        matches!(r, Err(NodeError::Usage(m)) if m.contains("clock")),
        "{r:?}"
    );
}
