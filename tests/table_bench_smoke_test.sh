#!/usr/bin/env bash
# Smoke test of table_bench on a tiny budget: it exits 0, every stdout line
# is a JSON object with the keys docs/benchmarks.md documents, the table
# grew on the servers and the bounded table evicted. Bad flags exit 2.
#
#   tests/table_bench_smoke_test.sh TABLE_BENCH
#
# Takes a few seconds.
set -uo pipefail

table_bench="${1:?usage: $0 TABLE_BENCH}"
py=/usr/bin/python3
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_test table_bench_smoke

echo "table_bench, configs 1x1, 2x2 and 2x2 with bf16 rows, batches of 2048 ids, 3 steps"
if timeout 120 "$table_bench" --configs=1x1,2x2,2x2:bf16 --batch=2048 --steps=3 --memory_rows=20000 \
     >"$tmp/out.jsonl" 2>"$tmp/err"; then
  if "$py" - "$tmp/out.jsonl" <<'PY'
import json, sys
keys = {
    "table_local": {"dim", "batch", "rows_per_s", "table_rows"},
    "table_evicting": {"dim", "rows_per_s", "ratio_vs_unbounded", "table_rows", "evictions"},
    "table_memory": {"dim", "optimizer", "rows", "resident_bytes_per_row", "raw_bytes_per_row", "ratio",
                     "accounted_bytes_per_row"},
    "table": {"servers", "workers", "dim", "batch", "network", "rows_per_s", "ratio_vs_local", "step_p50_ms",
              "table_rows", "table_bytes_per_row"},
}
lines = [json.loads(l) for l in open(sys.argv[1])]
errors = []
for o in lines:
    missing = keys.get(o.get("bench"), {"?"}) - o.keys()
    if missing:
        errors.append(f"{o.get('bench')}: missing {sorted(missing)}")
by = {}
for o in lines:
    by.setdefault(o["bench"], []).append(o)
if [(t["servers"], t["workers"], t["rows_on_wire"]) for t in by.get("table", [])] != [
        (1, 1, "float32"), (2, 2, "float32"), (2, 2, "bf16")]:
    errors.append(f"table lines for {[(t['servers'], t['workers']) for t in by.get('table', [])]}, "
                  "want 1x1, 2x2, 2x2:bf16")
elif not by["table"][2].get("ratio_vs_float32_rows", 0) > 0:
    errors.append(f"the bf16 line has no ratio to the float32 one: {by['table'][2]}")
for t in by.get("table", []):
    if not (t["rows_per_s"] > 0 and t["ratio_vs_local"] > 0 and t["table_rows"] > 0):
        errors.append(f"table {t['servers']}x{t['workers']}: {t}")
ev = by.get("table_evicting", [{}])[0]
if not ev.get("evictions", 0) > 0:
    errors.append(f"the bounded table evicted nothing: {ev}")
mem = by.get("table_memory", [{}])[0]
if not 1.0 <= mem.get("ratio", 0) <= 1.5:
    errors.append(f"resident bytes per row against raw: {mem}")
for e in errors:
    print("   ", e)
sys.exit(1 if errors else 0)
PY
  then pass "local, evicting, memory and 3 cluster lines"; else fail "table_bench lines"; fi
else
  fail "table_bench exited $?"; tail -5 "$tmp/err"
fi

echo "a job of 1 server that a second joins (1>2x1), against one started with 2 (2x1), 8 table shards"
if timeout 120 "$table_bench" --configs=2x1,1\>2x1 --table_shards=8 --batch=2048 --steps=3 --memory_rows=0 \
     >"$tmp/grown.jsonl" 2>"$tmp/grown.err"; then
  if "$py" - "$tmp/grown.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
grown = [o for o in lines if o["bench"] == "table_grown"]
want = {"servers", "servers_first", "rows_per_s_before", "workers", "table_shards", "rows_per_s",
        "ratio_vs_started_with_all", "table_rows"}
ok = (len(grown) == 1 and want <= grown[0].keys() and grown[0]["servers"] == 2 and grown[0]["servers_first"] == 1
      and grown[0]["table_shards"] == 8 and grown[0]["rows_per_s_before"] > 0 and grown[0]["rows_per_s"] > 0
      and grown[0]["ratio_vs_started_with_all"] > 0)
print("   ", grown)
sys.exit(0 if ok else 1)
PY
  then pass "a table_grown line: rows/s before and after the join, the ratio to 2x1"; else fail "table_grown line"; fi
else
  fail "table_bench 1>2x1 exited $?"; tail -5 "$tmp/grown.err"
fi

echo "ids that are small integers (--ids=ranks), bf16 rows: ids as they are (2x2:bf16:rawids), then delta coded"
if timeout 120 "$table_bench" --configs=2x2:bf16:rawids,2x2:bf16 --ids=ranks --id_space=100000 --dim=4 --batch=2048 \
     --steps=3 --memory_rows=0 >"$tmp/ids.jsonl" 2>"$tmp/ids.err"; then
  if "$py" - "$tmp/ids.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if json.loads(l)["bench"] == "table"]
print("   ", [(o["ids"], o["ids_on_wire"], o["server_bytes_in"], o.get("bytes_in_vs_raw_ids")) for o in lines])
ok = (len(lines) == 2 and [o["ids_on_wire"] for o in lines] == ["raw", "delta where shorter"]
      and all(o["ids"] == "ranks" and o["rows_on_wire"] == "bf16" for o in lines)
      # dim 4 in bf16: 8 bytes of values a row, 8 of id raw (and 8 more in the pull), 1 to 2 coded
      and 0 < lines[1]["bytes_in_vs_raw_ids"] < 0.6 and lines[1]["ratio_vs_raw_ids"] > 0)
sys.exit(0 if ok else 1)
PY
  then pass "the delta-coded run's servers took in under 0.6 of the raw run's bytes"; else fail "ids lines"; fi
else
  fail "table_bench --ids=ranks exited $?"; tail -5 "$tmp/ids.err"
fi

echo "bad flags"
"$table_bench" --configs=2x2:int8 >/dev/null 2>"$tmp/bad0.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "rows are ':fp16' or ':bf16'" "$tmp/bad0.err"; then pass "--configs=2x2:int8: exit 2"
else fail "--configs=2x2:int8: exit $rc"; fi
"$table_bench" --ids=sorted >/dev/null 2>"$tmp/bad4.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--ids: 'hashed' or 'ranks'" "$tmp/bad4.err"; then pass "--ids=sorted: exit 2"
else fail "--ids=sorted: exit $rc"; fi
"$table_bench" --configs=0x1 >/dev/null 2>"$tmp/bad1.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--configs" "$tmp/bad1.err"; then pass "--configs=0x1: exit 2"; else fail "--configs=0x1: exit $rc"; fi
"$table_bench" --zipf_s=1 >/dev/null 2>"$tmp/bad2.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--zipf_s" "$tmp/bad2.err"; then pass "--zipf_s=1: exit 2"; else fail "--zipf_s=1: exit $rc"; fi
"$table_bench" --configs=1\>2x1 >/dev/null 2>"$tmp/bad3.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "give --table_shards" "$tmp/bad3.err"; then pass "--configs=1>2x1 without --table_shards: exit 2"
else fail "--configs=1>2x1 without --table_shards: exit $rc"; fi

[[ $failed -eq 0 ]] && echo "table_bench_smoke_test: PASS" || echo "table_bench_smoke_test: FAIL"
exit $failed
