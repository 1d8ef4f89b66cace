#!/usr/bin/python3
"""Generate reference values for pkg/bench's statistics tests with numpy and scipy.

pkg/bench implements percentiles, the order-statistic confidence interval of
the median and the Mann-Whitney U test in Go; its tests compare them with the
values this script computes with independent implementations (numpy's
percentile, scipy's binomial distribution and scipy.stats.mannwhitneyu). The
output is committed so the Go tests need no Python.

Run with Debian's interpreter (python3-numpy, python3-scipy):
    /usr/bin/python3 scripts/gen_stats_testdata.py pkg/bench/testdata
"""
import json
import os
import sys

import numpy as np
import scipy
from scipy import stats

QS = [0.0, 0.1, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0]


def lognormal(rng, n, median=1e6, sigma=0.2):
    # Integer nanoseconds, like the latencies the Go code sees.
    return [float(v) for v in np.round(median * np.exp(sigma * rng.standard_normal(n)))]


def percentiles(rng):
    cases = []
    samples = {
        "one": [5.0],
        "two": [1.0, 3.0],
        "ties": [2.0, 2.0, 2.0, 5.0, 5.0, 9.0],
        "unsorted_small": [float(v) for v in rng.permutation(np.arange(1, 12)) * 3.5],
    }
    for n in (10, 101, 1000):
        samples[f"lognormal_{n}"] = lognormal(rng, n)
    for name, xs in samples.items():
        a = np.asarray(xs)
        cases.append({
            "name": name,
            "sample": xs,
            "q": QS,
            # numpy's default method is "linear" (R type 7).
            "want": [float(np.percentile(a, 100 * q)) for q in QS],
            "mean": float(a.mean()),
            "stddev": float(a.std(ddof=1)) if len(a) > 1 else 0.0,
        })
    return cases


def median_ci(rng):
    cases = []
    for n in list(range(1, 13)) + [20, 31, 50, 100, 200, 1000, 10000, 100000]:
        # Largest k with 1 - 2 * P(B <= k-1) >= 0.95, B ~ Binomial(n, 1/2);
        # the interval is [x(k), x(n-k+1)] (1-based order statistics).
        k = 0
        for cand in range(1, (n + 1) // 2 + 1):
            if 1 - 2 * stats.binom.cdf(cand - 1, n, 0.5) >= 0.95:
                k = cand
            else:
                break
        case = {"n": n, "confidence": 0.95, "lo_order": k, "hi_order": (n - k + 1) if k else 0,
                "coverage": float(1 - 2 * stats.binom.cdf(k - 1, n, 0.5)) if k else 0.0}
        if k and n <= 1000:
            xs = lognormal(rng, n)
            s = sorted(xs)
            case["sample"] = xs
            case["lo"] = s[k - 1]
            case["hi"] = s[n - k]
        cases.append(case)
    return cases


def utest(rng):
    cases = []

    def add(name, x, y):
        r = stats.mannwhitneyu(x, y, alternative="two-sided", method="auto")
        n1, n2 = len(x), len(y)
        ties = len(set(x) | set(y)) < n1 + n2
        method = "exact" if (min(n1, n2) <= 8 and not ties) else "asymptotic"
        cases.append({"name": name, "x": [float(v) for v in x], "y": [float(v) for v in y],
                      "u1": float(r.statistic), "p": float(r.pvalue), "method": method})

    add("exact_3x4_separated", [1, 2, 3], [4, 5, 6, 7])
    add("exact_5x5_mixed", [1.1, 3.3, 5.5, 7.7, 9.9], [2.2, 4.4, 6.6, 8.8, 10.1])
    add("exact_8x20", lognormal(rng, 8), lognormal(rng, 20, median=1.1e6))
    add("exact_1x1", [1.0], [2.0])
    add("asym_ties_small", [1, 2, 2, 3, 3, 3], [2, 3, 3, 4, 4, 5])
    add("asym_all_equal", [4.0] * 10, [4.0] * 12)
    add("asym_30x30", lognormal(rng, 30), lognormal(rng, 30, median=1.05e6))
    add("asym_200x200_same", lognormal(rng, 200), lognormal(rng, 200))
    add("asym_200x200_shift", lognormal(rng, 200), lognormal(rng, 200, median=1.03e6))
    add("asym_unequal_50x300", lognormal(rng, 50), lognormal(rng, 300, median=0.97e6))
    # Quantized latencies (a coarse clock) tie a lot: the tie correction matters.
    add("asym_quantized_ties", [float(v) for v in rng.integers(10, 20, 100)],
        [float(v) for v in rng.integers(11, 21, 120)])
    return cases


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "pkg/bench/testdata"
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20240611)
    meta = {"generator": "scripts/gen_stats_testdata.py", "numpy": np.__version__, "scipy": scipy.__version__}
    for name, fn in (("percentiles", percentiles), ("median_ci", median_ci), ("utest", utest)):
        doc = {"meta": meta, "cases": fn(rng)}
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"wrote {name}.json: {len(doc['cases'])} cases")


if __name__ == "__main__":
    main()
