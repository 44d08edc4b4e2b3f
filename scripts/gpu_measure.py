"""GPU time of a PyTorch call, the GEMMs they time and the JSON lines of a run, for the measure_*.py scripts
(needs torch with a CUDA GPU).

Small kernels issued from Python can be bound by the host (an SDPA backward through
autograd takes 130-160 us of host time, 2026-11-30 on an H200), and CUDA events around a
loop then time the host. So the GPU is first held by a sleep kernel while the host queues
every timed call, and the events, queued behind the sleep, time only the GPU's work.
"""
import json
import time

import torch

HOLD_SECONDS = 0.05


def timed(fn, reps):
    """Seconds of GPU time per call of fn over `reps` calls queued after three warm-ups.

    Returns (seconds, host_bound): host_bound is True when queuing the calls took longer
    than the sleep held the GPU, so the figure may still include host time.
    """
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    # Cycles at 2 GHz, at or above the boost clock of the GPUs in question: the hold lasts
    # at least HOLD_SECONDS.
    torch.cuda._sleep(int(HOLD_SECONDS * 2e9))
    queued = time.perf_counter()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    queued = time.perf_counter() - queued
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps, queued > HOLD_SECONDS


def gemm(dtype, m, n, k, fast=True):
    """A zero-argument cuBLAS GEMM (m x k times k x n) on fresh random operands: bf16 through
    torch.matmul, or "fp8": E4M3 through torch._scaled_mm with per-tensor scales and a bf16
    output, B held as n x k and transposed (the TN form the FP8 tensor cores take), with fast
    accumulation when `fast` (Transformer Engine's forward GEMM)."""
    if dtype == "bf16":
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        return lambda: torch.matmul(a, b)
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    return lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one,
                                    out_dtype=torch.bfloat16, use_fast_accum=fast)


def write_lines(path, lines):
    """One JSON object a line, to `path` (nothing when path is None)."""
    if path:
        with open(path, "w") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")


def refused(line, error):
    """Record a backend's or library's refusal of a case in its line; the message."""
    line["error"] = str(error).splitlines()[0][:200]
    return line["error"]
