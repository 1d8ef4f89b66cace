#!/usr/bin/python3
"""`make bench-peers`: torchspeed's artifact against what users do by hand, timed side by side.

Usage: /usr/bin/python3 scripts/peers/bench_peers.py [--models a,b] [--threads 2] [--rounds 12]
           [--block-s 0.25] [--fixtures DIR] [--work build/peers] [--out build/peers/peers.json]

For each model (a fixture from `make fixtures`) it prepares every contender, then times them in
one run: long-lived worker processes keep their model loaded and answer "run K" requests
(scripts/peers/*_worker.*, `torchspeed bench --serve`, goworker), stopped (SIGSTOP) outside
their turns so that no idle worker spins on the CPUs another is timed on, and the driver asks
each in turn for a block of K runs (after --block-warmup untimed ones), round after round, in a
fresh random order every round (a fixed order biases small models timed right after large ones).
Each contender runs in --processes processes (2 by default) with turns of their own: the same
program can run measurably faster or slower from one process to the next, and the table shows
each process's p50 so that spread is seen, not credited to a contender. All at batch 1 on
--threads CPUs: the peers with --threads threads, as a user sets them; torchspeed's artifact with
the thread count its optimize measured best (1 to --threads), or exactly --threads with
--thread-choice fixed.

Contenders:
  py-jit, py-freeze-ofi, py-cl-freeze-ofi (CNNs), py-int8 (quantize_jit static for CNNs on the
      fixture's calibration data, quantize_dynamic_jit for transformers; engine onednn)
      -- plain PyTorch in Debian's /usr/bin/python3 (torch_worker.py)
  ort-fp32 -- ONNX Runtime 1.30 FP32 (onnxruntime-node), the fixture exported by torch.onnx.export
      (for real models, the authors' own ONNX file)
  pt2-inductor-Nt, pt2-inductor-max-autotune-Nt, pt2e-int8-Nt -- PyTorch 2.6's torch.compile and
      PT2E INT8 (pt2_worker.py) at 1 and --threads threads, in the Debian 13 root of
      `make peers-pt2-root` (skipped without it; --pt2-recipes, --no-pt2)
  ts-bench, ts-bench-default -- the artifact of `torchspeed optimize -c scripts/peers/configs/M.yaml`
      through `torchspeed bench --serve`, with torchspeed's runtime settings and with libtorch's own
  ts-go -- the same artifact through the Go API (torchspeed.Load + Predict), started by
      `torchspeed launch --artifact` as a Go service would be (the runtime optimize measured)
  ts-go-locked, ts-go-cxx (diagnostics, --diagnostics) -- the artifact called on the locked
      thread without the hop, and timed by the C++ loop: the per-call cost from Go
  floor@ts-bench, floor@PEER (unless --no-floor) -- floor_worker.c: the same fixed work every
      call (the model file's size read once, multiply-add chains), calibrated after the first
      round to last as long as ts-bench's and the fastest peer's calls, at their thread counts.
      Its p95/p50 is the spread the machine alone gives a call of that length (interrupts, the
      hypervisor taking a vCPU, a slow CPU at a barrier)

Streaming models (fixtures with a stream, e.g. silero_v4, silero_v5: Silero VAD as shipped) run
as streams: every call takes the next chunk in order with the state carried, and the table's
accuracy column is the max abs difference from the reference over the whole stream
(stream_contenders; docs/benchmarking.md).

Every figure comes from peerstats (scripts/peers/peerstats, pkg/bench's statistics): this
script writes each model's raw latencies (per contender, process and round) to
WORK/samples/MODEL.json and formats what peerstats computes from them. p95/p50 is given with a
95% bootstrap interval over rounds (whole rounds: a slow stretch of the machine lands on whole
blocks), each torchspeed contender's p95/p50 minus the best peer's with an interval from the
same rounds resampled in pairs, and its ratio to the best peer with an interval that resamples
rounds and processes (pkg/bench.ProcessRatioCI).

For each block it reads /proc/stat and the CPU time of its own process tree: what other
processes used during the block is reported, and a warning is printed when it is more than
--noise-cpu CPUs. Prints median/p95 per contender and each torchspeed contender's ratio to the
best peer (with a 95% interval over rounds and processes), and writes JSON and Markdown.
"""

import argparse
import json
import math
import os
import random
import select
import signal
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"
DEFAULT_MODELS = "resnet18,resnet50,mobilenet_v2,transformer_traced,transformer_scripted,digits,silero_v5,silero_v4"
# 2: figures from peerstats; ratio_to_best is ProcessRatioCI's (levels over processes), no
# ratio_rounds_median; p50_ci95 and above_floor added.
SCHEMA_VERSION = 2
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- machine and load


