#!/usr/bin/env python3
"""Write topology/attention_reference_cudnn_frontend.csv from a git clone of
NVIDIA/cudnn-frontend: the bf16, causal, head-dim-128 rows of its published SDPA
training benchmarks (benchmark/sdpa_benchmark*/), measured by NVIDIA with the
cuDNN frontend calling cuDNN's fused attention directly, as Transformer Engine does.

Each benchmark's results were committed once and later removed, so they are read
from the commits that added them. Rows kept: cuDNN through its frontend (not
through PyTorch's SDPA), bf16, causal (top-left) mask, non-deterministic backward
(Megatron's default). Times are medians of 10 launches at the GPU's free clock.

    python3 scripts/extract_cudnn_frontend_attention.py /path/to/cudnn-frontend \
        > topology/attention_reference_cudnn_frontend.csv
"""
import csv
import io
import subprocess
import sys

HEADER = [
    "gpu", "cudnn", "micro_batch", "heads", "groups", "seq", "head_dim",
    "forward_seconds", "backward_seconds", "source",
]

# (commit, path, gpu, cudnn version, reader): the versions are those each benchmark's
# README gives (the older CSVs do not carry them).
OLD_STYLE = [
    ("9793df5", "benchmark/sdpa_benchmark_training/artifacts/sdpa_fp8_benchmark_results_NVIDIA_B200.csv",
     "B200", "9.10.2", "bf16"),
    ("0b1577c", "benchmark/sdpa_benchmark_training/artifacts/sdpa_fp8_benchmark_results_NVIDIA_B200.csv",
     "B200", "9.13.1", "bf16"),
    ("0b1577c", "benchmark/sdpa_benchmark_training/artifacts/sdpa_fp8_benchmark_results_NVIDIA_GB300.csv",
     "GB300", "9.13.1", "bf16"),
    ("b372d39", "benchmark/sdpa_benchmark_training/artifacts/sdpa_bf16_benchmark_results_NVIDIA_GB200.csv",
     "GB200", "9.17.0", "cudnn_fe"),
    ("b372d39", "benchmark/sdpa_benchmark_training/artifacts/sdpa_bf16_benchmark_results_NVIDIA_GB300.csv",
     "GB300", "9.17.0", "cudnn_fe"),
]
NEW_STYLE = [
    ("b8c0656", "benchmark/sdpa_benchmark_training/results/gb200_918_only_cudnn/llama3.1_20260126_110503.csv"),
    ("b8c0656", "benchmark/sdpa_benchmark_training/results/gb300_918_only_cudnn/llama3.1_20260126_110426.csv"),
    ("df73764", "benchmark/sdpa_benchmark_training/results/gb200_919_only_cudnn/llama3.1_20260226_174648.csv"),
    ("df73764", "benchmark/sdpa_benchmark_training/results/gb300_919_only_cudnn/llama3.1_20260226_185510.csv"),
    ("df73764", "benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/llama3.1_20260227_034703.csv"),
    ("3929da2", "benchmark/sdpa_benchmark_training/results/llama3.1/gb200/llama3.1_20260424_100750.csv"),
    ("3929da2", "benchmark/sdpa_benchmark_training/results/llama3.1/gb300/llama3.1_20260424_100757.csv"),
]


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True).stdout


def source(repo, commit, path):
    return "NVIDIA/cudnn-frontend " + git(repo, "rev-parse", commit).strip()[:12] + " " + path


def version(backend_version):
    v = int(float(backend_version))  # 91901 -> 9.19.1
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}"


def old_style(repo, commit, path, gpu, cudnn, backend):
    for r in csv.DictReader(io.StringIO(git(repo, "show", f"{commit}:{path}"))):
        kind = r.get("backend", r.get("precision"))
        if kind != backend or r["is_causal"] != "True" or r["head_dim"] != "128":
            continue
        yield [gpu, cudnn, r["batch_size"], r["num_q_heads"], r["num_kv_heads"], r["q_seqlen"],
               r["head_dim"], float(r["forward_time"]) / 1e3, float(r["backward_time"]) / 1e3,
               source(repo, commit, path)]


def new_style(repo, commit, path):
    rows = {}
    for r in csv.DictReader(io.StringIO(git(repo, "show", f"{commit}:{path}"))):
        if (r["backend"] != "cudnn" or r["data_type"] != "bfloat16" or r["attn_mask"] != "top_left"
                or r["deterministic_bwd"] != "False" or r["success"] != "True"
                or r["head_dim_qk"] != "128" or r["head_dim_vo"] != "128"):
            continue
        key = (r["gpu_name"].replace("NVIDIA ", ""), version(r["cudnn_backend_version"]),
               r["batch_size"], r["num_q_heads"], r["num_kv_heads"], r["q_seqlen"], r["head_dim_qk"])
        times = rows.setdefault(key, {})
        if r["profile_pass"] == "both":
            times["fwd"], times["bwd"] = r["fwd_time_ms"], r["bwd_time_ms"]
        else:  # one row a pass
            times[r["profile_pass"]] = r["time_ms"]
    for key, t in rows.items():
        yield [*key, float(t["fwd"]) / 1e3, float(t["bwd"]) / 1e3, source(repo, commit, path)]


def main():
    repo = sys.argv[1]
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(HEADER)
    for spec in OLD_STYLE:
        for row in old_style(repo, *spec):
            out.writerow([f"{x:.6g}" if isinstance(x, float) else x for x in row])
    for spec in NEW_STYLE:
        for row in new_style(repo, *spec):
            out.writerow([f"{x:.6g}" if isinstance(x, float) else x for x in row])


if __name__ == "__main__":
    main()
