#!/bin/bash
# Top-k's accuracy with deep gradient compression's warm-up: the 10-epoch MLP job (4 workers, 2 servers,
# sync) on loopback, where accuracy does not depend on the link. What summary-1..3.md hold; the three JSON files are
# launch_job runs with other server optimizers (see README.md).
set -eu
here="$(cd "$(dirname "$0")" && pwd)"; root="$here/../../.."; out=${1:-/tmp/topk-warmup}
b() { "$root/scripts/bench_sync_vs_async.sh" --workers 4 --servers 2 --epochs 10 --modes sync --out "$out/$1" --compressions "$2"; }
b 1 'topk:0.01,topk:0.05'
b 2 'topk:0.01,warmup=234,topk:0.01,warmup=1170,topk:0.01,pull=delta,warmup=234'
b 3 'topk:0.05,pull=delta,topk:0.05,pull=delta,warmup=234,topk:0.02,pull=delta,warmup=234,none'
"$root/scripts/bench_sync_vs_async.sh" --workers 4 --servers 2 --epochs 30 --modes sync --out "$out/30-epochs" \
  --compressions 'none,topk:0.01,topk:0.01,pull=delta'
for c in none topk:0.01; do
  /usr/bin/python3 "$root/scripts/launch_job.py" --out "$out/momentum-$c" --workers 4 --servers 2 --epochs 10 -- \
    --compression=$c --optimizer=momentum --lr=0.05
done
/usr/bin/python3 "$root/scripts/launch_job.py" --out "$out/adam-lr0.003" --workers 4 --servers 2 --epochs 10 -- \
  --compression=topk:0.01 --lr=0.003
