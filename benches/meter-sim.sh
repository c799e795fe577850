#!/usr/bin/env bash
# What evring's plugin costs each simulated NCCL thread, per collective: runs the
# simulator's `ib` scenario through the meter (crates/meter) with the built-in null
# plugin inside, then with evring's shim inside, and prints the per-thread-kind table
# of benches/meter.py (run = evring, base = null). docs/meter.md explains the output.
#
#   benches/meter-sim.sh [ROUNDS]       build, then ROUNDS rounds of both (default 2)
#   METER_SCENARIO=eth METER_EVENTS=500000 benches/meter-sim.sh
#   METER_SIM_ARGS="--mask 70" benches/meter-sim.sh     extra evring-sim arguments
#   METER_BUILD=0 benches/meter-sim.sh                  use the release build as is
#
# Reports are kept in target/meter-sim/<inner>/ (removed at each start).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
scenario=${METER_SCENARIO:-ib}
events=${METER_EVENTS:-200000}
target=${CARGO_TARGET_DIR:-target}
if [ "${METER_BUILD:-1}" != 0 ]; then
    cargo build --release -q -p evring-shim -p evring-meter -p evring-sim
fi
sim=$target/release/evring-sim
meter=$target/release/libevring_meter.so
shim=$(realpath "$target/release/libevring_shim.so")
out=$target/meter-sim
rm -rf "$out"
mkdir -p "$out/null" "$out/evring"
for ((r = 1; r <= rounds; r++)); do
    # Rotate the order so that neither plugin always runs first.
    if ((r % 2)); then order="null evring"; else order="evring null"; fi
    for inner in $order; do
        if [ "$inner" = null ]; then path=null; else path=$shim; fi
        echo "round $r: $scenario through the meter, inner $inner" >&2
        # The simulator opens one copy of the meter per simulated process;
        # EVRING_METER_ISOLATE gives each its own copy of the inner plugin too.
        # A run with the null plugin writes no trace, so the simulator says
        # "unverified": that is expected and not a failure here.
        EVRING_METER_PLUGIN=$path EVRING_METER_ISOLATE=1 EVRING_METER_QUIET=1 \
            EVRING_METER_OUT="$out/$inner/r$r-" \
            "$sim" run "$scenario" --plugin "$meter" --events "$events" -q \
            ${METER_SIM_ARGS:-} >"$out/$inner/r$r.log" 2>&1 || {
            if ! grep -q "unverified" "$out/$inner/r$r.log"; then
                cat "$out/$inner/r$r.log" >&2
                echo "meter-sim: evring-sim failed (inner $inner, round $r)" >&2
                exit 1
            fi
        }
    done
done
echo
echo "== per thread kind, hot path (start+stop+record), per Coll start =="
python3 benches/meter.py --per-start Coll --kinds --base "$out/null" --run "$out/evring"
echo
echo "== per function and event type =="
python3 benches/meter.py --per-start Coll --base "$out/null" --run "$out/evring"
