#!/usr/bin/env bash
# Trains a PyTorch CNN on Fashion-MNIST through the parameter servers: a model
# the C++ trainer cannot express, written in PyTorch and trained with
# ps.torch.DistributedModule by ps_torch_worker processes (worker/python).
#
#   scripts/train_torch.sh [--workers N] [--servers S] [--consistency sync|async|ssp:K]
#       [--epochs E] [--out DIR] [--bin-dir DIR] [-- EXTRA_PS_TORCH_WORKER_FLAGS...]
#
# scripts/train_fashion_mnist.sh with --worker-binary ps_torch_worker and 5
# epochs by default: the same flags, live progress, summary.json (test
# accuracy, samples/s, ...), metrics.csv, accuracy.png and exit codes.
# Worker flags (build/bin/ps_torch_worker --help): --batch_size (64), --lr
# (Adam, 2e-3), --model cnn|mlp, --train_limit, --test_limit, --threads (1).
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
exec "$(dirname "$0")/train_fashion_mnist.sh" --worker-binary ps_torch_worker --epochs 5 "$@"
