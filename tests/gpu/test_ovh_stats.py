"""Offline tests of the overhead statistics (ovh_stats.py) and of overhead.py's
round loop and report, with a stand-in for torch: no GPU needed.

    python3 -m unittest discover -s tests/gpu -p 'test_*.py'
"""

import contextlib
import io
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ovh_stats as st  # noqa: E402

SIZES, MASKS = st.SIZES, st.MASKS


def synthetic_jobs(rng, rounds, evring, null=None, job_sd=0.15, within_sd=0.02, presence=1.0):
    """Job records as overhead.py writes them. evring: {mask: true ratio over
    mask 0 within a job}; presence: evring 0 over no plugin. Every job (and
    every rank of it) gets its own log-normal offset (job_sd), every cell a
    small within-job noise (within_sd)."""
    null = null or {m: 1.0 for m in MASKS}
    jobs = []
    for r in range(rounds):
        for cfg in ("none", "null", "evring"):
            job = rng.gauss(0, job_sd)
            for rank in range(2):
                off = job + rng.gauss(0, job_sd / 2)
                med = {}
                for size in SIZES:
                    base = 25.0 * math.exp(off)
                    if cfg == "none":
                        med[f"{size}/None"] = base * math.exp(rng.gauss(0, within_sd))
                        continue
                    for m in MASKS:
                        ratio = evring[m] * presence if cfg == "evring" else null[m]
                        med[f"{size}/{m}"] = base * ratio * math.exp(rng.gauss(0, within_sd))
                jobs.append({"round": r, "cfg": cfg, "rank": rank, "median": med})
    return jobs


def verdicts(est):
    return {(r["size"], r["mask"]): r["verdict"] for r in est if "verdict" in r}


