#!/usr/bin/env python3
"""Host overhead of the plugin on dist.all_reduce: interleaved A/B/C rounds.

    python3 overhead.py --plugin libevring_shim.so [--null libnullprof.so] --out DIR
                        [--rounds 40] [--budget 420] [--batches 2] [--burst 20] [--world 2] [--warmup 2]
    python3 overhead.py --analyse DIR      (the statistics again, from DIR's per-rank files;
                                            calls run with different --first-round combine)

What is timed is the host side of an all-reduce: the `dist.all_reduce` call
itself (PyTorch's enqueue, NCCL's group launch, the plugin's start/stop on the
calling thread), measured around each call with perf_counter_ns. Calls come in
bursts of --burst, shorter than the launch queue so that no call waits for the
GPU, then the stream is synchronised before the next burst. This is the cost
NCCL's host threads pay per operation. The GPU time is not measured: with two
ranks time-slicing one GPU it is not the plugin's.

Configurations: no plugin (A); the null plugin, which NCCL calls but which does
nothing (B: NCCL's own instrumentation at that mask); evring (C). Each round runs
every configuration once as a fresh 2-rank job, in rotated order (round r starts
with configuration r mod 3), so drift of the machine spreads over all three.
Rounds go on until --rounds or until the next one would end past --budget
seconds. Every job has the same shape: per size, --batches batches of one burst
per mask slot (0, 6, 70, 4095); with a plugin the slot sets the mask
(evring_set_mask / nullprof_set_mask; NCCL applies a mask to operations
enqueued afterwards), without one the slot is a plain burst, so that no-plugin
jobs are paced like the others. The slot order rotates by batch and by round.

Each rank's process is pinned to its own half of the CPUs (sched_setaffinity,
as taskset does, before torch starts a thread), and once warm the calling thread
gets the first core of that half to itself, away from NCCL's spinning proxy
thread and the plugin's writer: host timings on this machine are bimodal
otherwise.

The first call of a burst (right after a synchronize) costs several times the
others and is reported apart. The verdicts come from ovh_stats.py: per round,
evring over no plugin from the job medians, an interval over rounds, and MET /
MISSED / INCONCLUSIVE per target. Prints the tables and writes DIR/overhead.json.
"""

import argparse
import glob
import json
import os
import re
import socket
import statistics
import sys
import time

import ovh_stats
from ovh_stats import MASKS, SIZES


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def physical_cores():
    """Logical CPUs we may use, grouped by physical core (SMT siblings together)."""
    cpus = sorted(os.sched_getaffinity(0))
    groups = {}
    for c in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list") as fh:
                key = fh.read().strip()
        except OSError:
            key = str(c)
        groups.setdefault(key, []).append(c)
    return sorted(groups.values())


