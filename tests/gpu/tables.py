#!/usr/bin/env python3
"""Summary tables of run.sh's stages, from the check.json of each run directory.

    python3 tables.py matrix|exits DIR OUT.json

Collects DIR/*/check.json (written by check.py) into OUT.json and prints one
line per run.
"""

import glob
import json
import os
import sys


def collect(root):
    out = []
    for p in sorted(glob.glob(os.path.join(root, "*", "check.json"))):
        with open(p) as fh:
            out.append(json.load(fh) | {"run": os.path.basename(os.path.dirname(p))})
    return out


def matrix(res):
    print(f"{'run':12} {'transport':14} {'issued':>7} {'recorded':>8} {'tasks':>6} {'KernelCh':>8} "
          f"{'events':>8} {'live':>5} {'drops':>6}  result")
    for r in res:
        rows = r["rows"]
        live = sum(p["live"] or 0 for p in r["procs"])
        tr = ",".join(sorted(r["transports"])) or "?"
        print(f"{r['run']:12} {tr:14} {sum(x['n'] for x in rows):>7} {sum(x['recorded'] for x in rows):>8} "
              f"{sum(x['task_events'] for x in rows):>6} {sum(x['kch'] for x in rows):>8} "
              f"{sum(r['events'].values()):>8} {live:>5} {sum(r['drops'].values()):>6}  "
              f"{'PASS' if r['ok'] else 'FAIL'}")


def exits(res):
    print(f"{'end':11} {'files':>5} {'cut':>4} {'footer':>6} {'records':>8} {'bad lines':>9} "
          f"{'api issued':>10} {'api recorded':>12}  result")
    for r in res:
        fs = r["files"]
        cut = sum(1 for f in fs if not f["footers"])
        print(f"{r['end']:11} {len(fs):>5} {cut:>4} {len(fs) - cut:>6} {sum(f['begins'] for f in fs):>8} "
              f"{sum(f['bad_lines'] for f in fs):>9} {sum(x['n'] for x in r['rows']):>10} "
              f"{sum(x['recorded'] for x in r['rows']):>12}  {'PASS' if r['ok'] else 'FAIL'}")


def main():
    kind, root, out = sys.argv[1:4]
    res = collect(root)
    with open(out, "w") as fh:
        json.dump(res, fh, indent=1)
    {"matrix": matrix, "exits": exits}[kind](res)


if __name__ == "__main__":
    main()
