#!/usr/bin/python3
"""Recorded bench-peers samples and their reference figures for peerstats' tests.

samples.json has the shape bench_peers.py writes (WORK/samples/MODEL.json): two peers, a
torchspeed contender and a floor, each in two processes over eight rounds, with lognormal
latencies in integer nanoseconds and one slow round. want.json holds what numpy and scipy
compute from them independently of pkg/bench: percentiles (numpy's linear method), the median's
95% interval from scipy's binomial distribution, per-process medians and p95/p50.
throughput_samples.json is a throughput run (`bench_peers.py --throughput`): configurations of
several streams over eight rounds, one of them slow; throughput_want.json has each round's items/s
over the window all streams ran (numpy cumulative sums), their median and its interval, the
latencies' p50/p99, each contender's best configuration and the ratio of medians to the best
peer's. The output is committed so the Go tests need no Python.

Run with Debian's interpreter (python3-numpy, python3-scipy):
    /usr/bin/python3 scripts/peers/peerstats/gen_testdata.py scripts/peers/peerstats/testdata
"""
import json
import os
import sys

import numpy as np
from scipy import stats

ROUNDS, PROCS = 8, 2


def contender(rng, name, kind, median, n, floor_for=""):
    blocks = []
    for p in range(PROCS):
        level = median * (1 + 0.03 * p)  # the second process runs 3% slower
        rounds = []
        for r in range(ROUNDS):
            slow = 1.3 if r == 5 else 1.0  # a slow stretch of the machine lands on a whole round
            v = np.round(level * slow * np.exp(0.15 * rng.standard_normal(n)))
            rounds.append([int(x) for x in v])
        blocks.append(rounds)
    other = [round(float(x), 3) for x in rng.uniform(0, 0.2, ROUNDS * PROCS)]
    return {"contender": name, "kind": kind, "floor_for": floor_for, "blocks": blocks, "other_cpu": other}


def median_ci(xs):
    s = np.sort(xs)
    n = len(s)
    k = 0
    for cand in range(1, (n + 1) // 2 + 1):
        if 1 - 2 * stats.binom.cdf(cand - 1, n, 0.5) >= 0.95:
            k = cand
        else:
            break
    return [float(s[k - 1]) / 1e6, float(s[n - k]) / 1e6]


def want(c, noise):
    allv = np.asarray([x for p in c["blocks"] for b in p for x in b], dtype=float)
    p50, p95, p99 = np.percentile(allv, [50, 95, 99])
    procs = [float(np.percentile([x for b in p for x in b], 50)) / 1e6 for p in c["blocks"]]
    oc = np.asarray(c["other_cpu"])
    return {"runs": int(allv.size), "p50_ms": p50 / 1e6, "p95_ms": p95 / 1e6, "p99_ms": p99 / 1e6,
            "min_ms": allv.min() / 1e6, "mean_ms": allv.mean() / 1e6, "p95_over_p50": p95 / p50,
            "p50_ci95": median_ci(allv), "process_p50_ms": procs, "process_spread": max(procs) / min(procs),
            "other_cpu_median": float(np.median(oc)), "other_cpu_max": float(oc.max()),
            "noisy_blocks": int((oc > noise).sum())}


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(7)
    noise = 0.1
    samples = {"seed": 1, "noise_cpu": noise, "contenders": [
        contender(rng, "py-jit", "peer", 2.0e6, 40),
        contender(rng, "ort-fp32", "peer", 1.6e6, 40),
        contender(rng, "ts-bench", "torchspeed", 1.2e6, 50),
        contender(rng, "floor@ts-bench", "floor", 1.2e6, 50, floor_for="ts-bench"),
    ]}
    ref = {c["contender"]: want(c, noise) for c in samples["contenders"]}
    with open(os.path.join(out, "samples.json"), "w") as f:
        json.dump(samples, f)
    with open(os.path.join(out, "want.json"), "w") as f:
        json.dump(ref, f, indent=1)
    throughput(out)


def window_rate(streams):
    """Items/s while every stream ran: the window ends with the first stream done; each stream
    counts its calls completed by then and the fraction of the one in flight."""
    w = min(sum(s) for s in streams)
    items = 0.0
    for s in streams:
        ends = np.cumsum(np.asarray(s, dtype=float))
        done = int(np.searchsorted(ends, w, side="right"))
        items += done
        if done < len(s):
            start = ends[done - 1] if done else 0.0
            items += (w - start) / s[done]
    return items / (w / 1e9)


def config(rng, name, contender, kind, instances, threads, median, n):
    rounds = []
    for r in range(ROUNDS):
        slow = 1.4 if r == 2 else 1.0
        rounds.append([[int(x) for x in np.round(median * slow * np.exp(0.2 * rng.standard_normal(n)))]
                       for _ in range(instances)])
    own = [round(float(x), 3) for x in rng.uniform(0.5, 2.0, ROUNDS)]
    return {"config": name, "contender": contender, "kind": kind, "instances": instances, "threads": threads,
            "rounds": rounds, "own_cpu": own}


def throughput(out):
    rng = np.random.default_rng(11)
    samples = {"seed": 1, "configs": [
        config(rng, "py-jit 1x2", "py-jit", "peer", 1, 2, 2.0e6, 30),
        config(rng, "py-jit 2x1", "py-jit", "peer", 2, 1, 3.0e6, 20),
        config(rng, "ort-fp32 2x1", "ort-fp32", "peer", 2, 1, 2.5e6, 25),
        config(rng, "ts-bench 1x2", "ts-bench", "torchspeed", 1, 2, 1.2e6, 50),
        config(rng, "ts-bench 2x1", "ts-bench", "torchspeed", 2, 1, 1.5e6, 40),
    ]}
    want = {"configs": {}, "best": {}}
    for c in samples["configs"]:
        rates = [window_rate(s) for s in c["rounds"]]
        lat = np.asarray([x for r in c["rounds"] for s in r for x in s], dtype=float)
        p50, p99 = np.percentile(lat, [50, 99])
        want["configs"][c["config"]] = {"round_items_per_s": rates, "items_per_s": float(np.median(rates)),
                                        "items_per_s_ci95": median_ci(np.asarray(rates) * 1e6),
                                        "p50_ms": p50 / 1e6, "p99_ms": p99 / 1e6, "calls": int(lat.size),
                                        "items_per_cpu_s": float(np.median(np.asarray(rates) / c["own_cpu"]))}
        b = want["best"].get(c["contender"])
        if b is None or want["configs"][b]["items_per_s"] < want["configs"][c["config"]]["items_per_s"]:
            want["best"][c["contender"]] = c["config"]
    peers = [c["config"] for c in samples["configs"] if c["kind"] == "peer"]
    want["best_peer"] = max(peers, key=lambda k: want["configs"][k]["items_per_s"])
    for c in samples["configs"]:
        if c["kind"] == "torchspeed":
            w = want["configs"][c["config"]]
            w["ratio_to_best_peer"] = w["items_per_s"] / want["configs"][want["best_peer"]]["items_per_s"]
    with open(os.path.join(out, "throughput_samples.json"), "w") as f:
        json.dump(samples, f)
    with open(os.path.join(out, "throughput_want.json"), "w") as f:
        json.dump(want, f, indent=1)


if __name__ == "__main__":
    main()
