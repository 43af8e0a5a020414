//! `tagspace-sim`: runs one simulation ([`tagspace_sim::Sim`]) and prints each figure on its
//! own labelled line; the last line is the verdict (`OK`, exit 0, or `FAILED`, exit 1).

use std::process::ExitCode;
use tagspace_sim::{Config, Report, Sim, Topology};

const USAGE: &str = "usage: tagspace-sim [--procs N] [--libs L] [--topology mesh|random|dask] \
[--peers K] [--seed S] [--churn C] [--kills K] [--drops D] [--sample M] [--steady-s T]";

fn parse(args: &[String]) -> Result<Config, String> {
    let procs = match args.iter().position(|a| a == "--procs") {
        Some(i) => number("--procs", args.get(i + 1))?,
        None => 256,
    };
    let mut cfg = Config::new(procs as usize);
    let (mut shape, mut peers) = ("random".to_string(), 8usize);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || number(a, it.next());
        match a.as_str() {
            "--procs" => drop(value()?),
            "--libs" => cfg.libs = value()? as usize,
            "--peers" => peers = value()? as usize,
            "--seed" => cfg.seed = value()?,
            "--churn" => cfg.churn = value()? as usize,
            "--kills" => cfg.kills = value()? as usize,
            "--drops" => cfg.drops = value()? as usize,
            "--sample" => cfg.sample = value()? as usize,
            "--steady-s" => cfg.steady_ms = value()? * 1000,
            "--topology" => {
                shape = it
                    .next()
                    .ok_or("--topology needs mesh, random or dask")?
                    .clone()
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    cfg.topology = match shape.as_str() {
        "mesh" => Topology::Mesh,
        "random" => Topology::Random(peers),
        "dask" => Topology::Dask(peers),
        other => return Err(format!("unknown topology {other:?} (mesh, random or dask)")),
    };
    cfg.check()?;
    Ok(cfg)
}

fn number(what: &str, v: Option<&String>) -> Result<u64, String> {
    let v = v.ok_or(format!("{what} needs a number"))?;
    v.parse()
        .map_err(|_| format!("{what} needs a number, not {v:?}"))
}

/// This process's resident memory, in bytes (0 where `/proc` is not there).
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = (statm.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cfg = match parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tagspace-sim: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "tagspace-sim: {} processes, {} libraries each, {}, seed {}",
        cfg.procs, cfg.libs, cfg.topology, cfg.seed
    );
    let started = std::time::Instant::now();
    let sim = match Sim::new(cfg.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tagspace-sim: {e}");
            return ExitCode::from(2);
        }
    };
    let r = sim.run(&rss);
    print(&cfg, &r);
    println!("wall time: {:.1} s", started.elapsed().as_secs_f64());
    if r.failures.is_empty() {
        println!("OK");
        ExitCode::SUCCESS
    } else {
        for f in &r.failures {
            println!("failure: {f}");
        }
        println!("FAILED: {} checks failed", r.failures.len());
        ExitCode::FAILURE
    }
}

