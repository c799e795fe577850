#!/usr/bin/env python3
"""The meter's workload: N small all_reduce calls on 2 ranks through torch.distributed.

    python3 meter_job.py [--iters 2000] [--warmup 200] [--bytes 4096] [--world 2]

Ranks and GPUs as in driver.py: with fewer GPUs than ranks, every rank uses GPU 0 and
gets its own NCCL_HOSTID, so NCCL connects them through the network transport (the
caller sets NCCL_NET=Socket NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1). The profiler plugin
and its settings are the caller's environment (tests/gpu/meter.sh). Each rank prints one
line: `meter_job: rank R: N all_reduce of B bytes in S s (U us/op host)`.
"""

import argparse
import os
import socket
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, args, port):
    import torch
    import torch.distributed as dist

    world = args.world
    if torch.cuda.device_count() >= world:
        gpu = rank
    else:
        # Before the communicator exists: NCCL's duplicate-GPU check compares host hash
        # and bus id, so the ranks become two "hosts".
        os.environ["NCCL_HOSTID"] = f"evring-host-{rank}"
        gpu = 0
    torch.cuda.set_device(gpu)
    dev = torch.device("cuda", gpu)
    dist.init_process_group(
        "nccl", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}", device_id=dev
    )
    x = torch.ones(max(1, args.bytes // 4), dtype=torch.float32, device=dev)
    for _ in range(args.warmup):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(
        f"meter_job: rank {rank}: {args.iters} all_reduce of {x.numel() * 4} bytes in {dt:.3f} s "
        f"({dt / max(1, args.iters) * 1e6:.1f} us/op host)",
        flush=True,
    )
    dist.destroy_process_group()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--world", type=int, default=2)
    args = ap.parse_args(argv)
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=run, args=(r, args, port)) for r in range(args.world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    codes = [p.exitcode for p in procs]
    if any(codes):
        print(f"meter_job: ranks ended with exit codes {codes}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
