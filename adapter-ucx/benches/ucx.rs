//! tagspace on real UCX against raw `ucx1-sys`, each ratio measured in the same run.
//!
//! `cargo bench -p tagspace-ucx --bench ucx` (full; a few minutes), or `-- --quick` (a smoke
//! run with few iterations, as CI does: its numbers mean nothing). `BENCH_EP_INFO=1` prints the
//! transports UCX chose for each pair (`ucp_ep_print_info`).
//!
//! (a) Ping-pong latency and streaming bandwidth, 8 B, 64 KiB and 1 MiB, over shared memory and
//!     TCP, between two threads that each own a worker on its own context (so UCX uses its
//!     inter-process transports, not `self`). Raw: `ucp_tag_send_nbx`/`ucp_tag_recv_nbx` with a
//!     fixed tag and full mask on the endpoint. tagspace: the same endpoint, the tag looked up
//!     through the peer's directory for every message (`Node::route_tag`), the receive posted
//!     with the namespace's exact matcher, two ways: "owned" through the safe wrappers with
//!     owned buffers (`Endpoint::tag_send`, `Worker::tag_recv`: a `Request` each), "buf" with
//!     the caller's buffers (`Node::send_from` / `Node::recv_into`: routed, matched and counted
//!     by the node, no request for a message already waiting). Each tagspace block follows a
//!     raw block; a ratio is the median of those pairs' ratios. `TAGSPACE_BENCH_ONLY=shm:8`
//!     runs that one cell alone.
//! (b) Matching scalability: 8 B ping-pong while N receives of *other* namespaces wait on both
//!     workers, N = 1, 100, 10 000: with tagspace's full masks (UCX hashes them) versus a
//!     partial-mask scheme (one library field, as BlazingSQL/EndpointReuse-style code does; UCX
//!     keeps such receives on a list that every arrival scans).
//! (c) Connect scaling: one node connects to 128 peers one by one; the time for the k-th
//!     connection (endpoint + handshake until both sides are established) and the control
//!     frames it cost, as k grows.
//! (d) The per-message lookup alone: `route_tag` against `endpoint_to` plus a fixed tag.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};
use tagspace_core::{Registry, TagLayout};
use tagspace_ucx::node::{Clock, LibId, Node, NodeConfig};
use tagspace_ucx::ucp::{Completion, Config, Request, Started, Worker};
use ucx1_sys as sys;

const SIZES: [usize; 3] = [8, 64 * 1024, 1 << 20];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Raw,
    /// Owned buffers: `Endpoint::tag_send` / `Worker::tag_recv` (a `Request` each).
    Tagspace,
    /// The caller's buffers: `Node::send_from` / `Node::recv_into`.
    Borrowed,
}

#[derive(Clone, Copy, Debug)]
enum Job {
    /// Echo `iters` messages of `size` bytes.
    Pong {
        mode: Mode,
        size: usize,
        iters: usize,
    },
    /// Receive `count` messages of `size` bytes, then send one 8-byte ack.
    Sink {
        mode: Mode,
        size: usize,
        count: usize,
    },
    /// Post `n` pending receives of other namespaces (`partial`: with partial masks).
    Pending {
        n: usize,
        partial: bool,
    },
    Stop,
}

struct Side {
    node: Node,
    lib: LibId,
    peer: u64,
    pending: Vec<Request>,
    /// The size of the messages being received (the raw path gets no length from UCX here).
    size_hint: usize,
}

/// The streaming acknowledgement's payload (not the inbox payload, which is reserved).
const ACK: u64 = 1 << 30;
const RAW_TAG: u64 = 0x00ff_0000_0000_0001; // namespace field 0 (outside tagspace)

impl Side {
    fn worker(&self) -> Worker {
        self.node.worker().clone()
    }

