#!/usr/bin/env bash
# Configures (once) and builds a tree incrementally: scripts/build.sh DIR [cmake -D options…]
# Every build starts from the same options (Release, warnings as errors), so the demo and
# the test command share build/ and never rebuild each other's objects; options given here
# come after them and win (the sanitizer tree passes its own). TANDEM_TARGETS="a b" builds
# only those targets. Ninja prints its progress ([done/total] per object) as it goes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$1"; shift
options=(-DCMAKE_BUILD_TYPE=Release -DTANDEM_WERROR=ON "$@")
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$dir/CMakeCache.txt" ]; then
  mkdir -p "$(dirname "$dir")"
  echo "configuring $dir (log: $dir.configure.log)"
  start=$SECONDS
  cmake -S "$root" -B "$dir" "${generator[@]}" "${options[@]}" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; exit 1; }
  echo "configured $dir in $((SECONDS - start)) s"
else
  cmake "$dir" "${options[@]}" >/dev/null
fi
targets=()
for t in ${TANDEM_TARGETS:-}; do targets+=(--target "$t"); done
export NINJA_STATUS="${NINJA_STATUS:-[%f/%t %es] }"
# The test programs share a precompiled header (tests/CMakeLists.txt): ccache caches their
# objects only when told that the header's macros and timestamps may be trusted.
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
