#!/usr/bin/env bash
# Executes the notebooks headless (what CI runs): each is run top to bottom by
# `jupyter nbconvert --execute`, and any cell that raises fails this script.
#   notebooks/run.sh [TANDEM_BINARY] [OUT_DIR]
# TANDEM_BINARY defaults to build/tools/tandem, OUT_DIR (executed notebooks, JSON, SVG
# figures) to out/notebooks, both under the repository root. The notebooks `import tandem`:
# the module is looked for in TANDEM_PYTHON_DIR, by default the binary's build tree
# (build/python), which goes on PYTHONPATH.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$(realpath "${1:-$root/build/tools/tandem}")"
out="${2:-$root/out/notebooks}"
command -v jupyter >/dev/null || { echo "notebooks/run.sh: jupyter not found (bash scripts/setup.sh installs jupyter-nbconvert)" >&2; exit 1; }
[ -x "$bin" ] || { echo "notebooks/run.sh: no tandem binary at $bin" >&2; exit 1; }
pydir="$(realpath -m "${TANDEM_PYTHON_DIR:-$(dirname "$bin")/../python}")"
compgen -G "$pydir/tandem*.so" >/dev/null || { echo "notebooks/run.sh: no tandem Python module in $pydir (build the tandem_python target; needs pybind11-dev)" >&2; exit 1; }
mkdir -p "$out"
out="$(realpath "$out")"
export PYTHONPATH="$pydir${PYTHONPATH:+:$PYTHONPATH}"
export TANDEM_BIN="$bin" TANDEM_NOTEBOOK_OUT="$out" MPLBACKEND=Agg PYDEVD_DISABLE_FILE_VALIDATION=1
for nb in "$root"/notebooks/*.ipynb; do
  name="$(basename "$nb" .ipynb)"
  echo "notebooks/run.sh: executing $name"
  jupyter nbconvert --to notebook --execute "$nb" --output-dir "$out" --output "$name.executed" \
    --ExecutePreprocessor.timeout=600 --ExecutePreprocessor.kernel_name=python3
done
echo "notebooks/run.sh: all notebooks ran; outputs in $out"
