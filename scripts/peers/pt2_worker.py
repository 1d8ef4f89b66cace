#!/usr/bin/python3
"""The PyTorch 2 contenders of `make bench-peers`: torch.compile and PT2E INT8, as a user of
PyTorch 2.x speeds a model up, on the same weights as every other contender.

Usage: python3 pt2_worker.py --model M.pt --fixture NAME --input X.npy --recipe R --threads N
           [--calib C.npy] [--ref OUT.npy] [--warmup W] [--check-weights]

Runs in the Debian 13 root (python3-torch 2.6) through scripts/peers/pt2-run.sh. The fixtures
are TorchScript files; torch.compile needs the eager module, so the worker builds it from the
fixture generators' definitions (scripts/fixtures/generate.py: torchvision's constructors, the
TransformerEncoder, DigitsNet), loads the TorchScript file's state_dict into it (strict: every
parameter and buffer) and checks the eager output equals the TorchScript output on the input
before anything is compiled or timed; the largest difference goes into the ready line.

Recipes:
  inductor                 torch.compile(model), Inductor, default mode, TORCHINDUCTOR_FREEZING=1
  inductor_max_autotune    the same with mode="max-autotune"
  pt2e_int8                torch.export.export_for_training, prepare_pt2e with
                           X86InductorQuantizer's default (static) config, calibrated one input
                           at a time on --calib (quantize_jit's peer's data), convert_pt2e, then
                           torch.compile with freezing

--check-weights only builds the eager module, transfers the weights and checks the outputs
agree (it prints one JSON line and exits 0, or "error ..." and 1): this part also runs in
PyTorch 1.13.

Protocol: the same as torch_worker.py ("ready {json}", then "run K" answered by "ns ...").
The ready line carries compile_s: the first call's time, where torch.compile compiles.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE_SCRIPTS = os.path.join(os.path.dirname(HERE), "fixtures")

# As torch_worker.py: OpenBLAS reads its thread count when torch loads it.
if "--threads" in sys.argv[:-1]:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", sys.argv[sys.argv.index("--threads") + 1])

import numpy as np  # noqa: E402
from workerlib import cosine, first_tensor  # noqa: E402
import workerlib  # noqa: E402
import torch  # noqa: E402

RECIPES = ("inductor", "inductor_max_autotune", "pt2e_int8")
TORCHVISION = ("resnet18", "resnet50", "mobilenet_v2")
# The eager output may differ from the TorchScript one by float reassociation only (the
# TransformerEncoder's eager fast path is a fused kernel): relative to the output's magnitude.
SAME_WEIGHTS_TOL = 1e-4


def fixture_generators():
    """scripts/fixtures/generate.py, imported for its module definitions; it sets OpenBLAS's
    thread count for its own runs, which must not leak into this worker's."""
    saved = os.environ.get("OPENBLAS_NUM_THREADS")
    sys.path.insert(0, FIXTURE_SCRIPTS)
    try:
        import generate
    finally:
        if saved is None:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = saved
    return generate


def eager_module(name):
    """The eager module the fixture NAME was traced or scripted from, with fresh weights."""
    if name in TORCHVISION:
        import torchvision
        return getattr(torchvision.models, name)(weights=None)
    gen = fixture_generators()
    if name in ("transformer_traced", "transformer_scripted"):
        return gen.transformer_encoder()
    if name in ("digits", "outlier"):
        return gen.DigitsNet(outlier=name == "outlier")
    known = TORCHVISION + ("transformer_traced", "transformer_scripted", "digits", "outlier")
    raise ValueError(f"fixture {name!r}: no eager module known to pt2_worker.py (have {', '.join(known)})")


def same_weights(name, path, x):
    """(eager module with the TorchScript file's weights, max |eager - TorchScript| on x).
    Raises when a parameter is missing or left over, or the outputs differ."""
    ts = torch.jit.load(path).eval()
    eager = eager_module(name).eval()
    eager.load_state_dict(ts.state_dict(), strict=True)
    with torch.no_grad():
        a = first_tensor(eager(x)).float()
        b = first_tensor(ts(x)).float()
    if a.shape != b.shape:
        raise ValueError(f"{path}: the eager {name} gives shape {tuple(a.shape)}, "
                         f"the TorchScript file {tuple(b.shape)}")
    diff = (a - b).abs().max().item()
    scale = max(1.0, b.abs().max().item())
    if not diff <= SAME_WEIGHTS_TOL * scale:
        raise ValueError(f"{path}: the eager {name} with its state_dict differs from the TorchScript output by "
                         f"{diff:.3g} (tolerance {SAME_WEIGHTS_TOL * scale:.3g}): not the same network")
    return eager, diff


