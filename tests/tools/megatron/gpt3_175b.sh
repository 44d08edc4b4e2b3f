#!/bin/bash
# Test fixture: the argument list of Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh
# (NVIDIA/Megatron-LM d98e8a64), laid out as that script lays it out: bash arrays of
# arguments per concern, then torchrun ... pretrain_gpt.py with the arrays. The paths are
# placeholders; tandem reads the script, it never runs it. One difference from the original:
# the arrays are expanded quoted ("${A[@]}"), so the batch-size schedule stays one word as
# pretrain_gpt.py expects (unquoted, bash splits it into six and argparse refuses them).
#
#   tandem simulate --megatron-script tests/tools/megatron/gpt3_175b.sh --world-size 1024

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
MASTER_ADDR=localhost
MASTER_PORT=29500
NUM_NODES=1
NODE_RANK=0
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))

CHECKPOINT_PATH=${1:-/checkpoints/gpt3-175b}
TENSORBOARD_LOGS_PATH=${2:-/logs/gpt3-175b}
VOCAB_FILE=${3:-/data/gpt2-vocab.json}
MERGE_FILE=${4:-/data/gpt2-merges.txt}
DATA_PATH=${5:-/data/pile_text_document}

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --master_addr $MASTER_ADDR
    --master_port $MASTER_PORT
)

GPT_MODEL_ARGS=(
    --num-layers 96
    --hidden-size 12288
    --num-attention-heads 96
    --seq-length 2048
    --max-position-embeddings 2048
    --attention-backend auto # flash, fused, unfused or local
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 1536
    --step-batch-size-schedule "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536"
    --train-iters 500000
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --init-method-std 0.006
    --clip-grad 1.0
    --fp16
    --lr 6.0e-5
    --lr-decay-style cosine
    --min-lr 6.0e-6
    --lr-warmup-fraction .001
    --lr-decay-iters 430000
)

MODEL_PARALLEL_ARGS=(
	--tensor-model-parallel-size 8
	--pipeline-model-parallel-size 16
)

DATA_ARGS=(
    --data-path $DATA_PATH
    --vocab-file $VOCAB_FILE
    --merge-file $MERGE_FILE
    --split 949,50,1
)

EVAL_AND_LOGGING_ARGS=(
    --log-interval 100
    --save-interval 10000
    --eval-interval 1000
    --save $CHECKPOINT_PATH
    --load $CHECKPOINT_PATH
    --eval-iters 10
    --tensorboard-dir $TENSORBOARD_LOGS_PATH
)

torchrun "${DISTRIBUTED_ARGS[@]}" pretrain_gpt.py \
    "${GPT_MODEL_ARGS[@]}" \
    "${TRAINING_ARGS[@]}" \
    "${MODEL_PARALLEL_ARGS[@]}" \
    "${DATA_ARGS[@]}" \
    "${EVAL_AND_LOGGING_ARGS[@]}"
