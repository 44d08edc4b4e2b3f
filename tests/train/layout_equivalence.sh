#!/usr/bin/env bash
# Layout equivalence: the same GPT trained 5 iterations from the same seed on the same
# (mock) data gives the single-process run's losses and final parameters under tensor
# (with and without sequence parallelism), pipeline (1F1B and interleaved) and data
# parallelism (one all-reduce, buckets overlapped with backward, the distributed optimizer,
# and that optimizer with its gradients all-reduced, Megatron-DeepSpeed's BF16_Optimizer),
# and with pipeline shapes exchanged before every send (variable_seq_lengths),
# each a real `mpirun` job (tp 2 also with Megatron-Core's fused loss, whose target logits and
# sums are all-reduced as one tensor). Losses are compared as Megatron's log prints them (7 significant
# digits), within 1e-5 relative; the final parameters, reassembled from each run's per-rank
# checkpoints by `tandem checkpoint diff`, within 1e-4 absolute. A Llama-style model
# (grouped-query attention, SwiGLU, RMSNorm, RoPE, untied, no biases, fused attention) is
# checked the same way under tensor (with and without sequence parallelism), pipeline and
# context parallelism (cp 2 alone and with tp 2, pp 2 or the distributed optimizer; cp 4;
# keys and values round the ring, Megatron's default, and all-gathered). A mixture of
# experts on that frame (8 experts, top-2, a shared expert, aux loss) is checked under
# expert parallelism: alone, with tp and sequence parallelism, with pp, with the distributed
# optimizer over the expert-data-parallel group (its gradients reduce-scattered or
# all-reduced), and with full recomputation; and with
# Megatron's allgather dispatcher (with tp and sequence parallelism, and with pp); and
# with context parallelism under both dispatchers (the ep group is then the cp group).
# With attention dropout the mask follows the microbatch's first sample, the layer and the
# head among all tp ranks, and with hidden dropout the site and the row among the whole
# sequence's, so tensor (with and without sequence parallelism), pipeline and data
# parallelism with full recomputation reproduce the single-process run too. Without gradient-accumulation fusion
# (a separate add per weight gradient) every run reproduces the fused one. At dp 3 (hidden
# 48) the distributed optimizer's padded, aligned buffer (Megatron-Core's) does too. With
# --tp-comm-overlap the tensor-parallel all-gathers and reduce-scatters run as ring steps under
# the GEMMs' blocks (also with the distributed optimizer's parameter all-gathers waited for
# bucket by bucket in forward, --overlap-param-gather). Interleaved over four stages, the
# pipeline's sends and receives posted and waited for later (overlap_p2p_comm, Megatron's
# default) or batched and waited for at once, give the single-process losses too. With
# --defer-embedding-wgrad-compute the last stage runs the output layer's weight gradients
# after the schedule (all of them, or the first microbatch's alone with
# --wgrad-deferral-limit 1, under sequence parallelism gathering their inputs again, and with
# overlapped buckets that wait for them): the same losses and parameters.
#   tests/train/layout_equivalence.sh TANDEM_BINARY SCENARIO
set -euo pipefail
tandem="$1"
scenario="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--mock-data --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32
  --vocab-size 512 --train-iters 5 --lr-warmup-iters 1 --log-interval 1 --eval-interval 100
  --global-batch-size 8 --micro-batch-size 2 --threads 1)
mpi=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)

losses() { grep -o "lm loss: [0-9.E+-]*" | awk '{print $3}'; }

reference=$("$tandem" train "$scenario" "${common[@]}" --world-size 1 --save "$work/reference" | losses)
[ "$(echo "$reference" | wc -l)" -eq 5 ] || { echo "single-process run printed no 5 losses"; exit 1; }

