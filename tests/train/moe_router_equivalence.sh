#!/usr/bin/env bash
# DeepSeek-V3's router and Megatron's token dropping under mpirun: a mixture of experts (8
# experts, top-2, aux loss) trained 5 iterations from one seed on mock data gives the
# single-process run's losses (Megatron's 7 digits, within 1e-5 relative) and final
# parameters (`tandem checkpoint diff`, within 1e-4 absolute) under expert parallelism,
# alone and with tp 2 and sequence parallelism, under both dispatchers:
# - sigmoid scores, group-limited routing (4 groups of 2, the experts inside the best 2)
#   and the aux-loss-free expert bias, whose update sums the counts over tp × dp;
# - a capacity factor of 1.0 (tokens over an expert's capacity dropped by gate), also
#   padded to the capacity, and dropped by position.
# - Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm): each forward taking
#   turns on the host with the previous microbatch's backward at the expert all-to-alls,
#   without pipelining and interleaved (pp 2 × 2 virtual stages);
#   a trace shows the two interleaved (the forward's slice spans the backward's start, on a
#   thread of its own: the trace stays well formed).
# The capacity counts a rank's own tokens (Megatron's router drops on its sequence shard),
# so with tp 2 the reference is the tp 2 run, not the single process: there ep 2 must give
# the tp 2 losses. A test of its own checks that dropping changes the losses at all.
#   tests/train/moe_router_equivalence.sh TANDEM_BINARY
set -euo pipefail
tandem="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--mock-data --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
  --vocab-size 512 --train-iters 5 --lr-warmup-iters 1 --log-interval 1 --eval-interval 100
  --global-batch-size 8 --micro-batch-size 2 --threads 1 --swiglu --normalization RMSNorm
  --disable-bias-linear --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 32
  --moe-aux-loss-coeff 0.01)
