#!/usr/bin/env python3
"""Tables from evring-meter reports (docs/meter.md): what a profiler plugin costs each
kind of NCCL thread, per operation.

  meter.py [--ops N] FILE_OR_DIR...            one set: calls and ns per operation
  meter.py [--ops N] --base F... --run F...    two sets side by side, with run/base

FILE_OR_DIR: meter JSON files (PREFIX<host>-<pid>.json), or directories holding them.
--ops N: operations (e.g. all_reduce calls) each process made; a set of K files counts
K*N operations. Without --ops, totals are printed instead of per-operation numbers.
--body: leave out the time of slow calls (4 096 ns or more: page faults, system calls,
preemption; the meter keeps it apart as `slow_ns`) and show how many there were: what a
plugin costs apart from its rare stalls, beside the plain tables' totals.
Python 3 standard library only.
"""

import argparse
import json
import os
import sys

# Thread names (/proc/<pid>/task/<tid>/comm, at most 15 characters) -> kind. NCCL names
# its threads only with NCCL_SET_THREAD_NAME=1 ("NCCL Progress%2d", "NCCL Service %2d",
# "NCCL UDS Service %2d", "NCCL Sock%c%1u%2u%2u", "NCCL IbAsync %2d", "NCCL GIN ...");
# otherwise a thread keeps its creator's name. The simulator's threads are "nccl-user-*",
# "nccl-proxy-*", "sock-helper-*", "nccl-async-*" and "cuda-callback-*".
PREFIXES = [
    ("NCCL Progress", "proxy"),
    ("nccl-proxy", "proxy"),
    ("NCCL Service", "proxy-service"),
    ("NCCL UDS", "proxy-service"),
    ("NCCL Sock", "net-helper"),
    ("sock-helper", "net-helper"),
    ("NCCL IbAsync", "net-helper"),
    ("NCCL GIN", "gin"),
    ("nccl-user", "user"),
    ("nccl-async", "async"),
    ("cuda-callback", "callback"),
    ("pt_nccl_", "torch-watchdog"),
]

FN_ORDER = ["hot", "init", "start", "stop", "record", "finalize"]
HOT = ("start", "stop", "record")
# The meter's SLOW_NS (4 096 ns) is where its log2 histogram's bucket 13 starts.
SLOW_BUCKET = 13


def classify(name, tid, pid):
    """The kind of a thread. The process's main thread (tid == pid) is "user" whatever
    its name; a thread named like the main thread but with another tid is "unnamed"
    (set NCCL_SET_THREAD_NAME=1 to have NCCL name its threads)."""
    if tid == pid:
        return "user"
    for prefix, kind in PREFIXES:
        if name.startswith(prefix):
            return kind
    if name in ("pt_main_thread",) or name.startswith("python"):
        return "unnamed"
    return "other"


def files_of(paths):
    out = []
    for p in paths:
        if os.path.isdir(p):
            for n in sorted(os.listdir(p)):
                if n.endswith(".json"):
                    out.append(os.path.join(p, n))
        else:
            out.append(p)
    return out


def load(path):
    with open(path) as f:
        v = json.load(f)
    if v.get("meter") != "evring-meter":
        raise ValueError(f"{path}: not an evring-meter report")
    return v


def aggregate(reports, body=False):
    """{(kind, fn, type): [calls, ns, slow calls, slow ns]} summed over reports, with a
    per-kind "hot" row summing start, stop and record (init and finalize happen once per
    communicator). With `body`, every row must carry `slow_ns` (a meter from before it
    did not write it)."""
    acc = {}
    for v in reports:
        pid = v.get("pid")
        for t in v.get("threads", []):
            kind = classify(t.get("name", ""), t.get("tid"), pid)
            for r in t.get("rows", []):
                if body and "slow_ns" not in r:
                    raise SystemExit("meter.py: --body needs reports with slow_ns (a newer meter)")
                keys = [(kind, r["fn"], r["type"])]
                if r["fn"] in HOT:
                    keys.append((kind, "hot", ""))
                slow = sum(r.get("hist", [])[SLOW_BUCKET:])
                for key in keys:
                    a = acc.setdefault(key, [0, 0, 0, 0])
                    a[0] += r["calls"]
                    a[1] += r["ns"]
                    a[2] += slow
                    a[3] += r.get("slow_ns", 0)
    return acc


def describe(reports):
    plugins = sorted({f'{v.get("plugin_name")} ({v.get("plugin")})' for v in reports})
    masks = sorted({v.get("mask") for v in reports})
    abis = sorted({v.get("abi") for v in reports})
    return f"{len(reports)} report(s); plugin {', '.join(plugins)}; mask {masks}; abi {abis}"


def sort_key(key):
    kind, fn, ty = key
    fi = FN_ORDER.index(fn) if fn in FN_ORDER else len(FN_ORDER)
    return (kind, fi, ty)


def fmt(x, width, prec=1):
    if x is None:
        return "-".rjust(width)
    return f"{x:{width}.{prec}f}"


def operations(acc, reports, ops, per_start):
    """The operations a set stands for: --ops per report, or the start calls of a type;
    None when neither is given (totals are printed)."""
    if per_start:
        n = sum(v[0] for (kind, fn, ty), v in acc.items() if fn == "start" and ty == per_start)
        if n == 0:
            raise SystemExit(f"meter.py: no startEvent calls of type {per_start!r}")
        return n
    return ops * len(reports) if ops else None


