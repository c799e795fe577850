"""`python -m evring path`: the plugin library, for NCCL_PROFILER_PLUGIN.
`python -m evring version`: the plugin's build version.
`python -m evring stats`: this process's counters (all zero: NCCL is not here)."""

import sys

import evring


def main(argv):
    cmd = argv[1] if len(argv) > 1 else "path"
    if cmd == "path":
        print(evring.path())
    elif cmd == "version":
        print(evring.version())
    elif cmd == "stats":
        for k, v in evring.stats().items():
            print(f"{k} {v}")
    else:
        print("usage: python -m evring [path|version|stats]", file=sys.stderr)
        return 2
    return 0


sys.exit(main(sys.argv))
