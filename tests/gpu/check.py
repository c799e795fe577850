#!/usr/bin/env python3
"""Checks one driver run: what torch issued (issued_rank*.json) against what our
plugin wrote (Chrome traces, <prefix>_*.json).

    python3 check.py DIR [--prefix trace] [--label TEXT] [--json OUT.json]

Prints, per operation kind, issued vs recorded API events (CollApi/P2pApi,
attributed by func and element count), the Coll/P2p tasks NCCL hung under them
and their KernelCh children; per process, the live count and counters of the
final trace footer; drops by reason; the timing-source mix. Exits 1 on any
shortfall: an issued operation without its API event, a collective whose Coll
is missing, a live event after finalize/exit, any counted drop, a broken
counter identity, a missing footer or a panic.

Traces are JSON arrays, one event per line, possibly without the closing `]`
(a killed process); they are read line by line, so a cut last line costs only
that line (reported).
"""

import argparse
import glob
import json
import os
import sys
from collections import Counter, defaultdict

DROP_KEYS = (
    "drop_slab_full",
    "drop_unknown_type",
    "drop_null_context",
    "drop_after_finalize",
    "drop_null_descr",
    "drop_ring_full",
    "records_unwritten",
    "write_errors",
    "record_dropped",
    "record_over_limit",
    "panics",
)
NOTE_KEYS = (
    "forced_finalize",
    "forced_age",
    "forced_pressure",
    "children_incomplete",
    "late_children",
    "foreign_parents",
    "foreign_contexts",
    "stale_handles",
    "unknown_handles",
    "null_handles",
    "double_stops",
    "record_after_stop",
    "unknown_states",
    "bad_strings",
    "bad_contexts",
)
TASK = {"CollApi": "Coll", "P2pApi": "P2p"}
KINDS = (
    "Group", "Coll", "P2p", "ProxyOp", "ProxyStep", "ProxyCtrl", "KernelCh", "NetPlugin",
    "GroupApi", "CollApi", "P2pApi", "KernelLaunch", "CeColl", "CeSync", "CeBatch",
)


def read_call_log(path):
    """START lines per event kind of an EVRING_RECORD log: (given a handle, dropped)."""
    given, dropped = Counter(), Counter()
    with open(path, errors="replace") as fh:
        for line in fh:
            f = line.split()
            if len(f) > 4 and f[1] == "START":
                t = int(f[4])
                kind = KINDS[t.bit_length() - 1] if t and t & (t - 1) == 0 and t.bit_length() <= len(KINDS) else f"type{t}"
                (dropped if f[2] == "(nil)" else given)[kind] += 1
    return given, dropped


def read_trace(path):
    """(events, file facts) of one trace file: begins, footers, whether it is
    closed (`]`), unparseable lines and whether the only one is the last line
    (a write cut by a kill)."""
    events, bad, last_bad, closed = [], 0, False, False
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if line == "]":
                closed = True
                continue
            line = line.rstrip(",")
            if not line or line == "[":
                continue
            try:
                events.append(json.loads(line))
                last_bad = False
            except json.JSONDecodeError:
                bad += 1
                last_bad = True
    begins = sum(1 for e in events if e.get("ph") in ("b", "X"))
    footers = [e["args"] for e in events if e.get("name") == "evring.summary"]
    info = {
        "file": os.path.basename(path),
        "begins": begins,
        "footers": len(footers),
        "closed": closed,
        "bad_lines": bad,
        "torn_tail": bad == 1 and last_bad,
        "stream_records": footers[-1].get("stream_records") if footers else None,
        "finalized": footers[-1].get("finalized") if footers else None,
        "complete": footers[-1].get("complete") if footers else None,
    }
    return events, info


def read_transports(dirname):
    """How NCCL connected the ranks, from its INFO lines in driver.log
    ("Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0"): {kind: lines}."""
    seen = Counter()
    path = os.path.join(dirname, "driver.log")
    if not os.path.exists(path):
        return {}
    with open(path, errors="replace") as fh:
        for line in fh:
            if "Channel" in line and " via " in line:
                via = line.split(" via ", 1)[1].split()[0]
                parts = via.split("/")
                seen["/".join(parts[:2]) if parts[0] in ("NET", "P2P") else parts[0]] += 1
    return dict(seen)


