#!/usr/bin/env bash
# Parallel layouts on real data: a scenario's model (2 layers at hidden 128) trained 10
# iterations on the Brown corpus gives the single-process training and validation losses
# under mpirun in every layout given, within 1e-5 relative. Each LAYOUT is
# "RANKS|FLAGS…", e.g. "4|--tensor-model-parallel-size 2 --context-parallel-size 2".
# The vocabulary is padded to a multiple of 64 × tp, which is 50304 at tp 1 and at tp 2
# alike (Megatron pads to make_vocab_size_divisible_by × tp, and the padded rows enter the
# softmax, so a different padding would change the losses by itself).
#   tests/train/brown_parallel.sh TANDEM_BINARY SCENARIO LAYOUT…
set -euo pipefail
tandem="$1"; scenario="$2"
shift 2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/train/brown_data.sh
source "$(dirname "$0")/brown_data.sh"
brown_document "$work"
common=(--data-path "$work/brown_text_document" --split 95,5,0 --num-layers 2 --hidden-size 128
  --seq-length 64 --micro-batch-size 4 --global-batch-size 16 --train-iters 10 --lr 6e-3
  --min-lr 6e-4 --lr-warmup-iters 5 --log-interval 2 --eval-interval 5 --eval-iters 2
  --threads 1 --make-vocab-size-divisible-by 64)
mpi=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
losses() { grep -o "lm loss[ a-z]*: [0-9.E+-]*" | awk '{print $NF}'; }

reference=$("$tandem" train "$scenario" "${common[@]}" --world-size 1 | losses)
[ "$(echo "$reference" | wc -l)" -eq 7 ] || { echo "single-process run printed no 5 + 2 losses"; exit 1; }
failed=0
[ "$#" -gt 0 ] || { echo "no layout given"; exit 1; }
for entry in "$@"; do
  n="${entry%%|*}"
  # shellcheck disable=SC2086
  got=$("${mpi[@]}" -np "$n" "$tandem" train "$scenario" "${common[@]}" --world-size "$n" \
    ${entry#*|} | losses)
  worst=$(paste <(echo "$reference") <(echo "$got") | awk '
    NF != 2 { print "missing"; exit }
    { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d }
    END { if (NR != 7) print "missing"; else printf "%.2e\n", m }')
  echo "world $n ${entry#*|}: max relative loss difference $worst"
  if [ "$worst" = missing ] || awk -v w="$worst" 'BEGIN { exit !(w > 1e-5) }'; then failed=1; fi
done
echo "single process: $(echo $reference)"
[ "$failed" -eq 0 ] && echo "every layout reproduces the single-process losses on Brown"
exit "$failed"