def quantize_pt2e(model, x, calib_path):
    """PT2E static INT8 for Inductor on x86, calibrated on every input of calib_path."""
    from torch.ao.quantization.quantize_pt2e import convert_pt2e, prepare_pt2e
    import torch.ao.quantization.quantizer.x86_inductor_quantizer as xiq
    calib = torch.from_numpy(np.load(calib_path))
    exported = torch.export.export_for_training(model, (x,)).module()
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(exported, quantizer)
    # The export is for batch 1 (the timed shape): one calibration input per call.
    for i in range(len(calib)):
        prepared(calib[i:i + 1])
    converted = convert_pt2e(prepared)
    torch.ao.quantization.move_exported_model_to_eval(converted)
    # Weights quantized by convert_pt2e show as dequantize_per_channel nodes: none means the
    # quantizer annotated no conv or linear, and the "INT8" model would be the float one.
    ops = [str(n.target) for n in converted.graph.nodes if n.op == "call_function"]
    weights = sum("dequantize_per_channel" in t for t in ops)
    if weights == 0:
        raise ValueError("X86InductorQuantizer quantized no layer of this model (export records no conv or linear "
                         "it annotates): no INT8 model to time")
    return converted, (f"X86InductorQuantizer default config, {len(calib)} calibration inputs from "
                       f"{os.path.basename(calib_path)}: {weights} layer(s) INT8")


def prepare(args, x):
    """(compiled model, info) after the first call, which compiles."""
    t0 = time.perf_counter()
    eager, diff = same_weights(args.fixture, args.model, x)
    info = {"eager_vs_torchscript_maxabs": diff,
            "notes": [f"eager {args.fixture} with the TorchScript state_dict: max |diff| {diff:.2e}"]}
    if any(isinstance(m, torch.nn.TransformerEncoderLayer) for m in eager.modules()):
        # Without grad, nn.TransformerEncoderLayer takes its fused fast path, one opaque
        # kernel per layer: Inductor would only call it, and PT2E would find no linear layer
        # to quantize. Off, both see the layers' linears, attention and norms.
        torch.backends.mha.set_fastpath_enabled(False)
        info["notes"].append("nn.MultiheadAttention fast path off (torch.backends.mha)")
    if args.recipe == "pt2e_int8":
        if not args.calib:
            raise ValueError("recipe pt2e_int8 needs --calib (calibration inputs, npy)")
        eager, note = quantize_pt2e(eager, x, args.calib)
        info["notes"].append(note)
        info["quantize_s"] = round(time.perf_counter() - t0, 3)
    mode = "max-autotune" if args.recipe == "inductor_max_autotune" else None
    import torch._inductor.config as inductor_config
    info["freezing"] = bool(inductor_config.freezing)
    from torch._dynamo.utils import counters
    # Counted over the compile only (export_for_training also runs dynamo).
    graphs0, breaks0 = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
    model = torch.compile(eager, mode=mode)
    t1 = time.perf_counter()
    model(x)
    info["compile_s"] = round(time.perf_counter() - t1, 3)
    info["graphs"] = counters["stats"]["unique_graphs"] - graphs0
    info["graph_breaks"] = sum(counters["graph_break"].values()) - breaks0
    info["notes"].append(f"torch.compile mode {mode or 'default'}, freezing {info['freezing']}: {info['graphs']} "
                         f"graph(s), {info['graph_breaks']} break(s), compiled in {info['compile_s']} s")
    return model, info


def protocol_files():
    """(input, output) of the protocol, on copies of file descriptors 0 and 1: max-autotune's
    benchmarking closes descriptor 0 and Inductor prints its autotuning tables on 1; those
    prints go to standard error (the driver's log) instead."""
    proto_in = os.fdopen(os.dup(0), "r")
    proto_out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto_in, proto_out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="the fixture's TorchScript file")
    ap.add_argument("--fixture", required=True, help="the fixture's name (which eager module)")
    ap.add_argument("--input", required=True)
    ap.add_argument("--recipe", choices=RECIPES)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--calib")
    ap.add_argument("--ref", help="the FP32 reference output (npy) for the cosine in the ready line")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--check-weights", action="store_true",
                    help="only check the weight transfer (no compile, no timing)")
    args = ap.parse_args()
    if not args.check_weights and not args.recipe:
        ap.error("--recipe is required (unless --check-weights)")
    if args.threads < 1:
        ap.error(f"--threads {args.threads}: want 1 or more")
    proto_in, proto_out = protocol_files()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    t0 = time.perf_counter()
    try:
        x = torch.from_numpy(np.load(args.input))
        if args.check_weights:
            _, diff = same_weights(args.fixture, args.model, x)
            print(json.dumps({"fixture": args.fixture, "torch": torch.__version__,
                              "eager_vs_torchscript_maxabs": diff}), file=proto_out)
            return
        model, info = prepare(args, x)
        for _ in range(max(1, args.warmup)):
            out = model(x)
    except Exception as e:  # the driver records why this contender has no figures
        msg = " ".join(str(e).split())[:600]
        print(f"error {type(e).__name__}: {msg}", file=proto_out)
        sys.exit(1)
    info.update({"recipe": args.recipe, "threads": torch.get_num_threads(), "torch": torch.__version__,
                 "setup_s": round(time.perf_counter() - t0, 3)})
    if args.ref:
        info["cosine_vs_fp32"] = cosine(first_tensor(out).float().numpy(), np.load(args.ref))
    print("ready " + json.dumps(info), file=proto_out)
    workerlib.serve(lambda: model(x), proto_in, proto_out)


if __name__ == "__main__":
    main()
