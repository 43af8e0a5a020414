#!/usr/bin/env bash
# Instructions per Node::progress() call with N = 1, 100 and 10 000 receives pending (D6: the
# cost must not grow with them), counted by callgrind: deterministic, unlike time on a shared
# machine. Differencing two run lengths cancels start-up (two nodes, a handshake, N posts).
#   idle: no traffic;  one: one 8-byte message received per round trip (instructions per
#   round trip: b's send and progress calls included, the same work for every N).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
cargo build -q --release -p tagspace-ucx --example progress_cost
bin=target/release/examples/progress_cost
export LD_LIBRARY_PATH=$(scripts/ucx-lib.sh bundled)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
count() { # mode n calls -> instructions
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" "$3" 2>&1 >/dev/null |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
printf '%-6s %8s %16s\n' mode N instr/call
for mode in idle one; do
  if [ $mode = idle ]; then k1=2000; k2=4000; else k1=200; k2=400; fi
  declare -A per=()
  for n in 1 100 10000; do
    a=$(count $mode $n $k1); b=$(count $mode $n $k2)
    per[$n]=$(python3 -c "print(round(($b - $a) / ($k2 - $k1)))")
    printf '%-6s %8s %16s\n' $mode $n "${per[$n]}"
  done
  python3 -c "print(f'$mode: N=10000 / N=1 = {${per[10000]} / ${per[1]}:.3f}')"
done
