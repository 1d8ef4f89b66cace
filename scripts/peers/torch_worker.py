#!/usr/bin/python3
"""One plain-PyTorch contender of `make bench-peers`: what a user does by hand in Python.

Usage: /usr/bin/python3 torch_worker.py --model M.pt --input X.npy --recipe R --threads N
           [--calib C.npy] [--ref OUT.npy] [--warmup W] [--save Q.pt] [--stream-sr SR]

With --stream-sr (stateful streaming models such as Silero VAD), X.npy holds the ordered
chunks (call i takes slice i) and every call is forward(chunk, SR) with the model's state
carried in its attributes; at the end of the stream reset_states() starts it over, untimed.
The ready line then gives max_abs_vs_ref: the largest difference from REF over the whole
stream, run from a reset state.

Recipes (each the documented way to speed a TorchScript model up in PyTorch 1.13):
  jit             torch.jit.load, eval, no_grad
  freeze_ofi      torch.jit.freeze + torch.jit.optimize_for_inference
  cl_freeze_ofi   weights and input channels-last, then freeze + optimize_for_inference (CNNs)
  int8_static     torch.ao.quantization.quantize_jit, static post-training, calibrated on
                  --calib, engine onednn (the one torchspeed picks on this libtorch)
  int8_dynamic    torch.ao.quantization.quantize_dynamic_jit (weights INT8, activations
                  quantized at run time: transformers)

Protocol (the same as `torchspeed bench --serve`, the ONNX Runtime and the Go workers):
prints "ready {json}" once the model is prepared and warmed up; then answers each "run K"
line on stdin with "ns" and K latencies in nanoseconds, after one untimed run that re-warms
caches another process used meanwhile; "quit" or end of input stops it. A failure before
"ready" prints "error <message>" and exits 1.
"""

import argparse
import json
import os
import sys
import time

# Debian's torch calls OpenBLAS for float matmul; torch.set_num_threads does not reach it, and
# OpenBLAS reads this variable when torch loads it. A user who sets threads sets both.
if "--threads" in sys.argv:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", sys.argv[sys.argv.index("--threads") + 1])

import numpy as np  # noqa: E402
from workerlib import cosine, first_tensor  # noqa: E402
import workerlib  # noqa: E402
import torch  # noqa: E402
from torch.ao.quantization import (MinMaxObserver, PerChannelMinMaxObserver, QConfig,  # noqa: E402
                                   default_dynamic_qconfig, quantize_dynamic_jit, quantize_jit)

ENGINE = "onednn"
# The qconfig of the fixtures' INT8 references (scripts/fixtures/quantize_reference.py), which
# torchspeed's own quantizer matches: activations per-tensor quint8, weights per-channel qint8.
QCONFIG = QConfig(
    activation=MinMaxObserver.with_args(dtype=torch.quint8, qscheme=torch.per_tensor_affine,
                                        reduce_range=False),
    weight=PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric),
)
CALIB_BATCH = 16
RECIPES = ("jit", "freeze_ofi", "cl_freeze_ofi", "int8_static", "int8_dynamic")


