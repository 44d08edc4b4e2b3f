#!/usr/bin/env bash
# tandem search's top 1 against a brute force it cannot steer: every candidate the search
# did not rule out by memory or validity (simulated or "estimated only", whose lower bound
# let the search skip it) is simulated here on its own, as a scenario file of its own with
# `tandem simulate`, and the fastest of them must be the search's best — else the search's
# bounds dropped a faster layout. The space is restricted with --fix / --vary so that the
# brute force stays small (a few dozen simulations). The search's --best-report (what
# `tandem validate` takes for a searched row instead of simulating it again) must be the
# report tandem simulate gives for that layout.
# Usage: search_exact.sh TANDEM_BINARY SCENARIO [tandem search flags…]
set -euo pipefail
tandem="$1"; scenario="$2"; shift 2
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$tandem" search "$scenario" --quiet --top 1 --jobs 2 --json "$out/search.json" \
  --best-report "$out/best-report.json" "$@" \
  >"$out/search.txt" 2>&1 || { cat "$out/search.txt"; exit 1; }
python3 - "$tandem" "$scenario" "$out" <<'PY'
import json, subprocess, sys
tandem, scenario, out = sys.argv[1:4]
search = json.load(open(f"{out}/search.json"))
base = json.load(open(scenario))
by_id = {c["id"]: c for c in search["candidates"]}
best = by_id[search["ranking"][0]]
open_ = [c for c in search["candidates"] if c["outcome"] in ("simulated", "estimated_only")]
skipped = sum(c["outcome"] == "estimated_only" for c in open_)
if len(open_) < 2 or skipped == 0:
    print(f"the space is too small to test the bound: {len(open_)} open candidate(s), "
          f"{skipped} estimated only; widen --vary")
    sys.exit(1)
times = {}
for c in open_:
    s = json.loads(json.dumps(base))
    par, tr = s.setdefault("parallelism", {}), s.setdefault("training", {})
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                "context_parallel_size", "sequence_parallel", "use_distributed_optimizer",
                "overlap_grad_reduce", "overlap_param_gather", "order"):
        par[key] = c[key]
    par.pop("virtual_pipeline_model_parallel_size", None)
    par.pop("num_layers_per_virtual_pipeline_stage", None)
    par["pipeline_schedule"] = "auto"
    if c["num_layers_per_virtual_pipeline_stage"] is not None:
        par["num_layers_per_virtual_pipeline_stage"] = c["num_layers_per_virtual_pipeline_stage"]
    tr["micro_batch_size"] = c["micro_batch_size"]
    tr["recompute_granularity"] = c["recompute_granularity"]
    tr["recompute_method"], tr["recompute_num_layers"] = "uniform", 1
    s["cluster"]["world_size"] = search["world_size"]
    path = f"{out}/c{c['id']}.json"
    json.dump(s, open(path, "w"))
    subprocess.run([tandem, "simulate", path, "--quiet", "--mode", "symmetric", "--json",
                    f"{out}/c{c['id']}.report.json"], check=True, stdout=subprocess.DEVNULL)
    times[c["id"]] = json.load(open(f"{out}/c{c['id']}.report.json"))["iteration_seconds"]
fastest = min(times, key=times.get)
print(f"{len(open_)} open candidates ({skipped} the search only estimated), simulated one by one: "
      f"fastest {by_id[fastest]['label']} {times[fastest]:.4f} s; search's best "
      f"{best['label']} {best['iteration_seconds']:.4f} s")
if times[fastest] < best["iteration_seconds"] * (1 - 1e-9):
    print("the search missed a faster layout")
    sys.exit(1)
if abs(times[best["id"]] - best["iteration_seconds"]) > 1e-9 * best["iteration_seconds"]:
    print(f"the search's time for its best differs from tandem simulate's ({times[best['id']]:.6f} s)")
    sys.exit(1)
mine = json.load(open(f"{out}/c{best['id']}.report.json"))
mine.pop("ranks", None)
theirs = json.load(open(f"{out}/best-report.json"))
# How long it took and what the scenario is called (the search names its candidates, this
# script its own files) are not what the simulation found.
for key in ("wall_seconds", "simulated_wall_seconds", "scenario"):
    mine.pop(key, None), theirs.pop(key, None)
if mine != theirs:
    differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    print(f"--best-report differs from tandem simulate's report of the best in: {differ}")
    sys.exit(1)
print(f"--best-report is tandem simulate's report of {best['label']} ({len(theirs)} fields)")
PY
