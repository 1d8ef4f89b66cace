"""Tests of bench_peers.py's own logic, with no model timed: which thread counts the peers run
at, the "Against the best peer" table, and a worker that has died. Run by `make test-peers`."""

import argparse
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_peers  # noqa: E402


def contender(name, kind, p50, p95, p99, ratio=None, ci=None):
    c = {"contender": name, "kind": kind, "p50_ms": p50, "p95_ms": p95, "p99_ms": p99}
    if ratio is not None:
        c["ratio_to_best"], c["ratio_ci95"] = ratio, ci
    return c


class PeerThreads(unittest.TestCase):
    def test_one_thread_added_above_one(self):
        self.assertEqual(bench_peers.peer_thread_counts(argparse.Namespace(threads=2)), [("2", ""), ("1", "-1t")])
        self.assertEqual(bench_peers.peer_thread_counts(argparse.Namespace(threads=1)), [("1", "")])


class Verdict(unittest.TestCase):
    def doc(self, this_run):
        return {"models": [{
            "model": "m", "best_peer": "ort-fp32-1t",
            "torchspeed_artifact": {"precision": "fp32", "validation_passed": True,
                                    "validation_metrics": {"cosine": 0.99999},
                                    "optimize": {"wall_s": 52.4, "search": "quick", "this_run": this_run,
                                                 "started": "2026-12-05T10:16:35.29Z"}},
            "contenders": [
                contender("ort-fp32-1t", "peer", 1.0, 1.5, 2.0),
                contender("ts-bench", "torchspeed", 0.6, 1.4, 2.5, 0.6, [0.55, 0.7]),
                contender("ts-go", "torchspeed", 0.7, 1.6, 1.9, 0.7, [0.65, 0.75]),
            ]}, {"model": "no-peer", "best_peer": None, "contenders": []}]}

    def test_rows(self):
        rows = bench_peers.verdict_lines(self.doc(True))
        self.assertEqual(len(rows), 4, rows)  # header, rule, one row per torchspeed contender
        bench, go = rows[2], rows[3]
        # The goal judged on the p50 ratio; tails as absolute figures against the peer's.
        self.assertIn("| 0.60x [0.55, 0.70] | yes |", bench)
        self.assertIn("1.400 vs 1.500 (not above)", bench)
        self.assertIn("2.500 vs 2.000 (above)", bench)
        self.assertIn("| 0.70x [0.65, 0.75] | no |", go)
        self.assertIn("1.600 vs 1.500 (above)", go)
        self.assertIn("fp32, cosine 1.0000", bench)
        self.assertIn("52 s, quick search |", bench)

    def test_earlier_artifact_dated(self):
        self.assertIn("(earlier run, 2026-12-05T10:16)", bench_peers.verdict_lines(self.doc(False))[2])

    def test_no_peer_no_table(self):
        self.assertEqual(bench_peers.verdict_lines({"models": [{"model": "x", "best_peer": None,
                                                                "contenders": []}]}), [])


class DeadWorker(unittest.TestCase):
    def test_run_on_exited_worker_names_it(self):
        with tempfile.TemporaryDirectory() as d:
            w = bench_peers.Worker("gone", [sys.executable, "-c", "import sys; sys.stderr.write('boom\\n')"],
                                   os.path.join(d, "gone.log"))
            w.proc.wait()
            with self.assertRaises(EOFError) as e:
                w.run(3, 5)
            w.close()
        self.assertIn("gone: exited (rc 0): boom", str(e.exception))


if __name__ == "__main__":
    unittest.main()
