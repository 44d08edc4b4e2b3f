#!/usr/bin/env python3
"""Time fused attention (cuDNN's and FlashAttention-2's) by shape on one GPU, as TFLOP/s.

    python3 scripts/measure_attention.py [--out attention.jsonl] [--reps 20]
        [--backends cudnn,flash] [--cases published|sweep|all]

The cost model prices fused attention at one share of the tensor peak per kernel library
and direction (the presets' fused_attention_* and flash_attn_* fractions, from the
FlashAttention-3 paper's 16k-token, head-dim-128 benchmark). Training runs meet other
shapes: a tensor-parallel rank holds 7 to 48 query heads, the micro batch is 1 to 4, the
sequence 2048 to 8192, the head dim 128 or 192, and grouped-query attention shares key and
value heads. This script times PyTorch's scaled_dot_product_attention, causal, bf16, with
one backend at a time (SDPBackend.CUDNN_ATTENTION, the cuDNN fused kernel Transformer
Engine runs on Hopper; SDPBackend.FLASH_ATTENTION, FlashAttention-2, as the flash-attn
package and Megatron's --use-flash-attn), forward alone and forward + backward, with CUDA
events after warm-up, and counts the FLOPs the cost model counts (sim/op_cost_llama.hpp):
forward 4 · pairs · head_dim per query head, backward 10 · pairs · head_dim, pairs the
(query, key) pairs the causal mask lets through, T(T + 1) / 2.

`--cases published` gives the shapes of the repository's H100/B200/GB200 published rows
(micro batch, query heads and key/value heads per tensor-parallel rank, sequence per
context-parallel rank, head dim); `sweep` a grid over sequence, batch × heads and head dim
at one micro batch; `cp` the kernels a context-parallel rank runs for the published rows
with context parallelism 2 (below); `all` all three. One JSON line per case and backend:
the shape, seconds forward and backward, TFLOP/s each way, or the backend's refusal. Needs
PyTorch with a CUDA GPU (not a dependency of tandem).

Context parallelism splits the sequence into 2·cp chunks of c tokens, a rank holding two.
Its attention is not the square causal kernel the other cases time: Transformer Engine's
ring (AttnFuncWithCPAndKVP2P) runs one kernel a step, the "diagonal" (the rank's 2c
queries against its own 2c keys, causal), then "lower" (2c queries against the first c
keys of an earlier rank's block, no mask) or "upper" (the last c queries against a later
rank's 2c keys, no mask), and merges each step's output into an fp32 sum ("correction",
timed here as eager PyTorch ops, an upper bound of TE's fused ones); tandem's step
(model/context_parallel_attention.cpp) runs a kernel per pair of chunks instead ("pair
causal", "pair full": c against c). `cp` times those, and the whole sequence causal ("no
cp"), so the cost model's CP pricing, fitted on square causal kernels, can be checked on
the shapes CP runs.
"""
import argparse
import sys

import torch

from gpu_measure import timed, write_lines, refused
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}

# (micro batch, query heads, key/value heads, sequence, head dim) of the published rows
# (scenarios/published: heads and groups over tp, sequence over cp).
PUBLISHED = [
    (1, 7, 7, 4096, 128), (1, 8, 8, 4096, 128), (1, 10, 10, 4096, 128),
    (1, 12, 12, 4096, 128), (1, 16, 16, 4096, 128), (1, 18, 18, 4096, 128),
    (1, 16, 2, 4096, 128), (1, 32, 2, 4096, 128), (1, 32, 4, 4096, 128),
    (1, 32, 8, 4096, 128), (1, 32, 32, 4096, 128), (1, 40, 40, 4096, 128),
    (1, 24, 24, 2048, 128), (2, 24, 24, 2048, 128), (4, 32, 32, 2048, 128),
    (2, 24, 24, 4096, 128), (4, 16, 16, 4096, 128), (2, 48, 8, 4096, 128),
    (2, 32, 8, 8192, 128), (1, 12, 1, 4096, 192), (1, 12, 12, 4096, 192),
]


