#!/usr/bin/env python3
"""step_ratios.py on a hand-made benchmark file and reference lines: the tandem rows are
parsed from Google Benchmark's names and counters, each is divided by the reference runs of
its model and micro batch only (2000 / 1000 = 2.00x, 2000 / 4000 = 0.50x), lines that are not
JSON are skipped, and the aggregate rows of repetitions are left out.

    python3 tests/gpu/test_step_ratios.py tests/gpu/step_ratios.py
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                                "step_ratios.py")

BENCH = {"benchmarks": [
    {"name": "BM_Gpt2_124M/mbs:4/bf16:1/flash:1/microbatches:8/real_time",
     "run_type": "iteration", "tokens/s": 2000.0, "TFLOP/s": 2.5, "MFU": 0.25,
     "fwd_bwd_ms": 30.0, "optimizer_ms": 1.5},
    {"name": "BM_Gpt2_124M/mbs:4/bf16:1/flash:1/microbatches:8/real_time_mean",
     "run_type": "aggregate", "tokens/s": 9.0, "TFLOP/s": 9.0},
    {"name": "BM_Gpt_1_3B/mbs:1/bf16:1/flash:0/microbatches:8/real_time",
     "run_type": "iteration", "tokens/s": 500.0, "TFLOP/s": 4.0, "MFU": 0.4}]}
TORCH = [
    {"name": "torch/124m/mbs:4/microbatches:8/eager", "tokens_per_s": 1000.0, "tflops": 1.2,
     "mfu": 0.12, "fwd_bwd_ms": 60.0, "optimizer_ms": 2.0},
    {"name": "torch/124m/mbs:4/microbatches:8/compile", "tokens_per_s": 4000.0, "tflops": 5.0,
     "mfu": 0.5, "fwd_bwd_ms": 15.0, "optimizer_ms": 1.0},
    {"name": "torch/124m/mbs:8/microbatches:8/eager", "tokens_per_s": 100.0, "tflops": 1.0,
     "mfu": 0.1, "fwd_bwd_ms": 1.0, "optimizer_ms": 1.0}]


class StepRatios(unittest.TestCase):
    def run_script(self):
        with tempfile.TemporaryDirectory() as d:
            bench, ref = os.path.join(d, "b.json"), os.path.join(d, "t.jsonl")
            with open(bench, "w") as f:
                json.dump(BENCH, f)
            with open(ref, "w") as f:
                f.write("compiling…\n" + "\n".join(json.dumps(r) for r in TORCH) + "\n")
            return subprocess.run([sys.executable, SCRIPT, bench, ref], check=True,
                                  capture_output=True, text=True).stdout

    def test_ratios_per_model_and_micro_batch(self):
        out = self.run_script()
        row = next(l for l in out.splitlines() if l.startswith("tandem bf16:1 flash:1"))
        self.assertIn("torch eager 2.00x", row)
        self.assertIn("torch compile 0.50x", row)
        self.assertNotIn("20.00x", row)  # the mbs-8 reference is not its peer
        self.assertEqual(row.split()[6], "2000")  # the iteration's, not the aggregate's 9
        self.assertEqual(sum(l.startswith("tandem bf16:1 flash:1") for l in out.splitlines()), 1)
        big = next(l for l in out.splitlines() if l.startswith("tandem bf16:1 flash:0"))
        self.assertNotIn("torch", big)  # no 1.3b reference: no ratio

    def test_usage_without_two_files(self):
        r = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()
