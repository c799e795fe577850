#!/usr/bin/env bash
# The Python package, as a user without Rust gets it: builds the wheel
# (ci/build-wheel.sh), installs it alone into a fresh venv, and checks every
# wrapper against the plugin it carries (python/tests/check_wheel.py).
# EVRING_WHEEL_PGO=1: the same for the wheel of the profile-guided build;
# EVRING_WHEEL_SO=PATH: for a wheel of that prebuilt plugin (ci/build-wheel.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
wheel="$(bash ci/build-wheel.sh | tail -1)"
venv="$(mktemp -d)"
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --no-deps --no-index "$wheel"
# Run from the venv's directory: the source tree's python/ is not importable there.
(cd "$venv" && "$venv/bin/python" "$OLDPWD/python/tests/check_wheel.py" "$OLDPWD/include/evring.h")
