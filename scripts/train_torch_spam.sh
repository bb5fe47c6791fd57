#!/usr/bin/env bash
# Trains the SpamAssassin spam/ham classifier written in PyTorch through the
# parameter servers: one scheduler, S servers and W ps_torch_spam_worker
# processes on 127.0.0.1 (worker/python/examples/ps_torch_spam.py: token embeddings in
# a ps.torch.ServerEmbeddingBag, the servers' table "tokens"; the dense
# layers in ps.torch.DistributedModule), and reports the final test accuracy
# and AUC, the wall time, the throughput, the table's rows and a plot.
#
#   scripts/train_torch_spam.sh [--workers N] [--servers S]
#       [--consistency sync|async|ssp:K] [--epochs E] [--out DIR] [--bin-dir DIR]
#       [--scheduler-flag F]... [--server-flag F]... [-- EXTRA_PS_TORCH_SPAM_WORKER_FLAGS...]
#
# scripts/train_fashion_mnist.sh with --worker-binary ps_torch_spam_worker and
# 3 epochs by default (out/torch_spam-<YYYYmmdd-HHMMSS>): the same flags,
# progress, outputs and exit codes. Everything after '--' goes to every
# worker (build/bin/ps_torch_spam_worker --help: --batch_size, --dim,
# --hidden, --row_lr, --dense_lr, --train_limit, --test_limit, --threads...).
# The corpus must be installed (scripts/install_deps.sh, or
# scripts/fetch_spam_assassin.sh) unless --data_dir is passed on; without it
# the script exits 2.
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi

corpus=/usr/local/share/datasets/spam-assassin  # ps::kDefaultSpamDir
if [[ " $* " != *" --data_dir"* && ! -d "$corpus" ]]; then
  echo "train_torch_spam: the SpamAssassin corpus is not installed at $corpus" \
    "(scripts/fetch_spam_assassin.sh installs it)" >&2
  exit 2
fi
exec "$(dirname "$0")/train_fashion_mnist.sh" --worker-binary ps_torch_spam_worker --epochs 3 "$@"
