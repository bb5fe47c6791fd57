#!/bin/bash
# GPU checks of compression on the GPU machine (16 cores), from the repo root with .device/ (make_bundle.sh):
#  1. the issue's goal run on emulated 1 Gbit/s links where 2 cores do not cap the CPU: 4 cpu workers, 2 servers,
#     sync, 10 epochs, one launch_job per compressor (COMPRESSIONS: none, bf16, top-k 1% with a one-epoch warm-up and
#     delta pulls);
#  2. cuda_backend_test;
#  3. the MLP with 2 cuda workers and 2 servers, sync, 3 epochs, on 127.0.0.1: none, bf16 and that top-k: what
#     compression costs a GPU worker where the link does not bound. SKIP_GPU=1 stops after 1.
# DEV=cpu BIN=DIR EPOCHS=1 LIMIT=6400 rehearses it on a machine without a GPU. OUT: where results go.
# launch_job exits 1 there (no gnuplot to plot with); its summary.json is written before that.
set -u
R="$(cd "$(dirname "$0")/../../.." && pwd)"; cd "$R"
OUT=${OUT:-/tmp/gpu-out}; DEV=${DEV:-cuda}; EPOCHS=${EPOCHS:-10}; mkdir -p $OUT
LIMIT=${LIMIT:+--train_limit=$LIMIT}
TOPK="topk:0.01,pull=delta,warmup=${WARMUP:-234}"  # 234 steps: one epoch of 4 workers at batch 64
if [ -n "${BIN:-}" ]; then B=$BIN; else
  mkdir -p /tmp/dev && tar -C /tmp/dev -xJf .device/bundle.tar.xz
  mkdir -p /usr/share/datasets && rm -rf /usr/share/datasets/fashion-mnist && cp -r .device/fashion /usr/share/datasets/fashion-mnist
  cub="$(dirname "$(find / -name 'libcublas.so.13*' -not -path '/proc/*' 2>/dev/null | head -1)")"
  export LD_LIBRARY_PATH=/tmp/dev/lib:$cub:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  { command -v ip && command -v tc; } > /dev/null || export PATH=$PATH:/tmp/dev/ipbin
  B=/tmp/dev/bin
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; uname -r; } > $OUT/machine.txt 2>&1
W=/tmp/gpu-work; rm -rf $W; mkdir -p $W
python3 scripts/netns.py check >> $OUT/machine.txt 2>&1
# One launch_job per compressor (not bench_sync_vs_async: launch_job exits 1 there without gnuplot to plot with).
for c in ${COMPRESSIONS:-none bf16 $TOPK}; do
  d=$W/emulated-$(echo "$c" | tr -c 'a-z0-9\n' '_')
  timeout 300 python3 scripts/launch_job.py --out $d --bin-dir $B --workers 4 --servers 2 --epochs $EPOCHS \
    --network emulated --rate 1gbit -- --compression=$c --seed=1 $LIMIT > $d.log 2>&1
  echo "$c rc $? $(tr -d '\n ' < $d/summary.json)" >> $OUT/emulated.txt
done
[ -n "${SKIP_GPU:-}" ] && { tar -C $W -czf $OUT/runs.tar.gz --exclude='checkpoints' .; exit; }
if [ -z "${BIN:-}" ]; then
  timeout 100 $B/cuda_backend_test > $OUT/cuda_backend_test.log 2>&1; echo "rc $?" >> $OUT/cuda_backend_test.log
fi
for c in none bf16 "$TOPK"; do
  d=$W/cuda-$(echo "$c" | tr -c 'a-z0-9\n' '_')
  timeout 100 python3 scripts/launch_job.py --out $d --bin-dir $B --workers 2 --servers 2 --epochs ${CUDA_EPOCHS:-3} \
    --device $DEV -- --compression=$c --seed=1 > $d.log 2>&1
  echo "$c rc $? $(tr -d '\n' < $d/summary.json)" >> $OUT/cuda.txt
done
tar -C $W -czf $OUT/runs.tar.gz --exclude='checkpoints' .
