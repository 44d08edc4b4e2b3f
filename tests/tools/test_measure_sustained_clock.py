#!/usr/bin/env python3
"""scripts/measure_sustained_clock.py without a GPU: its reading of nvidia-smi's samples
(hand-written lines: a power-capped one, a thermally slowed one, an idle one, and lines that
are not samples), the summary of a window, and its refusal of bad arguments before it
touches the GPU (each names the flag, the value and the rule).

    python3 tests/tools/test_measure_sustained_clock.py scripts/measure_sustained_clock.py
"""
import importlib.util
import os
import subprocess
import sys
import unittest

SCRIPT = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "..", "scripts", "measure_sustained_clock.py")

spec = importlib.util.spec_from_file_location("measure_sustained_clock", SCRIPT)
clock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(clock)

CAPPED = "1755, 1980, 699.41, 700.00, 61, 0x0000000000000004"
THERMAL = "1410, 1980, 650.00, 700.00, 87, 0x0000000000000024"
IDLE = "1980, 1980, 75.20, 700.00, 40, 0x0000000000000001"


class ReadSamples(unittest.TestCase):
    def test_a_capped_sample(self):
        s = clock.parse_sample(CAPPED + "\n")
        self.assertEqual(s["clock_mhz"], 1755)
        self.assertEqual(s["max_clock_mhz"], 1980)
        self.assertAlmostEqual(s["power_w"], 699.41)
        self.assertEqual(s["power_limit_w"], 700)
        self.assertEqual(s["temperature_c"], 61)
        self.assertEqual(s["reasons"], 4)

    def test_reason_bits_by_name(self):
        self.assertEqual(clock.reason_names(0x24), ["SwPowerCap", "SwThermalSlowdown"])
        self.assertEqual(clock.reason_names(0x1), ["GpuIdle"])
        self.assertEqual(clock.reason_names(0), [])

    def test_lines_that_are_not_samples(self):
        self.assertIsNone(clock.parse_sample("[N/A], 1980, 700.00, 700.00, 61, 0x4"))
        self.assertIsNone(clock.parse_sample("1755, 1980, 699.41, 700.00, 61"))
        self.assertIsNone(clock.parse_sample("Failed to initialize NVML: Unknown Error"))
        self.assertIsNone(clock.parse_sample("1755, 1980, 699.41, 700.00, 61, 0xZZ"))


class Summarise(unittest.TestCase):
    def test_medians_and_reasons_of_a_window(self):
        window = [clock.parse_sample(x) for x in (CAPPED, THERMAL, IDLE)]
        out = clock.summarise(window)
        self.assertEqual(out["samples"], 3)
        self.assertEqual(out["clock_mhz"], 1755)  # median of 1410, 1755, 1980
        self.assertEqual(out["power_w"], 650.0)  # median of 75.2, 650, 699.41
        self.assertAlmostEqual(out["power_capped_share"], 2 / 3)
        self.assertEqual(out["reasons"], ["GpuIdle", "SwPowerCap", "SwThermalSlowdown"])

    def test_an_empty_window(self):
        self.assertEqual(clock.summarise([]), {"samples": 0})


class RefusesBadArguments(unittest.TestCase):
    def refused(self, *args):
        run = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
        self.assertNotEqual(run.returncode, 0)
        self.assertNotIn("Traceback", run.stderr)
        return run.stderr

    def test_each_rule(self):
        self.assertIn("--seconds = 0.5: must be at least 1", self.refused("--seconds", "0.5"))
        self.assertIn("--size = 1000: must be a multiple of 16",
                      self.refused("--size", "1000"))
        self.assertIn("'fp16': must be bf16 or fp8", self.refused("--dtypes", "bf16,fp16"))
        self.assertIn("--duties: 1.0: must lie in (0, 1)", self.refused("--duties", "0.5,1"))
        self.assertIn("--duties = 'half': must be numbers", self.refused("--duties", "half"))


if __name__ == "__main__":
    unittest.main()
