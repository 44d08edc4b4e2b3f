#!/usr/bin/env bash
# The whole test suite: format check, a warnings-as-errors build with every test
# (unit and integration) under ctest, a smoke run of the benchmarks, then the unit tests
# again under AddressSanitizer + UndefinedBehaviorSanitizer. Installs what it needs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
jobs="$(nproc)"

# Each phase ends with its wall time and the CPU time (user + sys) of the processes it ran,
# and the run ends with a table of them: where the minutes go on this machine.
summary=()
phase_name="" phase_wall=0 phase_cpu=0
times_file="$(mktemp)"
trap 'rm -f "$times_file"' EXIT
phase() { # phase NAME: ends the running phase (if any) and starts NAME
  local cpu wall
  # user + sys of every child so far: bash's `times`, run in this shell (a subshell's are 0)
  times >"$times_file"
  cpu="$(tail -1 "$times_file" | awk '{ s = 0
    for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] }
    printf "%.0f", s }')"
  wall=$SECONDS
  if [ -n "$phase_name" ]; then
    summary+=("$(printf '%-28s %5d s wall %6d s cpu' "$phase_name" $((wall - phase_wall)) $((cpu - phase_cpu)))")
    echo "-- $phase_name: $((wall - phase_wall)) s wall, $((cpu - phase_cpu)) s cpu"
  fi
  phase_name="$1" phase_wall=$wall phase_cpu=$cpu
  [ -n "$phase_name" ] && echo "== $phase_name ($(date -u +%H:%M:%S) UTC)"
  return 0
}

phase "data (GPT-2 vocabulary, Brown corpus)"
bash scripts/fetch-data.sh

phase "format (clang-format)"
mapfile -t sources < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' 2>/dev/null || true)
if [ ${#sources[@]} -gt 0 ]; then
  clang-format --dry-run --Werror "${sources[@]}"
fi

phase "build (Release, -Werror)"
bash scripts/build.sh build
phase "tests (ctest)"
ctest --test-dir build --output-on-failure -j "$jobs"

phase "benchmarks (smoke run)"
# Each program runs, each benchmark family at least once. The large cases are left to a
# run of the program alone, for the figures: bench_search's full-scale searches (175B on
# 1024 GPUs, 1T on 3072) take minutes, bench_train_step's 256-token GPT-2 step and the
# 50304-wide output-layer GEMMs of bench_kernels and bench_train_step half a minute.
for b in build/tests/bench/bench_*; do
  [ -x "$b" ] || continue
  case "$(basename "$b")" in
    bench_search) filter=Default ;;
    bench_train_step) filter='Gpt2TrainStep/64/1/|StepGemmCeiling/256/3072/' ;;
    bench_kernels) filter='M:256/K:768/N:768/|Attention|AdamW|LayerNorm|Gelu|CrossEntropy' ;;
    *) filter=. ;;
  esac
  "$b" --benchmark_min_time=0.01 --benchmark_filter="$filter" >/dev/null
done

phase "build (Debug, ASan + UBSan)"
# -g1: line tables for the sanitizers' stack traces, without the full debug information
# that makes a Debug build of this template-heavy code slow to compile and link.
TANDEM_TARGETS="tandem_unit_tests" \
  bash scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
  -DTANDEM_SANITIZE=ON -DTANDEM_CUDA=OFF -DTANDEM_BUILD_BENCHMARKS=OFF
phase "unit tests (ASan + UBSan)"
# The cases ctest lists under the unit label, one process per test program rather than per
# case (an ASan process takes a quarter second to start; scripts/run_unit_programs.py).
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  python3 scripts/run_unit_programs.py build-asan "$jobs"
phase ""
echo "== done in $SECONDS s"
printf '%s\n' "${summary[@]}"
