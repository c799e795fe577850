"""Offline test of the meter's Python side: benches/meter.py on synthetic reports, and
tests/gpu/meter.sh end to end with a stand-in for the GPU job. No GPU, no torch.

    python3 -m unittest discover -s tests/gpu -p 'test_*.py'
"""

import contextlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "benches"))

import meter  # noqa: E402


def row(fn, ty, calls, ns):
    return {"fn": fn, "type": ty, "calls": calls, "ns": ns, "min": 1, "max": ns, "hist": [calls]}


def report(plugin, per_call_ns, colls=100, pid=1000, mask=70):
    """One process: the main thread issues `colls` Coll, the proxy thread 4 ProxyStep
    per Coll, an unnamed NCCL thread and a PyTorch watchdog thread one call each."""
    return {
        "meter": "evring-meter", "format": 1, "host": "h", "pid": pid, "plugin": plugin,
        "plugin_name": plugin, "abi": 6, "mask": mask, "ns_per_tick": 0.5, "reason": "exit",
        "inits": 1, "finalizes": 0, "unattributed": 0, "attribution": "map",
        "threads": [
            {"tid": pid, "name": "pt_main_thread", "alive": True, "rows": [
                row("init", "-", 1, 5000),
                row("start", "Coll", colls, colls * per_call_ns),
                row("stop", "Coll", colls, colls * per_call_ns),
            ]},
            {"tid": pid + 1, "name": "NCCL Progress 0", "alive": False, "rows": [
                row("start", "ProxyStep", 4 * colls, 4 * colls * per_call_ns),
                row("record", "ProxyStep", 8 * colls, 8 * colls * per_call_ns),
            ]},
            {"tid": pid + 2, "name": "pt_main_thread", "alive": True, "rows": [row("stop", "unknown", 1, 10)]},
            {"tid": pid + 3, "name": "pt_nccl_watchdg", "alive": True, "rows": [row("stop", "Coll", 1, 10)]},
        ],
    }


def write(dirname, name, v):
    os.makedirs(dirname, exist_ok=True)
    with open(os.path.join(dirname, name), "w") as f:
        json.dump(v, f)


def run_main(args):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = meter.main(args)
    return rc, buf.getvalue()


def line(text, *words):
    """The first output line whose fields start with `words`."""
    for ln in text.splitlines():
        if ln.split()[: len(words)] == list(words):
            return ln.split()
    raise AssertionError(f"no line {words} in:\n{text}")


class Classify(unittest.TestCase):
    def test_kinds(self):
        self.assertEqual(meter.classify("pt_main_thread", 5, 5), "user")
        self.assertEqual(meter.classify("python3", 5, 5), "user")
        self.assertEqual(meter.classify("pt_main_thread", 6, 5), "unnamed")
        self.assertEqual(meter.classify("NCCL Progress 0", 6, 5), "proxy")
        self.assertEqual(meter.classify("nccl-proxy-0-1", 6, 5), "proxy")
        self.assertEqual(meter.classify("NCCL Service  0", 6, 5), "proxy-service")
        self.assertEqual(meter.classify("NCCL SockS0 0 0", 6, 5), "net-helper")
        self.assertEqual(meter.classify("nccl-user-0", 6, 5), "user")
        self.assertEqual(meter.classify("pt_nccl_watchdg", 6, 5), "torch-watchdog")
        self.assertEqual(meter.classify("whatever", 6, 5), "other")


