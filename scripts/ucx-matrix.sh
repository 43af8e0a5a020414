#!/usr/bin/env bash
# Runs the demo and the multi-process tests against each supported UCX and says which version
# each run loaded: 1.12.1 (ucx1-sys's build), the system's (Debian 12: 1.13.1), and a current
# release with the upstream fixes (PyPI's libucx-cu12 wheel, 1.22.0).
#   scripts/ucx-matrix.sh [bundled|system|wheel ...]
set -euo pipefail
cd "$(dirname "$0")/.."
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(bundled system wheel)
cargo build --release -q -p tagspace-ucx --bin tagspace-demo
cargo test -q -p tagspace-ucx --test multiprocess --no-run 2>/dev/null
# Host mode (a host's worker and endpoints, adapter-ucx/tests/host_mode.rs) runs in the test
# process itself, so its binary is started with each UCX on the loader path; its MULTI-worker
# test needs a UCX built with thread support (1.13.1 and 1.22 here, not the bundled 1.12.1).
host_bin=$(cargo test -p tagspace-ucx --test host_mode --no-run 2>&1 \
  | sed -n 's/.*Executable tests\/host_mode.rs (\(.*\))/\1/p')
[ -x "$host_bin" ] || { echo "ucx-matrix: host_mode test binary not found"; exit 1; }
for v in "${versions[@]}"; do
  lib=$(scripts/ucx-lib.sh "$v")
  echo
  echo "==> UCX: $v${lib:+ (LD_LIBRARY_PATH=$lib)}"
  run_demo() {
    if [ -n "$lib" ]; then
      LD_LIBRARY_PATH=$lib target/release/tagspace-demo "$@"
    else
      env -u LD_LIBRARY_PATH target/release/tagspace-demo "$@"
    fi
  }
  out=$(run_demo --procs 8 --transport shm --kill 3 2>&1) || { echo "$out"; echo "demo failed with UCX $v"; exit 1; }
  loaded=$(echo "$out" | sed -n 's/.*UCX \([0-9.]*\) loaded.*/\1/p' | head -n 1)
  echo "$out" | grep -E "^tagspace demo:|OK: every message"
  run_demo --procs 8 --transport tcp --simultaneous | grep -E "OK: every message"
  echo "-- multi-process tests with UCX $loaded"
  TAGSPACE_DEMO_UCX_LIB=$lib TAGSPACE_DEMO_UCX_VERSION=$loaded \
    cargo test -q -p tagspace-ucx --test multiprocess 2>&1 | grep -E "^test result|FAILED|panicked" 
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "multi-process tests failed with UCX $loaded"; exit 1; }
  echo "-- host-mode tests with UCX $loaded"
  if [ -n "$lib" ]; then
    LD_LIBRARY_PATH=$lib "$host_bin" --nocapture 2>&1 | grep -E "^test result|FAILED|panicked|not run"
  else
    env -u LD_LIBRARY_PATH "$host_bin" --nocapture 2>&1 | grep -E "^test result|FAILED|panicked|not run"
  fi
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "host-mode tests failed with UCX $loaded"; exit 1; }
done
echo
echo "UCX matrix passed: ${versions[*]}"