class Proc:
    """Everything one process (pid) wrote."""

    def __init__(self):
        self.begins = []
        self.by_id = {}
        self.children = defaultdict(list)
        self.footers = []
        self.files = 0

    def add(self, ev):
        if ev.get("name") == "evring.summary":
            self.footers.append(ev)
        elif ev.get("ph") in ("b", "X"):
            a = ev.get("args", {})
            self.begins.append(ev)
            self.by_id[a.get("id")] = ev
            self.children[a.get("parent")].append(ev)

    def final(self):
        """The last footer written: its counters cover the whole process."""
        if not self.footers:
            return None
        return max(self.footers, key=lambda e: float(e.get("ts", 0)))["args"]


def load(dirname, prefix):
    procs = defaultdict(Proc)
    files = []
    paths = sorted(glob.glob(os.path.join(dirname, f"{prefix}_*.json")))
    for p in paths:
        evs, info = read_trace(p)
        files.append(info)
        pids = set()
        for ev in evs:
            if "pid" in ev:
                procs[ev["pid"]].add(ev)
                pids.add(ev["pid"])
        info["pids"] = sorted(pids)
        for pid in pids:
            procs[pid].files += 1
    return procs, paths, files


def check(dirname, prefix="trace", label=None):
    issued = []
    for p in sorted(glob.glob(os.path.join(dirname, "issued_rank*.json"))):
        with open(p) as fh:
            issued.append(json.load(fh))
    procs, paths, files = load(dirname, prefix)
    problems, notes = [], []
    if not issued:
        problems.append("no issued_rank*.json: the driver did not finish")
    if not paths:
        problems.append(f"no trace files {prefix}_*.json")
    world = issued[0]["world"] if issued else 0
    end = issued[0].get("end", "destroy") if issued else "destroy"
    # Runs ended by os._exit or a signal never reach our exit flush: their
    # files are cut (no footer, no `]`); everything else must be whole.
    cut_expected = end in ("os-exit", "sigterm", "sigkill")

    # ---- per file: parse, footer vs the records before it ---------------------
    for fi in files:
        if fi["bad_lines"] and not (cut_expected and fi["torn_tail"] and not fi["closed"]):
            problems.append(f"{fi['file']}: {fi['bad_lines']} unparseable lines (closed {fi['closed']})")
        elif fi["bad_lines"]:
            notes.append(f"{fi['file']}: last line torn by the {end} (whole records before it)")
        if fi["footers"] > 1:
            problems.append(f"{fi['file']}: {fi['footers']} footers")
        if fi["footers"]:
            # stream_records counts the records of this file, the footer included.
            if fi["stream_records"] != fi["begins"] + 1:
                problems.append(f"{fi['file']}: footer says {fi['stream_records']} records (footer included), "
                                f"file holds {fi['begins']} + 1")
            if not fi["closed"]:
                problems.append(f"{fi['file']}: footer but no closing ]")
        elif fi["closed"]:
            problems.append(f"{fi['file']}: closed without a footer")
        elif not cut_expected:
            problems.append(f"{fi['file']}: cut (no footer) although the run ended by {end}")
    mask = int(os.environ.get("NCCL_PROFILE_EVENT_MASK", "0"), 0)
    if issued:
        mask = int(issued[0]["env"].get("NCCL_PROFILE_EVENT_MASK", mask), 0)

    # ---- per operation kind -------------------------------------------------
    rows = {}
    for summ in issued:
        proc = procs.get(summ["pid"], Proc())
        for r in summ["issued"]:
            key = (r["op"], r["cat"], r["func"], r["count"])
            row = rows.setdefault(
                key, dict(r, n=0, recorded=0, task_events=0, kch=0, without_task=0, graph_captured=0)
            )
            row["n"] += r["n"]
            apis = [
                e
                for e in proc.begins
                if e.get("cat") == r["cat"]
                and e.get("name") == r["func"]
                and e["args"].get("count") == r["count"]
            ]
            row["recorded"] += len(apis)
            for a in apis:
                row["graph_captured"] += bool(a["args"].get("graph_captured"))
                tasks = [c for c in proc.children[a["args"]["id"]] if c.get("cat") == TASK[r["cat"]]]
                row["task_events"] += len(tasks)
                row["without_task"] += not tasks
                for t in tasks:
                    row["kch"] += sum(
                        1 for k in proc.children[t["args"]["id"]] if k.get("cat") == "KernelCh"
                    )
    table = []
    for key, row in sorted(rows.items()):
        rule, got = row["tasks"], row["task_events"]
        replays = max((s.get("replays", 0) for s in issued), default=0)
        st = "ok"
        if world == 1:
            # Single-rank communicators produce no events at all (ABI doc §3.1).
            st = "ok (1 rank: none by design)" if row["recorded"] == 0 else "EXTRA"
        elif row["recorded"] < row["n"]:
            st = "SHORT"
        elif row["recorded"] > row["n"]:
            st = "EXTRA"
        elif rule == "exact" and got != row["recorded"]:
            st = "TASKS MISSING" if got < row["recorded"] else "TASKS EXTRA"
        elif rule == "graph" and not 1 <= got <= row["recorded"] * (1 + replays):
            st = "GRAPH TASKS"
        if not st.startswith("ok"):
            problems.append(
                f"{key[0]}: {row['cat']} {row['func']} x{row['count']}: issued {row['n']}, "
                f"recorded {row['recorded']}, tasks {got} ({st})"
            )
        row["status"] = st
        table.append(row)

    # ---- per process ------------------------------------------------------------
    ranks = {s["pid"]: s["rank"] for s in issued}
    proc_rows = []
    drops = Counter()
    anomalies = Counter()
    for pid, proc in sorted(procs.items()):
        f = proc.final()
        if f is None:
            if cut_expected:
                proc_rows.append({"pid": pid, "rank": ranks.get(pid, "?"), "files": proc.files, "finalized": None,
                                  "live": None, "start_calls": None, "completed": None, "written": None,
                                  "inits": None, "finalizes": None, "record_lines": 0, "cut": True,
                                  "records": len(proc.begins)})
            else:
                problems.append(f"pid {pid}: no evring.summary footer in {proc.files} file(s)")
            continue
        for k in DROP_KEYS:
            if f.get(k, 0):
                drops[k] += f[k]
        for k in NOTE_KEYS:
            if f.get(k, 0):
                anomalies[k] += f[k]
        start_drops = sum(f.get(k, 0) for k in DROP_KEYS[:5])
        ident = {
            "live == 0": f.get("live") == 0,
            "start_calls == started + start drops": f.get("start_calls") == f.get("started", 0) + start_drops,
            "started == completed": f.get("started") == f.get("completed"),
            "completed == consumed + ring drops": f.get("completed")
            == f.get("records_consumed", 0) + f.get("drop_ring_full", 0),
        }
        for what, ok in ident.items():
            if not ok:
                problems.append(f"pid {pid}: {what} fails: {json.dumps(f)}")
        # Every record written is in the files: begins + footers vs the
        # counter (the last footer does not count itself).
        in_files = len(proc.begins) + len(proc.footers)
        if in_files != f.get("records_written", 0) + 1:
            problems.append(
                f"pid {pid}: {in_files} records+footers in files, counter says {f.get('records_written', 0) + 1}"
            )
        proc_rows.append(
            {
                "pid": pid,
                "rank": ranks.get(pid, "?"),
                "files": proc.files,
                "finalized": f.get("finalized"),
                "live": f.get("live"),
                "start_calls": f.get("start_calls"),
                "completed": f.get("completed"),
                "written": f.get("records_written"),
                "inits": f.get("inits"),
                "finalizes": f.get("finalizes"),
                "record_lines": f.get("record_lines", 0),
                "cut": False,
                "records": len(proc.begins),
            }
        )
    for k, v in drops.items():
        problems.append(f"{k} = {v}")

    # ---- NCCL's own calls (EVRING_RECORD logs) vs the traces ----------------------
    calllog = {}
    for pid, proc in sorted(procs.items()):
        logs = glob.glob(os.path.join(dirname, f"*[!0-9]{pid}.log"))
        if not logs:
            continue
        given, dropped = read_call_log(logs[0])
        traced = Counter(e.get("cat") for e in proc.begins)
        short = {k: (v, traced.get(k, 0)) for k, v in given.items() if traced.get(k, 0) < v}
        calllog[pid] = {"starts": sum(given.values()), "dropped_starts": sum(dropped.values()),
                        "traced": sum(traced.values()), "short": short}
        if short and cut_expected:
            notes.append(f"pid {pid}: cut run: the call log holds more starts than the trace (log, trace): {short}")
        elif short:
            problems.append(f"pid {pid}: NCCL started more events than the trace holds (log, trace): {short}")
        if dropped:
            problems.append(f"pid {pid}: starts answered with NULL: {dict(dropped)}")
    missing = set(ranks) - set(procs)
    if world > 1:
        for pid in missing:
            problems.append(f"rank {ranks[pid]} (pid {pid}) wrote no trace")

    # ---- timing sources -----------------------------------------------------------
    timing = defaultdict(Counter)
    cats = Counter()
    for proc in procs.values():
        for e in proc.begins:
            cats[e.get("cat")] += 1
            timing[e.get("cat")][e["args"].get("timing", "?")] += 1

    transports = read_transports(dirname)
    return {
        "label": label or os.path.basename(os.path.normpath(dirname)),
        "world": world,
        "gpus": issued[0].get("gpus") if issued else None,
        "end": end,
        "transports": transports,
        "files": files,
        "mask": mask,
        "nccl": issued[0]["nccl"] if issued else "?",
        "torch": issued[0]["torch"] if issued else "?",
        "rows": table,
        "procs": proc_rows,
        "drops": dict(drops),
        "calllog": calllog,
        "anomalies": dict(anomalies),
        "events": dict(cats),
        "timing": {k: dict(v) for k, v in timing.items()},
        "problems": problems,
        "notes": notes,
        "ok": not problems,
    }


