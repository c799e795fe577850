#!/usr/bin/env python3
"""Several plugin builds through the meter in the simulator, alternated: the same-run
comparison behind docs/performance.md's CPU-proxy figures (Round 16 on).

    benches/meter-alt.py [--body] ROUNDS NAME=PLUGIN.so [NAME=PLUGIN.so ...]

Each round runs `evring-sim run ib` (METER_SCENARIO, METER_EVENTS: ib, 200000) through
the release meter once per inner plugin, the built-in null plugin always among them, in
an order reversed every other round. Per round and thread kind (user, proxy, other: the
names `benches/meter.py --kinds` uses) it sums the hot calls' time (start, stop, record)
per Coll start, then prints each plugin's mean ns per operation and the mean and
standard error of its per-round ratio to null (`--body`: without the time of calls of
4 096 ns or more, as `meter.py --body`, and then also those calls per 1 000 operations). Needs the release `evring-sim` and
`libevring_meter.so` (CARGO_TARGET_DIR or target/); builds nothing.
"""
import collections
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benches"))
import meter  # noqa: E402  (its thread kinds and sums)

KINDS = ("user", "proxy", "other")


def per_op(out, body):
    """ns per Coll start of each thread kind's hot calls, from one run's reports (without
    the slow calls' time with `body`), and the slow calls per 1 000 operations."""
    reports = [meter.load(f) for f in glob.glob(os.path.join(out, "r-*.json"))]
    acc = meter.aggregate(reports, body)
    ops = sum(v[0] for (k, fn, ty), v in acc.items() if fn == "start" and ty == "Coll")
    if ops == 0:
        raise SystemExit(f"meter-alt: no Coll start in {out} (did the run fail?)")
    res = {}
    for k in KINDS:
        calls, ns, slow = meter.body_of(acc.get((k, "hot", ""), [0, 0, 0, 0]), body)
        res[k] = ns / ops
        res["slow " + k] = 1000 * slow / ops
    return res


def main():
    args = sys.argv[1:]
    body = bool(args) and args[0] == "--body"
    if body:
        args = args[1:]
    if len(args) < 2 or not args[0].isdigit():
        raise SystemExit(__doc__)
    rounds = int(args[0])
    plugins = [("null", "null")]
    for arg in args[1:]:
        name, sep, path = arg.partition("=")
        if not sep or not name or name == "null":
            raise SystemExit(f"meter-alt: not NAME=PATH: {arg}")
        plugins.append((name, os.path.realpath(path)))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    sim = os.path.join(target, "release", "evring-sim")
    meter = os.path.join(target, "release", "libevring_meter.so")
    scenario = os.environ.get("METER_SCENARIO", "ib")
    events = os.environ.get("METER_EVENTS", "200000")
    runs = collections.defaultdict(list)
    work = tempfile.mkdtemp(prefix="meter-alt-")
    try:
        for r in range(rounds):
            for name, path in plugins if r % 2 == 0 else plugins[::-1]:
                out = os.path.join(work, name)
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(out)
                env = dict(
                    os.environ,
                    EVRING_METER_PLUGIN=path,
                    EVRING_METER_ISOLATE="1",
                    EVRING_METER_QUIET="1",
                    EVRING_METER_OUT=os.path.join(out, "r-"),
                )
                # The null and other non-tracing inners make the simulator say
                # "unverified" (exit status 1): expected, the reports are what counts.
                subprocess.run(
                    [sim, "run", scenario, "--plugin", meter, "--events", events, "-q"],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    check=False,
                )
                runs[name].append(per_op(out, body))
                print(f"round {r + 1}: {name}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    head = "".join(f"{k + ' ns/op':>13}" for k in KINDS)
    tail = "".join(f"{'slow ' + k:>12}" for k in KINDS) if body else ""
    print(f"{'plugin':<12}{head}   " + "   ".join(f"{k} x null" for k in KINDS) + tail)
    for name, _ in plugins:
        mean = {k: statistics.mean(x[k] for x in runs[name]) for k in KINDS}
        cells = []
        for k in KINDS:
            ratios = [a[k] / b[k] for a, b in zip(runs[name], runs["null"])]
            se = statistics.stdev(ratios) / len(ratios) ** 0.5 if len(ratios) > 1 else 0.0
            cells.append(f"{statistics.mean(ratios):.2f} ± {se:.2f}")
        nums = "".join(f"{mean[k]:>13.0f}" for k in KINDS)
        slow = ""
        if body:
            slow = "".join(f"{statistics.mean(x['slow ' + k] for x in runs[name]):>12.1f}" for k in KINDS)
        print(f"{name:<12}{nums}   " + "   ".join(f"{c:>12}" for c in cells) + slow)


if __name__ == "__main__":
    main()
