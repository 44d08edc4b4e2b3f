#!/usr/bin/env python3
"""The rate a GPU sustains on GEMMs at its power limit, against a short burst's.

    python3 scripts/measure_sustained_clock.py [--out clock.jsonl] [--seconds 12] [--size 8192]

The GEMM and attention fractions of the GPU presets come from short microbenchmarks
(measure_gemms.py: three warm-ups and 20 timed calls), which run at the boosted clock; a
training step holds the GPU at its power limit for seconds, where the clock drops. The
presets carry that drop as `sustained_clock_fraction` (dgx-h100: 0.76), so far fitted on
one training row each. This script measures it, and how it depends on the load:

  burst       the GPU idle for 2 s, then what measure_gemms.py times (the reference rate)
  ramp        the GPU idle for 2 s, then GEMMs back to back for 2 s, timed every 50 ms: how
              fast the rate falls from the burst's (the line's rate: the median after 1 s)
  sustained   GEMMs back to back for --seconds; the rate over the second half
  duty D      for --seconds, periods of 100 ms: GEMMs for D of it, then the GPU idle (the
              host asleep); the rate inside the bursts over the second half
  mixed       GEMMs, then a memory-bound add over 1 GiB tensors taking about 30 % of each
              period; the GEMMs' own rate over the second half

for bf16 (torch.matmul) and FP8 E4M3 (torch._scaled_mm with fast accumulation, as
Transformer Engine runs its forward GEMM) at --size cubed. While a case runs, nvidia-smi
samples the SM clock, power draw and limit, temperature and the clock event reasons
(SwPowerCap, thermal slowdowns) every 100 ms; each case's JSON line carries their medians
over the measured half and its rate as a ratio to the burst's. Needs PyTorch with a CUDA GPU
and nvidia-smi; changes no GPU setting.
"""
import argparse
import statistics
import subprocess
import sys
import threading
import time

FIELDS = ["clocks.sm", "clocks.max.sm", "power.draw", "power.limit", "temperature.gpu"]
# nvidia-smi renamed the throttle reasons to clock event reasons (driver 535); either works.
REASON_FIELDS = ["clocks_event_reasons.active", "clocks_throttle_reasons.active"]
# The bits of nvmlClocksEventReasons (nvml.h).
REASONS = {0x1: "GpuIdle", 0x2: "ApplicationsClocksSetting", 0x4: "SwPowerCap",
           0x8: "HwSlowdown", 0x10: "SyncBoost", 0x20: "SwThermalSlowdown",
           0x40: "HwThermalSlowdown", 0x80: "HwPowerBrakeSlowdown", 0x100: "DisplayClockSetting"}
PERIOD_SECONDS = 0.1


def reason_names(mask):
    """The names of the clock event reasons set in `mask`, lowest bit first."""
    return [name for bit, name in sorted(REASONS.items()) if mask & bit]


def parse_sample(line):
    """One line of `nvidia-smi --query-gpu=<FIELDS>,<reasons> --format=csv,noheader,nounits`
    as a dict (clock_mhz, max_clock_mhz, power_w, power_limit_w, temperature_c, reasons);
    None for a line that is not one ("[N/A]" fields, a driver message)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(FIELDS) + 1:
        return None
    try:
        numbers = [float(p) for p in parts[:-1]]
        reasons = int(parts[-1], 16)
    except ValueError:
        return None
    keys = ["clock_mhz", "max_clock_mhz", "power_w", "power_limit_w", "temperature_c"]
    sample = dict(zip(keys, numbers))
    sample["reasons"] = reasons
    return sample


def summarise(samples):
    """Medians of a window's samples, and every clock event reason seen in it."""
    if not samples:
        return {"samples": 0}
    out = {"samples": len(samples)}
    for key in ["clock_mhz", "max_clock_mhz", "power_w", "power_limit_w", "temperature_c"]:
        out[key] = statistics.median(s[key] for s in samples)
    out["power_capped_share"] = sum(1 for s in samples if s["reasons"] & 0x4) / len(samples)
    seen = 0
    for s in samples:
        seen |= s["reasons"]
    out["reasons"] = reason_names(seen)
    return out


