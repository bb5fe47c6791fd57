#!/usr/bin/env bash
# Smoke test of the benchmarks on tiny budgets: update_bench and pushpull_bench
# run, exit 0, and every stdout line is a JSON object with the keys
# docs/benchmarks.md documents. Bad flags exit 2.
#
#   tests/bench_smoke_test.sh UPDATE_BENCH PUSHPULL_BENCH
#
# Takes a few seconds.
set -uo pipefail

update_bench="${1:?usage: $0 UPDATE_BENCH PUSHPULL_BENCH}"
pushpull_bench="${2:?usage: $0 UPDATE_BENCH PUSHPULL_BENCH}"
py=/usr/bin/python3
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_test bench_smoke_test

# check_lines FILE EXPECTATION...: each stdout line parses as JSON and has the
# keys its "bench" value needs; each EXPECTATION "bench:N" says at least N
# lines of that bench.
check_lines() {
  "$py" - "$@" <<'PY'
import json, sys
path, expectations = sys.argv[1], sys.argv[2:]
keys = {
    "memcpy": {"bytes", "gbps"},
    "same_traffic": {"touched_per_param_byte", "bytes", "threads", "gbps", "memcpy_gbps", "ratio_vs_memcpy", "basis"},
    "update": {"optimizer", "bytes", "threads", "reps", "gbps", "memcpy_gbps", "ratio_vs_memcpy", "basis",
               "touched_per_param_byte", "touched_gbps", "ratio_touched_vs_memcpy", "goal", "goal_met",
               "same_traffic_gbps", "ratio_vs_same_traffic"},
    "raw_zmq": {"transport", "network", "bytes", "inflight", "iters", "reps", "gbps", "p50_us", "p99_us"},
    "pushpull": {"transport", "network", "servers", "workers", "bytes", "inflight", "iters", "reps",
                 "push_pull_gbps", "p50_us", "p99_us", "raw_zmq_gbps", "ratio_vs_raw", "ratio_vs_1_server"},
    "pull": {"transport", "network", "servers", "workers", "bytes", "iters", "p50_us", "p99_us",
             "raw_round_trip_p50_us", "ratio_p50_vs_raw"},
}
count, errors = {}, []
for n, line in enumerate(open(path), 1):
    try:
        obj = json.loads(line)
    except ValueError as e:
        errors.append(f"line {n} is not JSON ({e}): {line.strip()}")
        continue
    bench = obj.get("bench")
    if bench not in keys:
        errors.append(f"line {n}: unknown bench {bench!r}")
        continue
    missing = keys[bench] - obj.keys()
    if missing:
        errors.append(f"line {n} ({bench}): missing {sorted(missing)}")
    for k in ("gbps", "push_pull_gbps"):
        if k in obj and not obj[k] > 0:
            errors.append(f"line {n} ({bench}): {k} = {obj[k]} is not positive")
    if bench == "pushpull" and obj["servers"] > 1 and obj["ratio_vs_1_server"] is None:
        errors.append(f"line {n}: ratio_vs_1_server is null although servers=1 ran first")
    count[bench] = count.get(bench, 0) + 1
for e in expectations:
    bench, n = e.split(":")
    if count.get(bench, 0) < int(n):
        errors.append(f"expected at least {n} {bench} lines, got {count.get(bench, 0)}")
for e in errors:
    print("   ", e)
sys.exit(1 if errors else 0)
PY
}

echo "update_bench, 1 MiB, 1 repetition"
if "$update_bench" --sizes_mb=1 --reps=1 --min_ms=0 >"$tmp/update.jsonl" 2>"$tmp/update.err"; then
  if check_lines "$tmp/update.jsonl" memcpy:1 same_traffic:3 update:5; then pass "5 optimizers, their same-traffic bounds and memcpy"; else fail "update_bench lines"; fi
else
  fail "update_bench exited $?"; tail -5 "$tmp/update.err"
fi

echo "pushpull_bench, tcp, servers 1,2 x workers 1,2"
if timeout 120 "$pushpull_bench" --sizes=4096,1048576 --transports=tcp --servers=1,2 --workers=1,2 \
     --iters_bytes=1 --reps=1 >"$tmp/tcp.jsonl" 2>"$tmp/tcp.err"; then
  if check_lines "$tmp/tcp.jsonl" memcpy:2 raw_zmq:2 pushpull:8 pull:4; then pass "tcp lines"; else fail "tcp lines"; fi
else
  fail "pushpull_bench tcp exited $?"; tail -5 "$tmp/tcp.err"
fi

echo "pushpull_bench, ipc, 2 repetitions, 2 in flight, through the I/O thread"
if timeout 60 "$pushpull_bench" --sizes=4096 --transports=ipc --iters_bytes=1 --reps=2 --inflight=2 --caller_io=false \
     >"$tmp/ipc.jsonl" 2>"$tmp/ipc.err"; then
  if check_lines "$tmp/ipc.jsonl" raw_zmq:1 pushpull:1 pull:1; then pass "ipc lines"; else fail "ipc lines"; fi
