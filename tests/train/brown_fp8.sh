#!/usr/bin/env bash
# FP8 training on the Brown corpus with the cpu binding's software FP8 (kernels/math/fp8.hpp):
# the 2-layer GPT of brown_learning.sh (hidden 128, seq 64, 16 sequences per iteration) is
# trained without FP8 (fp32, the cpu binding's precision) and with Megatron's
# --fp8-format hybrid under the delayed and the tensorwise recipe, from the same seed and
# data. Each FP8 run's validation loss must lie within TOLERANCE (relative) of the run
# without FP8, and its training losses must differ from it (the FP8 GEMMs ran).
# ITERS (default 60, the ctest's), TOLERANCE (default 0.02) and THREADS (kernel threads,
# default 1: ctest runs two such single-threaded tests side by side on 2 cores, 17 % sooner
# than one after the other on two threads each) come from the environment; the issue's full
# criterion is ITERS=200. At 200 one run is one trajectory, and delayed scaling's is
# sensitive to rounding: on 2026-11-30 (SkylakeX OpenBLAS kernels) the delayed run (history
# 16, max) ended +3.2 % at the default seed, where the same commit's Prescott kernels gave
# +0.0 %; at --seed 1235 it was -0.4 %, and Megatron's default delayed recipe (history 1,
# most_recent) +0.3 % and -0.6 %; tensorwise -0.1 % and -0.6 %.
#   tests/train/brown_fp8.sh TANDEM_BINARY SCENARIO
set -euo pipefail
tandem="$1"; scenario="$2"
iters="${ITERS:-60}"; tolerance="${TOLERANCE:-0.02}"; threads="${THREADS:-1}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/train/brown_data.sh
source "$(dirname "$0")/brown_data.sh"
brown_document "$work"
run() {  # NAME FLAGS…: the run's log in $work/NAME.log
  local name="$1"
  shift
  "$tandem" train "$scenario" --data-path "$work/brown_text_document" --split 95,5,0 \
    --num-layers 2 --hidden-size 128 --seq-length 64 --micro-batch-size 8 \
    --global-batch-size 16 --train-iters "$iters" --lr 6e-3 --min-lr 6e-4 --lr-warmup-iters 10 \
    --log-interval 10 --eval-interval "$iters" --eval-iters 4 --threads "$threads" "$@" >"$work/$name.log"
}
run base
run delayed --bf16 --fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 16 \
  --fp8-amax-compute-algo max
run tensorwise --bf16 --fp8-format hybrid --fp8-recipe tensorwise
valid() { grep -o "lm loss value: [0-9.E+-]*" "$work/$1.log" | tail -1 | awk '{print $4}'; }
train_losses() { grep -o "lm loss: [0-9.E+-]*" "$work/$1.log" | awk '{print $3}'; }
base=$(valid base)
failed=0
echo "Brown, $iters iterations: validation loss without FP8 $base"
for name in delayed tensorwise; do
  got=$(valid "$name")
  rel=$(awk -v a="$got" -v b="$base" 'BEGIN { d = (a - b) / b; printf "%+.4f", d }')
  echo "  fp8 hybrid $name: validation loss $got ($rel relative)"
  if awk -v a="$got" -v b="$base" -v t="$tolerance" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d > t) }'; then
    echo "  $name: beyond the tolerance $tolerance"; failed=1
  fi
  if [ "$(train_losses "$name")" = "$(train_losses base)" ]; then
    echo "  $name: the same training losses as without FP8 (did FP8 run?)"; failed=1
  fi
done
exit "$failed"
