#!/usr/bin/env bash
# Table ids delta coded against sent raw (common/wire/id_coding.h):
# table_bench, 2 servers and 4 workers in network namespaces (root), bf16
# rows, ids as they are (":rawids") then delta coded, alternating.
#   benchmarks/results/2026-11-27-table-ids/run.sh   (from the repository root, as root)
set -euo pipefail
out="$(dirname "$0")"
bench() {  # NAME RATE ARGS...
  local name=$1 rate=$2
  shift 2
  /usr/bin/python3 scripts/netns.py run --prefix ti --hosts 7 --rate "$rate" -- ./build/bin/table_bench --netns=ti \
    --memory_rows=0 "$@" >"$out/$name.jsonl"
}
pairs='2x4,2x4:bf16:rawids,2x4:bf16,2x4:bf16:rawids,2x4:bf16,2x4:bf16:rawids,2x4:bf16'
bench dim8-ranks 1gbit --ids=ranks --id_space=10000000 --dim=8 --configs="$pairs"
bench dim8-ranks-100mbit 100mbit --ids=ranks --id_space=10000000 --dim=8 --steps=20 --configs="$pairs"
bench dim64-ranks 1gbit --ids=ranks --id_space=10000000 --dim=64 --configs="$pairs"
bench dim8-hashed 1gbit --ids=hashed --dim=8 --configs="$pairs"
# the same, each delta-coded run before its raw one (an order bias shows as a flip)
bench dim8-hashed-reversed 1gbit --ids=hashed --dim=8 \
  --configs='2x4:bf16,2x4:bf16:rawids,2x4:bf16,2x4:bf16:rawids,2x4:bf16,2x4:bf16:rawids'
/usr/bin/python3 "$out/plot.py"  # ids.png
