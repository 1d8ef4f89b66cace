#!/usr/bin/python3
"""Would libtorch's Static Runtime (torch::jit::StaticModule) pay as an execution mode?

Usage: /usr/bin/python3 scripts/peers/static_runtime.py MODEL.pt INPUT.npy [--threads 2]
           [--rounds 15] [--block 200] [--engine onednn]

Times, interleaved in shuffled rounds in one process: the frozen TorchScript module through the
interpreter ("jit-frozen") and the same frozen module through Static Runtime
(torch._C._jit_to_static_module, the binding of the C++ StaticModule that Debian's libtorch
exports). Works for FP32 and INT8 (quantize_jit or torchspeed artifacts) models; prints the
median of each, p95, and the median of per-round ratios with the min-max range.
"""

import argparse
import os
import random
import sys
import time

if "--threads" in sys.argv:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", sys.argv[sys.argv.index("--threads") + 1])

import numpy as np  # noqa: E402
import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("input")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block", type=int, default=200)
    ap.add_argument("--engine", default="onednn")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    torch.backends.quantized.engine = args.engine
    m = torch.jit.load(args.model).eval()
    try:
        m = torch.jit.freeze(m)
    except RuntimeError:
        pass  # already frozen (quantize_jit's result, INT8 artifacts)
    x = torch.from_numpy(np.load(args.input))
    sm = torch._C._jit_to_static_module(m._c)
    ref = m(x)
    got = sm(x)
    ok = torch.allclose(ref, got, rtol=1e-4, atol=1e-5)
    runs = {"jit-frozen": lambda: m(x), "static-runtime": lambda: sm(x)}
    for f in runs.values():
        for _ in range(20):
            f()
    samples = {k: [] for k in runs}
    ratios = []
    rng = random.Random(1)
    for _ in range(args.rounds):
        order = list(runs)
        rng.shuffle(order)
        med = {}
        for k in order:
            ts = []
            runs[k]()
            for _ in range(args.block):
                t = time.perf_counter_ns()
                runs[k]()
                ts.append(time.perf_counter_ns() - t)
            samples[k] += ts
            med[k] = float(np.median(ts))
        ratios.append(med["static-runtime"] / med["jit-frozen"])
    print(f"{args.model}: threads {args.threads}, outputs equal: {ok}, load {os.getloadavg()[0]:.2f}")
    for k, s in samples.items():
        print(f"  {k:15s} p50 {np.median(s) / 1e3:9.1f} us  p95 {np.percentile(s, 95) / 1e3:9.1f} us")
    print(f"  static/jit p50 ratio: median {np.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