def show(res, out=sys.stdout):
    p = lambda *a: print(*a, file=out)
    p(f"== {res['label']}: mask {res['mask']}, {res['world']} ranks on {res['gpus']} GPU(s), end {res['end']}, "
      f"NCCL {res['nccl']}, torch {res['torch']} ==")
    p("  transport (NCCL INFO 'via' lines): "
      + (", ".join(f"{k} x{v}" for k, v in sorted(res["transports"].items())) or "none seen (NCCL_DEBUG=INFO unset?)"))
    p(f"{'op':22} {'event':8} {'func':14} {'count':>6} {'issued':>7} {'recorded':>8} {'tasks':>6} {'KernelCh':>8}  status")
    for r in res["rows"]:
        p(
            f"{r['op']:22} {r['cat']:8} {r['func']:14} {r['count']:>6} {r['n']:>7} {r['recorded']:>8} "
            f"{r['task_events']:>6} {r['kch']:>8}  {r['status']}" + ("" if r["tasks"] == "exact" else f" [{r['tasks']}]")
        )
    for fi in res["files"]:
        state = ("complete" if fi["complete"] else "finalized" if fi["finalized"] else "footer (exit flush)") \
            if fi["footers"] else "CUT (no footer)"
        p(f"  file {fi['file']}: {fi['begins']} records, {state}, closed {fi['closed']}, "
          f"footer stream_records {fi['stream_records']}, bad lines {fi['bad_lines']}")
    for pr in res["procs"]:
        if pr.get("cut"):
            p(f"  pid {pr['pid']} rank {pr['rank']}: files {pr['files']}, {pr['records']} records, no footer (cut run)")
            continue
        p(
            f"  pid {pr['pid']} rank {pr['rank']}: files {pr['files']}, finalized {pr['finalized']}, "
            f"live after finalize/exit {pr['live']}, starts {pr['start_calls']}, completed {pr['completed']}, "
            f"written {pr['written']}, inits {pr['inits']}, finalizes {pr['finalizes']}"
            + (f", call-log lines {pr['record_lines']}" if pr["record_lines"] else "")
        )
    for pid, c in res.get("calllog", {}).items():
        p(f"  pid {pid} call log: NCCL made {c['starts']} startEvent calls, {c['dropped_starts']} got NULL, "
          f"trace holds {c['traced']}" + (f", SHORT {c['short']}" if c["short"] else " (all recorded)"))
    p("  drops: " + (", ".join(f"{k}={v}" for k, v in sorted(res["drops"].items())) or "none"))
    if res["anomalies"]:
        p("  counted (not drops): " + ", ".join(f"{k}={v}" for k, v in sorted(res["anomalies"].items())))
    mix = []
    for cat in ("Coll", "P2p", "CollApi", "P2pApi", "KernelCh", "ProxyOp", "ProxyStep"):
        if cat in res["timing"]:
            mix.append(cat + " " + "/".join(f"{k} {v}" for k, v in sorted(res["timing"][cat].items())))
    p("  timing: " + ("; ".join(mix) or "no events"))
    p("  events: " + ", ".join(f"{k} {v}" for k, v in sorted(res["events"].items())))
    for n in res["notes"]:
        p(f"  note: {n}")
    for x in res["problems"]:
        p(f"  PROBLEM: {x}")
    p(f"  => {'PASS' if res['ok'] else 'FAIL'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--prefix", default="trace")
    ap.add_argument("--label")
    ap.add_argument("--json")
    a = ap.parse_args()
    res = check(a.dir, a.prefix, a.label)
    show(res)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=1)
    sys.exit(0 if res["ok"] else 1)


if __name__ == "__main__":
    main()
