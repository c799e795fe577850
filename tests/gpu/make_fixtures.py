#!/usr/bin/env python3
"""Turns the `record` stage's output (record.tar.gz, or its unpacked folder) into
CI fixtures: call logs renamed <mode>-<mask>-rank<r>[-<steps>].log (+ .times),
and a manifest.json with what the driver issued in each process, the mask, the
NCCL and torch versions and the command. tests/gpu_fixtures.rs reads the
manifest.

    python3 make_fixtures.py record.tar.gz tests/fixtures/nccl-2.28.9-2rank-net [COMMAND]

COMMAND is the command line that made record.tar.gz, kept in the manifest.
MODES (environment, e.g. "p2p") takes only the runs of those modes.
"""

import glob
import json
import os
import shutil
import sys
import tarfile
import tempfile

LIMIT = 2 << 20  # all committed fixtures together


def portable(env):
    """The run's settings without machine paths (kept as base names). The
    image's own NCCL_VERSION variable names no library torch loads: dropped."""
    return {k: os.path.basename(v) if "/" in v else v for k, v in env.items() if k != "NCCL_VERSION"}


def main():
    src, dst = sys.argv[1], sys.argv[2]
    command = sys.argv[3] if len(sys.argv) > 3 else "STAGES=record tests/gpu/run.sh PLUGIN.so"
    tmp = None
    if os.path.isfile(src):
        tmp = tempfile.mkdtemp()
        with tarfile.open(src) as t:
            t.extractall(tmp, filter="data")
        src = tmp
    os.makedirs(dst, exist_ok=True)
    logs, meta = [], {}
    for run in sorted(glob.glob(os.path.join(src, "*-*"))):
        mode, mask = os.path.basename(run).rsplit("-", 1)
        if os.environ.get("MODES") and mode not in os.environ["MODES"].split():
            continue
        for iss_path in sorted(glob.glob(os.path.join(run, "issued_rank*.json"))):
            iss = json.load(open(iss_path))
            log = os.path.join(run, f"calls-{iss['pid']}.log")
            if not os.path.exists(log):
                sys.exit(f"{log} missing")
            name = f"{mode}-{mask}-rank{iss['rank']}"
            steps = iss.get("steps", [])
            if steps and set(steps) != {"ops", "burst", "group", "graph"}:
                name += "-" + "+".join(steps)
            shutil.copy(log, os.path.join(dst, name + ".log"))
            shutil.copy(log[: -len(".log")] + ".times", os.path.join(dst, name + ".times"))
            meta = {"nccl": iss["nccl"], "torch": iss["torch"], "device": iss["device"]}
            logs.append(
                {
                    "log": name + ".log",
                    "mode": mode,
                    "mask": int(mask),
                    "rank": iss["rank"],
                    "world": iss["world"],
                    "replays": iss["replays"],
                    "steps": steps,
                    "end": iss.get("end", "destroy"),
                    "gpus": iss.get("gpus"),
                    "env": portable(iss["env"]),
                    "issued": iss["issued"],
                }
            )
    manifest = dict(
        meta,
        command=command,
        driver="driver.py --iters 1 --burst 4 --replays 2 (the record stage of tests/gpu/run.sh)",
        logs=logs,
    )
    with open(os.path.join(dst, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)
    total = sum(os.path.getsize(p) for p in glob.glob(os.path.join(dst, "*")))
    print(f"{len(logs)} logs, {total} bytes in {dst}")
    if tmp:
        shutil.rmtree(tmp)
    if total > LIMIT:
        sys.exit(f"fixtures are {total} bytes, over the {LIMIT} budget")


if __name__ == "__main__":
    main()
