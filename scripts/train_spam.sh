#!/usr/bin/env bash
# Trains the SpamAssassin spam/ham text classifier with a whole job on this
# machine: one scheduler, S servers and W ps_spam_worker processes on
# 127.0.0.1 (token embeddings in the servers' table "tokens"), and reports
# the final test accuracy and AUC, the wall time, the throughput, the table's
# rows and a plot of test accuracy and AUC against wall time.
#
#   scripts/train_spam.sh [--workers N] [--servers S]
#       [--consistency sync|async|ssp:K] [--epochs E] [--out DIR] [--bin-dir DIR]
#       [--scheduler-flag F]... [--server-flag F]... [-- EXTRA_PS_SPAM_WORKER_FLAGS...]
#
# scripts/train_fashion_mnist.sh with --worker-binary ps_spam_worker and 3
# epochs by default (out/spam-<YYYYmmdd-HHMMSS>): the same flags, progress
# and exit codes. Everything after '--' goes to every worker (see
# build/bin/ps_spam_worker --help), e.g.
#   scripts/train_spam.sh --consistency async -- --dim=64 --row_lr=0.1
# The corpus must be installed (scripts/install_deps.sh, or
# scripts/fetch_spam_assassin.sh) unless --data_dir is passed on; without it
# the script exits 2.
#
# DIR gets summary.json (test_accuracy, test_auc, samples_per_s, table_rows,
# ...), metrics.csv, events.jsonl, accuracy.png, pids.txt and one log per
# process.
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi

corpus=/usr/local/share/datasets/spam-assassin  # ps::kDefaultSpamDir
if [[ " $* " != *" --data_dir"* && ! -d "$corpus" ]]; then
  echo "train_spam: the SpamAssassin corpus is not installed at $corpus" \
    "(scripts/fetch_spam_assassin.sh installs it)" >&2
  exit 2
fi
exec "$(dirname "$0")/train_fashion_mnist.sh" --worker-binary ps_spam_worker --epochs 3 "$@"
