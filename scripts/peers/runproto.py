"""The run protocol every Python peer worker speaks after its "ready" line (bench_peers.py is the
other end): "run K" is answered with one untimed call, then K timed calls, their nanoseconds on
one "ns T1 ... TK" line; "quit" ends; anything else gets an "error" line and the worker waits for
the next request."""

import time


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
