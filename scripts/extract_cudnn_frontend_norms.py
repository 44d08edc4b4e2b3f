#!/usr/bin/env python3
"""Write topology/norm_reference_cudnn_frontend.csv from a git clone of
NVIDIA/cudnn-frontend: its published normalization benchmarks (benchmark/norms/,
cuDNN frontend 1.19.0, cuDNN 9.19.1), the same RMSNorm and LayerNorm shapes of
training runs timed by NVIDIA on an H200, a GB200 and a GB300 with three backends
(cuDNN, PyTorch eager, torch.compile), bf16, forward and backward.

The benchmark reports GB/s as the bytes a norm must move (input, output, weight and
statistics, read + written) over the median time, the same formula on every GPU, so
one GPU's fraction of its datasheet bandwidth over another's on the same kernel and
shape is a measured ratio of how much of the HBM a streaming kernel reaches.

    python3 scripts/extract_cudnn_frontend_norms.py /path/to/cudnn-frontend \
        > topology/norm_reference_cudnn_frontend.csv
"""
import csv
import io
import sys

# The same git reader and cuDNN version spelling as the attention table's.
from extract_cudnn_frontend_attention import git, version

HEADER = [
    "gpu", "cudnn", "model", "norm", "backend", "rows", "columns", "forward_seconds",
    "backward_seconds", "forward_gbps", "backward_gbps", "source",
]
COMMIT = "df73764"  # cuDNN Frontend v1.19.0, the commit that added the results
FILES = [
    "benchmark/norms/results/h200/all_models_20260227_035147.csv",
    "benchmark/norms/results/gb200/all_models_20260226_180237.csv",
    "benchmark/norms/results/gb300/all_models_20260226_190305.csv",
]


def main():
    repo = sys.argv[1]
    full = git(repo, "rev-parse", COMMIT).strip()[:12]
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(HEADER)
    for path in FILES:
        for r in csv.DictReader(io.StringIO(git(repo, "show", f"{COMMIT}:{path}"))):
            if r["success"] != "True" or r["data_type"] != "bfloat16" or r["profile_pass"] != "both":
                continue
            out.writerow([
                r["gpu_name"].replace("NVIDIA ", ""), version(r["cudnn_backend_version"]), r["norm_name"],
                r["norm_type"], r["backend"], r["N"], r["C"],
                f"{float(r['fwd_time_ms']) / 1e3:.6g}", f"{float(r['bwd_time_ms']) / 1e3:.6g}",
                r["fwd_gbps"], r["bwd_gbps"], f"NVIDIA/cudnn-frontend {full} {path}",
            ])


if __name__ == "__main__":
    main()
