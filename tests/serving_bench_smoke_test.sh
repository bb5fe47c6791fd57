#!/usr/bin/env bash
# Smoke test of serving_bench on a tiny budget: it exits 0, every stdout line
# is a serving_lookup JSON object with the keys docs/benchmarks.md
# documents and positive rates; bad flags exit 2.
#
#   tests/serving_bench_smoke_test.sh SERVING_BENCH
set -uo pipefail

bench="${1:?usage: $0 SERVING_BENCH}"
py=/usr/bin/python3
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_test serving_bench_smoke

echo "serving_bench: 20000 rows of dim 8, lookups of 200 and 1 ids"
if timeout 120 "$bench" --rows=20000 --dim=8 --ids=200,1 --lookups=50 >"$tmp/out.jsonl" 2>"$tmp/err"; then
  if "$py" - "$tmp/out.jsonl" <<'PY'
import json, sys
want = {"bench", "rows", "dim", "ids", "network", "p50_ms", "p99_ms", "lookups_per_s", "local_lookups_per_s",
        "ratio_vs_local"}
lines = [json.loads(l) for l in open(sys.argv[1])]
print("   ", lines)
ok = ([o["ids"] for o in lines] == [200, 1] and all(want <= o.keys() and o["bench"] == "serving_lookup" for o in lines)
      and all(o["p50_ms"] > 0 and o["p99_ms"] >= o["p50_ms"] and o["ratio_vs_local"] > 0 for o in lines))
sys.exit(0 if ok else 1)
PY
  then pass "two serving_lookup lines"; else fail "serving_lookup lines"; fi
else
  fail "serving_bench exited $?"; tail -5 "$tmp/err"
fi

echo "bad flags"
"$bench" --ids=0 >/dev/null 2>"$tmp/bad.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--ids: '0' is not a count" "$tmp/bad.err"; then pass "--ids=0: exit 2"
else fail "--ids=0: exit $rc"; fi

[[ $failed -eq 0 ]] && echo "serving_bench_smoke_test: PASS" || echo "serving_bench_smoke_test: FAIL"
exit $failed
