#!/usr/bin/env bash
# The workspace's declared rust-version is true: `cargo check` of every crate
# and target with exactly that toolchain (installed here if missing; skipped
# with a message only if it cannot be installed). The evring crate's own,
# lower rust-version is checked by ci/ring-crate.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
msrv="$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
rustup run "$msrv" rustc --version >/dev/null 2>&1 ||
  rustup toolchain install "$msrv" --profile minimal >/dev/null 2>&1 || true
if ! rustup run "$msrv" rustc --version >/dev/null 2>&1; then
  echo "Rust $msrv could not be installed: workspace rust-version not checked"
  exit 0
fi
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/msrv-workspace" \
  cargo "+$msrv" check --workspace --all-targets
echo "the workspace checks with Rust $msrv"
