#!/usr/bin/env bash
# Builds the release plugin with profile-guided optimisation (PGO): an
# instrumented build of the .so runs the simulator's scenarios and the recorded
# NCCL call logs (`evring-sim all`) and the hot paths of examples/shim_paths.rs,
# and the final build uses what it counted to lay the code out (the paths NCCL
# calls contiguous, rare branches out of their way) and to decide inlining.
# Same source, same behaviour as `cargo build --release`; 4-8 % fewer
# instructions and about a fifth fewer code lines per event
# (docs/performance.md, "Round 8").
#
#   ci/build-pgo.sh                       -> target/pgo/libevring_shim.so and
#                                            target/pgo/libnccl-profiler-evring.so
#   PGO_RUSTFLAGS='-C target-cpu=native' PGO_DIR=target/pgo-native ci/build-pgo.sh
#                                         the same with extra rustc flags (they go
#                                         into both the training and the final build)
#   PGO_TRAIN=quick ci/build-pgo.sh       train on the hot paths only (seconds,
#                                         instead of the simulator's minute)
#
# Needs llvm-profdata of the compiler's own LLVM version: rustup's llvm-tools
# component (added here when rustup is present).
set -euo pipefail
cd "$(dirname "$0")/.."
T=${PGO_DIR:-target/pgo}
mkdir -p "$T"
T=$(cd "$T" && pwd) # absolute: rustc and the trainers run elsewhere
EXTRA=${PGO_RUSTFLAGS:-}
TRAIN=${PGO_TRAIN:-full}
case "$TRAIN" in full | quick) ;; *) echo "build-pgo: PGO_TRAIN is full or quick" >&2; exit 2 ;; esac

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ] && command -v rustup >/dev/null; then
  rustup component add llvm-tools >&2
fi
[ -x "$profdata" ] || {
  echo "build-pgo: $profdata missing (rustup component add llvm-tools)" >&2
  exit 1
}

# The trainers are ordinary builds (they only drive the plugin through its C ABI).
cargo build --release -q -p evring-sim
cargo build --release -q --example shim_paths
bin="${CARGO_TARGET_DIR:-target}/release"

# One target dir per stage: a RUSTFLAGS change rebuilds everything.
raw="$T/profraw"
rm -rf "$raw" "$T/merged.profdata"
mkdir -p "$raw"
RUSTFLAGS="$EXTRA -Cprofile-generate=$T/build-profraw" \
  cargo build --release -q -p evring-shim --lib --target-dir "$T/gen"
gen="$T/gen/release/libevring_shim.so"

# %p: one file per process (the simulator runs each job in a child process);
# %m: per instrumented module.
export LLVM_PROFILE_FILE="$raw/%p-%m.profraw"
if [ "$TRAIN" = full ]; then
  # Its verdict is not this build's: the instrumented .so is slower than the
  # simulator's pace allows in places (records lost to a full ring). Only
  # the profile matters here; the final build is what gets checked
  # (.ci/run runs the simulator and the tests against it).
  "$bin/evring-sim" all --plugin "$gen" >"$T/train-sim.log" 2>&1 ||
    echo "build-pgo: training run's verdict (not a check): $(tail -1 "$T/train-sim.log")" >&2
fi
for path in coll proxystep allreduce handoff-remote handoff-local; do
  EVRING_PLUGIN="$gen" "$bin/examples/shim_paths" "$path" 200000 >/dev/null
done
# Four threads at once (NCCL's user and proxy threads of several communicators).
EVRING_PLUGIN="$gen" "$bin/examples/shim_paths" scaling 2 >/dev/null 2>&1
unset LLVM_PROFILE_FILE
n=$(find "$raw" -name '*.profraw' | wc -l)
[ "$n" -gt 0 ] || { echo "build-pgo: training wrote no profile" >&2; exit 1; }
"$profdata" merge -o "$T/merged.profdata" "$raw"
# The profile must have counted the plugin's own paths, or the final build is
# a plain one under another name.
"$profdata" show --all-functions "$T/merged.profdata" >"$T/functions.txt"
grep -qE 'exports8start_v[0-9]' "$T/functions.txt" || {
  echo "build-pgo: the profile has no counts for the plugin's start path" >&2
  exit 1
}

RUSTFLAGS="$EXTRA -Cprofile-use=$T/merged.profdata" \
  cargo build --release -q -p evring-shim --lib --target-dir "$T/use"
cp -f "$T/use/release/libevring_shim.so" "$T/libevring_shim.so"
cp -f "$T/use/release/libevring_shim.so" "$T/libnccl-profiler-evring.so"
echo "build-pgo: trained on $n profiles ($TRAIN)" >&2
echo "$T/libnccl-profiler-evring.so"
