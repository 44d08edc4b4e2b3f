#!/usr/bin/env bash
# Configures (once) and builds a tree incrementally: scripts/build.sh DIR [cmake -D options…]
# TANDEM_TARGETS="a b" builds only those targets.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$1"; shift
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$dir" "${generator[@]}" "$@" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
else
  cmake "$dir" "$@" >/dev/null
fi
targets=()
for t in ${TANDEM_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
