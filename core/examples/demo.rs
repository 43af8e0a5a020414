//! The main job until the UCX adapter lands: several real processes on this machine talk over
//! loopback TCP, using tagspace-core for everything above the socket.
//!
//! `cargo run --release -p tagspace-core --example demo [-- PROCESSES MESSAGES]`
//!
//! Each process registers `dask`, `cuml`, `blazingsql` (well-known ids) and `engine-a..c`
//! (dynamic ids) in a different order, plus a name only it has. Every pair of processes connects
//! both ways at the same moment; the HELLO tie-break keeps one connection per pair (P4). Each
//! process then sends, per peer and per shared library, a begin-transmission message to the
//! peer's inbox for that library and MESSAGES data messages, all tagged through the peer
//! directory (P1). Receivers dispatch by the tag's namespace field only, and check the body
//! names the library that received it. A few messages carry an unregistered namespace id and
//! must be counted as stray, not delivered (D2). Exit status is non-zero if anything was
//! misdelivered or lost.
//!
//! What this is not: UCX. TCP here stands in for the transport; there is no tag-matching
//! engine, so the hostile wildcard-probing library of the UCX demo has no equivalent.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tagspace_core::session::{Event, Session};
use tagspace_core::wire::{self, CloseReason, Role};
use tagspace_core::{Namespace, Registry, TagLayout};

const SHARED: [&str; 6] = [
    "dask",
    "cuml",
    "blazingsql",
    "engine-a",
    "engine-b",
    "engine-c",
];
const KIND_CONTROL: u8 = 0;
const KIND_DATA: u8 = 1;
const MAX_DATA: usize = 4096;

static REGISTRY: Registry<256> = Registry::new(TagLayout::DEFAULT);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let index: usize = args[2].parse().expect("child index");
        let messages: u64 = args[3].parse().expect("message count");
        std::process::exit(child(index, messages));
    }
    let processes: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(4);
    let messages: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(200);
    std::process::exit(parent(processes.max(2), messages));
}

fn parent(n: usize, messages: u64) -> i32 {
    println!(
        "tagspace demo: {n} processes over loopback TCP, {messages} messages per library per peer"
    );
    let exe = std::env::current_exe().expect("current exe");
    let mut children: Vec<_> = (0..n)
        .map(|i| {
            Command::new(&exe)
                .args(["--child", &i.to_string(), &messages.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn child")
        })
        .collect();
    // Each child prints its listening port first; then gets everyone's.
    let mut readers: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().unwrap()))
        .collect();
    let ports: Vec<String> = readers
        .iter_mut()
        .map(|r| {
            let mut line = String::new();
            r.read_line(&mut line).expect("port line");
            line.trim().to_owned()
        })
        .collect();
    for c in &mut children {
        let mut stdin = c.stdin.take().unwrap();
        writeln!(stdin, "{}", ports.join(" ")).expect("send ports");
    }
    let mut rows = Vec::new();
    let mut failures = 0;
    for (i, (mut c, r)) in children.into_iter().zip(readers).enumerate() {
        for line in r.lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("ROW ") {
                rows.push(format!("{i:>4} {rest}"));
            } else {
                println!("[{i}] {line}");
            }
        }
        let status = c.wait().expect("wait child");
        if !status.success() {
            failures += 1;
            println!("process {i} failed: {status}");
        }
    }
    println!("\nproc namespace     id  sent  recv  misdelivered  stray  unroutable");
    for r in &rows {
        println!("{r}");
    }
    if failures == 0 {
        println!("\nOK: every message reached the right namespace exactly once");
        0
    } else {
        println!("\nFAILED: {failures} process(es) reported errors");
        1
    }
}

/// One connection: a session plus the socket to write to.
struct Conn {
    stream: TcpStream,
    session: Session<256>,
    active: bool,
}

enum Incoming {
    Frame(usize, u8, Vec<u8>),
    Closed,
}

fn write_frame(stream: &mut TcpStream, kind: u8, body: &[u8]) -> std::io::Result<()> {
    let mut head = [0u8; 5];
    head[0] = kind;
    head[1..].copy_from_slice(&(body.len() as u32).to_be_bytes());
    stream.write_all(&head)?;
    stream.write_all(body)
}

