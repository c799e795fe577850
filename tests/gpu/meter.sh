#!/usr/bin/env bash
# What a profiler plugin costs NCCL's threads on real NCCL, measured by the meter
# (crates/meter, docs/meter.md): meter_job.py (2 ranks, ITERS all_reduce of 4 KiB) with
# NCCL_PROFILER_PLUGIN=METER.so, once per inner plugin (the built-in null one always,
# plus each NAME=PATH given) and per mask, the runs of a round in rotated order.
# No cargo needed: pass prebuilt libraries.
#
#   tests/gpu/meter.sh METER.so OUTDIR [NAME=PATH ...]
#   e.g. tests/gpu/meter.sh libevring_meter.so out evring=libevring_shim.so
#
# Environment: MASKS (default "70 4095"), ROUNDS (default 2), ITERS (default 2000),
# WARMUP (default 200), TIMEOUT_S per job (default 300), NO_TRACES=1 (the inner writes
# no trace files: NCCL_PROFILE_DUMP_FILE="").
# Writes OUTDIR/<name>-m<mask>/r<round>-<host>-<pid>.json (one per rank and round),
# OUTDIR/logs/, and OUTDIR/table.txt: per mask, each inner against null
# (benches/meter.py --per-start Coll: per all_reduce of each rank).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 2 ] || { sed -n 2,16p "$0" >&2; exit 2; }
meter=$(realpath "$1")
out=$2
shift 2
names=(null)
declare -A path=([null]=null)
for a in "$@"; do
    n=${a%%=*}
    p=${a#*=}
    [ "$n" != "$a" ] && [ -n "$n" ] && [ "$n" != null ] || { echo "meter.sh: not NAME=PATH: $a" >&2; exit 2; }
    [ -f "$p" ] || { echo "meter.sh: no such file: $p" >&2; exit 2; }
    names+=("$n")
    path[$n]=$(realpath "$p")
    # NVIDIA's example keeps its events in pools of 8 by default: once they run out it
    # returns NULL and NCCL stops calling it, and its figures mean nothing (docs/meter.md).
    case $(basename "$p") in
    *profiler-example*)
        [ -n "${NCCL_PROFILE_COLL_POOL_SIZE:-}" ] ||
            echo "meter.sh: warning: $n looks like NVIDIA's example plugin and NCCL_PROFILE_*_POOL_SIZE are unset: it will run out of its pools (docs/meter.md)" >&2
        ;;
    esac
done
masks=${MASKS:-70 4095}
rounds=${ROUNDS:-2}
iters=${ITERS:-2000}
mkdir -p "$out/logs"
out=$(realpath "$out")
meterpy="$here/../../benches/meter.py"

export NCCL_NET=Socket NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
# NCCL names its threads ("NCCL Progress", "NCCL Service", ...) only when asked; the
# table's thread kinds come from those names.
export NCCL_SET_THREAD_NAME=1
export EVRING_METER_QUIET=1

n=${#names[@]}
for ((r = 1; r <= rounds; r++)); do
    for mask in $masks; do
        for ((i = 0; i < n; i++)); do
            name=${names[$(((i + r - 1) % n))]}
            dir="$out/$name-m$mask"
            mkdir -p "$dir" "$out/traces/$name-m$mask-r$r"
            log="$out/logs/$name-m$mask-r$r.log"
            # NO_TRACES=1: no trace files (counters and metrics only).
            dump="$out/traces/$name-m$mask-r$r/trace"
            [ "${NO_TRACES:-0}" = 1 ] && dump=""
            echo "round $r, mask $mask: inner $name" >&2
            if ! NCCL_PROFILER_PLUGIN="$meter" EVRING_METER_PLUGIN="${path[$name]}" \
                EVRING_METER_OUT="$dir/r$r-" NCCL_PROFILE_EVENT_MASK="$mask" \
                NCCL_PROFILE_DUMP_FILE="$dump" \
                timeout "${TIMEOUT_S:-300}" python3 "$here/meter_job.py" --iters "$iters" \
                --warmup "${WARMUP:-200}" >"$log" 2>&1; then
                tail -20 "$log" >&2
                echo "meter.sh: job failed (inner $name, mask $mask, round $r): $log" >&2
                exit 1
            fi
            grep "meter_job:" "$log" >&2 || true
        done
    done
done

{
    for mask in $masks; do
        for name in "${names[@]:1}"; do
            echo "=== mask $mask: $name (run) against null (base), per all_reduce of each rank ==="
            python3 "$meterpy" --per-start Coll --kinds --base "$out/null-m$mask" --run "$out/$name-m$mask"
            echo
            python3 "$meterpy" --per-start Coll --base "$out/null-m$mask" --run "$out/$name-m$mask"
            echo
        done
        if [ "$n" = 1 ]; then
            echo "=== mask $mask: null ==="
            python3 "$meterpy" --per-start Coll "$out/null-m$mask"
        fi
    done
    echo "=== host time per all_reduce (meter_job.py) ==="
    grep "meter_job: rank" "$out"/logs/*.log | sed "s|^$out/logs/|  |" || true
} | tee "$out/table.txt"
