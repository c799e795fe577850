#!/usr/bin/env bash
# Where the plugin's hot-path time goes: builds the shim's release .so as is
# and once per cost taken out (`--cfg evring_ablate=…`, see the ring crate's
# `ablate` module), then times the drained group of benches/shim.rs on every
# build, the builds interleaved round by round.
#
#   benches/ablate.sh [ROUNDS]        build, then run ROUNDS rounds (default 3)
#   ABLATE_RUN=0 benches/ablate.sh    build only (to carry to another machine)
#   ABLATE_BUILD=0 taskset -c 2-9 benches/ablate.sh 5
#                                     run only, from a carried target/ablate
#                                     (a machine without cargo)
#   EVRING_BENCH_CLOCK=thread-cpu …   on a shared machine (see benches/shim.rs)
#   ABLATE_BUILDS="base pgo floor floor-ring" benches/ablate.sh 8
#                                     only these builds (default: every one
#                                     but pgo, which trains for minutes)
#   ABLATE_SELFTIME=1 ABLATE_RUN=0 benches/ablate.sh
#                                     also builds each build with the selftime
#                                     timing (target/ablate/so/sel-<build>.so)
#                                     for tests/gpu/selftime.sh on real NCCL
#                                     (docs/performance.md, "Round 6")
#
# Builds:  base (as shipped), clock (no clock read), ring (no record written),
# locks (compare-exchanges as load + store), all (the three at once),
# prefetch (the prefetch hints taken out: the ring crate's `hint` module),
# floor (each call only converts, reads the clock and pushes one record-sized
# fragment: the calling thread's side of an event-sourced design, the shim's
# `floor` module), floor-ring (the same without the push: entry, conversion,
# clock), floor-entry (without the clock read too: entry and conversion),
# pgo (as shipped, built by ci/build-pgo.sh). The clock, ring, locks,
# all and floor builds are wrong for real use; they only time one thread's path.
# Output: target/ablate/so/<build>.so, the bench binary target/ablate/shim-bench,
# one line per round and build: criterion's median ns of the Coll pair, the
# ProxyStep (start, 3 records, stop) and the 10-call all-reduce; then per build
# the median and the minimum of those over the rounds; with floor-ring among
# the builds, also each build's median cost above it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
T=${ABLATE_DIR:-target/ablate}
mkdir -p "$T/so"
T=$(cd "$T" && pwd)  # absolute: the plugin path is handed to the bench

declare -A FLAGS=(
  [base]=""
  [clock]='--cfg evring_ablate="clock"'
  [ring]='--cfg evring_ablate="ring"'
  [locks]='--cfg evring_ablate="locks"'
  [all]='--cfg evring_ablate="clock" --cfg evring_ablate="ring" --cfg evring_ablate="locks"'
  [prefetch]='--cfg evring_ablate="prefetch"'
  [floor]='--cfg evring_ablate="floor"'
  [floor-ring]='--cfg evring_ablate="floor" --cfg evring_ablate="ring"'
  [floor-entry]='--cfg evring_ablate="floor" --cfg evring_ablate="ring" --cfg evring_ablate="clock"'
  [pgo]=""
)
read -r -a BUILDS <<< "${ABLATE_BUILDS:-base clock ring locks all prefetch floor floor-ring floor-entry}"
for b in "${BUILDS[@]}"; do
  [ -n "${FLAGS[$b]+set}" ] || { echo "ablate: unknown build $b" >&2; exit 2; }
