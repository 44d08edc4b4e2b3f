#!/usr/bin/env bash
# tandem train --log-dir: a 4-rank job (pp 2 × dp 2) writes one log file per rank with that
# rank's own log lines; stdout still carries the last pipeline stage's Megatron lines, the
# same lines as that rank's file; first-stage ranks log no loss (Megatron's loss lives on
# the last stage); a --log-dir that cannot be created is refused before MPI starts.
#   tests/train/rank_logs.sh TANDEM_BINARY SCENARIO
set -euo pipefail
tandem="$1"; scenario="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
args=(--mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
  --vocab-size 512 --train-iters 3 --lr-warmup-iters 1 --log-interval 1 --eval-interval 100
  --global-batch-size 8 --micro-batch-size 2 --threads 1 --world-size 4 --pipeline-model-parallel-size 2)
mpirun --oversubscribe --bind-to none -np 4 "$tandem" train "$scenario" "${args[@]}" \
  --log-dir "$work/logs" >"$work/stdout.txt"
loss() { grep -o "lm loss: [0-9.E+-]*" "$1" | awk '{print $3}'; }
for r in 0 1 2 3; do
  f="$work/logs/rank_0000$r.log"
  [ -f "$f" ] || { echo "missing $f"; exit 1; }
  [ "$(grep -c "iteration " "$f")" -eq 3 ] || { echo "$f does not hold 3 log lines"; cat "$f"; exit 1; }
done
# Ranks 0, 1 are the first stage (dp 0, 1), ranks 2, 3 the last (layout tp-cp-ep-dp-pp).
[ "$(loss "$work/logs/rank_00000.log" | sort -u)" = "0.000000E+00" ] || { echo "first stage logs a loss"; exit 1; }
[ "$(loss "$work/stdout.txt")" = "$(loss "$work/logs/rank_00003.log")" ] || { echo "stdout differs from the reporter's log"; exit 1; }
[ "$(loss "$work/logs/rank_00002.log")" = "$(loss "$work/logs/rank_00003.log")" ] || { echo "last-stage dp ranks disagree"; exit 1; }
[ "$(loss "$work/stdout.txt" | wc -l)" -eq 3 ] || { echo "stdout lacks the 3 log lines"; exit 1; }
touch "$work/file"
set +e
msg=$("$tandem" train "$scenario" --mock-data --world-size 1 --log-dir "$work/file/logs" 2>&1)
code=$?
set -e
[ "$code" -eq 2 ] || { echo "bad --log-dir: exit $code, expected 2"; exit 1; }
echo "$msg" | grep -q -- "--log-dir" || { echo "unexpected message: $msg"; exit 1; }
echo "4 rank logs, stdout = the last stage's log, bad --log-dir refused"
