"""Statistics of the overhead benchmark (overhead.py): intervals and verdicts.

Standard library only. The unit of replication is the round: each round runs
every configuration (no plugin, null plugin, evring) as a fresh 2-rank job,
back to back, and host timings differ from job to job by as much as the
plugin's effect. So every comparison is made per round and the interval is
taken over rounds:

* a job's statistic for (mask, size) is the median host time of its calls,
  per rank; the two ranks of a job are combined by the mean of their logs
  (one value per job: the ranks share a job and are not independent samples);
* per round, the log of a ratio is the difference of two such values; the
  quantity the targets name is D(m) = evring at mask m over no plugin, paired
  within the round. It splits exactly into W(m) (evring m over evring 0, the
  same job: the per-call work) plus P (evring 0 over no plugin, across jobs:
  the plugin's presence at mask 0, where NCCL calls it for nothing);
* the estimate is the Hodges-Lehmann estimator of the per-round log ratios
  and the interval the exact Wilcoxon signed-rank interval. It assumes the
  per-round differences are symmetric about their centre, which holds when the
  two jobs of a pair have the same noise up to a shift (the difference of two
  exchangeable values is symmetric); the sign-test interval, which assumes
  nothing but independence of rounds, is given beside it;
* verdict per target: MET when the interval's upper end is within the target,
  MISSED when its lower end is above it, otherwise INCONCLUSIVE. Each verdict
  is a statement at the given confidence on its own, not jointly for all.
"""

import math
import statistics

SIZES = (4 << 10, 1 << 20)
MASKS = (0, 6, 70, 4095)
TARGETS = {70: 1.05, 4095: 1.10}  # evring / no plugin, host time per call


def signed_rank_cdf(n):
    """P(T+ <= t) for t = 0..n(n+1)/2 under the null: T+ is the sum of the
    ranks of the positive values among n, each sign a fair coin."""
    total = n * (n + 1) // 2
    counts = [1] + [0] * total
    for r in range(1, n + 1):
        for t in range(total, r - 1, -1):
            counts[t] += counts[t - r]
    out, acc = [], 0
    for c in counts:
        acc += c
        out.append(acc / 2**n)
    return out


def binom_cdf_half(n):
    """P(B <= k) for B ~ Binomial(n, 1/2), k = 0..n."""
    out, acc = [], 0
    for k in range(n + 1):
        acc += math.comb(n, k)
        out.append(acc / 2**n)
    return out


def _order_interval(sorted_vals, cdf, conf):
    """[v_k, v_(N+1-k)] (1-based) for the largest k with 2 cdf[k-1] <= 1-conf;
    (-inf, inf) when even k = 1 is too narrow. Returns (lo, hi, coverage)."""
    alpha = 1 - conf
    k = 0  # the candidate k + 1 is valid when 2 P(T <= k) <= alpha
    while k < (len(sorted_vals) + 1) // 2 and 2 * cdf[k] <= alpha:
        k += 1
    if k == 0:
        return -math.inf, math.inf, 1.0
    return sorted_vals[k - 1], sorted_vals[len(sorted_vals) - k], 1 - 2 * cdf[k - 1]


def wilcoxon_interval(xs, conf=0.95):
    """Hodges-Lehmann estimate and exact signed-rank interval of the centre of xs:
    (estimate, lo, hi, coverage)."""
    n = len(xs)
    if n == 0:
        return math.nan, -math.inf, math.inf, 1.0
    walsh = sorted((xs[i] + xs[j]) / 2 for i in range(n) for j in range(i, n))
    lo, hi, cov = _order_interval(walsh, signed_rank_cdf(n), conf)
    return statistics.median(walsh), lo, hi, cov


def sign_interval(xs, conf=0.95):
    """Median and exact sign-test (order statistic) interval of the median of xs:
    (estimate, lo, hi, coverage)."""
    if not xs:
        return math.nan, -math.inf, math.inf, 1.0
    s = sorted(xs)
    lo, hi, cov = _order_interval(s, binom_cdf_half(len(s)), conf)
    return statistics.median(s), lo, hi, cov


def verdict(lo, hi, target):
    """Ratio interval [lo, hi] against `target` (the most the ratio may be)."""
    if hi <= target:
        return "MET"
    if lo > target:
        return "MISSED"
    return "INCONCLUSIVE"


def job_values(jobs, stat="median"):
    """{(cfg, round, key): mean over ranks of log(stat)} from job records
    {"round", "cfg", "rank", stat: {key: us}}; a (cfg, round) with a rank
    missing a key is left out."""
    acc = {}
    world = len({j["rank"] for j in jobs})
    for j in jobs:
        for key, v in j[stat].items():
            if v and v > 0 and not math.isnan(v):
                acc.setdefault((j["cfg"], j["round"], key), []).append(math.log(v))
    return {k: statistics.fmean(v) for k, v in acc.items() if len(v) == world}


def paired(vals, a, b):
    """Per-round log(a / b): a and b are (cfg, key); rounds having both."""
    rounds = sorted({r for (_, r, _) in vals})
    return [vals[(a[0], r, a[1])] - vals[(b[0], r, b[1])] for r in rounds
            if (a[0], r, a[1]) in vals and (b[0], r, b[1]) in vals]