    /// The tag to send with: raw = fixed; tagspace = through the directory, every time.
    fn send(&mut self, mode: Mode, payload: u64, buf: Vec<u8>) -> Vec<u8> {
        let started = match mode {
            Mode::Raw => {
                let ep = self.node.endpoint_to(self.peer).expect("endpoint");
                return raw_send(&self.worker(), ep.as_raw(), RAW_TAG, buf);
            }
            Mode::Borrowed => {
                self.node
                    .send_from(self.lib, self.peer, payload, &buf)
                    .expect("send");
                return buf;
            }
            Mode::Tagspace => {
                let (ep, tag) = self
                    .node
                    .route_tag(self.lib, self.peer, payload)
                    .expect("route")
                    .expect("announced");
                ep.tag_send(tag, buf).expect("send")
            }
        };
        match started {
            Started::Done(b) => b,
            Started::Pending(r) => match r.wait().expect("send completes") {
                Completion::Sent(b) => b.expect("buffer"),
                Completion::Received { .. } => unreachable!(),
            },
        }
    }

    fn recv(&mut self, mode: Mode, payload: u64, buf: Vec<u8>) -> Vec<u8> {
        match mode {
            Mode::Raw => raw_recv(&self.worker(), RAW_TAG, buf, self.size_hint),
            Mode::Borrowed => {
                let mut buf = buf;
                let size = self.size_hint;
                if buf.len() != size {
                    buf.resize(size, 0);
                }
                let n = self
                    .node
                    .recv_into_from(self.lib, self.peer, payload, &mut buf, None)
                    .expect("receive completes");
                assert_eq!(n, size);
                buf
            }
            Mode::Tagspace => {
                let m = self
                    .node
                    .matcher_from(self.lib, self.peer, payload)
                    .unwrap();
                match self
                    .worker()
                    .tag_recv(m.tag(), m.mask(), buf)
                    .expect("recv")
                    .wait()
                    .expect("receive completes")
                {
                    Completion::Received { data, .. } => data,
                    Completion::Sent(_) => unreachable!(),
                }
            }
        }
    }

    fn post_pending(&mut self, n: usize, partial: bool) {
        for r in self.pending.drain(..) {
            r.cancel();
        }
        for _ in 0..20 {
            self.node.worker().progress();
        }
        let f = self.node.layout().namespace_field();
        for i in 0..n {
            // Namespaces 100..199 (nobody sends there), distinct payloads.
            let ns = 100 + (i % 100) as u64;
            let (tag, mask) = if partial {
                (ns << f.shift(), f.mask())
            } else {
                ((ns << f.shift()) | i as u64, u64::MAX)
            };
            let r = self
                .worker()
                .tag_recv(tag, mask, Vec::with_capacity(8))
                .expect("pending recv");
            self.pending.push(r);
        }
    }
}

/// Raw `ucx1-sys`: one tag send, progressed to completion.
fn raw_send(w: &Worker, ep: sys::ucp_ep_h, tag: u64, buf: Vec<u8>) -> Vec<u8> {
    // SAFETY: zeroed = no optional fields.
    let param: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
    // SAFETY: ep is live; buf outlives the request (we wait below).
    let p = unsafe {
        sys::ucp_tag_send_nbx(
            ep,
            buf.as_ptr() as *const c_void,
            buf.len() as _,
            tag,
            &param,
        )
    };
    raw_wait(w, p);
    buf
}

/// Raw `ucx1-sys`: one tag receive with a full mask, progressed to completion.
fn raw_recv(w: &Worker, tag: u64, mut buf: Vec<u8>, size: usize) -> Vec<u8> {
    assert!(buf.capacity() >= size);
    // SAFETY: zeroed = no optional fields.
    let param: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
    // SAFETY: the buffer's capacity is writable and outlives the request (we wait below).
    let p = unsafe {
        sys::ucp_tag_recv_nbx(
            w.as_raw(),
            buf.as_mut_ptr() as *mut c_void,
            buf.capacity() as _,
            tag,
            u64::MAX,
            &param,
        )
    };
    raw_wait(w, p);
    // SAFETY: the sender always sends exactly `size` bytes in this benchmark.
    unsafe { buf.set_len(size) };
    buf
}

fn raw_wait(w: &Worker, p: sys::ucs_status_ptr_t) {
    if p.is_null() {
        return;
    }
    assert!((p as usize) < (-100isize) as usize, "UCX error");
    // SAFETY: p is a live request until freed below.
    unsafe {
        while sys::ucp_request_check_status(p) as i8 == 1 {
            sys::ucp_worker_progress(w.as_raw());
        }
        sys::ucp_request_free(p);
    }
}