def sweep():
    out = []
    for head_dim in (64, 128):
        for seq in (1024, 2048, 4096, 8192):
            for heads in (8, 16, 32, 64):
                out.append((1, heads * 128 // head_dim, heads * 128 // head_dim, seq, head_dim))
    # Batch against heads at a fixed total: does only batch × heads count?
    for batch, heads in ((4, 8), (2, 16), (1, 32)):
        out.append((batch, heads, heads, 4096, 128))
    # The FlashAttention-3 paper's benchmark: 16k tokens, head dim 128, 16 heads.
    for seq in (2048, 4096, 8192):
        out.append((16384 // seq, 16, 16, seq, 128))
    return out


# (micro batch, query heads, key/value heads, sequence, head dim) per tensor-parallel rank
# of the published rows with context parallelism 2 (scenarios/published: NeMo 24.07's
# Llama 3 70B and 8B, 25.02's B200 Llama 3 70B, the 405B rows on 128 GPUs, 25.11's GB300
# and H100 405B).
CP2_ROWS = [(1, 16, 2, 8192, 128), (1, 32, 8, 8192, 128), (1, 32, 4, 8192, 128),
            (1, 32, 2, 8192, 128), (1, 64, 4, 8192, 128), (1, 16, 1, 8192, 128)]
CP = 2


def cp_cases():
    """(section, shape, query tokens, key tokens, causal) of each kernel a CP-2 rank runs."""
    out = []
    for shape in CP2_ROWS:
        c = shape[3] // (2 * CP)
        out += [("no cp", shape, shape[3], shape[3], True),
                ("diagonal", shape, 2 * c, 2 * c, True),
                ("lower", shape, 2 * c, c, False),
                ("upper", shape, c, 2 * c, False),
                ("pair causal", shape, c, c, True),
                ("pair full", shape, c, c, False)]
    return out


def measure(backend, shape, reps, tq=None, tk=None, causal=True):
    batch, heads, groups, seq, head_dim = shape
    tq, tk = tq or seq, tk or seq
    q = torch.randn(batch, heads, tq, head_dim, device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    k = torch.randn(batch, groups, tk, head_dim, device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)
    gqa = groups != heads
    with sdpa_kernel([BACKENDS[backend]]):
        def forward():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        out = forward()
        grad = torch.randn_like(out)

        def both():
            q.grad = k.grad = v.grad = None
            forward().backward(grad)

        with torch.no_grad():
            forward_s, forward_host = timed(forward, reps)
        both_s, both_host = timed(both, reps)
    # Causal cases are square (tq = tk), where top-left and bottom-right masks agree.
    pairs = tq * (tq + 1) / 2 if causal else tq * tk
    flops_fwd = 4 * pairs * head_dim * batch * heads
    backward_s = both_s - forward_s
    return {"host_bound": forward_host or both_host,
            "forward_s": forward_s, "backward_s": backward_s,
            "forward_tflops": flops_fwd / forward_s / 1e12,
            "backward_tflops": 2.5 * flops_fwd / backward_s / 1e12}


def correction_seconds(shape, reps):
    """One ring step's merge into the running output (TE's flash_attn_fwd_out_correction and
    softmax_lse_correction) for a rank's 2c queries, as eager PyTorch ops."""
    batch, heads, _, seq, head_dim = shape
    rows = seq // CP
    out = torch.zeros(batch, rows, heads, head_dim, device="cuda")
    step = torch.randn(batch, rows, heads, head_dim, device="cuda", dtype=torch.bfloat16)
    lse = torch.randn(batch, heads, rows, device="cuda")
    lse_step = torch.randn_like(lse)

    def merge():
        high, low = torch.max(lse, lse_step), torch.min(lse, lse_step)
        merged = high + torch.log1p(torch.exp(low - high))
        out.add_(step * torch.exp(lse_step - merged).movedim(2, 1).unsqueeze(-1))
        lse.copy_(merged)

    return timed(merge, reps)


def measure_cp(gpu, backends, reps):
    """The cp cases' JSON lines (see the module's description), printed as they run."""
    lines = []
    for section, shape, tq, tk, causal in cp_cases():
        for backend in backends:
            line = {"backend": backend, "gpu": gpu, "case": "cp", "cp": CP, "section": section,
                    "micro_batch": shape[0], "heads": shape[1], "groups": shape[2],
                    "seq": shape[3], "tq": tq, "tk": tk, "head_dim": shape[4],
                    "dtype": "bf16", "causal": causal}
            try:
                line.update(measure(backend, shape, reps, tq, tk, causal))
                print(f"  {backend:5s} cp {section:11s} {str(shape):26s} {tq}x{tk} "
                      f"fwd {line['forward_s'] * 1e3:7.3f} ms  bwd {line['backward_s'] * 1e3:7.3f}"
                      " ms" + ("  (host-bound)" if line["host_bound"] else ""), flush=True)
            except RuntimeError as e:
                print(f"  {backend:5s} cp {section:11s} {str(shape):26s} refused: "
                      f"{refused(line, e)}", flush=True)
            lines.append(line)
            torch.cuda.empty_cache()
        if section == "no cp":
            seconds, host_bound = correction_seconds(shape, reps)
            lines.append({"gpu": gpu, "case": "cp", "cp": CP, "section": "correction",
                          "micro_batch": shape[0], "heads": shape[1], "seq": shape[3],
                          "head_dim": shape[4], "seconds": seconds, "host_bound": host_bound})
            print(f"        cp correction {str(shape):26s} {seconds * 1e3:7.3f} ms", flush=True)
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the JSON lines here too")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--backends", default="cudnn,flash")
    parser.add_argument("--cases", choices=("published", "sweep", "cp", "all"), default="all")
    args = parser.parse_args()
    if args.reps < 1:
        sys.exit(f"measure_attention.py: --reps = {args.reps}: must be at least 1")
    backends = args.backends.split(",")
    for b in backends:
        if b not in BACKENDS:
            sys.exit(f"measure_attention.py: --backends: '{b}' is not one of {sorted(BACKENDS)}")
    if not torch.cuda.is_available():
        sys.exit("measure_attention.py: needs a CUDA GPU")
    shapes = {"published": PUBLISHED, "sweep": sweep(), "cp": [],
              "all": PUBLISHED + sweep()}[args.cases]
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    lines = []
    if args.cases in ("cp", "all"):
        lines += measure_cp(gpu, backends, args.reps)
    for shape in shapes:
        for backend in backends:
            line = {"backend": backend, "gpu": gpu, "micro_batch": shape[0],
                    "heads": shape[1], "groups": shape[2], "seq": shape[3],
                    "head_dim": shape[4], "dtype": "bf16", "causal": True}
            try:
                line.update(measure(backend, shape, args.reps))
                print(f"  {backend:5s} {str(shape):26s} fwd {line['forward_s'] * 1e3:7.3f} ms "
                      f"{line['forward_tflops']:5.0f} TFLOP/s  bwd {line['backward_s'] * 1e3:7.3f}"
                      f" ms {line['backward_tflops']:5.0f} TFLOP/s"
                      + ("  (host-bound)" if line["host_bound"] else ""), flush=True)
            except RuntimeError as e:
                print(f"  {backend:5s} {str(shape):26s} refused: {refused(line, e)}", flush=True)
            lines.append(line)
            torch.cuda.empty_cache()
    write_lines(args.out, lines)


if __name__ == "__main__":
    main()
