#!/usr/bin/env bash
# Layout equivalence of the attention Megatron-Core builds for Qwen3: heads of kv_channels
# other than hidden / heads and QK layer norms. The same small model trained 5 iterations
# from one seed on mock data gives the single-process run's losses (as Megatron's log
# prints them, within 1e-5 relative) and final parameters (reassembled from the per-rank
# checkpoints by `tandem checkpoint diff`, within 1e-4) under tensor parallelism with and
# without sequence parallelism (also with --tp-comm-overlap's ring-step GEMMs, and with pp
# 2 on ZB-H1's split backward) and context parallelism, each a real `mpirun` job. The QK
# norms' weights are replicated and each tp rank's gradient covers its own heads: summed
# over tp either way, as Megatron's finalize_model_grads does. Two models: the Qwen3 frame
# (hidden 64, 4 heads of 32 channels in 2 query groups, QK RMSNorm before RoPE, fused
# attention, SwiGLU, untied, no biases) and the unfused multi-head attention with
# LayerNorm and biases (4 heads of 8 channels, QK LayerNorm with γ and β). The key norm's
# β has no true gradient (it shifts a query's scores by one constant, which the softmax
# ignores), so Adam steps on rounding noise there: that parameter agrees to about 5e-5,
# the others to about 1e-7. A tp 2 run resumed from a checkpoint continues with the
# uninterrupted run's losses.
#   tests/train/attention_equivalence.sh TANDEM_BINARY SCENARIO
set -euo pipefail
tandem="$1"
scenario="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
  --vocab-size 512 --train-iters 5 --lr-warmup-iters 1 --log-interval 1 --eval-interval 100
  --global-batch-size 4 --micro-batch-size 2 --threads 1 --qk-layernorm)
mpi=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
losses() { grep -o "lm loss: [0-9.E+-]*" | awk '{print $3}'; }

failed=0
# family NAME FLAGS_ARRAY ROWS_ARRAY: a single-process reference, then each "RANKS|FLAGS"
# row against it.
family() {
  local name="$1"
  local -n flags="$2" rows="$3"
  local reference
  reference=$("$tandem" train "$scenario" "${common[@]}" "${flags[@]}" --world-size 1 \
    --save "$work/${name}_reference" | losses)
  [ "$(echo "$reference" | wc -l)" -eq 5 ] || { echo "$name: no 5 single-process losses"; exit 1; }
  local k entry n got worst diff_out params
  for k in "${!rows[@]}"; do
    entry="${rows[$k]}"
    n="${entry%%|*}"
    # shellcheck disable=SC2086
    got=$("${mpi[@]}" -np "$n" "$tandem" train "$scenario" "${common[@]}" "${flags[@]}" \
      --world-size "$n" ${entry#*|} --save "$work/$name$k" | losses)
    worst=$(paste <(echo "$reference") <(echo "$got") | awk '
      NF != 2 { print "missing"; exit }
      { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d }
      END { if (NR != 5) print "missing"; else printf "%.2e\n", m }')
    diff_out=$("$tandem" checkpoint diff "$work/${name}_reference" "$work/$name$k" \
      --tolerance 1e-4 2>&1) || { echo "$diff_out"; failed=1; }
    params=$(echo "$diff_out" | sed -n 's/^max abs difference: \([^ ]*\).*/\1/p')
    printf "%-8s %-90s %-10s %s\n" "$name" "world $n ${entry#*|}" "$worst" "${params:-missing}"
    if [ "$worst" = missing ] || awk -v w="$worst" 'BEGIN { exit !(w > 1e-5) }'; then failed=1; fi
  done
}

qwen=(--group-query-attention --num-query-groups 2 --kv-channels 32 --swiglu
  --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights
  --disable-bias-linear --use-flash-attn)
qwen_rows=(
  "2|--tensor-model-parallel-size 2"
  "2|--tensor-model-parallel-size 2 --sequence-parallel"
  "2|--tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap"
  "2|--context-parallel-size 2"
  "4|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --pipeline-schedule zb-h1"
  "4|--tensor-model-parallel-size 2 --context-parallel-size 2 --sequence-parallel --recompute-granularity selective"
)
family qwen qwen qwen_rows
unfused=(--kv-channels 8)
unfused_rows=(
  "2|--tensor-model-parallel-size 2"
  "2|--tensor-model-parallel-size 2 --sequence-parallel --recompute-granularity full"
)
family unfused unfused unfused_rows
# Checkpoints hold the QK norms: a tp 2 run resumed from its iteration-2 checkpoint prints
# the uninterrupted run's losses for iterations 3-5.
resume=("${mpi[@]}" -np 2 "$tandem" train "$scenario" "${common[@]}" "${qwen[@]}" --world-size 2
  --tensor-model-parallel-size 2)
straight=$("${resume[@]}" --save-interval 2 --save "$work/resume" | losses | tail -3)
echo 2 >"$work/resume/latest_checkpointed_iteration.txt"
resumed=$("${resume[@]}" --load "$work/resume" | losses)
echo "resumed at iteration 2: uninterrupted $(echo $straight) | resumed $(echo $resumed)"
[ -n "$straight" ] && [ "$straight" = "$resumed" ] || { echo "resumed losses differ"; failed=1; }
[ "$failed" -eq 0 ] && echo "every layout reproduces the single-process losses and parameters"
exit "$failed"
