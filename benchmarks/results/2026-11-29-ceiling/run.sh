#!/usr/bin/env bash
# The ceiling of a worker that computes nothing against the data plane's bound,
# and checkpoints on against off, on this machine (from the repository root):
#   benchmarks/results/2026-11-29-ceiling/run.sh OUT_DIR
set -euo pipefail
out="${1:?usage: run.sh OUT_DIR}"
mkdir -p "$out"
for rep in 1 2; do
  build/bin/train_bench --device=null --train_limit=60000 >>"$out/ceiling-mlp.jsonl"
done
# About 51 M parameters (205 MB): 80 steps of 64 images per worker, 10 of warm-up.
build/bin/train_bench --device=null --layers=784,5120,5120,4096,10 --train_limit=5120 --warmup_steps=10 \
  >>"$out/ceiling-51m.jsonl"
for rep in 1 2 3; do
  build/bin/train_bench --train_limit=40000 >>"$out/checkpoints.jsonl"
done
# The same with a 4 GiB replay budget: fewer checkpoints, more copies alive (one run).
build/bin/train_bench --skip_local --train_limit=40000 --max_replay_mb=4096 >>"$out/checkpoints-4g.jsonl"
