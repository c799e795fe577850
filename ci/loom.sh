#!/usr/bin/env bash
# Loom models of evring (queue, free list, slab). The preemption bound is pinned
# so the run is reproducible and finishes in minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
export RUSTFLAGS="${RUSTFLAGS:-} --cfg evring_loom --cfg crossbeam_loom"
# A separate target dir keeps the loom build from invalidating the normal one.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
exec cargo test -p evring --release --lib -- --test-threads=2 "$@"
