"""The throughput mode of `make bench-peers` (bench_peers.py --throughput): items/s at
saturation on all CPUs, torchspeed against ONNX Runtime and PyTorch, each in its best
configuration.

Every contender runs as N concurrent streams at batch 1 for every factorization N x T of the
CPUs (instances x threads: 1x2 and 2x1 on 2 CPUs):
  py-jit, py-int8   N torch_worker.py processes of T threads (torch.jit.load; quantize_jit
                    static INT8 for CNNs, quantize_dynamic_jit for transformers), unpinned, as
                    a user starts N Python workers
  ort-fp32          N ONNX Runtime sessions of T intra-op threads, one per node process
                    (--pin-peers: each peer also with stream i pinned by taskset to the CPUs of
                    launch's instance i, as its own configuration)
  ts-bench, ts-go   N instances of the artifact, each started by `torchspeed launch --cpus C
                    --mode throughput --artifact ART` on the CPUs `torchspeed launch --instances N`
                    gives instance i (what `torchspeed bench --instances N` and a deployment
                    through launch do): `torchspeed bench --serve`, and the Go API (goworker)
All configurations stay loaded and stopped (SIGSTOP) outside their turns; each round times every
configuration once, in a fresh random order: all its streams are resumed and asked for K calls at
once. A round's items/s is what the streams completed while all of them ran (pkg/bench
WindowRate, through peerstats -throughput), so a stream left alone at the end does not count.
The table gives each configuration's median items/s over rounds with its interval, the per-call
p50/p99 under that load, each contender's best configuration, and torchspeed's ratio to the
best peer configuration with an interval over rounds resampled in pairs.
"""

import json
import os
import random
import subprocess
import time

import bench_peers as bp

SCHEMA_VERSION = 1


