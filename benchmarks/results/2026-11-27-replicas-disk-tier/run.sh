#!/bin/bash
# One run of the failover that lost a trained table row before c5fa5da:
# 3 servers, --replicas=2, each server's memory holding a fraction of a
# 40,000-row table (the rest on its disk tier), 2 sync ps_exact_sum workers;
# the server of rank 1 is SIGKILLed at step 40 and never restarted.
#   run.sh BIN_DIR [sync|async]   prints each worker's last line
# (ps_exact_sum checks every pulled value exactly: a lost row is DATA_LOSS).
B=$1; MODE=${2:-sync}; D=$(mktemp -d /tmp/replicas-disk.XXXX); cd "$D" || exit 1
"$B/ps_scheduler" --port=0 --num_servers=3 --num_workers=2 --replicas=2 --heartbeat_timeout=2s > sched.log 2>&1 &
for _ in $(seq 1 50); do S=$(grep -o "127.0.0.1:[0-9]*" sched.log | head -1); [ -n "$S" ] && break; sleep 0.1; done
for i in 0 1 2; do
  "$B/ps_server" --scheduler="$S" --max_memory_mb=3 --table_disk_cache_mb=2 --table_disk_dir="$D/disk$i" > "s$i.log" 2>&1 &
  eval "p$i=$!"
done
for w in 0 1; do
  "$B/ps_exact_sum" --scheduler="$S" --steps=150 --consistency="$MODE" --dense_elements=1000 --slow_rank=0 \
    --slow_step_ms=15 --table_ids=40000 --progress_every=20 > "w$w.log" 2>&1 &
done
for _ in $(seq 1 300); do grep -q "exact_sum steps=40" w0.log && break; sleep 0.1; done
for i in 0 1 2; do if grep -q "server 1: create" "s$i.log"; then eval "kill -9 \$p$i"; fi; done
wait
for w in 0 1; do grep -h "exact_sum OK\|ps_exact_sum:" "w$w.log" | cut -c1-150 | tail -1; done
rm -rf "$D"
