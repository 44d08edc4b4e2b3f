#!/usr/bin/env bash
# The GPU checks of the cuda binding, for a machine with ≥ 1 NVIDIA GPU (and nvcc, cuBLAS,
# NCCL in /usr/local/cuda). Configures and builds its own tree (build-gpu), then runs:
#   1. every Device op on the GPU against the cpu binding (test_cuda_kernels: fp32 ≤ 1e-5,
#      bf16 ≤ 1e-2 relative error, outputs poisoned with NaN first), and the FP8 ops
#      (test_cuda_fp8: codes equal, cuBLASLt's FP8 GEMMs and the decoded ones);
#   2. a 3-iteration `tandem train --device cuda --mock-data` on a tiny GPT whose "lm loss"
#      fields match `tandem train --device cpu` within 1e-3 relative (fp32), and within 1e-2
#      with --fp16 and its loss scaler, and with --bf16 --fp8-format hybrid under the
#      delayed, tensorwise and blockwise recipes;
#   3. NCCL collectives over all local GPUs under mpirun, on seeded data (test_nccl), and the
#      nccl-tests-style table of bench_nccl (#wrong must be 0);
#   4. compute-sanitizer memcheck on a one-iteration GPU training run;
#   5. the GPU step benchmark: tokens/s, TFLOP/s and MFU at the GPT-2 124M and 1.3B shapes
#      (fp32; bf16 with the unfused and the fused attention op; 8 microbatches a step), and
#      beside it, on the same GPU, the PyTorch reference step (torch_reference_step.py, eager
#      and torch.compile; TORCH_REFERENCE=0 leaves it out), printed as ratios of tokens/s,
#      PyTorch's memory-bound kernels at a layer's shapes in GB/s
#      (scripts/measure_memory_bound.py, written to memory_bound.jsonl beside the results),
#      and fused attention by shape (scripts/measure_attention.py, attention.jsonl);
#   6. bf16 against FP8 GEMMs at 8192³ (bench_cuda_gemm, A B A B): the FP8 one with fast
#      accumulation (Transformer Engine's forward GEMM) must run on the tensor cores at ≥ 1.6×
#      the bf16 one's TFLOP/s (issue 32); the split-accumulation one is printed beside it;
#   7. the GEMM rate a GPU sustains at its power limit against a short burst's
#      (scripts/measure_sustained_clock.py, sustained_clock.jsonl).
# Without a GPU it says SKIPPED, with the reason, and exits 0.
#   tests/gpu/run.sh [--prebuilt] [BUILD_DIR | PACK.tar.xz]
# --prebuilt: BUILD_DIR already holds the eight programs (built elsewhere with
# -DTANDEM_CUDA=ON), for a GPU machine without the build dependencies; nothing is built.
# Or a pack of them with their libraries (scripts/pack_gpu_programs.sh), unpacked here; the
# CUDA libraries then come from the machine, or from its PyTorch's nvidia wheels.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
prebuilt=0
if [ "${1:-}" = "--prebuilt" ]; then prebuilt=1; shift; fi
build="${1:-$root/build-gpu}"
cd "$root"

gpus=0
reason="nvidia-smi not found"
if command -v nvidia-smi >/dev/null 2>&1; then
  if gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU '); then reason=""; else
    gpus=0
    reason="nvidia-smi lists no GPU ($(nvidia-smi -L 2>&1 | head -1))"
  fi
fi
if [ "$gpus" -eq 0 ]; then
  echo "tests/gpu/run.sh: SKIPPED: needs a CUDA GPU: $reason"
  exit 0
fi
echo "== $gpus GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs)"

if [ "$prebuilt" -eq 0 ]; then
  echo "== build ($build, sm_80 + sm_90 + this GPU's arch)"
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
  TANDEM_TARGETS="tandem test_cuda_kernels test_cuda_fp8 test_nccl bench_cuda_step bench_cuda_gemm bench_nccl layer_norm_lab" \
    bash scripts/build.sh "$build" -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON -DTANDEM_WERROR=ON \
    "-DCMAKE_CUDA_ARCHITECTURES=80;90;$arch"
