#!/usr/bin/env bash
# A worker's compression spread over threads (--compress_threads):
# compress_bench's push lines at the MLP's size (535,818 floats, 8 slices),
# then the MLP on Fashion-MNIST, 1 worker, 1 server, 1 epoch, top-k 1% with
# delta pulls, alternating 1 and 2 compression threads, three pairs.
#   benchmarks/results/2026-11-27-compress-threads/run.sh   (from the repository root)
set -euo pipefail
out="$(dirname "$0")"
./build/bin/compress_bench --sizes=2143272 --seconds=1 --push_threads=1,2 >"$out/compress_bench.jsonl"
: >"$out/train.jsonl"
for pair in 1 2 3; do
  for threads in 1 2; do
    dir="$(mktemp -d)"
    scripts/train_fashion_mnist.sh --workers 1 --servers 1 --epochs 1 --out "$dir" -- \
      --compression=topk:0.01,pull=delta --compress_threads="$threads" >"$dir/train.log" 2>&1
    /usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
print(json.dumps({"pair": int(sys.argv[2]), "compress_threads": int(sys.argv[3]), "samples_per_s": s["samples_per_s"],
                  "test_accuracy": s["test_accuracy"]}))' "$dir/summary.json" "$pair" "$threads" >>"$out/train.jsonl"
    rm -rf "$dir"
  done
done
cat "$out/train.jsonl"
