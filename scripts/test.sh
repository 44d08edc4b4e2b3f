#!/usr/bin/env bash
# The whole test suite: format check, a warnings-as-errors build with every test
# (unit and integration) under ctest, a smoke run of the benchmarks, then the unit tests
# again under AddressSanitizer + UndefinedBehaviorSanitizer. Installs what it needs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
jobs="$(nproc)"

echo "== data (GPT-2 vocabulary, Brown corpus)"
bash scripts/fetch-data.sh

echo "== format (clang-format)"
mapfile -t sources < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' 2>/dev/null || true)
if [ ${#sources[@]} -gt 0 ]; then
  clang-format --dry-run --Werror "${sources[@]}"
fi

echo "== build (Release, warnings as errors)"
bash scripts/build.sh build
echo "== tests"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== benchmarks (smoke run)"
# bench_search's full-scale cases (175B on 1024 GPUs, 1T on 3072) take minutes: the smoke
# run takes its small case; run the program alone for the figures.
for b in build/tests/bench/bench_*; do
  [ -x "$b" ] || continue
  filter=.
  [ "$(basename "$b")" = bench_search ] && filter=Default
  "$b" --benchmark_min_time=0.01 --benchmark_filter="$filter" >/dev/null
done

echo "== unit tests under ASan + UBSan"
TANDEM_TARGETS="tandem_unit_tests" \
  bash scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DTANDEM_SANITIZE=ON \
  -DTANDEM_CUDA=OFF -DTANDEM_BUILD_BENCHMARKS=OFF
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -L unit
