#!/usr/bin/env bash
# Replicas in sync mode: each step of a dense slice forwarded to
# its backup once, as the step's sum (this build), against each worker's
# push forwarded (the build before it, ca8d9de). The MLP on Fashion-MNIST,
# 2 servers, sync, one epoch, with one copy of each slice and with two, on
# loopback with 2 workers, on emulated 1 Gbit/s links with 4 workers, and
# on emulated 100 Mbit/s links with 4 workers (the first 15,000 images);
# both builds alternate, two pairs each. Prints and keeps JSON lines
# (mlp.jsonl: samples/s, accuracy, ratio_vs_1_replica, build, pair).
#   git worktree add /tmp/oldtree ca8d9de
#   cmake -S /tmp/oldtree -B /tmp/oldtree/build -DCMAKE_BUILD_TYPE=RelWithDebInfo
#   cmake --build /tmp/oldtree/build -j2 --target ps_server_bin ps_scheduler_bin ps_worker_bin
#   OLD_BIN=/tmp/oldtree/build/bin benchmarks/results/2026-11-27-step-sums/run.sh   (root, repository root)
set -euo pipefail
out="$(cd "$(dirname "$0")" && pwd)"
old="${OLD_BIN:?set OLD_BIN to the bin directory of a build of ca8d9de (see the comment above)}"
: >"$out/mlp.jsonl"
for pair in 1 2; do
  for build in sums pushes; do
    bin="$PWD/build/bin"
    [[ "$build" == pushes ]] && bin="$old"
    for net in loopback 1gbit 100mbit; do
      case "$net" in
        loopback) args=(--workers 2) ;;
        1gbit) args=(--workers 4 --network emulated --rate 1gbit) ;;
        100mbit) args=(--workers 4 --network emulated --rate 100mbit --train-limit 15000) ;;
      esac
      dir="$(mktemp -d)"
      scripts/bench_sync_vs_async.sh --modes sync --replicas 1,2 --servers 2 --epochs 1 "${args[@]}" \
        --bin-dir "$bin" --out "$dir" 2>"$dir/bench.log" |
        /usr/bin/python3 -c '
import json, sys
for l in sys.stdin:
    o = json.loads(l)
    o.update(build=sys.argv[1], pair=int(sys.argv[2]))
    print(json.dumps(o), flush=True)' "$build" "$pair" | tee -a "$out/mlp.jsonl"
      rm -rf "$dir"
    done
  done
done
/usr/bin/python3 "$out/plot.py"
