"""The `tandem` Python module: scenarios from a file, a dict and Megatron flags; layout and
schedule against hand-derived values; simulate twice in one process (each call runs in a
child of its own) and against the binary's report for the same scenario.

Run with PYTHONPATH=<build>/python (ctest sets it, with TANDEM_BINARY and TANDEM_SOURCE_DIR).
"""
import json
import os
import subprocess
import tempfile
import unittest
from pathlib import Path

import tandem

ROOT = Path(os.environ.get("TANDEM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
PP4 = ROOT / "scenarios" / "pp4-bubble.json"


class Scenarios(unittest.TestCase):
    def test_file_dict_and_flags_agree(self):
        from_file = tandem.scenario(PP4)
        from_dict = tandem.scenario(json.loads(PP4.read_text()))
        self.assertEqual(from_file, from_dict)
        self.assertEqual(from_file["parallelism"]["pipeline_model_parallel_size"], 4)

    def test_megatron_flags_and_keywords(self):
        # The default scenario is 8 ranks, TP 2 × PP 2 × DP 2; PP 4 leaves DP 1.
        s = tandem.scenario(flags="--pipeline-model-parallel-size 4 --sequence-parallel")
        self.assertEqual(s["parallelism"]["pipeline_model_parallel_size"], 4)
        self.assertTrue(s["parallelism"]["sequence_parallel"])
        self.assertEqual(s["derived"]["data_parallel_size"], 1)
        s = tandem.scenario(flags=["--global-batch-size=32"], micro_batch_size=2)
        self.assertEqual(s["training"]["global_batch_size"], 32)
        self.assertEqual(s["training"]["micro_batch_size"], 2)

    def test_bad_values_raise_config_error_naming_the_field(self):
        with self.assertRaises(tandem.ConfigError) as e:
            tandem.scenario(tensor_model_parallel_size=0)
        self.assertIsInstance(e.exception, ValueError)
        fields = [v["field"] for v in e.exception.violations]
        self.assertTrue(any("tensor_model_parallel_size" in f for f in fields), fields)

    def test_topology_out_of_physical_bounds_is_refused(self):
        t = tandem.topology("dgx-a100-80g")
        self.assertEqual(t["fabric"]["nic_gbs"], 25)
        t["fabric"]["nic_gbs"] = 1e308
        with self.assertRaises(tandem.ConfigError) as e:
            tandem.topology(t)
        self.assertEqual([v["field"] for v in e.exception.violations], ["fabric.nic_gbs"])
        self.assertIn("dgx-a100-80g", tandem.topology_presets())


class LayoutAndSchedule(unittest.TestCase):
    def test_layout_groups_as_megatron_builds_them(self):
        # world 8, tp 2, pp 2, order tp-cp-ep-dp-pp: tp fastest, then dp, then pp.
        l = tandem.layout(world_size=8, tensor_model_parallel_size=2,
                          pipeline_model_parallel_size=2)
        self.assertEqual(l["groups"]["tp"], [[0, 1], [2, 3], [4, 5], [6, 7]])
        self.assertEqual(l["groups"]["dp"], [[0, 2], [1, 3], [4, 6], [5, 7]])
        self.assertEqual(l["groups"]["pp"], [[0, 4], [1, 5], [2, 6], [3, 7]])

    def test_1f1b_timeline_matches_the_closed_form(self):
        # p = 4 stages, m = 8 microbatches, forward 1 ms + backward 2 ms, free p2p:
        # iteration (m + p − 1)(f + b) = 33 ms, bubble (p − 1)/(m + p − 1) = 3/11.
        s = tandem.schedule(pp=4, microbatches=8, kind="1f1b")
        self.assertEqual(len(s["ranks"]), 4)
        self.assertAlmostEqual(s["idealised"]["iteration_ms"], 33.0, places=9)
        self.assertAlmostEqual(s["idealised"]["bubble_fraction"], 3 / 11, places=9)


class Simulate(unittest.TestCase):
    def test_twice_in_one_process_and_as_the_binary_does(self):
        # SimGrid's engine runs once per process: each call must run in its own child.
        r4 = tandem.simulate(PP4, global_batch_size=4)
        r8 = tandem.simulate(PP4, global_batch_size=8)
        for r in (r4, r8):
            self.assertEqual(r["world_size"], 4)
            self.assertGreater(r["iteration_seconds"], 0)
        # More microbatches: a longer iteration, a smaller share of bubble.
        self.assertGreater(r8["iteration_seconds"], r4["iteration_seconds"])
        self.assertLess(r8["bubble_fraction"], r4["bubble_fraction"])
        binary = os.environ.get("TANDEM_BINARY")
        if not binary:
            self.skipTest("TANDEM_BINARY not set: no comparison with the command line")
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.json"
            subprocess.run([binary, "simulate", str(PP4), "--quiet", "--global-batch-size", "8",
                            "--json", str(out)], check=True, capture_output=True)
            cli = json.loads(out.read_text())
        # The same code path on the same inputs: the same simulated time to the last bit.
        self.assertEqual(cli["iteration_seconds"], r8["iteration_seconds"])
        self.assertEqual(cli["max_peak_memory_bytes"], r8["max_peak_memory_bytes"])

    def test_trace_ops_gives_each_op_its_slice(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "ops.json"
            tandem.simulate(PP4, global_batch_size=4, trace=str(path), trace_ops=True)
            events = json.loads(path.read_text())["traceEvents"]
        gemms = [e for e in events if e.get("ph") == "X" and e["name"] == "gemm"]
        self.assertTrue(gemms)
        self.assertTrue(all(e["args"]["class"] == "gemm" and e["args"]["m"] > 0 for e in gemms))
        with self.assertRaises(tandem.ConfigError):
            tandem.simulate(PP4, trace_ops=True)  # no trace to shape

    def test_a_bad_scenario_is_refused_before_any_child_runs(self):
        with self.assertRaises(tandem.ConfigError):
            tandem.simulate(PP4, global_batch_size=0)  # must be > 0



class ValidateMeasured(unittest.TestCase):
    CSV = ROOT / "scenarios" / "measured" / "vtrain_single_node.csv"

    def test_a_csv_of_measured_runs_gives_what_the_binary_gives(self):
        lines = self.CSV.read_text().splitlines()
        with tempfile.TemporaryDirectory() as tmp:
            csv = Path(tmp) / "runs.csv"
            csv.write_text("\n".join(lines[:7]) + "\n")  # the header and six runs
            r = tandem.validate(csv, jobs=2)
            out = Path(tmp) / "cli.json"
            subprocess.run([os.environ.get("TANDEM_BINARY", "tandem"), "validate", str(csv),
                            "--jobs", "2", "--json", str(out)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            cli = json.loads(out.read_text())
            only = tandem.validate(csv, half="validation", limit=1)
        self.assertEqual(r["failures"], {})
        self.assertEqual(len(r["rows"]), 6)
        self.assertEqual([x["predicted_ms"] for x in r["rows"]],
                         [x["predicted_ms"] for x in cli["rows"]])
        self.assertEqual([x["half"] for x in r["rows"]], [x["half"] for x in cli["rows"]])
        self.assertEqual(r["halves"], cli["halves"])
        self.assertTrue(all("breakdown" in x for x in r["rows"]))
        self.assertEqual([x["half"] for x in only["rows"]], ["validation"])

    def test_measured_options_are_checked_before_any_work(self):
        for kwargs in ({"half": "both2"}, {"limit": -1}, {"jobs": 0}):
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                with self.assertRaises(tandem.ConfigError):
                    tandem.validate(self.CSV, **kwargs)
        with self.assertRaises(tandem.ConfigError):  # a folder's scenarios name their own
            tandem.validate(ROOT / "scenarios" / "published", half="validation")

class Search(unittest.TestCase):
    DEFAULT = ROOT / "scenarios" / "default.json"
    FIX = ["vp=none", "recompute=none"]

    def test_search_equals_the_binarys_search(self):
        r = tandem.search(self.DEFAULT, fix=self.FIX, top=3)
        self.assertEqual(r["top"], 3)
        self.assertGreaterEqual(len(r["ranking"]), 3)
        self.assertGreater(r["counts"]["valid"], 100)
        ranked = {c["id"]: c for c in r["candidates"]}
        times = [ranked[i]["iteration_seconds"] for i in r["ranking"]]
        self.assertEqual(times, sorted(times))
        self.assertEqual(times[2], r["kth_best_seconds"])
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "search.json"
            cmd = [os.environ.get("TANDEM_BINARY", "tandem"), "search", str(self.DEFAULT),
                   "--quiet", "--top", "3", "--json", str(out)]
            for f in self.FIX:
                cmd += ["--fix", f]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            cli = json.loads(out.read_text())
        self.assertEqual(cli["ranking"][:3], r["ranking"][:3])
        self.assertEqual(cli["kth_best_seconds"], r["kth_best_seconds"])
        self.assertEqual(cli["counts"]["valid"], r["counts"]["valid"])

    def test_keyword_overrides_reach_the_search(self):
        r = tandem.search(self.DEFAULT, fix=self.FIX + ["tp=2", "pp=2"], top=1,
                          global_batch_size=16)
        self.assertEqual(r["global_batch_size"], 16)
        for c in r["candidates"]:
            self.assertIn("tp2 pp2 ", c["label"] + " ")

    def test_bad_input_raises_config_error_before_any_work(self):
        for kwargs in ({"top": 0}, {"jobs": 0}, {"memory_headroom": 1.0},
                       {"vary": "tensor_paralel=2"}, {"fix": "tp=1,2"}, {"vary": [3]},
                       {"global_batch_size": 0}):
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                with self.assertRaises(tandem.ConfigError):
                    tandem.search(self.DEFAULT, **kwargs)

if __name__ == "__main__":
    unittest.main()
