#!/usr/bin/env bash
# Installs (apt) the system packages the build needs, if any is missing; used by .ci/run and
# scripts/demo.sh. Needs root or sudo only when something is missing.
set -euo pipefail
# The core needs only a C toolchain (libFuzzer is built from C++ by libfuzzer-sys). ucx1-sys
# builds UCX 1.12.1 from source (autotools) and generates bindings with bindgen (libclang);
# libucx-dev and ucx-utils give Debian's UCX 1.13.1 (the library the demo binary can load at run
# time instead, and ucx_info for diagnosing transports).
need=()
command -v c++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
command -v pkg-config >/dev/null || need+=(pkg-config)
# cmake: scripts/capi-check.sh builds the C++ example through find_package(tagspace).
command -v cmake >/dev/null || need+=(cmake)
for tool in autoconf automake libtoolize; do
  command -v "$tool" >/dev/null || need+=("${tool/libtoolize/libtool}")
done
# iproute2 and util-linux: scripts/two-hosts.sh (ip netns, unshare, nsenter); python3-pip:
# scripts/ucx-lib.sh fetches the libucx-cu12 wheel (UCX 1.22) for the version matrix.
command -v ip >/dev/null || need+=(iproute2)
command -v nsenter >/dev/null || need+=(util-linux)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
# python3-venv: scripts/python-check.sh builds and tests the Python package in a virtualenv.
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
for pkg in libclang-dev libucx-dev ucx-utils; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
