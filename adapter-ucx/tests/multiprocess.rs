//! Real processes over real UCX: the demo binary run with each failure scenario. Every run
//! checks, across processes, that each message between live processes arrived exactly once in
//! its own namespace (the binary exits non-zero otherwise, printing what went wrong).

use std::process::Command;

fn demo(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tagspace-demo"))
        .args(["--messages", "40"])
        .args(args)
        .output()
        .expect("run tagspace-demo");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tagspace-demo {args:?} failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    assert!(stdout.contains("OK: every message"), "{stdout}");
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

/// The same exchange over shared memory. Two processes: with more, UCX's connection manager
/// sometimes never finishes wiring up shared-memory endpoints (always at 4, under load at 3; see
/// the README's known limits).
#[test]
fn shared_memory() {
    demo(&["--procs", "2", "--transport", "shm"]);
}

/// Bad arguments get a clear message and exit status 2.
#[test]
fn bad_arguments_are_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_tagspace-demo"))
        .args(["--procs", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--procs must be 2..=64"));
}