def interval(logs, conf):
    """Ratio estimate and intervals from per-round log ratios."""
    est, lo, hi, cov = wilcoxon_interval(logs, conf)
    _, slo, shi, scov = sign_interval(logs, conf)
    return {
        "n": len(logs),
        "est": math.exp(est) if logs else math.nan,
        "lo": math.exp(lo),
        "hi": math.exp(hi),
        "coverage": cov,
        "sign_lo": math.exp(slo),
        "sign_hi": math.exp(shi),
        "sign_coverage": scov,
        "rounds": [round(math.exp(x), 4) for x in logs],
    }


def estimates(jobs, conf=0.95, stat="median", sizes=SIZES, masks=MASKS, targets=TARGETS):
    """Every ratio, per size and mask, with its interval; a verdict for the
    targets. Keys: "D" evring m / none, "W" evring m / evring 0, "P" evring 0 /
    none, "U" null m / none, "V" null m / null 0."""
    vals = job_values(jobs, stat)
    out = []
    for size in sizes:
        none = ("none", f"{size}/None")
        for m in masks:
            ev, ev0 = ("evring", f"{size}/{m}"), ("evring", f"{size}/0")
            nu, nu0 = ("null", f"{size}/{m}"), ("null", f"{size}/0")
            row = {
                "size": size,
                "mask": m,
                "D": interval(paired(vals, ev, none), conf),
                "W": interval(paired(vals, ev, ev0), conf),
                "P": interval(paired(vals, ev0, none), conf),
                "U": interval(paired(vals, nu, none), conf),
                "V": interval(paired(vals, nu, nu0), conf),
            }
            if m in targets:
                d = row["D"]
                row["target"] = targets[m]
                row["verdict"] = verdict(d["lo"], d["hi"], targets[m])
                row["sign_verdict"] = verdict(d["sign_lo"], d["sign_hi"], targets[m])
            out.append(row)
    return out


def _ci(x):
    if not x["n"]:
        return "-"
    if math.isinf(x["hi"]):
        return f"{x['est']:.3f} [none: {x['n']} rounds]"
    return f"{x['est']:.3f} [{x['lo']:.3f}, {x['hi']:.3f}]"


def render(est, conf=0.95, stat="median", verdicts=True):
    """The estimates as text: one line per size and mask, the presence factor,
    then (verdicts=True) one verdict per target."""
    lines = [
        f"host time per call, ratio of job {stat}s paired by round (ranks of a job: geometric mean): "
        f"Hodges-Lehmann estimate [{conf:.0%} signed-rank interval] over rounds",
        "  D = evring m / none (the targets' quantity) = W (evring m / evring 0, same job) x "
        "P (evring 0 / none, across jobs); controls: null m / none, null m / null 0",
        f"  {'size':>8} {'mask':>5} {'rounds':>6} {'D evring/none':>24} {'W evring m/0':>24} "
        f"{'null/none':>24} {'null m/0':>24}",
    ]
    for r in est:
        w, v = (("-", "-") if r["mask"] == 0 else (_ci(r["W"]), _ci(r["V"])))
        lines.append(f"  {r['size'] // 1024:>4} KiB {r['mask']:>5} {r['D']['n']:>6} {_ci(r['D']):>24} "
                     f"{w:>24} {_ci(r['U']):>24} {v:>24}")
    for r in est:
        if r["mask"] == 0:
            lines.append(f"  {r['size'] // 1024} KiB presence P = evring 0 / none: {_ci(r['P'])}")
    if not verdicts:
        return "\n".join(lines)
    for r in est:
        if "verdict" not in r:
            continue
        d = r["D"]
        if math.isinf(d["hi"]):
            why = f"{d['n']} rounds give no {conf:.0%} interval (6 at least)"
        else:
            why = f"[{d['lo']:.3f}, {d['hi']:.3f}], {d['n']} rounds, coverage {d['coverage']:.3f}"
        extra = ""
        if r["sign_verdict"] != r["verdict"]:
            extra = (f"; the sign-test interval [{d['sign_lo']:.3f}, {d['sign_hi']:.3f}] "
                     f"(no symmetry assumed) gives {r['sign_verdict']}")
        lines.append(f"verdict {r['size'] // 1024} KiB mask {r['mask']}: evring/none {d['est']:.3f} {why}; "
                     f"target <= {r['target']:.2f}: {r['verdict']}{extra}")
    return "\n".join(lines)


def jobs_from_round_medians(d):
    """Job records from an overhead.json that has only "round_medians_us"
    ({"cfg/mask/size": [one median per round and rank, round-major]})."""
    rm = d["round_medians_us"]
    jobs = {}
    for key, xs in rm.items():
        cfg, rest = key.split("/", 1)
        world = len(xs) // d["rounds"]
        for i, v in enumerate(xs):
            mask, size = rest.rsplit("/", 1)
            j = jobs.setdefault((cfg, i // world, i % world),
                                {"cfg": cfg, "round": i // world, "rank": i % world, "median": {}})
            j["median"][f"{size}/{mask}"] = v
    return list(jobs.values())
