#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains the Fashion-MNIST
# MLP with a local job (1 scheduler, 2 servers, 2 workers, sync, 5 epochs),
# then prints the final test accuracy, the wall time, the throughput and where
# the plot of test accuracy against wall time is (out/train-<time>/).
# Arguments go to scripts/train_fashion_mnist.sh, e.g.
#   ./scripts/quickstart.sh --consistency ssp:2 -- --lr=0.002
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target ps_scheduler_bin ps_server_bin ps_worker_bin
exec scripts/train_fashion_mnist.sh --workers 2 --servers 2 --consistency sync --epochs 5 "$@"
