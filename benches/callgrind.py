#!/usr/bin/env python3
"""Deterministic cost of the plugin's hot paths: instructions and code lines per call group.

    cargo build --release --example shim_paths
    benches/callgrind.py target/release/libevring_shim.so target/pgo/libevring_shim.so

For each plugin .so and each path of examples/shim_paths.rs (coll, proxystep,
allreduce), runs the path N times under callgrind (collecting only inside the
measured loop) and prints
  * instructions per iteration (all executed instructions, the loop's own included);
  * code lines per iteration: distinct 64-byte lines of the plugin's machine code
    that the loop executes every iteration (instructions run at least N/2 times).
    What a call costs with cold caches depends on how many lines it touches
    (docs/performance.md, "Round 6" and "Round 8"); this counts them exactly.

Needs valgrind. No timing: the figures are the same on every run of one build.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter

PATHS = ("coll", "proxystep", "allreduce")
LINE = 64

_NAME = re.compile(r"^c?ob=\((\d+)\)(?: (.*))?$")
_COST = re.compile(r"^(0x[0-9a-fA-F]+|[+-]\d+|\*)\s+\S+\s+(\d+)")


def parse(lines):
    """Callgrind output (`--dump-instr=yes`, positions `instr line`, one event) ->
    (total events, {object path: Counter(address -> self count)}).

    A call's cost line (the one after `calls=`) is inclusive: its address is
    tracked (later lines are relative to it), its count is not self cost."""
    names = {}
    ob = None
    addr = 0
    total = 0
    inclusive_next = False
    per_ob = {}
    for raw in lines:
        line = raw.rstrip("\n")
        m = _NAME.match(line)
        if m:
            if m.group(2):
                names[m.group(1)] = m.group(2)
            if line.startswith("ob="):
                ob = m.group(1)
            continue
        if line.startswith(("summary:", "totals:")):
            total = max(total, int(line.split()[1]))
            continue
        if line.startswith("calls="):
            inclusive_next = True
            continue
        m = _COST.match(line)
        if not m:
            continue
        a = m.group(1)
        if a.startswith("0x"):
            addr = int(a, 16)
        elif a != "*":
            addr += int(a)
        if inclusive_next:
            inclusive_next = False
            continue
        per_ob.setdefault(ob, Counter())[addr] += int(m.group(2))
    return total, {names.get(k, k): v for k, v in per_ob.items()}


def lines_every_iteration(counts, n):
    """Distinct code lines holding an instruction executed at least n/2 times."""
    return len({a // LINE for a, c in counts.items() if c >= n // 2})


def measure(exe, so, path, n):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        env = dict(os.environ, EVRING_PLUGIN=so, EVRING_RING=str(1 << 22))
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--dump-instr=yes",
             f"--callgrind-out-file={out}", "--toggle-collect=shim_paths::run*",
             exe, path, str(n)],
            env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            total, per_ob = parse(f)
    real = os.path.realpath(so)
    plugin = [c for name, c in per_ob.items() if os.path.realpath(name) == real]
    if not plugin:
        raise SystemExit(f"callgrind.py: no instructions of {so} in the profile of {path}")
    return total / n, lines_every_iteration(plugin[0], n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plugins", nargs="+", help="plugin .so files")
    ap.add_argument("--exe", default="target/release/examples/shim_paths")
    ap.add_argument("-n", type=int, default=4000, help="iterations per path")
    ap.add_argument("--paths", default=",".join(PATHS))
    a = ap.parse_args()
    paths = a.paths.split(",")
    print(f"{'plugin':32} " + " ".join(f"{p + ' instr/lines':>24}" for p in paths))
    for so in a.plugins:
        cells = [measure(a.exe, so, p, a.n) for p in paths]
        print(f"{so[-32:]:32} " + " ".join(f"{i:>17.0f} / {l:4d}" for i, l in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
