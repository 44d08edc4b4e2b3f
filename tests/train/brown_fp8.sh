#!/usr/bin/env bash
# FP8 training on the Brown corpus with the cpu binding's software FP8 (kernels/math/fp8.hpp):
# the 2-layer GPT of brown_learning.sh (hidden 128, seq 64, 16 sequences per iteration) is
# trained without FP8 (fp32, the cpu binding's precision) and with Megatron's
# --fp8-format hybrid under the delayed and the tensorwise recipe, from the same seeds and
# data. Each FP8 recipe's validation loss, averaged over the SEEDS, must lie within TOLERANCE
# (relative) of the average without FP8, and every FP8 run's training losses must differ from
# its seed's run without FP8 (the FP8 GEMMs ran).
# ITERS (default 60, the ctest's), SEEDS (default 1234, the ctest's), TOLERANCE (default 0.02),
# THREADS (kernel threads a run, default 1: ctest runs two such single-threaded tests side by
# side on 2 cores, 17 % sooner than one after the other on two threads each) and JOBS (runs
# at a time, default 1) come from the environment. The issue's full criterion is ITERS=200
# over several seeds,
#   ITERS=200 SEEDS="1234 1235 1236 1237" JOBS=2 tests/train/brown_fp8.sh TANDEM_BINARY SCENARIO
# (12 runs, 14 minutes on 2 cores): at 200 iterations one run is one trajectory, and the run
# without FP8 alone ends 6.494-6.665 over those four seeds (2.6 %, more than the tolerance),
# so a single pair cannot resolve 2 %. On 2026-11-30 (SkylakeX OpenBLAS kernels) the delayed
# runs (history 16, max) ended +3.2, -0.4, -0.0, -0.9 % from their seed's run without FP8 and
# the tensorwise runs -0.1, -0.6, +0.8, +0.7 %: on average +0.5 % and +0.2 %.
#   tests/train/brown_fp8.sh TANDEM_BINARY SCENARIO
set -euo pipefail
tandem="$1"; scenario="$2"
iters="${ITERS:-60}"; seeds="${SEEDS:-1234}"; tolerance="${TOLERANCE:-0.02}"
threads="${THREADS:-1}"; jobs_max="${JOBS:-1}"
for v in "ITERS=$iters" "THREADS=$threads" "JOBS=$jobs_max"; do
  [[ "${v#*=}" =~ ^[1-9][0-9]*$ ]] || { echo "${v%%=*} = ${v#*=}: must be a whole number ≥ 1"; exit 2; }
done
for seed in $seeds; do
  [[ "$seed" =~ ^[0-9]+$ ]] || { echo "SEEDS: $seed: each seed must be a whole number"; exit 2; }
done
[ -n "${seeds// /}" ] || { echo "SEEDS is empty: give at least one seed"; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/train/brown_data.sh
source "$(dirname "$0")/brown_data.sh"
brown_document "$work"
run() {  # NAME SEED FLAGS…: the run's log in $work/NAME-SEED.log, its exit status in .rc
  local name="$1" seed="$2" rc=0
  shift 2
  "$tandem" train "$scenario" --data-path "$work/brown_text_document" --split 95,5,0 \
    --num-layers 2 --hidden-size 128 --seq-length 64 --micro-batch-size 8 \
    --global-batch-size 16 --train-iters "$iters" --lr 6e-3 --min-lr 6e-4 --lr-warmup-iters 10 \
    --log-interval 10 --eval-interval "$iters" --eval-iters 4 --threads "$threads" \
    --seed "$seed" "$@" >"$work/$name-$seed.log" 2>&1 || rc=$?
  echo "$rc" >"$work/$name-$seed.rc"
}
launch() {  # as run, in the background, JOBS at a time
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  run "$@" &
}
valid() { grep -o "lm loss value: [0-9.E+-]*" "$work/$1.log" | tail -1 | awk '{print $4}'; }
train_losses() { grep -o "lm loss: [0-9.E+-]*" "$work/$1.log" | awk '{print $3}'; }
relative() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.4f", (a - b) / b }'; }
mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.6f", s / NR }'; }
failed=0
declare -A losses
for seed in $seeds; do
  launch base "$seed"
  launch delayed "$seed" --bf16 --fp8-format hybrid --fp8-recipe delayed \
    --fp8-amax-history-len 16 --fp8-amax-compute-algo max
  launch tensorwise "$seed" --bf16 --fp8-format hybrid --fp8-recipe tensorwise
done
wait
for log in "$work"/*.log; do
  rc=$(cat "${log%.log}.rc")
  [ "$rc" = 0 ] || { echo "$(basename "$log"): tandem train exited $rc"; tail -5 "$log"; exit 1; }
done
for seed in $seeds; do
  base=$(valid "base-$seed")
  losses[base]+="$base "
  echo "Brown, $iters iterations, seed $seed: validation loss without FP8 $base"
  for name in delayed tensorwise; do
    got=$(valid "$name-$seed")
    losses[$name]+="$got "
    echo "  fp8 hybrid $name: validation loss $got ($(relative "$got" "$base") relative)"
    if [ "$(train_losses "$name-$seed")" = "$(train_losses "base-$seed")" ]; then
      echo "  $name: the same training losses as without FP8 (did FP8 run?)"; failed=1
    fi
  done
done
# shellcheck disable=SC2086 # the lists are words on purpose
base=$(mean ${losses[base]})
echo "Mean over seeds ($seeds): without FP8 $base"
for name in delayed tensorwise; do
  # shellcheck disable=SC2086
  got=$(mean ${losses[$name]})
  echo "  fp8 hybrid $name: $got ($(relative "$got" "$base") relative)"
  if awk -v a="$got" -v b="$base" -v t="$tolerance" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d > t) }'; then
    echo "  $name: beyond the tolerance $tolerance"; failed=1
  fi
done
exit "$failed"
