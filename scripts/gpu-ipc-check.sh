#!/usr/bin/env bash
# Two-process CUDA IPC check on a machine with an NVIDIA GPU: one process allocates and exports,
# the other imports twice through tagspace's cache (two libraries) and verifies the bytes and a
# single driver open. Exit 0 pass, 1 fail, 2 not run (no CUDA driver or device here).
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi -L 2>/dev/null || echo "(nvidia-smi not available)"
cargo build -q --release -p tagspace-ucx --example ipc_check || exit 1
target/release/examples/ipc_check
