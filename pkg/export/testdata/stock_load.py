"""Runs a TorchScript file as a stock PyTorch process does: torch.ops.load_library of an op
library (when one is given), then torch.jit.load, on inputs saved as .npy files; writes each
output tensor of forward to OUTDIR/<index>.npy.

usage: stock_load.py OPLIB|- THREADS ENGINE|- MODEL OUTDIR INPUT.npy...
"""
import os
import sys

import numpy as np
import torch


def main():
    oplib, threads, engine, model, outdir = sys.argv[1:6]
    if oplib != "-":
        torch.ops.load_library(oplib)
    torch.set_num_threads(int(threads))
    if engine != "-":
        torch.backends.quantized.engine = engine
    m = torch.jit.load(model)
    m.eval()
    inputs = [torch.from_numpy(np.load(p)) for p in sys.argv[6:]]
    with torch.inference_mode():
        out = m(*inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    for i, o in enumerate(outs):
        np.save(os.path.join(outdir, "%d.npy" % i), o.contiguous().numpy())


if __name__ == "__main__":
    main()