def cores_for(rank, world):
    """(main, rest) for `rank`: its share of the physical cores; the calling
    thread gets one logical CPU of the first, whose SMT siblings stay idle, and
    every other thread of the rank the remaining cores."""
    phys = physical_cores()
    per = max(1, len(phys) // world)
    mine = phys[rank * per:(rank + 1) * per] or phys
    main = {mine[0][0]}
    rest = {c for core in mine[1:] for c in core} or set(mine[0])
    return main, rest


def job(rank, cfg, args, port, out, rnd):
    main_core, rest = cores_for(rank, args.world)
    os.sched_setaffinity(0, rest)  # inherited by every thread started from here
    import torch
    import torch.distributed as dist

    if torch.cuda.device_count() >= args.world:
        gpu = rank
    else:
        # One GPU: each rank its own NCCL host id (see driver.py).
        os.environ["NCCL_HOSTID"] = f"evring-host-{rank}"
        gpu = 0
    torch.cuda.set_device(gpu)
    dev = torch.device("cuda", gpu)
    dist.init_process_group(
        "nccl", rank=rank, world_size=args.world, init_method=f"tcp://127.0.0.1:{port}", device_id=dev
    )
    setter = None
    if cfg["setter"]:
        import ctypes

        setter = getattr(ctypes.CDLL(cfg["plugin"]), cfg["setter"])
    # Every configuration runs one burst per mask slot, so that jobs without
    # a plugin are paced like the others; only a plugin's slot sets a mask.
    slots = MASKS
    # Warm every path first (NCCL connects its transports and profiler proxy
    # paths on first use), for a fixed time.
    w = torch.full(((1 << 20) // 4,), 1.0, device=dev)
    end = time.perf_counter() + args.warmup
    while time.perf_counter() < end:
        for m in slots:
            if setter:
                setter(m)
            for _ in range(args.burst):
                dist.all_reduce(w)
            torch.cuda.synchronize()
    os.sched_setaffinity(0, main_core)  # this thread only: the one that calls NCCL
    samples = {}
    clock = time.perf_counter_ns
    for size in SIZES:
        x = torch.full((size // 4,), float(rank + 1), device=dev)
        for m in slots:
            if setter:
                setter(m)
            for _ in range(4):
                dist.all_reduce(x)
        torch.cuda.synchronize()
        for b in range(args.batches):
            for i in range(len(slots)):
                # The slot order rotates by batch and by round: no mask keeps
                # one position in the job.
                m = slots[(b + i + rnd) % len(slots)]
                if setter:
                    setter(m)
                label = m if setter else None
                torch.cuda.synchronize()
                ts = []
                t_burst = clock()
                for _ in range(args.burst):
                    t0 = clock()
                    dist.all_reduce(x)
                    ts.append(clock() - t0)
                torch.cuda.synchronize()
                # The burst to its synchronize, per call: GPU latency when each
                # rank has its own GPU (time-sliced and meaningless on one).
                samples.setdefault(f"{size}/{label}/latency", []).append((clock() - t_burst) / args.burst / 1e3)
                samples.setdefault(f"{size}/{label}", []).extend(t / 1e3 for t in ts[1:])
                samples.setdefault(f"{size}/{label}/first", []).append(ts[0] / 1e3)
    with open(f"{out}.rank{rank}", "w") as fh:
        json.dump({"cfg": cfg["name"], "round": rnd, "rank": rank, "main_cpu": sorted(main_core),
                   "other_cpus": sorted(rest), "samples": samples}, fh)
    dist.destroy_process_group()


def configs(args):
    out = [{"name": "none", "plugin": None, "setter": None}]
    if args.null:
        out.append({"name": "null", "plugin": os.path.abspath(args.null), "setter": "nullprof_set_mask"})
    out.append({"name": "evring", "plugin": os.path.abspath(args.plugin), "setter": "evring_set_mask"})
    return out


def run_job(cfg, args, path, tmp, rnd):
    import torch.multiprocessing as mp

    env = dict(os.environ)
    os.environ.pop("NCCL_PROFILER_PLUGIN", None)
    if cfg["plugin"]:
        os.environ["NCCL_PROFILER_PLUGIN"] = cfg["plugin"]
        # Init with every v5 event on, so every path exists before timing.
        os.environ["NCCL_PROFILE_EVENT_MASK"] = "4095"
        os.environ["NCCL_PROFILE_DUMP_FILE"] = os.path.join(tmp, cfg["name"])
    try:
        mp.spawn(job, args=(cfg, args, free_port(), path, rnd), nprocs=args.world)
    finally:
        os.environ.clear()
        os.environ.update(env)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def p10(xs):
    return statistics.quantiles(xs, n=10)[0] if len(xs) >= 10 else float("nan")


def quartiles(xs):
    if len(xs) < 4:
        return float("nan"), float("nan")
    q = statistics.quantiles(xs, n=4)
    return q[0], q[2]


def summarise(runs):
    """{(cfg, mask, size): every call}, {(cfg, mask, size): [per-round median]}."""
    allx, per_round = {}, {}
    for rnd, cfg, samples in runs:
        for key, xs in samples.items():
            size, m, *extra = key.split("/")
            k = (cfg, "/".join([m, *extra]), int(size))
            allx.setdefault(k, []).extend(xs)
            per_round.setdefault(k, []).append(med(xs))
    return allx, per_round


def latency_table(allx):
    """Per-call time of a burst up to its synchronize (us, median of bursts)."""
    lines = ["GPU latency: burst of all_reduce to synchronize, per call (us), median of bursts; "
             "evring/none"]
    for size in SIZES:
        base = med(allx.get(("none", "None/latency", size), []))
        row = [f"{size // 1024} KiB: none {base:.1f}"]
        for m in MASKS:
            e = med(allx.get(("evring", f"{m}/latency", size), []))
            n = med(allx.get(("null", f"{m}/latency", size), []))
            row.append(f"mask {m}: null {n:.1f} evring {e:.1f} ({e / base:.4f})")
        lines.append("   " + "; ".join(row))
    return "\n".join(lines)


def table(allx, per_round):
    """Descriptive: every call of a configuration pooled over its jobs. No
    verdict here: pooled ratios carry the job-to-job spread without saying so."""
    lines = []
    p = lines.append
    p("descriptive, all jobs pooled: host time of one dist.all_reduce call (us), calls 2.. of each burst: "
      "median of all calls [quartiles]; per-job medians min-max; first call of a burst apart")
    for size in SIZES:
        base = med(allx.get(("none", "None", size), []))
        lo, hi = quartiles(allx.get(("none", "None", size), []))
        rounds = per_round.get(("none", "None", size), [])
        p(f"-- {size // 1024} KiB: no plugin {base:.2f} [{lo:.2f}-{hi:.2f}], jobs "
          f"{min(rounds, default=float('nan')):.2f}-{max(rounds, default=float('nan')):.2f} --")
        p(f"   first call of a burst: no plugin {med(allx.get(('none', 'None/first', size), [])):.1f}")
        p(f"   {'mask':>5} {'null':>22} {'evring':>22} {'evring jobs':>15} {'evring/none':>12} {'evring/null':>12}"
          f" {'evring m/0':>10} {'null m/0':>9} {'first: null':>11} {'evring':>7}")
        for m in MASKS:
            n = allx.get(("null", str(m), size), [])
            e = allx.get(("evring", str(m), size), [])
            er = per_round.get(("evring", str(m), size), [])
            nq, eq = quartiles(n), quartiles(e)
            r_none, r_null = med(e) / base, med(e) / med(n) if n else float("nan")
            p(f"   {m:>5} {med(n):>8.2f} [{nq[0]:.2f}-{nq[1]:.2f}] {med(e):>8.2f} [{eq[0]:.2f}-{eq[1]:.2f}] "
              f"{min(er, default=float('nan')):>7.2f}-{max(er, default=float('nan')):<7.2f} "
              f"{r_none:>12.4f} {r_null:>12.4f}"
              f" {med(e) / med(allx.get(('evring', '0', size), [])):>10.4f}"
              f" {med(n) / med(allx.get(('null', '0', size), [float('nan')])):>9.4f}"
              f" {med(allx.get(('null', f'{m}/first', size), [])):>11.1f}"
              f" {med(allx.get(('evring', f'{m}/first', size), [])):>7.1f}")
    p("fast mode: 10th percentile of the same calls (us); the slow mode (~1.5x) comes and goes "
      "by job and phase whatever the plugin")
    for size in SIZES:
        base = p10(allx.get(("none", "None", size), []))
        p(f"-- {size // 1024} KiB: no plugin {base:.2f} --")
        p(f"   {'mask':>5} {'null':>8} {'evring':>8} {'evring/none':>12} {'evring/null':>12} {'evring m/0':>10}")
        for m in MASKS:
            n = p10(allx.get(("null", str(m), size), []))
            e = p10(allx.get(("evring", str(m), size), []))
            e0 = p10(allx.get(("evring", "0", size), []))
            p(f"   {m:>5} {n:>8.2f} {e:>8.2f} {e / base:>12.4f} {e / n:>12.4f} {e / e0:>10.4f}")
    return "\n".join(lines)


def job_record(rnd, cfg, rank, samples):
    """One rank of one job, as ovh_stats reads it: per key its median and 10th
    percentile (us) and its number of calls."""
    return {"round": rnd, "cfg": cfg, "rank": rank,
            "median": {k: med(x) for k, x in samples.items()},
            "p10": {k: p10(x) for k, x in samples.items()},
            "calls": {k: len(x) for k, x in samples.items()}}


def report(runs, jobs, conf, gpus, world):
    """The descriptive tables, then the estimates and verdicts; (text, estimates, fast-mode estimates)."""
    allx, per_round = summarise(runs)
    est = ovh_stats.estimates(jobs, conf)
    est_p10 = ovh_stats.estimates(jobs, conf, stat="p10")
    text = table(allx, per_round)
    if gpus >= world:
        text += "\n" + latency_table(allx)
    text += "\n" + ovh_stats.render(est_p10, conf, stat="p10", verdicts=False)
    text += "\n" + ovh_stats.render(est, conf)
    return text, est, est_p10, allx, per_round


def analyse(d, conf):
    """The report again from a finished (or cut) run's per-rank files in d."""
    runs, jobs = [], []
    for path in sorted(glob.glob(os.path.join(d, "ovh-*-*.json.rank*"))):
        name = re.fullmatch(r"ovh-(\w+)-(\d+)\.json\.rank(\d+)", os.path.basename(path))
        if not name:
            continue
        with open(path) as fh:
            samples = json.load(fh)["samples"]
        cfg, rnd, rank = name[1], int(name[2]), int(name[3])
        runs.append((rnd, cfg, samples))
        jobs.append(job_record(rnd, cfg, rank, samples))
    if not jobs:
        sys.exit(f"overhead: no ovh-*.json.rank* files in {d}")
    world = len({j["rank"] for j in jobs})
    print(report(runs, jobs, conf, 1, world)[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plugin")
    ap.add_argument("--null")
    ap.add_argument("--out")
    ap.add_argument("--analyse", metavar="DIR", help="only the statistics, from DIR's per-rank files")
    ap.add_argument("--rounds", type=int, default=40, help="at most this many rounds")
    ap.add_argument("--first-round", type=int, default=0,
                    help="number of the first round (runs numbered apart can be analysed together)")
    ap.add_argument("--budget", type=float, default=420.0,
                    help="seconds: no round is started that would end past this (its length taken as the "
                         "longest round so far plus 15 %%)")
    ap.add_argument("--batches", type=int, default=2, help="bursts per mask slot and size in a job")
    ap.add_argument("--burst", type=int, default=20, help="all_reduce calls per burst")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of all_reduce before timing")
    ap.add_argument("--confidence", type=float, default=0.95, help="of each interval (two-sided)")
    args = ap.parse_args()
    if args.analyse:
        analyse(args.analyse, args.confidence)
        return
    if not args.plugin or not args.out:
        ap.error("--plugin and --out are needed (or --analyse DIR)")
    import torch

    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    if torch.cuda.device_count() < 1:
        sys.exit("overhead: no GPU")
    os.makedirs(args.out, exist_ok=True)
    tmp = os.path.join(args.out, "traces")
    os.makedirs(tmp, exist_ok=True)
    cfgs = configs(args)
    runs, jobs = [], []
    failed_jobs = []
    t_start = time.time()
    longest = 0.0
    stopped = None
    for rnd in range(args.first_round, args.first_round + args.rounds):
        elapsed = time.time() - t_start
        if rnd > args.first_round and elapsed + 1.15 * longest > args.budget:
            stopped = f"after {rnd - args.first_round} rounds: the next would end past the {args.budget:.0f} s budget"
            print(f"overhead: stopping {stopped}", flush=True)
            break
        t_round = time.time()
        for i in range(len(cfgs)):
            cfg = cfgs[(rnd + i) % len(cfgs)]
            path = os.path.join(args.out, f"ovh-{cfg['name']}-{rnd}.json")
            t0 = time.time()
            for attempt in range(3):
                try:
                    run_job(cfg, args, path, tmp, rnd)
                    break
                except Exception as e:  # a failed job (NCCL error) is retried, and said
                    first = str(e).strip().splitlines()
                    print(f"overhead: round {rnd} {cfg['name']} attempt {attempt + 1} failed: "
                          f"{first[-1] if first else type(e).__name__}", flush=True)
                    failed_jobs.append((rnd, cfg["name"], attempt + 1))
            else:
                sys.exit(f"overhead: round {rnd} {cfg['name']} failed 3 times")
            for r in range(args.world):
                with open(f"{path}.rank{r}") as fh:
                    samples = json.load(fh)["samples"]
                runs.append((rnd, cfg["name"], samples))
                jobs.append(job_record(rnd, cfg["name"], r, samples))
            print(f"overhead: round {rnd} {cfg['name']} {time.time() - t0:.1f} s", flush=True)
        longest = max(longest, time.time() - t_round)
    rounds_done = len({j["round"] for j in jobs})
    gpus = torch.cuda.device_count()
    text, est, est_p10, allx, per_round = report(runs, jobs, args.confidence, gpus, args.world)
    text = (f"{rounds_done} rounds x {len(cfgs)} configurations, {args.batches} batches of one "
            f"{args.burst}-call burst per mask slot and size in each job; "
            f"{time.time() - t_start:.0f} s{'; stopped ' + stopped if stopped else ''}\n") + text
    if failed_jobs:
        text += "\nfailed and retried jobs (round, configuration, attempt): " + ", ".join(map(str, failed_jobs))
    print(text)
    with open(os.path.join(args.out, "overhead.json"), "w") as fh:
        json.dump(
            {
                "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                "torch": torch.__version__,
                "gpus": gpus,
                "world": args.world,
                "rounds": rounds_done,
                "rounds_max": args.rounds,
                "budget_s": args.budget,
                "stopped": stopped,
                "batches": args.batches,
                "burst": args.burst,
                "confidence": args.confidence,
                "wall_s": round(time.time() - t_start, 1),
                "env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
                "calls": {f"{c}/{m}/{s}": len(x) for (c, m, s), x in allx.items()},
                "medians_us": {f"{c}/{m}/{s}": med(x) for (c, m, s), x in allx.items()},
                "quartiles_us": {f"{c}/{m}/{s}": quartiles(x) for (c, m, s), x in allx.items()},
                "p10_us": {f"{c}/{m}/{s}": p10(x) for (c, m, s), x in allx.items()},
                "cpus": physical_cores(),
                "round_medians_us": {f"{c}/{m}/{s}": x for (c, m, s), x in per_round.items()},
                "jobs": jobs,
                "estimates": est,
                "estimates_p10": est_p10,
                "failed_jobs": failed_jobs,
                "table": text,
            },
            fh,
            indent=1,
        )


if __name__ == "__main__":
    main()