layouts=(
  "2|--tensor-model-parallel-size 2"
  "2|--tensor-model-parallel-size 2 --sequence-parallel"
  "2|--tensor-model-parallel-size 2 --cross-entropy-loss-fusion"
  "2|--pipeline-model-parallel-size 2"
  "2|--pipeline-model-parallel-size 2 --variable-seq-lengths"
  "2|--tensor-model-parallel-size 1"
  "2|--tensor-model-parallel-size 1 --overlap-grad-reduce --ddp-bucket-size 20000"
  "2|--tensor-model-parallel-size 1 --use-distributed-optimizer"
  "2|--tensor-model-parallel-size 1 --use-distributed-optimizer --distributed-optimizer-grad-reduce all_reduce"
  "4|--pipeline-model-parallel-size 2 --overlap-grad-reduce --ddp-bucket-size 20000"
  "4|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"
  "4|--pipeline-model-parallel-size 4"
  "4|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --scatter-gather-tensors-in-pipeline"
  "8|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000"
  "8|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer --distributed-optimizer-grad-reduce all_reduce --overlap-grad-reduce --ddp-bucket-size 20000"
  "2|--tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap"
  "4|--tensor-model-parallel-size 4 --sequence-parallel --tp-comm-overlap"
  "8|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --tp-comm-overlap --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 20000"
  "2|--pipeline-model-parallel-size 2 --defer-embedding-wgrad-compute"
  "4|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --defer-embedding-wgrad-compute"
  "8|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000 --defer-embedding-wgrad-compute --wgrad-deferral-limit 1"
)
failed=0
printf "%-150s %-10s %s\n" "layout" "max rel loss diff" "max abs param diff"
# check NAME REFERENCE_LOSSES REFERENCE_DIR RANKS FLAGS…: one mpirun job against a reference.
check() {
  local name="$1" ref_losses="$2" ref_dir="$3" n="$4"
  shift 4
  local got worst params params_ok diff_out
  got=$("${mpi[@]}" -np "$n" "$tandem" train "$scenario" "${common[@]}" --world-size "$n" "$@" \
    --save "$work/$name" | losses)
  worst=$(paste <(echo "$ref_losses") <(echo "$got") | awk '
    NF != 2 { print "missing"; exit }
    { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d }
    END { if (NR != 5) print "missing"; else printf "%.2e\n", m }')
  params_ok=1
  diff_out=$("$tandem" checkpoint diff "$ref_dir" "$work/$name" --tolerance 1e-4 2>&1) || params_ok=0
  params=$(echo "$diff_out" | sed -n 's/^max abs difference: \([^ ]*\).*/\1/p')
  printf "%-150s %-10s %s\n" "world $n $*" "$worst" "${params:-missing}"
  if [ "$params_ok" -eq 0 ]; then echo "$diff_out"; failed=1; fi
  if [ "$worst" = missing ] || awk -v w="$worst" 'BEGIN { exit !(w > 1e-5) }'; then failed=1; fi
}
for k in "${!layouts[@]}"; do
  entry="${layouts[$k]}"
  # shellcheck disable=SC2086
  check "layout$k" "$reference" "$work/reference" "${entry%%|*}" ${entry#*|}
done

# family NAME FLAGS_ARRAY LAYOUTS_ARRAY: a single-process reference with the family's flags
# (left in family_reference), then each "RANKS|FLAGS" layout checked against it.
family() {
  local name="$1"
  local -n flags="$2" rows="$3"
  family_reference=$("$tandem" train "$scenario" "${common[@]}" "${flags[@]}" --world-size 1 \
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

# Llama-style layers (grouped-query attention, SwiGLU, RMSNorm, RoPE, untied output layer, no
# linear biases, fused attention): whole query groups per tp rank, gate and up rows sharded
# alike, no embedding all-reduce between untied stages.
llama=(--group-query-attention --num-query-groups 2 --swiglu --normalization RMSNorm
  --position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear
  --use-flash-attn)
llama_layouts=(
  "2|--tensor-model-parallel-size 2"
  "2|--tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap"
  "2|--tensor-model-parallel-size 2 --sequence-parallel"
  "4|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
  "2|--context-parallel-size 2"
  "4|--tensor-model-parallel-size 2 --context-parallel-size 2 --sequence-parallel"
  "4|--pipeline-model-parallel-size 2 --context-parallel-size 2"
  "4|--context-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000"
  "4|--context-parallel-size 4 --recompute-granularity selective"
  "4|--context-parallel-size 4 --cp-comm-type all_gather --recompute-granularity full"
)
family llama llama llama_layouts

# Mixture of experts: every expert's weights by its global index, whatever ep holds them.
moe=("${llama[@]}" --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 32
  --moe-shared-expert-intermediate-size 32 --moe-aux-loss-coeff 0.01)
moe_layouts=(
  "2|--moe-token-dispatcher-type alltoall --expert-model-parallel-size 2"
  "4|--moe-token-dispatcher-type alltoall --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel"
  "8|--moe-token-dispatcher-type alltoall --expert-model-parallel-size 4 --pipeline-model-parallel-size 2"
  "4|--moe-token-dispatcher-type alltoall --expert-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000"
  "4|--moe-token-dispatcher-type alltoall --expert-model-parallel-size 2 --use-distributed-optimizer --distributed-optimizer-grad-reduce all_reduce --overlap-grad-reduce --ddp-bucket-size 20000"
  "2|--moe-token-dispatcher-type alltoall --expert-model-parallel-size 2 --recompute-granularity full"
  "4|--moe-token-dispatcher-type allgather --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel"
  "8|--moe-token-dispatcher-type allgather --expert-model-parallel-size 4 --pipeline-model-parallel-size 2"
  "4|--moe-token-dispatcher-type alltoall --expert-model-parallel-size 2 --context-parallel-size 2"
  "4|--moe-token-dispatcher-type allgather --expert-model-parallel-size 2 --context-parallel-size 2"
)
family moe moe moe_layouts
# Attention and hidden dropout: the same masks whatever the layout, recomputed or not,
# sequence-parallel or not, bias-dropout-add fused or not.
dropout=(--attention-dropout 0.1 --hidden-dropout 0.1)
dropout_layouts=(
  "4|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --recompute-granularity full"
  "2|--tensor-model-parallel-size 2 --sequence-parallel --bias-dropout-fusion false"
  "2|--tensor-model-parallel-size 1"
)
family dropout dropout dropout_layouts
[ "$family_reference" != "$reference" ] || { echo "dropout did not change the losses"; failed=1; }
# Megatron-Core's gradient buffer at dp 3: a hidden size of 48 puts alignment gaps before
# parameters (each starts at a multiple of 64 elements with the distributed optimizer) and
# buckets end at multiples of lcm(3, 128) = 384 (2^16 · 3 for high NCCL bus bandwidth); the
# tied embedding has a bucket of its own across pipeline stages. Every rank's slice of the
# padded buckets still gives the single-process losses and parameters.
dp3=(--hidden-size 48 --global-batch-size 12)
dp3_layouts=(
  "3|--tensor-model-parallel-size 1"
  "3|--use-distributed-optimizer"
  "3|--use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000"
  "3|--use-distributed-optimizer --ddp-pad-buckets-for-high-nccl-busbw"
  "6|--pipeline-model-parallel-size 2 --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000"
)
family dp3 dp3 dp3_layouts
# Interleaved at dp 2 with overlapped buckets: only the first stage's first chunk is cut
# into buckets, every other chunk is one (Megatron-Core's per-chunk buffers).
check interleaved_buckets "$reference" "$work/reference" 4 --pipeline-model-parallel-size 2 \
  --num-layers-per-virtual-pipeline-stage 1 --use-distributed-optimizer --overlap-grad-reduce \
  --ddp-bucket-size 20000
# Without gradient-accumulation fusion (a fresh weight gradient per microbatch, added to the
# buffer after each chunk's first backward of the step): the fused run's losses and
# parameters, alone, over dp with overlapped buckets, and interleaved (two chunks a rank).
check unfused "$reference" "$work/reference" 1 --gradient-accumulation-fusion false
unfused=(--gradient-accumulation-fusion false)
unfused_layouts=(
  "2|--tensor-model-parallel-size 1 --overlap-grad-reduce --ddp-bucket-size 20000"
  "4|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"
)
family unfused unfused unfused_layouts
# Eight layers on four stages, two chunks each: Megatron-Core's interleaved schedule with its
# p2p calls posted and waited for before the next chunk of their direction (overlap_p2p_comm,
# its default), also with shapes sent first and over dp (micro batch 1: four microbatches a
# pipeline, as the schedule needs), and with the batched calls that block.
deep=(--num-layers 8)
deep_layouts=(
  "4|--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1"
  "4|--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 --variable-seq-lengths"
  "4|--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 --overlap-p2p-comm false"
  "8|--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1 --micro-batch-size 1 --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000"
)
family deep deep deep_layouts
[ "$failed" -eq 0 ] && echo "every layout reproduces the single-process losses and parameters"
exit "$failed"
