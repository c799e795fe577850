#!/usr/bin/env python3
"""Drives NCCL through torch.distributed, one process per GPU, and writes what it
issued as the NCCL profiler API events each operation must produce.

    python3 driver.py --out DIR [--world 2] [--iters 20] [--burst 1000] [--replays 3]
                      [--steps ops,burst,group,graph] [--end destroy]

Ranks and GPUs: with at least --world GPUs, rank r uses GPU r. With fewer (one
H200), every rank uses GPU 0 and gets its own NCCL_HOSTID (evring-host-<r>), set
before the communicator is created: NCCL's duplicate-GPU check compares host
hash and bus id, so the ranks become two "hosts" and talk through the network
transport (the caller sets NCCL_NET=Socket NCCL_P2P_DISABLE=1
NCCL_SHM_DISABLE=1). The GPU time-slices between the processes, so GPU
latencies mean nothing there; every profiler event NCCL emits is real.

--end says how each rank's process ends after its work (the exit paths):
  destroy     dist.destroy_process_group(), then a normal exit
  no-destroy  a normal interpreter exit without destroy_process_group
  os-exit     os._exit(0): no atexit handlers, no finalize
  sigterm     SIGTERM to itself (the default action: the end-of-job signal of
              Slurm and Kubernetes, no handler of ours)
  sigkill     SIGKILL to itself
Before an exit path other than destroy both ranks have synchronised their
stream and waited a second, so no collective is left half-issued.

Every operation kind uses its own element count, so check.py can attribute the
CollApi/P2pApi events in our traces to the operation that caused them by
(event, func, count) alone. Writes DIR/issued_rank<r>.json per rank.

Which NCCL events an operation produces (docs/validation.md, ABI doc §3.1):
  * a collective: one CollApi (func, count) and, when NCCL launches it, one Coll
    whose parent is that CollApi;
  * all_to_all: NCCL splits it into per-peer Send/Recv, so P2pApi events, one per
    peer and direction (the rank itself included), and no CollApi;
  * batch_isend_irecv: one P2pApi per send and per recv;
  * a graph-captured collective: CollApi once, at capture; its Coll at capture
    and/or at each replay, depending on whether the plan has proxy work;
  * broadcast: CollApi; NCCL 2.28+ may run it as AllGatherV with no Coll.
The environment (plugin, mask, transport) is the caller's: see run.sh.
"""

import argparse
import gc
import json
import os
import signal
import socket
import sys
import threading
import time

import torch


def nccl_runtime_version():
    """The NCCL this process runs, as that library says (`ncclGetVersion`):
    torch.cuda.nccl.version() is the version torch was built against, which
    an LD_PRELOAD'ed libnccl (docs/validation.md) does not change."""
    import ctypes

    try:
        lib = ctypes.CDLL("libnccl.so.2")  # the copy already loaded, by soname
        v = ctypes.c_int(0)
        if lib.ncclGetVersion(ctypes.byref(v)) == 0 and v.value > 0:
            code = v.value
            return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    except OSError:
        pass
    return ".".join(map(str, torch.cuda.nccl.version()))
import torch.distributed as dist
import torch.multiprocessing as mp

# Element counts (float32), one per operation kind: the attribution key.
COUNT = {
    "all_reduce": 1024,
    "all_reduce_burst": 257,
    "all_gather": 1026,
    "reduce_scatter": 1027,
    "broadcast": 1028,
    "all_to_all": 1029,
    "batch_isend_irecv": 1030,
    "new_group_all_reduce": 1031,
    "graph_all_reduce": 1032,
}


DESTROY_TIMEOUT = 60


class Issued:
    """What this rank asked NCCL for, as the API events it must produce."""

    def __init__(self):
        self.rows = {}

    def add(self, op, cat, func, count, n=1, tasks="exact"):
        key = (op, cat, func, count)
        row = self.rows.setdefault(
            key, {"op": op, "cat": cat, "func": func, "count": count, "n": 0, "tasks": tasks}
        )
        row["n"] += n

    def as_list(self):
        return list(self.rows.values())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(cond, what):
    if not cond:
        raise SystemExit(f"driver: wrong result: {what}")


