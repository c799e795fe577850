#!/usr/bin/env bash
# Loom models of evring (bounded queue, record ring, slab: insert/retire
# races, references vs reuse, generation wrap, per-thread free caches with
# remote retire, shared free-stack ABA). The preemption bound is pinned so
# the run is reproducible and finishes in a few minutes on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
export RUSTFLAGS="${RUSTFLAGS:-} --cfg evring_loom"
# A separate target dir keeps the loom build from invalidating the normal one.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
exec cargo test -p evring --release --lib -- --test-threads=2 "$@"