class Sampler:
    """nvidia-smi in the background, every line stamped with the host's monotonic clock."""

    def __init__(self, gpu, reasons_field, interval_ms=100):
        cmd = ["nvidia-smi", f"--query-gpu={','.join(FIELDS + [reasons_field])}",
               "--format=csv,noheader,nounits", "-lms", str(interval_ms), "-i", gpu]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        self.lines = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            sample = parse_sample(line)
            if sample is not None:
                self.lines.append((time.monotonic(), sample))

    def window(self, start, end):
        return [s for t, s in list(self.lines) if start <= t <= end]

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def reasons_field():
    """The clock-event-reasons field this driver's nvidia-smi knows."""
    for field in REASON_FIELDS:
        probe = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                               capture_output=True, text=True)
        if probe.returncode == 0:
            return field
    sys.exit("measure_sustained_clock.py: nvidia-smi knows neither " + " nor ".join(REASON_FIELDS))


def smi_id(torch):
    """nvidia-smi's name for torch's current GPU: its PCI bus id where torch gives one (the
    indices differ under CUDA_VISIBLE_DEVICES), else its index."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    if all(hasattr(props, f) for f in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        bus = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
        if subprocess.run(["nvidia-smi", "-i", bus, "-L"], capture_output=True).returncode == 0:
            return bus
    return str(torch.cuda.current_device())


def run_case(torch, gemm, gemm_seconds, seconds, duty=1.0, memory_op=None, memory_share=0.0):
    """Runs periods of PERIOD_SECONDS for `seconds` (back to back when duty is 1 and there is no
    memory op): in each, as many GEMMs as fill `duty` of it at the burst's rate, then the memory
    op (`memory_share` of a period) or the GPU idle. Returns the GEMMs' rate over the second
    half, as (seconds per GEMM, start, end) with start/end on the host's monotonic clock."""
    per_period = max(1, round(duty * PERIOD_SECONDS / gemm_seconds))
    timed = []  # (host time the period began, start event, end event, GEMMs)
    begin = time.monotonic()
    previous = None
    while time.monotonic() - begin < seconds:
        period_start = time.monotonic()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(per_period):
            gemm()
        end.record()
        timed.append((period_start, start, end, per_period))
        if memory_op is not None:
            for _ in range(max(1, round(memory_share * PERIOD_SECONDS / memory_op[1]))):
                memory_op[0]()
        if duty < 1.0 and memory_op is None:
            end.synchronize()
            rest = PERIOD_SECONDS - (time.monotonic() - period_start)
            if rest > 0:
                time.sleep(rest)
        elif previous is not None:
            previous.synchronize()  # at most two periods queued ahead of the GPU
        previous = end
    torch.cuda.synchronize()
    half = begin + seconds / 2
    kept = [(t, s, e, n) for t, s, e, n in timed if t >= half]
    gpu_seconds = sum(s.elapsed_time(e) / 1e3 for _, s, e, _ in kept)
    calls = sum(n for *_, n in kept)
    return gpu_seconds / max(calls, 1), half, time.monotonic()


def run_ramp(torch, gemm, gemm_seconds, seconds=2.0, window=0.05):
    """GEMMs back to back for `seconds` from an idle GPU, timed in windows of about `window`
    seconds: how fast the rate falls from the burst's to the sustained one. Returns
    [(ms since the start, seconds per GEMM)] and the host's start and end."""
    per_window = max(1, round(window / gemm_seconds))
    marks = []
    begin = time.monotonic()
    previous = None
    while time.monotonic() - begin < seconds:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(per_window):
            gemm()
        end.record()
        marks.append((start, end))
        if previous is not None:
            previous.synchronize()
        previous = end
    torch.cuda.synchronize()
    first = marks[0][0]
    series = [(first.elapsed_time(s), s.elapsed_time(e) / 1e3 / per_window) for s, e in marks]
    return series, begin, time.monotonic()