def body_of(a, body):
    """(calls, ns, slow calls) of an aggregated row: ns without the slow calls' with
    `body`, all of it otherwise."""
    calls, ns, slow, slow_ns = a
    return calls, (ns - slow_ns if body else ns), slow


def table(acc, denom, body=False):
    """Rows of one set: kind, fn, type, calls/op (or calls), ns/op (or ns), mean ns; with
    `body`, ns without the slow calls' and the slow calls per op (or in all)."""
    lines = []
    head = ("calls/op", "ns/op", "slow/op") if denom else ("calls", "ns", "slow")
    extra = f" {head[2]:>9}" if body else ""
    lines.append(f"{'kind':<15} {'fn':<8} {'type':<12} {head[0]:>12} {head[1]:>12} {'ns/call':>9}{extra}")
    for key in sorted(acc, key=sort_key):
        calls, ns, slow = body_of(acc[key], body)
        kind, fn, ty = key
        c = calls / denom if denom else calls
        n = ns / denom if denom else ns
        mean = ns / (calls - slow) if body and calls > slow else (ns / calls if calls else 0.0)
        more = f" {fmt(slow / denom if denom else slow, 9, 4 if denom else 0)}" if body else ""
        lines.append(f"{kind:<15} {fn:<8} {ty:<12} {fmt(c, 12, 3)} {fmt(n, 12)} {fmt(mean, 9)}{more}")
    return lines


def compare(base, run, db, dr, body=False):
    """Rows of two sets: per-op (or total) calls and ns of each, ns ratio run/base; with
    `body`, ns without the slow calls' and each set's slow calls per op (or in all)."""
    unit = "/op" if db else ""
    db, dr = db or 1, dr or 1
    extra = f" {'base slow' + unit:>13} {'run slow' + unit:>12}" if body else ""
    lines = [
        f"{'kind':<15} {'fn':<8} {'type':<12} {'base calls' + unit:>14} {'base ns' + unit:>12}"
        f" {'run calls' + unit:>14} {'run ns' + unit:>12} {'run-base ns':>12} {'ratio':>7}{extra}"
    ]
    for key in sorted(set(base) | set(run), key=sort_key):
        kind, fn, ty = key
        bc, bn, bs = body_of(base.get(key, [0, 0, 0, 0]), body)
        rc, rn, rs = body_of(run.get(key, [0, 0, 0, 0]), body)
        bcn, bnn, rcn, rnn = bc / db, bn / db, rc / dr, rn / dr
        ratio = rnn / bnn if bnn else None
        more = f" {fmt(bs / db, 13, 4)} {fmt(rs / dr, 12, 4)}" if body else ""
        lines.append(
            f"{kind:<15} {fn:<8} {ty:<12} {fmt(bcn, 14, 3)} {fmt(bnn, 12)} {fmt(rcn, 14, 3)}"
            f" {fmt(rnn, 12)} {fmt(rnn - bnn, 12)} {fmt(ratio, 7, 2)}{more}"
        )
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", help="reports or directories (one set)")
    ap.add_argument("--ops", type=int, default=0, help="operations per process (per report)")
    ap.add_argument("--base", nargs="+", default=[], help="reports of the baseline (e.g. inner null)")
    ap.add_argument("--run", nargs="+", default=[], help="reports of the plugin under test")
    ap.add_argument(
        "--per-start",
        metavar="TYPE",
        help="count operations as the startEvent calls of TYPE in each set (e.g. Coll), instead of --ops",
    )
    ap.add_argument("--kinds", action="store_true", help="only the per-kind hot-path totals")
    ap.add_argument(
        "--body",
        action="store_true",
        help="ns without the calls of 4096 ns or more (page faults, system calls, preemption), and their count",
    )
    a = ap.parse_args(argv)
    if bool(a.base) != bool(a.run):
        ap.error("--base and --run go together")
    if not a.paths and not a.base:
        ap.error("no reports given")

    def keep(acc):
        return {k: v for k, v in acc.items() if not a.kinds or k[1] == "hot"}

    if a.base:
        if a.paths:
            ap.error("give reports either as a set or with --base/--run")
        base = [load(p) for p in files_of(a.base)]
        run = [load(p) for p in files_of(a.run)]
        if not base or not run:
            ap.error("a set without reports")
        print(f"base: {describe(base)}")
        print(f"run:  {describe(run)}")
        ab, ar = aggregate(base, a.body), aggregate(run, a.body)
        db = operations(ab, base, a.ops, a.per_start)
        dr = operations(ar, run, a.ops, a.per_start)
        if db:
            print(f"operations: base {db}, run {dr}")
        lines = compare(keep(ab), keep(ar), db, dr, a.body)
    else:
        reps = [load(p) for p in files_of(a.paths)]
        if not reps:
            ap.error("no reports found")
        print(describe(reps))
        acc = aggregate(reps, a.body)
        denom = operations(acc, reps, a.ops, a.per_start)
        if denom:
            print(f"operations: {denom}")
        lines = table(keep(acc), denom, a.body)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
