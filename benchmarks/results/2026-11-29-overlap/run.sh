#!/usr/bin/env bash
# A step against max(compute, communication), checkpoints on against off, and
# the ceiling again, on this machine (from the repository root):
#   benchmarks/results/2026-11-29-overlap/run.sh OUT_DIR
set -euo pipefail
out="${1:?usage: run.sh OUT_DIR}"
mkdir -p "$out"
for rep in 1 2; do
  # Compute about equal to communication: the MLP at batch 64 over tcp, its
  # first layer in 2 pieces (1 MiB slices) and in 13 (128 KiB).
  build/bin/train_bench --overlap --shm=false --train_limit=20000 --trace_out="$out/trace-tcp.jsonl" >>"$out/overlap.jsonl"
  build/bin/train_bench --overlap --shm=false --train_limit=20000 --slice_bytes=131072 >>"$out/overlap.jsonl"
  # Over shared memory: compute 3 times the communication at batch 64, 1.7 times at batch 24.
  build/bin/train_bench --overlap --train_limit=20000 >>"$out/overlap.jsonl"
  build/bin/train_bench --overlap --train_limit=12000 --batch_size=24 >>"$out/overlap.jsonl"
done
scripts/plot_timeline.py "$out/trace-tcp.jsonl" "$out/timeline-tcp.png"
# Checkpoints on against off: the default command, and longer runs (steady state).
for rep in 1 2 3; do
  build/bin/train_bench --skip_local --train_limit=40000 >>"$out/checkpoints.jsonl"
  build/bin/train_bench --skip_local --train_limit=60000 --epochs=2 >>"$out/checkpoints-long.jsonl"
done
# The ceiling with requests served by priority.
build/bin/train_bench --device=null --train_limit=60000 >>"$out/ceiling-mlp.jsonl"
