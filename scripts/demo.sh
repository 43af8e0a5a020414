#!/usr/bin/env bash
# The main job on a fresh machine: installs the build's system packages if missing, then runs
# the multi-process demo over real UCX. Arguments go to the demo, e.g.
#   scripts/demo.sh --procs 3 --transport shm --kill 2
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
exec cargo run --release -p tagspace-ucx --bin tagspace-demo -- "$@"
