#!/usr/bin/env bash
# The `evring` crate's tests under Miri (if installed) or AddressSanitizer.
# Both need a nightly toolchain; without one this script says so and exits 0,
# so it is never a requirement of CI (which stays on stable).
#
#   ci/ring-sanitize.sh            Miri if available, else ASan
#   ci/ring-sanitize.sh asan       ASan only
#   ci/ring-sanitize.sh miri       Miri only (fails if not installed)
set -euo pipefail
cd "$(dirname "$0")/.."
tc="${SANITIZE_TOOLCHAIN:-nightly}"
mode="${1:-auto}"
if ! cargo "+$tc" --version >/dev/null 2>&1; then
  echo "ci/ring-sanitize.sh: no $tc toolchain (rustup toolchain install $tc); skipped"
  exit 0
fi
host="$(rustc "+$tc" -vV | sed -n 's/^host: //p')"

if [ "$mode" = miri ] || { [ "$mode" = auto ] && cargo "+$tc" miri --version >/dev/null 2>&1; }; then
  echo "=== Miri: evring unit, property and doc tests"
  # Miri runs ~1000x slower than native: proptest cases and the stress
  # sizes are the tests' own; -Zmiri-many-seeds is left out for time.
  export MIRIFLAGS="${MIRIFLAGS:--Zmiri-strict-provenance}"
  export PROPTEST_CASES="${PROPTEST_CASES:-4}"
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/miri" \
    cargo "+$tc" miri test -p evring --lib -- --skip stress --skip never_full \
    --skip stalled_reader --skip exited_threads --skip live_threads
  exit 0
fi

echo "=== AddressSanitizer: evring unit, property and stress tests, and the example"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/asan"
export RUSTFLAGS="-Zsanitizer=address"
export RUSTDOCFLAGS="$RUSTFLAGS"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1:halt_on_error=1}"
# --target keeps the sanitizer off build scripts and proc macros.
cargo "+$tc" test --release --target "$host" -p evring --lib
cargo "+$tc" run --release -q --target "$host" -p evring --example handles
echo "=== done: no AddressSanitizer or LeakSanitizer report"
