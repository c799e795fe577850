#!/usr/bin/env bash
# GPU validation of the evring plugin on real NCCL through PyTorch
# (docs/validation.md). Needs python3 with torch and a CUDA GPU; no cargo.
#
#   tests/gpu/run.sh PLUGIN.so [OUTDIR]
#
# PLUGIN.so  the release libevring_shim.so (ci/build-plugin.sh), any path.
# OUTDIR     results: summary.txt, log.txt, matrix.json, exits.json,
#            overhead.json, overhead-raw.tar.gz, record.tar.gz. Default: $OUT if set, else a new
#            temp dir.
# Two ranks always. With 2+ GPUs one GPU per rank; with one GPU both ranks
# share it, each with its own NCCL_HOSTID (driver.py), so NCCL connects them
# through the network transport: only the socket mode can run then.
# STAGES     which stages, in order (default: "matrix record exits overhead"):
#   matrix    mode (p2p, shm, socket; socket only on 1 GPU) x mask (6, 70,
#             4095): driver.py with every step, every NCCL call logged
#             (EVRING_RECORD), then check.py
#   record    small runs at masks 70 and 4095 (socket; with 2+ GPUs also p2p)
#             whose call logs become tests/fixtures (record.tar.gz;
#             make_fixtures.py)
#   exits     socket, mask 4095, ended by no-destroy, os-exit, sigterm, sigkill
#   overhead  overhead.py: no plugin / null plugin / evring, interleaved
#             rounds until ROUNDS or OVERHEAD_S seconds of jobs (about 25 s a
#             round on one H200); a verdict per target with its interval
#   smoke     NCCL loads the plugin, init/exit, logger lines, no crash
# MODES      override the modes of matrix
# GRAPH      release (default): the captured graph is destroyed before
#            destroy_process_group; separate: the graph step runs in a second
#            driver run into the same directory that ends without
#            destroy_process_group
# NULLPROF   the null plugin for overhead (default: built from nullprof.c
#            if cc exists; skipped otherwise)
# ITERS BURST REPLAYS ROUNDS BATCHES OVERHEAD_S  sizes (defaults below)
# FIRST_ROUND  number of the overhead's first round (default 0): calls with
#            different numbers can be analysed together (overhead.py --analyse)
# REC_PREFIX EVRING_RECORD for driver runs (default: <run dir>/calls-)
# EVRING_FORMAT  trace format of driver runs (default json: check.py reads it)
# WORK       scratch for traces (default: a temp dir)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
plugin=$(realpath "${1:?usage: run.sh PLUGIN.so [OUTDIR]}")
out=${2:-${OUT:-$(mktemp -d)}}
work=${WORK:-$(mktemp -d)}
mkdir -p "$out" "$work"
ngpu=$(python3 -c 'import torch; print(torch.cuda.device_count())')
world=2
stages=${STAGES:-matrix record exits overhead}
if [ "$ngpu" -ge 2 ]; then modes=${MODES:-p2p shm socket}; else modes=${MODES:-socket}; fi
ITERS=${ITERS:-20} BURST=${BURST:-1000} REPLAYS=${REPLAYS:-3}
# Overhead: many short jobs (the job-to-job spread is what limits the
# interval), at most ROUNDS rounds, none started past OVERHEAD_S seconds
# (the stage is killed at OVERHEAD_S + 160 s).
ROUNDS=${ROUNDS:-40} BATCHES=${BATCHES:-2} OVERHEAD_S=${OVERHEAD_S:-420}
GRAPH=${GRAPH:-release}

# NVLink multicast can put the host's GPUs out of service: never on.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
summary=$out/summary.txt
log=$out/log.txt
say() { echo "$*" | tee -a "$summary"; }
fail=0

say "== evring GPU validation: $(date -u +%FT%TZ), $ngpu GPU(s), 2 ranks, modes: $modes, stages: $stages"
[ "$ngpu" -ge 2 ] || say "one GPU: both ranks on GPU 0, NCCL_HOSTID per rank (network transport; GPU times are time-sliced)"
# The NCCL that runs (ncclGetVersion of the loaded libnccl: an LD_PRELOAD'ed copy
# counts) and the one torch was built against (torch.cuda.nccl.version()).
(cd "$here" && python3 -c 'import torch, driver
print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL", driver.nccl_runtime_version(),
      "(torch built with", ".".join(map(str, torch.cuda.nccl.version())) + ")",
      "|", ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())))') 2>&1 | tee -a "$summary"
[ -n "${LD_PRELOAD:-}" ] && say "LD_PRELOAD: $LD_PRELOAD"
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

# One driver invocation: mode mask dir [driver args...] (output appended to dir/driver.log).
driver() {
  local mode=$1 mask=$2 d=$3; shift 3
  mkdir -p "$d"
  # NCCL_DEBUG=INFO (INIT, ENV, PROFILE) for the transport lines and the plugin's own.
  # shellcheck disable=SC2046
  env $(mode_env "$mode") NCCL_PROFILER_PLUGIN="$plugin" NCCL_PROFILE_EVENT_MASK="$mask" \
    NCCL_DEBUG="${NCCL_DEBUG:-INFO}" NCCL_DEBUG_SUBSYS="${NCCL_DEBUG_SUBSYS:-INIT,ENV,PROFILE}" \
    NCCL_PROFILE_DUMP_FILE="$d/trace" EVRING_FORMAT="${EVRING_FORMAT:-json}" EVRING_RECORD="${REC_PREFIX:-$d/calls-}" \
    EVRING_RECORD_LIMIT="${EVRING_RECORD_LIMIT:-512M}" EVRING_RECORD_QUEUE="${EVRING_RECORD_QUEUE:-1M}" \
    timeout 300 python3 "$here/driver.py" --out "$d" --world "$world" "$@" >>"$d/driver.log" 2>&1
  local rc=$?
  grep '^driver:' "$d/driver.log" | tail -4 >>"$summary"
  [ $rc -eq 0 ] || { say "driver $mode mask $mask $* exited $rc:"; grep -v 'NCCL INFO' "$d/driver.log" | tail -5 | tee -a "$summary"; fail=1; }
}

