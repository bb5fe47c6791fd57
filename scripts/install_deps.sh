#!/usr/bin/env bash
# Installs, with apt-get, whatever this project needs that is missing.
# Idempotent: a machine that has everything installs nothing and makes no
# network request. Needs root (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(
  g++ cmake make pkg-config
  libzmq3-dev cppzmq-dev
  capnproto libcapnp-dev
  libabsl-dev libgoogle-glog-dev libgtest-dev libgmock-dev
  libopenblas-dev zlib1g-dev
  dataset-fashion-mnist
  gnuplot-nox python3
  iproute2
  clang libclang-rt-dev  # libFuzzer for tests/fuzz; its runtime is only a Recommends of clang
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "install_deps: need root to install: ${missing[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install_deps: done"
