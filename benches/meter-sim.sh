#!/usr/bin/env bash
# What evring's plugin costs each simulated NCCL thread, per collective: runs the
# simulator's `ib` scenario through the meter (crates/meter) with the built-in null
# plugin inside, then with evring's shim inside, and prints the per-thread-kind table
# of benches/meter.py (run = evring, base = null). With a C compiler (`cc`) it also runs
# the floor plugin (tests/gpu/floorprof.c: one clock read and one 32-byte append per
# call, what any design pays) and prints the floor against null and evring against the
# floor. docs/meter.md explains the output.
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
inners="null evring"
if command -v cc >/dev/null && cc -O2 -shared -fPIC -o "$out/libfloorprof.so" tests/gpu/floorprof.c; then
    inners="null evring floor"
    mkdir -p "$out/floor"
fi
for ((r = 1; r <= rounds; r++)); do
    # Alternate the order so that no plugin always runs first.
    if ((r % 2)); then order=$inners; else order=$(echo "$inners" | tr ' ' '\n' | tac | tr '\n' ' '); fi
    for inner in $order; do
        case $inner in
        null) path=null ;;
        evring) path=$shim ;;
        floor) path=$(realpath "$out/libfloorprof.so") ;;
        esac
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
if [ -d "$out/floor" ]; then
    echo
    echo "== the floor (tests/gpu/floorprof.c) against null, per thread kind =="
    python3 benches/meter.py --per-start Coll --kinds --base "$out/null" --run "$out/floor"
    echo
    echo "== evring against the floor, per thread kind =="
    python3 benches/meter.py --per-start Coll --kinds --base "$out/floor" --run "$out/evring"
fi
echo
echo "== per function and event type =="
python3 benches/meter.py --per-start Coll --base "$out/null" --run "$out/evring"
