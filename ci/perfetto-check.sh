#!/usr/bin/env bash
# Optional check (not in .ci/run): evring's binary traces against Perfetto's own
# trace schema and import rules (ci/perfetto_check.py), with PyPI's `perfetto`
# package (Perfetto's perfetto_trace.proto, generated; no trace_processor binary).
#
#   ci/perfetto-check.sh [SCENARIO...]      (default: eth ib pxn)
#
# Builds the shim and the simulator, runs each scenario at mask 4095 keeping its
# traces, and checks every .pftrace. Needs python3 with venv and PyPI access.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d "${TMPDIR:-/tmp}/evring-pfcheck.XXXXXX")"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q perfetto protobuf
cargo build --release -p evring-shim -p evring-sim
for sc in "${@:-eth ib pxn}"; do
  for s in $sc; do
    ./target/release/evring-sim run "$s" --mask 4095 --events 200000 -q --keep --trace-dir "$work/traces"
  done
done
find "$work/traces" -name '*.pftrace' -print0 | xargs -0 "$work/venv/bin/python" ci/perfetto_check.py
