#!/usr/bin/env bash
# Installs what is missing, builds into build/, and runs every test under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
cd build
ctest --output-on-failure --timeout 600 -j2 "$@"