def prepare(args):
    """Returns (callable taking no arguments, notes)."""
    model = torch.jit.load(args.model).eval()
    x = torch.from_numpy(np.load(args.input))
    notes = []
    if args.recipe == "jit":
        pass
    elif args.recipe in ("freeze_ofi", "cl_freeze_ofi"):
        if args.recipe == "cl_freeze_ofi":
            if x.dim() != 4:
                raise ValueError(f"recipe cl_freeze_ofi needs a 4-D image input, {args.input} is {x.dim()}-D")
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        if args.stream_sr:
            # The reset method must survive freezing, and the state attributes stay mutable.
            model = torch.jit.freeze(model, preserved_attrs=["reset_states"])
            try:
                model = torch.jit.optimize_for_inference(model)
            except Exception as e:  # noqa: BLE001 -- what a user does: keep the frozen model
                notes.append(f"optimize_for_inference failed ({type(e).__name__}), frozen model kept")
        else:
            model = torch.jit.optimize_for_inference(torch.jit.freeze(model))
    elif args.recipe == "int8_static":
        if not args.calib:
            raise ValueError("recipe int8_static needs --calib (calibration inputs, npy)")
        torch.backends.quantized.engine = ENGINE
        calib = torch.from_numpy(np.load(args.calib))

        def calibrate(m, data):
            for i in range(0, len(data), CALIB_BATCH):
                m(data[i:i + CALIB_BATCH])
        model = quantize_jit(model, {"": QCONFIG}, calibrate, [calib])
        notes.append(f"quantize_jit engine {ENGINE}, {len(calib)} calibration inputs "
                     f"from {os.path.basename(args.calib)}")
    elif args.recipe == "int8_dynamic":
        torch.backends.quantized.engine = ENGINE
        model = quantize_dynamic_jit(model, {"": default_dynamic_qconfig})
        notes.append(f"quantize_dynamic_jit engine {ENGINE}, default_dynamic_qconfig")
    else:
        raise ValueError(f"unknown recipe {args.recipe!r}: want one of {', '.join(RECIPES)}")
    if args.save:
        torch.jit.save(model, args.save)
    return model, x, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--recipe", required=True, choices=RECIPES)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--calib")
    ap.add_argument("--ref", help="the FP32 reference output (npy) for the cosine in the ready line")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--save", help="save the prepared model here (to inspect its graph)")
    ap.add_argument("--stream-sr", type=int, default=0,
                    help="stream the chunks of --input in order through forward(chunk, SR), state carried")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    if args.stream_sr:
        return stream_main(args)
    t0 = time.perf_counter()
    try:
        model, x, notes = prepare(args)
        for _ in range(max(1, args.warmup)):
            out = model(x)
    except Exception as e:  # the driver records why this contender has no figures
        msg = " ".join(str(e).split())[:600]
        print(f"error {type(e).__name__}: {msg}", flush=True)
        sys.exit(1)
    info = {"recipe": args.recipe, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "qengine": torch.backends.quantized.engine, "setup_s": round(time.perf_counter() - t0, 3),
            "notes": notes}
    if args.ref:
        info["cosine_vs_fp32"] = cosine(first_tensor(out).float().numpy(), np.load(args.ref))
    print("ready " + json.dumps(info), flush=True)
    workerlib.serve(lambda: model(x), sys.stdin, sys.stdout)


class Stream:
    """The ordered chunks of a streaming model, called one at a time with the state carried."""

    def __init__(self, model, chunks, sr):
        self.model, self.sr, self.pos = model, sr, 0
        self.chunks = [chunks[i] for i in range(len(chunks))]
        model.reset_states()

    def call(self):
        if self.pos == len(self.chunks):
            self.model.reset_states()
            self.pos = 0
        out = self.model(self.chunks[self.pos], self.sr)
        self.pos += 1
        return out

    def max_abs_vs(self, ref):
        """Runs the whole stream from a reset state and returns the largest difference from ref."""
        self.pos = len(self.chunks)
        got = np.stack([first_tensor(self.call()).float().numpy() for _ in self.chunks])
        return float(np.abs(got.reshape(ref.shape) - ref).max())


def stream_main(args):
    t0 = time.perf_counter()
    try:
        model, chunks, notes = prepare(args)
        st = Stream(model, chunks, args.stream_sr)
        err = st.max_abs_vs(np.load(args.ref)) if args.ref else None
        for _ in range(max(1, args.warmup)):
            st.call()
    except Exception as e:  # the driver records why this contender has no figures
        msg = " ".join(str(e).split())[:600]
        print(f"error {type(e).__name__}: {msg}", flush=True)
        sys.exit(1)
    info = {"recipe": args.recipe, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "setup_s": round(time.perf_counter() - t0, 3), "notes": notes, "stream_calls": len(st.chunks)}
    if err is not None:
        info["max_abs_vs_ref"] = err
    print("ready " + json.dumps(info), flush=True)

    def restart_at_end():
        if st.pos == len(st.chunks):
            st.model.reset_states()
            st.pos = 0
    workerlib.serve(st.call, sys.stdin, sys.stdout, between=restart_at_end)


if __name__ == "__main__":
    main()
