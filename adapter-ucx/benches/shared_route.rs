//! Routing through a shared node ([`SharedNode`], issue 12) from several library threads at
//! once, against one thread, in the same run; and against a plain [`Node`]'s `route_tag` (no
//! lock), the single-thread baseline.
//!
//! Two hosts on plain libucp with `UCS_THREAD_MODE_MULTI` workers, connected over TCP, a
//! tagspace node on each (host progress: a host thread progresses the workers, a service
//! thread calls `SharedNode::progress`, as a runtime would), library "dask" on both. Each
//! library thread calls [`Library::route`] (the data path of a host that sends with its own
//! `ucp_tag_send_nbx`) in a loop; reported: ns per call per thread and the aggregate
//! throughput with 1, 2 and 4 threads, as ratios to 1 thread. The route takes the node's lock
//! shared, so threads do not wait on each other — but they do share the lock's cache line
//! (an atomic add per call), and the machine's core count caps the scaling.
//!
//! Needs a UCX with thread support (the system's or the 1.22 wheel; ucx1-sys's bundled 1.12.1
//! gives SINGLE workers): build with `cargo bench -p tagspace-ucx --bench shared_route
//! --no-run` and run the binary with `env -u LD_LIBRARY_PATH` (the system's UCX) or
//! `LD_LIBRARY_PATH=$(scripts/ucx-lib.sh wheel)`; `-- --quick` is a smoke run.

#[path = "../tests/rawhost/mod.rs"]
mod rawhost;

use rawhost::{progress_thread, registry, service_threads, shared_pair};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use tagspace_ucx::node::{Node, Role};
use tagspace_ucx::ucp::Config;

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let calls: u64 = if quick { 20_000 } else { 5_000_000 };
    let rounds = if quick { 1 } else { 5 };
    let ucx = Config::tcp();
    let Some((ha, hb, a_ep, b_ep, a, b)) = shared_pair(&ucx, "shared_route") else {
        return;
    };
    if quick {
        println!("(--quick: smoke run, the numbers mean nothing)");
    }
    println!(
        "UCX {:?}, {} CPUs",
        tagspace_ucx::ucp::ucx_version(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let stop = Arc::new(AtomicBool::new(false));
    let pause = Duration::from_micros(100);
    let host_progress = progress_thread(&[ha.worker, hb.worker], &stop, pause);
    let service = service_threads(&[&a, &b], &stop, pause);
    // SAFETY: live endpoints of these workers.
    unsafe { a.attach(a_ep, Role::Initiator) }.unwrap();
    unsafe { b.attach(b_ep, Role::Acceptor) }.unwrap();
    let lib_a = Arc::new(a.register("dask").unwrap());
    let _lib_b = b.register("dask").unwrap();
    let tb = b.token();
    let start = Instant::now();
    while !matches!(lib_a.route(tb, 0), Ok(Some(_))) {
        assert!(start.elapsed() < Duration::from_secs(30), "handshake");
        std::thread::sleep(Duration::from_millis(1));
    }

    // Threads calling route concurrently: ns per call (per thread), best of `rounds`.
    let run = |threads: usize| -> f64 {
        let mut best = f64::MAX;
        for _ in 0..rounds {
            let go = Arc::new(Barrier::new(threads));
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let (lib, go) = (lib_a.clone(), go.clone());
                    std::thread::spawn(move || {
                        go.wait();
                        let t = Instant::now();
                        let mut sink = 0u64;
                        for i in 0..calls {
                            let (ep, tag) = lib
                                .route(std::hint::black_box(tb), i & 0xffff)
                                .unwrap()
                                .unwrap();
                            sink ^= ep as u64 ^ tag;
                        }
                        std::hint::black_box(sink);
                        t.elapsed().as_secs_f64() * 1e9 / calls as f64
                    })
                })
                .collect();
            let per_call = handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .fold(0.0, f64::max);
            best = best.min(per_call);
        }
        best
    };
    let one = run(1);
    println!("\nLibrary::route from N threads at once (ns per call, per thread; throughput vs 1)");
    println!("threads  ns/call  throughput x1");
    for n in [1usize, 2, 4] {
        let ns = if n == 1 { one } else { run(n) };
        println!("{n:>7}  {ns:>7.1}  {:>13.2}", n as f64 * one / ns);
    }

    drop(lib_a);
    drop(_lib_b);
    stop.store(true, Ordering::Relaxed);
    for t in service {
        t.join().unwrap();
    }
    drop((a, b));
    host_progress.join().unwrap();

    // The lock-free baseline: a plain node's route_tag on one thread (tagspace's own worker
    // pair over TCP, no host).
    let plain = plain_route_ns(calls);
    println!(
        "\nsingle thread: shared node {one:.1} ns, plain Node::route_tag {plain:.1} ns, ratio {:.2}",
        one / plain
    );
    ha.close(a_ep, &[&hb]);
    hb.close(b_ep, &[&ha]);
}

fn plain_route_ns(calls: u64) -> f64 {
    let mk = || {
        let mut n = Node::with_registry(
            tagspace_ucx::node::NodeConfig::loopback(Config::tcp()),
            registry(),
        )
        .unwrap();
        let l = n.register("dask").unwrap();
        (n, l)
    };
    let (mut x, lx) = mk();
    let (mut y, _ly) = mk();
    x.connect(y.listen_addr().unwrap()).unwrap();
    let ty = y.token();
    let start = Instant::now();
    while !matches!(x.route_tag(lx, ty, 0), Ok(Some(_))) {
        assert!(start.elapsed() < Duration::from_secs(30), "handshake");
        x.progress();
        y.progress();
    }
    let t = Instant::now();
    let mut sink = 0u64;
    for i in 0..calls {
        let (ep, tag) = x
            .route_tag(lx, std::hint::black_box(ty), i & 0xffff)
            .unwrap()
            .unwrap();
        sink ^= ep.as_raw() as u64 ^ tag;
    }
    std::hint::black_box(sink);
    let ns = t.elapsed().as_secs_f64() * 1e9 / calls as f64;
    x.shutdown(200);
    y.shutdown(200);
    ns
}
