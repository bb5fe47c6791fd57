#!/usr/bin/env bash
# The same PyTorch model (MLP 784-512-256-10, Adam, batch 64 per worker, one
# thread per process) trained through the parameter servers and with PyTorch
# DistributedDataParallel (gloo), alternating, in one run:
#
#   scripts/bench_vs_ddp.sh --out DIR [--epochs 5] [--reps 2] [--workers 2] [--servers 2]
#       [--model mlp|cnn] [--batch_size 64] [--lr 2e-3] [--threads 1] [--train_limit N]
#
# DIR gets results.json (ps_samples_per_s, ddp_samples_per_s, ratio, the test
# accuracies, every run) and results.png. Details: scripts/bench_vs_ddp.py --help.
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/bench_vs_ddp.py" "$@"
