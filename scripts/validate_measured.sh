#!/usr/bin/env bash
# The full vTrain single-node set (1,440 runs), both halves, as the lead reports it:
#   scripts/validate_measured.sh BUILD/tools/tandem [JSON]
# Prints every row's error and the median / mean / p95 / max |error| of each half
# (calibration: FNV-1a 64 of the raw CSV line even; validation: odd).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tandem="$1"
json="${2:-}"
args=(validate "$root/scenarios/measured/vtrain_single_node.csv" --jobs "$(nproc)")
[ -n "$json" ] && args+=(--json "$json")
"$tandem" "${args[@]}"
