#!/usr/bin/env bash
# GPU validation of the evring plugin on real NCCL through PyTorch
# (docs/validation.md). Needs python3 with torch and CUDA GPUs; no cargo.
#
#   tests/gpu/run.sh PLUGIN.so [OUTDIR]
#
# PLUGIN.so  the release libevring_shim.so (ci/build-plugin.sh), any path.
# OUTDIR     results: summary.txt, log.txt, matrix.json, overhead.json,
#            record.tar.gz. Default: $OUT if set, else a new temp dir.
# STAGES     which stages, in order (default: "matrix record overhead" with
#            2+ GPUs, "smoke" with 1):
#   matrix    transport (p2p, shm, socket) x mask (6, 70, 4095): driver.py,
#             with every NCCL call logged (EVRING_RECORD), then check.py
#   record    small runs whose call logs become tests/fixtures (record.tar.gz)
#   overhead  overhead.py: no plugin / null plugin / evring, interleaved
#   smoke     1 GPU: NCCL loads the plugin, init/exit, logger lines, no crash
# NULLPROF   the null plugin for overhead (default: built from nullprof.c
#            next to the plugin if cc exists; skipped otherwise)
# ITERS BURST REPLAYS ROUNDS BATCHES  sizes (defaults below)
# REC_PREFIX EVRING_RECORD for driver runs (default: <run dir>/calls-)
# WORK       scratch for traces (default: a temp dir)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
plugin=$(realpath "${1:?usage: run.sh PLUGIN.so [OUTDIR]}")
out=${2:-${OUT:-$(mktemp -d)}}
work=${WORK:-$(mktemp -d)}
mkdir -p "$out" "$work"
ngpu=$(python3 -c 'import torch; print(torch.cuda.device_count())')
world=$(( ngpu >= 2 ? 2 : 1 ))
if [ "$world" -ge 2 ]; then stages=${STAGES:-matrix record overhead}; else stages=${STAGES:-smoke}; fi
ITERS=${ITERS:-20} BURST=${BURST:-1000} REPLAYS=${REPLAYS:-3} ROUNDS=${ROUNDS:-3} BATCHES=${BATCHES:-30}

# NVLink multicast can put the host's GPUs out of service: never on.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
summary=$out/summary.txt
log=$out/log.txt
say() { echo "$*" | tee -a "$summary"; }
fail=0

say "== evring GPU validation: $(date -u +%FT%TZ), $ngpu GPU(s), stages: $stages"
python3 - <<'EOF' 2>&1 | tee -a "$summary"
import torch
print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", ".".join(map(str, torch.cuda.nccl.version())),
      "|", ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())))
EOF
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | tee -a "$summary"
say "plugin: $plugin ($(python3 -c 'import ctypes, sys
l = ctypes.CDLL(sys.argv[1]); l.evring_version.restype = ctypes.c_char_p
print(l.evring_version().decode())' "$plugin"))"

mode_env() {
  case $1 in
    p2p) echo "" ;;
    shm) echo "NCCL_P2P_DISABLE=1" ;;
    socket) echo "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket" ;;
  esac
}

# One driver run: mode mask dir [driver args...]; leaves the check in dir/check.json.
drive() {
  local mode=$1 mask=$2 d=$3; shift 3
  mkdir -p "$d"
  # shellcheck disable=SC2046
  env $(mode_env "$mode") NCCL_PROFILER_PLUGIN="$plugin" NCCL_PROFILE_EVENT_MASK="$mask" \
    NCCL_PROFILE_DUMP_FILE="$d/trace" EVRING_RECORD="${REC_PREFIX:-$d/calls-}" \
    EVRING_RECORD_LIMIT=${EVRING_RECORD_LIMIT:-512M} EVRING_RECORD_QUEUE=${EVRING_RECORD_QUEUE:-1M} \
    timeout 300 python3 "$here/driver.py" --out "$d" --world "$world" "$@" >"$d/driver.log" 2>&1
  local rc=$?
  cat "$d/driver.log" >>"$log"
  [ $rc -eq 0 ] || { say "driver $mode mask $mask exited $rc:"; tail -5 "$d/driver.log" | tee -a "$summary"; fail=1; }
  python3 "$here/check.py" "$d" --label "$mode" --json "$d/check.json" | tee -a "$summary"
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
}

