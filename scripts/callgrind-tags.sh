#!/usr/bin/env bash
# Instructions per tag build / match: tagspace vs hand-written shift/or, counted by callgrind
# (deterministic, unlike time on a shared machine). Differencing two run lengths cancels start-up.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)"; exit 1; }
cargo build -q --release -p tagspace-core --example tag_instructions
bin=target/release/examples/tag_instructions
count() { # variant n -> instructions
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 >/dev/null |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
printf '%-16s %14s\n' variant instr/op
declare -A per
for v in build-baseline build-checked build-tagspace match-baseline match-tagspace; do
  a=$(count "$v" 1000000); b=$(count "$v" 2000000)
  per[$v]=$(python3 -c "print(($b - $a) / 1e6)")
  printf '%-16s %14s\n' "$v" "${per[$v]}"
done
python3 - "${per[build-baseline]}" "${per[build-checked]}" "${per[build-tagspace]}" "${per[match-baseline]}" "${per[match-tagspace]}" <<'PY'
import sys
bb, bc, bt, mb, mt = map(float, sys.argv[1:])
print(f"build: tagspace/shift-or = {bt/bb:.3f} ({bt-bb:+.1f} instr/op); tagspace/hand-checked = {bt/bc:.3f}")
print(f"match: tagspace/xor-and  = {mt/mb:.3f} ({mt-mb:+.1f} instr/op)")
PY
