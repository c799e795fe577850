#!/usr/bin/env python3
"""Per-operation plugin time on NCCL's threads, from the diagnostic build.

The plugin built with `--cfg evring_ablate="selftime"` times every entry
point with the TSC and, at exit, appends its bins to the file named by
`EVRING_SELFTIME` (crates/plugin-shim/src/selftime.rs): lines
`PID MASK CLASS ENTRY CALLS NS`, each process's dump headed `dump PID TSC_PER_NS`.
CLASS is the calling thread's last Coll size (0: up to 64 Ki elements, 1:
more; 2: a thread that never started a Coll, i.e. NCCL's proxy thread).

    python3 tests/gpu/selftime.py FILE [FILE...] [--host-us US]

prints, per mask and size, the user thread's plugin time per Coll (every
entry point the thread called, divided by its Coll starts) and its
breakdown, and the other threads' time with its breakdown; with `--host-us` (the no-plugin
host time of one `dist.all_reduce`, e.g. overhead.py's median) also that
time as a share of it: a lower bound of the plugin's host overhead (the
in-call time adds to the call; cache and other indirect effects come on
top). docs/performance.md, "Round 6", has the command that makes FILE.
"""

import argparse
import collections
import sys

ENTRIES = ("Group Coll P2p ProxyOp ProxyStep ProxyCtrl KernelCh NetPlugin GroupApi CollApi "
           "P2pApi KernelLaunch CeColl CeSync CeBatch unknown stop record").split()
COLL = ENTRIES.index("Coll")
SIZE = {0: "<=64Ki elements", 1: ">64Ki elements"}


def load(paths):
    """{(mask, class, entry): [calls, ns]} over every process's last dump."""
    last = {}
    for path in paths:
        pid = None
        with open(path) as f:
            for line in f:
                p = line.split()
                if not p:
                    continue
                if p[0] == "dump":
                    # Each dump is cumulative: a process's later dump replaces its earlier one.
                    pid = (path, p[1])
                    last[pid] = []
                elif pid is not None and len(p) == 6:
                    last[pid].append(tuple(int(float(x)) for x in p[1:]))
    bins = collections.defaultdict(lambda: [0, 0])
    for rows in last.values():
        for mask, cls, entry, calls, ns in rows:
            b = bins[(mask, cls, entry)]
            b[0] += calls
            b[1] += ns
    return bins


def summary(bins):
    """[(mask, class, colls, ns per Coll, {entry: (calls per Coll, mean ns)})]
    for the user threads, and {mask: (calls, ns)} of the other threads (their
    breakdown: `other_entries`)."""
    user = []
    for mask in sorted({k[0] for k in bins}):
        for cls in (0, 1):
            colls = bins.get((mask, cls, COLL), [0, 0])[0]
            if not colls:
                continue
            rows = {e: bins[(m, c, e)] for (m, c, e) in bins if m == mask and c == cls}
            total = sum(ns for _, ns in rows.values())
            per = {ENTRIES[e]: (calls / colls, ns / calls) for e, (calls, ns) in sorted(rows.items()) if calls}
            user.append((mask, cls, colls, total / colls, per))
    other = collections.defaultdict(lambda: [0, 0])
    for (m, c, _), (calls, ns) in bins.items():
        if c == 2:
            other[m][0] += calls
            other[m][1] += ns
    return user, dict(other)


def other_entries(bins):
    """{mask: {entry: (calls, mean ns)}} of the other threads (NCCL's proxy
    thread: KernelCh, ProxyOp/ProxyStep, NetPlugin starts, their stops and states)."""
    out = collections.defaultdict(dict)
    for (m, c, e), (calls, ns) in sorted(bins.items()):
        if c == 2 and calls:
            out[m][ENTRIES[e]] = (calls, ns / calls)
    return dict(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--host-us", type=float, help="no-plugin host time of one all_reduce call (us)")
    args = ap.parse_args(argv)
    bins = load(args.files)
    user, other = summary(bins)
    breakdown = other_entries(bins)
    if not user:
        print("no Coll starts in these files", file=sys.stderr)
        return 1
    for mask, cls, colls, per_coll, per in user:
        share = f", {per_coll / 1000 / args.host_us:.1%} of {args.host_us} us" if args.host_us else ""
        print(f"mask {mask} {SIZE[cls]}: {colls} Colls, user thread {per_coll:.0f} ns per Coll{share}")
        for name, (calls, mean) in per.items():
            print(f"    {name:12s} {calls:5.2f} calls/Coll, mean {mean:6.0f} ns")
    for mask, (calls, ns) in sorted(other.items()):
        print(f"mask {mask} other threads (proxy): {calls} calls, mean {ns / max(calls, 1):.0f} ns")
        for name, (n, mean) in breakdown.get(mask, {}).items():
            print(f"    {name:12s} {n:8d} calls, mean {mean:6.0f} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
