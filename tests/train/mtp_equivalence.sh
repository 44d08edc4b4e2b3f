#!/usr/bin/env bash
# Multi-token prediction under real mpirun: a 4-layer model with 2 MTP depths trained 5
# iterations from the same seed on the same (mock) data gives the single-process run's
# losses — the lm loss and each depth's mtp_k loss, as Megatron's log prints them (7
# significant digits), within 1e-5 relative — and final parameters (reassembled from the
# per-rank checkpoints by `tandem checkpoint diff`, within 1e-4):
#   tp_sp    tp 2 with sequence parallelism: eh_proj column-parallel, its output gathered
#            over tp and scattered back to the sequence shard, the depths' embedding
#            reduce-scattered;
#   tp       tp 2 without it: the embedding all-reduced, eh_proj's input gradient too;
#   pp       pp 2, untied: the last stage's copy of the word embedding (the depths embed
#            with it) all-reduced with the first stage's over the embedding group;
#   pp_tied  pp 2, tied, no position embedding: the copy is also the output layer;
#   layout   pp 2, "Etttt|mmL": every layer and the final norm on the first stage, the
#            depths and the loss on the second;
#   zb       pp 2 under ZB-H1 (the depths' weight gradients W work);
#   moe      ep 2 with the last layer, and so the depths' layers, a mixture of experts;
#   recompute tp 2 with sequence parallelism, full recomputation (each depth recomputed
#            from its two inputs);
#   standalone_first  pp 2, "Ettttmm|L": the depths with the embedding on the first stage,
#            the loss alone on the second (Megatron's mtp_standalone: [h0 | depth 1 |
#            depth 2] crosses the pipeline, shapes exchanged first);
#   standalone pp 3, "Et|t|t|t|mm|L", tied: the depths on pp rank 1's second chunk, its copy
#            of the word embedding in an embedding group of three stages (pretrain_gpt.py's
#            get_embedding_ranks);
#   cp_tp, cp_pp  cp 2 with tp 2 and sequence parallelism, and with pp 2, against the cp 2
#            run (the tokens rolled over the whole sequence, the masked tail on cp rank 0;
#            each rank's depth loss over its own unmasked tokens, as Megatron's), whose
#            first lm loss is the single process's.
#   tests/train/mtp_equivalence.sh TANDEM_BINARY [NAME…]   (default: every one)
set -euo pipefail
tandem="$1"
shift
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--mock-data --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --vocab-size 512 --train-iters 5 --lr 1e-3 --lr-warmup-iters 1
  --log-interval 1 --eval-interval 100 --global-batch-size 8 --micro-batch-size 2 --threads 1
  --transformer-impl local --mtp-num-layers 2 --mtp-loss-scaling-factor 0.3)
llama=(--group-query-attention --num-query-groups 2 --swiglu --normalization RMSNorm
  --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear
  --use-flash-attn)
gpt=(--position-embedding-type none)
moe=("${llama[@]}" --num-experts 4 --moe-layer-freq "[0,0,0,1]" --moe-router-topk 2
  --moe-ffn-hidden-size 32 --moe-aux-loss-coeff 0.01 --moe-token-dispatcher-type alltoall)
mpi=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
losses() { grep -o "\(lm\|mtp_[0-9]*\) loss: [0-9.E+-]*" | awk '{print $3}'; }

