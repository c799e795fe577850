#!/usr/bin/env python3
"""Summary tables of run.sh's stages.

    python3 tables.py matrix|exits DIR OUT.json
    python3 tables.py overhead-md overhead.json

matrix, exits: collects DIR/*/check.json (written by check.py) into OUT.json
and prints one line per run. overhead-md: the Markdown table of
docs/validation.md from overhead.py's result.
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


def overhead_md(path):
    with open(path) as fh:
        d = json.load(fh)
    med, p10 = d["medians_us"], d["p10_us"]
    q = d["quartiles_us"]
    print("| size | mask | no plugin p50 / p10 | null p50 / p10 | evring p50 [quartiles] / p10 "
          "| evring/none p50 / p10 | evring m/0 p50 / p10 | null m/0 p50 / p10 |")
    print("|---|---|---|---|---|---|---|---|")
    for size in sorted({int(k.rsplit("/", 1)[1]) for k in med}):
        n0 = (med[f"none/None/{size}"], p10[f"none/None/{size}"])
        for m in (0, 6, 70, 4095):
            nu = (med[f"null/{m}/{size}"], p10[f"null/{m}/{size}"])
            ev = (med[f"evring/{m}/{size}"], p10[f"evring/{m}/{size}"])
            e0 = (med[f"evring/0/{size}"], p10[f"evring/0/{size}"])
            u0 = (med[f"null/0/{size}"], p10[f"null/0/{size}"])
            lo, hi = q[f"evring/{m}/{size}"]
            none = f"{n0[0]:.2f} / {n0[1]:.2f}" if m == 0 else ""
            print(f"| {size // 1024} KiB | {m} | {none} | {nu[0]:.2f} / {nu[1]:.2f} "
                  f"| {ev[0]:.2f} [{lo:.2f}–{hi:.2f}] / {ev[1]:.2f} "
                  f"| {ev[0] / n0[0]:.3f} / {ev[1] / n0[1]:.3f} | {ev[0] / e0[0]:.3f} / {ev[1] / e0[1]:.3f} "
                  f"| {nu[0] / u0[0]:.3f} / {nu[1] / u0[1]:.3f} |")
    print(f"\n{d['rounds']} rounds x 3 configurations, {d['batches']} batches of one {d['burst']}-call burst "
          f"per mask and size in each job; {d['calls'].get('none/None/4096', '?')} calls per cell; "
          f"{d['wall_s']} s; {d['gpus']} GPU(s).")


def main():
    if sys.argv[1] == "overhead-md":
        overhead_md(sys.argv[2])
        return
    kind, root, out = sys.argv[1:4]
    res = collect(root)
    with open(out, "w") as fh:
        json.dump(res, fh, indent=1)
    {"matrix": matrix, "exits": exits}[kind](res)


if __name__ == "__main__":
    main()