def cpu_info():
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    wanted = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "avx512_bf16",
              "amx_bf16", "amx_int8"]
    return {"model": model, "isa": [f for f in wanted if f in flags], "cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0))}


def interruptions(args):
    """What the machine takes from busy CPUs, from `torchspeed probe --interrupts`: per CPU
    gaps a second, the share of time lost, the gaps' median length, and the p95/p50 they alone
    give fixed work of 0.1 ms on one thread. None when probe fails (the table still runs)."""
    try:
        out = subprocess.run([args.torchspeed, "probe", "--json", "--quiet", "--interrupts", "1s"],
                             capture_output=True, text=True, timeout=120, check=True).stdout
        intr = json.loads(out).get("interruptions")
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        log(f"no interruption measurement: {e}")
        return None
    if not intr:
        return None
    floor = next((f["p95_over_p50"] for f in intr.get("floors") or []
                  if f["length_ns"] == 100000 and f["threads"] == 1), None)
    return {"per_second": intr["per_second"], "lost_fraction": intr["lost_fraction"],
            "p50_us": intr["p50_ns"] / 1e3, "floor_100us_1thread": floor}


def interruption_text(i):
    if not i:
        return "not measured"
    fl = f", p95/p50 {i['floor_100us_1thread']:.2f} for 0.1 ms on 1 thread" if i.get("floor_100us_1thread") else ""
    return (f"{i['per_second']:.0f}/s per CPU, {100 * i['lost_fraction']:.1f}% of the time lost, "
            f"gap p50 {i['p50_us']:.0f} us{fl}")


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def system_jiffies():
    """Busy and steal jiffies of the whole machine (all CPUs) from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = v[:7]
    steal = v[7] if len(v) > 7 else 0
    return user + nice + system + irq + softirq, steal


def tree_pids(root):
    """root and all its descendants, from /proc (workers may re-exec or spawn helpers)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        ppid = int(s[s.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def tree_jiffies(pids):
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (all threads)
    return total


# ---------------------------------------------------------------- statistics


def peer_stats(args, name, raw, flags=()):
    """Writes one model's raw latencies to WORK/samples/NAME.json and returns what peerstats
    (pkg/bench's statistics) computes from them (flags: peerstats's, e.g. -throughput)."""
    d = os.path.join(args.work, "samples")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"{name}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(raw, f)
    os.replace(path + ".tmp", path)
    r = subprocess.run([args.peerstats, *flags, path], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"peerstats {path} failed (rc {r.returncode}): {r.stderr.strip()[-600:]}")
    return json.loads(r.stdout)


# ---------------------------------------------------------------- workers


# Every worker started, so that the driver's exit closes any a failure left behind (stopped
# between turns, they would otherwise outlive it).
STARTED = []


class Worker:
    """One long-lived contender process speaking the "run K" protocol; its stderr goes to a log
    file (a pipe nobody reads while others are timed could fill and stall it)."""

    def __init__(self, name, argv, log_path, env=None, cwd=None):
        self.name, self.argv, self.log_path = name, argv, log_path
        self.ready, self.error, self.tree = None, None, None
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=env, cwd=cwd, bufsize=1)
        STARTED.append(self)

    def stderr_tail(self, n=5):
        try:
            with open(self.log_path) as f:
                lines = [ln.rstrip() for ln in f if ln.strip()]
        except OSError:
            return ""
        return " | ".join(lines[-n:])

    def _readline(self, timeout):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            raise TimeoutError(f"{self.name}: no answer in {timeout:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            raise EOFError(f"{self.name}: exited (rc {self.proc.wait()}): {self.stderr_tail()}")
        return line.rstrip("\n")

    def wait_ready(self, timeout):
        try:
            while True:
                line = self._readline(timeout)
                if line.startswith("ready"):
                    self.ready = json.loads(line[5:].strip() or "{}")
                    return True
                if line.startswith("error"):
                    self.error = line[5:].strip()
                    return False
        except (TimeoutError, EOFError, ValueError) as e:
            self.error = str(e)
            return False

    def pause(self):
        """Stops the process between its turns: idle OpenMP and ONNX Runtime workers spin for a
        while after a block, and that spinning would take CPU from the next contender's block
        without showing as another process's CPU (the driver counts its own tree as its own).
        The whole tree: `torchspeed launch` runs the contender as its child."""
        self._signal(signal.SIGSTOP)

    def resume(self):
        self._signal(signal.SIGCONT)

    def _signal(self, sig):
        if self.proc.poll() is not None:
            return
        if self.tree is None:
            # Taken once, when the worker first pauses (after ready: its children exist).
            self.tree = tree_pids(self.proc.pid)
        for p in self.tree:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass

    def run(self, k, timeout):
        try:
            self.proc.stdin.write(f"run {k}\n")
            self.proc.stdin.flush()
        except OSError:  # the pipe broke: the worker has exited
            raise EOFError(f"{self.name}: exited (rc {self.proc.wait()}): {self.stderr_tail()}") from None
        line = self._readline(timeout)
        if not line.startswith("ns"):
            raise RuntimeError(f"{self.name}: {line}")
        return [int(x) for x in line.split()[1:]]

    def close(self):
        self.log.close()
        self.resume()
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        # Its pipes too: STARTED keeps every Worker to the end, and a full run starts hundreds.
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:  # a broken pipe's buffered "quit"
                pass


# ---------------------------------------------------------------- preparation


def load_manifest(fixtures):
    path = os.path.join(fixtures, "manifest.json")
    try:
        with open(path) as f:
            m = json.load(f)
    except OSError:
        sys.exit(f"bench-peers: {path} missing: run `make fixtures` (or set TORCHSPEED_FIXTURES)")
    return {e["name"]: e for e in m["fixtures"]}


def stale(target, *sources):
    if not os.path.exists(target):
        return True
    t = os.path.getmtime(target)
    return any(os.path.getmtime(s) > t for s in sources if os.path.exists(s))


def calib_file(args, entry):
    """The fixture's calibration set, or 16 random-normal inputs (what the CNN fixtures' inputs
    are and what their BatchNorm statistics were re-estimated on) written once."""
    if entry.get("calib"):
        return os.path.join(args.fixtures, entry["calib"]["inputs"][0]["file"])
    import numpy as np
    spec = entry["inputs"][0]
    path = os.path.join(args.work, f"{entry['name']}_calib.npy")
    if not os.path.exists(path):
        rng = np.random.default_rng(0)
        np.save(path, rng.standard_normal([16] + spec["shape"][1:]).astype(np.float32))
    return path


def export_onnx(args, entry):
    """torch.onnx.export of the fixture (needs no onnx package in torch 1.13); None and the
    reason when the model does not export."""
    path = os.path.join(args.work, f"{entry['name']}.onnx")
    src = os.path.join(args.fixtures, entry["file"])
    if not stale(path, src):
        return path, None
    code = (
        "import sys, warnings, numpy as np, torch\n"
        "warnings.simplefilter('ignore')\n"
        "m = torch.jit.load(sys.argv[1]).eval()\n"
        "x = torch.from_numpy(np.load(sys.argv[2]))\n"
        "def export(mod):\n"
        "    torch.onnx.export(mod, (x,), sys.argv[3] + '.tmp', opset_version=14, input_names=['x'],\n"
        "                      output_names=['y'], do_constant_folding=True)\n"
        "try:\n"
        "    export(m)\n"
        "except Exception:\n"
        # torch 1.13 cannot export a scripted nn.TransformerEncoder (an internal assert on its
        # parameter count): export the eager module the fixture was scripted from, with the
        # same weights, so ONNX Runtime runs the same network.
        "    if m.original_name != 'TransformerEncoder':\n"
        "        raise\n"
        "    sys.path.insert(0, sys.argv[4])\n"
        "    from generate import transformer_encoder\n"
        "    e = transformer_encoder()\n"
        "    e.load_state_dict(m.state_dict())\n"
        "    with torch.no_grad():\n"
        "        d = (e(x) - m(x)).abs().max().item()\n"
        "    if d > 1e-4:\n"
        "        raise SystemExit(f'the eager rebuild differs from the TorchScript model by {d}')\n"
        "    export(e)\n"
    )
    r = subprocess.run([PY, "-c", code, src, os.path.join(args.fixtures, entry["inputs"][0]["file"]), path,
                        os.path.join(ROOT, "scripts", "fixtures")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        last = [ln for ln in r.stderr.strip().splitlines() if ln.strip()][-1:] or ["?"]
        return None, "torch.onnx.export failed: " + last[0][:300]
    os.replace(path + ".tmp", path)
    return path, None


def optimize(args, entry):
    """`torchspeed optimize` with the peer config; returns (artifact, report, seconds it took in this
    run or None where an earlier run's artifact was up to date) or raises."""
    name = entry["name"]
    cfg = os.path.join(HERE, "configs", f"{name}.yaml")
    out = os.path.join(args.work, name)
    report = os.path.join(out, "report.json")
    src = os.path.join(args.fixtures, entry["file"])
    if args.reoptimize or stale(report, cfg, src, args.torchspeed):
        # The config's paths are relative to a checkout's build/: point them at the fixtures and
        # the work folder in use, in a copy the report can name.
        with open(cfg) as f:
            text = f.read()
        text = text.replace("../../../build/fixtures", args.fixtures).replace("../../../build/peers", args.work)
        resolved = os.path.join(args.work, f"{name}.yaml")
        with open(resolved, "w") as f:
            f.write(text)
        # measured: optimize chooses the thread count (up to the CPUs this run may use, which
        # main confined to --threads); fixed: exactly --threads, as the peers use.
        threads = "0" if args.thread_choice == "measured" else str(args.threads)
        cmd = [args.torchspeed, "optimize", "-c", resolved, "-m", src, "-o", out, "--threads", threads,
               "--overwrite", "--quiet"]
        log(f"{name}: {' '.join(cmd)}")
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True)
        ran_s = time.monotonic() - t0
        if r.returncode != 0:
            raise RuntimeError(f"torchspeed optimize failed (rc {r.returncode}): {r.stderr.strip()[-600:]}")
        log(f"{name}: optimize took {ran_s:.0f} s")
    else:
        ran_s = None
    with open(report) as f:
        rep = json.load(f)
    arts = [p for p in os.listdir(out) if p.endswith(".torchspeed.pt")]
    if len(arts) != 1:
        raise RuntimeError(f"{out}: want one *.torchspeed.pt, found {arts}")
    return os.path.join(out, arts[0]), rep, ran_s


def artifact_summary(art, rep, ran_s, **more):
    """What the table says of torchspeed's artifact: precision, validation, and what optimize
    cost (the report's wall time; ran_s when this run made it)."""
    val = rep.get("validation") or {}
    return {"artifact": art, "precision": (rep.get("manifest") or {}).get("precision"),
            "decisions": rep.get("decisions"), "validation_passed": val.get("passed"),
            "validation_metrics": val.get("metrics"), "validation_data": val.get("data"),
            "report": os.path.join(os.path.dirname(art), "report.json"),
            "optimize": {"wall_s": (rep.get("wall_ms") or 0) / 1e3, "search": rep.get("search"),
                         "started": rep.get("started"), "this_run": ran_s is not None, "process_s": ran_s},
            **more}


def peer_thread_counts(args):
    """[(threads, name suffix)] each PyTorch and ONNX Runtime peer runs at: --threads (the plain
    name), and 1 as well ("-1t") where --threads is more, as a user tunes a peer to its faster
    count (a batch-1 call of a small model can lose more to a second thread's wake-ups than it
    gains); the faster one is the one that can be the best peer."""
    out = [(str(args.threads), "")]
    if args.threads > 1:
        out.append(("1", "-1t"))
    return out


def stream_contenders(args, entry):
    """The contenders of a stateful streaming model (a fixture with a stream, e.g. Silero VAD as
    shipped): every one calls forward on the stream's chunks in order, one chunk a call, with
    the state carried (attributes for TorchScript, state tensors fed back for ONNX Runtime),
    and starts the stream over from a reset state at its end. Their ready lines carry
    max_abs_vs_ref: the largest difference of the output (the speech probability) from the
    fixture's reference over the whole stream."""
    s = entry["streams"][0]
    x = os.path.join(args.fixtures, s["args"][0]["tensor"]["file"])
    sr = str(s["args"][1]["ints"][0])
    ref = os.path.join(args.fixtures, s["outputs"][0]["file"])
    model = os.path.join(args.fixtures, entry["file"])
    t = str(args.threads)
    out, skipped = [], []
    onnx = entry.get("onnx")
    for thr, suffix in peer_thread_counts(args):
        pyw = [PY, os.path.join(HERE, "torch_worker.py"), "--model", model, "--input", x, "--threads", thr,
               "--ref", ref, "--stream-sr", sr]
        for r in ("jit", "freeze_ofi"):
            out.append(("py-" + r.replace("_", "-") + suffix, pyw + ["--recipe", r], "peer"))
        if onnx:
            out.append(("ort-fp32" + suffix, ["node", os.path.join(HERE, "ort_worker.js"),
                                              os.path.join(args.fixtures, onnx["file"]), x, thr, ref, "10",
                                              json.dumps(onnx)], "peer"))
    if not onnx:
        skipped.append({"contender": "ort-fp32", "why": "the fixture names no ONNX file"})
    try:
        art, rep, ran_s = optimize(args, entry)
    except (RuntimeError, OSError, ValueError) as e:
        skipped.append({"contender": "ts-*", "why": str(e)})
        return out, skipped, None
    ts_t = "0" if args.thread_choice == "measured" else t
    ins = ["--input", f"x=seq:{x}", "--input", f"sr=int:{sr}"]
    tsb = [args.torchspeed, "bench", "--serve", "-m", art, "--warmup", "10"] + ins
    out.append(("ts-bench", tsb + ["--threads", ts_t, "--runtime", "torchspeed"], "torchspeed"))
    out.append(("ts-bench-default", tsb + ["--threads", t, "--runtime", "default"], "torchspeed"))
    gow = [args.goworker, "-model", art, "-input", x, "-threads", ts_t, "-ref", ref, "-stream"]
    out.append(("ts-go", [args.torchspeed, "launch", "--no-thread-bind", "--artifact", art, "--"] + gow, "torchspeed"))
    return out, skipped, artifact_summary(art, rep, ran_s, max_abs_vs_ref=stream_max_abs(args, art, x, sr, ref))


def stream_max_abs(args, art, x, sr, ref):
    """The artifact's largest output difference from ref over the stream, from `torchspeed run`
    (one call per chunk, in order, from a reset state); None when run fails."""
    import numpy as np
    path = os.path.join(args.work, os.path.basename(art) + ".stream.npz")
    r = subprocess.run([args.torchspeed, "run", "-m", art, "--input", f"x=seq:{x}", "--input", f"sr=int:{sr}",
                        "--save", path, "--quiet"], capture_output=True, text=True)
    if r.returncode != 0:
        log(f"{art}: torchspeed run over the stream failed: {r.stderr.strip()[-300:]}")
        return None
    want = np.load(ref)
    got = np.load(path)["output_0"]
    return float(np.abs(got.reshape(want.shape) - want).max())


def contenders(args, entry):
    """(name, argv, kind) for every contender of one model; kind is peer, torchspeed or diagnostic."""
    if entry.get("streams"):
        return stream_contenders(args, entry)
    kind = entry["kind"]
    model = os.path.join(args.fixtures, entry["file"])
    x = os.path.join(args.fixtures, entry["inputs"][0]["file"])
    ref = os.path.join(args.fixtures, entry["outputs"][0]["file"])
    t = str(args.threads)
    cnn = kind in ("cnn", "digits")
    calib = calib_file(args, entry) if cnn else None
    out, skipped = [], []
    recipes = ["jit", "freeze_ofi"] + (["cl_freeze_ofi", "int8_static"] if cnn else ["int8_dynamic"])
    onnx, why = export_onnx(args, entry)
    for thr, suffix in peer_thread_counts(args):
        pyw = [PY, os.path.join(HERE, "torch_worker.py"), "--model", model, "--input", x, "--threads", thr,
               "--ref", ref]
        for r in recipes:
            argv = pyw + ["--recipe", r] + (["--calib", calib] if r == "int8_static" else [])
            out.append(("py-" + r.replace("_static", "").replace("_dynamic", "").replace("_", "-") + suffix,
                        argv, "peer"))
        if onnx:
            out.append(("ort-fp32" + suffix, ["node", os.path.join(HERE, "ort_worker.js"), onnx, x, thr, ref],
                        "peer"))
    if not onnx:
        skipped.append({"contender": "ort-fp32", "why": why})
    pt2, why = pt2_contenders(args, entry, calib_file(args, entry))
    out += pt2
    skipped += why
    try:
        art, rep, ran_s = optimize(args, entry)
    except (RuntimeError, OSError, ValueError) as e:
        skipped.append({"contender": "ts-*", "why": str(e)})
        return out, skipped, None
    # ts-bench and ts-go run the artifact as deployed (its measured thread count when
    # --thread-choice measured); ts-bench-default is libtorch's defaults at the peers' count.
    ts_t = "0" if args.thread_choice == "measured" else t
    tsb = [args.torchspeed, "bench", "--serve", "-m", art, "--warmup", "10"]
    out.append(("ts-bench", tsb + ["--threads", ts_t, "--runtime", "torchspeed"], "torchspeed"))
    out.append(("ts-bench-default", tsb + ["--threads", t, "--runtime", "default"], "torchspeed"))
    gow = [args.goworker, "-model", art, "-input", x, "-threads", ts_t, "-ref", ref]
    # A Go service gets the artifact's measured runtime (allocator, OpenBLAS kernels, wait
    # policy) from `torchspeed launch --artifact`, as deployed; --no-thread-bind as for any Go
    # program (OpenMP's binding would pin every Go thread to the first CPU).
    launch = [args.torchspeed, "launch", "--no-thread-bind", "--artifact", art, "--"]
    out.append(("ts-go", launch + gow + ["-mode", "predict"], "torchspeed"))
    if args.diagnostics:
        out.append(("ts-go-locked", gow + ["-mode", "locked"], "diagnostic"))
        out.append(("ts-go-cxx", gow + ["-mode", "cxx"], "diagnostic"))
    return out, skipped, artifact_summary(art, rep, ran_s)


PT2_RECIPES = ("inductor", "inductor_max_autotune", "pt2e_int8")


def pt2_recipe_list(spec):
    recipes = [r.strip() for r in spec.split(",") if r.strip()]
    bad = [r for r in recipes if r not in PT2_RECIPES]
    if bad:
        sys.exit(f"bench-peers: --pt2-recipes {','.join(bad)}: want some of {','.join(PT2_RECIPES)}")
    return recipes


def pt2_contenders(args, entry, calib):
    """The PyTorch 2 peers (scripts/peers/pt2_worker.py in the Debian 13 root of
    `make peers-pt2-root`), each at 1 and at --threads threads: a user tunes the count, and the
    faster one is the one that can be the best peer. ([(name, argv, kind)], [skipped])."""
    if args.pt2_root is None:
        return [], []
    recipes = pt2_recipe_list(args.pt2_recipes)
    names = [r.replace("pt2e_", "pt2e-").replace("inductor", "pt2-inductor").replace("_", "-") for r in recipes]
    why = None
    if not os.path.isfile(os.path.join(args.pt2_root, ".ts-pt2-ready")):
        why = (f"no PyTorch 2 root at {args.pt2_root}: build it with `make peers-pt2-root` (Debian 13 "
               "python3-torch 2.6 by debootstrap, about 20 min, as root), or pass --no-pt2")
    elif os.geteuid() != 0:
        why = "the PyTorch 2 peer runs in a chroot: run bench-peers as root"
    if why:
        return [], [{"contender": n + "-*t", "why": why} for n in names]

    def inside(path):  # the worker sees the fixtures and the work folder read-only under /mnt
        for host, mnt in ((args.fixtures, "/mnt/fixtures"), (args.work, "/mnt/work")):
            if os.path.dirname(os.path.abspath(path)) == host:
                return f"{mnt}/{os.path.basename(path)}"
        raise ValueError(f"{path} is neither in {args.fixtures} nor in {args.work}")
    src = [os.path.join(args.fixtures, entry["file"]), os.path.join(args.fixtures, entry["inputs"][0]["file"]),
           os.path.join(args.fixtures, entry["outputs"][0]["file"])]
    model, x, ref = (inside(p) for p in src)
    run = ["bash", os.path.join(HERE, "pt2-run.sh"), args.pt2_root, args.fixtures, args.work,
           "--model", model, "--fixture", entry["name"], "--input", x, "--ref", ref]
    out = []
    for threads in sorted({1, args.threads}):
        for r, n in zip(recipes, names):
            argv = run + ["--recipe", r, "--threads", str(threads)]
            if r == "pt2e_int8":
                argv += ["--calib", inside(calib)]
            out.append((f"{n}-{threads}t", argv, "peer"))
    return out, []


# ---------------------------------------------------------------- the machine's floor


def weight_bytes(args, entry, ts_info, contender):
    """Bytes of weights a contender reads per call: the size of the model file it runs (the
    artifact, the ONNX export, the fixture; a quarter of the fixture for quantize_jit's INT8)."""
    try:
        if contender.startswith("ts-"):
            return os.path.getsize(ts_info["artifact"]) if ts_info else 0
        if contender == "ort-fp32":
            return os.path.getsize(os.path.join(args.work, f"{entry['name']}.onnx"))
        size = os.path.getsize(os.path.join(args.fixtures, entry["file"]))
        return size // 4 if contender == "py-int8" or contender.startswith("pt2e-int8") else size
    except OSError:
        return 0


def floor_targets(args, live, procs, kinds, medians):
    """(name, target ns, threads, contender) of the floor contenders: fixed work lasting as long
    as a call of ts-bench (at its threads) and of the fastest peer (at --threads), by their
    medians (ns) in the first round."""
    out = []
    if medians.get("ts-bench"):
        thr = int((procs["ts-bench"][0].ready or {}).get("threads") or args.threads)
        out.append(("floor@ts-bench", medians["ts-bench"], max(1, thr), "ts-bench"))
    peers = [c for c in live if kinds[c] == "peer" and medians.get(c)]
    if peers:
        fast = min(peers, key=lambda c: medians[c])
        out.append((f"floor@{fast}", medians[fast], args.threads, fast))
    return out


def start_floor(args, model, name, target_ns, threads, nbytes, logs, workers, skipped):
    """Starts --processes floor workers; [] (and a skipped entry) when they do not start."""
    argv = [args.floor_worker, str(max(1, int(target_ns))), str(threads), "100000"]
    if nbytes > 0:
        argv.append(str(nbytes))
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    started = []
    for p in range(args.processes):
        w = Worker(name, argv, os.path.join(logs, f"{model}.{name}.{p + 1}.log"), env=env)
        workers.append(w)
        if not w.wait_ready(args.ready_timeout):
            log(f"{model}: {name} process {p + 1} FAILED: {w.error}")
            w.close()
            skipped.append({"contender": name, "why": w.error})
            return []
        w.pause()
        started.append(w)
    log(f"{model}: {name} ready {json.dumps(started[0].ready)}")
    return started


# ---------------------------------------------------------------- timing


def bench_model(args, entry, rng):
    name = entry["name"]
    cands, skipped, ts_info = contenders(args, entry)
    if args.contenders:
        cands = [c for c in cands if c[0] in args.contenders]
    workers, kinds, procs = [], {}, {}
    env = dict(os.environ)
    logs = os.path.join(os.path.dirname(args.out_path), "logs")
    os.makedirs(logs, exist_ok=True)
    for cname, argv, kind in cands:
        # Each contender runs in --processes processes: the same program and settings can run
        # faster or slower from one process to the next (memory placement, thread timing), and
        # one process per contender would credit that luck to the contender.
        kinds[cname] = kind
        procs[cname] = []
        for p in range(args.processes):
            # One at a time: preparing (quantize_jit, freezing) while another warms up slows both.
            w = Worker(cname, argv, os.path.join(logs, f"{name}.{cname}.{p + 1}.log"), env=env, cwd=HERE)
            workers.append(w)
            if w.wait_ready(args.ready_timeout):
                w.pause()
                procs[cname].append(w)
                if p == 0:
                    log(f"{name}: {cname} ready {json.dumps(w.ready)[:200]}")
            else:
                log(f"{name}: {cname} process {p + 1} FAILED: {w.error}")
                w.close()
                if not procs[cname]:
                    skipped.append({"contender": cname, "why": w.error})
                    break
    live = [c for c in procs if procs[c]]
    shape = entry["inputs"][0]["shape"] if entry["inputs"] else entry["streams"][0]["args"][0]["tensor"]["shape"][1:]
    result = {"model": name, "kind": entry["kind"], "input_shape": shape,
              "torchspeed_artifact": ts_info, "skipped": skipped, "contenders": [], "interrupted": False,
              "processes": args.processes}
    interrupted = False

    def drop(c, why):
        log(f"{name}: {c} {why}")
        skipped.append({"contender": c, "why": why})
        live.remove(c)
        for w in procs[c]:
            w.close()
        blocks.pop(c, None)
        other.pop(c, None)

    blocks, other = {}, {}
    try:
        ks = {}
        for c in list(live):
            procs[c][0].resume()
            try:
                ns = procs[c][0].run(3, args.ready_timeout)
            except (TimeoutError, EOFError, RuntimeError) as e:
                drop(c, f"failed before the rounds: {e}")
                continue
            procs[c][0].pause()
            est = max(1e-6, sorted(ns)[1] / 1e9)
            # The block is split between the contender's processes: a round costs the same time
            # whatever --processes is.
            per = args.block_s / est / len(procs[c])
            ks[c] = int(min(args.max_block, max(args.min_block, per)))
        # blocks[c][process][round]: the latencies (ns) that process timed in that round.
        blocks = {c: [[] for _ in procs[c]] for c in live}
        other = {c: [] for c in live}
        me = os.getpid()
        for r in range(args.rounds):
            order = [(c, i) for c in live for i in range(len(procs[c]))]
            rng.shuffle(order)
            pids = tree_pids(me)
            got = {c: [] for c in live}
            for c, i in order:
                b0, s0 = system_jiffies()
                o0 = tree_jiffies(pids)
                t0 = time.monotonic()
                w = procs[c][i]
                w.resume()
                if c not in live:  # dropped earlier in this round
                    continue
                try:
                    # The first --block-warmup runs of a turn are not timed: a process that was
                    # stopped pays for waking its threads and refilling the caches.
                    ns = w.run(ks[c] + args.block_warmup, args.ready_timeout + 60)[args.block_warmup:]
                    w.pause()
                except (TimeoutError, EOFError, RuntimeError) as e:
                    # A contender whose process died or stopped answering leaves the table (its
                    # other rounds would pair with nothing); the rest go on.
                    drop(c, f"failed in round {r + 1}: {e}")
                    del got[c]
                    continue
                except KeyboardInterrupt:
                    # Keep the complete rounds: a partial one would pair some contenders only.
                    log(f"{name}: interrupted in round {r + 1}: keeping the {r} complete round(s)")
                    interrupted = True
                    break
                el = time.monotonic() - t0
                b1, s1 = system_jiffies()
                o1 = tree_jiffies(pids)
                others = max(0.0, ((b1 - b0) - (o1 - o0)) / CLK_TCK / el)
                other[c].append({"cpus": round(others, 3), "steal_cpus": round((s1 - s0) / CLK_TCK / el, 3)})
                got[c].append((i, ns))
                if args.blocks_out:
                    block = {"model": name, "contender": c, "process": i, "round": r, "ns": ns}
                    args.blocks_out.write(json.dumps(block) + "\n")
            if interrupted:
                # Drop the partial round's blocks.
                for c in live:
                    del other[c][len(other[c]) - len(got[c]):]
                break
            for c in live:
                for i, ns in got[c]:
                    blocks[c][i].append(ns)
            log(f"{name}: round {r + 1}/{args.rounds} done (load {loadavg()[0]:.2f})")
            if r == 0 and args.floor and args.rounds > 1:
                # The floors join from round 2, calibrated to the first round's medians.
                first = peer_stats(args, f"{name}.round1", raw_samples(args, live, kinds, blocks, other))
                medians = {st["contender"]: st["p50_ms"] * 1e6 for st in first["contenders"]}
                for c, target, thr, of in floor_targets(args, live, procs, kinds, medians):
                    fl = start_floor(args, name, c, target, thr, weight_bytes(args, entry, ts_info, of),
                                     logs, workers, skipped)
                    if fl:
                        kinds[c], procs[c] = "floor", fl
                        live.append(c)
                        ks[c] = int(min(args.max_block, max(args.min_block, args.block_s / (target / 1e9) / len(fl))))
                        blocks[c], other[c] = [[] for _ in fl], []
    finally:
        for w in workers:
            w.close()

    result["interrupted"] = interrupted
    figures = peer_stats(args, name, raw_samples(args, live, kinds, blocks, other))
    for st in figures["contenders"]:
        c = st["contender"]
        st["block"], st["ready"] = ks[c], procs[c][0].ready
        result["contenders"].append(st)
    result["best_peer"] = figures.get("best_peer")
    if result["best_peer"]:
        result["best_peer_p95_over_p50"] = figures["best_peer_p95_over_p50"]
    return result


def raw_samples(args, live, kinds, blocks, other):
    """What peerstats reads: every contender's latencies by process and round."""
    return {"seed": args.seed, "noise_cpu": args.noise_cpu,
            "contenders": [{"contender": c, "kind": kinds[c],
                            "floor_for": c.split("@", 1)[1] if kinds[c] == "floor" else "",
                            "blocks": blocks[c], "other_cpu": [o["cpus"] for o in other[c]]} for c in live]}


# ---------------------------------------------------------------- output


def fmt(x, nd=3):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def markdown(doc):
    m = doc["machine"]
    lines = [f"# bench-peers {doc['started']}", "",
             f"CPU {m['model']} ({', '.join(m['isa'])}), {m['usable_cpus']} usable CPUs; batch 1, "
             f"{doc['threads']} CPUs (thread count: {doc.get('thread_choice', 'fixed')}); "
             f"{doc['rounds']} rounds, shuffled; load average before "
             f"{doc['load_before']}, after {doc['load_after']}.", "",
             "Machine interruptions (`torchspeed probe --interrupts 1s`, all usable CPUs busy): before "
             f"{interruption_text(doc.get('interruptions_before'))}; "
             f"after {interruption_text(doc.get('interruptions_after'))}.", "",
             "| model | contender | threads | p50 ms | p95 ms | p99 ms | p95/p50 [95% CI] | vs best peer (p50) "
             "| 95% CI | p50 per process | others' CPU (median/max) | cosine vs FP32 (streams: max abs vs reference) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["models"]:
        for c in sorted(r["contenders"], key=lambda c: c["p50_ms"]):
            best = " **best peer**" if c["contender"] == r["best_peer"] else ""
            ratio = f"{c['ratio_to_best']:.2f}x" if "ratio_to_best" in c else ""
            ci = (f"{c['ratio_ci95'][0]:.2f}-{c['ratio_ci95'][1]:.2f}"
                  if "ratio_ci95" in c and not math.isnan(c["ratio_ci95"][0]) else "")
            cos = (c.get("ready") or {}).get("cosine_vs_fp32")
            art_err = (r.get("torchspeed_artifact") or {}).get("max_abs_vs_ref") if c["kind"] == "torchspeed" else None
            err = (c.get("ready") or {}).get("max_abs_vs_ref", art_err)
            acc = fmt(cos, 4) if err is None else f"max abs {err:.1e}"
            thr = (c.get("ready") or {}).get("threads", "-")
            lines.append(f"| {r['model']} | {c['contender']}{best} | {thr} | {fmt(c['p50_ms'])} | {fmt(c['p95_ms'])} | "
                         f"{fmt(c.get('p99_ms'))} | {tail_cell(c)} | {ratio} | {ci} | "
                         f"{' / '.join(fmt(x) for x in c.get('process_p50_ms', []))} | "
                         f"{c['other_cpu_median']:.2f}/{c['other_cpu_max']:.2f} | {acc} |")
        for s in r["skipped"]:
            lines.append(f"| {r['model']} | {s['contender']} | not run: {s['why']} | | | | | | | | | |")
    verdict = verdict_lines(doc)
    if verdict:
        lines += ["", "## Against the best peer", ""] + verdict
    tails = tail_lines(doc)
    if tails:
        lines += ["", "## p95/p50 against the best peer's, and the machine's floor", ""] + tails
    lines += ["", "Ratios: torchspeed contender over best peer, each side's level the median over its processes of "
              "each process's median block median; the CI resamples rounds (paired) and each side's processes "
              "(pkg/bench ProcessRatioCI, computed by peerstats from WORK/samples). 'p50 per process': each "
              "contender runs in several processes that take separate turns; their spread is noise no "
              "single-process figure shows. 'others' CPU' is what processes outside this benchmark used during "
              "the contender's blocks (CPUs); warnings below name blocks above the threshold."]
    if doc["warnings"]:
        lines += [""] + [f"- warning: {w}" for w in doc["warnings"]]
    return "\n".join(lines) + "\n"


def with_best_peer(doc):
    """(model result, its contenders by name, its best peer) for every model a peer ran on."""
    for r in doc["models"]:
        by = {c["contender"]: c for c in r["contenders"]}
        best = by.get(r.get("best_peer"))
        if best:
            yield r, by, best


# torchspeed's goal: a p50 at most this fraction of the best peer's (1.5x faster).
TARGET_RATIO = 0.67


def verdict_lines(doc):
    """One row per torchspeed contender: its p50 over the best peer's (the goal: at most
    TARGET_RATIO), its p95 and p99 against the best peer's as absolute figures (a ratio of
    ratios would reward being slower), the artifact's precision and validation, and what
    optimize cost."""
    rows = []
    for r, by, best in with_best_peer(doc):
        art = r.get("torchspeed_artifact") or {}
        opt = art.get("optimize") or {}
        opt_cell = "-"
        if opt.get("wall_s"):
            opt_cell = f"{opt['wall_s']:.0f} s, {opt.get('search') or '?'} search" + (
                "" if opt.get("this_run") else f" (earlier run, {(opt.get('started') or '?')[:16]})")
        val = art.get("validation_metrics") or {}
        acc = art.get("precision") or "?"
        if art.get("max_abs_vs_ref") is not None:
            acc += f", max abs {art['max_abs_vs_ref']:.1e} over the stream"
        elif val.get("cosine") is not None:
            acc += f", cosine {val['cosine']:.4f}"
        if val.get("top1_agreement") is not None:
            acc += f", top-1 agreement {val['top1_agreement']:.3f}"
        if art.get("validation_passed") is False:
            acc += ", validation FAILED"

        def vs(c, key):
            a, b = c.get(key), best.get(key)
            if a is None or b is None:
                return "-"
            return f"{a:.3f} vs {b:.3f} ({'not above' if a <= b else 'above'})"
        for name in ("ts-bench", "ts-go"):
            c = by.get(name)
            if not c or "ratio_to_best" not in c:
                continue
            ci = c.get("ratio_ci95") or [float("nan")] * 2
            ratio = c["ratio_to_best"]
            rows.append(f"| {r['model']} | {name} | {best['contender']} | {ratio:.2f}x "
                        f"[{fmt(ci[0], 2)}, {fmt(ci[1], 2)}] | {'yes' if ratio <= TARGET_RATIO else 'no'} | "
                        f"{vs(c, 'p95_ms')} | {vs(c, 'p99_ms')} | {acc} | {opt_cell} |")
    if not rows:
        return []
    return ([f"| model | torchspeed | best peer | p50 ratio [95% CI] | <= {TARGET_RATIO}x | p95 ms vs peer's | "
             "p99 ms vs peer's | artifact, accuracy | optimize wall |",
             "|---|---|---|---|---|---|---|---|---|"] + rows)


def tail_cell(c):
    ci = c.get("p95_over_p50_ci95")
    r = c["p95_over_p50"]
    return f"{r:.2f} [{fmt(ci[0], 2)}, {fmt(ci[1], 2)}]" if ci else f"{r:.2f}"


def tail_lines(doc):
    """One line per torchspeed contender: its p95/p50 minus the best peer's with the paired
    interval, and the floor's p95/p50 at its duration and at the peer's."""
    out = []
    for r, by, best in with_best_peer(doc):
        floors = {c["floor_for"]: c for c in r["contenders"] if c["kind"] == "floor"}
        peer_floor = next((f for k, f in floors.items() if by.get(k, {}).get("kind") == "peer"), None)
        for c in r["contenders"]:
            tv = c.get("tail_vs_best")
            if c["kind"] != "torchspeed" or not tv:
                continue
            verdict = ("worse (the whole interval is above 0)" if tv["worse"] else
                       "better (the whole interval is below 0)" if tv["better"] else
                       "no difference the rounds can show")
            line = (f"- {r['model']} {c['contender']}: p95/p50 {c['p95_over_p50']:.2f} vs {best['contender']} "
                    f"{best['p95_over_p50']:.2f}: difference {tv['diff']:+.2f} "
                    f"[{fmt(tv['ci95'][0], 2)}, {fmt(tv['ci95'][1], 2)}], {verdict}")
            fl = floors.get(c["contender"]) if c["contender"] == "ts-bench" else None
            ts_floor = floors.get("ts-bench")
            parts = []

            def floor_part(f, lead):
                rd = f.get("ready") or {}
                return (f"{lead}{f['p50_ms']:.3f} ms ({rd.get('threads', '?')} thr, "
                        f"{rd.get('weight_bytes', 0) / 1e6:.1f} MB read) {f['p95_over_p50']:.2f}")
            if fl:
                parts.append(floor_part(fl, "fixed work at "))
            if peer_floor:
                parts.append(floor_part(peer_floor, "at "))
            if parts:
                line += "; the machine's floor: " + ", ".join(parts)
            ex_ts, ex_peer = c.get("above_floor"), best.get("above_floor")
            if ts_floor and peer_floor and ex_ts and ex_peer and c["contender"] in ("ts-bench", "ts-go"):
                # How much each adds to what the machine gives a call of its own length: a
                # faster call has the higher floor, so the plain difference can favour the slower.
                line += (f"; above the floor at its own length: {ex_ts['diff']:+.2f}, "
                         f"{best['contender']} {ex_peer['diff']:+.2f}")
            out.append(line)
    if out:
        out += ["", "The difference's interval resamples whole rounds in pairs (both ran in the same rounds). "
                "The floor is floor_worker: the same fixed work every call (a buffer the size of the model file "
                "read once and multiply-add chains, in OpenMP regions), calibrated to last as long as a contender's "
                "median call in the first round and timed "
                "in the same rounds; its p95/p50 is what the machine alone adds at that duration. 'Above the floor' "
                "is a contender's p95/p50 minus the floor's at its own duration "
                "(ts-bench's floor for both torchspeed contenders)."]
    return out


def write(doc, out):
    with open(out + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(out + ".tmp", out)
    return write_markdown(doc, out)


def write_markdown(doc, out):
    """Writes doc's Markdown beside out (.json -> .md), whole or not at all."""
    md = markdown(doc)
    path = os.path.splitext(out)[0] + ".md"
    with open(path + ".tmp", "w") as f:
        f.write(md)
    os.replace(path + ".tmp", path)
    return md


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--threads", type=int, default=2,
                    help="CPUs for the run: the peers' thread count, and torchspeed's budget (see --thread-choice)")
    ap.add_argument("--thread-choice", choices=("measured", "fixed"), default="measured",
                    help="measured: torchspeed optimize measures 1..--threads threads and its artifact runs "
                         "with the count it chose (the run is confined to --threads CPUs, so every contender "
                         "has the same CPUs); fixed: torchspeed uses exactly --threads, as the peers do")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--block-s", type=float, default=0.25, help="target seconds per contender per round")
    ap.add_argument("--processes", type=int, default=2,
                    help="processes per contender (each takes its own turns; the block is split between them)")
    ap.add_argument("--min-block", type=int, default=5)
    ap.add_argument("--block-warmup", type=int, default=1,
                    help="untimed runs at the start of each turn (the process was stopped between turns)")
    ap.add_argument("--max-block", type=int, default=2000)
    ap.add_argument("--noise-cpu", type=float, default=0.1,
                    help="warn when other processes used more than this many CPUs during a block")
    ap.add_argument("--fixtures",
                    default=os.environ.get("TORCHSPEED_FIXTURES") or os.path.join(ROOT, "build", "fixtures"))
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "peers"))
    ap.add_argument("--out", help="JSON result (default WORK/peers.json; Markdown beside it)")
    ap.add_argument("--torchspeed", default=os.path.join(ROOT, "build", "torchspeed"))
    ap.add_argument("--goworker", default=os.path.join(ROOT, "build", "peers", "goworker"))
    ap.add_argument("--floor-worker", default=os.path.join(ROOT, "build", "peers", "floor_worker"))
    ap.add_argument("--peerstats", default=os.path.join(ROOT, "build", "peers", "peerstats"),
                    help="the statistics (scripts/peers/peerstats): every published figure comes from it")
    ap.add_argument("--no-floor", dest="floor", action="store_false",
                    help="do not time the machine's floor "
                         "(fixed work as long as ts-bench's and the fastest peer's calls)")
    ap.add_argument("--diagnostics", action="store_true", help="also time ts-go-locked and ts-go-cxx")
    ap.add_argument("--contenders",
                    help="only these contenders (comma-separated names, e.g. ts-bench,ts-bench-default)")
    ap.add_argument("--pt2-root", default=os.environ.get("PT2_ROOT") or os.path.join(ROOT, "build", "_pt2-root"),
                    help="the Debian 13 root of `make peers-pt2-root` the PyTorch 2 peers run in")
    ap.add_argument("--pt2-recipes", default=",".join(PT2_RECIPES),
                    help="which PyTorch 2 recipes (pt2_worker.py --recipe; max-autotune compiles longest)")
    ap.add_argument("--no-pt2", dest="pt2_root", action="store_const", const=None,
                    help="leave the PyTorch 2 peers out (torch.compile, PT2E INT8)")
    ap.add_argument("--reoptimize", action="store_true", help="re-run torchspeed optimize even if its report is newer")
    ap.add_argument("--ready-timeout", type=float, default=600)
    ap.add_argument("--blocks",
                    help="also write every block's latencies, in the order timed, as JSON lines to this file")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--throughput", action="store_true",
                    help="measure items/s at saturation instead (scripts/peers/throughput.py): every contender "
                         "as instances x threads over the --threads CPUs; writes WORK/throughput.json and .md")
    ap.add_argument("--pin-peers", action="store_true",
                    help="--throughput: also time each peer with its streams pinned (taskset) as torchspeed's are")
    ap.add_argument("--spread-warn", type=float, default=1.15,
                    help="warn when a contender's processes differ by more than this factor at p50")
    ap.add_argument("--render", metavar="JSON",
                    help="write a saved result's Markdown again (beside it, with this version's tables) and "
                         "print it; runs nothing")
    args = ap.parse_args()
    if args.render:
        try:
            with open(args.render) as f:
                doc = json.load(f)
            print(write_markdown(doc, args.render))
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"bench-peers: --render {args.render}: {e}")
        return
    if args.processes < 1:
        sys.exit(f"bench-peers: --processes {args.processes}: want 1 or more")

    def interrupt(signum, frame):
        raise KeyboardInterrupt
    # SIGTERM (kill, a CI timeout) as Ctrl-C: keep the complete rounds, and resume and close the
    # workers, which would otherwise stay stopped (SIGSTOP between turns) after the driver died.
    signal.signal(signal.SIGTERM, interrupt)
    tools = [(args.torchspeed, "make build"), (args.goworker, "make bench-peers builds it"),
             (args.peerstats, "make bench-peers builds it")]
    if args.floor:
        tools.append((args.floor_worker, "make bench-peers builds it, or pass --no-floor"))
    for tool, hint in tools:
        if not os.access(tool, os.X_OK):
            sys.exit(f"bench-peers: {tool} missing: {hint}")
    if not os.path.isdir(os.path.join(HERE, "node_modules", "onnxruntime-node")):
        sys.exit("bench-peers: onnxruntime-node missing: run `make bench-peers` (it runs npm ci in scripts/peers)")
    if shutil.which("node") is None:
        sys.exit("bench-peers: node not on PATH: apt-get install nodejs npm")
    args.work = os.path.abspath(args.work)
    args.pt2_root = args.pt2_root and os.path.abspath(args.pt2_root)
    pt2_recipe_list(args.pt2_recipes)
    cpus = sorted(os.sched_getaffinity(0))
    if args.threads < 1 or args.threads > len(cpus):
        sys.exit(f"bench-peers: --threads {args.threads}: want 1 to the {len(cpus)} CPUs this process may use")
    if args.thread_choice == "measured" and len(cpus) > args.threads:
        # Every contender inherits this: the same CPUs for all, and optimize's thread choice
        # stays within the budget.
        os.sched_setaffinity(0, cpus[:args.threads])
        log(f"confined to CPUs {cpus[:args.threads]} (--threads {args.threads}, --thread-choice measured)")
    args.torchspeed, args.goworker = os.path.abspath(args.torchspeed), os.path.abspath(args.goworker)
    args.floor_worker, args.peerstats = os.path.abspath(args.floor_worker), os.path.abspath(args.peerstats)
    os.makedirs(args.work, exist_ok=True)
    args.fixtures = os.path.abspath(args.fixtures)
    man = load_manifest(args.fixtures)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    for n in names:
        if n not in man:
            sys.exit(f"bench-peers: fixture {n!r} not in {args.fixtures}/manifest.json (have: {', '.join(man)})")
    if args.contenders:
        args.contenders = {c.strip() for c in args.contenders.split(",") if c.strip()}
    args.out_path = os.path.abspath(args.out or os.path.join(args.work, "throughput.json" if args.throughput
                                                             else "peers.json"))
    args.blocks_out = open(args.blocks, "w") if args.blocks else None
    os.makedirs(os.path.dirname(args.out_path), exist_ok=True)
    if args.throughput:
        import throughput
        throughput.run(args, man, names)
        return
    rng = random.Random(args.seed)
    doc = {"schema_version": SCHEMA_VERSION, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "machine": cpu_info(), "threads": args.threads, "thread_choice": args.thread_choice, "batch": 1,
           "rounds": args.rounds,
           "block_s": args.block_s, "noise_cpu_threshold": args.noise_cpu, "load_before": loadavg(),
           "interruptions_before": interruptions(args),
           "fixtures": args.fixtures, "models": [], "warnings": []}
    out = args.out_path
    for n in names:
        log(f"{n}: preparing contenders")
        r = bench_model(args, man[n], rng)
        doc["models"].append(r)
        for c in r["contenders"]:
            if c.get("process_spread", 1) > args.spread_warn:
                doc["warnings"].append(
                    f"{n} {c['contender']}: its processes' p50s differ {c['process_spread']:.2f}x "
                    f"({' / '.join(fmt(x) for x in c['process_p50_ms'])} ms): per-process noise of that size")
            if c["noisy_blocks"]:
                doc["warnings"].append(
                    f"{n} {c['contender']}: other processes used > {args.noise_cpu} CPU in {c['noisy_blocks']} of "
                    f"{c['blocks']} blocks (max {c['other_cpu_max']:.2f} CPUs): compare with care")
        # Written after every model, so a long run stopped early keeps what it measured.
        doc["load_after"] = loadavg()
        md = write(doc, out)
        if r["interrupted"]:
            log("interrupted: the remaining models were not measured")
            break
    doc["interruptions_after"] = interruptions(args)
    md = write(doc, out)
    print(md)
    for w in doc["warnings"]:
        log("warning: " + w)
    log(f"wrote {out} and {os.path.splitext(out)[0]}.md")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        log("interrupted before a model's rounds began: nothing more written")
        sys.exit(130)
    finally:
        for w in STARTED:
            w.close()
