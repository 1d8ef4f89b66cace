"""What the Python peer workers share: the outputs' first tensor and cosine for the ready line,
and the run protocol they speak after it (bench_peers.py is the other end): "run K" is answered
with one untimed call, then K timed calls, their nanoseconds on one "ns T1 ... TK" line; "quit"
ends; anything else gets an "error" line and the worker waits for the next request."""

import time

import numpy as np


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def first_tensor(out):
    """The first tensor of a model's output, however nested in tuples, lists and dicts."""
    while isinstance(out, (tuple, list)):
        out = out[0]
    if isinstance(out, dict):
        return first_tensor(next(iter(out.values())))
    return out


def serve(call, proto_in, proto_out, between=None):
    """Answers proto_in's requests on proto_out, timing call(). between(), when given, runs before
    each timed call outside its timing (a stream's reset at its end)."""
    clock = time.perf_counter_ns
    for line in proto_in:
        f = line.split()
        if f == ["quit"]:
            return
        if len(f) != 2 or f[0] != "run" or not f[1].isdigit() or int(f[1]) < 1:
            print(f"error {line.strip()!r}: want \"run K\" with K >= 1, or \"quit\"", file=proto_out, flush=True)
            continue
        call()
        ns = []
        for _ in range(int(f[1])):
            if between is not None:
                between()
            t = clock()
            call()
            ns.append(clock() - t)
        print("ns " + " ".join(map(str, ns)), file=proto_out, flush=True)
