#!/usr/bin/env bash
# The plugin's own time per operation on real NCCL, for several diagnostic
# builds side by side (docs/performance.md, "Round 6").
#
#   tests/gpu/selftime.sh OUTDIR NAME=PLUGIN.so [NAME=PLUGIN.so ...]
#
# Each PLUGIN.so is a build with --cfg evring_ablate="selftime" (alone, or
# with other ablation cfgs). ROUNDS rounds (default 3); in each, every build
# runs `overhead.py --rounds JOB_ROUNDS` (default 2: a few hundred
# all_reduces per mask and size) with EVRING_SELFTIME=OUTDIR/st-NAME-ROUND.txt,
# the builds in rotated order. Then selftime.py reports each build pooled
# over its rounds, and each round apart (the spread between runs of one
# build is the noise floor of a comparison). About 45 s per build and round
# on one H200. Needs python3 with torch and a GPU; no cargo. OUTDIR gets every
# job's traces too (hundreds of files): on a machine whose results come back
# through a folder with a file limit, give a scratch OUTDIR and copy
# OUTDIR/selftime.txt (the report) and the st-*.txt bins out of it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: selftime.sh OUTDIR NAME=PLUGIN.so [NAME=PLUGIN.so ...]}
shift
[ $# -ge 1 ] || { echo "selftime.sh: no NAME=PLUGIN.so given" >&2; exit 2; }
ROUNDS=${ROUNDS:-3} JOB_ROUNDS=${JOB_ROUNDS:-2}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
mkdir -p "$out"
names=() sos=()
for a in "$@"; do
  case $a in
    *=*) names+=("${a%%=*}"); sos+=("$(realpath "${a#*=}")") ;;
    *) echo "selftime.sh: expected NAME=PLUGIN.so, got $a" >&2; exit 2 ;;
  esac
done
n=${#names[@]}
for r in $(seq 1 "$ROUNDS"); do
  for k in $(seq 0 $((n - 1))); do
    i=$(( (k + r) % n ))
    EVRING_SELFTIME="$out/st-${names[$i]}-$r.txt" timeout 300 python3 "$here/overhead.py" \
      --plugin "${sos[$i]}" --out "$out/ovh-${names[$i]}-$r" --rounds "$JOB_ROUNDS" --budget 60 \
      >> "$out/overhead.log" 2>&1 || echo "round $r ${names[$i]}: overhead.py failed (see overhead.log)"
  done
done
for i in $(seq 0 $((n - 1))); do
  echo "== ${names[$i]} (${sos[$i]}), $ROUNDS rounds pooled"
  python3 "$here/selftime.py" "$out"/st-"${names[$i]}"-*.txt
  for r in $(seq 1 "$ROUNDS"); do
    printf '   round %s:' "$r"
    python3 "$here/selftime.py" "$out/st-${names[$i]}-$r.txt" | awk '/^mask (6|70|4095) .*Colls/{printf " %s %s %s", $2, $3, $(NF-3)}'
    echo
  done
done | tee "$out/selftime.txt"
