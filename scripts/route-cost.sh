#!/usr/bin/env bash
# Instructions per send-path lookup with PEERS connections open (default 128): tagspace's
# Node::route_tag against the raw path (Node::endpoint_to and a fixed tag), counted by
# callgrind inside the measured loop only (--toggle-collect): deterministic, unlike time on a
# shared machine. Differencing two loop lengths cancels the loop's entry.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
peers=${1:-128}
cargo build -q --release -p tagspace-ucx --example route_cost
bin=target/release/examples/route_cost
export LD_LIBRARY_PATH=$(scripts/ucx-lib.sh bundled)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
count() { # mode calls -> instructions inside the measured function
  valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect="*route_cost::$1*" \
    "$bin" "$1" "$peers" "$2" 2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
declare -A per
printf '%-8s %12s\n' mode instr/call
for mode in raw routed; do
  a=$(count $mode 100000); b=$(count $mode 200000)
  per[$mode]=$(python3 -c "print(($b - $a) / 100000)")
  printf '%-8s %12s\n' $mode "${per[$mode]}"
done
python3 -c "print(f'routed / raw = {${per[routed]} / ${per[raw]}:.3f} with $peers connections open')"