fn reader(id: usize, mut stream: TcpStream, tx: mpsc::Sender<Incoming>) {
    loop {
        let mut head = [0u8; 5];
        if stream.read_exact(&mut head).is_err() {
            break;
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        // Bounded: a length field never makes us allocate more than a frame can be.
        if len > wire::MAX_FRAME_LEN.max(MAX_DATA) {
            break;
        }
        let mut body = vec![0u8; len];
        if stream.read_exact(&mut body).is_err()
            || tx.send(Incoming::Frame(id, head[0], body)).is_err()
        {
            break;
        }
    }
    let _ = tx.send(Incoming::Closed);
}

#[derive(Default, Clone, Copy)]
struct Counts {
    sent: u64,
    recv: u64,
    misdelivered: u64,
    unroutable: u64,
}

fn child(index: usize, messages: u64) -> i32 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    println!("{}", listener.local_addr().unwrap().port());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("ports");
    let ports: Vec<u16> = line
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let peers = ports.len() - 1;

    // Different registration order in every process: ids of dynamic names differ (P1).
    let mut order: Vec<&str> = SHARED.to_vec();
    order.rotate_left(index % SHARED.len());
    if index % 2 == 1 {
        order.reverse();
    }
    let solo = format!("solo-{index}");
    let mut libs: Vec<Namespace<'static, 256>> = order
        .iter()
        .map(|n| REGISTRY.register(n).unwrap())
        .collect();
    libs.push(REGISTRY.register(&solo).unwrap());
    // The process's identity (P6): a key from the operating system's randomness.
    let identity = {
        let mut seed = [0u8; 32];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut seed)
            .expect("read /dev/urandom");
        tagspace_core::Identity::from_seed(&seed)
    };

    let (tx, rx) = mpsc::channel();
    let mut conns: Vec<Conn> = Vec::new();
    // Connect to everyone while accepting from everyone: every pair gets two connections.
    let acceptor = {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut accepted = Vec::new();
            for _ in 0..peers {
                let (s, _) = listener.accept().expect("accept");
                accepted.push(s);
            }
            let _ = tx; // keep the channel open until accepted streams are handed over
            accepted
        })
    };
    for (j, &port) in ports.iter().enumerate() {
        if j != index {
            let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
            conns.push(Conn {
                stream: s,
                session: Session::new(Role::Initiator, &identity, REGISTRY.layout()),
                active: true,
            });
        }
    }
    for s in acceptor.join().unwrap() {
        conns.push(Conn {
            stream: s,
            session: Session::new(Role::Acceptor, &identity, REGISTRY.layout()),
            active: true,
        });
    }
    for (id, c) in conns.iter().enumerate() {
        let (r, tx) = (c.stream.try_clone().unwrap(), tx.clone());
        std::thread::spawn(move || reader(id, r, tx));
    }
    drop(tx);

    let mut buf = vec![0u8; wire::MAX_FRAME_LEN];
    // Control frames are best effort: a peer that has gone fails only its own connection.
    let flush = |c: &mut Conn, buf: &mut [u8]| {
        while let Ok(Some(n)) = c.session.poll_transmit(&REGISTRY, buf) {
            if let Err(e) = write_frame(&mut c.stream, KIND_CONTROL, &buf[..n]) {
                println!("control write failed: {e}");
                break;
            }
        }
    };
    for c in &mut conns {
        flush(c, &mut buf);
    }

    let mut counts: HashMap<String, Counts> = libs
        .iter()
        .map(|l| (l.name().to_string(), Counts::default()))
        .collect();
    let mut stray = 0u64;
    let mut superseded = 0;
    let mut sent_data = false;
    let mut expected_total = 0u64;
    let mut received_total = 0u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut errors = 0;
    let mut eofs = 0;

    while Instant::now() < deadline {
        let msg = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(m) => m,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        match msg {
            Incoming::Closed => eofs += 1,
            Incoming::Frame(id, KIND_CONTROL, body) => {
                let c = &mut conns[id];
                match c.session.handle(&body) {
                    Ok(Some(Event::Closed { .. })) => c.active = false,
                    Ok(_) => {}
                    Err(e) => {
                        println!("control error on connection {id}: {e}");
                        errors += 1;
                    }
                }
                flush(c, &mut buf);
            }
            Incoming::Frame(_, _, body) => {
                // Dispatch by the namespace field alone, as a tag matcher would.
                if body.len() < 8 {
                    errors += 1;
                    continue;
                }
                let tag = u64::from_be_bytes(body[..8].try_into().unwrap());
                let text = String::from_utf8_lossy(&body[8..]);
                let id = REGISTRY.layout().namespace_of(tag);
                match libs.iter().find(|l| l.id() == id) {
                    Some(lib) => {
                        let c = counts.get_mut(lib.name().as_str()).unwrap();
                        if text.split(':').next() == Some(lib.name().as_str()) {
                            c.recv += 1;
                        } else {
                            c.misdelivered += 1;
                        }
                        received_total += 1;
                    }
                    None => stray += 1, // D2: counted and dropped, delivered to nobody
                }
            }
        }
        // Once every connection is established, keep one per peer and send the traffic.
        if !sent_data && conns.iter().all(|c| c.session.peer().is_some()) {
            for c in conns.iter_mut() {
                if c.session.survives_duplicate() == Some(false) {
                    c.active = false;
                    superseded += 1;
                    c.session.close(CloseReason::Superseded);
                    flush(c, &mut buf);
                }
            }
            let survivors = conns.iter().filter(|c| c.active).count();
            if survivors != peers {
                println!("expected {peers} surviving connections, have {survivors}");
                errors += 1;
            }
            for c in conns.iter_mut().filter(|c| c.active) {
                for lib in &libs {
                    let ct = counts.get_mut(lib.name().as_str()).unwrap();
                    let Some(route) = c.session.route(lib) else {
                        ct.unroutable += 1; // P2: the peer has no such namespace
                        continue;
                    };
                    let inbox = lib.remote_inbox(route).unwrap();
                    let mut tags = vec![inbox];
                    tags.extend((0..messages).map(|seq| lib.remote_tag(route, seq).unwrap()));
                    for t in tags {
                        let mut body = t.raw().to_be_bytes().to_vec();
                        body.extend_from_slice(format!("{}:{}", lib.name(), index).as_bytes());
                        write_frame(&mut c.stream, KIND_DATA, &body).expect("write data");
                        ct.sent += 1;
                    }
                    expected_total += messages + 1; // the peer sends us the same
                }
                // Stray traffic: a namespace id nobody registered (D2).
                let t = (200u64 << 56) | 1;
                write_frame(&mut c.stream, KIND_DATA, &t.to_be_bytes()).expect("write stray");
            }
            sent_data = true;
        }
        if sent_data && received_total >= expected_total && stray >= peers as u64 {
            break;
        }
    }
    // Graceful shutdown: CLOSE, stop writing, and read until every peer has stopped too, so no
    // socket closes with unread data (which would reset it and could drop the peer's bytes).
    for c in conns.iter_mut() {
        if c.session.is_established() {
            c.session.close(CloseReason::Normal);
        }
        flush(c, &mut buf);
        let _ = c.stream.shutdown(std::net::Shutdown::Write);
    }
    let drain_until = Instant::now() + Duration::from_secs(10);
    while eofs < conns.len() && Instant::now() < drain_until {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Incoming::Closed) => eofs += 1,
            Ok(Incoming::Frame(id, KIND_CONTROL, body)) => {
                let _ = conns[id].session.handle(&body);
            }
            Ok(Incoming::Frame(..)) => {
                println!("data after shutdown");
                errors += 1;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let mut rows: Vec<_> = libs
        .iter()
        .map(|l| (l.name().to_string(), l.id()))
        .collect();
    rows.sort();
    for (name, id) in rows {
        let c = counts[&name];
        let s = if name == solo { stray } else { 0 };
        println!(
            "ROW {name:<13} {id:>3} {:>5} {:>5} {:>13} {s:>6} {:>11}",
            c.sent, c.recv, c.misdelivered, c.unroutable
        );
        errors += c.misdelivered as i32;
    }
    println!(
        "connections opened {}, superseded {superseded}, stray messages dropped {stray}",
        conns.len()
    );
    if !sent_data {
        println!("handshake did not complete in time");
        errors += 1;
    }
    if received_total != expected_total {
        println!("lost messages: expected {expected_total}, received {received_total}");
        errors += 1;
    }
    if stray != peers as u64 {
        println!("expected {peers} stray messages, counted {stray}");
        errors += 1;
    }
    (errors > 0) as i32
}