done
if [ "${ABLATE_BUILD:-1}" != 0 ]; then
  for b in "${BUILDS[@]}"; do
    if [ "$b" = pgo ]; then
      PGO_DIR="$T/pgo" ci/build-pgo.sh >/dev/null
      cp "$T/pgo/libevring_shim.so" "$T/so/pgo.so"
      continue
    fi
    # One target dir per build: a RUSTFLAGS change rebuilds everything.
    RUSTFLAGS="${FLAGS[$b]}" cargo build --release -q -p evring-shim --target-dir "$T/$b"
    cp "$T/$b/release/libevring_shim.so" "$T/so/$b.so"
    if [ "${ABLATE_SELFTIME:-0}" != 0 ]; then
      RUSTFLAGS="${FLAGS[$b]} --cfg evring_ablate=\"selftime\"" \
        cargo build --release -q -p evring-shim --target-dir "$T/sel-$b"
      cp "$T/sel-$b/release/libevring_shim.so" "$T/so/sel-$b.so"
    fi
  done
  exe=$(cargo bench --bench shim --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)
  cp "$exe" "$T/shim-bench"
  # Smaller to carry; the bench needs no symbols.
  if command -v strip >/dev/null; then strip "$T/shim-bench" "$T"/so/*.so; fi
  echo "built: $T/so/{$(IFS=,; echo "${BUILDS[*]}")}.so and $T/shim-bench"
  # (the pgo build has no selftime variant: PGO_RUSTFLAGS in ci/build-pgo.sh makes one)
  sel=(); for b in "${BUILDS[@]}"; do [ "$b" = pgo ] || sel+=("$b"); done
  [ "${ABLATE_SELFTIME:-0}" = 0 ] || echo "built: $T/so/sel-{$(IFS=,; echo "${sel[*]}")}.so"
fi
need=("$T/shim-bench")
for b in "${BUILDS[@]}"; do need+=("$T/so/$b.so"); done
for f in "${need[@]}"; do
  [ -e "$f" ] || { echo "ablate: $f missing (build first)" >&2; exit 1; }
done
[ "${ABLATE_RUN:-1}" = 0 ] && exit 0

rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
printf '%-6s %-10s %10s %10s %10s\n' round build coll proxystep allreduce
for r in $(seq 1 "$ROUNDS"); do
  for b in "${BUILDS[@]}"; do
    out=$(EVRING_PLUGIN="$T/so/$b.so" "$T/shim-bench" --bench --noplot \
      --warm-up-time 0.5 --measurement-time 1.5 '^drained/' 2>&1)
    # criterion's "time: [low median high]": the median, in ns.
    mapfile -t med < <(echo "$out" | awk '/time:/ {
      v = $4; u = $5; if (u == "µs" || u == "us") v *= 1000; printf "%.1f\n", v }')
    if [ "${#med[@]}" -ne 3 ]; then
      echo "$out" >&2
      echo "ablate: expected 3 medians from build $b, got ${#med[@]}" >&2
      exit 1
    fi
    printf '%-6s %-10s %10s %10s %10s\n' "$r" "$b" "${med[@]}" | tee -a "$rows"
  done
done
# Per build, the median and the minimum over the rounds (on a machine whose
# speed drifts, the minima are the steadier figures).
echo
printf '%-6s %-10s %10s %10s %10s\n' "" build coll proxystep allreduce
for stat in median min; do
  for b in "${BUILDS[@]}"; do
    line=("$stat" "$b")
    for col in 3 4 5; do
      line+=("$(awk -v b="$b" -v c="$col" '$2 == b { print $c }' "$rows" | sort -g |
        awk -v stat="$stat" '{ v[NR] = $1 } END {
          m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
          printf "%.1f", (stat == "min") ? v[1] : m }')")
    done
    printf '%-6s %-10s %10s %10s %10s\n' "${line[@]}"
  done
done
# With floor-ring among the builds: each build's cost above that floor (entry,
# conversion and clock, measured in the same round), median over the rounds:
# what the build adds to what any design pays on this machine
# (docs/performance.md, "Round 9").
if printf '%s\n' "${BUILDS[@]}" | grep -qx floor-ring; then
  echo
  printf '%-6s %-10s %10s %10s %10s\n' "" build coll proxystep allreduce
  for b in "${BUILDS[@]}"; do
    [ "$b" = floor-ring ] && continue
    line=("above" "$b")
    for col in 3 4 5; do
      line+=("$(awk -v b="$b" -v c="$col" '
        $2 == "floor-ring" { f[$1] = $c } $2 == b { v[$1] = $c }
        END { for (r in v) if (r in f) print v[r] - f[r] }' "$rows" | sort -g |
        awk '{ v[NR] = $1 } END {
          printf "%.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')")
    done
    printf '%-6s %-10s %10s %10s %10s\n' "${line[@]}"
  done
fi
