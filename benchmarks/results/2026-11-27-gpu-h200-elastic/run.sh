#!/bin/bash
# GPU checks of elastic servers on the GPU machine: cuda_backend_test; the MLP (2 cuda workers, sync,
# 3 epochs) on 2 fixed servers, on 2 servers with --elastic (the bookkeeping's cost), and on 1 server with
# --elastic that a second joins once worker 0 printed 15 progress lines, after which server 0 is drained.
# DEV=cpu rehearses it on a machine without a GPU. Usage: run3.sh [BIN_DIR]
set -u
R="$(cd "$(dirname "$0")/.." && pwd)"; cd "$R"
DEV=${DEV:-cuda}; OUT=${OUT:-/tmp/run3-out}; mkdir -p $OUT
if [ $# -ge 1 ]; then B=$1; else
  mkdir -p /tmp/dev && tar -C /tmp/dev -xJf .device/bundle.tar.xz
  mkdir -p /usr/share/datasets && rm -rf /usr/share/datasets/fashion-mnist && cp -r .device/fashion /usr/share/datasets/fashion-mnist
  cub="$(dirname "$(find / -name 'libcublas.so.13*' -not -path '/proc/*' 2>/dev/null | head -1)")"
  export LD_LIBRARY_PATH=/tmp/dev/lib:$cub:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  B=/tmp/dev/bin
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; uname -r; } > $OUT/machine.txt 2>&1
  timeout 150 $B/cuda_backend_test > $OUT/cuda_backend_test.log 2>&1; echo "rc $?" >> $OUT/cuda_backend_test.log
fi
W=/tmp/work3; rm -rf $W; mkdir -p $W
run() { # NAME SERVERS ELASTIC(0|1) GROW(0|1)
  local d=$W/$1; mkdir -p $d; local t0=$(date +%s.%N)
  $B/ps_scheduler --port=0 --endpoint_file=$d/ep --num_servers=$2 --num_workers=2 --elastic=$3 \
    --heartbeat_timeout=2s > $d/scheduler.log 2>&1 & local sp=$!
  for i in $(seq 100); do [ -s $d/ep ] && break; sleep 0.1; done
  local ep=$(cat $d/ep); local s=()
  for i in $(seq 0 $(($2 - 1))); do $B/ps_server --scheduler=$ep --num_threads=1 > $d/server-$i.log 2>&1 & s+=($!); done
  local w=()
  for r in 0 1; do timeout 200 $B/ps_worker --scheduler=$ep --rank=$r --consistency=sync --epochs=${EPOCHS:-3} --device=$DEV \
    --batch_size=64 --seed=1 --eval_every=400 --progress_every=0.1s > $d/worker-$r.out 2> $d/worker-$r.log & w+=($!); done
  if [ $4 = 1 ]; then
    for i in $(seq 900); do [ "$(grep -c '"event":"progress"' $d/worker-0.out)" -ge 15 ] && break; sleep 0.1; done
    echo "join $(date +%s.%N)" >> $d/events.txt
    $B/ps_server --scheduler=$ep --num_threads=1 --join > $d/server-join.log 2>&1 & s+=($!)
    for i in $(seq 300); do grep -q "(0 moves to go)" $d/scheduler.log && break; sleep 0.1; done
    echo "moved $(date +%s.%N)" >> $d/events.txt
    timeout 60 $B/ps_scheduler --drain_server=0 --scheduler=$ep > $d/drain.log 2>&1; echo "drain rc $? $(date +%s.%N)" >> $d/events.txt
  fi
  local rc=0; for p in ${w[@]}; do wait $p || rc=$?; done
  sleep 1; kill ${s[@]} $sp 2>/dev/null; sleep 1; kill -9 ${s[@]} $sp 2>/dev/null
  echo "$1 workers rc $rc wall $(awk "BEGIN{print $(date +%s.%N) - $t0}") $(grep -h 'move to balance\|drained and left' $d/scheduler.log | sed 's/.*scheduler: //' | tr '\n' ';')" >> $OUT/elastic.txt
  cat $d/events.txt >> $OUT/elastic.txt 2>/dev/null
  grep -h '"event":"done"' $d/worker-*.out >> $OUT/elastic.txt
}
[ -n "${ONLY:-}" ] && { run $ONLY; exit; }
run fixed-2s 2 0 0
run elastic-2s 2 1 0
run grow-1to2-drain0 1 1 1
run fixed-2s-again 2 0 0
run elastic-2s-again 2 1 0
cd $W && tar -czf $OUT/runs.tar.gz --exclude='checkpoints' .
