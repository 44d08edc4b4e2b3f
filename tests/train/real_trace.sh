#!/usr/bin/env bash
# A real 4-rank run (pp 2 × dp 2, 1F1B) with --trace writes one merged Chrome trace that
# passes the format checker, has a process per rank, every microbatch's forward and
# backward on every rank, dp all-reduces, and a flow arrow for every pipeline send.
#   tests/train/real_trace.sh TANDEM_BINARY SCENARIO OUT_DIR
set -euo pipefail
tandem="$1"; scenario="$2"; out="$3"
mkdir -p "$out"
trace="$out/real_trace.json"
rm -f "$trace"
mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 4 "$tandem" train "$scenario" \
  --mock-data --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 512 \
  --train-iters 2 --lr-warmup-iters 1 --eval-interval 100 --global-batch-size 16 --micro-batch-size 2 \
  --threads 1 --world-size 4 --pipeline-model-parallel-size 2 --trace "$trace" >/dev/null
"$tandem" trace check "$trace"
# 2 iterations × m = 4 microbatches × (F + B) × 4 ranks = 64 compute slices;
# sends per iteration: 4 activations + 4 gradients per pipeline (2 pipelines) = 16 → 32 arrows.
python3 - "$trace" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
compute = [e for e in events if e["ph"] == "X" and e["name"][0] in "FB" and e["name"][1:].isdigit()]
flows = [e for e in events if e["ph"] == "s"]
dp = [e for e in events if e["ph"] == "X" and e["name"] == "allreduce dp"]
ranks = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
assert ranks == {0, 1, 2, 3}, ranks
assert len(compute) == 64, len(compute)
assert len(flows) == 32, len(flows)
assert len(dp) >= 8, len(dp)
print(f"real trace: {len(compute)} forward/backward slices, {len(flows)} send->recv arrows, {len(dp)} dp all-reduces")
PY
# With overlap_grad_reduce and small buckets, dp all-reduces run while backward still runs:
# some dp slice on a rank's dp thread overlaps one of its B slices on the compute thread.
overlap="$out/overlap_trace.json"
mpirun --oversubscribe --bind-to none -np 2 "$tandem" train "$scenario" \
  --mock-data --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 512 \
  --train-iters 2 --lr-warmup-iters 1 --eval-interval 100 --global-batch-size 8 --micro-batch-size 2 \
  --threads 1 --world-size 2 --overlap-grad-reduce --ddp-bucket-size 20000 --trace "$overlap" >/dev/null
"$tandem" trace check "$overlap"
python3 - "$overlap" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
def spans(pred):
    return [(e["pid"], e["ts"], e["ts"] + e["dur"]) for e in events if e["ph"] == "X" and pred(e)]
backward = spans(lambda e: e["name"].startswith("B"))
dp = spans(lambda e: e["name"] == "allreduce dp")
hits = sum(1 for p, s, f in dp if any(q == p and s < g and f > t for q, t, g in backward))
assert hits > 0, "no dp all-reduce overlaps a backward"
print(f"overlap_grad_reduce: {hits} of {len(dp)} dp all-reduces overlap a backward on their rank")
PY
# With the distributed optimizer the dp gradient buckets are reduce-scattered and the
# parameters all-gathered, and with sequence parallelism the tp collectives are
# all-gathers and reduce-scatters: all show up on their ranks' comm threads.
distopt="$out/distopt_trace.json"
mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 4 "$tandem" train "$scenario" \
  --mock-data --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 512 \
  --train-iters 2 --lr-warmup-iters 1 --eval-interval 100 --global-batch-size 8 --micro-batch-size 2 \
  --threads 1 --world-size 4 --tensor-model-parallel-size 2 --sequence-parallel \
  --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 20000 --trace "$distopt" >/dev/null
"$tandem" trace check "$distopt"
python3 - "$distopt" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
names = [e["name"] for e in events if e["ph"] == "X"]
count = {n: names.count(n) for n in ("reducescatter dp", "allgather dp", "allreduce dp",
                                      "reducescatter tp", "allgather tp")}
assert count["reducescatter dp"] >= 2 * 4, count  # ≥ 1 bucket × 2 iterations × 4 ranks
assert count["allgather dp"] == count["reducescatter dp"], count  # one gather per bucket
# The only dp all-reduces left: the grad norm's sum over the shards and the loss average,
# once each per iteration on each of the 4 ranks.
assert count["allreduce dp"] == 2 * 2 * 4, count
assert count["reducescatter tp"] > 0 and count["allgather tp"] > 0, count
print("distributed optimizer + sequence parallel trace:", count)
PY
