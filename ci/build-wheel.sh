#!/usr/bin/env bash
# Builds the Python wheel (python/): the release plugin as
# evring/libnccl-profiler-evring.so plus the ctypes helper, tagged for this
# platform. Prints the wheel's path. Needs cargo, python3 and pip; pip fetches
# setuptools for the build if the interpreter lacks it.
# EVRING_WHEEL_PGO=1: the wheel carries the profile-guided build
# (ci/build-pgo.sh, a few minutes more; docs/performance.md, "Round 8").
# EVRING_WHEEL_SO=PATH: the wheel carries that plugin, already built (e.g. the
# PGO build CI has just made), and nothing is built.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
if [ -n "${EVRING_WHEEL_SO:-}" ]; then
  so="$EVRING_WHEEL_SO"
  [ -f "$so" ] || { echo "build-wheel: EVRING_WHEEL_SO=$so: no such file" >&2; exit 1; }
elif [ "${EVRING_WHEEL_PGO:-0}" = 1 ]; then
  so="$(bash ci/build-pgo.sh | tail -1)"
else
  cargo build --release -p evring-shim --lib >&2
  so="$target/release/libevring_shim.so"
fi
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp -r python/. "$stage/"
rm -rf "$stage/tests" "$stage/build" "$stage"/*.egg-info
cp -f "$so" "$stage/evring/libnccl-profiler-evring.so"
out="$target/wheels"
mkdir -p "$out"
rm -f "$out"/evring-*.whl
python3 -m pip wheel --no-deps --quiet -w "$out" "$stage" >&2
ls "$out"/evring-*.whl
