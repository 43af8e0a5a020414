#!/usr/bin/env bash
# Runs the demo, the multi-process tests, the conformance suite and the other UCX-facing tests
# against each supported UCX and says which version each run loaded: 1.12.1 (ucx1-sys's
# build), the system's (Debian 12: 1.13.1), and a current release with the upstream fixes
# (PyPI's libucx-cu12 wheel, 1.22.0).
#   scripts/ucx-matrix.sh [bundled|system|wheel ...]
set -euo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(bundled system wheel)
cargo build --release -q -p tagspace-ucx --bin tagspace-demo
# The test binaries are those of `cargo test --workspace` and the bench that of the release
# build (scripts/cargo-exe.sh): run as they are, each with the UCX under test on the loader path.
# The multi-process tests start the demo binary their build made, loading what
# TAGSPACE_DEMO_UCX_LIB names.
multi_bin=$(scripts/cargo-exe.sh test multiprocess)
# Host mode (a host's worker and endpoints, adapter-ucx/tests/host_mode.rs) runs in the test
# process itself; its MULTI-worker test needs a UCX built with thread support (1.13.1 and 1.22
# here, not the bundled 1.12.1).
host_bin=$(scripts/cargo-exe.sh test host_mode)
# The shared node (libraries on several threads, adapter-ucx/tests/shared_node.rs) and its
# routing bench need MULTI workers too.
shared_bin=$(scripts/cargo-exe.sh test shared_node)
route_bin=$(scripts/cargo-exe.sh bench shared_route)
# The caller's-buffer path (tag_send_from / tag_recv_into) leans on how each UCX completes a
# receive of a message already waiting.
buf_bin=$(scripts/cargo-exe.sh test borrowed_buffers)
hostile_bin=$(scripts/cargo-exe.sh test hostile_peer)
# Held namespaces take messages out of UCX's queue by probe and receive them later
# (ucp_tag_msg_recv_nbx), a path each UCX implements on its own.
backlog_bin=$(scripts/cargo-exe.sh test backlog)
# The conformance suite over TCP and shared memory (54 cases; `cargo test` runs it on 1.12.1).
conformance_bin=$(scripts/cargo-exe.sh test conformance_ucx)
for v in "${versions[@]}"; do
  lib=$(scripts/ucx-lib.sh "$v")
  echo
  echo "==> UCX: $v${lib:+ (LD_LIBRARY_PATH=$lib)}"
  with_ucx() {
    if [ -n "$lib" ]; then
      LD_LIBRARY_PATH=$lib UCX_LOG_LEVEL=error "$@"
    else
      env -u LD_LIBRARY_PATH UCX_LOG_LEVEL=error "$@"
    fi
  }
  run_demo() { with_ucx target/release/tagspace-demo "$@"; }
  out=$(run_demo --procs 8 --transport shm --kill 3 2>&1) || { echo "$out"; echo "demo failed with UCX $v"; exit 1; }
  loaded=$(echo "$out" | sed -n 's/.*UCX \([0-9.]*\) loaded.*/\1/p' | head -n 1)
  echo "$out" | grep -E "^tagspace demo:|OK: every message"
  run_demo --procs 8 --transport tcp --simultaneous | grep -E "OK: every message"
  echo "-- multi-process tests with UCX $loaded"
  log=$(mktemp)
  if ! TAGSPACE_DEMO_UCX_LIB=$lib TAGSPACE_DEMO_UCX_VERSION=$loaded "$multi_bin" >"$log" 2>&1; then
    # The failing demo's own report (its problems, each process's lines) goes to the log.
    grep -vE "^\s*$" "$log" | tail -n 120
    echo "multi-process tests failed with UCX $loaded"
    exit 1
  fi
  grep -E "^test result" "$log"
  rm -f "$log"
  echo "-- host-mode tests with UCX $loaded"
  with_ucx "$host_bin" --nocapture 2>&1 | grep -E "^test result|FAILED|panicked|not run"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "host-mode tests failed with UCX $loaded"; exit 1; }
  echo "-- shared-node tests (library threads + a host progress thread) with UCX $loaded"
  with_ucx "$shared_bin" --nocapture 2>&1 | grep -E "^test result|FAILED|panicked|not run|^shared node"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "shared-node tests failed with UCX $loaded"; exit 1; }
  echo "-- caller's-buffer send/receive tests with UCX $loaded"
  with_ucx "$buf_bin" 2>&1 | grep -E "^test result|FAILED|panicked"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "borrowed-buffer tests failed with UCX $loaded"; exit 1; }
  echo "-- held-namespace (backlog limit) tests with UCX $loaded"
  with_ucx "$backlog_bin" 2>&1 | grep -E "^test result|FAILED|panicked"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "backlog tests failed with UCX $loaded"; exit 1; }
  echo "-- conformance suite (TCP and shared memory) with UCX $loaded"
  with_ucx "$conformance_bin" 2>&1 | grep -E "^test result|FAILED|panicked|Assertion"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "conformance suite failed with UCX $loaded"; exit 1; }
  # The hostile C peer runs on the system's UCX by default (1.13.1, against a node on 1.12.1 in
  # `cargo test`); a 1.13.1 client cannot connect to a 1.22.0 listener at all, so on the wheel
  # it is built against the wheel's headers and runs on its library: node and attacker on 1.22.0.
  hostile_ucx=""
  [ "$v" != wheel ] || hostile_ucx=${lib%/lib}
  echo "-- hostile peer (forged pair tags, floods, claimed identities) with UCX $loaded"
  TAGSPACE_HOSTILE_UCX=$hostile_ucx with_ucx "$hostile_bin" 2>&1 | grep -E "^test result|FAILED|panicked"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "hostile-peer tests failed with UCX $loaded"; exit 1; }
  echo "-- routing from 1/2/4 library threads (smoke run) with UCX $loaded"
  with_ucx "$route_bin" --quick 2>&1 | grep -E "not run|^ +[124] +"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "shared_route bench failed with UCX $loaded"; exit 1; }
done
echo
echo "UCX matrix passed: ${versions[*]}"
