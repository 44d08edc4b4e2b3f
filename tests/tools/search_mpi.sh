#!/usr/bin/env bash
# `mpirun -np 2 tandem search … --jobs 1` against one process with --jobs 2: the same
# candidates with the same outcomes, the same top K with the same simulated times — the
# ranks split the dry runs and the simulations and gather them. Which candidates beyond the
# top K get simulated may differ: one process starts the next candidate as soon as a child
# ends (against the K-th best time so far), the ranks go in rounds; any candidate only one
# of them simulated must have a bound over the final K-th best time, and every candidate
# both simulated must agree.
# Under mpirun every candidate is dry-run on every stage (no probe: a rank cannot fork
# workers after MPI_Init), so the one process runs with --no-probe to compare like with like;
# tests/tools/search_probe.sh checks the probe.
# Usage: search_mpi.sh TANDEM_BINARY MPIEXEC SCENARIO [extra tandem search flags…]
set -euo pipefail
tandem="$1"; mpiexec="$2"; scenario="$3"; shift 3
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$tandem" search "$scenario" --quiet --jobs 2 --no-probe --json "$out/one.json" "$@" >"$out/one.txt"
"$mpiexec" -np 2 --oversubscribe "$tandem" search "$scenario" --quiet --jobs 1 \
  --json "$out/two.json" "$@" >"$out/two.txt"
python3 - "$out/one.json" "$out/two.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert b["mpi_ranks"] == 2, b["mpi_ranks"]
top = a["top"]
assert a["ranking"][:top] == b["ranking"][:top], (a["ranking"][:10], b["ranking"][:10])
assert a["kth_best_seconds"] == b["kth_best_seconds"], (a["kth_best_seconds"], b["kth_best_seconds"])
for k in ("enumerated", "invalid", "duplicate", "valid", "pruned_memory"):
    assert a["counts"][k] == b["counts"][k], (k, a["counts"][k], b["counts"][k])
keys = ("peak_memory_bytes", "lower_bound_seconds")
for x, y in zip(a["candidates"], b["candidates"]):
    for k in keys:
        assert x.get(k) == y.get(k), (x["label"], k, x.get(k), y.get(k))
    if x["outcome"] == y["outcome"] == "simulated":
        assert x["iteration_seconds"] == y["iteration_seconds"], (x["label"], x["iteration_seconds"], y["iteration_seconds"])
    elif x["outcome"] != y["outcome"]:
        assert {x["outcome"], y["outcome"]} == {"simulated", "estimated_only"}, (x["label"], x["outcome"], y["outcome"])
        assert x["lower_bound_seconds"] > a["kth_best_seconds"], (x["label"], x["lower_bound_seconds"], a["kth_best_seconds"])
print(f"mpirun -np 2 equals one process: {a['counts']['simulated']} simulated, "
      f"{len(a['candidates'])} candidates, top {a['ranking'][:3]}")
PY