else
  if [ -f "$build" ]; then
    unpacked=$(mktemp -d)
    tar -C "$unpacked" -xJf "$build"
    echo "== prebuilt programs from the pack $build"
    build="$unpacked"
  else
    echo "== prebuilt programs in $build"
  fi
  [ -d "$build/lib" ] && export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # cuBLAS and NCCL from PyTorch's nvidia wheels where the system has none.
  if ! ldconfig -p 2>/dev/null | grep -q 'libcublasLt\.so\.13'; then
    wheels=$(python3 - <<'PY' 2>/dev/null || true
import glob, os, site
found = []
for root in site.getsitepackages():
    for name in ("libcublasLt.so.13", "libcudart.so.13", "libnccl.so.2"):
        for hit in glob.glob(f"{root}/nvidia/**/{name}", recursive=True)[:1]:
            if os.path.dirname(hit) not in found:
                found.append(os.path.dirname(hit))
print(":".join(found))
PY
)
    [ -n "$wheels" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$wheels"
  fi
fi
tandem="$build/tools/tandem"
"$tandem" info
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none)

echo "== 1. kernels against the cpu binding"
out=$("$build/tests/gpu/test_cuda_kernels" 2>&1) || { echo "$out"; exit 1; }
echo "$out" | tail -3
if echo "$out" | grep -q '^\[  SKIPPED \]'; then echo "kernel tests skipped on a GPU machine"; exit 1; fi
out=$("$build/tests/gpu/test_cuda_fp8" 2>&1) || { echo "$out"; exit 1; }
echo "$out" | tail -3
if echo "$out" | grep -q '^\[  SKIPPED \]'; then echo "FP8 tests skipped on a GPU machine"; exit 1; fi
"$build/kernels/dev/layer_norm_lab" --rows 4096 --channels 768

echo "== 2. 3 training iterations, cuda against cpu"
tiny=(--mock-data --num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 64
  --vocab-size 1024 --lr-warmup-iters 1 --log-interval 1 --eval-interval 100
  --global-batch-size 4 --micro-batch-size 2 --world-size 1)
common=("${tiny[@]}" --train-iters 3)
losses() { grep -o "lm loss: [0-9.E+-]*" | awk '{print $3}'; }
cpu=$("$tandem" train scenarios/brown-small.json "${common[@]}" --device cpu | losses)
gpu=$("$tandem" train scenarios/brown-small.json "${common[@]}" --device cuda | losses)
compare() {  # cpu losses, cuda losses, tolerance
  paste <(echo "$1") <(echo "$2") | awk -v tol="$3" '
    NF != 2 { print "missing loss"; exit 1 }
    { d = ($1 - $2) / $1; if (d < 0) d = -d; printf "  iteration %d: cpu %s cuda %s (relative %.1e)\n", NR, $1, $2, d
      if (d > tol) bad = 1 }
    END { if (NR != 3) { print "expected 3 losses"; exit 1 } if (bad) { print "losses differ"; exit 1 } }'
}
compare "$cpu" "$gpu" 1e-3
# fp16 with Megatron's loss scaler (a start of 2^12 that the tiny model's gradients do not
# overflow: a skipped step would leave the cuda run behind the cpu one), against fp32.
echo "  fp16 (--initial-loss-scale 4096):"
gpu16=$("$tandem" train scenarios/brown-small.json "${common[@]}" --device cuda --fp16 \
  --initial-loss-scale 4096 | tee /dev/stderr | losses)
compare "$cpu" "$gpu16" 1e-2
# FP8 (bf16 activations on the GPU, fp32 on the cpu binding): per-tensor recipes on the
# FP8 tensor cores where the GPU has them, blockwise decoded on both.
for recipe in delayed tensorwise blockwise; do
  echo "  --bf16 --fp8-format hybrid --fp8-recipe $recipe:"
  fp8=(--bf16 --fp8-format hybrid --fp8-recipe "$recipe")
  cpu8=$("$tandem" train scenarios/brown-small.json "${common[@]}" --device cpu "${fp8[@]}" | losses)
  gpu8=$("$tandem" train scenarios/brown-small.json "${common[@]}" --device cuda "${fp8[@]}" | losses)
  compare "$cpu8" "$gpu8" 1e-2
done

echo "== 3. NCCL over $gpus GPU(s)"
if command -v mpirun >/dev/null 2>&1; then
  "${mpi[@]}" -np "$gpus" "$build/tests/gpu/test_nccl"
  table=$("${mpi[@]}" -np "$gpus" "$build/tests/bench/bench_nccl" --max-bytes 16777216)
  echo "$table"
  echo "$table" | awk '!/^#/ && NF == 9 && $9 != 0 { print "wrong results: " $0; bad = 1 } END { exit bad }'
else
  echo "SKIPPED: needs mpirun (OpenMPI), which this machine lacks"
fi

