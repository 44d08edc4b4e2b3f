#!/usr/bin/env bash
# The full layout matrix of a 4-layer, hidden-64, 4-head, seq-32, vocab-512 GPT: every
# valid combination of tp {1,2,4} × pp {1,2,4} (vpp 2 where the layers divide) × dp {1,2}
# × sequence parallelism (tp > 1) × distributed optimizer (dp > 1; plain, and with
# overlapped bucket reduce-scatters and parameter all-gathers) with world ≤ 8, each a real
# `mpirun` job of 5 iterations from the same seed on the same mock data. Every run is
# compared with the single-process run: losses within 1e-5 relative (as Megatron's log prints
# them), final parameters (reassembled from the per-rank checkpoints by `tandem checkpoint
# diff`) within 1e-4 absolute. Prints a summary table; exits 1 if any layout fails.
#   scripts/layout_matrix.sh [BUILD_DIR]      (default build; or TANDEM=/path/to/tandem)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tandem="${TANDEM:-${1:-$root/build}/tools/tandem}"
[ -x "$tandem" ] || { echo "no tandem binary at $tandem (build it, or pass BUILD_DIR / TANDEM=)"; exit 2; }
scenario="$root/scenarios/brown-small.json"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
layers=4
common=(--mock-data --num-layers "$layers" --hidden-size 64 --num-attention-heads 4 --seq-length 32
  --vocab-size 512 --train-iters 5 --lr-warmup-iters 1 --log-interval 1 --eval-interval 100
  --global-batch-size 16 --micro-batch-size 2 --threads 1)
mpi=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
losses() { grep -o "lm loss: [0-9.E+-]*" | awk '{print $3}'; }

reference=$("$tandem" train "$scenario" "${common[@]}" --world-size 1 --save "$work/reference" | losses)
[ "$(echo "$reference" | wc -l)" -eq 5 ] || { echo "single-process run printed no 5 losses"; exit 1; }

layouts=()
for tp in 1 2 4; do
  for pp in 1 2 4; do
    for vpp in 1 2; do
      [ "$vpp" -eq 2 ] && { [ "$pp" -eq 1 ] || [ $((layers % (pp * vpp))) -ne 0 ]; } && continue
      for dp in 1 2; do
        [ $((tp * pp * dp)) -le 8 ] || continue
        for sp in off on; do
          [ "$sp" = on ] && [ "$tp" -eq 1 ] && continue
          for opt in off on overlap; do
            [ "$opt" != off ] && [ "$dp" -eq 1 ] && continue
            flags="--tensor-model-parallel-size $tp --pipeline-model-parallel-size $pp"
            [ "$vpp" -gt 1 ] && flags+=" --num-layers-per-virtual-pipeline-stage $((layers / (pp * vpp)))"
            [ "$sp" = on ] && flags+=" --sequence-parallel"
            [ "$opt" = on ] && flags+=" --use-distributed-optimizer"
            [ "$opt" = overlap ] && flags+=" --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 20000"
            layouts+=("$((tp * pp * dp))|tp$tp pp$pp vpp$vpp dp$dp sp-$sp distopt-$opt|$flags")
          done
        done
      done
    done
  done
done

failed=0
table="$work/table.txt"
printf "| %-44s | %5s | %-19s | %-18s | %-6s |\n" "layout" "world" "max rel loss diff" "max abs param diff" "result" >"$table"
printf "|%s|%s|%s|%s|%s|\n" "$(printf -- '-%.0s' {1..46})" "-------" "---------------------" "--------------------" "--------" >>"$table"
for k in "${!layouts[@]}"; do
  IFS='|' read -r n name flags <<<"${layouts[$k]}"
  # shellcheck disable=SC2086
  got=$("${mpi[@]}" -np "$n" "$tandem" train "$scenario" "${common[@]}" --world-size "$n" $flags \
    --save "$work/run$k" 2>"$work/run$k.err" | losses) || true
  worst=$(paste <(echo "$reference") <(echo "$got") | awk '
    NF != 2 { print "missing"; exit }
    { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d }
    END { if (NR != 5) print "missing"; else printf "%.2e\n", m }')
  params_ok=1
  diff_out=$("$tandem" checkpoint diff "$work/reference" "$work/run$k" --tolerance 1e-4 2>&1) || params_ok=0
  params=$(echo "$diff_out" | sed -n 's/^max abs difference: \([^ ]*\).*/\1/p')
  result=pass
  if [ "$params_ok" -eq 0 ] || [ "$worst" = missing ] || awk -v w="$worst" 'BEGIN { exit !(w > 1e-5) }'; then
    result=FAIL
    failed=1
    { echo "== $name: $flags"; echo "$diff_out"; tail -5 "$work/run$k.err"; } >>"$work/failures.txt"
  fi
  printf "| %-44s | %5s | %-19s | %-18s | %-6s |\n" "$name" "$n" "$worst" "${params:-missing}" "$result" | tee -a "$table" >&2
done
echo
cat "$table"
echo
if [ "$failed" -ne 0 ]; then
  cat "$work/failures.txt"
  echo "some layouts differ from the single-process run"
  exit 1
fi
echo "all ${#layouts[@]} layouts reproduce the single-process losses (1e-5 relative) and parameters (1e-4 absolute)"