else
  fail "pushpull_bench ipc exited $?"; tail -5 "$tmp/ipc.err"
fi

echo "pushpull_bench, tcp then shm: shm lines compared with tcp's"
if timeout 60 "$pushpull_bench" --sizes=4096,1048576 --transports=tcp,shm --iters_bytes=1 --reps=1 \
     >"$tmp/shm.jsonl" 2>"$tmp/shm.err"; then
  if check_lines "$tmp/shm.jsonl" raw_zmq:4 pushpull:4 pull:2 &&
     "$py" -c 'import json,sys; l=[json.loads(x) for x in open(sys.argv[1])]; s=[x for x in l if x.get("transport")=="shm" and x["bench"] in ("pushpull","pull")]; sys.exit(0 if len(s)==3 and all(x.get("ratio_vs_tcp",0)>0 or x.get("ratio_p50_vs_tcp",0)>0 for x in s) else 1)' "$tmp/shm.jsonl"; then
    pass "shm lines with ratio_vs_tcp and ratio_p50_vs_tcp"
  else
    fail "shm lines"
  fi
  if "$py" "$root/scripts/plot_pushpull.py" "$tmp/shm.jsonl" "$tmp/pushpull.png" >/dev/null &&
     [[ -s "$tmp/pushpull.png" ]]; then
    pass "plot_pushpull.py wrote the PNG"
  else
    fail "plot_pushpull.py"
  fi
  : >"$tmp/empty.jsonl"
  "$py" "$root/scripts/plot_pushpull.py" "$tmp/empty.jsonl" "$tmp/none.png" 2>/dev/null; rc=$?
  if [[ $rc -eq 2 && ! -e "$tmp/none.png" ]]; then pass "plot_pushpull.py: no lines: exit 2"; else fail "plot_pushpull.py on nothing: exit $rc"; fi
else
  fail "pushpull_bench shm exited $?"; tail -5 "$tmp/shm.err"
fi

echo "pushpull_bench --secure: plain and CurveZMQ in one run, callers not spinning"
keys_before="$(ls -d /tmp/pushpull-keys.* 2>/dev/null)"
if timeout 60 "$pushpull_bench" --sizes=4096 --transports=tcp --iters_bytes=1 --reps=1 --secure --caller_spin=0us \
     >"$tmp/secure.jsonl" 2>"$tmp/secure.err"; then
  if check_lines "$tmp/secure.jsonl" pushpull:2 pull:2 &&
     "$py" -c 'import json,sys; l=[json.loads(x) for x in open(sys.argv[1])]; p=[x for x in l if x["bench"]=="pushpull"]; sys.exit(0 if [x["secure"] for x in p]==[False,True] and p[1]["ratio_secure_vs_plain"]>0 else 1)' "$tmp/secure.jsonl"; then
    pass "secure lines with ratio_secure_vs_plain"
  else
    fail "secure lines"
  fi
else
  fail "pushpull_bench --secure exited $?"; tail -5 "$tmp/secure.err"
fi
if [[ "$(ls -d /tmp/pushpull-keys.* 2>/dev/null)" != "$keys_before" ]]; then
  fail "pushpull_bench --secure left its keys behind"
fi

echo "bad flags"
"$update_bench" --sizes_mb=0 >/dev/null 2>"$tmp/bad1.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--sizes_mb" "$tmp/bad1.err"; then pass "update_bench --sizes_mb=0: exit 2"; else fail "update_bench --sizes_mb=0: exit $rc"; fi
"$pushpull_bench" --workers=0 >/dev/null 2>"$tmp/bad2.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--workers" "$tmp/bad2.err"; then pass "pushpull_bench --workers=0: exit 2"; else fail "pushpull_bench --workers=0: exit $rc"; fi
"$pushpull_bench" --caller_spin=-1us >/dev/null 2>"$tmp/bad4.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--caller_spin" "$tmp/bad4.err"; then pass "pushpull_bench --caller_spin=-1us: exit 2"; else fail "pushpull_bench --caller_spin=-1us: exit $rc"; fi
"$pushpull_bench" --netns=nosuchnetx --transports=tcp >/dev/null 2>"$tmp/bad3.err"; rc=$?
if [[ $rc -ne 0 ]] && grep -q "netns.py up" "$tmp/bad3.err"; then pass "missing namespaces named: exit $rc"; else fail "--netns=nosuchnetx: exit $rc"; cat "$tmp/bad3.err"; fi

[[ $failed -eq 0 ]] && echo "bench_smoke_test: PASS" || echo "bench_smoke_test: FAIL"
exit $failed
