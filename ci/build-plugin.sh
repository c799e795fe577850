#!/usr/bin/env bash
# Builds the release plugin and gives it the name NCCL looks for when
# NCCL_PROFILER_PLUGIN=evring: libnccl-profiler-evring.so (cargo can only name
# it libevring_shim.so).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p evring-shim --lib
dir="${CARGO_TARGET_DIR:-target}/release"
cp -f "$dir/libevring_shim.so" "$dir/libnccl-profiler-evring.so"
echo "$dir/libnccl-profiler-evring.so"
