#!/usr/bin/env bash
# A run resumed from its iteration-3 checkpoint prints the same losses for iterations 4–6
# as the uninterrupted run, on one process, on a 2-rank pipeline, on 2 data-parallel
# ranks with the distributed optimizer (per-rank checkpoint files, each holding its shard
# of the Adam moments; its gradients reduce-scattered or all-reduced) and with 2 multi-token prediction depths on the pipeline's last
# stage (their parameters and moments in its checkpoint); a damaged checkpoint is refused
# with exit code 2 and a message naming the file.
#   tests/train/resume.sh TANDEM_BINARY SCENARIO
set -euo pipefail
tandem="$1"; scenario="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
  --vocab-size 512 --train-iters 6 --lr-warmup-iters 1 --log-interval 1 --eval-interval 100
  --global-batch-size 8 --micro-batch-size 2 --threads 1)
losses() { grep -o "\(lm\|mtp_[0-9]*\) loss: [0-9.E+-]*" | awk '{print $3}'; }
runs=(
  "1|"
  "2|--pipeline-model-parallel-size 2"
  "2|--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 20000"
  "2|--use-distributed-optimizer --distributed-optimizer-grad-reduce all_reduce"
  "2|--pipeline-model-parallel-size 2 --position-embedding-type rope --mtp-num-layers 2"
)
for k in "${!runs[@]}"; do
  ranks="${runs[$k]%%|*}"
  flags="${runs[$k]#*|}"
  launch=("$tandem")
  # shellcheck disable=SC2206
  extra=(--world-size "$ranks" $flags)
  if [ "$ranks" -gt 1 ]; then
    launch=(mpirun --oversubscribe --bind-to none -np "$ranks" "$tandem")
  fi
  dir="$work/ckpt$k"
  straight=$("${launch[@]}" train "$scenario" "${common[@]}" "${extra[@]}" --save-interval 3 --save "$dir" | losses)
  echo 3 >"$dir/latest_checkpointed_iteration.txt"  # resume from the iteration-3 checkpoint
  resumed=$("${launch[@]}" train "$scenario" "${common[@]}" "${extra[@]}" --load "$dir" | losses)
  # Iterations 4–6 of the uninterrupted run: its second half of the losses (lm, mtp_k).
  straight=$(echo "$straight" | tail -n "$(($(echo "$straight" | wc -l) / 2))")
  echo "ranks $ranks $flags: uninterrupted $(echo $straight) | resumed $(echo $resumed)"
  [ "$straight" = "$resumed" ] || { echo "resumed losses differ"; exit 1; }
done
# The distributed optimizer's checkpoints hold each rank's half of the Adam moments (the
# parameters whole): the moments' memory dropped by dp.
python3 - "$work/ckpt2/iter_0000006" <<'PY'
import json, struct, sys
sizes = []
for r in (0, 1):
    raw = open(f"{sys.argv[1]}/rank_{r:05d}.ckpt", "rb").read()
    header = json.loads(raw[20:20 + struct.unpack("<Q", raw[12:20])[0]])
    sizes.append({t["name"]: t["elements"] for t in header["tensors"]})
params = sizes[0]["params"]
for s in sizes:
    assert s["params"] == params and 2 * s["exp_avg"] <= params and s["exp_avg_sq"] == s["exp_avg"], sizes
assert sizes[0]["exp_avg"] + sizes[1]["exp_avg"] > 0.99 * params, sizes
print(f"distributed optimizer: {params} parameters, Adam moments per rank {[s['exp_avg'] for s in sizes]}")
PY
printf 'garbage' >"$work/ckpt0/iter_0000003/rank_00000.ckpt"
set +e
msg=$("$tandem" train "$scenario" "${common[@]}" --world-size 1 --load "$work/ckpt0" 2>&1)
code=$?
set -e
[ "$code" -eq 2 ] || { echo "damaged checkpoint: exit $code, expected 2"; exit 1; }
echo "$msg" | grep -q "rank_00000.ckpt: is not a tandem checkpoint" || { echo "unexpected message: $msg"; exit 1; }
echo "damaged checkpoint refused: exit 2"