class Tables(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.base = os.path.join(self.tmp, "null")
        self.run = os.path.join(self.tmp, "evring")
        for i in range(2):
            write(self.base, f"r1-h-{i}.json", report("null", 20, pid=1000 + 10 * i))
            write(self.run, f"r1-h-{i}.json", report("evring", 100, pid=2000 + 10 * i))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_one_set_per_op(self):
        rc, out = run_main(["--ops", "100", self.base])
        self.assertEqual(rc, 0)
        self.assertIn("operations: 200", out)
        # 2 reports x 100 Coll: 1 start per op, 20 ns each.
        r = line(out, "user", "start", "Coll")
        self.assertEqual((float(r[3]), float(r[4]), float(r[5])), (1.0, 20.0, 20.0))
        # Proxy hot path: 4 starts + 8 records per op at 20 ns.
        r = line(out, "proxy", "hot")
        self.assertEqual((float(r[2]), float(r[3])), (12.0, 240.0))
        line(out, "unnamed", "stop", "unknown")
        line(out, "torch-watchdog", "stop", "Coll")

    def test_per_start_equals_ops(self):
        _, a = run_main(["--ops", "100", self.base])
        _, b = run_main(["--per-start", "Coll", self.base])
        self.assertEqual(a, b)

    def test_totals_without_ops(self):
        _, out = run_main([self.base])
        r = line(out, "user", "init", "-")
        self.assertEqual((int(float(r[3])), int(float(r[4]))), (2, 10000))

    def test_compare(self):
        rc, out = run_main(["--per-start", "Coll", "--kinds", "--base", self.base, "--run", self.run])
        self.assertEqual(rc, 0)
        r = line(out, "proxy", "hot")
        # base 240 ns/op, run 1200 ns/op: +960, ratio 5.
        self.assertEqual([float(x) for x in r[2:]], [12.0, 240.0, 12.0, 1200.0, 960.0, 5.0])
        self.assertNotIn("start", out.split("ratio", 1)[1])  # --kinds: hot rows only

    def test_body_leaves_out_slow_calls(self):
        # The run's proxy thread: of its 400 ProxyStep starts per report, 3 took 10 us
        # (bucket 14) and are also in slow_ns.
        for i in range(2):
            v = report("evring", 100, pid=2000 + 10 * i)
            r = v["threads"][1]["rows"][0]
            r["ns"] += 3 * 10000 - 3 * 100
            r["hist"] = [0] * 7 + [r["calls"] - 3] + [0] * 6 + [3]
            r["slow_ns"] = 3 * 10000
            for t in v["threads"]:
                for x in t["rows"]:
                    x.setdefault("slow_ns", 0)
            write(self.run, f"r1-h-{i}.json", v)
        for i in range(2):
            v = report("null", 20, pid=1000 + 10 * i)
            for t in v["threads"]:
                for x in t["rows"]:
                    x["slow_ns"] = 0
            write(self.base, f"r1-h-{i}.json", v)
        args = ["--per-start", "Coll", "--kinds", "--base", self.base, "--run", self.run]
        _, plain = run_main(args)
        # All of it: 1200 ns/op of the fast calls, plus 2 x 3 x 9 900 extra over 200 ops.
        self.assertEqual(float(line(plain, "proxy", "hot")[5]), 1200.0 + 6 * 9900 / 200)
        _, body = run_main(args + ["--body"])
        r = [float(x) for x in line(body, "proxy", "hot")[2:]]
        # Without the slow calls' time: the 397 fast starts per report at 100 ns, the
        # 800 records at 100 ns; 6 slow calls over 200 ops.
        self.assertEqual(r[3], (2 * 397 * 100 + 2 * 800 * 100) / 200)
        self.assertEqual(r[6:], [0.0, 6 / 200])
        # One set: the body's mean per call leaves the slow calls out of both sides.
        _, one = run_main(["--per-start", "Coll", "--body", self.run])
        r = line(one, "proxy", "start", "ProxyStep")
        self.assertEqual((float(r[5]), float(r[6])), (100.0, 3 / 100))
        # Reports from a meter without slow_ns cannot give a body.
        old = os.path.join(self.tmp, "old")
        write(old, "r.json", report("null", 20))
        with contextlib.redirect_stdout(io.StringIO()), self.assertRaises(SystemExit):
            meter.main(["--body", old])

    def test_errors(self):
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            with self.assertRaises(SystemExit):
                meter.main(["--base", self.base])
            with self.assertRaises(SystemExit):
                meter.main(["--per-start", "P2p", self.base])
        bad = os.path.join(self.tmp, "bad.json")
        with open(bad, "w") as f:
            json.dump({"x": 1}, f)
        with self.assertRaises(ValueError):
            meter.main([bad])


# Stands in for python3 on PATH: runs meter_job.py as a fake that writes one report per
# rank (as the meter would at exit), anything else with the real interpreter.
FAKE_PYTHON = """#!/bin/sh
case "$1" in
*meter_job.py)
  exec "{real}" - "$@" <<'PY'
import json, os, sys
plugin = os.environ["EVRING_METER_PLUGIN"]
mask = int(os.environ["NCCL_PROFILE_EVENT_MASK"])
assert os.environ["NCCL_PROFILER_PLUGIN"].endswith("meter.so")
assert os.environ["NCCL_SET_THREAD_NAME"] == "1"
iters = int(sys.argv[sys.argv.index("--iters") + 1])
for rank in range(2):
    pid = os.getpid() * 10 + rank
    per = 20 if plugin == "null" else 100
    v = {{"meter": "evring-meter", "pid": pid, "plugin": plugin, "plugin_name": "x", "abi": 6,
         "mask": mask, "threads": [{{"tid": pid, "name": "python3", "rows": [
             {{"fn": "start", "type": "Coll", "calls": iters, "ns": iters * per}}]}}]}}
    with open(os.environ["EVRING_METER_OUT"] + f"h-{{pid}}.json", "w") as f:
        json.dump(v, f)
    print(f"meter_job: rank {{rank}}: {{iters}} all_reduce of 4096 bytes in 1.0 s (1.0 us/op host)")
PY
  ;;
*) exec "{real}" "$@" ;;
esac
"""


class Harness(unittest.TestCase):
    def test_meter_sh_with_a_fake_job(self):
        tmp = tempfile.mkdtemp()
        try:
            bindir = os.path.join(tmp, "bin")
            os.makedirs(bindir)
            fake = os.path.join(bindir, "python3")
            with open(fake, "w") as f:
                f.write(FAKE_PYTHON.format(real=sys.executable))
            os.chmod(fake, os.stat(fake).st_mode | stat.S_IEXEC)
            so = os.path.join(tmp, "meter.so")
            inner = os.path.join(tmp, "inner.so")
            for p in (so, inner):
                open(p, "w").close()
            out = os.path.join(tmp, "out")
            env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"],
                       ROUNDS="2", ITERS="50", MASKS="70 4095")
            p = subprocess.run(["bash", os.path.join(HERE, "meter.sh"), so, out, f"evring={inner}"],
                               env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
            # Rotation: round 1 runs null first, round 2 evring first.
            order = [ln.split("inner ")[1] for ln in p.stderr.splitlines() if ln.startswith("round")]
            self.assertEqual(order, ["null", "evring"] * 2 + ["evring", "null"] * 2)
            for d in ("null-m70", "null-m4095", "evring-m70", "evring-m4095"):
                self.assertEqual(len(os.listdir(os.path.join(out, d))), 4, d)  # 2 ranks x 2 rounds
            with open(os.path.join(out, "table.txt")) as f:
                table = f.read()
            self.assertIn("=== mask 4095: evring (run) against null (base)", table)
            r = line(table, "user", "hot")
            self.assertEqual([float(x) for x in r[2:]], [1.0, 20.0, 1.0, 100.0, 80.0, 5.0])
            self.assertIn("evring-m70-r2.log:meter_job: rank 1", table)
            bad = subprocess.run(["bash", os.path.join(HERE, "meter.sh"), so, out, "evring"],
                                 env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(bad.returncode, 2)
        finally:
            shutil.rmtree(tmp)


if __name__ == "__main__":
    unittest.main()
