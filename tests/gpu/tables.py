#!/usr/bin/env python3
"""Summary tables of run.sh's stages.

    python3 tables.py matrix|exits DIR OUT.json
    python3 tables.py overhead-md overhead.json

matrix, exits: collects DIR/*/check.json (written by check.py) into OUT.json
and prints one line per run. overhead-md: the Markdown table of
docs/validation.md from overhead.py's result (intervals and verdicts from
ovh_stats.py).
"""

import glob
import json
import math
import os
import sys

import ovh_stats


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


def _ci(x):
    if not x["n"]:
        return "–"
    if math.isinf(x["hi"]):
        return f"{x['est']:.3f} (no interval: {x['n']} rounds)"
    return f"{x['est']:.3f} [{x['lo']:.3f}, {x['hi']:.3f}]"


def overhead_md(path):
    """The Markdown table of docs/validation.md: per size and mask the pooled
    medians (descriptive), then the per-round paired ratios with their
    intervals and the verdicts. An overhead.json from before the intervals
    (no "estimates") is analysed from its per-round medians."""
    with open(path) as fh:
        d = json.load(fh)
    conf = d.get("confidence", 0.95)
    est = d.get("estimates") or ovh_stats.estimates(ovh_stats.jobs_from_round_medians(d), conf)
    est_p10 = d.get("estimates_p10")
    med = d["medians_us"]
    pct = f"{conf:.0%}"
    print(f"| size | mask | no plugin p50 | evring p50 | evring/none [{pct}] | verdict "
          f"| evring m/0 [{pct}] | null/none [{pct}] | null m/0 [{pct}] |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in est:
        size, m = r["size"], r["mask"]
        none = f"{med[f'none/None/{size}']:.2f}" if m == 0 else ""
        verdict = f"**{r['verdict']}** (≤ {r['target']:.2f})" if "verdict" in r else ""
        w, v = ("–", "–") if m == 0 else (_ci(r["W"]), _ci(r["V"]))
        print(f"| {size // 1024} KiB | {m} | {none} | {med.get(f'evring/{m}/{size}', math.nan):.2f} "
              f"| {_ci(r['D'])} | {verdict} | {w} | {_ci(r['U'])} | {v} |")
    rounds = max((r["D"]["n"] for r in est), default=0)
    print(f"\n{rounds} rounds x 3 configurations (no plugin, null plugin, evring), {d['batches']} batches of one "
          f"{d['burst']}-call burst per mask slot and size in each job; {d['wall_s']} s; {d['gpus']} GPU(s)"
          f"{'; stopped ' + d['stopped'] if d.get('stopped') else ''}.")
    pres = "; ".join(f"{r['size'] // 1024} KiB {_ci(r['P'])}" for r in est if r["mask"] == 0)
    print(f"Presence (evring at mask 0 over no plugin, across jobs): {pres}.")
    if est_p10:
        fast = "; ".join(f"{r['size'] // 1024} KiB mask {r['mask']} {_ci(r['D'])}"
                         for r in est_p10 if r["mask"] in ovh_stats.TARGETS)
        print(f"Fast mode (job 10th percentiles instead of medians), evring/none: {fast}.")


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
