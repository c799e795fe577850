#!/usr/bin/env python3
"""Peak event rates of recorded NCCL call logs (EVRING_RECORD: <x>.log + <x>.times).

    python3 tests/gpu/peak_rate.py LOG [LOG...]

For each log: its startEvent calls (events) and all profiler calls, and the most of
them NCCL made within any 1 ms, 10 ms and 100 ms window (from the .times sidecar, one
CLOCK_MONOTONIC ns value per log line), as events per second. The simulator's default
pace (docs/simulator.md, "Pace") is chosen from these figures.
"""
import sys

WINDOWS_NS = (1_000_000, 10_000_000, 100_000_000)


def peak(times, window):
    """Most values of sorted `times` within any half-open window of `window` ns."""
    best, j = 0, 0
    for i, t in enumerate(times):
        while t - times[j] >= window:
            j += 1
        best = max(best, i - j + 1)
    return best


def main(paths):
    for log in paths:
        stem = log[: -len(".log")] if log.endswith(".log") else log
        with open(stem + ".log") as f:
            kinds = [line.split()[1] if len(line.split()) > 1 else "" for line in f]
        with open(stem + ".times") as f:
            times = [int(x) for x in f.read().split()]
        if len(kinds) != len(times):
            sys.exit(f"{stem}: {len(kinds)} lines but {len(times)} times")
        starts = sorted(t for k, t in zip(kinds, times) if k == "START")
        calls = sorted(times)
        span = (calls[-1] - calls[0]) / 1e9 if calls else 0.0
        rates = []
        for name, ts in (("events", starts), ("calls", calls)):
            for w in WINDOWS_NS:
                n = peak(ts, w)
                rates.append(f"{name}/{w // 1_000_000}ms {n} ({n * 1e9 / w / 1e3:.0f} k/s)")
        print(f"{stem}: {len(starts)} events, {len(calls)} calls over {span:.2f} s; peak "
              + ", ".join(rates))


if __name__ == "__main__":
    main(sys.argv[1:] or sys.exit(__doc__))
