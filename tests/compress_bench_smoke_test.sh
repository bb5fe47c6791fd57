#!/usr/bin/env bash
# Smoke test of compress_bench on a tiny budget: it exits 0, every stdout
# line is a JSON object with the keys docs/benchmarks.md documents, one
# line per compressor and size, "none" costs no bytes and the lossy ones save
# what their kind says. Bad flags exit 2.
#
#   tests/compress_bench_smoke_test.sh COMPRESS_BENCH
set -uo pipefail

bench="${1:?usage: $0 COMPRESS_BENCH}"
py=/usr/bin/python3
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_test compress_bench_smoke

echo "compress_bench, 4 KiB and 64 KiB, 0.01 s per measurement"
if timeout 120 "$bench" --sizes=4096,65536 --seconds=0.01 >"$tmp/out.jsonl" 2>"$tmp/err"; then
  if "$py" - "$tmp/out.jsonl" <<'PY'
import json, sys
keys = {"memcpy": {"bytes", "gbps"},
        "compress": {"compressor", "bytes", "frame_bytes", "frame_ratio", "encode_gbps", "decode_gbps",
                     "encode_vs_memcpy", "decode_vs_memcpy", "pays_below_gbit_s"},
        "compress_push": {"compressor", "bytes", "slices", "threads", "encode_gbps", "ratio_vs_first_threads"}}
lines = [json.loads(l) for l in open(sys.argv[1])]
errors = [f"{o}: missing {keys[o['bench']] - o.keys()}" for o in lines if keys[o["bench"]] - o.keys()]
c = {(o["compressor"], o["bytes"]): o for o in lines if o["bench"] == "compress"}
want = {"none": 1.0, "fp16": 0.5, "bf16": 0.5, "topk:0.01": 0.03, "randomk:0.01": 0.03, "onebit": 0.04}
for name, ratio in want.items():
    for size in (4096, 65536):
        o = c.get((name, size))
        if o is None or not o["encode_gbps"] > 0 or not o["decode_gbps"] > 0 or o["frame_ratio"] > ratio + 0.01:
            errors.append(f"{name} at {size}: {o}")
# A push at 1 and 2 compression threads per lossy kind and size (the first is the reference).
p = {(o["compressor"], o["bytes"], o["threads"]): o for o in lines if o["bench"] == "compress_push"}
for name in [n for n in want if n != "none"]:
    for size in (4096, 65536):
        one, two = p.get((name, size, 1)), p.get((name, size, 2))
        if (one is None or two is None or one["ratio_vs_first_threads"] != 1.0 or not two["encode_gbps"] > 0
                or not two["ratio_vs_first_threads"] > 0 or one["slices"] != 8):
            errors.append(f"push of {name} at {size}: {one} {two}")
for e in errors:
    print("   ", e)
sys.exit(1 if errors else 0)
PY
  then pass "memcpy, 12 compress and 20 compress_push lines; frame sizes as each kind says"; else fail "compress_bench lines"; fi
else
  fail "compress_bench exited $?"; tail -5 "$tmp/err"
fi

echo "bad flags"
"$bench" --compressors=gzip >/dev/null 2>"$tmp/bad1.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q "not one of none, fp16" "$tmp/bad1.err"; then pass "--compressors=gzip: exit 2"
else fail "--compressors=gzip: exit $rc"; fi
"$bench" --sizes=6 >/dev/null 2>"$tmp/bad2.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--sizes" "$tmp/bad2.err"; then pass "--sizes=6: exit 2"; else fail "--sizes=6: exit $rc"; fi

"$bench" --push_threads=0 >/dev/null 2>"$tmp/bad3.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--push_threads: '0'" "$tmp/bad3.err"; then pass "--push_threads=0: exit 2"
else fail "--push_threads=0: exit $rc"; fi

[[ $failed -eq 0 ]] && echo "compress_bench_smoke_test: PASS" || echo "compress_bench_smoke_test: FAIL"
exit $failed
