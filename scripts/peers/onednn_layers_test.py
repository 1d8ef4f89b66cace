"""Tests of onednn_layers.py on real verbose logs: the fixtures' INT8 resnet18 (quantize_jit,
onednn engine) run under ONEDNN_VERBOSE=1 on this machine's best ISA and with oneDNN held to
AVX2. Run by `make test-peers`."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.environ.get("TORCHSPEED_FIXTURES") or os.path.join(ROOT, "build", "fixtures")
TOOL = os.path.join(HERE, "onednn_layers.py")
sys.path.insert(0, HERE)
import onednn_layers  # noqa: E402

# Three forwards of the INT8 reference at one thread, the verbose lines on stdout.
RUN = """
import sys, numpy as np, torch
torch.set_num_threads(1)
torch.backends.quantized.engine = "onednn"
m = torch.jit.load(sys.argv[1])
x = torch.from_numpy(np.load(sys.argv[2]))
with torch.no_grad():
    for _ in range(3):
        m(x)
"""


def verbose_log(path, isa=None):
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    env.pop("DNNL_VERBOSE", None)
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if isa:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    with open(path, "w") as f:
        subprocess.run([sys.executable, "-c", RUN, os.path.join(FIXTURES, "resnet18_int8_ref.pt"),
                        os.path.join(FIXTURES, "resnet18_in_x.npy")], env=env, stdout=f, check=True, timeout=600)


def torchvision_conv_macs():
    """Multiply-adds of resnet18's convolutions at 1x3x224x224, from torchvision's module and
    the output shapes its forward gives (not from oneDNN's descriptors)."""
    import torch
    import torchvision
    total = [0]

    def hook(mod, inp, out):
        kh, kw = mod.kernel_size
        total[0] += out.numel() * (mod.in_channels // mod.groups) * kh * kw

    m = torchvision.models.resnet18()
    for mod in m.modules():
        if isinstance(mod, torch.nn.Conv2d):
            mod.register_forward_hook(hook)
    with torch.no_grad():
        m.eval()(torch.zeros(1, 3, 224, 224))
    return total[0]


@unittest.skipUnless(os.path.exists(os.path.join(FIXTURES, "resnet18_int8_ref.pt")),
                     "needs the fixtures (make fixtures)")
class Resnet18Int8(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.want_macs = torchvision_conv_macs()
        cls.logs = {}
        for isa in ("best", "AVX2"):
            cls.logs[isa] = os.path.join(cls.tmp.name, "verbose-%s.txt" % isa)
            verbose_log(cls.logs[isa], None if isa == "best" else isa)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, isa):
        res = onednn_layers.analyse(onednn_layers.read_exec(self.logs[isa]), peak_gops=100.0)
        convs = [ly for ly in res["layers"] if ly["primitive"] == "convolution"]
        # One forward: the reference's 20 quantized convolutions and its one quantized linear.
        self.assertEqual(len(convs), 20, res["kinds"])
        self.assertEqual(sum(1 for ly in res["layers"] if ly["primitive"] in ("matmul", "inner_product")), 1)
        self.assertGreaterEqual(res["forwards"], 2)
        self.assertEqual(sum(ly["macs"] for ly in convs), self.want_macs)
        # quantize_jit's onednn convolutions read and write u8 NHWC from the first to the last.
        self.assertEqual(res["activation_layouts"], ["u8:acdb"])
        self.assertTrue(all(ly["min_ms"] > 0 for ly in convs))
        self.assertGreater(res["fraction_of_peak"], 0)
        return res

    def test_best_isa(self):
        self.check("best")

    def test_avx2(self):
        res = self.check("AVX2")
        impls = {ly["impl"] for ly in res["layers"]}
        self.assertFalse([i for i in impls if "avx512" in i], impls)

    def test_vs(self):
        best, avx2 = self.check("best"), self.check("AVX2")
        same = onednn_layers.compare(best, best)
        self.assertTrue(same["same_kernels"], same["differences"])
        self.assertEqual(same["ratio"], 1.0)
        # On a CPU with AVX-512 the capped run used other kernels (and weight layouts) for every
        # convolution; on an AVX2-only CPU both runs are the same.
        wide = any("avx512" in ly["impl"] for ly in best["layers"])
        c = onednn_layers.compare(best, avx2)
        self.assertEqual(c["same_kernels"], not wide, c["differences"])
        if wide:
            convs = [d for d in c["differences"] if d.startswith("convolution ")]
            self.assertEqual(len(convs), 20, c["differences"])
            self.assertFalse([d for d in c["differences"] if "only in" in d], c["differences"])
        r = subprocess.run([sys.executable, TOOL, self.logs["best"], "--vs", self.logs["AVX2"]],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("sums of per-primitive minimums", r.stdout)

    def test_cli_table_and_bad_log(self):
        log = self.logs["best"]
        r = subprocess.run([sys.executable, TOOL, log, "--forwards", "2"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("22 primitives per forward, minimum of 2 forwards", r.stdout)
        self.assertIn("convolution activation layouts: u8:acdb", r.stdout)
        empty = os.path.join(self.tmp.name, "empty.txt")
        with open(empty, "w") as f:
            f.write("onednn_verbose,info,oneDNN v2.6.3\n")
        r = subprocess.run([sys.executable, TOOL, empty], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no repeated forward", r.stderr)
        r = subprocess.run([sys.executable, TOOL, os.path.join(self.tmp.name, "missing.txt")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("missing.txt", r.stderr)
        # A report that is JSON but has no roofline: exit 2 naming it, not a traceback.
        rep = os.path.join(self.tmp.name, "report.json")
        with open(rep, "w") as f:
            f.write("[1, 2]")
        r = subprocess.run([sys.executable, TOOL, log, "--report", rep], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("report.json: no roofline.peak_per_s", r.stderr)


if __name__ == "__main__":
    unittest.main()