def memory_add(torch):
    """A memory-bound add over 1 GiB bf16 tensors, and its seconds per call."""
    from gpu_measure import timed
    n = 1 << 29
    x = torch.empty(n, device="cuda", dtype=torch.bfloat16).normal_()
    y = torch.empty_like(x)
    z = torch.empty_like(x)
    call = lambda: torch.add(x, y, out=z)  # noqa: E731
    return call, timed(call, 10)[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the JSON lines here too")
    parser.add_argument("--seconds", type=float, default=12.0, help="length of each loaded case")
    parser.add_argument("--size", type=int, default=8192, help="the GEMMs' m = n = k")
    parser.add_argument("--dtypes", default="bf16,fp8")
    parser.add_argument("--duties", default="0.25,0.5,0.75")
    args = parser.parse_args()
    if args.seconds < 1:
        sys.exit(f"measure_sustained_clock.py: --seconds = {args.seconds}: must be at least 1")
    if args.size < 256 or args.size % 16:
        sys.exit(f"measure_sustained_clock.py: --size = {args.size}: must be a multiple of 16, "
                 "at least 256")
    dtypes = [d for d in args.dtypes.split(",") if d]
    for d in dtypes:
        if d not in ("bf16", "fp8"):
            sys.exit(f"measure_sustained_clock.py: --dtypes: {d!r}: must be bf16 or fp8")
    try:
        duties = [float(d) for d in args.duties.split(",") if d]
    except ValueError:
        sys.exit(f"measure_sustained_clock.py: --duties = {args.duties!r}: must be numbers")
    for d in duties:
        if not 0 < d < 1:
            sys.exit(f"measure_sustained_clock.py: --duties: {d}: must lie in (0, 1)")

    try:
        import torch
    except ImportError as e:
        sys.exit(f"measure_sustained_clock.py: needs PyTorch with a CUDA GPU ({e})")
    from gpu_measure import gemm as gemm_of, timed, write_lines
    if not torch.cuda.is_available():
        sys.exit("measure_sustained_clock.py: needs a CUDA GPU")
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}, torch {torch.__version__}", flush=True)
    sampler = Sampler(smi_id(torch), reasons_field())
    flops = 2.0 * args.size ** 3
    lines = []
    try:
        memory = memory_add(torch)
        for dtype in dtypes:
            gemm = gemm_of(dtype, args.size, args.size, args.size)
            time.sleep(2.0)  # idle: the next burst starts from the boosted clock
            t0 = time.monotonic()
            burst, host_bound = timed(gemm, 20)
            cases = [("burst", None, burst, t0, time.monotonic(), {"host_bound": host_bound})]
            time.sleep(2.0)
            series, start, end = run_ramp(torch, gemm, burst)
            late = [g for t, g in series if t >= 1000.0] or [series[-1][1]]
            cases.append(("ramp", 1.0, statistics.median(late), start, end,
                          {"ramp_ms_tflops": [[round(t, 1), round(flops / g / 1e12, 1)]
                                              for t, g in series]}))
            plans = [("sustained", 1.0, None)] + [(f"duty {d:g}", d, None) for d in duties] + \
                [("mixed", 0.7, memory)]
            for name, duty, mem in plans:
                time.sleep(2.0)
                s, start, end = run_case(torch, gemm, burst, args.seconds, duty, mem, 0.3)
                cases.append((name, duty, s, start, end, {}))
            for name, duty, s, start, end, extra in cases:
                line = {"gpu": gpu, "dtype": dtype, "size": args.size, "case": name,
                        "duty": duty, "seconds_per_gemm": s, "tflops": flops / s / 1e12,
                        "ratio_to_burst": burst / s}
                line.update(extra)
                line.update(summarise(sampler.window(start, end)))
                lines.append(line)
                smi = (f"SM {line['clock_mhz']:6.0f} MHz  {line['power_w']:5.0f} W of "
                       f"{line['power_limit_w']:4.0f}  capped {line['power_capped_share']:.2f}  "
                       f"{' '.join(line['reasons'])}" if line["samples"]
                       else "(no nvidia-smi sample in so short a window)")
                print(f"  {dtype:4s} {name:10s} {line['tflops']:7.1f} TFLOP/s  "
                      f"x{line['ratio_to_burst']:.3f} of the burst  {smi}", flush=True)
            del gemm
            torch.cuda.empty_cache()
    finally:
        sampler.stop()
    write_lines(args.out, lines)


if __name__ == "__main__":
    main()
