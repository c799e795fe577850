#!/usr/bin/env bash
# libFuzzer run of fuzz/fuzz_targets/abi_chaos.rs: the chaos generator of
# tests/chaos.rs fed by the fuzzer, against the shim linked in (instrumented,
# AddressSanitizer on), with the counters checked after every input.
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`); not
# part of CI (.ci/run), which stays on stable.
#
#   ci/fuzz.sh [RUNS [SECONDS]]      defaults: 1000000 runs, at most 900 s
#   ci/fuzz.sh 10000000 4200         the 10 M run of docs/reliability.md
#
# Stops at RUNS executions or after SECONDS, whichever comes first; the run
# is killed 120 s after that if it has not stopped. Env: FUZZ_TOOLCHAIN
# (nightly), FUZZ_SANITIZER (address; `none` is ~2x faster), FUZZ_JOBS (1:
# more runs libFuzzer's -fork=N with N worker processes; RUNS then bounds
# each worker's share only approximately), FUZZ_CORPUS (fuzz/corpus/abi_chaos).
# Crashes go to fuzz/artifacts/abi_chaos/; reproduce one with
#   cargo +nightly fuzz run abi_chaos fuzz/artifacts/abi_chaos/crash-<hash>
# and minimize it with `cargo +nightly fuzz tmin abi_chaos <file>`.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-1000000}"
secs="${2:-900}"
tc="${FUZZ_TOOLCHAIN:-nightly}"
san="${FUZZ_SANITIZER:-address}"
jobs="${FUZZ_JOBS:-1}"
corpus="${FUZZ_CORPUS:-fuzz/corpus/abi_chaos}"

if ! cargo "+$tc" --version >/dev/null 2>&1; then
  echo "ci/fuzz.sh: needs the $tc toolchain (rustup toolchain install $tc)" >&2
  exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "ci/fuzz.sh: needs cargo-fuzz (cargo install cargo-fuzz)" >&2
  exit 2
fi

# The peer instance that supplies foreign handles and contexts.
cargo build --release -q -p evring-shim --lib
export EVRING_PLUGIN="${EVRING_PLUGIN:-$PWD/target/release/libevring_shim.so}"
cargo "+$tc" fuzz build -s "$san" abi_chaos

mkdir -p "$corpus" fuzz/artifacts/abi_chaos
# -detect_leaks=0: the plugin keeps process-wide state on purpose (LeakSanitizer
#   would also cost 90 % of the time); leaks show as RSS growth instead, which
#   -rss_limit_mb turns into a failure.
# -max_len: 64 chaos calls use up to ~4 KiB of input.
args=(-runs="$runs" -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048
      -detect_leaks=0 -print_final_stats=1)
if [ "$jobs" -gt 1 ]; then
  args+=(-fork="$jobs" -ignore_crashes=0)
fi
status=0
timeout --kill-after=10 "$((secs + 120))" \
  cargo "+$tc" fuzz run -s "$san" abi_chaos "$corpus" -- "${args[@]}" || status=$?
if [ "$status" -ne 0 ]; then
  echo "ci/fuzz.sh: fuzzing failed (status $status); see fuzz/artifacts/abi_chaos/" >&2
fi
exit "$status"