fn make_pair(
    ucx: &Config,
) -> (
    Side,
    mpsc::Sender<Job>,
    mpsc::Receiver<()>,
    thread::JoinHandle<()>,
) {
    let (addr_tx, addr_rx) = mpsc::channel::<(std::net::SocketAddr, u64)>();
    let (job_tx, job_rx) = mpsc::channel::<Job>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let (tok_tx, tok_rx) = mpsc::channel::<u64>();
    // Set by A once it sees B as established and announced: until then B must keep progressing,
    // or the last handshake frame it owes A can sit in its worker forever.
    let ready = Arc::new(AtomicBool::new(false));
    let ready_b = Arc::clone(&ready);
    let ucx_b = ucx.clone();
    let h = thread::spawn(move || {
        let reg: &'static Registry<256> = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
        let mut node = Node::with_registry(NodeConfig::loopback(ucx_b), reg).unwrap();
        let lib = node.register("bench").unwrap();
        addr_tx
            .send((node.listen_addr().unwrap(), node.token()))
            .unwrap();
        let peer = tok_rx.recv().unwrap();
        while node.live_connections_to(peer) == 0
            || node.route_tag(lib, peer, 0).ok().flatten().is_none()
        {
            node.progress();
        }
        while !ready_b.load(Ordering::Acquire) {
            node.progress();
        }
        let mut side = Side {
            node,
            lib,
            peer,
            pending: Vec::new(),
            size_hint: 0,
        };
        done_tx.send(()).unwrap();
        while let Ok(job) = job_rx.recv() {
            match job {
                Job::Pong { mode, size, iters } => {
                    side.size_hint = size;
                    let mut buf = vec![1u8; size];
                    for i in 0..iters {
                        buf = side.recv(mode, i as u64, reuse(mode, buf, size));
                        buf = side.send(mode, i as u64, buf);
                    }
                }
                Job::Sink { mode, size, count } => {
                    side.size_hint = size;
                    let mut buf = Vec::with_capacity(size);
                    for i in 0..count {
                        buf = side.recv(mode, i as u64, reuse(mode, buf, size));
                    }
                    side.send(mode, ACK, vec![0u8; 8]);
                    side.size_hint = 0;
                }
                Job::Pending { n, partial } => side.post_pending(n, partial),
                Job::Stop => break,
            }
            done_tx.send(()).unwrap();
        }
        for r in side.pending.drain(..) {
            r.cancel();
        }
        side.node.shutdown(500);
    });
    let (addr, peer) = addr_rx.recv().unwrap();
    let reg: &'static Registry<256> = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
    let mut node = Node::with_registry(
        NodeConfig {
            listen: None,
            ..NodeConfig::loopback(ucx.clone())
        },
        reg,
    )
    .unwrap();
    let lib = node.register("bench").unwrap();
    tok_tx.send(node.token()).unwrap();
    node.connect(addr).unwrap();
    while node.live_connections_to(peer) == 0
        || node.route_tag(lib, peer, 0).ok().flatten().is_none()
    {
        node.progress();
    }
    ready.store(true, Ordering::Release);
    if std::env::var_os("BENCH_EP_INFO").is_some() {
        // Which transports UCX chose for this pair (the check that "shm" is shared memory).
        let ep = node.endpoint_to(peer).unwrap();
        // SAFETY: fd 1 is open for the process's life; the endpoint is live; the FILE is
        // flushed and deliberately not closed (closing it would close stdout).
        unsafe {
            let f = libc::fdopen(1, c"w".as_ptr());
            assert!(!f.is_null(), "fdopen(stdout)");
            sys::ucp_ep_print_info(ep.as_raw(), f as *mut _);
            libc::fflush(f);
        }
    }
    let a = Side {
        node,
        lib,
        peer,
        pending: Vec::new(),
        size_hint: 0,
    };
    done_rx.recv().unwrap();
    (a, job_tx, done_rx, h)
}