fn print(cfg: &Config, r: &Report) {
    let conns = r.connections;
    println!("connections: {conns}");
    println!(
        "peers per process: {:.1} mean, {} max",
        r.degree_mean, r.degree_max
    );
    let (f, b) = r.handshake.per(conns);
    println!("handshake control frames per connection: {f:.2}");
    println!("handshake control bytes per connection: {b:.0}");
    println!(
        "handshake hops until every directory converged: {}",
        r.handshake_hops
    );
    let (f, b) = r.registration.per(r.registrations);
    println!("registration control frames per registration: {f:.2}");
    println!("registration control bytes per registration: {b:.0}");
    let (f, b) = r.registration.per(r.registration_peers);
    println!("registration control frames per registration and peer: {f:.2}");
    println!("registration control bytes per registration and peer: {b:.1}");
    println!(
        "registration hops until every peer routes to it: {}",
        r.registration_hops
    );
    let secs = (r.steady_ms as f64 / 1000.0).max(1e-9);
    let (f, b) = r.steady.per(conns);
    println!(
        "steady control frames per connection per second: {:.2}",
        f / secs
    );
    println!(
        "steady control bytes per connection per second: {:.1}",
        b / secs
    );
    println!(
        "release hops until no peer routes to it and the id is free: {:.1} mean, {} max ({} events)",
        r.release.mean(),
        r.release.hops_max,
        r.release.events
    );
    println!(
        "registration again hops until every peer routes to it: {:.1} mean, {} max",
        r.reregister.mean(),
        r.reregister.hops_max
    );
    let events = (r.release.events + r.reregister.events).max(1);
    let (f, b) = r.churn.per(events);
    println!("churn control frames per release or registration: {f:.2}");
    println!("churn control bytes per release or registration: {b:.0}");
    println!(
        "churn withdrawal acknowledgement tags: {}",
        r.churn.ack_tags
    );
    println!(
        "kill hops until every peer saw it down: {} ({} killed)",
        r.kill.hops_max, r.kill.events
    );
    println!(
        "restart hops until every directory converged: {}",
        r.restart.hops_max
    );
    let (_, b) = r.restart_traffic.per(r.restart_connections);
    println!("restart control bytes per connection: {b:.0}");
    println!(
        "drop virtual ms until dialled back and converged: {} ({} hops, {} dropped)",
        r.drop.ms_max, r.drop.hops_max, r.drop.events
    );
    for (label, m) in [("", &r.memory), (" after churn and faults", &r.memory_end)] {
        println!(
            "memory per connection{label}: {:.0} bytes",
            m.per_connection
        );
        println!(
            "memory per node{label}: {:.0} bytes mean, {} max",
            m.per_node_mean, m.per_node_max
        );
        println!("memory gone-peers table{label}: {} bytes max", m.gone_max);
    }
    let m = &r.memory;
    println!(
        "memory per connection, of which: session {} bytes (directory {}), route cache {:.0}, \
         table {:.0}, peer index {:.0}, pair values {:.0}",
        m.session, m.directory, m.route_cache, m.table, m.peer_index, m.pairs
    );
    if let Some(h) = r.heap_per_connection {
        println!("simulator resident memory per connection end (fabric included): {h:.0} bytes");
    }
    for l in &r.lookup {
        println!("route lookup with {} peers: {:.1} ns", l.peers, l.ns);
    }
    for l in &r.lookup {
        println!(
            "idle progress with {} peers: {:.0} ns",
            l.peers, l.progress_ns
        );
    }
    for l in &r.lookup {
        println!(
            "connection lookup per incoming frame with {} peers: {:.1} ns",
            l.peers, l.frame_ns
        );
    }
    let d = &r.delivery;
    println!(
        "exactly-once: {} of {} sampled messages once ({} lost, {} changed, {} extra)",
        d.once, d.sent, d.lost, d.changed, d.extra
    );
    println!(
        "route checks: {} ({} wrong, {} unsettled at quiet points)",
        r.route_checks, r.wrong_routes, r.unsettled_routes
    );
    println!("hops: {}, virtual time: {} ms", r.hops, r.virtual_ms);
    let e = &r.reuse;
    println!(
        "EndpointReuse model: bytes per connect: {} mean, {} last ({} connects, {} libraries per pair)",
        e.per_connect(),
        e.last_connect,
        e.connects,
        cfg.libs
    );
    println!(
        "EndpointReuse model: bytes per connection: {}",
        e.bytes / conns.max(1)
    );
    println!(
        "EndpointReuse model: UCX endpoints created: {} (tagspace: {conns})",
        e.endpoints_created
    );
    let m = tagspace_sim::reuse::endpoint_reuse_mesh(cfg.procs, cfg.libs);
    let pairs = (cfg.procs * (cfg.procs - 1) / 2) as u64;
    println!(
        "EndpointReuse model, full mesh of {}: bytes per connect: {} mean, {} last; bytes per connection: {}",
        cfg.procs,
        m.per_connect(),
        m.last_connect,
        m.bytes / pairs.max(1)
    );
}
