"""GPU time of a PyTorch call and the JSON lines of a run, for the measure_*.py scripts
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
