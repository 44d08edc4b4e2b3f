#!/usr/bin/env python3
"""Fit the few physical parameters of a GPU preset on the calibration half of measured runs.

    scripts/fit_host_model.py BUILD/tools/tandem [--csv scenarios/measured/vtrain_single_node.csv]
        [--preset topology/presets/dgx-a100-80g.json] [--limit N] [--jobs 2] [--rounds 3]

Procedure (documented in sim/README.md): coordinate search. Start from the preset's
values; for each parameter in turn try it multiplied by each factor of the round (x0.5
and x2 in the first round, or --factors; their square roots in the next: x0.71, x1.41,
then x0.84, x1.19) and keep the best; --rounds rounds. Each trial is
one `tandem validate CSV --half calibration --topology TRIAL.json` (the calibration half
only: FNV-1a 64 of the raw CSV line even), scored by the mean |error| of iteration time
over that half (--score: or its max |error|, or mean + max / N). The validation half is
never simulated here. No per-row factor: the
fitted values are the preset's, one set for every row. --params may name other GpuSpec
fields of the preset too (gemm_peak_fraction, memory_peak_fraction: stepped by the
factors' fourth roots, at most 1).

Prints every trial and the best values; --write stores them into the preset file.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PARAMS = ["host_kernel_issue_us", "host_collective_issue_us", "host_microbatch_us",
          "host_iteration_us", "host_optimizer_tensor_us", "host_unfused_softmax_us", "host_layer_timestamp_us"]
# Fractions of a peak: stepped by the factor's fourth root (x0.84 / x1.19 in the first
# round) and held at most 1.
FRACTIONS = {"gemm_peak_fraction", "gemm_unaligned_peak_fraction", "memory_peak_fraction"}


def trial_value(name, value, factor):
    if name in FRACTIONS:
        return min(1.0, round(value * factor ** 0.25, 4))
    return round(value * factor, 3) if value > 0 else round(factor * 5.0, 3)


def objective(h, kind):
    """The number a fit minimises, from one half's summary: `mean` (mean |error|), `max`
    (max |error|) or `mean+max/N` (mean |error| + max |error| / N: the centre, with the tail
    weighed in so that one cell cannot run away)."""
    mean, top = h["mean_abs_error_percent"], h["max_abs_error_percent"]
    if kind == "mean":
        return mean
    if kind == "max":
        return top
    if kind.startswith("mean+max/"):
        return mean + top / float(kind.split("/", 1)[1])
    raise ValueError(f"unknown --score {kind}")


def score(tandem, csv, preset, values, limit, jobs, half="calibration", kind="mean",
          calibration_hidden=0):
    trial = json.loads(json.dumps(preset))
    trial["name"] = "fit-trial"
    trial["gpu"].update(values)
    with tempfile.TemporaryDirectory() as tmp:
        topo = os.path.join(tmp, "trial.json")
        out = os.path.join(tmp, "out.json")
        with open(topo, "w") as f:
            json.dump(trial, f)
        cmd = [tandem, "validate", csv, "--half", half, "--topology", topo, "--json", out,
               "--jobs", str(jobs)]
        if limit:
            cmd += ["--limit", str(limit)]
        if calibration_hidden:
            cmd += ["--calibration-hidden", str(calibration_hidden)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            h = json.load(f)["halves"][half]
    return objective(h, kind), h


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("tandem")
    p.add_argument("--csv", default="scenarios/measured/vtrain_single_node.csv")
    p.add_argument("--preset", default="topology/presets/dgx-a100-80g.json")
    p.add_argument("--limit", type=int, default=0, help="rows of the calibration half (0: all)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--params", default=",".join(PARAMS))
    p.add_argument("--factors", default="0.5,2",
                   help="the first round's factors (later rounds take their square roots)")
    p.add_argument("--score", default="mean",
                   help="what the search minimises over the calibration half: mean (mean |error|),"
                        " max (max |error|) or mean+max/N (mean |error| + max |error| / N)")
    p.add_argument("--calibration-hidden", type=int, default=0,
                   help="fit on the rows of this hidden size only (tandem validate "
                        "--calibration-hidden); 0: the hash split's calibration half")
    p.add_argument("--write", action="store_true", help="store the best values into --preset")
    a = p.parse_args()
    with open(a.preset) as f:
        preset = json.load(f)
    params = a.params.split(",")
    best = {k: float(preset["gpu"].get(k, 0.0)) for k in params}
    best_score, h = score(a.tandem, a.csv, preset, best, a.limit, a.jobs, kind=a.score,
                          calibration_hidden=a.calibration_hidden)
    print(f"start {best} -> score {best_score:.2f} mean {h['mean_abs_error_percent']:.2f} % median {h['median_abs_error_percent']:.2f} "
          f"max {h['max_abs_error_percent']:.2f}", flush=True)
    factors = [float(f) for f in a.factors.split(",")]
    for rnd in range(a.rounds):
        for k in params:
            for fac in factors:
                trial = dict(best)
                trial[k] = trial_value(k, best[k], fac)
                if trial[k] == best[k]:
                    continue
                s, h = score(a.tandem, a.csv, preset, trial, a.limit, a.jobs, kind=a.score,
                             calibration_hidden=a.calibration_hidden)
                print(f"round {rnd} {k}={trial[k]} -> score {s:.2f} mean "
                      f"{h['mean_abs_error_percent']:.2f} % median "
                      f"{h['median_abs_error_percent']:.2f} max {h['max_abs_error_percent']:.2f}",
                      flush=True)
                if s < best_score - 1e-6:
                    best, best_score = trial, s
        factors = [f ** 0.5 for f in factors]
    print("best", json.dumps(best), f"score ({a.score}) {best_score:.2f} on the calibration half")
    if a.calibration_hidden:  # judged on the sizes it never saw
        _, v = score(a.tandem, a.csv, preset, best, a.limit, a.jobs, half="validation",
                     kind=a.score, calibration_hidden=a.calibration_hidden)
        print(f"held out (every hidden size but {a.calibration_hidden}): median "
              f"{v['median_abs_error_percent']:.2f} % mean {v['mean_abs_error_percent']:.2f} % "
              f"max {v['max_abs_error_percent']:.2f} %", flush=True)
    if a.write:
        preset["gpu"].update(best)
        with open(a.preset, "w") as f:
            json.dump(preset, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
