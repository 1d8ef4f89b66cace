#!/usr/bin/env python3
"""Which oneDNN kernels a model's forward runs, how long each takes, and how close they come to
the CPU's peak, from a ONEDNN_VERBOSE=1 (DNNL_VERBOSE=1) log of repeated forwards.

Usage: /usr/bin/python3 scripts/peers/onednn_layers.py LOG [--vs LOG2] [--forwards K] [--peak-gops G | --report R]
       [--json]

LOG holds the verbose lines of a process that ran the same forward several times (torchspeed
bench, a peer's worker, any script). The forward is the shortest sequence of primitives that
repeats at the end of the log; the last K repeats (all complete ones by default) are read, and
each primitive's time is its minimum over them: on a shared machine the minimum is the time the
kernel needs, the median the time the scheduler left it. Work is counted as multiply-adds from
the problem descriptors (convolution, inner product, matmul), and the fraction of peak uses
--peak-gops (int8 or float operations per second of the CPUs the forward ran on, in units of
1e9, two per multiply-add, as `torchspeed optimize`'s report counts them) or the roofline of a
report.json (--report: its peak_per_s, measured on the threads the artifact ran at).

Why: comparing two runtimes' INT8 convolutions layer by layer (the same implementation, layout
and weight format, reorders between layers or not) says whether one can still be made faster,
or whether both already run the machine's kernels near its peak.
"""

import argparse
import json
import re
import sys
from collections import OrderedDict

PREFIXES = ("onednn_verbose,exec,", "dnnl_verbose,exec,")


def read_exec(path):
    """The exec lines of a verbose log as dicts (primitive, impl, formats, problem, ms)."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            if not line.startswith(PREFIXES):
                continue
            p = line.rstrip("\n").split(",")
            # exec,engine,primitive,impl,prop_kind,memory descriptors,attributes,auxiliary,problem,time
            if len(p) < 11:
                continue
            try:
                ms = float(p[-1])
            except ValueError:
                continue
            out.append({"primitive": p[3], "impl": p[4], "formats": p[6], "attrs": p[7],
                        "problem": p[-2], "ms": ms})
    return out


def find_period(recs):
    """The number of primitives per forward: the smallest p whose last two blocks of p records
    run the same primitives on the same problems (0 when nothing repeats)."""
    keys = [(r["primitive"], r["impl"], r["problem"]) for r in recs]
    n = len(keys)
    for p in range(1, n // 2 + 1):
        if keys[n - p:] == keys[n - 2 * p:n - p]:
            return p
    return 0


def complete_repeats(recs, p):
    """How many blocks of p records at the end of recs repeat the last one."""
    keys = [(r["primitive"], r["impl"], r["problem"]) for r in recs]
    last, k = keys[len(keys) - p:], 1
    while (k + 1) * p <= len(keys) and keys[len(keys) - (k + 1) * p:len(keys) - k * p] == last:
        k += 1
    return k


def _num(pattern, s, default=None):
    m = re.search(pattern, s)
    return int(m.group(1)) if m else default


def macs(rec):
    """Multiply-adds of one primitive from its problem descriptor (0 when not counted)."""
    s, prim = rec["problem"], rec["primitive"]
    if prim == "convolution" or prim == "deconvolution":
        mb, g = _num(r"mb(\d+)", s, 1), _num(r"g(\d+)", s, 1)
        ic, oc = _num(r"ic(\d+)", s), _num(r"oc(\d+)", s)
        if ic is None or oc is None:
            return 0
        n = mb * (ic // g) * oc
        for d in "dhw":
            n *= _num(r"o%s(\d+)" % d, s, 1) * _num(r"k%s(\d+)" % d, s, 1)
        return n
    if prim == "inner_product":
        return _num(r"mb(\d+)", s, 1) * (_num(r"ic(\d+)", s, 0) or 0) * (_num(r"oc(\d+)", s, 0) or 0)
    if prim == "matmul":
        parts = s.split(":")
        if len(parts) < 2:
            return 0
        try:
            src = [int(x) for x in parts[0].split("x")]
            wei = [int(x) for x in parts[1].split("x")]
        except ValueError:
            return 0
        n = wei[-1]
        for x in src:
            n *= x
        return n
    return 0


def layout(rec):
    """The src and dst format tags of a primitive's memory descriptors ("src_u8::blocked:acdb:f0
    ..." -> {"src": "u8:acdb", ...})."""
    out = {}
    for md in rec["formats"].split(" "):
        m = re.match(r"(src|dst|wei)_(\w+?):[^:]*:\w+:([A-Za-z0-9]+)", md)
        if m:
            out[m.group(1)] = m.group(2) + ":" + m.group(3)
    return out


