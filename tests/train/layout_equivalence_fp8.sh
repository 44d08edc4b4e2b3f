#!/usr/bin/env bash
# Layout equivalence in FP8: the GPT of layout_equivalence.sh trained 5 iterations with
# Megatron's --fp8-format hybrid and the delayed recipe gives the single-process run's
# losses and final parameters under tp 2 (with sequence parallelism), pp 2, dp 2 and
# tp 2 × pp 2 × dp 2 with the distributed optimizer, each a real mpirun job. The scales are
# the same in every layout (each step's amaxes reduced over tp and dp, model/fp8_linear.hpp),
# so the FP8 codes are too, except where a GEMM's sum, reordered by the layout, lands an
# element on the other side of a rounding boundary: losses are compared within LOSS_TOL
# (default 1e-4 relative) and parameters within PARAM_TOL (default 1e-3 absolute), ten
# times the bf16-free layout_equivalence.sh's.
#   tests/train/layout_equivalence_fp8.sh TANDEM_BINARY SCENARIO
set -euo pipefail
tandem="$1"
scenario="$2"
loss_tol="${LOSS_TOL:-1e-4}"; param_tol="${PARAM_TOL:-1e-3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--mock-data --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32
  --vocab-size 512 --train-iters 5 --lr-warmup-iters 1 --log-interval 1 --eval-interval 100
  --global-batch-size 8 --micro-batch-size 2 --threads 1
  --bf16 --fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 4 --fp8-amax-compute-algo max)
mpi=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
losses() { grep -o "lm loss: [0-9.E+-]*" | awk '{print $3}'; }
reference=$("$tandem" train "$scenario" "${common[@]}" --world-size 1 --save "$work/reference" | losses)
[ "$(echo "$reference" | wc -l)" -eq 5 ] || { echo "single-process run printed no 5 losses"; exit 1; }
layouts=(
  "2|--tensor-model-parallel-size 2 --sequence-parallel"
  "2|--pipeline-model-parallel-size 2"
  "2|--tensor-model-parallel-size 1"
  "8|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000"
)
failed=0
printf "%-130s %-18s %s\n" "layout" "max rel loss diff" "max abs param diff"
for k in "${!layouts[@]}"; do
  entry="${layouts[$k]}"
  n="${entry%%|*}"
  # shellcheck disable=SC2086
  got=$("${mpi[@]}" -np "$n" "$tandem" train "$scenario" "${common[@]}" --world-size "$n" \
    ${entry#*|} --save "$work/layout$k" | losses)
  worst=$(paste <(echo "$reference") <(echo "$got") | awk '
    NF != 2 { print "missing"; exit }
    { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d }
    END { if (NR != 5) print "missing"; else printf "%.2e\n", m }')
  params_ok=1
  diff_out=$("$tandem" checkpoint diff "$work/reference" "$work/layout$k" --tolerance "$param_tol" 2>&1) || params_ok=0
  params=$(echo "$diff_out" | sed -n 's/^max abs difference: \([^ ]*\).*/\1/p')
  printf "%-130s %-18s %s\n" "world $n ${entry#*|}" "$worst" "${params:-missing}"
  if [ "$params_ok" -eq 0 ]; then echo "$diff_out"; failed=1; fi
  if [ "$worst" = missing ] || awk -v w="$worst" -v t="$loss_tol" 'BEGIN { exit !(w > t) }'; then failed=1; fi
done
exit "$failed"
