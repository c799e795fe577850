#!/usr/bin/env python3
"""Overhead of the plugin on all_reduce latency, interleaved A/B.

    python3 overhead.py --plugin libevring_shim.so [--null libnullprof.so] --out DIR
                        [--rounds 3] [--batches 30] [--world 2] [--warmup 2]

Configurations: no plugin; the null plugin (NCCL's own instrumentation, no
plugin work); evring. Each round runs every configuration once, as a fresh
2-rank job, in a rotated order (round r starts with configuration r), so slow
drift of the machine spreads over all of them. Inside a job with a plugin the
mask is switched at run time (evring_set_mask / nullprof_set_mask, which NCCL
applies to operations enqueued afterwards) among 0, 6, 70 and 4095, rotating
per batch: those comparisons are within one process and one set of clocks.

A sample is one batch: K back-to-back all_reduces timed on the host from a
synchronised start to a synchronised end, divided by K (host-bound small ops
show the plugin's host cost; large ones the GPU time). Per (configuration,
mask, size): the median over all rounds and batches. Prints the table and
writes DIR/overhead.json with every sample.
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time

SIZES = (4 << 10, 1 << 20, 64 << 20)
OPS_PER_BATCH = {4 << 10: 200, 1 << 20: 100, 64 << 20: 10}
MASKS = (0, 6, 70, 4095)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(rank, cfg, args, port, out):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group(
        "nccl", rank=rank, world_size=args.world, init_method=f"tcp://127.0.0.1:{port}", device_id=dev
    )
    setter = None
    if cfg["setter"]:
        import ctypes

        setter = getattr(ctypes.CDLL(cfg["plugin"]), cfg["setter"])
    masks = MASKS if setter else (None,)
    # Clocks ramp up under load: on a 1-GPU trial the first job of a round,
    # timed right after start, ran 1.5x slower than the rest. Warm for a
    # fixed time first, every mask (NCCL connects its profiler proxies on
    # first use of KernelCh).
    w = torch.full(((1 << 20) // 4,), 1.0, device=dev)
    end = time.perf_counter() + args.warmup
    while time.perf_counter() < end:
        for m in masks:
            if setter:
                setter(m)
            for _ in range(20):
                dist.all_reduce(w)
        torch.cuda.synchronize()
    samples = {}
    for size in SIZES:
        x = torch.full((size // 4,), float(rank + 1), device=dev)
        k = OPS_PER_BATCH[size]
        for m in masks:  # warm every path, including NCCL's profiler proxy connections
            if setter:
                setter(m)
            for _ in range(10):
                dist.all_reduce(x)
        torch.cuda.synchronize()
        for b in range(args.batches):
            for i in range(len(masks)):
                m = masks[(b + i) % len(masks)]
                if setter:
                    setter(m)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(k):
                    dist.all_reduce(x)
                torch.cuda.synchronize()
                dt = (time.perf_counter() - t0) / k
                samples.setdefault(f"{size}/{m}", []).append(dt * 1e6)
    if rank == 0:
        with open(out, "w") as fh:
            json.dump({"cfg": cfg["name"], "samples": samples}, fh)
    dist.destroy_process_group()


def configs(args):
    out = [{"name": "none", "plugin": None, "setter": None}]
    if args.null:
        out.append({"name": "null", "plugin": os.path.abspath(args.null), "setter": "nullprof_set_mask"})
    out.append({"name": "evring", "plugin": os.path.abspath(args.plugin), "setter": "evring_set_mask"})
    return out


def run_job(cfg, args, path, tmp):
    import torch.multiprocessing as mp

    env = dict(os.environ)
    os.environ.pop("NCCL_PROFILER_PLUGIN", None)
    if cfg["plugin"]:
        os.environ["NCCL_PROFILER_PLUGIN"] = cfg["plugin"]
        # Init with every v5 event on, so every path exists before timing.
        os.environ["NCCL_PROFILE_EVENT_MASK"] = "4095"
        os.environ["NCCL_PROFILE_DUMP_FILE"] = os.path.join(tmp, cfg["name"])
    try:
        mp.spawn(job, args=(cfg, args, free_port(), path), nprocs=args.world)
    finally:
        os.environ.clear()
        os.environ.update(env)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def summarise(runs):
    """{(cfg, mask, size): [samples]}, and per-round medians for the noise band."""
    allx, per_round = {}, {}
    for rnd, cfg, samples in runs:
        for key, xs in samples.items():
            size, m = key.split("/")
            k = (cfg, m, int(size))
            allx.setdefault(k, []).extend(xs)
            per_round.setdefault(k, []).append(med(xs))
    return allx, per_round


def table(allx, per_round):
    lines = []
    p = lines.append
    p("per-op latency, median over rounds and batches (us); ratios of medians")
    for size in SIZES:
        base = med(allx.get(("none", "None", size), []))
        rounds = per_round.get(("none", "None", size), [])
        noise = (max(rounds) - min(rounds)) / base if len(rounds) > 1 and base else float("nan")
        p(f"-- all_reduce {size // 1024} KiB: no plugin {base:.2f} us "
          f"(round-to-round spread {100 * noise:.1f} %) --")
        p(f"   {'mask':>5} {'null us':>9} {'evring us':>10} {'evring/none':>12} {'evring/null':>12} {'evring/evring@0':>16}")
        e0 = med(allx.get(("evring", "0", size), []))
        for m in MASKS:
            n = med(allx.get(("null", str(m), size), []))
            e = med(allx.get(("evring", str(m), size), []))
            p(f"   {m:>5} {n:>9.2f} {e:>10.2f} {e / base:>12.4f} {e / n if n == n else float('nan'):>12.4f} {e / e0:>16.4f}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--null")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of all_reduce before timing")
    args = ap.parse_args()
    import torch

    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    if torch.cuda.device_count() < args.world:
        sys.exit(f"overhead: {args.world} ranks need {args.world} GPUs")
    os.makedirs(args.out, exist_ok=True)
    tmp = os.path.join(args.out, "traces")
    os.makedirs(tmp, exist_ok=True)
    cfgs = configs(args)
    runs = []
    for rnd in range(args.rounds):
        for i in range(len(cfgs)):
            cfg = cfgs[(rnd + i) % len(cfgs)]
            path = os.path.join(args.out, f"ovh-{cfg['name']}-{rnd}.json")
            t0 = time.time()
            run_job(cfg, args, path, tmp)
            with open(path) as fh:
                runs.append((rnd, cfg["name"], json.load(fh)["samples"]))
            print(f"overhead: round {rnd} {cfg['name']} {time.time() - t0:.1f} s", flush=True)
    allx, per_round = summarise(runs)
    text = table(allx, per_round)
    print(text)
    with open(os.path.join(args.out, "overhead.json"), "w") as fh:
        json.dump(
            {
                "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                "torch": torch.__version__,
                "rounds": args.rounds,
                "batches": args.batches,
                "ops_per_batch": {str(k): v for k, v in OPS_PER_BATCH.items()},
                "medians_us": {f"{c}/{m}/{s}": med(x) for (c, m, s), x in allx.items()},
                "round_medians_us": {f"{c}/{m}/{s}": x for (c, m, s), x in per_round.items()},
                "table": text,
            },
            fh,
            indent=1,
        )


if __name__ == "__main__":
    main()
