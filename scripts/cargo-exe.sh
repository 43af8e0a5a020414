#!/usr/bin/env bash
# Prints the path of an executable that one of CI's two builds makes, building it only if it
# is not there yet, so that scripts run the very binary CI built instead of asking cargo again
# with another package selection or profile (which can mean rebuilding, UCX included):
#   scripts/cargo-exe.sh test NAME     integration test NAME of `cargo test --workspace` (dev)
#   scripts/cargo-exe.sh bench NAME    benchmark NAME of the release build
#   scripts/cargo-exe.sh --build KIND  runs that build itself (.ci/run's release build step)
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/cargo-exe.sh test|bench NAME, or --build test|bench"
[ $# -eq 2 ] || { echo "$usage" >&2; exit 2; }
if [ "$1" = --build ]; then kind=$2 name=""; else kind=$1 name=$2; fi
case "$kind" in
  test) build=(cargo test --workspace --no-run) ;;
  bench) build=(cargo build --release --workspace --bins --examples --bench ucx --bench shared_route) ;;
  *) echo "cargo-exe.sh: kind must be test or bench, not '$kind'" >&2; exit 2 ;;
esac
if [ -z "$name" ]; then exec "${build[@]}"; fi
exe=$("${build[@]}" --message-format=json 2>/dev/null | python3 -c '
import json, sys
kind, name = sys.argv[1:]
for line in sys.stdin:
    m = json.loads(line)
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and m.get("executable") and t.get("name") == name and kind in t.get("kind", []):
        print(m["executable"])
' "$kind" "$name" | head -n 1)
[ -n "$exe" ] && [ -x "$exe" ] || { echo "cargo-exe.sh: no $kind executable named '$name' (${build[*]})" >&2; exit 1; }
echo "$exe"
