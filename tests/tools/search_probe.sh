#!/usr/bin/env bash
# tandem search's probe (each candidate dry-run on its last pipeline stage first, the rest
# of its stages only while its probe bound is under the K-th best simulated time) against
# every candidate dry-run on every stage (--no-probe): the same top K with the same
# simulated times and K-th best time. A candidate stepped in full in both has the same
# memory and bound; one only probed has a probe bound and high-water mark no higher than its
# full dry run's, and was rightly set aside: over memory in both, or a probe bound above
# the K-th best time (so no simulation of it could enter the top K). Bounds agree to 1e-9
# relative, not exactly: a worker's dry runs share one engine whose clocks run on from one
# candidate to the next, and the two runs give a worker different candidates.
# Usage: search_probe.sh TANDEM_BINARY SCENARIO [extra tandem search flags…]
set -euo pipefail
tandem="$1"; scenario="$2"; shift 2
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$tandem" search "$scenario" --quiet --json "$out/probe.json" "$@" >"$out/probe.txt"
"$tandem" search "$scenario" --quiet --no-probe --json "$out/full.json" "$@" >"$out/full.txt"
python3 - "$out/probe.json" "$out/full.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
top, kth = a["top"], a["kth_best_seconds"]
assert a["ranking"][:top] == b["ranking"][:top], (a["ranking"][:10], b["ranking"][:10])
assert kth == b["kth_best_seconds"], (kth, b["kth_best_seconds"])
for k in ("enumerated", "invalid", "duplicate", "valid"):
    assert a["counts"][k] == b["counts"][k], (k, a["counts"][k], b["counts"][k])
assert a["counts"]["probes"] > 0 and b["counts"]["probes"] == 0, (a["counts"], b["counts"])
assert a["counts"]["dry_runs"] < b["counts"]["dry_runs"], (a["counts"], b["counts"])
probed = 0
for x, y in zip(a["candidates"], b["candidates"]):
    assert x["id"] == y["id"]
    assert not y["probed_only"], y["label"]
    if x["outcome"] == y["outcome"] == "simulated":
        assert x["iteration_seconds"] == y["iteration_seconds"], x["label"]
    if not x["probed_only"]:
        assert x["peak_memory_bytes"] == y["peak_memory_bytes"] or (
            x["outcome"] == y["outcome"] == "pruned_memory"), x["label"]
        if x["outcome"] != "pruned_memory":  # equal but for the rounding of running clocks
            assert abs(x["lower_bound_seconds"] - y["lower_bound_seconds"]) <= (
                1e-9 * y["lower_bound_seconds"]), (x["label"], x["lower_bound_seconds"],
                                                   y["lower_bound_seconds"])
        if x["outcome"] != y["outcome"]:
            assert {x["outcome"], y["outcome"]} == {"simulated", "estimated_only"}, (
                x["label"], x["outcome"], y["outcome"])
            assert x["lower_bound_seconds"] > kth, (x["label"], x["lower_bound_seconds"], kth)
        continue
    probed += 1
    assert x["peak_memory_is_lower_bound"], x["label"]
    if x["outcome"] == "pruned_memory":
        assert y["outcome"] == "pruned_memory", (x["label"], y["outcome"])
        continue
    assert x["outcome"] == "estimated_only", (x["label"], x["outcome"])
    assert x["lower_bound_seconds"] > kth, (x["label"], x["lower_bound_seconds"], kth)
    assert y["outcome"] in ("estimated_only", "simulated", "pruned_memory"), y["outcome"]
    if not y["peak_memory_is_lower_bound"]:
        assert x["peak_memory_bytes"] <= y["peak_memory_bytes"], x["label"]
        assert x["lower_bound_seconds"] <= y["lower_bound_seconds"] * (1 + 1e-9), (
            x["label"], x["lower_bound_seconds"], y["lower_bound_seconds"])
assert probed > 0, "no candidate was set aside by its probe: the test needs a larger space"
print(f"probe equals every stage dry-run: {len(a['candidates'])} candidates, {probed} only "
      f"probed, dry runs on every stage {a['counts']['dry_runs']} against "
      f"{b['counts']['dry_runs']}, {a['seconds']['dry_run']:.1f} s against "
      f"{b['seconds']['dry_run']:.1f} s, top {a['ranking'][:3]}")
PY
