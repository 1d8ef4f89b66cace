"""Tests of the PyTorch 2 peer's logic that need no PyTorch 2 root: the weight transfer from the
TorchScript fixtures into the eager modules (in this machine's PyTorch), and how bench_peers.py
lists the PyTorch 2 contenders. Run by `make test-peers`."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.environ.get("TORCHSPEED_FIXTURES") or os.path.join(ROOT, "build", "fixtures")
WORKER = os.path.join(HERE, "pt2_worker.py")
sys.path.insert(0, HERE)
import bench_peers  # noqa: E402


def fixture(name):
    with open(os.path.join(FIXTURES, "manifest.json")) as f:
        return next(e for e in json.load(f)["fixtures"] if e["name"] == name)


def check_weights(name, model_file=None):
    e = fixture(name)
    argv = [sys.executable, WORKER, "--check-weights", "--threads", "1", "--fixture", name,
            "--model", os.path.join(FIXTURES, model_file or e["file"]),
            "--input", os.path.join(FIXTURES, e["inputs"][0]["file"])]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout.strip()


class WeightTransfer(unittest.TestCase):
    def test_fixtures_transfer_exactly(self):
        # Traced CNNs, the trained digits CNN, a traced and a scripted TransformerEncoder.
        for name in ("digits", "mobilenet_v2", "transformer_traced", "transformer_scripted"):
            with self.subTest(name=name):
                rc, out = check_weights(name)
                self.assertEqual(rc, 0, out)
                got = json.loads(out)
                self.assertEqual(got["fixture"], name)
                self.assertLessEqual(got["eager_vs_torchscript_maxabs"], 1e-4)

    def test_other_network_refused(self):
        # mobilenet_v2's weights do not fit resnet18's eager module: strict loading names them.
        rc, out = check_weights("resnet18", model_file=fixture("mobilenet_v2")["file"])
        self.assertEqual(rc, 1)
        self.assertTrue(out.startswith("error RuntimeError"), out)
        self.assertIn("Missing key", out)

    def test_unknown_fixture_refused(self):
        rc, out = check_weights("multi")
        self.assertEqual(rc, 1)
        self.assertIn("no eager module known", out)


class Contenders(unittest.TestCase):
    def args(self, root):
        work = tempfile.mkdtemp()
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", work]))
        return argparse.Namespace(pt2_root=root, pt2_recipes=",".join(bench_peers.PT2_RECIPES),
                                  fixtures=os.path.abspath(FIXTURES), work=work, threads=2)

    def test_no_root_skips_with_the_command(self):
        a = self.args(os.path.join(tempfile.gettempdir(), "no-such-pt2-root"))
        out, skipped = bench_peers.pt2_contenders(a, fixture("digits"), "/unused")
        self.assertEqual(out, [])
        self.assertEqual(len(skipped), 3)
        self.assertIn("make peers-pt2-root", skipped[0]["why"])

    def test_off(self):
        a = self.args(None)
        self.assertEqual(bench_peers.pt2_contenders(a, fixture("digits"), "/unused"), ([], []))

    @unittest.skipUnless(os.geteuid() == 0, "the PyTorch 2 peers run only as root")
    def test_contenders_see_the_fixtures_under_mnt(self):
        root = tempfile.mkdtemp()
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", root]))
        open(os.path.join(root, ".ts-pt2-ready"), "w").close()
        a = self.args(root)
        e = fixture("resnet18")
        calib = os.path.join(FIXTURES, e["calib"]["inputs"][0]["file"])
        out, skipped = bench_peers.pt2_contenders(a, e, calib)
        self.assertEqual(skipped, [])
        names = [n for n, _, _ in out]
        self.assertEqual(sorted(names), sorted(f"{n}-{t}t" for t in (1, 2) for n in
                                               ("pt2-inductor", "pt2-inductor-max-autotune", "pt2e-int8")))
        for name, argv, kind in out:
            self.assertEqual(kind, "peer")
            self.assertIn("/mnt/fixtures/resnet18.pt", argv)
            if name.startswith("pt2e-int8"):
                self.assertEqual(argv[argv.index("--calib") + 1], "/mnt/fixtures/" + os.path.basename(calib))
        a.pt2_recipes = "inductor,bogus"
        with self.assertRaises(SystemExit):
            bench_peers.pt2_contenders(a, e, calib)


if __name__ == "__main__":
    unittest.main()
