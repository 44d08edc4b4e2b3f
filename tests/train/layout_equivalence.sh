#!/usr/bin/env bash
# Layout equivalence: the same GPT trained 5 iterations from the same seed on the same
# (mock) data gives the single-process run's losses under tensor, pipeline (1F1B and
# interleaved) and data parallelism (one all-reduce, or buckets overlapped with backward), each a real `mpirun` job. Losses are compared as
# Megatron's log prints them (7 significant digits), within 1e-5 relative.
#   tests/train/layout_equivalence.sh TANDEM_BINARY SCENARIO
set -euo pipefail
tandem="$1"
scenario="$2"
common=(--mock-data --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32
  --vocab-size 512 --train-iters 5 --lr-warmup-iters 1 --log-interval 1 --eval-interval 100
  --global-batch-size 8 --micro-batch-size 2 --threads 1)
mpi=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)

losses() { grep -o "lm loss: [0-9.E+-]*" | awk '{print $3}'; }

reference=$("$tandem" train "$scenario" "${common[@]}" --world-size 1 | losses)
[ "$(echo "$reference" | wc -l)" -eq 5 ] || { echo "single-process run printed no 5 losses"; exit 1; }

layouts=(
  "2|--tensor-model-parallel-size 2"
  "2|--pipeline-model-parallel-size 2"
  "2|--tensor-model-parallel-size 1"
  "2|--tensor-model-parallel-size 1 --overlap-grad-reduce --ddp-bucket-size 20000"
  "4|--pipeline-model-parallel-size 2 --overlap-grad-reduce --ddp-bucket-size 20000"
  "4|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"
  "4|--pipeline-model-parallel-size 4"
)
failed=0
printf "%-100s %s\n" "layout" "max relative loss difference"
for entry in "${layouts[@]}"; do
  n="${entry%%|*}"
  flags="${entry#*|}"
  # shellcheck disable=SC2086
  got=$("${mpi[@]}" -np "$n" "$tandem" train "$scenario" "${common[@]}" --world-size "$n" $flags | losses)
  worst=$(paste <(echo "$reference") <(echo "$got") | awk '
    NF != 2 { print "missing"; exit }
    { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d }
    END { if (NR != 5) print "missing"; else printf "%.2e\n", m }')
  printf "%-100s %s\n" "world $n $flags" "$worst"
  if [ "$worst" = missing ] || awk -v w="$worst" 'BEGIN { exit !(w > 1e-5) }'; then failed=1; fi
done
[ "$failed" -eq 0 ] && echo "every layout reproduces the single-process losses"
exit "$failed"
