//! Real processes over real UCX: the demo binary run with each failure scenario. Every run
//! checks, across processes, that each message between live processes arrived exactly once in
//! its own namespace (the binary exits non-zero otherwise, printing what went wrong).

use std::process::Command;

/// Runs the demo binary. `TAGSPACE_DEMO_UCX_LIB`, when set, replaces the loader path the demo
/// gets (empty: none, so the system's libucp loads), and `TAGSPACE_DEMO_UCX_VERSION`, when set,
/// must be the version it reports loading: `scripts/ucx-matrix.sh` runs these tests against
/// each supported UCX that way. Otherwise it loads what cargo put on the path (ucx1-sys's build).
fn demo(args: &[&str]) -> String {
    run(&[&["--messages", "40"], args].concat(), "OK: every message")
}

/// Runs the recovery job (`tagspace-demo faults`), as [`demo`] runs the demo.
fn faults(args: &[&str]) -> String {
    run(&[&["faults", "--messages", "40"], args].concat(), "\nOK: ")
}

fn run(args: &[&str], verdict: &str) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tagspace-demo"));
    match std::env::var("TAGSPACE_DEMO_UCX_LIB") {
        Ok(lib) if lib.is_empty() => {
            cmd.env_remove("LD_LIBRARY_PATH");
        }
        Ok(lib) => {
            cmd.env("LD_LIBRARY_PATH", lib);
        }
        Err(_) => {}
    }
    let out = cmd.args(args).output().expect("run tagspace-demo");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tagspace-demo {args:?} failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    assert!(stdout.contains(verdict), "{stdout}");
    if let Ok(v) = std::env::var("TAGSPACE_DEMO_UCX_VERSION") {
        assert!(
            stdout.contains(&format!("UCX {v} loaded")),
            "expected UCX {v}: {stdout}"
        );
    }
    stdout
}

/// Four processes, each registering the libraries in a different order (dynamic ids differ).
#[test]
fn different_registration_orders() {
    let out = demo(&["--procs", "4"]);
    let ids: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("namespace ids"))
        .collect();
    assert_eq!(ids.len(), 4);
    let shuffle: std::collections::HashSet<&str> = ids
        .iter()
        .map(|l| l.split("shuffle-engine=").nth(1).unwrap_or(""))
        .collect();
    assert!(shuffle.len() > 1, "the dynamic ids should differ: {ids:?}");
}

/// kill -9 of one process halfway through its sends: the others finish without loss or
/// duplicates, and see the failure.
#[test]
fn kill_one_peer_mid_stream() {
    let out = demo(&["--procs", "4", "--kill", "2"]);
    assert!(out.contains("process 2 killed (SIGKILL)"), "{out}");
}

/// Every pair connects both ways at once: one connection per pair survives (P4).
#[test]
fn simultaneous_connect() {
    demo(&["--procs", "3", "--simultaneous"]);
}

/// One process sends malformed control frames: its peers cut it off and carry on (P5).
#[test]
fn malformed_control_bytes() {
    demo(&["--procs", "4", "--hostile", "1"]);
}

/// The same exchange over shared memory with four processes. Every process accepts
/// connections, and a send posted on an accepted endpoint before its wire-up finished broke
/// shared memory on UCX < 1.15 (openucx/ucx#6872): this failed every time before tagspace
/// waited for each new endpoint's first flush (U1).
#[test]
fn shared_memory() {
    demo(&["--procs", "4", "--transport", "shm"]);
}

/// kill -9 over shared memory: operations that can only finish through the dead peer end with
/// `PeerDown` (UCX leaves a dead peer's rendezvous requests in progress when its shared-memory
/// FIFO is full, D3), and the survivors finish exactly once.
#[test]
fn shared_memory_kill_one_peer() {
    let out = demo(&["--procs", "4", "--transport", "shm", "--kill", "1"]);
    assert!(out.contains("process 1 killed (SIGKILL)"), "{out}");
}

/// A DGX-class node: eight processes, over shared memory and over TCP.
#[test]
fn eight_processes() {
    demo(&["--procs", "8", "--transport", "shm"]);
    demo(&["--procs", "8", "--transport", "tcp"]);
}

/// Simultaneous connect and a hostile peer over shared memory.
#[test]
fn shared_memory_simultaneous_and_hostile() {
    demo(&["--procs", "4", "--transport", "shm", "--simultaneous"]);
    demo(&["--procs", "4", "--transport", "shm", "--hostile", "2"]);
}

/// A process stopped for good (SIGSTOP) halfway through its sends: UCX sees nothing wrong (the
/// process lives, its endpoints are fine), so only the heartbeat (`Liveness`) can end its
/// connections. Without it the others' sends to it — eager ones queued behind its full
/// shared-memory FIFO or TCP window, rendezvous ones waiting for it — stay in flight for ever
/// and the run hangs; with it they end with `PeerDown`, and the rest arrives exactly once.
/// (The same path frees a process whose shared-memory receive queue a kill left stuck.)
#[test]
fn a_stopped_process_is_cut_off_by_the_heartbeat() {
    for transport in ["tcp", "shm"] {
        let out = demo(&["--procs", "4", "--transport", transport, "--stop", "2"]);
        assert!(out.contains("process 2 stopped (SIGSTOP)"), "{out}");
    }
}

/// A process stopped (SIGSTOP) past the heartbeat's timeout, then resumed (SIGCONT) 8 s after:
/// its peers see it go down, sends to it meanwhile fail with `PeerDown`, and once it resumes
/// every pair reconnects by itself; a round of messages before and one after arrive exactly
/// once each, nothing twice.
#[test]
fn a_stopped_process_rejoins_when_it_resumes() {
    for transport in ["tcp", "shm"] {
        let out = faults(&[
            "--procs",
            "3",
            "--transport",
            transport,
            "--stop",
            "1",
            "--away",
            "8",
        ]);
        assert!(out.contains("saw PeerUp again"), "{out}");
    }
}

/// A writer caught (SIGSTOP) between reserving a slot in a process's shared-memory receive
/// FIFO and filling it, then killed: that process hears nobody for good on its worker. It
/// finds itself deaf, replaces its worker and gets every live peer back by itself; a receive
/// it posted before the fault takes a message sent after it; a round after it arrives exactly
/// once. (The control, `--keep-worker`, fails: the process stays cut off.)
#[test]
fn a_process_whose_receive_queue_is_stuck_replaces_its_worker() {
    let out = faults(&["--procs", "3", "--transport", "shm", "--stick", "1"]);
    assert!(out.contains("replaced its worker"), "{out}");
}

/// Bad arguments get a clear message and exit status 2.
#[test]
fn bad_arguments_are_refused() {
    for (args, want) in [
        (&["--procs", "1"][..], "--procs must be 2..=64"),
        (&["--stop", "7"][..], "--stop names no process"),
        (&["--stop", "1", "--kill", "2"][..], "--stop goes without"),
        (&["faults"][..], "name one fault"),
        (&["faults", "--stop", "3"][..], "name one fault"),
        (
            &["faults", "--stick", "1"][..],
            "--stick needs --transport shm",
        ),
        (
            &["faults", "--procs", "1", "--stop", "0"][..],
            "--procs must be 2..=32",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tagspace-demo"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
