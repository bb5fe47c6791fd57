#!/bin/bash
# GPU checks of replicas on the GPU machine: cuda_backend_test; the MLP (2 workers, 2 servers,
# 2 epochs) with one copy and two, sync and async, on cuda and on cpu (16 cores: is async's K=2 cost the
# dev machine's 2 cores?); a cuda job with K=2 on 3 servers, server 1 SIGKILLed mid-run, against the same job
# without the kill.
set -u
R="$(cd "$(dirname "$0")/.." && pwd)"; cd "$R"
mkdir -p /tmp/dev && tar -C /tmp/dev -xJf .device/bundle.tar.xz
mkdir -p /usr/share/datasets && rm -rf /usr/share/datasets/fashion-mnist && cp -r .device/fashion /usr/share/datasets/fashion-mnist
cub="$(dirname "$(find / -name 'libcublas.so.13*' -not -path '/proc/*' 2>/dev/null | head -1)")"
export LD_LIBRARY_PATH=/tmp/dev/lib:$cub:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=/tmp/dev/bin W=/tmp/work; mkdir -p $W
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; uname -r; echo "cublas in $cub"; } > $OUT/machine.txt 2>&1
timeout 150 $B/cuda_backend_test > $OUT/cuda_backend_test.log 2>&1; echo "rc $?" >> $OUT/cuda_backend_test.log
job() { # DEVICE MODE K
  local n=$1-$2-k$3
  timeout 150 python3 scripts/launch_job.py --out $W/$n --bin-dir $B --workers 2 --servers 2 --consistency $2 \
    --epochs 2 --device $1 --scheduler-flag=--replicas=$3 -- --batch_size=64 --seed=1 --eval_every=62 \
    --progress_every=2s > $W/$n.out 2>&1
  echo "$n rc $? $(tr -d '\n' < $W/$n/summary.json 2>/dev/null | head -c 3000)" >> $OUT/runs.txt
}
for d in cuda cpu; do for m in sync async; do job $d $m 1; job $d $m 2; done; done
fo() { # NAME KILL
  local d=$W/$1; mkdir -p $d; local t0=$(date +%s.%N)
  $B/ps_scheduler --port=0 --endpoint_file=$d/ep --num_servers=3 --num_workers=2 --replicas=2 --heartbeat_timeout=2s > $d/scheduler.log 2>&1 & local sp=$!
  for i in $(seq 100); do [ -s $d/ep ] && break; sleep 0.1; done
  local ep=$(cat $d/ep); local s=()
  for i in 0 1 2; do $B/ps_server --scheduler=$ep --num_threads=1 > $d/server-$i.log 2>&1 & s+=($!); done
  local w=()
  for r in 0 1; do timeout 150 $B/ps_worker --scheduler=$ep --rank=$r --consistency=sync --epochs=3 --device=cuda \
    --batch_size=64 --seed=1 --eval_every=400 --progress_every=0.1s > $d/worker-$r.out 2> $d/worker-$r.log & w+=($!); done
  if [ $2 = 1 ]; then
    for i in $(seq 600); do [ "$(grep -c '"event":"progress"' $d/worker-0.out)" -ge 20 ] && break; sleep 0.1; done
    echo "kill $(date +%s.%N)" > $d/kill.txt; kill -9 ${s[1]}
  fi
  local rc=0; for p in ${w[@]}; do wait $p || rc=$?; done
  kill ${s[0]} ${s[2]} $sp 2>/dev/null; sleep 1; kill -9 ${s[@]} $sp 2>/dev/null
  echo "$1 workers rc $rc wall $(awk "BEGIN{print $(date +%s.%N) - $t0}")" >> $OUT/failover.txt
  grep -h '"event":"done"' $d/worker-*.out >> $OUT/failover.txt
}
fo cuda-3s-k2 0
fo cuda-3s-k2-kill1 1
cd $W && tar -czf $OUT/runs.tar.gz --exclude='checkpoints' --exclude='*.npz' --exclude='*.pt' .