for stage in $stages; do
  t0=$(date +%s)
  case $stage in
    matrix)
      for mode in p2p shm socket; do
        for mask in 6 70 4095; do
          drive "$mode" "$mask" "$work/matrix/$mode-$mask" --iters "$ITERS" --burst "$BURST" --replays "$REPLAYS"
        done
      done
      python3 - "$work/matrix" "$out/matrix.json" <<'EOF'
import json, glob, os, sys
res = [json.load(open(p)) | {"run": os.path.basename(os.path.dirname(p))}
       for p in sorted(glob.glob(os.path.join(sys.argv[1], "*", "check.json")))]
json.dump(res, open(sys.argv[2], "w"), indent=1)
print(f"{'run':14} {'issued':>7} {'recorded':>8} {'tasks':>6} {'KernelCh':>8} {'live':>5} {'drops':>6}  result")
for r in res:
    iss = sum(x["n"] for x in r["rows"]); rec = sum(x["recorded"] for x in r["rows"])
    tasks = sum(x["task_events"] for x in r["rows"]); k = sum(x["kch"] for x in r["rows"])
    live = sum(p["live"] or 0 for p in r["procs"]); drops = sum(r["drops"].values())
    print(f"{r['run']:14} {iss:>7} {rec:>8} {tasks:>6} {k:>8} {live:>5} {drops:>6}  {'PASS' if r['ok'] else 'FAIL'}")
EOF
      ;;
    record)
      # Small logs for tests/fixtures: one of each operation, two graph replays.
      for mode in p2p socket; do
        drive "$mode" 4095 "$work/record/$mode-4095" --iters 1 --burst 4 --replays 2
      done
      (cd "$work/record" && tar czf "$out/record.tar.gz" --exclude='trace_*' .)
      say "record: $(tar tzf "$out/record.tar.gz" | grep -c '\.log$') call logs, $(du -k "$out/record.tar.gz" | cut -f1) KiB compressed"
      ;;
    overhead)
      null=${NULLPROF:-}
      if [ -z "$null" ] && command -v cc >/dev/null; then
        null=$work/libnullprof.so
        cc -O2 -shared -fPIC -o "$null" "$here/nullprof.c" || null=
      fi
      timeout 400 python3 "$here/overhead.py" --plugin "$plugin" ${null:+--null "$null"} --out "$work/overhead" \
        --rounds "$ROUNDS" --batches "$BATCHES" --world "$world" 2>&1 | tee -a "$log" | grep -v '^overhead: round' | tee -a "$summary"
      cp "$work/overhead/overhead.json" "$out/" 2>/dev/null || { say "overhead: no result"; fail=1; }
      ;;
    smoke)
      # One rank: NCCL emits no events, but loads the plugin, calls init
      # (and the logger) and our exit flush must leave balanced footers.
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,PROFILE drive p2p 4095 "$work/smoke" --iters 2 --burst 10 --replays 2
      grep -iE "evring|profiler" "$work/smoke/driver.log" | sed 's/^/  nccl: /' | head -20 | tee -a "$summary"
      # Our logger path at init: an unwritable call-log prefix is a WARN
      # through NCCL's logger (and recording stays off), never a failure.
      REC_PREFIX=/nonexistent-evring/rec- drive p2p 70 "$work/smoke-logger" --iters 1 --burst 0 --replays 0
      grep -E "evring" "$work/smoke-logger/driver.log" | sed 's/^/  nccl: /' | head -5 | tee -a "$summary"
      ls -l "$work/smoke" | tee -a "$log" >/dev/null
      (cd "$work/smoke" && tar czf "$out/smoke.tar.gz" .)
      ;;
  esac
  say "stage $stage: $(( $(date +%s) - t0 )) s"
done
say "== $( [ $fail -eq 0 ] && echo PASS || echo FAIL )"
exit $fail
