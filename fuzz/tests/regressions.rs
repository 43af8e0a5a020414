//! Replays every saved fuzz input in `regressions/<target>/` through the target's property.
//! A crash found by `cargo fuzz run` is copied here (see the README) and stays a test forever.

use arbitrary::{Arbitrary, Unstructured};
use std::path::Path;

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("regressions")
        .join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != ".gitkeep"))
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    out.sort();
    out
}

/// Decodes like libfuzzer-sys does for structured targets.
fn structured<'a, T: Arbitrary<'a>>(bytes: &'a [u8]) -> Option<T> {
    T::arbitrary_take_rest(Unstructured::new(bytes)).ok()
}

#[test]
fn wire_decode() {
    for (name, bytes) in inputs("wire_decode") {
        eprintln!("replaying {name}");
        tagspace_fuzz::check_wire(&bytes);
    }
}

#[test]
fn tag_algebra() {
    for (name, bytes) in inputs("tag_algebra") {
        eprintln!("replaying {name}");
        if let Some(input) = structured::<tagspace_fuzz::AlgebraInput>(&bytes) {
            tagspace_fuzz::check_algebra(&input);
        }
    }
}

#[test]
fn session() {
    for (name, bytes) in inputs("session") {
        eprintln!("replaying {name}");
        if let Some(input) = structured::<tagspace_fuzz::SessionInput>(&bytes) {
            tagspace_fuzz::check_session(&input);
        }
    }
}

#[test]
fn ipc_descriptor() {
    for (name, bytes) in inputs("ipc_descriptor") {
        eprintln!("replaying {name}");
        tagspace_fuzz::check_ipc_descriptor(&bytes);
    }
}

#[test]
fn network() {
    for (name, bytes) in inputs("network") {
        eprintln!("replaying {name}");
        if let Some(input) = structured::<tagspace_fuzz::NetInput>(&bytes) {
            tagspace_fuzz::check_network(&input);
        }
    }
}
