#!/usr/bin/env bash
# Runs the demo's variants (TCP and shared memory × plain, kill -9, stopped for good,
# simultaneous connect, hostile peer; 4 to 8 processes) and the recovery job's (a process
# stopped, then resumed: it must rejoin; a process killed and started again as a new
# identity: every peer must take it in; a shared-memory receive queue stuck by a writer caught
# mid-send: its process must replace its worker) RUNS times each and prints a pass table.
# Exits non-zero if any run failed; the log of each failed run is kept under target/soak/.
#
#   scripts/soak.sh [RUNS] [--hog] [--ucx bundled|system|wheel] [--only REGEX] [--messages M]
#
# --hog      runs a CPU hog beside it (one busy process per core), as on a loaded CI machine;
#            the README's figures were taken with a parallel `cargo build` instead.
# --ucx      which UCX the demo loads (scripts/ucx-lib.sh); default: bundled (1.12.1).
# --only     runs only the variants whose name matches REGEX (e.g. 'shm').
set -euo pipefail
cd "$(dirname "$0")/.."
runs=20 hog=0 ucx=bundled only=. messages=100
while [ $# -gt 0 ]; do
  case "$1" in
    --hog) hog=1 ;;
    --ucx) ucx=$2; shift ;;
    --only) only=$2; shift ;;
    --messages) messages=$2; shift ;;
    [0-9]*) runs=$1 ;;
    *) echo "usage: scripts/soak.sh [RUNS] [--hog] [--ucx bundled|system|wheel] [--only REGEX] [--messages M]" >&2; exit 2 ;;
  esac
  shift
done

variants=(
  "tcp-8|--procs 8 --transport tcp"
  "tcp-kill|--procs 6 --transport tcp --kill 2"
  "tcp-simultaneous|--procs 4 --transport tcp --simultaneous"
  "tcp-hostile|--procs 4 --transport tcp --hostile 1"
  "tcp-stop|--procs 4 --transport tcp --stop 3"
  "shm-8|--procs 8 --transport shm"
  "shm-kill|--procs 4 --transport shm --kill 1"
  "shm-kill-8|--procs 8 --transport shm --kill 5"
  "shm-simultaneous|--procs 4 --transport shm --simultaneous"
  "shm-hostile|--procs 4 --transport shm --hostile 2"
  "shm-stop|--procs 4 --transport shm --stop 1"
  "tcp-rejoin|faults --procs 4 --transport tcp --stop 2 --away 8"
  "shm-rejoin|faults --procs 4 --transport shm --stop 1 --away 8"
  "shm-stick|faults --procs 3 --transport shm --stick 1"
  "tcp-restart|faults --procs 8 --transport tcp --restart 3"
  "shm-restart|faults --procs 6 --transport shm --restart 2"
)

cargo build --release -q -p tagspace-ucx --bin tagspace-demo
bin=target/release/tagspace-demo
libdir=$(scripts/ucx-lib.sh "$ucx")
export LD_LIBRARY_PATH=${libdir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -n "$libdir" ] || unset LD_LIBRARY_PATH
mkdir -p target/soak

hog_pids=()
stop_hog() { [ ${#hog_pids[@]} -eq 0 ] || kill "${hog_pids[@]}" 2>/dev/null || true; }
trap stop_hog EXIT
if [ "$hog" -eq 1 ]; then
  for _ in $(seq "$(nproc)"); do
    (while :; do :; done) &
    hog_pids+=($!)
  done
fi

version=$("$bin" --procs 2 --messages 1 2>/dev/null | sed -n 's/.*UCX \([0-9.]*\) loaded.*/\1/p' | head -n 1)
echo "soak: $runs runs per variant, UCX ${version:-?} ($ucx), hog: $hog"
printf '%-18s %7s %9s  %s\n' variant passed "mean s" args
failed_any=0
for v in "${variants[@]}"; do
  name=${v%%|*} args=${v#*|}
  [[ $name =~ $only ]] || continue
  pass=0 total_ms=0
  for n in $(seq "$runs"); do
    log=target/soak/$ucx-$name-$n.log
    t0=$(date +%s%N)
    # shellcheck disable=SC2086
    if timeout 300 "$bin" $args --messages "$messages" >"$log" 2>&1 && grep -qE '^OK: ' "$log"; then
      pass=$((pass + 1))
      rm -f "$log"
    else
      echo "  $name run $n FAILED: $(grep -m1 -E 'FAILED|timed out|panicked|Assertion' "$log" || tail -n 1 "$log")" >&2
    fi
    total_ms=$(( total_ms + ($(date +%s%N) - t0) / 1000000 ))
  done
  [ "$pass" -eq "$runs" ] || failed_any=1
  printf '%-18s %3d/%-3d %9.1f  %s\n' "$name" "$pass" "$runs" "$(awk "BEGIN { print $total_ms / $runs / 1000 }")" "$args"
done
exit $failed_any
