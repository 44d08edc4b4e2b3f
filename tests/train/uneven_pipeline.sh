#!/usr/bin/env bash
# Uneven and flexible pipeline stages under real mpirun: an 8-layer GPT trained 5
# iterations from the same seed on the same (mock) data gives the single-process run's
# losses (Megatron's log, 7 significant digits, within 1e-5 relative) and final parameters
# (reassembled from the per-rank checkpoints by `tandem checkpoint diff`, within 1e-4) when
# its layers are split as Megatron's pipeline flags ask:
#   uneven  pp 3, 2 chunks a rank, 2 layers on the first and last rank (1 a chunk), 4 on
#           the middle one: --decoder-first/last-pipeline-num-layers with virtual stages;
#   layout  pp 2, "E|tttt|tttt|L": the embedding and the loss as stages of their own, so
#           rank 0's first chunk and rank 1's last chunk hold no layer (2 chunks a rank);
#   account pp 2, the embedding and loss counted as layers, 1 layer a virtual stage:
#           (8 + 2) / 2 = 5 chunks a rank, the first and last holding no layer;
#   empty   pp 2 × dp 2, "Et|tttt||tttL": rank 0's second chunk holds nothing at all (no
#           parameter), with the distributed optimizer and overlapped gradient buckets (3
#           microbatches a rank, so microbatch groups of 3 for the interleaved schedule).
#   tests/train/uneven_pipeline.sh TANDEM_BINARY SCENARIO [NAME…]   (default: every one)
set -euo pipefail
tandem="$1"
scenario="$2"
shift 2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--mock-data --num-layers 8 --hidden-size 64 --num-attention-heads 4 --seq-length 32
  --vocab-size 512 --train-iters 5 --lr-warmup-iters 1 --log-interval 1 --eval-interval 100
  --global-batch-size 12 --micro-batch-size 2 --threads 1)
mpi=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
losses() { grep -o "lm loss: [0-9.E+-]*" | awk '{print $3}'; }

declare -A layouts=(
  [uneven]="3|--pipeline-model-parallel-size 3 --num-virtual-stages-per-pipeline-rank 2 --decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 2"
  [layout]="2|--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout E|tttt|tttt|L"
  [account]="2|--pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --num-layers-per-virtual-pipeline-stage 1"
  [empty]="4|--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Et|tttt||tttL --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000 --microbatch-group-size-per-virtual-pipeline-stage 3"
)
names=("$@")
[ "${#names[@]}" -gt 0 ] || names=(uneven layout account empty)

reference=$("$tandem" train "$scenario" "${common[@]}" --world-size 1 --save "$work/reference" | losses)
[ "$(echo "$reference" | wc -l)" -eq 5 ] || { echo "single-process run printed no 5 losses"; exit 1; }
failed=0
for name in "${names[@]}"; do
  entry="${layouts[$name]:?unknown layout $name}"
  n="${entry%%|*}"
  # shellcheck disable=SC2086
  got=$("${mpi[@]}" -np "$n" "$tandem" train "$scenario" "${common[@]}" --world-size "$n" \
    ${entry#*|} --save "$work/$name" | losses)
  worst=$(paste <(echo "$reference") <(echo "$got") | awk '
    NF != 2 { print "missing"; exit }
    { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d }
    END { if (NR != 5) print "missing"; else printf "%.2e\n", m }')
  params_ok=1
  diff_out=$("$tandem" checkpoint diff "$work/reference" "$work/$name" --tolerance 1e-4 2>&1) ||
    params_ok=0
  params=$(echo "$diff_out" | sed -n 's/^max abs difference: \([^ ]*\).*/\1/p')
  echo "$name (world $n ${entry#*|}): max relative loss difference $worst, max abs parameter difference ${params:-missing}"
  if [ "$params_ok" -eq 0 ]; then echo "$diff_out"; failed=1; fi
  if [ "$worst" = missing ] || awk -v w="$worst" 'BEGIN { exit !(w > 1e-5) }'; then failed=1; fi
done
echo "single process: $(echo $reference)"
[ "$failed" -eq 0 ] && echo "every partition reproduces the single-process losses and parameters"
exit "$failed"
