#!/usr/bin/env bash
# tandem search's exact top K rests on its dry-run bound: no candidate simulates faster
# than its lower_bound_seconds. Simulates every valid candidate of a scenario (--top larger
# than the space) and checks the bound against each simulated time, over at least
# MIN_CANDIDATES (default 100) candidates.
# Usage: search_bound.sh TANDEM_BINARY SCENARIO [extra tandem search flags…]
set -euo pipefail
tandem="$1"; scenario="$2"; shift 2
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$tandem" search "$scenario" --quiet --jobs 2 --top 100000 --json "$out/all.json" "$@" >"$out/all.txt"
python3 - "$out/all.json" "${MIN_CANDIDATES:-100}" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
least = int(sys.argv[2])
simulated = [c for c in j["candidates"] if c["outcome"] == "simulated"]
assert len(simulated) == j["counts"]["valid"] - j["counts"]["pruned_memory"], (
    len(simulated), j["counts"])
assert len(simulated) >= least, f"{len(simulated)} candidates simulated, fewer than {least}"
bad = [(c["label"], c["lower_bound_seconds"], c["iteration_seconds"]) for c in simulated
       if c["lower_bound_seconds"] > c["iteration_seconds"] * (1 + 1e-9)]
assert not bad, f"{len(bad)} candidates simulate faster than their bound: {bad[:5]}"
tight = max(c["lower_bound_seconds"] / c["iteration_seconds"] for c in simulated)
print(f"{len(simulated)} candidates simulated, each at or above its bound "
      f"(tightest bound / simulated = {tight:.4f})")
PY
