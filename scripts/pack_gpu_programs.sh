#!/usr/bin/env bash
# Packs the eight GPU programs of a -DTANDEM_CUDA=ON build, with the shared libraries they
# load that a GPU machine without tandem's build dependencies lacks (OpenMPI, SimGrid,
# OpenBLAS, ICU, …), into one compressed file for tests/gpu/run.sh --prebuilt PACK.
#   scripts/pack_gpu_programs.sh [BUILD_DIR] [PACK]      (defaults: build-gpu, gpu-programs.tar.xz)
# Left out, to come from the GPU machine: the C library, the C++ runtime, the CUDA driver
# and the CUDA libraries (cudart, cuBLAS, cuBLASLt, NCCL: hundreds of MB; a machine with
# PyTorch has them in its nvidia wheels, which run.sh finds).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build-gpu}"
pack="${2:-$root/gpu-programs.tar.xz}"
programs=(tools/tandem tests/gpu/test_cuda_kernels tests/gpu/test_cuda_fp8 tests/gpu/test_nccl
  tests/bench/bench_cuda_step tests/bench/bench_cuda_gemm tests/bench/bench_nccl
  kernels/dev/layer_norm_lab)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for p in "${programs[@]}"; do
  if [ ! -x "$build/$p" ]; then
    echo "pack_gpu_programs.sh: $build/$p: missing (build it with -DTANDEM_CUDA=ON:" \
      "tests/gpu/run.sh lists the targets)" >&2
    exit 2
  fi
  mkdir -p "$stage/$(dirname "$p")"
  cp "$build/$p" "$stage/$p"
done
mkdir -p "$stage/lib"
# Every library the programs resolve here, but those the GPU machine brings itself.
skip='/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so'
for p in "${programs[@]}"; do ldd "$build/$p"; done | awk '/=> \// { print $3 }' | sort -u |
  grep -Ev "$skip" | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
tar -C "$stage" -cJf "$pack" .
echo "wrote $pack ($(du -h "$pack" | cut -f1)): ${#programs[@]} programs and $(find "$stage/lib" -type f | wc -l) libraries"
