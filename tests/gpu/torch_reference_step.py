#!/usr/bin/env python3
"""The PyTorch reference step bench_cuda_step is held against, on the same GPU.

The same GPT as the benchmark (learned positions, LayerNorm, tanh GeLU, biases, the word
embedding tied to the output layer, vocabulary 50304), written the way a compact PyTorch
trainer writes it: fused scaled_dot_product_attention (causal), bf16 autocast over fp32
weights, fused AdamW, `--microbatches` forwards and backwards per optimizer step; eager or,
with --compile, under torch.compile. Prints one JSON line: tokens/s, model TFLOP/s (the
benchmark's count: 6 · parameters · tokens + 12 · layers · tokens · sequence · hidden), MFU
against the same dense bf16 peak, and the forward + backward and optimizer milliseconds apart.

    python3 tests/gpu/torch_reference_step.py --model 124m --micro-batch 4 [--compile]
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

SHAPES = {  # layers, hidden, heads, sequence (bench_cuda_step's two models)
    "124m": (12, 768, 12, 1024),
    "1.3b": (24, 2048, 16, 2048),
}
VOCAB = 50304


def causal_attention(q, k, v):
    """(B, heads, T, head_dim) each; fused where this PyTorch has it."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # PyTorch < 2.0 (a CPU check of this script only): the same math unfused.
    t = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(mask, float("-inf")).softmax(-1) @ v


class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = causal_attention(q, k, v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, hidden, heads, seq):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, hidden)
        self.wpe = nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens, labels):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t, device=tokens.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied output layer
        return F.cross_entropy(logits.float().view(-1, VOCAB), labels.view(-1))


def peak_tflops(device):
    if "TANDEM_PEAK_TFLOPS" in os.environ:
        return float(os.environ["TANDEM_PEAK_TFLOPS"])
    if device.type != "cuda":
        return 0.0
    name = torch.cuda.get_device_name(device)
    if "H100" in name or "H200" in name:
        return 756.0 if "PCIe" in name else 989.0
    return 312.0 if "A100" in name else 0.0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(SHAPES), default="124m")
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation)")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--scale", type=int, default=1,
                    help="divide hidden, sequence and vocabulary-free sizes by this (CPU checks)")
    a = ap.parse_args(argv)
    if a.micro_batch < 1 or a.microbatches < 1 or a.steps < 1 or a.warmup < 0 or a.scale < 1:
        ap.error("--micro-batch, --microbatches, --steps and --scale are ≥ 1, --warmup ≥ 0")
    layers, hidden, heads, seq = SHAPES[a.model]
    hidden, seq = hidden // a.scale, seq // a.scale
    device = torch.device(a.device)
    torch.manual_seed(1234)
    model = Gpt(layers, hidden, heads, seq).to(device)
    fused = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, **fused)
    step_model = torch.compile(model) if a.compile else model
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 50257, (a.micro_batch, seq), generator=g).to(device)
    labels = torch.randint(0, 50257, (a.micro_batch, seq), generator=g).to(device)
    autocast_device = "cuda" if device.type == "cuda" else "cpu"

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    fwd_bwd = optimizer = 0.0
    for step in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        for _ in range(a.microbatches):
            with torch.autocast(autocast_device, dtype=torch.bfloat16):
                loss = step_model(tokens, labels) / a.microbatches
            loss.backward()
        sync()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        t2 = time.perf_counter()
        if step >= a.warmup:
            fwd_bwd += t1 - t0
            optimizer += t2 - t1
    params = sum(p.numel() for p in model.parameters())
    step_tokens = a.micro_batch * seq * a.microbatches
    flops = 6.0 * params * step_tokens + 12.0 * layers * step_tokens * seq * hidden
    seconds = (fwd_bwd + optimizer) / a.steps
    peak = peak_tflops(device)
    out = {
        "name": f"torch/{a.model}/mbs:{a.micro_batch}/microbatches:{a.microbatches}"
                f"/{'compile' if a.compile else 'eager'}",
        "torch": torch.__version__,
        "params_M": params * 1e-6,
        "tokens_per_s": step_tokens / seconds,
        "tflops": flops / seconds * 1e-12,
        "mfu": flops / seconds * 1e-12 / peak if peak > 0 else None,
        "fwd_bwd_ms": fwd_bwd / a.steps * 1e3,
        "optimizer_ms": optimizer / a.steps * 1e3,
        "loss": float(loss.item()) * a.microbatches,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