def analyse(recs, forwards=0, peak_gops=0.0):
    p = find_period(recs)
    if p == 0:
        raise ValueError("no repeated forward in the log: run the same forward at least twice with "
                         "ONEDNN_VERBOSE=1")
    k = complete_repeats(recs, p)
    if forwards > 0:
        k = min(k, forwards)
    block = recs[len(recs) - k * p:]
    layers, kinds = [], OrderedDict()
    total_ms = total_macs = 0.0
    for i in range(p):
        r = block[i]
        t = min(block[j * p + i]["ms"] for j in range(k))
        n = macs(r)
        ly = layout(r)
        layers.append({"primitive": r["primitive"], "impl": r["impl"], "problem": r["problem"],
                       "layout": ly, "min_ms": t, "macs": n})
        kind = "%s %s" % (r["primitive"], r["impl"])
        if r["primitive"] == "convolution":
            kh, kw = _num(r"kh(\d+)", r["problem"], 1), _num(r"kw(\d+)", r["problem"], 1)
            kind += " %dx%d" % (kh, kw)
            if _num(r"ic(\d+)", r["problem"], 0) // _num(r"g(\d+)", r["problem"], 1) < 8:
                kind += " (ic < 8)"
        e = kinds.setdefault(kind, {"count": 0, "min_ms": 0.0, "macs": 0})
        e["count"] += 1
        e["min_ms"] += t
        e["macs"] += n
        total_ms += t
        total_macs += n
    reorders = [ly for ly in layers if ly["primitive"] == "reorder"]
    res = {"primitives_per_forward": p, "forwards": k, "min_ms": total_ms, "macs": total_macs,
           "kinds": kinds, "layers": layers, "reorders_per_forward": len(reorders),
           "reorders": [r["problem"] for r in reorders],
           "activation_layouts": sorted({ly["layout"].get(x, "") for ly in layers
                                         if ly["primitive"] == "convolution" for x in ("src", "dst")})}
    if peak_gops > 0:
        res["peak_gops"] = peak_gops
        res["fraction_of_peak"] = 2 * total_macs / (total_ms * 1e-3) / (peak_gops * 1e9) if total_ms else 0.0
        for e in kinds.values():
            e["fraction_of_peak"] = 2 * e["macs"] / (e["min_ms"] * 1e-3) / (peak_gops * 1e9) if e["min_ms"] else 0.0
    return res


def peak_of_report(path):
    with open(path) as f:
        rep = json.load(f)
    roof = rep.get("roofline") if isinstance(rep, dict) else None
    peak = roof.get("peak_per_s") if isinstance(roof, dict) else None
    if not isinstance(peak, (int, float)) or peak <= 0:
        raise ValueError("%s: no roofline.peak_per_s (optimize measures it on conv and matmul models)" % path)
    return peak / 1e9


