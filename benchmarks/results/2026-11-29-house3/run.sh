#!/usr/bin/env bash
# The server's and the client's cores by module, and the events, against the
# build before them: the two builds alternately, four rounds, from the
# repository root:
#   benchmarks/results/2026-11-29-house3/run.sh BEFORE_BIN_DIR OUT_DIR
# BEFORE_BIN_DIR: build/bin of a checkout of the commit before (built with
# cmake --build build --target pushpull_bench train_bench).
set -euo pipefail
before="${1:?usage: run.sh BEFORE_BIN_DIR OUT_DIR}"
out="${2:?usage: run.sh BEFORE_BIN_DIR OUT_DIR}"
mkdir -p "$out"
for round in 1 2 3 4; do
  for build in before after; do
    bin=build/bin
    [[ "$build" == before ]] && bin="$before"
    "$bin/pushpull_bench" --sizes=4096,4194304 --servers=1 --workers=1 --transports=tcp,shm --reps=3 |
      sed "s/^{/{\"round\":$round,\"build\":\"$build\",/" >>"$out/pushpull.jsonl"
    "$bin/train_bench" --device=null --configs=1x1,2x2 --transports=shm,tcp --train_limit=30000 |
      sed "s/^{/{\"round\":$round,\"build\":\"$build\",/" >>"$out/ceiling.jsonl"
  done
done