def factorizations(cpus):
    """(instances, threads) with instances x threads = cpus, fewest instances first."""
    return [(n, cpus // n) for n in range(1, cpus + 1) if cpus % n == 0]


def launch_cpus(args, n):
    """The CPUs of each of n instances as `torchspeed launch --instances n` places them."""
    r = subprocess.run([args.torchspeed, "launch", "--instances", str(n), "--print-env", "--json"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"torchspeed launch --instances {n} --print-env failed: {r.stderr.strip()[-300:]}")
    return [",".join(str(c) for c in s["cpus"]) for s in json.loads(r.stdout)]


def peer_argvs(args, entry, onnx, n, t):
    """{contender: (kind, [argv per stream])} of the peers at n streams of t threads."""
    model = os.path.join(args.fixtures, entry["file"])
    x = os.path.join(args.fixtures, entry["inputs"][0]["file"])
    ref = os.path.join(args.fixtures, entry["outputs"][0]["file"])
    cnn = entry["kind"] in ("cnn", "digits")
    pyw = [bp.PY, os.path.join(bp.HERE, "torch_worker.py"), "--model", model, "--input", x, "--threads", str(t),
           "--ref", ref]
    int8 = ["--recipe", "int8_static", "--calib", bp.calib_file(args, entry)] if cnn else ["--recipe", "int8_dynamic"]
    out = {"py-jit": ("peer", [pyw + ["--recipe", "jit"]] * n), "py-int8": ("peer", [pyw + int8] * n)}
    if onnx:
        out["ort-fp32"] = ("peer", [["node", os.path.join(bp.HERE, "ort_worker.js"), onnx, x, str(t), ref]] * n)
    return out


def ts_argvs(args, entry, art, n, t, cpus):
    """{contender: (kind, [argv per instance])}: each instance under its own `launch`."""
    x = os.path.join(args.fixtures, entry["inputs"][0]["file"])
    ref = os.path.join(args.fixtures, entry["outputs"][0]["file"])
    out = {"ts-bench": ("torchspeed", []), "ts-go": ("torchspeed", [])}
    for c in cpus:
        # --no-thread-bind as `bench --instances` and any Go program use: affinity confines
        # the instance, and OpenMP's binding would pin every Go thread to its first CPU.
        launch = [args.torchspeed, "launch", "--cpus", c, "--mode", "throughput", "--no-thread-bind",
                  "--artifact", art, "--quiet", "--"]
        out["ts-bench"][1].append(launch + [args.torchspeed, "bench", "--serve", "--runtime", "default", "-m", art,
                                            "--threads", str(t), "--warmup", "10"])
        out["ts-go"][1].append(launch + [args.goworker, "-model", art, "-input", x, "-threads", str(t),
                                         "-ref", ref, "-mode", "predict"])
    return out


def configurations(args, entry):
    """[(config name, contender, kind, n, t, [argv per stream])], skipped, torchspeed summary."""
    skipped, cfgs = [], []
    onnx, why = bp.export_onnx(args, entry)
    if not onnx:
        skipped.append({"contender": "ort-fp32", "why": why})
    try:
        art, rep, _ = bp.optimize(args, entry)
    except (RuntimeError, OSError, ValueError) as e:
        art, rep = None, None
        skipped.append({"contender": "ts-*", "why": str(e)})
    for n, t in factorizations(args.threads):
        cpus = launch_cpus(args, n)
        groups = peer_argvs(args, entry, onnx, n, t)
        if art:
            groups.update(ts_argvs(args, entry, art, n, t, cpus))
        for c, (kind, argvs) in groups.items():
            if args.contenders and c not in args.contenders:
                continue
            cfgs.append((f"{c} {n}x{t}", c, kind, n, t, argvs))
            if kind == "peer" and getattr(args, "pin_peers", False):
                # As a user pins workers by hand: stream i on the CPUs launch gives instance i,
                # so pinning is not an advantage only torchspeed's instances have.
                pinned = [["taskset", "-c", cpus[i]] + a for i, a in enumerate(argvs)]
                cfgs.append((f"{c} {n}x{t} taskset", c, kind, n, t, pinned))
    summary = None
    if art:
        man = rep.get("manifest") or {}
        summary = {"artifact": art, "precision": man.get("precision"),
                   "threads": (man.get("runtime") or {}).get("threads")}
    return cfgs, skipped, summary


def start(args, name, cfgs, logs, skipped):
    """Starts every stream of every configuration, one at a time; returns {config: [Worker]}."""
    procs, workers = {}, []
    for cname, _c, _kind, _n, _t, argvs in cfgs:
        procs[cname] = []
        for i, argv in enumerate(argvs):
            w = bp.Worker(cname, argv, os.path.join(logs, f"{name}.tput.{cname.replace(' ', '.')}.{i + 1}.log"),
                          cwd=bp.HERE)
            workers.append(w)
            if not w.wait_ready(args.ready_timeout):
                bp.log(f"{name}: {cname} stream {i + 1} FAILED: {w.error}")
                skipped.append({"contender": cname, "why": w.error})
                procs[cname] = []
                break
            w.pause()
            procs[cname].append(w)
        if procs[cname]:
            bp.log(f"{name}: {cname} ready {json.dumps(procs[cname][0].ready)[:160]}")
    return procs, workers


def block(ws, k, timeout):
    """All streams at once: resumes them, asks each for k calls, returns each one's latencies."""
    for w in ws:
        w.resume()
    try:
        for w in ws:
            w.proc.stdin.write(f"run {k}\n")
            w.proc.stdin.flush()
        out = []
        for w in ws:
            line = w._readline(timeout)
            if not line.startswith("ns"):
                raise RuntimeError(f"{w.name}: {line}")
            out.append([int(v) for v in line.split()[1:]])
        return out
    finally:
        for w in ws:
            w.pause()


def time_rounds(args, name, live, procs, rng):
    """Interleaved rounds; returns ({config: [round][stream][ns]}, {config: [others' CPUs]})."""
    def calls(lat):
        # By the mean, not the median: under load a two-thread call can stall for tens of ms
        # now and then, and a block sized by the median would run for minutes.
        mean = sum(lat) / len(lat) / 1e9
        return int(min(args.max_block, max(args.min_block, args.block_s / max(1e-6, mean))))

    ks = {c: calls([v for s in block(procs[c], 20, args.ready_timeout) for v in s[5:]]) for c in live}
    rounds, other, own = {c: [] for c in live}, {c: [] for c in live}, {c: [] for c in live}
    me = os.getpid()
    for r in range(args.rounds):
        order = list(live)
        rng.shuffle(order)
        pids = bp.tree_pids(me)
        for c in order:
            b0, _ = bp.system_jiffies()
            o0, t0 = bp.tree_jiffies(pids), time.monotonic()
            streams = block(procs[c], ks[c] + args.block_warmup, args.ready_timeout + 60)
            el = time.monotonic() - t0
            b1, _ = bp.system_jiffies()
            o1 = bp.tree_jiffies(pids)
            other[c].append(round(max(0.0, ((b1 - b0) - (o1 - o0)) / bp.CLK_TCK / el), 3))
            own[c].append(round((o1 - o0) / bp.CLK_TCK / el, 3))
            rounds[c].append([s[args.block_warmup:] for s in streams])
            ks[c] = calls([v for s in rounds[c][-1] for v in s])  # the next round's block, by this one
        bp.log(f"{name}: throughput round {r + 1}/{args.rounds} done (load {bp.loadavg()[0]:.2f})")
    return rounds, other, own


def bench_model(args, entry, rng):
    name = entry["name"]
    cfgs, skipped, ts_info = configurations(args, entry)
    logs = os.path.join(os.path.dirname(args.out_path), "logs")
    os.makedirs(logs, exist_ok=True)
    procs, workers = {}, []
    try:
        procs, workers = start(args, name, cfgs, logs, skipped)
        live = [c[0] for c in cfgs if procs.get(c[0])]
        rounds, other, own = time_rounds(args, name, live, procs, rng)
    finally:
        for w in workers:
            w.close()
    samples = [{"config": c, "contender": ct, "kind": kind, "instances": n, "threads": t, "rounds": rounds[c],
                "own_cpu": own[c]} for c, ct, kind, n, t, _ in cfgs if c in rounds]
    raw = {"seed": args.seed, "configs": samples}
    figures = bp.peer_stats(args, f"{name}.throughput", raw, ["-throughput"])
    for st in figures["configs"]:
        oc = sorted(other[st["config"]])
        st["other_cpu_median"], st["other_cpu_max"] = oc[len(oc) // 2], oc[-1]
    return {"model": name, "kind": entry["kind"], "torchspeed_artifact": ts_info, "skipped": skipped, **figures}


def fmt_ci(ci, nd=0):
    return f"[{ci[0]:.{nd}f}, {ci[1]:.{nd}f}]" if ci else ""


def markdown(doc):
    m = doc["machine"]
    lines = [f"# bench-peers --throughput {doc['started']}", "",
             f"CPU {m['model']} ({', '.join(m['isa'])}); {doc['cpus']} CPUs, batch 1, every factorization "
             f"instances x threads of the CPUs; {doc['rounds']} rounds, shuffled, {doc['block_s']} s per "
             f"configuration per round; load average before {doc['load_before']}, after {doc['load_after']}.", "",
             "| model | best peer (config) | items/s | torchspeed best (config) | items/s | ratio [95% CI] "
             "| artifact's threads |", "|---|---|---|---|---|---|---|"]
    for r in doc["models"]:
        by = {c["config"]: c for c in r["configs"]}
        peer = by.get(r.get("best_peer"))
        ts = [by[v] for k, v in r["best"].items() if by[v]["kind"] == "torchspeed"]
        ts = max(ts, key=lambda c: c["items_per_s"]) if ts else None
        if peer and ts and "ratio_to_best_peer" in ts:
            ci = fmt_ci(ts.get("ratio_ci95"), 2)
            art = (r.get("torchspeed_artifact") or {}).get("threads", "-")
            lines.append(f"| {r['model']} | {peer['config']} | {peer['items_per_s']:.1f} | {ts['config']} | "
                         f"{ts['items_per_s']:.1f} | {ts['ratio_to_best_peer']:.2f}x {ci} | {art} |")
    lines += ["", "| model | config (instances x threads) | items/s median [95% CI] | p50 ms | p99 ms | "
              "vs best peer [95% CI] | items/CPU-s | others' CPU (median/max) |", "|---|---|---|---|---|---|---|---|"]
    for r in doc["models"]:
        bests = set(r["best"].values())
        for c in sorted(r["configs"], key=lambda c: -c["items_per_s"]):
            mark = (" **best peer**" if c["config"] == r.get("best_peer") else
                    " (best)" if c["config"] in bests else "")
            ratio = (f"{c['ratio_to_best_peer']:.2f}x {fmt_ci(c.get('ratio_ci95'), 2)}"
                     if "ratio_to_best_peer" in c else "")
            lines.append(f"| {r['model']} | {c['config']}{mark} | {c['items_per_s']:.1f} "
                         f"{fmt_ci(c.get('items_per_s_ci95'))} | {c['p50_ms']:.3f} | {c['p99_ms']:.3f} | {ratio} | "
                         f"{bp.fmt(c.get('items_per_cpu_s'), 0)} | "
                         f"{c['other_cpu_median']:.2f}/{c['other_cpu_max']:.2f} |")
        for s in r["skipped"]:
            lines.append(f"| {r['model']} | {s['contender']} | not run: {s['why']} | | | | |")
    lines += ["", "items/s: per round, what all streams of a configuration completed while every one of them ran "
              "(the window ends when the first stream finishes its calls), median over rounds with the "
              "order-statistic 95% interval; the ratio is torchspeed's median over the best peer configuration's, "
              "its interval resampling rounds in pairs (peerstats -throughput, pkg/bench). p50/p99: every call's "
              "latency under that load. items/CPU-s: items/s over the CPUs the configuration's own processes "
              "used, median over rounds (a share of the CPUs won from other work does not raise it). 'others' CPU': "
              "what processes outside this benchmark used during the configuration's blocks (CPUs)."]
    return "\n".join(lines) + "\n"


def run(args, man, names):
    """Times every model in throughput mode; writes WORK/throughput.json and .md (or --out's)."""
    rng = random.Random(args.seed)
    out = args.out_path
    doc = {"schema_version": SCHEMA_VERSION, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "machine": bp.cpu_info(), "cpus": args.threads, "batch": 1, "rounds": args.rounds,
           "block_s": args.block_s, "load_before": bp.loadavg(), "fixtures": args.fixtures, "models": []}
    # A streaming model's calls depend on the state the previous call left: its throughput is
    # that of independent audio streams, which these stateless workers do not model.
    doc["skipped_models"] = [{"model": n, "why": "streaming model (state carried between calls): "
                              "throughput mode times stateless calls only"}
                             for n in names if man[n].get("streams")]
    for s in doc["skipped_models"]:
        bp.log(f"{s['model']}: throughput: skipped, {s['why']}")
    for n in [n for n in names if not man[n].get("streams")]:
        bp.log(f"{n}: throughput: preparing configurations")
        doc["models"].append(bench_model(args, man[n], rng))
        doc["load_after"] = bp.loadavg()
        with open(out + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(out + ".tmp", out)
        md = markdown(doc)
        mdp = os.path.splitext(out)[0] + ".md"
        with open(mdp + ".tmp", "w") as f:
            f.write(md)
        os.replace(mdp + ".tmp", mdp)
    print(md)
    bp.log(f"wrote {out} and {os.path.splitext(out)[0]}.md")
