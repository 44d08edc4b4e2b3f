#!/usr/bin/env python3
"""tandem's GPU step against the PyTorch reference, as ratios of tokens/s.

    python3 tests/gpu/step_ratios.py BENCH_JSON TORCH_JSONL

BENCH_JSON: bench_cuda_step's --benchmark_out (Google Benchmark JSON); TORCH_JSONL: one line
per tests/gpu/torch_reference_step.py run. For each model every tandem configuration is
printed with its tokens/s, TFLOP/s, MFU and forward + backward / optimizer milliseconds,
then its ratio to each reference run of the same model and micro batch (above 1: tandem
faster). Needs no PyTorch.
"""
import json
import sys

MODELS = {"BM_Gpt2_124M": "124m", "BM_Gpt_1_3B": "1.3b"}


def tandem_runs(path):
    runs = []
    for b in json.load(open(path))["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        parts = b["name"].split("/")
        args = dict(p.split(":", 1) for p in parts[1:] if ":" in p)
        runs.append({
            "model": MODELS.get(parts[0], parts[0]),
            "mbs": int(args.get("mbs", 0)),
            "name": "tandem " + " ".join(f"{k}:{v}" for k, v in args.items() if k != "mbs"),
            "tokens_per_s": b["tokens/s"], "tflops": b["TFLOP/s"], "mfu": b.get("MFU"),
            "fwd_bwd_ms": b.get("fwd_bwd_ms"), "optimizer_ms": b.get("optimizer_ms")})
    return runs


def torch_runs(path):
    runs = []
    for line in open(path):
        if not line.strip().startswith("{"):
            continue
        r = json.loads(line)
        _, model, mbs, _, mode = r["name"].split("/")
        runs.append(dict(r, model=model, mbs=int(mbs.split(":")[1]), name=f"torch {mode}"))
    return runs


def fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ours, refs = tandem_runs(argv[1]), torch_runs(argv[2])
    print(f"{'run':<44} {'tokens/s':>10} {'TFLOP/s':>8} {'MFU':>6} {'fwd+bwd ms':>10} "
          f"{'opt ms':>7}  ratio to the reference")
    for model in sorted({r["model"] for r in ours + refs}):
        print(f"-- {model}")
        same = [r for r in refs if r["model"] == model]
        for r in same + [r for r in ours if r["model"] == model]:
            ratios = "" if r["name"].startswith("torch") else "  ".join(
                f"{t['name']} {r['tokens_per_s'] / t['tokens_per_s']:.2f}x"
                for t in same if t["mbs"] == r["mbs"])
            print(f"{r['name'] + ' mbs ' + str(r['mbs']):<44} {r['tokens_per_s']:>10.0f} "
                  f"{r['tflops']:>8.1f} {fmt(r['mfu'], '6.3f'):>6} {fmt(r['fwd_bwd_ms'], '10.1f'):>10} "
                  f"{fmt(r['optimizer_ms'], '7.1f'):>7}  {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
