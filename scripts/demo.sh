#!/usr/bin/env bash
# tandem's main job on its built-in default scenario (GPT-2 medium shape on 8 ranks,
# TP 2 × PP 2 × DP 2): the process groups, the pipeline schedule and its idealised
# timeline, drawn to out/. Installs what it needs, builds incrementally, runs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
bash scripts/build.sh build -DCMAKE_BUILD_TYPE=Release >/dev/null
tandem=build/tools/tandem
mkdir -p out

echo "== tandem info"
$tandem info
echo
echo "== tandem layout (default scenario)"
$tandem layout
echo
echo "== tandem schedule (default scenario)"
$tandem schedule --trace out/schedule-default.json --svg out/schedule-default.svg
echo
echo "== tandem schedule --pp 4 --microbatches 8 (1F1B)"
$tandem schedule --pp 4 --microbatches 8 --svg out/schedule-1f1b-pp4-m8.svg
echo
echo "== tandem schedule --pp 4 --vpp 2 --microbatches 8 (interleaved)"
$tandem schedule --pp 4 --vpp 2 --microbatches 8 --trace out/schedule-interleaved-pp4-v2-m8.json \
  --svg out/schedule-interleaved-pp4-v2-m8.svg
echo
echo "wrote out/*.json (open in https://ui.perfetto.dev or chrome://tracing) and out/*.svg"
