#!/usr/bin/env bash
# One code path, proven: for several layouts, the cpu binding under mpirun and the sim
# binding (full fidelity) report per rank the same memory high-water mark (to the byte),
# the same number of Device ops and the same op sequence (context parallelism, the
# mixture of experts with balanced routing — DeepSeek-V3's router and token dropping too —,
# FP8 linear layers and FP8 parameters, uneven pipeline stages, the split backward of ZB-H1 and
# --delay-wgrad-compute, heads of kv_channels with QK layer norms, multi-latent attention
# and multi-token prediction included).
#   tests/sim/one_code_path.sh PROBE_BINARY
set -euo pipefail
probe="$1"
layouts=(
  # Uneven pipeline stages: 1 + 2 + 1 layers on pp 3, and the embedding and the loss as
  # stages of their own, interleaved ("E|tt|tt|L": 2 chunks a rank, two with no layer)
  "--world-size 3 --pipeline-model-parallel-size 3 --decoder-first-pipeline-num-layers 1 --decoder-last-pipeline-num-layers 1"
  "--world-size 2 --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout E|tt|tt|L"
  "--world-size 2 --tensor-model-parallel-size 2"
  "--world-size 2 --pipeline-model-parallel-size 2"
  # Weight gradients split from input gradients: ZB-H1 (Ws held back, so more held in
  # memory on the later stage), and --delay-wgrad-compute interleaved over dp with buckets
  "--world-size 2 --pipeline-model-parallel-size 2 --pipeline-schedule zb-h1"
  "--world-size 4 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --delay-wgrad-compute true --overlap-grad-reduce true --ddp-bucket-size 20000"
  "--world-size 2 --overlap-grad-reduce true --ddp-bucket-size 20000"
  "--world-size 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1"
  "--world-size 2 --tensor-model-parallel-size 2 --sequence-parallel true"
  "--world-size 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --scatter-gather-tensors-in-pipeline true"
  "--world-size 4 --tensor-model-parallel-size 2 --use-distributed-optimizer true --overlap-grad-reduce true --ddp-bucket-size 20000"
  # Llama-style layers: grouped-query fused attention, SwiGLU, RMSNorm, RoPE, untied, no bias
  "--world-size 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --group-query-attention true --num-query-groups 2 --swiglu true --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights true --disable-bias-linear true --use-flash-attn true --recompute-granularity selective"
  # Context parallelism: each rank's two chunks, keys and values gathered over cp
  "--world-size 4 --tensor-model-parallel-size 2 --context-parallel-size 2 --sequence-parallel true --group-query-attention true --num-query-groups 2 --swiglu true --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights true --disable-bias-linear true --use-flash-attn true"
  "--world-size 4 --pipeline-model-parallel-size 2 --context-parallel-size 2 --use-flash-attn true --use-distributed-optimizer true --recompute-granularity selective"
  "--world-size 4 --context-parallel-size 4 --cp-comm-type all_gather --use-flash-attn true"
  # Qwen3's attention: heads of kv_channels (32, twice hidden / heads) and QK layer norms,
  # fused under tp, sp and cp; unfused (kv_channels 8, QK LayerNorm) under tp
  "--world-size 4 --tensor-model-parallel-size 2 --context-parallel-size 2 --sequence-parallel true --group-query-attention true --num-query-groups 2 --kv-channels 32 --qk-layernorm true --swiglu true --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights true --disable-bias-linear true --use-flash-attn true"
  "--world-size 2 --tensor-model-parallel-size 2 --kv-channels 8 --qk-layernorm true --recompute-granularity selective"
  # DeepSeek-V3's router (sigmoid, groups, expert bias and its update) and token dropping at
  # capacity 0.5, padded (alltoall) and dropped (allgather), on balanced routing
  "--world-size 4 --tensor-model-parallel-size 2 --sequence-parallel true --expert-model-parallel-size 2 --disable-bias-linear true --num-experts 4 --moe-router-topk 2 --moe-router-force-load-balancing true --moe-token-dispatcher-type alltoall --moe-router-score-function sigmoid --moe-router-enable-expert-bias true --moe-router-num-groups 2 --moe-router-group-topk 1 --moe-expert-capacity-factor 0.5 --moe-pad-expert-input-to-capacity true --moe-aux-loss-coeff 0.01"
  "--world-size 2 --expert-model-parallel-size 2 --disable-bias-linear true --num-experts 4 --moe-router-topk 2 --moe-router-force-load-balancing true --moe-token-dispatcher-type allgather --moe-expert-capacity-factor 0.5 --moe-token-drop-policy position"
  # Mixture of experts with the router's balanced routing (Megatron's force_load_balancing)
  # on the real side and the simulator's uniform routing model: the same split sizes
  "--world-size 4 --tensor-model-parallel-size 2 --sequence-parallel true --expert-model-parallel-size 2 --swiglu true --normalization RMSNorm --disable-bias-linear true --use-flash-attn true --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-shared-expert-intermediate-size 64 --moe-aux-loss-coeff 0.01 --moe-router-force-load-balancing true --moe-token-dispatcher-type alltoall"
  "--world-size 4 --tensor-model-parallel-size 2 --sequence-parallel true --expert-model-parallel-size 2 --disable-bias-linear true --num-experts 4 --moe-token-dispatcher-type allgather --moe-router-force-load-balancing true"
  "--world-size 4 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 --disable-bias-linear true --num-experts 8 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-router-force-load-balancing true --moe-token-dispatcher-type alltoall --use-distributed-optimizer true --overlap-grad-reduce true --ddp-bucket-size 20000 --recompute-granularity full"
  # Multi-token prediction: 2 depths beside the loss under tp 2 × pp 2 with sequence
  # parallelism, each recomputed from its inputs; one depth with the loss on a stage apart
  # from the layers ("Etttt|mL"), untied, under ZB-H1
  "--world-size 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel true --position-embedding-type rope --mtp-num-layers 2 --recompute-granularity full"
  "--world-size 2 --pipeline-model-parallel-size 2 --position-embedding-type none --untie-embeddings-and-output-weights true --pipeline-model-parallel-layout Etttt|mL --mtp-num-layers 1 --pipeline-schedule zb-h1"
  # ... and on a stage of its own (Megatron's mtp_standalone): the stages after it exchange
  # [h0 | depth 1], which the simulator allocates from the program's received_shape
  "--world-size 3 --pipeline-model-parallel-size 3 --position-embedding-type rope --pipeline-model-parallel-layout Et|t|t|t|m|L --mtp-num-layers 1 --microbatch-group-size-per-virtual-pipeline-stage 4"
  # ... and with context parallelism (tokens rolled over the whole sequence, the masked
  # tail on cp rank 0) under tp 2 and sequence parallelism
  "--world-size 4 --context-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel true --use-flash-attn true --position-embedding-type rope --mtp-num-layers 2"
  # FP8 linear layers (on an H100 preset, which has an FP8 rate): delayed scaling with its
  # amax reductions over tp and dp, and blockwise scaling with its columnwise copies
  "--world-size 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel true --bf16 true --fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 4 --topology dgx-h100"
  "--world-size 2 --use-distributed-optimizer true --recompute-granularity full --bf16 true --fp8-format e4m3 --fp8-recipe blockwise --topology dgx-h100"
  # ... and FP8 parameters (--fp8-param-gather): cast from the main shards (tensorwise: the
  # amaxes all-reduced over dp), gathered as codes in buckets of their own
  "--world-size 4 --tensor-model-parallel-size 2 --use-distributed-optimizer true --overlap-grad-reduce true --overlap-param-gather true --ddp-bucket-size 20000 --bf16 true --fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather true --topology dgx-h100"
  # Multi-latent attention: the query latent and its norm, the shared positional key gathered
  # over tp with sequence parallelism (selective recomputation of its core); linear_q_proj
  # and the positional key's gradient all-reduced over tp without it
  "--world-size 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel true --multi-latent-attention true --q-lora-rank 32 --kv-lora-rank 24 --qk-head-dim 16 --qk-pos-emb-head-dim 8 --v-head-dim 12 --qk-layernorm true --normalization RMSNorm --position-embedding-type rope --rope-type rope --use-flash-attn true --disable-bias-linear true --recompute-granularity selective"
  "--world-size 2 --tensor-model-parallel-size 2 --multi-latent-attention true --kv-lora-rank 24 --qk-head-dim 16 --qk-pos-emb-head-dim 8 --v-head-dim 12 --use-flash-attn true"
)
for layout in "${layouts[@]}"; do
  world=$(echo "$layout" | sed -E 's/.*--world-size ([0-9]+).*/\1/')
  # shellcheck disable=SC2086
  # mpirun forwards the ranks' lines in any order
  cpu=$(mpirun --oversubscribe --bind-to none -np "$world" "$probe" cpu $layout | sort -n -k2)
  # shellcheck disable=SC2086
  sim=$("$probe" sim $layout | sort -n -k2)
  if [ "$cpu" != "$sim" ]; then
    echo "layout $layout: the bindings differ"
    echo "cpu:"; echo "$cpu"; echo "sim:"; echo "$sim"
    exit 1
  fi
  echo "layout $layout: identical on $world ranks"
  echo "$cpu" | sed 's/^/  /'
done
