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

echo "serving_bench: 20000 rows of dim 8, lookups of 200 and 1 ids; replicas following a job 0.5 s per run"
if timeout 120 "$bench" --rows=20000 --dim=8 --ids=200,1 --lookups=50 --follow_seconds=0.5 --follow_intervals=100ms \
    >"$tmp/out.jsonl" 2>"$tmp/err"; then
  if "$py" - "$tmp/out.jsonl" <<'PY'
import json, sys
want = {"bench", "rows", "dim", "ids", "network", "p50_ms", "p99_ms", "lookups_per_s", "local_lookups_per_s",
        "ratio_vs_local"}
every = [json.loads(l) for l in open(sys.argv[1])]
print("   ", every)
lines = [o for o in every if o["bench"] == "serving_lookup"]
ok = ([o["ids"] for o in lines] == [200, 1] and all(want <= o.keys() for o in lines)
      and all(o["p50_ms"] > 0 and o["p99_ms"] >= o["p50_ms"] and o["ratio_vs_local"] > 0 for o in lines))
# Following: the probe's pushes reached the replica, within a few intervals
# of 100 ms; two replicas and none both trained; rounds carried bytes.
fresh = [o for o in every if o["bench"] == "serving_freshness"]
cost = [o for o in every if o["bench"] == "serving_cost"]
sizes = [o for o in every if o["bench"] == "serving_round_bytes"]
ok = ok and len(fresh) == 1 and fresh[0]["pushes_seen"] > 0 and 0 < fresh[0]["p99_ms"] < 2000
ok = ok and len(cost) == 1 and cost[0]["steps_per_s_none"] > 0 and cost[0]["ratio"] > 0
ok = ok and [o["ids"] for o in sizes] == ["uniform", "zipf1.2"] and all(o["snapshot_bytes"] > 0 for o in sizes)
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
