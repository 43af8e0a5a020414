#!/usr/bin/env bash
# Instructions per Node::progress() call with N = 1, 100 and 10 000 receives pending (D6: the
# cost must not grow with them), counted by callgrind inside the measured loop only
# (--toggle-collect): deterministic, unlike time on a shared machine, and free of the set-up's
# busy polling (two nodes, a handshake, N posts).
#   idle: no traffic;  one: one 8-byte message received per round trip (instructions per
#   round trip: b's send and progress calls included, the same work for every N).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
cargo build -q --release -p tagspace-ucx --example progress_cost
bin=target/release/examples/progress_cost
export LD_LIBRARY_PATH=$(scripts/ucx-lib.sh bundled)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
count() { # mode fn n calls -> instructions inside fn
  valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect="*progress_cost::$2*" \
    "$bin" "$1" "$3" "$4" 2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
printf '%-6s %8s %16s\n' mode N instr/call
for mode in idle one; do
  if [ $mode = idle ]; then fn=idle; k=2000; else fn=one_each; k=300; fi
  declare -A per=()
  for n in 1 100 10000; do
    per[$n]=$(( $(count $mode $fn $n $k) / k ))
    printf '%-6s %8s %16s\n' $mode $n "${per[$n]}"
  done
  python3 -c "print(f'$mode: N=10000 / N=1 = {${per[10000]} / ${per[1]}:.3f}')"
done