class Distributions(unittest.TestCase):
    def test_signed_rank_cdf_small(self):
        # n = 3: T+ takes 0..6 with counts 1 1 1 2 1 1 1 (of 8).
        cdf = st.signed_rank_cdf(3)
        self.assertEqual([round(c * 8) for c in cdf], [1, 2, 3, 5, 6, 7, 8])

    def test_signed_rank_critical_value_n10(self):
        # Tables: n = 10, two-sided 5 %: reject at T <= 8 (P = 0.0244).
        cdf = st.signed_rank_cdf(10)
        self.assertAlmostEqual(cdf[8], 25 / 1024, places=9)
        self.assertGreater(cdf[9], 0.025)
        est, lo, hi, cov = st.wilcoxon_interval([float(x) for x in range(1, 11)])
        walsh = sorted((i + j) / 2 for i in range(1, 11) for j in range(i, 11))
        self.assertEqual((lo, hi), (walsh[8], walsh[-9]))
        self.assertAlmostEqual(cov, 1 - 2 * 25 / 1024)
        self.assertEqual(est, 5.5)

    def test_too_few_rounds_give_no_interval(self):
        # 5 values: all positive has P 1/32 > 0.025, so no 95 % interval exists.
        _, lo, hi, _ = st.wilcoxon_interval([0.1, 0.2, 0.3, 0.4, 0.5])
        self.assertEqual((lo, hi), (-math.inf, math.inf))
        _, lo, hi, cov = st.wilcoxon_interval([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
        self.assertEqual((lo, hi), (0.1, 0.6))
        self.assertAlmostEqual(cov, 1 - 2 / 64)

    def test_sign_interval(self):
        # n = 20, 95 %: the 6th and 15th order statistics (coverage 0.9586).
        xs = [float(x) for x in range(20, 0, -1)]
        med, lo, hi, cov = st.sign_interval(xs)
        self.assertEqual((med, lo, hi), (10.5, 6.0, 15.0))
        self.assertAlmostEqual(cov, 0.9586, places=4)

    def test_interval_covers_the_truth_at_its_rate(self):
        rng = random.Random(7)
        trials, hits = 400, 0
        for _ in range(trials):
            xs = [0.05 + rng.gauss(0, 0.1) for _ in range(12)]
            _, lo, hi, _ = st.wilcoxon_interval(xs)
            hits += lo <= 0.05 <= hi
        self.assertGreater(hits / trials, 0.92)
        self.assertLess(hits / trials, 0.995)


class Verdicts(unittest.TestCase):
    def test_verdict_rule(self):
        self.assertEqual(st.verdict(0.90, 1.04, 1.05), "MET")
        self.assertEqual(st.verdict(0.90, 1.05, 1.05), "MET")
        self.assertEqual(st.verdict(1.06, 1.20, 1.05), "MISSED")
        self.assertEqual(st.verdict(1.00, 1.10, 1.05), "INCONCLUSIVE")
        self.assertEqual(st.verdict(-math.inf, math.inf, 1.05), "INCONCLUSIVE")

    def test_small_cost_is_met(self):
        jobs = synthetic_jobs(random.Random(1), 16, {0: 1.0, 6: 1.0, 70: 1.01, 4095: 1.03}, job_sd=0.02)
        est = st.estimates(jobs)
        self.assertEqual(set(verdicts(est).values()), {"MET"})
        for r in est:
            if r["mask"] == 4095:
                self.assertAlmostEqual(r["D"]["est"], 1.03, delta=0.03)

    def test_large_cost_is_missed(self):
        jobs = synthetic_jobs(random.Random(2), 16, {0: 1.0, 6: 1.1, 70: 1.12, 4095: 1.2}, job_sd=0.02)
        self.assertEqual(set(verdicts(st.estimates(jobs)).values()), {"MISSED"})

    def test_cost_hidden_in_job_noise_is_inconclusive(self):
        # Per-call cost exactly at the targets, jobs differing by ~15 %: the
        # interval straddles the target and the verdict must not pick a side.
        jobs = synthetic_jobs(random.Random(3), 10, {0: 1.0, 6: 1.03, 70: 1.05, 4095: 1.10})
        est = st.estimates(jobs)
        self.assertEqual(set(verdicts(est).values()), {"INCONCLUSIVE"})
        # ... while the within-job ratio, free of the job offsets, is tight.
        for r in est:
            if r["mask"] == 70:
                self.assertAlmostEqual(r["W"]["est"], 1.05, delta=0.01)
                self.assertLess(r["W"]["hi"] - r["W"]["lo"], 0.04)
                self.assertGreater(r["D"]["hi"] - r["D"]["lo"], 0.1)

    def test_presence_cost_counts(self):
        # No per-call cost but 20 % more for the plugin's presence: missed,
        # and P (not W) says where it comes from.
        jobs = synthetic_jobs(random.Random(4), 12, {m: 1.0 for m in MASKS}, job_sd=0.02, presence=1.2)
        est = st.estimates(jobs)
        self.assertEqual(set(verdicts(est).values()), {"MISSED"})
        for r in est:
            self.assertAlmostEqual(r["P"]["est"], 1.2, delta=0.03)
            if r["mask"]:
                self.assertAlmostEqual(r["W"]["est"], 1.0, delta=0.02)

    def test_decomposition_is_exact_per_round(self):
        jobs = synthetic_jobs(random.Random(5), 8, {0: 1.0, 6: 1.02, 70: 1.04, 4095: 1.08})
        for r in st.estimates(jobs):
            for d, w, p in zip(r["D"]["rounds"], r["W"]["rounds"], r["P"]["rounds"]):
                self.assertAlmostEqual(d, w * p, places=3)

    def test_null_control(self):
        jobs = synthetic_jobs(random.Random(6), 12, {m: 1.0 for m in MASKS},
                              null={0: 1.0, 6: 1.0, 70: 1.06, 4095: 1.06}, job_sd=0.02)
        for r in st.estimates(jobs):
            if r["mask"] == 70:
                self.assertAlmostEqual(r["V"]["est"], 1.06, delta=0.02)

    def test_incomplete_job_is_left_out(self):
        jobs = synthetic_jobs(random.Random(8), 7, {0: 1.0, 6: 1.0, 70: 1.0, 4095: 1.0})
        jobs = [j for j in jobs if not (j["round"] == 6 and j["cfg"] == "none" and j["rank"] == 1)]
        for r in st.estimates(jobs):
            self.assertEqual(r["D"]["n"], 6)
            self.assertEqual(r["W"]["n"], 7)

    def test_old_overhead_json(self):
        # round_medians_us: one median per round and rank, round-major.
        d = {"rounds": 2, "round_medians_us": {
            "none/None/4096": [20.0, 22.0, 24.0, 26.0],
            "evring/70/4096": [21.0, 23.1, 25.2, 27.3],
            "evring/0/first/4096": [200.0, 210.0, 220.0, 230.0]}}
        jobs = st.jobs_from_round_medians(d)
        ev = {(j["round"], j["rank"]): j["median"] for j in jobs if j["cfg"] == "evring"}
        self.assertEqual(ev[(1, 0)]["4096/70"], 25.2)
        self.assertEqual(ev[(0, 1)]["4096/0/first"], 210.0)
        vals = st.job_values(jobs)
        self.assertAlmostEqual(vals[("evring", 1, "4096/70")] - vals[("none", 1, "4096/None")], math.log(1.05))


class RoundLoop(unittest.TestCase):
    """overhead.py's main() with a stand-in torch and jobs that write synthetic
    per-rank files: the budget stops rounds, the JSON and the tables come out."""

    def test_main_offline(self):
        import overhead

        fake = types.ModuleType("torch")
        fake.__version__ = "0-test"
        fake.cuda = types.SimpleNamespace(device_count=lambda: 1,
                                          nccl=types.SimpleNamespace(version=lambda: (2, 28, 9)))
        rng = random.Random(9)
        clock = [0.0]

        def fake_job(cfg, args, path, tmp, rnd):
            clock[0] += 10.0  # each job "takes" 10 s
            for rank in range(args.world):
                samples = {}
                for size in SIZES:
                    for m in (MASKS if cfg["setter"] else (None,)):
                        cost = {None: 1.0, 0: 1.0, 6: 1.01, 70: 1.02, 4095: 1.04}[m] if cfg["name"] == "evring" else 1.0
                        xs = [25.0 * cost * math.exp(rng.gauss(0, 0.01)) for _ in range(19 * args.batches)]
                        samples[f"{size}/{m}"] = xs
                        samples[f"{size}/{m}/first"] = [250.0] * args.batches
                        samples[f"{size}/{m}/latency"] = [4000.0] * args.batches
                with open(f"{path}.rank{rank}", "w") as fh:
                    json.dump({"cfg": cfg["name"], "round": rnd, "rank": rank, "samples": samples}, fh)

        with tempfile.TemporaryDirectory() as out:
            argv = ["overhead.py", "--plugin", "x.so", "--null", "n.so", "--out", out, "--budget", "240"]
            saved = (sys.argv, sys.modules.get("torch"), overhead.run_job, overhead.time.time)
            try:
                sys.argv = argv
                sys.modules["torch"] = fake
                overhead.run_job = fake_job
                overhead.time.time = lambda: clock[0]
                with contextlib.redirect_stdout(io.StringIO()) as printed:
                    overhead.main()
            finally:
                sys.argv, torch_mod, overhead.run_job, overhead.time.time = saved
                if torch_mod is None:
                    sys.modules.pop("torch", None)
                else:
                    sys.modules["torch"] = torch_mod
            with open(os.path.join(out, "overhead.json")) as fh:
                d = json.load(fh)
            # 30 s a round, budget 240 s: a round starts while 30 x 1.15 still fits.
            self.assertEqual(d["rounds"], 7)
            self.assertIn("verdict 1024 KiB mask 4095", printed.getvalue())
            self.assertIn("budget", d["stopped"])
            self.assertEqual({r["verdict"] for r in d["estimates"] if "verdict" in r}, {"MET"})
            md = subprocess.run([sys.executable, os.path.join(HERE, "tables.py"), "overhead-md",
                                 os.path.join(out, "overhead.json")], capture_output=True, text=True, check=True)
            self.assertIn("MET", md.stdout)
            again = subprocess.run([sys.executable, os.path.join(HERE, "overhead.py"), "--analyse", out],
                                   capture_output=True, text=True, check=True)
            self.assertIn("verdict 4 KiB mask 70", again.stdout)


if __name__ == "__main__":
    unittest.main()
