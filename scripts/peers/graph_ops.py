#!/usr/bin/python3
"""Op counts of TorchScript models' forward graphs, side by side: what stayed FP32, which
convolutions fused their activation, how many quantize/dequantize pairs a quantized graph has.

Usage: /usr/bin/python3 scripts/peers/graph_ops.py A.pt [B.pt ...] [--engine onednn] [--graph]

Each model is loaded with the quantized engine set first (an INT8 model's packed weights belong
to it), its forward graph inlined; calls into submodules are inlined too, so a module that was
not frozen shows the ops it would run. --graph also prints each graph.
"""

import argparse
import collections
import sys

import torch


def ops(path, engine, show):
    torch.backends.quantized.engine = engine
    m = torch.jit.load(path).eval()
    g = m.forward.graph.copy()
    torch._C._jit_pass_inline(g)
    if show:
        print(f"==== {path}\n{g}")
    count = collections.Counter()
    for n in g.nodes():
        k = n.kind()
        if k in ("prim::Constant", "prim::GetAttr", "prim::ListConstruct", "prim::TupleConstruct"):
            continue
        count[k] += 1
    return count


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--engine", default="onednn")
    ap.add_argument("--graph", action="store_true")
    args = ap.parse_args()
    counts = [ops(p, args.engine, args.graph) for p in args.models]
    kinds = sorted(set().union(*counts))
    w = max(len(k) for k in kinds)
    print(f"{'op':<{w}}  " + "  ".join(f"{i:>6}" for i in range(len(args.models))))
    for k in kinds:
        print(f"{k:<{w}}  " + "  ".join(f"{c[k]:>6}" for c in counts))
    for i, p in enumerate(args.models):
        print(f"{i}: {p}", file=sys.stderr)


if __name__ == "__main__":
    main()