# Checks one run directory; leaves dir/check.json.
check() {
  local d=$1 label=$2
  cat "$d/driver.log" >>"$log"
  python3 "$here/check.py" "$d" --label "$label" --json "$d/check.json" | tee -a "$summary"
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
}

# A run of every step at mode, mask; the graph step as GRAPH says.
drive() {
  local mode=$1 mask=$2 d=$3; shift 3
  if [ "$GRAPH" = separate ]; then
    driver "$mode" "$mask" "$d" --steps ops,burst,group "$@"
    driver "$mode" "$mask" "$d" --steps graph --end no-destroy "$@"
  else
    driver "$mode" "$mask" "$d" --graph-release "$@"
  fi
  check "$d" "$mode-$mask"
}

for stage in $stages; do
  t0=$(date +%s)
  case $stage in
    matrix)
      for mode in $modes; do
        for mask in 6 70 4095; do
          drive "$mode" "$mask" "$work/matrix/$mode-$mask" --iters "$ITERS" --burst "$BURST" --replays "$REPLAYS"
        done
      done
      python3 "$here/tables.py" matrix "$work/matrix" "$out/matrix.json" | tee -a "$summary"
      ;;
    record)
      # Small logs for tests/fixtures: one of each operation, two graph replays;
      # socket always, P2P too with a GPU per rank.
      for mode in socket $( [ "$ngpu" -ge 2 ] && echo p2p ); do
        for mask in 70 4095; do
          drive "$mode" "$mask" "$work/record/$mode-$mask" --iters 1 --burst 4 --replays 2
        done
      done
      (cd "$work/record" && tar czf "$out/record.tar.gz" --exclude='trace_*' .)
      say "record: $(tar tzf "$out/record.tar.gz" | grep -c '\.log$') call logs, $(du -k "$out/record.tar.gz" | cut -f1) KiB compressed"
      ;;
    exits)
      # The exit paths: the same work (no graph, no sub-group), four endings.
      for how in no-destroy os-exit sigterm sigkill; do
        driver socket 4095 "$work/exits/$how" --steps ops,burst --iters 2 --burst 50 --end "$how"
        check "$work/exits/$how" "exit-$how"
      done
      python3 "$here/tables.py" exits "$work/exits" "$out/exits.json" | tee -a "$summary"
      # The call logs stay in: what NCCL called is what tells which event a cut
      # run's file lacks, and why (a few hundred KiB).
      (cd "$work/exits" && tar czf "$out/exits.tar.gz" .)
      ;;
    overhead)
      null=${NULLPROF:-}
      if [ -z "$null" ] && command -v cc >/dev/null; then
        null=$work/libnullprof.so
        cc -O2 -shared -fPIC -o "$null" "$here/nullprof.c" || null=
      fi
      # One GPU: the network transport of the host-id method; 2+ GPUs: NCCL's default.
      # shellcheck disable=SC2046
      env $( [ "$ngpu" -ge 2 ] || mode_env socket ) \
        timeout $((${OVERHEAD_S%.*} + 160)) python3 "$here/overhead.py" --plugin "$plugin" ${null:+--null "$null"} --out "$work/overhead" \
        --rounds "$ROUNDS" --first-round "${FIRST_ROUND:-0}" --budget "$OVERHEAD_S" --batches "$BATCHES" --world "$world" 2>&1 | tee -a "$log" | grep -v '^overhead: round' | tee -a "$summary"
      # The per-rank files (every call's time) for `overhead.py --analyse DIR`.
      (cd "$work/overhead" && tar czf "$out/overhead-raw.tar.gz" ovh-*.rank*) 2>/dev/null
      if ! cp "$work/overhead/overhead.json" "$out/" 2>/dev/null; then
        say "overhead: no result; the statistics of the jobs that finished:"
        python3 "$here/overhead.py" --analyse "$work/overhead" 2>&1 | tee -a "$summary"
        fail=1
      fi
      ;;
    smoke)
      drive socket 4095 "$work/smoke" --iters 2 --burst 10 --replays 2
      grep -iE "evring|profiler" "$work/smoke/driver.log" | sed 's/^/  nccl: /' | head -20 | tee -a "$summary"
      # Our logger path at init: an unwritable call-log prefix is a WARN
      # through NCCL's logger (and recording stays off), never a failure.
      REC_PREFIX=/nonexistent-evring/rec- drive socket 70 "$work/smoke-logger" --iters 1 --burst 0 --replays 0
      grep -E "evring" "$work/smoke-logger/driver.log" | sed 's/^/  nccl: /' | head -5 | tee -a "$summary"
      (cd "$work/smoke" && tar czf "$out/smoke.tar.gz" .)
      ;;
  esac
  say "stage $stage: $(( $(date +%s) - t0 )) s"
done
say "== $( [ $fail -eq 0 ] && echo PASS || echo FAIL )"
exit $fail
