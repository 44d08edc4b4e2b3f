#!/usr/bin/python3
"""The PyTorch side of the GPT-2 124M CPU training-step comparison (tests/bench/bench_train_step).

Same model as tandem's (12 layers, hidden 768, 12 heads, vocab padded to 50304, learned
positions, pre-LN, tied output layer, tanh GeLU, no dropout), fp32, AdamW, micro batch 4.
Run with Debian's python3-torch (1.13) and libopenblas0-openmp as the system BLAS:
  OMP_NUM_THREADS=2 /usr/bin/python3 scripts/bench/pytorch_gpt2_step.py --seq 64 256
Prints tokens/s per sequence length (median of the timed steps).
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
        self.heads = heads

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (z.view(b, t, self.heads, h // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (h // self.heads) ** 0.5)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, h)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers=12, h=768, heads=12, vocab=50304, positions=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, h), nn.Embedding(positions, h)
        self.blocks = nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
    for t in args.seq:
        idx = torch.randint(0, 50257, (args.batch, t))
        tgt = torch.randint(0, 50257, (args.batch, t))
        times = []
        for step in range(args.steps + 1):
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            model(idx, tgt).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if step > 0:  # the first step allocates
                times.append(time.perf_counter() - start)
        med = statistics.median(times)
        print(f"seq {t}: {med * 1e3:.0f} ms/step, {args.batch * t / med:.1f} tokens/s")


if __name__ == "__main__":
    main()
