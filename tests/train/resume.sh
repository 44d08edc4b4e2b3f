#!/usr/bin/env bash
# A run resumed from its iteration-3 checkpoint prints the same losses for iterations 4–6
# as the uninterrupted run, on one process and on a 2-rank pipeline (per-rank checkpoint
# files); a damaged checkpoint is refused with exit code 2 and a message naming the file.
#   tests/train/resume.sh TANDEM_BINARY SCENARIO
set -euo pipefail
tandem="$1"; scenario="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
  --vocab-size 512 --train-iters 6 --lr-warmup-iters 1 --log-interval 1 --eval-interval 100
  --global-batch-size 8 --micro-batch-size 2 --threads 1)
losses() { grep -o "lm loss: [0-9.E+-]*" | awk '{print $3}'; }
for ranks in 1 2; do
  launch=("$tandem")
  extra=(--world-size "$ranks")
  if [ "$ranks" -gt 1 ]; then
    launch=(mpirun --oversubscribe --bind-to none -np "$ranks" "$tandem")
    extra+=(--pipeline-model-parallel-size "$ranks")
  fi
  dir="$work/ckpt$ranks"
  straight=$("${launch[@]}" train "$scenario" "${common[@]}" "${extra[@]}" --save-interval 3 --save "$dir" | losses | tail -3)
  echo 3 >"$dir/latest_checkpointed_iteration.txt"  # resume from the iteration-3 checkpoint
  resumed=$("${launch[@]}" train "$scenario" "${common[@]}" "${extra[@]}" --load "$dir" | losses)
  echo "ranks $ranks: uninterrupted $(echo $straight) | resumed $(echo $resumed)"
  [ "$straight" = "$resumed" ] || { echo "resumed losses differ"; exit 1; }
done
printf 'garbage' >"$work/ckpt1/iter_0000003/rank_00000.ckpt"
set +e
msg=$("$tandem" train "$scenario" "${common[@]}" --world-size 1 --load "$work/ckpt1" 2>&1)
code=$?
set -e
[ "$code" -eq 2 ] || { echo "damaged checkpoint: exit $code, expected 2"; exit 1; }
echo "$msg" | grep -q "rank_00000.ckpt: is not a tandem checkpoint" || { echo "unexpected message: $msg"; exit 1; }
echo "damaged checkpoint refused: exit 2"