/// A receive buffer of `size` capacity, reusing `buf`'s allocation (borrowed mode: of `size`
/// length, which it keeps from one message to the next without writing it).
fn reuse(mode: Mode, mut buf: Vec<u8>, size: usize) -> Vec<u8> {
    if mode == Mode::Borrowed {
        buf.resize(size, 0);
        return buf;
    }
    buf.clear();
    buf.reserve(size);
    buf
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// One ping-pong block: median round trip / 2, in µs.
fn pingpong(
    a: &mut Side,
    jobs: &mpsc::Sender<Job>,
    done: &mpsc::Receiver<()>,
    mode: Mode,
    size: usize,
    iters: usize,
) -> f64 {
    jobs.send(Job::Pong { mode, size, iters }).unwrap();
    a.size_hint = size;
    let mut buf = vec![7u8; size];
    let mut rtts = Vec::with_capacity(iters);
    for i in 0..iters {
        let t = Instant::now();
        buf = a.send(mode, i as u64, buf);
        buf = a.recv(mode, i as u64, reuse(mode, buf, size));
        rtts.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    done.recv().unwrap();
    median(&mut rtts)
}

/// One streaming block: MB/s for `count` messages of `size` bytes, 1 in flight per send call
/// (the receiver pre-posts nothing: each send completes as UCX's protocol allows).
fn stream(
    a: &mut Side,
    jobs: &mpsc::Sender<Job>,
    done: &mpsc::Receiver<()>,
    mode: Mode,
    size: usize,
    count: usize,
) -> f64 {
    jobs.send(Job::Sink { mode, size, count }).unwrap();
    let mut buf = vec![7u8; size];
    let t = Instant::now();
    for i in 0..count {
        buf = a.send(mode, i as u64, buf);
    }
    a.size_hint = 8;
    a.recv(mode, ACK, Vec::with_capacity(8));
    let secs = t.elapsed().as_secs_f64();
    done.recv().unwrap();
    (size * count) as f64 / secs / 1e6
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let blocks = if quick { 1 } else { 7 };
    let scale = if quick { 50 } else { 1 };
    let (major, minor, rel) = tagspace_ucx::ucp::ucx_version();
    println!("UCX {major}.{minor}.{rel} loaded; {blocks} alternating blocks per cell, medians");
    if quick {
        println!("(--quick: smoke run, the numbers mean nothing)");
    }

    println!("\n(a) latency (µs, half round trip) and bandwidth (MB/s): raw ucx1-sys vs tagspace");
    println!("    (owned: Vec buffers through a Request; buf: the caller's buffers, Node::send_from/recv_into)");
    println!(
        "{:<4} {:>7} {:>8} {:>8} {:>6} {:>8} {:>6}   {:>8} {:>8} {:>6} {:>8} {:>6}",
        "tl",
        "size",
        "raw lat",
        "owned",
        "ratio",
        "buf",
        "ratio",
        "raw bw",
        "owned",
        "ratio",
        "buf",
        "ratio"
    );
    // `TAGSPACE_BENCH_ONLY=shm:8` runs section (a) for that transport and size alone (profiling).
    // `TAGSPACE_BENCH_ONLY=cd` runs sections (c) and (d) alone.
    let only_var = std::env::var("TAGSPACE_BENCH_ONLY").ok();
    let only_cd = only_var.as_deref() == Some("cd");
    let only: Option<(String, usize)> = only_var.filter(|_| !only_cd).map(|v| {
        let (t, s) = v
            .split_once(':')
            .expect("TAGSPACE_BENCH_ONLY=TL:SIZE or cd");
        (t.to_string(), s.parse().expect("TAGSPACE_BENCH_ONLY size"))
    });
    // Each tagspace block is paired with a raw block just before it, and the ratio is the
    // median of the pairs' ratios: a slow drift of the machine (or a mode that leaves the
    // workers slower for a while — the owned path's next block measured ~15 % low) then
    // cancels out instead of landing on whichever mode runs after it.
    const TAGSPACE_MODES: [Mode; 2] = [Mode::Tagspace, Mode::Borrowed];
    for (tl, cfg) in [("shm", Config::shm()), ("tcp", Config::tcp())] {
        if only_cd || only.as_ref().is_some_and(|(t, _)| t != tl) {
            continue;
        }
        let (mut a, jobs, done, h) = make_pair(&cfg);
        for size in SIZES {
            if only.as_ref().is_some_and(|&(_, s)| s != size) {
                continue;
            }
            let iters = (match size {
                8 => 5000,
                65536 => 500,
                _ => 100,
            } / scale)
                .max(2);
            let count = (match size {
                8 => 50_000,
                65536 => 2000,
                _ => 200,
            } / scale)
                .max(2);
            // [raw, owned, buf] values, and the per-pair ratios of owned and buf.
            let (mut lat, mut bw): ([Vec<f64>; 3], [Vec<f64>; 3]) = Default::default();
            let (mut lat_r, mut bw_r): ([Vec<f64>; 2], [Vec<f64>; 2]) = Default::default();
            // Warm-up, then raw/tagspace pairs.
            for mode in [Mode::Raw, Mode::Tagspace, Mode::Borrowed] {
                pingpong(&mut a, &jobs, &done, mode, size, iters.min(100));
            }
            for _ in 0..blocks {
                for (m, mode) in TAGSPACE_MODES.into_iter().enumerate() {
                    let rl = pingpong(&mut a, &jobs, &done, Mode::Raw, size, iters);
                    let tl_ = pingpong(&mut a, &jobs, &done, mode, size, iters);
                    let rb = stream(&mut a, &jobs, &done, Mode::Raw, size, count);
                    let tb = stream(&mut a, &jobs, &done, mode, size, count);
                    lat[0].push(rl);
                    lat[m + 1].push(tl_);
                    bw[0].push(rb);
                    bw[m + 1].push(tb);
                    lat_r[m].push(tl_ / rl);
                    bw_r[m].push(tb / rb);
                }
            }
            let [lat, bw] = [lat, bw].map(|c| c.map(|mut v| median(&mut v)));
            let [lat_r, bw_r] = [lat_r, bw_r].map(|c| c.map(|mut v| median(&mut v)));
            println!(
                "{:<4} {:>7} {:>8.2} {:>8.2} {:>6.3} {:>8.2} {:>6.3}   {:>8.1} {:>8.1} {:>6.3} {:>8.1} {:>6.3}",
                tl,
                size,
                lat[0],
                lat[1],
                lat_r[0],
                lat[2],
                lat_r[1],
                bw[0],
                bw[1],
                bw_r[0],
                bw[2],
                bw_r[1],
            );
        }
        jobs.send(Job::Stop).unwrap();
        h.join().unwrap();
        a.node.shutdown(500);
    }

    if only.is_some() {
        return;
    }
    if !only_cd {
        section_b(blocks, scale);
    }
    section_cd(quick);
}

fn section_b(blocks: usize, scale: usize) {
    println!(
        "\n(b) matching: 8 B half round trip (µs) with N receives of other namespaces pending"
    );
    println!("{:>7} {:>14} {:>14}", "N", "tagspace", "partial masks");
    let (mut a, jobs, done, h) = make_pair(&Config::shm());
    let iters = (2000 / scale).max(2);
    let mut first = [0.0f64; 2];
    let mut last = [0.0f64; 2];
    for (row, n) in [1usize, 100, 10_000].into_iter().enumerate() {
        let mut cells = [0.0f64; 2];
        for (c, partial) in [false, true].into_iter().enumerate() {
            a.post_pending(n, partial);
            jobs.send(Job::Pending { n, partial }).unwrap();
            done.recv().unwrap();
            let mut v: Vec<f64> = (0..blocks)
                .map(|_| pingpong(&mut a, &jobs, &done, Mode::Tagspace, 8, iters))
                .collect();
            cells[c] = median(&mut v);
        }
        if row == 0 {
            first = cells;
        }
        last = cells;
        println!("{:>7} {:>14.2} {:>14.2}", n, cells[0], cells[1]);
    }
    println!(
        "growth 1 → 10 000: tagspace {:.2}x, partial masks {:.2}x",
        last[0] / first[0],
        last[1] / first[1]
    );
    a.post_pending(0, false);
    jobs.send(Job::Pending {
        n: 0,
        partial: false,
    })
    .unwrap();
    done.recv().unwrap();
    jobs.send(Job::Stop).unwrap();
    h.join().unwrap();
    a.node.shutdown(500);
}

fn section_cd(quick: bool) {
    println!(
        "\n(c) connect scaling over TCP: the k-th connection (endpoint + handshake, until both \
         sides route)"
    );
    let peers = if quick { 8 } else { 128 };
    let clock = Clock::Real(Instant::now());
    let mk = |listen: bool| {
        let reg: &'static Registry<256> = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
        let mut cfg = NodeConfig::loopback(Config::tcp());
        cfg.clock = clock.clone();
        if !listen {
            cfg.listen = None;
        }
        let mut n = Node::with_registry(cfg, reg).unwrap();
        n.register("dask").unwrap();
        n.register("cuml").unwrap();
        n
    };
    let mut hub = mk(false);
    let mut others: Vec<Node> = (0..peers).map(|_| mk(true)).collect();
    let mut times = Vec::new();
    let mut frames = Vec::new();
    for p in others.iter_mut() {
        let before = hub.stats().control_sent;
        let t = Instant::now();
        hub.connect(p.listen_addr().unwrap()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        // usable both ways: proven, and each side's pair value (the PAIR frame) in
        let dask = LibId(0);
        let routed = |a: &Node, b: &Node| a.route_tag(dask, b.token(), 0).ok().flatten().is_some();
        while !(routed(&hub, p) && routed(p, &hub)) && Instant::now() < deadline {
            hub.progress();
            p.progress();
        }
        times.push(t.elapsed().as_secs_f64() * 1e3);
        frames.push(hub.stats().control_sent - before);
    }
    let bucket = |lo: usize, hi: usize| {
        let mut v: Vec<f64> = times[lo.min(times.len())..hi.min(times.len())].to_vec();
        if v.is_empty() {
            f64::NAN
        } else {
            median(&mut v)
        }
    };
    let ranges = [(0, 8), (8, 32), (32, 64), (64, 128)];
    let base = bucket(0, 8);
    println!("{:>10} {:>12} {:>8}", "k", "median ms", "vs 1-8");
    for (lo, hi) in ranges {
        if lo >= times.len() {
            break;
        }
        let m = bucket(lo, hi);
        println!(
            "{:>10} {:>12.3} {:>8.2}",
            format!("{}-{}", lo + 1, hi),
            m,
            m / base
        );
    }
    let (fmin, fmax) = (frames.iter().min().unwrap(), frames.iter().max().unwrap());
    println!("control frames the hub sent per connection: min {fmin}, max {fmax} (constant: P3)");

    // (d) The per-message lookup alone, with the hub's `peers` connections open: tagspace's
    // `route_tag` (connection, cached route, checked tag) against what the raw path does per
    // message (`endpoint_to`, then a fixed tag).
    println!("\n(d) per-message lookup with {peers} connections open (ns per call)");
    let dask = LibId(0); // mk registers dask first
    let far = others.last().unwrap().token();
    let calls: u64 = if quick { 100_000 } else { 20_000_000 };
    let mut sink = 0u64;
    let mut time_it = |f: &mut dyn FnMut(u64) -> u64| {
        let t = Instant::now();
        for i in 0..calls {
            sink ^= f(std::hint::black_box(i) & 0xffff);
        }
        t.elapsed().as_secs_f64() * 1e9 / calls as f64
    };
    let raw_ns = time_it(&mut |i| {
        hub.endpoint_to(std::hint::black_box(far)).unwrap().as_raw() as u64 ^ RAW_TAG ^ i
    });
    let ts_ns = time_it(&mut |i| {
        let (ep, tag) = hub
            .route_tag(dask, std::hint::black_box(far), i)
            .unwrap()
            .unwrap();
        ep.as_raw() as u64 ^ tag
    });
    std::hint::black_box(sink);
    println!(
        "endpoint_to + fixed tag {raw_ns:.1}, route_tag {ts_ns:.1}, ratio {:.2}",
        ts_ns / raw_ns
    );

    for n in others.iter_mut() {
        n.shutdown(100);
    }
    hub.shutdown(500);
    drop(others);
}