# NAME -> "RANKS|FAMILY|FLAGS"
declare -A cases=(
  [tp_sp]="2|llama|--tensor-model-parallel-size 2 --sequence-parallel"
  [tp]="2|llama|--tensor-model-parallel-size 2"
  [pp]="2|llama|--pipeline-model-parallel-size 2"
  [pp_tied]="2|gpt|--pipeline-model-parallel-size 2"
  [layout]="2|llama|--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Etttt|mmL"
  [zb]="2|llama|--pipeline-model-parallel-size 2 --pipeline-schedule zb-h1"
  [moe]="2|moe|--expert-model-parallel-size 2"
  [recompute]="2|llama|--tensor-model-parallel-size 2 --sequence-parallel --recompute-granularity full"
  [standalone_first]="2|llama|--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Ettttmm|L"
  [standalone]="3|gpt|--pipeline-model-parallel-size 3 --pipeline-model-parallel-layout Et|t|t|t|mm|L --microbatch-group-size-per-virtual-pipeline-stage 4"
  [cp_tp]="4|llama_cp|--context-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel"
  [cp_pp]="4|llama_cp|--context-parallel-size 2 --pipeline-model-parallel-size 2"
)
# A family's reference: one process, or for llama_cp the cp 2 run (below).
llama_cp=("${llama[@]}")
declare -A reference_layout=([llama_cp]="2|--context-parallel-size 2")
names=("$@")
[ "${#names[@]}" -gt 0 ] ||
  names=(tp_sp tp pp pp_tied layout zb moe recompute standalone_first standalone cp_tp cp_pp)

failed=0
declare -A references=()
for name in "${names[@]}"; do
  entry="${cases[$name]:?unknown case $name}"
  n="${entry%%|*}"
  rest="${entry#*|}"
  family="${rest%%|*}"
  flags="${rest#*|}"
  declare -n family_flags="$family"
  # One reference per family (the recomputation's own: it changes nothing).
  if [ -z "${references[$family]:-}" ]; then
    ref="${reference_layout[$family]:-1|}"
    # shellcheck disable=SC2086
    references[$family]=$("${mpi[@]}" -np "${ref%%|*}" "$tandem" train "${common[@]}" \
      "${family_flags[@]}" --world-size "${ref%%|*}" ${ref#*|} --save "$work/${family}_reference" |
      losses)
    [ "$(echo "${references[$family]}" | wc -l)" -eq 15 ] ||
      { echo "$family reference run printed no 5 × 3 losses"; exit 1; }
  fi
  reference="${references[$family]}"
  # shellcheck disable=SC2086
  got=$("${mpi[@]}" -np "$n" "$tandem" train "${common[@]}" "${family_flags[@]}" \
    --world-size "$n" $flags --save "$work/$name" | losses)
  unset -n family_flags
  worst=$(paste <(echo "$reference") <(echo "$got") | awk '
    NF != 2 { print "missing"; exit }
    { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d }
    END { if (NR != 15) print "missing"; else printf "%.2e\n", m }')
  params_ok=1
  diff_out=$("$tandem" checkpoint diff "$work/${family}_reference" "$work/$name" \
    --tolerance 1e-4 2>&1) || params_ok=0
  params=$(echo "$diff_out" | sed -n 's/^max abs difference: \([^ ]*\).*/\1/p')
  echo "$name (world $n, $family, $flags): max relative loss difference $worst (lm and mtp_1, mtp_2 over 5 iterations), max abs parameter difference ${params:-missing}"
  if [ "$params_ok" -eq 0 ]; then echo "$diff_out"; failed=1; fi
  if [ "$worst" = missing ] || awk -v w="$worst" 'BEGIN { exit !(w > 1e-5) }'; then failed=1; fi
done
for family in "${!references[@]}"; do echo "$family reference: $(echo ${references[$family]})"; done
# Context parallelism: Megatron normalizes each depth's loss by the rank's own unmasked
# tokens (the masked tail lies on cp rank 0 alone), so the cp runs' objective is the mean of
# the ranks' means, not the single process's; they are checked against the cp 2 run above.
# Its forward is the single process's: the first iteration's lm loss is the same.
if [ -n "${references[llama_cp]:-}" ]; then
  single=$("$tandem" train "${common[@]}" "${llama[@]}" --world-size 1 --train-iters 1 | losses |
    head -1)
  cp_first=$(echo "${references[llama_cp]}" | head -1)
  echo "first lm loss: one process $single, cp 2 $cp_first"
  [ "$single" = "$cp_first" ] || { echo "cp 2's first lm loss differs"; failed=1; }
fi
[ "$failed" -eq 0 ] && echo "every layout reproduces the single-process losses and parameters"
