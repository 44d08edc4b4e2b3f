#!/usr/bin/env bash
# The Llama 3 405B scenario in Meta's layout (Llama 3 Herd paper, Table 4 and §3.3.2):
# `tandem scenario` places 7 + 14 × 8 + 7 layers on its 16 pipeline stages on 8192 GPUs
# with 16M-token batches, and `tandem simulate` runs it and finds that it fits in an H100's
# 80 GiB (Megatron's accounting, full recomputation).
# Usage: llama3_405b_layout.sh TANDEM_BINARY SCENARIO
set -euo pipefail
tandem="$1"; scenario="$2"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$tandem" scenario "$scenario" >"$out/scenario.json"
"$tandem" simulate "$scenario" --quiet --json "$out/report.json"
python3 - "$out/scenario.json" "$out/report.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
stages = s["derived"]["layers_per_pipeline_stage"]
assert stages == [7] + [8] * 14 + [7], stages
assert s["cluster"]["world_size"] == 8192, s["cluster"]["world_size"]
p = s["parallelism"]
assert (p["tensor_model_parallel_size"], p["pipeline_model_parallel_size"]) == (8, 16), p
assert s["derived"]["data_parallel_size"] == 64, s["derived"]
assert s["derived"]["virtual_pipeline_model_parallel_size"] > 1, s["derived"]  # interleaved
tokens = s["training"]["global_batch_size"] * s["model"]["seq_length"]
assert tokens == 16 * 2**20, tokens  # 16M tokens a batch
peak = r["max_peak_memory_bytes"]
assert peak < 80 * 2**30, f"peak {peak / 2**30:.2f} GiB does not fit in 80 GiB"
assert r["fits_in_memory"], r["fits_in_memory"]
print(f"stages {stages[0]} + {len(stages) - 2} x {stages[1]} + {stages[-1]}; "
      f"{r['iteration_seconds']:.3f} s per iteration, {r['model_tflops_per_gpu']:.1f} model "
      f"TFLOP/s per GPU, peak {peak / 2**30:.2f} GiB per GPU")
PY
