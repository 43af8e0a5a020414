#!/usr/bin/env bash
# Prints the directory to put on LD_LIBRARY_PATH so that a tagspace binary loads a given UCX:
#   scripts/ucx-lib.sh bundled   UCX 1.12.1, built from source by ucx1-sys (what `cargo run` loads)
#   scripts/ucx-lib.sh system    the system's libucp.so.0 (Debian 12: 1.13.1); prints nothing
#   scripts/ucx-lib.sh wheel     UCX 1.22.0 from PyPI's libucx-cu12 wheel (fetched once, with pip,
#                                into target/ucx-wheel; its CUDA modules just fail to load on a
#                                machine without CUDA)
# Needs a release build for `bundled` (cargo build --release -p tagspace-ucx).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL_VERSION=${UCX_WHEEL_VERSION:-1.22.0}
case "${1:-}" in
  bundled)
    lib=$(find target/release/build -path '*/ucx1-sys-*/out/lib/libucp.so.0' 2>/dev/null | head -n 1)
    [ -n "$lib" ] || { echo "ucx-lib.sh: no UCX built by ucx1-sys under target/release (build first)" >&2; exit 1; }
    dirname "$(realpath "$lib")"
    ;;
  system)
    ;;
  wheel)
    dir=target/ucx-wheel/$WHEEL_VERSION
    if [ ! -e "$dir/libucx/lib/libucp.so.0" ]; then
      mkdir -p "$dir"
      python3 -m pip download -q --no-deps --only-binary=:all: -d "$dir" "libucx-cu12==$WHEEL_VERSION" >&2
      python3 -m zipfile -e "$dir"/libucx_cu12-*.whl "$dir" >&2
    fi
    realpath "$dir/libucx/lib"
    ;;
  *)
    echo "usage: scripts/ucx-lib.sh bundled|system|wheel" >&2
    exit 2
    ;;
esac
