#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs a local cluster
# (1 scheduler, 2 servers, 2 workers) that pushes and pulls for a few steps
# and checks every value is the exact sum of every push.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target ps_scheduler_bin ps_server_bin ps_exchange
./scripts/local_cluster.sh --servers 2 --workers 2 -- ps_exchange --steps=20 --consistency=sync "$@"
