#!/usr/bin/env bash
# `mpirun -np 2 tandem search … --jobs 1` against one process with --jobs 2 (the same rounds
# of 2 simulations): the same candidates with the same outcomes, the same ranking and the
# same simulated times — the ranks split the dry runs and the simulations and gather them.
# Usage: search_mpi.sh TANDEM_BINARY MPIEXEC SCENARIO [extra tandem search flags…]
set -euo pipefail
tandem="$1"; mpiexec="$2"; scenario="$3"; shift 3
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$tandem" search "$scenario" --quiet --jobs 2 --json "$out/one.json" "$@" >"$out/one.txt"
"$mpiexec" -np 2 --oversubscribe "$tandem" search "$scenario" --quiet --jobs 1 \
  --json "$out/two.json" "$@" >"$out/two.txt"
python3 - "$out/one.json" "$out/two.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert b["mpi_ranks"] == 2, b["mpi_ranks"]
assert a["ranking"] == b["ranking"], (a["ranking"][:10], b["ranking"][:10])
for k in ("enumerated", "invalid", "duplicate", "valid", "pruned_memory", "simulated", "estimated_only"):
    assert a["counts"][k] == b["counts"][k], (k, a["counts"][k], b["counts"][k])
keys = ("outcome", "peak_memory_bytes", "lower_bound_seconds", "iteration_seconds", "rank")
for x, y in zip(a["candidates"], b["candidates"]):
    for k in keys:
        assert x.get(k) == y.get(k), (x["label"], k, x.get(k), y.get(k))
print(f"mpirun -np 2 equals one process: {a['counts']['simulated']} simulated, "
      f"{len(a['candidates'])} candidates, top {a['ranking'][:3]}")
PY
