#!/usr/bin/env python3
"""Time cuBLAS GEMMs at the linear layers' shapes of published training rows, as TFLOP/s.

    python3 scripts/measure_gemms.py [--out gemms.jsonl] [--reps 20] [--fp8]

topology/gemm_reference.csv holds the GEMMs dgx-h100's GEMM model was fitted on (GPT-3
175B at tp 8, vTrain's layers). This script measures others, to judge that model on shapes
it did not see: each linear layer of a row's tensor-parallel rank (QKV, projection, fc1,
fc2, output layer) in the three GEMMs training runs (forward X·Wᵀ: m tokens, n outputs,
k inputs; data gradient dY·W: m tokens, n inputs, k outputs; weight gradient dYᵀ·X: m
outputs, n inputs, k tokens), in bf16 through torch.matmul, and with --fp8 in E4M3 through
torch._scaled_mm with per-tensor scales (the TN form the FP8 tensor cores take; fast
accumulation for the forward GEMM as Transformer Engine runs it). Times `--reps` calls with
CUDA events after warm-up. One JSON line per GEMM: the row, layer, pass, m, n, k, dtype,
seconds and TFLOP/s. Needs PyTorch with a CUDA GPU (not a dependency of tandem).
"""
import argparse
import sys

import torch

from gpu_measure import gemm, timed, write_lines, refused

# row: (tokens a micro batch, [(layer, outputs, inputs)] of one tp rank)
ROWS = {
    # Megatron-Core r0.8 table, 1.7B: hidden 2048, ffn 8192, vocabulary 131072, tp 1.
    "mc-1.7b-mbs1": (4096, [("qkv", 6144, 2048), ("proj", 2048, 2048), ("fc1", 8192, 2048),
                            ("fc2", 2048, 8192), ("output", 131072, 2048)]),
    "mc-1.7b-mbs4": (16384, [("qkv", 6144, 2048), ("proj", 2048, 2048), ("fc1", 8192, 2048),
                             ("fc2", 2048, 8192)]),
    # 7.1B: hidden 4096, ffn 16384, tp 2.
    "mc-7.1b-tp2": (4096, [("qkv", 6144, 4096), ("proj", 4096, 2048), ("fc1", 8192, 4096),
                           ("fc2", 4096, 8192), ("output", 65536, 4096)]),
    # 32B: hidden 7168, ffn 28672, tp 8.
    "mc-32b-tp8": (4096, [("qkv", 2688, 7168), ("proj", 7168, 896), ("fc1", 3584, 7168),
                          ("fc2", 7168, 3584)]),
    # NeMo 24.07 Llama 2 7B, tp 1: hidden 4096, SwiGLU ffn 11008, vocabulary 32000.
    "nemo-llama2-7b": (4096, [("qkv", 12288, 4096), ("proj", 4096, 4096), ("fc1", 22016, 4096),
                              ("fc2", 4096, 11008), ("output", 32000, 4096)]),
    # NeMo 24.07 GPT-3 175B, tp 4, sequence 2048.
    "nemo-gpt3-175b-tp4": (2048, [("qkv", 9216, 12288), ("proj", 12288, 3072),
                                  ("fc1", 12288, 12288), ("fc2", 12288, 12288)]),
    "square-8192": (8192, [("square", 8192, 8192)]),
}


def gemms(tokens, outputs, inputs):
    """(pass, m, n, k) of the three GEMMs of one linear layer."""
    return [("fprop", tokens, outputs, inputs), ("dgrad", tokens, inputs, outputs),
            ("wgrad", outputs, inputs, tokens)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the JSON lines here too")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--fp8", action="store_true", help="E4M3 GEMMs beside the bf16 ones")
    args = parser.parse_args()
    if args.reps < 1:
        sys.exit(f"measure_gemms.py: --reps = {args.reps}: must be at least 1")
    if not torch.cuda.is_available():
        sys.exit("measure_gemms.py: needs a CUDA GPU")
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}, torch {torch.__version__}")
    lines = []
    for row, (tokens, layers) in ROWS.items():
        for layer, outputs, inputs in layers:
            for pass_, m, n, k in gemms(tokens, outputs, inputs):
                runs = [("bf16", lambda: timed(gemm("bf16", m, n, k), args.reps))]
                if args.fp8:
                    fast = pass_ == "fprop"
                    runs.append(("fp8", lambda: timed(gemm("fp8", m, n, k, fast), args.reps)))
                for dtype, run in runs:
                    line = {"row": row, "layer": layer, "pass": pass_, "m": m, "n": n, "k": k,
                            "dtype": dtype, "gpu": gpu}
                    try:
                        s, host_bound = run()
                        line.update({"seconds": s, "tflops": 2 * m * n * k / s / 1e12,
                                     "host_bound": host_bound})
                        print(f"  {row:20s} {layer:6s} {pass_:5s} {dtype:4s} {m:6d} x {n:6d} x "
                              f"{k:6d} {s * 1e6:9.1f} us {line['tflops']:6.0f} TFLOP/s",
                              flush=True)
                    except RuntimeError as e:
                        print(f"  {row} {layer} {pass_} {dtype}: {refused(line, e)}", flush=True)
                    lines.append(line)
                    torch.cuda.empty_cache()
    write_lines(args.out, lines)


if __name__ == "__main__":
    main()
