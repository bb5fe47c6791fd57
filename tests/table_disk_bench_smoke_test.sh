#!/usr/bin/env bash
# Smoke test of table_disk_bench, small: it exits 0; each mode's line has
# the keys docs/benchmarks.md documents; every row read back equals the
# in-process reference (none lost on disk); the disk modes put rows there
# and refused none. A store bounded below the table (--disk_max_mb, the
# server's --table_disk_max_gb) at run time: the server keeps serving,
# refuses rows and counts them, and every row that differs from the
# reference is one of those counted. Bad flags exit 2 naming the flag.
#
#   tests/table_disk_bench_smoke_test.sh TABLE_DISK_BENCH
#
# Takes a few seconds.
set -uo pipefail

bench="${1:?usage: $0 TABLE_DISK_BENCH}"
py=/usr/bin/python3
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_test table_disk_bench_smoke

echo "table_disk_bench, 3 modes, 30 steps of 2048 ids, a 6 MiB budget"
if timeout 180 "$bench" --steps=30 --batch=2048 --budget_mb=6 --cache_mb=2 --check_rows=3000 --dir="$tmp/stores" \
     >"$tmp/out.jsonl" 2>"$tmp/err"; then
  if "$py" - "$tmp/out.jsonl" <<'PY'
import json, sys
keys = {"mode", "rows_per_s", "ratio_vs_memory", "distinct_rows", "budget_mb", "rows_over_budget", "memory_rows",
        "disk_rows", "disk_reads", "disk_writes", "evictions", "refused", "server_baseline_mb", "server_peak_mb",
        "peak_over_budget", "rows_checked", "rows_wrong"}
lines = [json.loads(l) for l in open(sys.argv[1])]
errors = []
if [o.get("mode") for o in lines] != ["memory", "disk", "disk_direct"]:
    errors.append(f"modes {[o.get('mode') for o in lines]}")
for o in lines:
    if o.get("bench") != "table_disk" or keys - o.keys():
        errors.append(f"{o.get('mode')}: missing {sorted(keys - o.keys())}")
        continue
    if o["rows_checked"] != 3000 or o["rows_wrong"] != 0:
        errors.append(f"{o['mode']}: {o['rows_wrong']} of {o['rows_checked']} rows differ from the reference")
    if o["mode"] != "memory":
        if not (o["disk_rows"] > 0 and o["disk_reads"] > 0 and o["rows_over_budget"] > 1):
            errors.append(f"{o['mode']}: the table did not outgrow memory onto disk: {o}")
        if o["refused"] != 0:
            errors.append(f"{o['mode']}: {o['refused']} rows refused")
for e in errors:
    print("   ", e)
sys.exit(1 if errors else 0)
PY
  then pass "memory, disk and disk_direct lines, every row checked exact"; else fail "table_disk_bench lines"; fi
else
  fail "table_disk_bench exited $?"; tail -5 "$tmp/err"
fi
[[ -d "$tmp/stores" ]] && [[ -n "$(ls -A "$tmp/stores")" ]] && pass "stores under --dir" || fail "nothing under --dir"

echo "a full disk at run time: a 1 MiB store for a table of about 8 MiB"
if timeout 180 "$bench" --modes=disk --steps=30 --batch=2048 --budget_mb=6 --cache_mb=2 --disk_max_mb=1 \
     --check_rows=3000 --dir="$tmp/full" >"$tmp/full.jsonl" 2>"$tmp/full.err"; then
  if "$py" - "$tmp/full.jsonl" <<'PY'
import json, sys
o = json.loads(open(sys.argv[1]).read())
ok = o["disk_max_mb"] == 1 and o["refused"] > 0 and o["rows_wrong"] <= o["refused"]
print(f"    refused {o['refused']}, rows differing {o['rows_wrong']} of {o['rows_checked']}, disk rows {o['disk_rows']}")
sys.exit(0 if ok else 1)
PY
  then pass "rows refused and counted; every differing row among them"; else fail "full store: $(cat "$tmp/full.jsonl")"; fi
else
  fail "table_disk_bench with a full store exited $?"; tail -5 "$tmp/full.err"
fi

echo "bad flags"
"$bench" --modes=ssd >/dev/null 2>"$tmp/bad1.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--modes" "$tmp/bad1.err"; then pass "--modes=ssd: exit 2"; else fail "--modes=ssd: exit $rc"; fi
"$bench" --budget_mb=8 --cache_mb=8 >/dev/null 2>"$tmp/bad2.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--cache_mb" "$tmp/bad2.err"; then pass "--cache_mb=budget: exit 2"; else fail "--cache_mb: exit $rc"; fi

[[ $failed -eq 0 ]] && echo "table_disk_bench_smoke_test: PASS" || echo "table_disk_bench_smoke_test: FAIL"
exit $failed