def device_index(rank, world):
    """GPU of `rank`; with fewer GPUs than ranks, GPU 0 and a host id of its own."""
    n = torch.cuda.device_count()
    if n >= world:
        return rank
    os.environ["NCCL_HOSTID"] = f"evring-host-{rank}"
    return 0


def run(rank, args, port):
    world = args.world
    gpu = device_index(rank, world)
    torch.cuda.set_device(gpu)
    dev = torch.device("cuda", gpu)
    dist.init_process_group(
        "nccl",
        rank=rank,
        world_size=world,
        init_method=f"tcp://127.0.0.1:{port}",
        device_id=dev,
    )
    iss = Issued()
    peer_next, peer_prev = (rank + 1) % world, (rank - 1) % world
    t0 = time.time()

    def f(op, k=1):
        return torch.full((COUNT[op] * k,), float(rank + 1), device=dev)

    steps = set(args.steps.split(","))
    for _ in range(args.iters if "ops" in steps else 0):
        x = f("all_reduce")
        dist.all_reduce(x)
        iss.add("all_reduce", "CollApi", "AllReduce", COUNT["all_reduce"])

        out = torch.empty(COUNT["all_gather"] * world, device=dev)
        dist.all_gather_into_tensor(out, f("all_gather"))
        iss.add("all_gather", "CollApi", "AllGather", COUNT["all_gather"])

        out = torch.empty(COUNT["reduce_scatter"], device=dev)
        dist.reduce_scatter_tensor(out, f("reduce_scatter", world))
        iss.add("reduce_scatter", "CollApi", "ReduceScatter", COUNT["reduce_scatter"])

        b = f("broadcast")
        dist.broadcast(b, src=0)
        iss.add("broadcast", "CollApi", "Broadcast", COUNT["broadcast"], tasks="nccl")

        a2a = torch.empty(COUNT["all_to_all"] * world, device=dev)
        dist.all_to_all_single(a2a, f("all_to_all", world))
        iss.add("all_to_all", "P2pApi", "Send", COUNT["all_to_all"], world, tasks="nccl")
        iss.add("all_to_all", "P2pApi", "Recv", COUNT["all_to_all"], world, tasks="nccl")

        if world > 1:
            s, r = f("batch_isend_irecv"), torch.empty(COUNT["batch_isend_irecv"], device=dev)
            ops = [dist.P2POp(dist.isend, s, peer_next), dist.P2POp(dist.irecv, r, peer_prev)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            iss.add("batch_isend_irecv", "P2pApi", "Send", COUNT["batch_isend_irecv"], tasks="nccl")
            iss.add("batch_isend_irecv", "P2pApi", "Recv", COUNT["batch_isend_irecv"], tasks="nccl")
    torch.cuda.synchronize()
    if args.iters and "ops" in steps:
        check(x[0].item() == world * (world + 1) / 2, "all_reduce sum")
        check(b[0].item() == 1.0, "broadcast from rank 0")
        check(out[0].item() == world * (world + 1) / 2, "reduce_scatter sum")

    # The example plugin's failure case: many small all-reduces back to back.
    if "burst" in steps and args.burst:
        y = f("all_reduce_burst")
        for _ in range(args.burst):
            dist.all_reduce(y)
        iss.add("all_reduce_burst", "CollApi", "AllReduce", COUNT["all_reduce_burst"], args.burst)
        torch.cuda.synchronize()

    # A sub-communicator: its own NCCL comm, its own trace file.
    if "group" in steps and args.iters:
        g = dist.new_group(list(range(world)))
        z = f("new_group_all_reduce")
        for _ in range(args.iters):
            dist.all_reduce(z, group=g)
        iss.add("new_group_all_reduce", "CollApi", "AllReduce", COUNT["new_group_all_reduce"], args.iters)
        torch.cuda.synchronize()

    # CUDA graph: one capture, several replays. The captured plan holds a
    # reference on the communicator until the graph is destroyed; with
    # --graph-release the graph is dropped before the process group is.
    graph = "skipped"
    if "graph" in steps and args.replays:
        v = f("graph_all_reduce")
        cg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cg):
            dist.all_reduce(v)
        torch.cuda.synchronize()
        for _ in range(args.replays):
            cg.replay()
        torch.cuda.synchronize()
        check(v[0].item() > 0, "graph all_reduce ran")
        iss.add("graph_all_reduce", "CollApi", "AllReduce", COUNT["graph_all_reduce"], 1, tasks="graph")
        graph = "captured"
        if args.graph_release:
            cg.reset()
            del cg
            gc.collect()
            torch.cuda.synchronize()
            graph = "captured, released before destroy"
    wall = time.time() - t0

    summary = {
        "rank": rank,
        "world": world,
        "pid": os.getpid(),
        "nccl": nccl_runtime_version(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(gpu),
        "gpu": gpu,
        "gpus": torch.cuda.device_count(),
        "steps": sorted(steps),
        "end": args.end,
        "replays": args.replays,
        "graph": graph,
        "wall_s": round(wall, 3),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "EVRING_"))},
        "issued": [r for r in iss.as_list() if r["n"] > 0],
    }
    with open(os.path.join(args.out, f"issued_rank{rank}_{os.getpid()}.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    if args.flush:
        # Our plugin's evring_flush: drains records and the call log now.
        import ctypes

        ctypes.CDLL(os.environ["NCCL_PROFILER_PLUGIN"]).evring_flush()
    end(args.end)


def end(how):
    """Ends this rank's process the way `how` says (see the module doc)."""
    t = time.time()
    if how == "destroy":
        rank = dist.get_rank()
        # A hang here is reported as one, not waited out by the caller's timeout.
        def hung():
            print(f"driver: rank {rank}: destroy_process_group still running after {DESTROY_TIMEOUT} s: "
                  "ending with os._exit(3)", flush=True)
            os._exit(3)
        watchdog = threading.Timer(DESTROY_TIMEOUT, hung)
        watchdog.daemon = True
        watchdog.start()
        dist.destroy_process_group()
        watchdog.cancel()
        print(f"driver: rank {rank}: destroy_process_group returned after {time.time() - t:.1f} s", flush=True)
        return
    torch.cuda.synchronize()
    time.sleep(1.0)
    sys.stdout.flush()
    if how == "no-destroy":
        return
    if how == "os-exit":
        os._exit(0)
    os.kill(os.getpid(), signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
    time.sleep(60)  # not reached: the signal's default action ends the process


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--replays", type=int, default=3)
    ap.add_argument("--flush", action="store_true", help="call evring_flush before exit")
    ap.add_argument("--steps", default="ops,burst,group,graph",
                    help="comma list of: ops (the six operation kinds), burst, group, graph")
    ap.add_argument("--graph-release", action="store_true",
                    help="destroy the captured graph before destroy_process_group")
    ap.add_argument("--end", default="destroy", choices=("destroy", "no-destroy", "os-exit", "sigterm", "sigkill"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    # NVLink multicast can take the host's GPUs out of service: never on.
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    if torch.cuda.device_count() < 1:
        sys.exit("driver: no GPU")
    if torch.cuda.device_count() < args.world:
        print(f"driver: {args.world} ranks on {torch.cuda.device_count()} GPU(s): host-id method "
              "(NCCL_HOSTID per rank, network transport)", flush=True)
    sys.exit(launch(args))


def launch(args):
    """Starts the ranks and waits for all of them. Unlike mp.spawn this does not
    SIGTERM the other ranks when one ends by a signal, which would cut the exit
    path under test; a rank that fails with an error still ends the others
    after a grace period (they would wait for it forever)."""
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=run, args=(r, args, port)) for r in range(args.world)]
    for p in procs:
        p.start()
    expected = {"destroy": 0, "no-destroy": 0, "os-exit": 0, "sigterm": -signal.SIGTERM, "sigkill": -signal.SIGKILL}[args.end]
    failed_at = None
    while any(p.is_alive() for p in procs):
        time.sleep(0.2)
        if failed_at is None and any(p.exitcode not in (None, expected) for p in procs):
            failed_at = time.time()
        if failed_at is not None and time.time() - failed_at > 10:
            for p in procs:
                if p.is_alive():
                    p.terminate()
    codes = [p.exitcode for p in procs]
    print(f"driver: ranks ended with exit codes {codes} (end {args.end}, expected {expected})", flush=True)
    return 0 if all(c == expected for c in codes) else 1


if __name__ == "__main__":
    main()
