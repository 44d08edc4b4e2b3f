#!/usr/bin/env python3
"""Time a Megatron-shaped GPT layer in PyTorch eager on one GPU, kernel by kernel.

    python3 scripts/measure_torch_layer.py --out layer.json [--dtype fp16] [--layers 4]
        [--cells 2048:1:4,2048:1:8,1024:1:4] [--tiny 256:1:1:128]

Each cell HIDDEN:TP:MICRO_BATCH (sequence 1024, 16 heads, as vTrain's rows) builds one
tensor-parallel rank's share of `--layers` layers, the way vTrain profiles a tp layer on one
GPU (no collectives): Megatron-LM's op sequence in eager PyTorch (layer norm; the QKV GEMM
and its bias; q·kᵀ by baddbmm; the causal mask and softmax; attention dropout; p·v by bmm;
the context's permute-copy; the projection GEMM; bias, dropout and residual; layer norm;
fc1 and its bias; GeLU; fc2; bias, dropout and residual), with full recomputation (each
layer's forward run twice: once without autograd, once inside backward's reach). Megatron's
CUDA extensions (fused softmax, fused bias-GeLU) are not used: their PyTorch equivalents
run, and the kernels are reported by name so a comparison can account for them.

Reported per cell: the GPU span of one step (CUDA events), the wall time, and every kernel's
GPU time from torch.profiler, grouped (gemm, softmax, dropout, layer_norm, elementwise,
copy, other). `--tiny` adds a host-bound cell (HIDDEN:TP:MICRO_BATCH:SEQUENCE) whose wall
time per kernel is the eager host's issue cost. Writes JSON to --out and prints a summary.

Needs PyTorch with a CUDA GPU (not a dependency of tandem: run it on a GPU machine). The
figures in topology/README.md come from three runs of the default cells on one H200.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F


class Layer(torch.nn.Module):
    def __init__(self, hidden, heads, tp, dtype, dropout):
        super().__init__()
        p = lambda *shape: torch.nn.Parameter(torch.randn(*shape, dtype=dtype) * 0.02)
        self.heads, self.hn, self.p = heads // tp, hidden // heads, dropout
        self.ln1 = torch.nn.LayerNorm(hidden, dtype=dtype)
        self.ln2 = torch.nn.LayerNorm(hidden, dtype=dtype)
        self.qkv_w, self.qkv_b = p(3 * hidden // tp, hidden), p(3 * hidden // tp)
        self.proj_w, self.proj_b = p(hidden, hidden // tp), p(hidden)
        self.fc1_w, self.fc1_b = p(4 * hidden // tp, hidden), p(4 * hidden // tp)
        self.fc2_w, self.fc2_b = p(hidden, 4 * hidden // tp), p(hidden)

    def forward(self, x, mask):
        s, b, _ = x.shape
        qkv = torch.matmul(self.ln1(x), self.qkv_w.t()) + self.qkv_b
        q, k, v = torch.split(qkv.view(s, b, self.heads, 3 * self.hn), self.hn, dim=-1)
        q, k, v = (t.reshape(s, b * self.heads, self.hn) for t in (q, k, v))
        scores = torch.baddbmm(torch.empty(b * self.heads, s, s, dtype=x.dtype, device=x.device),
                               q.transpose(0, 1), k.transpose(0, 1).transpose(1, 2), beta=0.0,
                               alpha=1.0 / math.sqrt(self.hn))
        probs = torch.softmax(scores.masked_fill_(mask, -10000.0), dim=-1)
        probs = F.dropout(probs, self.p, training=True)
        ctx = torch.bmm(probs, v.transpose(0, 1))
        ctx = ctx.view(b, self.heads, s, self.hn).permute(2, 0, 1, 3).contiguous()
        out = torch.matmul(ctx.view(s, b, -1), self.proj_w.t())
        x = x + F.dropout(out + self.proj_b, self.p, training=True)
        h = F.gelu(torch.matmul(self.ln2(x), self.fc1_w.t()) + self.fc1_b, approximate="tanh")
        out = torch.matmul(h, self.fc2_w.t())
        return x + F.dropout(out + self.fc2_b, self.p, training=True)


def step(layers, x, mask):
    """Full recomputation: keep each layer's input, run it again in the backward. Weight
    gradients start from None each step (no accumulation kernels: Megatron accumulates in
    the weight-gradient GEMM)."""
    for layer in layers:
        for p in layer.parameters():
            p.grad = None
    inputs, h = [], x
    with torch.no_grad():
        for layer in layers:
            inputs.append(h)
            h = layer(h, mask)
    grad = torch.ones_like(h)
    for layer, inp in zip(reversed(layers), reversed(inputs)):
        inp = inp.detach().requires_grad_(True)
        out = layer(inp, mask)
        out.backward(grad)
        grad = inp.grad


def group(name):
    n = name.lower()
    if any(t in n for t in ("gemm", "cutlass", "sm80_", "sm90_", "xmma", "ampere", "hopper", "nvjet")):
        return "gemm"
    if "softmax" in n:
        return "softmax"
    if "dropout" in n or "bernoulli" in n or "fused_dropout" in n:
        return "dropout"
    if "layer_norm" in n or "layernorm" in n:
        return "layer_norm"
    if "copy" in n or "cat" in n:
        return "copy"
    if "elementwise" in n or "reduce" in n or "vectorized" in n or "masked_fill" in n:
        return "elementwise"
    return "other"


def measure(hidden, tp, mb, seq, n_layers, dtype, reps):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    layers = [Layer(hidden, 16, tp, dtype, 0.1).to(dev) for _ in range(n_layers)]
    x = torch.randn(seq, mb, hidden, dtype=dtype, device=dev)
    mask = torch.ones(seq, seq, dtype=torch.bool, device=dev).triu_(1)
    for _ in range(5):
        step(layers, x, mask)
    torch.cuda.synchronize()
    spans, walls = [], []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        a.record()
        step(layers, x, mask)
        b.record()
        walls.append(time.perf_counter() - t0)
        b.synchronize()
        spans.append(a.elapsed_time(b) * 1e-3)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step(layers, x, mask)
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.count > 0:
            t = getattr(e, "device_time_total", None) or e.cuda_time_total
            kernels[e.key] = {"count": e.count / 3, "seconds": t * 1e-6 / 3, "group": group(e.key)}
    groups = {}
    for k in kernels.values():
        g = groups.setdefault(k["group"], {"count": 0, "seconds": 0.0})
        g["count"] += k["count"]
        g["seconds"] += k["seconds"]
    per = n_layers  # per layer, the microbatch being the step
    return {"hidden": hidden, "tp": tp, "micro_batch": mb, "seq": seq, "layers": n_layers,
            "dtype": str(dtype).replace("torch.", ""),
            "gpu_span_seconds_per_layer": statistics.median(spans) / per,
            "wall_seconds_per_layer": statistics.median(walls) / per,
            "kernels_per_layer": sum(k["count"] for k in kernels.values()) / per,
            "groups_per_layer": {g: {"count": v["count"] / per, "seconds": v["seconds"] / per}
                                 for g, v in groups.items()},
            "kernels": kernels}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--cells", default="2048:1:4,2048:1:8,1024:1:4,1024:1:8,2048:2:8,2048:4:2,1024:8:2,2048:8:4,1024:4:4")
    ap.add_argument("--tiny", default="256:1:1:128")
    a = ap.parse_args()
    dtype = torch.float16 if a.dtype == "fp16" else torch.bfloat16
    def spec(text, flag, parts):
        fields = text.split(":")
        if len(fields) != parts or not all(f.isdigit() and int(f) > 0 for f in fields):
            raise SystemExit(f"{flag} {text!r}: must be {parts} positive integers joined by ':'")
        hidden, tp = int(fields[0]), int(fields[1])
        if hidden % 16 or 16 % tp:
            raise SystemExit(f"{flag} {text!r}: hidden must be a multiple of the 16 heads, "
                             f"and tp must divide them")
        return tuple(map(int, fields))

    specs = [spec(c, "--cells", 3) + (1024,) for c in a.cells.split(",") if c]
    if a.tiny:
        specs.append(spec(a.tiny, "--tiny", 4))
    results = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "cuda": torch.version.cuda, "cells": []}
    for hidden, tp, mb, seq in specs:
        r = measure(hidden, tp, mb, seq, a.layers, dtype, a.reps)
        results["cells"].append(r)
        g = " ".join(f"{k} {1e3 * v['seconds']:.3f}" for k, v in sorted(r["groups_per_layer"].items()))
        print(f"h{hidden} tp{tp} mb{mb} s{seq}: GPU {1e3 * r['gpu_span_seconds_per_layer']:.3f} ms "
              f"wall {1e3 * r['wall_seconds_per_layer']:.3f} ms per layer, "
              f"{r['kernels_per_layer']:.0f} kernels; {g}", flush=True)
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
