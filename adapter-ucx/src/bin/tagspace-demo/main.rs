//! The main job: several real processes share UCX endpoints through tagspace.
//!
//! `tagspace-demo [--procs N] [--messages M] [--transport tcp|shm] [--simultaneous]
//! [--kill K] [--hostile H]` starts N copies of itself (`peer` role) on this machine. Each
//! registers dask, cuml and blazingsql (well-known ids) and shuffle-engine (a dynamic id, made
//! to differ between processes) in a different order (so the same name has different
//! ids in different processes), connects one UCX endpoint to every other process, and then over
//! those shared endpoints:
//! * every library sends each peer a "begin" message to its inbox tag, then M data messages
//!   (64 B, and every fourth 64 KiB so that rendezvous is used), which the receiver posts exact
//!   full-mask receives for once it has seen the begin message (the BlazingSQL pattern);
//! * a legacy library that ignores tagspace sends raw tags (namespace field 0) on the same
//!   endpoints and peeks at the worker with a full wildcard probe, taking only its own;
//! * a few messages go to namespace id 200, which nobody registers: they must be drained as
//!   stray.
//!
//! Options for the failure tests: `--simultaneous` makes every pair connect both ways at once
//! (one connection must survive per pair, P4); `--kill K` sends SIGKILL to process K halfway
//! through its sends (the others must finish without loss or duplicates, D3); `--hostile H`
//! makes process H send malformed control frames instead of data (its peers must cut it off
//! and carry on, P5).
//!
//! The parent prints a per-namespace table (sent, received, misdelivered, stray, failed) and
//! one-way latency percentiles (send call → receive completion, on the host's monotonic
//! clock), and exits non-zero if any message reached the wrong namespace, was lost between
//! live processes, or was delivered twice.
//!
//! `tagspace-demo faults …` is the recovery job instead: a process stopped and resumed, or the
//! link between two emulated hosts cut and healed, and the processes reconnect by themselves
//! (see `faults.rs`).
//!
//! Under `--cfg loom` (the IPC cache's model checks) the crate is built without UCX, so this
//! binary is then only a stub that says so.

#[cfg(not(loom))]
mod demo;
#[cfg(not(loom))]
mod faults;

#[cfg(not(loom))]
fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("faults") => faults::main(&args[1..]),
        _ => demo::main(),
    }
}

#[cfg(loom)]
fn main() {
    eprintln!("tagspace-demo: built with --cfg loom, which leaves UCX out; build it normally");
    std::process::exit(2);
}
