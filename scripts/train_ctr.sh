#!/usr/bin/env bash
# The click-through benchmark: a DLRM-style model on synthetic clicks (26
# tables over a 10^9 id space) trained through the parameter servers, all
# sync and as PERSIA's hybrid (tables async), with the servers' rows beyond
# their memory budget on their disk tiers, and by PyTorch alone
# (DistributedDataParallel with hashed nn.EmbeddingBag tables in the same
# memory), in one run.
#
#   scripts/train_ctr.sh [--workers 2] [--servers 2] [--epochs 1] [--train-samples 400000]
#       [--test-samples 50000] [--budget-mb 64] [--runs sync,hybrid,torch] [--out DIR]
#       [--bin-dir build/bin] [-- EXTRA_WORKER_FLAGS...]
#
# DIR (default out/ctr-<date>) gets summary.json (test_auc, table_rows,
# samples/s of each run, their ratios), metrics.csv, auc.png and one
# directory per run. scripts/train_ctr.py says more.
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/train_ctr.py" "$@"
