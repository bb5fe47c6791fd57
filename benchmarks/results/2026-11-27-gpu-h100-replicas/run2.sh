#!/bin/bash
# Replicas with GPU workers: do server threads lift K=2 against K=1? The MLP, 2 cuda workers, 2 servers,
# 2 epochs, sync and async, K=1 and K=2, servers with --num_threads=1 (again, the baseline) and 4.
set -u
R="$(cd "$(dirname "$0")/.." && pwd)"; cd "$R"
mkdir -p /tmp/dev && tar -C /tmp/dev -xJf .device/bundle.tar.xz
mkdir -p /usr/share/datasets && rm -rf /usr/share/datasets/fashion-mnist && cp -r .device/fashion /usr/share/datasets/fashion-mnist
cub="$(dirname "$(find / -name 'libcublas.so.13*' -not -path '/proc/*' 2>/dev/null | head -1)")"
export LD_LIBRARY_PATH=/tmp/dev/lib:$cub:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=/tmp/dev/bin W=/tmp/work; mkdir -p $W
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/machine.txt 2>&1
job() { # MODE K THREADS
  local n=cuda-$1-k$2-t$3
  timeout 120 python3 scripts/launch_job.py --out $W/$n --bin-dir $B --workers 2 --servers 2 --consistency $1 \
    --epochs 2 --device cuda --scheduler-flag=--replicas=$2 --server-flag=--num_threads=$3 -- --batch_size=64 \
    --seed=1 --eval_every=62 --progress_every=2s > $W/$n.out 2>&1
  echo "$n rc $? $(tr -d '\n' < $W/$n/summary.json 2>/dev/null | head -c 3000)" >> $OUT/runs.txt
}
for t in 1 4; do for m in sync async; do job $m 1 $t; job $m 2 $t; done; done
for t in 1 4; do for m in sync async; do job $m 1 $t; job $m 2 $t; done; done
