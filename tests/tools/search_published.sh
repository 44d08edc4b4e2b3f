#!/usr/bin/env bash
# For every run in scenarios/published/: `tandem search` keeps its model, global batch and
# world size and must find a layout at least as fast (predicted) as the published one —
# the published layout is the search's baseline, simulated alongside the others. Prints per
# run the published layout's rank, what search picked instead and why.
# Usage: search_published.sh TANDEM_BINARY PUBLISHED_DIR [GLOB] [extra tandem search flags…]
# GLOB picks the scenarios (default "*"; ctest runs the 22B ones: the 530B and 1T searches
# take many minutes on 2 cores).
set -euo pipefail
tandem="$1"; dir="$2"; glob="${3:-*}"; shift; shift; [ $# -gt 0 ] && shift
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
fail=0
printf '%-44s %10s %6s %10s  %s\n' "published run" "published" "rank" "best" "search picked"
for f in "$dir"/$glob.json; do
  name="$(basename "$f" .json)"
  "$tandem" search "$f" --quiet --top 3 --jobs 2 --json "$out/$name.json" "$@" >"$out/$name.txt" 2>&1 || {
    echo "$name: tandem search failed:"; cat "$out/$name.txt"; fail=1; continue; }
  python3 - "$out/$name.json" "$name" "$out/$name.txt" <<'PY' || fail=1
import json, sys
j = json.load(open(sys.argv[1])); name = sys.argv[2]
c = {x["id"]: x for x in j["candidates"]}
base = next(x for x in j["candidates"] if x["baseline"])
best = c[j["ranking"][0]]
if base["outcome"] != "simulated":
    print(f"{name}: the published layout was not simulated ({base['outcome']})"); sys.exit(1)
print(f"{name:44s} {base['iteration_seconds']:9.2f}s {base['rank']:6d} {best['iteration_seconds']:9.2f}s  {best['label']}")
why = [l.strip() for l in open(sys.argv[3]) if l.startswith("baseline (")]
if why: print("    " + why[0])
if best["iteration_seconds"] > base["iteration_seconds"] * (1 + 1e-12):
    print(f"{name}: search's best is slower than the published layout"); sys.exit(1)
PY
done
exit $fail