def render(res):
    lines = ["%d primitives per forward, minimum of %d forwards: %.3f ms, %.1f M multiply-adds"
             % (res["primitives_per_forward"], res["forwards"], res["min_ms"], res["macs"] / 1e6)]
    if "fraction_of_peak" in res:
        lines[0] += ", %.1f%% of the peak (%.1f G ops/s)" % (100 * res["fraction_of_peak"], res["peak_gops"])
    for kind, e in res["kinds"].items():
        s = "  %-58s %3d  %8.3f ms" % (kind, e["count"], e["min_ms"])
        if e["macs"]:
            s += "  %9.1f M MAC  %6.1f G MAC/s" % (e["macs"] / 1e6, e["macs"] / e["min_ms"] / 1e6 if e["min_ms"] else 0)
            if "fraction_of_peak" in e:
                s += "  %5.1f%%" % (100 * e["fraction_of_peak"])
        lines.append(s)
    lines.append("convolution activation layouts: %s" % (", ".join(res["activation_layouts"]) or "none"))
    listed = (" (" + "; ".join(res["reorders"]) + ")") if res["reorders"] else ""
    lines.append("reorders per forward: %d%s" % (res["reorders_per_forward"], listed))
    return "\n".join(lines)


def compare(a, b):
    """Two analyses of the same model (e.g. a peer's log and torchspeed's): the problems only one
    runs, the ones both run with another implementation or layout, and b's time over a's. Layers
    are matched by primitive and problem (the n-th such layer with the n-th), not by position:
    two graphs may order independent layers differently."""
    def keyed(res):
        seen, out = {}, {}
        for ly in res["layers"]:
            k = (ly["primitive"], ly["problem"])
            seen[k] = seen.get(k, 0) + 1
            out[k + (seen[k],)] = ly
        return out
    ka, kb = keyed(a), keyed(b)
    diffs = []
    for k in ka:
        if k not in kb:
            diffs.append("%s %s (#%d): only in the first" % k)
    for k in kb:
        if k not in ka:
            diffs.append("%s %s (#%d): only in the second" % k)
    for k, x in ka.items():
        y = kb.get(k)
        if y is None:
            continue
        fields = [f for f in ("impl", "layout") if x[f] != y[f]]
        if fields:
            diffs.append("%s %s (#%d): " % k + "; ".join("%s %s against %s" % (f, x[f], y[f]) for f in fields))
    return {"same_kernels": not diffs, "ratio": b["min_ms"] / a["min_ms"] if a["min_ms"] else 0.0,
            "differences": diffs}


def render_compare(c, a_name, b_name):
    lines = ["%s over %s, sums of per-primitive minimums: %.3f" % (b_name, a_name, c["ratio"]),
             "same kernels, layouts and problems in every layer" if c["same_kernels"]
             else "%d difference(s):" % len(c["differences"])]
    lines += ["  " + d for d in c["differences"]]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", help="a ONEDNN_VERBOSE=1 log of several forwards")
    ap.add_argument("--forwards", type=int, default=0, help="read the last K forwards (0: every complete one)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--peak-gops", type=float, default=0.0,
                   help="the CPUs' peak in 1e9 operations/s (two per multiply-add), as the threads used reach it")
    g.add_argument("--report", help="take the peak from this torchspeed report.json's roofline")
    ap.add_argument("--vs", help="a second log of the same model: say, layer by layer, whether both ran the same "
                                 "kernels on the same layouts, and the second's time over the first's")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    if args.forwards < 0 or args.peak_gops < 0:
        ap.error("--forwards and --peak-gops must be >= 0")
    try:
        peak = peak_of_report(args.report) if args.report else args.peak_gops
        res = analyse(read_exec(args.log), args.forwards, peak)
        if args.vs:
            other = analyse(read_exec(args.vs), args.forwards, peak)
            c = compare(res, other)
            res = {"log": res, "vs": other, "compare": c}
    except (OSError, ValueError) as e:
        print("onednn_layers: %s" % e, file=sys.stderr)
        return 2
    try:
        if args.json:
            print(json.dumps(res, indent=1))
        elif args.vs:
            parts = [args.log + ":", render(res["log"]), args.vs + ":", render(res["vs"]),
                     render_compare(res["compare"], args.log, args.vs)]
            print("\n".join(parts))
        else:
            print(render(res))
    except BrokenPipeError:  # a reader such as head that stopped early is not an error
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