echo "== 4. compute-sanitizer memcheck (one GPU training iteration)"
sanitizer=compute-sanitizer
command -v "$sanitizer" >/dev/null || sanitizer=/usr/local/cuda/bin/compute-sanitizer
# API errors are left out: NCCL's initialisation probes its kernels and reads back
# cudaErrorNoKernelImageForDevice for the ones it was not built for (120 such reports on an
# H100 with the NCCL of PyTorch 2.11's wheel, 2026-11-26); tandem checks every CUDA call's status itself.
"$sanitizer" --tool memcheck --report-api-errors no --error-exitcode 1 "$tandem" train scenarios/brown-small.json \
  "${tiny[@]}" --train-iters 1 --device cuda

echo "== 5. GPU training-step benchmark (GPT-2 124M, 1.3B), and the PyTorch reference"
results="${TANDEM_GPU_RESULTS:-$(mktemp -d)}"
mkdir -p "$results"
"$build/tests/bench/bench_cuda_step" --benchmark_counters_tabular=true \
  --benchmark_out="$results/bench_cuda_step.json" --benchmark_out_format=json
if [ "${TORCH_REFERENCE:-1}" != 0 ] && python3 -c "import torch" 2>/dev/null; then
  : >"$results/torch_reference.jsonl"
  for run in "--model 124m --micro-batch 4" "--model 1.3b --micro-batch 1"; do
    for mode in "" --compile; do
      # shellcheck disable=SC2086
      python3 tests/gpu/torch_reference_step.py $run $mode | tee -a "$results/torch_reference.jsonl"
    done
  done
  python3 tests/gpu/step_ratios.py "$results/bench_cuda_step.json" "$results/torch_reference.jsonl"
  # The step's memory-bound kernels as bytes per second (layer norm, GeLU, dropout, adds,
  # softmax at a layer's shapes), for pricing them by a measurement of those kernels
  # rather than by GB-scale copies (memory_peak_fraction).
  python3 scripts/measure_memory_bound.py --out "$results/memory_bound.jsonl"
  # Fused attention by shape (cuDNN's, FlashAttention-2's), against which the cost model's
  # attention pricing is fitted (topology/attention_reference.csv).
  python3 scripts/measure_attention.py --out "$results/attention.jsonl"
else
  echo "PyTorch reference and memory-bound kernels left out (TORCH_REFERENCE=0, or no torch in python3)"
fi
echo "== 6. bf16 against FP8 GEMMs at 8192^3"
"$build/tests/bench/bench_cuda_gemm" --benchmark_counters_tabular=true \
  --benchmark_out="$results/bench_cuda_gemm.json" --benchmark_out_format=json
python3 - "$results/bench_cuda_gemm.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
bf16 = [r["TFLOP/s"] for r in runs if r["name"].startswith("BM_GemmBf16")]
fp8 = [r for r in runs if r["name"].startswith("BM_GemmFp8")]
# BM_GemmFp8/8192/0: fast accumulation (TE's forward GEMM); /1: split (its dgrad and wgrad).
fast = [r for r in fp8 if r["name"].split("/")[2].startswith("0")]
split = [r for r in fp8 if r["name"].split("/")[2].startswith("1")]
for label, runs_ in (("fast accumulation (forward)", fast), ("split accumulation (dgrad, wgrad)", split)):
    ratios = [f["TFLOP/s"] / b for f, b in zip(runs_, bf16)]
    print(f"  FP8 {label} / bf16 TFLOP/s, pass by pass: " + ", ".join(f"{r:.2f}" for r in ratios))
if not all(f["on_tensor_cores"] == 1 for f in fp8): sys.exit("  FP8 GEMMs did not run on the tensor cores")
if min(f["TFLOP/s"] / b for f, b in zip(fast, bf16)) < 1.6: sys.exit("  FP8 (forward) under 1.6x the bf16 GEMM")
PY
echo "== 7. the GEMM rate sustained at the power limit, against a short burst's"
# What the presets' sustained_clock_fraction stands for (dgx-h100: 0.76, fitted on one
# training row), measured: bf16 and FP8 at 8192^3, back to back, at duty cycles and mixed
# with a memory-bound kernel, beside nvidia-smi's SM clock, power and clock event reasons.
if python3 -c "import torch" 2>/dev/null; then
  python3 scripts/measure_sustained_clock.py --out "$results/sustained_clock.jsonl"
else
  echo "left out: no torch in python3"
fi
echo "== tests/gpu/run.sh: all GPU checks passed"