mpi=(mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
losses() { grep -o "lm loss: [0-9.E+-]*" | awk '{print $3}'; }
failed=0

# run NAME RANKS FLAGS…: losses of one job (checkpoint in $work/NAME).
run() {
  local name="$1" n="$2"
  shift 2
  if [ "$n" -eq 1 ]; then
    "$tandem" train "${common[@]}" --world-size 1 "$@" --save "$work/$name" | losses
  else
    "${mpi[@]}" -np "$n" "$tandem" train "${common[@]}" --world-size "$n" "$@" --save "$work/$name" |
      losses
  fi
}
# check NAME REFERENCE RANKS FLAGS…: one job against a reference run's losses and checkpoint.
check() {
  local name="$1" ref="$2" n="$3"
  shift 3
  local got worst params params_ok diff_out
  got=$(run "$name" "$n" "$@")
  worst=$(paste <(cat "$work/$ref.losses") <(echo "$got") | awk '
    NF != 2 { print "missing"; exit }
    { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m) m = d }
    END { if (NR != 5) print "missing"; else printf "%.2e\n", m }')
  params_ok=1
  diff_out=$("$tandem" checkpoint diff "$work/$ref" "$work/$name" --tolerance 1e-4 2>&1) || params_ok=0
  params=$(echo "$diff_out" | sed -n 's/^max abs difference: \([^ ]*\).*/\1/p')
  printf "%-130s %-10s %s\n" "world $n $*" "$worst" "${params:-missing}"
  if [ "$params_ok" -eq 0 ]; then echo "$diff_out"; failed=1; fi
  if [ "$worst" = missing ] || awk -v w="$worst" 'BEGIN { exit !(w > 1e-5) }'; then failed=1; fi
}
# reference NAME RANKS FLAGS…: a run whose losses the checks compare against.
reference() {
  local name="$1" n="$2"
  shift 2
  run "$name" "$n" "$@" >"$work/$name.losses"
  [ "$(wc -l <"$work/$name.losses")" -eq 5 ] || { echo "$name printed no 5 losses"; exit 1; }
}

printf "%-130s %-10s %s\n" "layout" "max rel loss diff" "max abs param diff"
a2a=(--moe-token-dispatcher-type alltoall)
ag=(--moe-token-dispatcher-type allgather)
tp2=(--tensor-model-parallel-size 2 --sequence-parallel)

sigmoid_groups=(--moe-router-score-function sigmoid --moe-router-num-groups 4
  --moe-router-group-topk 2 --moe-router-topk-scaling-factor 2.5)
deepseek=("${sigmoid_groups[@]}" --moe-router-enable-expert-bias --moe-router-bias-update-rate 0.01)
reference deepseek 1 "${deepseek[@]}"
check deepseek_ep2 deepseek 2 "${deepseek[@]}" "${a2a[@]}" --expert-model-parallel-size 2
check deepseek_ep2_tp2 deepseek 4 "${deepseek[@]}" "${a2a[@]}" --expert-model-parallel-size 2 "${tp2[@]}"
check deepseek_ag_ep2_tp2 deepseek 4 "${deepseek[@]}" "${ag[@]}" --expert-model-parallel-size 2 "${tp2[@]}"

combined=(--overlap-moe-expert-parallel-comm)
check deepseek_ep2_combined deepseek 2 "${deepseek[@]}" "${a2a[@]}" --expert-model-parallel-size 2 \
  "${combined[@]}"
check deepseek_ep2_tp2_combined deepseek 4 "${deepseek[@]}" "${a2a[@]}" \
  --expert-model-parallel-size 2 "${tp2[@]}" "${combined[@]}"
# Interleaved (pp 2 × 2 virtual stages × ep 2): four layers, the last flag wins.
four=(--num-layers 4 --global-batch-size 16)
reference four_layers 1 "${deepseek[@]}" "${four[@]}"
check deepseek_pp2_vp2_ep2_combined four_layers 4 "${deepseek[@]}" "${four[@]}" "${a2a[@]}" \
  --expert-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --num-layers-per-virtual-pipeline-stage 1 "${combined[@]}"
"${mpi[@]}" -np 2 "$tandem" train "${common[@]}" --world-size 2 "${a2a[@]}" \
  --expert-model-parallel-size 2 "${combined[@]}" --trace "$work/combined.trace.json" >/dev/null
python3 - "$work/combined.trace.json" <<'PY' || failed=1
import json, sys
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
slices = {}
for e in events:
    if e.get("ph") == "X" and e.get("pid") == 0 and e.get("cat") in ("forward", "backward"):
        slices.setdefault(e["name"], []).append((e["ts"], e["ts"] + e["dur"]))
f1, b0 = slices["F1"][0], slices["B0"][0]
assert f1[0] < b0[0] < f1[1], f"F1 {f1} and B0 {b0} did not take turns"
print(f"combined 1F1B: B0 starts {b0[0] - f1[0]:.0f} us into F1, which ends {f1[1] - b0[0]:.0f} us later")
PY
# The two tasks' passes sit on threads of their own, so the trace stays well formed.
"$tandem" trace check "$work/combined.trace.json" || failed=1

capacity=(--moe-expert-capacity-factor 1.0)
reference capacity 1 "${capacity[@]}"
check capacity_ep2 capacity 2 "${capacity[@]}" "${a2a[@]}" --expert-model-parallel-size 2
check capacity_ag_ep2 capacity 2 "${capacity[@]}" "${ag[@]}" --expert-model-parallel-size 2
check capacity_pad_ep2 capacity 2 "${capacity[@]}" --moe-pad-expert-input-to-capacity "${a2a[@]}" \
  --expert-model-parallel-size 2
reference capacity_tp2 2 "${capacity[@]}" "${tp2[@]}"
check capacity_ep2_tp2 capacity_tp2 4 "${capacity[@]}" "${a2a[@]}" --expert-model-parallel-size 2 "${tp2[@]}"
check capacity_ag_ep2_tp2 capacity_tp2 4 "${capacity[@]}" "${ag[@]}" --expert-model-parallel-size 2 "${tp2[@]}"
position=(--moe-expert-capacity-factor 1.0 --moe-token-drop-policy position)
reference position 1 "${position[@]}"
check position_ep2 position 2 "${position[@]}" "${a2a[@]}" --expert-model-parallel-size 2

# Dropping, the DeepSeek router and its bias must change the run (else the rows above prove
# nothing).
dropless=$(run dropless 1)
for name in capacity position deepseek; do
  [ "$dropless" != "$(cat "$work/$name.losses")" ] || { echo "$name gave the dropless losses"; failed=1; }
done
nobias=$(run nobias 1 "${sigmoid_groups[@]}")
[ "$nobias" != "$(cat "$work/deepseek.losses")" ] || { echo "the expert bias changed nothing"; failed=1; }
[ "$failed" -eq 0 ] && echo "every layout reproduces its reference's losses and parameters"
exit "$failed"
