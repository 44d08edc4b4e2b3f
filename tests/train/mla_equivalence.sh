#!/usr/bin/env bash
# Layout equivalence of multi-latent attention (DeepSeek-V3's MLA, model/mla_attention.hpp):
# the same small MLA model trained 5 iterations from one seed on mock data gives the
# single-process run's losses (as Megatron's log prints them, within 1e-5 relative) and
# final parameters (reassembled from the per-rank checkpoints by `tandem checkpoint diff`,
# within 1e-4) under tensor parallelism with and without sequence parallelism (the down
# projections and latent norms duplicated on every rank, their gradients summed over tp
# with sequence parallelism; the shared positional key gathered along the sequence, or
# without sequence parallelism its gradient summed over tp), pipeline parallelism (1F1B,
# interleaved, ZB-H1's split backward), data parallelism with the distributed optimizer,
# --tp-comm-overlap's ring-step GEMMs and selective recomputation, each a real `mpirun` job.
# Two models: DeepSeek-V3's frame (a query latent with q_layernorm and kv_layernorm,
# RMSNorm, SwiGLU, untied, no biases) and one without the query latent or the latent norms
# (linear_q_proj, LayerNorm, biases, half the positional features rotated). YaRN at its
# default scaling factor of 1 (Megatron's default rope_type for MLA) gives RoPE's losses.
#   tests/train/mla_equivalence.sh TANDEM_BINARY
set -euo pipefail
tandem="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--mock-data --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32
  --vocab-size 512 --train-iters 5 --lr-warmup-iters 1 --log-interval 1 --eval-interval 100
  --global-batch-size 8 --micro-batch-size 2 --threads 1 --use-flash-attn
  --multi-latent-attention --kv-lora-rank 24 --qk-head-dim 16 --qk-pos-emb-head-dim 8
  --v-head-dim 12)
mpi=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
losses() { grep -o "lm loss: [0-9.E+-]*" | awk '{print $3}'; }

failed=0
printf "%-110s %-10s %s\n" "layout" "max rel loss diff" "max abs param diff"
# check NAME REFERENCE_LOSSES REFERENCE_DIR RANKS FLAGS…: one mpirun job against a reference.
check() {
  local name="$1" ref_losses="$2" ref_dir="$3" n="$4"
  shift 4
  local got worst params params_ok diff_out
  got=$("${mpi[@]}" -np "$n" "$tandem" train "${common[@]}" --world-size "$n" "$@" \
    --save "$work/$name" | losses)
  worst=$(paste <(echo "$ref_losses") <(echo "$got") | awk '
    NF != 2 { print "missing"; exit }
    { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d }
    END { if (NR != 5) print "missing"; else printf "%.2e\n", m }')
  params_ok=1
  diff_out=$("$tandem" checkpoint diff "$ref_dir" "$work/$name" --tolerance 1e-4 2>&1) || params_ok=0
  params=$(echo "$diff_out" | sed -n 's/^max abs difference: \([^ ]*\).*/\1/p')
  printf "%-110s %-10s %s\n" "world $n $*" "$worst" "${params:-missing}"
  if [ "$params_ok" -eq 0 ]; then echo "$diff_out"; failed=1; fi
  if [ "$worst" = missing ] || awk -v w="$worst" 'BEGIN { exit !(w > 1e-5) }'; then failed=1; fi
}
# family NAME FLAGS_ARRAY LAYOUTS_ARRAY: a single-process reference with the family's flags
# (left in family_reference), then each "RANKS|FLAGS" layout checked against it.
family() {
  local name="$1"
  local -n flags="$2" rows="$3"
  family_reference=$("$tandem" train "${common[@]}" "${flags[@]}" --world-size 1 \
    --save "$work/${name}_reference" | losses)
  [ "$(echo "$family_reference" | wc -l)" -eq 5 ] ||
    { echo "$name single-process run printed no 5 losses"; exit 1; }
  local k entry
  for k in "${!rows[@]}"; do
    entry="${rows[$k]}"
    # shellcheck disable=SC2086
    check "$name$k" "$family_reference" "$work/${name}_reference" "${entry%%|*}" "${flags[@]}" ${entry#*|}
  done
}

deepseek_frame=(--q-lora-rank 32 --qk-layernorm --normalization RMSNorm --swiglu
  --disable-bias-linear --untie-embeddings-and-output-weights --position-embedding-type rope)
deepseek=("${deepseek_frame[@]}" --rope-type rope)
deepseek_layouts=(
  "2|--tensor-model-parallel-size 2"
  "2|--tensor-model-parallel-size 2 --sequence-parallel"
  "2|--pipeline-model-parallel-size 2"
  "4|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel"
  "4|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"
  "2|--pipeline-model-parallel-size 2 --pipeline-schedule zb-h1"
  "4|--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000"
  "2|--tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap"
  "2|--tensor-model-parallel-size 2 --recompute-granularity selective"
)
family deepseek deepseek deepseek_layouts
deepseek_reference="$family_reference"
# YaRN at scaling factor 1 (rope_type left to Megatron's MLA default) is RoPE exactly.
yarn_losses=$("$tandem" train "${common[@]}" "${deepseek_frame[@]}" --world-size 1 | losses)
if [ "$yarn_losses" != "$deepseek_reference" ]; then
  echo "yarn at rotary_scaling_factor 1 did not give rope's losses"
  failed=1
fi

plain=(--normalization LayerNorm --rope-type rope --position-embedding-type rope
  --rotary-percent 0.5)
plain_layouts=(
  "2|--tensor-model-parallel-size 2"
  "2|--tensor-model-parallel-size 2 --sequence-parallel"
  "4|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
)
family plain plain plain_layouts
[ "$family_reference" != "$deepseek_reference" ] || { echo "the two models gave one loss"; failed=1; }
[ "$failed" -eq 0 ] && echo "every MLA layout reproduces the single-process losses and parameters"
exit "$failed"
