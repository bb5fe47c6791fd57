#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions called through trap and poll
# Checks scripts/ps_run with Python workers of the build's package ps:
#   (1) 2 workers, 2 servers, sync: exact sums, every line prefixed with its
#       rank, exit 0; the same with --secure (1 server);
#   (2) rank 1 exits 3 after connecting: exit 3, rank 1 and code 3 named;
#   (3) SIGINT to ps_run mid-run: exit 130;
#   (4) a script that never calls ps.connect(): non-zero within 15 s, saying so;
#   (5) ps.connect() with no address and no PS_SCHEDULER: ValueError naming it;
#   (6) the README's example script trains on 2 workers and saves a state_dict
#       that loads with strict=True;
#   (7), (8) SIGUSR1 adds a server to a running job (with --replicas 2, and
#       with --elastic --secure: the new server's key made and admitted),
#       SIGUSR2 drains it; exact sums;
#   (9) the README's script under --consistency async: the servers' events say
#       the model they hold is async; the same script naming "sync" itself is
#       refused, non-zero, with both modes named.
# After each run no process of its pids.txt may be left.
#
#   tests/ps_run_test.sh [BIN_DIR]     (default: build/bin)
#
# Takes about 15 s. Every wait polls for its condition with a deadline.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
ps_run="$root/scripts/ps_run"
py=/usr/bin/python3
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
run_pid=""
# The ps_run of (3), if it is still there, and workers (python3 on $tmp's
# scripts, which kill_job_leftovers does not know) of any run.
extra_cleanup() {
  if [[ -n "$run_pid" ]] && kill -0 "$run_pid" 2>/dev/null; then
    echo "cleanup: stopping ps_run (pid $run_pid)"
    kill -TERM "$run_pid" 2>/dev/null
    poll 6 pid_gone "$run_pid" || kill -9 "$run_pid" 2>/dev/null
  fi
  local f
  for f in "$tmp"/*/pids.txt; do
    [[ -f "$f" ]] && leftovers "$(dirname "$f")" | while read -r name pid _; do kill -9 "$pid" 2>/dev/null; done
  done
}
begin_job_test ps_run_test "${1:-}"
compgen -G "$(dirname "$bin")/python/ps/_ps*.so" >/dev/null ||
  skip "the Python package ps is not built in $(dirname "$bin")/python"

# leftovers OUT: "name pid cmdline" of each process of OUT/pids.txt still running.
leftovers() {
  local name pid cmd
  while read -r name pid; do
    cmd="$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")" || continue
    if [[ "$cmd" == "$bin/"* || "$cmd" == *"$tmp/"* || "$cmd" == *"$root/"* ]]; then
      echo "$name $pid $cmd"
    fi
  done <"$1/pids.txt"
}
check_nothing_left() {  # OUT LABEL
  local left
  if [[ ! -s "$1/pids.txt" ]]; then fail "$2: no pids.txt in $1"; return; fi
  left="$(leftovers "$1")"
  if [[ -z "$left" ]]; then pass "$2: none of the $(wc -l <"$1/pids.txt") processes of pids.txt is left"
  else fail "$2: processes left: $left"; fi
}

cat >"$tmp/fail.py" <<'EOF'
import sys
import ps
c = ps.connect(request_timeout=30)
if c.rank == 1:
    print("rank 1 leaving with code 3")
    sys.exit(3)
c.barrier("never", timeout=60)  # until ps_run stops it
EOF
cat >"$tmp/loop.py" <<'EOF'
import time
import ps
c = ps.connect(request_timeout=30)
print("running", flush=True)
while True:
    time.sleep(0.05)  # the script's "work" until SIGINT
EOF
cat >"$tmp/noconnect.py" <<'EOF'
print("not connecting")
EOF

# ---------------------------------------------------------------------------
echo "(1) 2 workers, 2 servers, sync: exact sums, prefixed lines, exit 0; then --secure"
run_exact() {  # LABEL, then ps_run flags
  local label="$1"; shift
  timeout -k 5 60 "$ps_run" --bin-dir "$bin" --workers 2 --consistency sync --out "$tmp/$label" "$@" \
    -- "$py" "$root/tests/exact_sum_script.py" >"$tmp/$label.out" 2>"$tmp/$label.err"
  local rc=$? r
  if [[ $rc -eq 0 ]]; then pass "$label: exit code 0"; else fail "$label: exit code $rc"; show "$tmp/$label.err"; fi
  for r in 0 1; do
    if grep -qx "\[rank$r\]: sum 96 expected 96" "$tmp/$label.out" &&
       grep -qx "\[rank$r\]: rank $r on stderr" "$tmp/$label.err"; then
      pass "$label: rank $r's exact sum on stdout and its stderr line, prefixed [rank$r]: "
    else fail "$label: rank $r's lines"; show "$tmp/$label.out"; show "$tmp/$label.err"; fi
  done
  check_nothing_left "$tmp/$label" "$label"
}
run_exact plain --servers 2
for f in scheduler.log server-0.log server-1.log; do
  [[ -s "$tmp/plain/$f" ]] || fail "plain: no $f in --out"
done
run_exact secure --servers 1 --secure
# --table-disk-dir: a store per server under DIR, the sums exact all the same.
run_exact disk --servers 2 --table-disk-dir "$tmp/disk-tables"
if [[ -d "$tmp/disk-tables/server-0/live" && -d "$tmp/disk-tables/server-1/live" ]]; then
  pass "disk: --table-disk-dir made DIR/server-0 and DIR/server-1"
else fail "disk: no store per server under --table-disk-dir"; ls -R "$tmp/disk-tables" 2>&1 | head; fi

# ---------------------------------------------------------------------------
echo "(2) rank 1 exits 3 after connecting: ps_run exits 3 naming rank 1 and code 3"
timeout -k 5 60 "$ps_run" --bin-dir "$bin" --workers 2 --servers 1 --out "$tmp/fail" \
  -- "$py" "$tmp/fail.py" >"$tmp/fail.out" 2>&1
rc=$?
if [[ $rc -eq 3 ]]; then pass "exit code 3"; else fail "exit code $rc (expected 3)"; show "$tmp/fail.out"; fi
if grep -q "^ps_run: rank 1 (pid [0-9]*) exited with code 3" "$tmp/fail.out" &&
   grep -q "^    rank 1 leaving with code 3" "$tmp/fail.out"; then
  pass "names rank 1 and code 3, with its last lines"
else fail "no 'rank 1 ... exited with code 3' with its output"; show "$tmp/fail.out"; fi
check_nothing_left "$tmp/fail" "rank 1 failed"

# ---------------------------------------------------------------------------
echo "(3) SIGINT to ps_run mid-run: exit 130"
"$ps_run" --bin-dir "$bin" --workers 2 --servers 1 --out "$tmp/int" \
  -- "$py" "$tmp/loop.py" >"$tmp/int.out" 2>&1 &
run_pid=$!
if poll 30 grep -q "^\[rank1\]: running" "$tmp/int.out" && poll 5 grep -q "^\[rank0\]: running" "$tmp/int.out"; then
  kill -INT "$run_pid"
  if poll 15 pid_gone "$run_pid"; then
    wait "$run_pid"; rc=$?
    if [[ $rc -eq 130 ]]; then pass "exit code 130"; else fail "exit code $rc (expected 130)"; show "$tmp/int.out"; fi
  else fail "ps_run still running 15 s after SIGINT"; show "$tmp/int.out"; fi
else fail "the workers did not print 'running' within 35 s"; show "$tmp/int.out"; fi
check_nothing_left "$tmp/int" "SIGINT"

# ---------------------------------------------------------------------------
echo "(4) a script that never calls ps.connect(): non-zero within 15 s, saying so"
start=$SECONDS
timeout -k 5 60 "$ps_run" --bin-dir "$bin" --workers 2 --servers 1 --out "$tmp/noconnect" \
  -- "$py" "$tmp/noconnect.py" >"$tmp/noconnect.out" 2>&1
rc=$? took=$((SECONDS - start))
if [[ $rc -ne 0 && $took -le 15 ]]; then pass "exit code $rc after ${took} s"
else fail "exit code $rc after ${took} s (expected non-zero within 15 s)"; show "$tmp/noconnect.out"; fi
if grep -q "^ps_run: every worker exited with code 0 without the job forming.*ps.connect()" "$tmp/noconnect.out"; then
  pass "says the workers ended without the job forming (ps.connect())"
else fail "no message about the job not forming"; show "$tmp/noconnect.out"; fi
check_nothing_left "$tmp/noconnect" "no connect"

# ---------------------------------------------------------------------------
echo "(5) ps.connect() with no address and no PS_SCHEDULER: ValueError naming PS_SCHEDULER"
if env -u PS_SCHEDULER -u PS_RANK PYTHONPATH="$(dirname "$bin")/python" "$py" -c '
import ps
try:
    ps.connect()
except ValueError as e:
    print(e)
    raise SystemExit(0 if "PS_SCHEDULER" in str(e) else 1)
raise SystemExit(1)' >"$tmp/noenv.out" 2>&1; then
  pass "ValueError: $(cat "$tmp/noenv.out")"
else fail "no ValueError naming PS_SCHEDULER"; show "$tmp/noenv.out"; fi

# ---------------------------------------------------------------------------
echo "(6) the README's own script (worker/python/examples/my_model.py), 2 workers, 10 steps each: exit 0," \
  "and the state_dict it saved loads with strict=True into the same module"
timeout -k 5 120 "$ps_run" --bin-dir "$bin" --workers 2 --servers 2 --out "$tmp/mine" \
  -- "$py" "$root/worker/python/examples/my_model.py" "$tmp/mine.pt" 1 1280 >"$tmp/mine.out" 2>&1
rc=$?
if [[ $rc -eq 0 ]] && grep -q "^\[rank1\]: epoch 0: loss" "$tmp/mine.out"; then pass "exit code 0, both ranks trained"
else fail "exit code $rc"; show "$tmp/mine.out"; fi
if PYTHONPATH="$(dirname "$bin")/python" "$py" - "$tmp/mine.pt" >"$tmp/mine.load" 2>&1 <<'EOF'; then
import sys
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10))
state = torch.load(sys.argv[1])
model.load_state_dict(state, strict=True)
tracked = int(state["1.num_batches_tracked"])
print(f"loaded {len(state)} entries; BatchNorm saw {tracked} batches")
sys.exit(0 if tracked == 10 else 1)
EOF
  pass "$(cat "$tmp/mine.load")"
else fail "model.pt"; show "$tmp/mine.load"; fi
check_nothing_left "$tmp/mine" "my_model.py"

# ---------------------------------------------------------------------------
# A job of S servers started with FLAGS grows by one server (SIGUSR1), which
# then drains (SIGUSR2): both workers' sums exact, exit 0.
scale_case() {  # NAME S FLAGS...
  local name=$1 servers=$2; shift 2
  "$ps_run" --bin-dir "$bin" --workers 2 --servers "$servers" "$@" --out "$tmp/$name" \
    -- /bin/sh -c "exec '$bin/ps_exact_sum' --scheduler=\"\$PS_SCHEDULER\" --steps=600 --step_ms=10 \
       --secret_key_file=\"\${PS_SECRET_KEY_FILE:-}\" --scheduler_public_key=\"\${PS_SCHEDULER_PUBLIC_KEY:-}\" \
       --table_shards=8 --admit_after=1 --progress_every=50" >"$tmp/$name.out" 2>&1 &
  run_pid=$!
  if poll 60 grep -q "exact_sum steps=100" "$tmp/$name.out"; then
    kill -USR1 "$run_pid"
    if poll 30 grep -q "(0 moves to go)" "$tmp/$name/scheduler.log"; then
      pass "SIGUSR1: server $servers joined and slices moved to it"
    else fail "SIGUSR1: no moves to a new server within 30 s"; show "$tmp/$name.out"; fi
    if [[ " $* " == *" --secure "* ]]; then
      if grep -q "zap\[scheduler\]: 1 new authorised keys in $tmp/$name/keys" "$tmp/$name/scheduler.log"; then
        pass "--secure: the scheduler admitted the new server's key without a restart"
      else fail "--secure: the scheduler never read the new server's key"; show "$tmp/$name/scheduler.log"; fi
    fi
    kill -USR2 "$run_pid"
    if poll 30 grep -q "^ps_run: server-$servers drained and left the job" "$tmp/$name.out"; then
      pass "SIGUSR2: server-$servers drained and left"
    else fail "SIGUSR2: server-$servers did not leave within 30 s"; show "$tmp/$name.out"; fi
    if poll 60 pid_gone "$run_pid"; then
      wait "$run_pid"; rc=$?
      ok="$(grep -c "exact_sum OK .*dense_sum=\([0-9.]*\) expected_sum=\1 " "$tmp/$name.out")"
      if [[ $rc -eq 0 && $ok -eq 2 ]]; then pass "exit code 0, both workers' sums exact"
      else fail "exit code $rc, $ok exact workers"; show "$tmp/$name.out"; fi
    else fail "ps_run still running"; show "$tmp/$name.out"; fi
  else fail "the workers did not reach step 100 within 60 s"; show "$tmp/$name.out"; fi
  run_pid=""
  check_nothing_left "$tmp/$name" "$name"
}
echo "(7) --replicas 2: SIGUSR1 adds a server to the running job, SIGUSR2 drains it; exact sums, exit 0"
scale_case scale 2 --replicas 2
echo "(8) --elastic --secure, one server with one copy of each slice: grows to two (its new key admitted), then back to one"
scale_case elastic 1 --elastic --secure

# ---------------------------------------------------------------------------
echo "(9) --consistency async reaches the README's script; a script that registers sync is refused"
"$py" - "$root/README.md" "$tmp/readme_script.py" "$tmp/readme_sync.py" <<'PY' || fail "README.md has no usable python block"
import re, sys
script = re.findall(r"```python\n(.*?)```", open(sys.argv[1]).read(), re.S)[0]
open(sys.argv[2], "w").write(script)
wrap = 'optimizer={"kind": "adam", "lr": 1e-3})'
assert wrap in script, "the README's DistributedModule line changed"
open(sys.argv[3], "w").write(script.replace(wrap, wrap[:-1] + ', consistency="sync")'))
PY
timeout -k 5 120 "$ps_run" --bin-dir "$bin" --workers 2 --servers 2 --consistency async --out "$tmp/async" \
  -- "$py" "$tmp/readme_script.py" >"$tmp/async.out" 2>&1
rc=$?
modes="$(cat "$tmp/async"/server-*.events 2>/dev/null | "$py" -c '
import json, sys
print(" ".join(sorted(json.loads(l)["consistency"] for l in sys.stdin if json.loads(l)["event"] == "slices_created")))')"
if [[ $rc -eq 0 && "$modes" == "async async" ]]; then pass "exit 0; both servers created their slices async"
else fail "exit $rc, the servers' modes: '$modes'"; show "$tmp/async.out"; fi
check_nothing_left "$tmp/async" "--consistency async"
timeout -k 5 120 "$ps_run" --bin-dir "$bin" --workers 2 --servers 2 --consistency async --out "$tmp/contra" \
  -- "$py" "$tmp/readme_sync.py" >"$tmp/contra.out" 2>&1
rc=$?
if [[ $rc -ne 0 ]] && grep -q "registered a model with consistency sync, but the job runs with consistency async" \
    "$tmp/contra.out"; then
  pass "exit $rc: $(grep -m1 -o "registered a model with consistency sync, but the job runs with consistency async" "$tmp/contra.out")"
else fail "a sync script under --consistency async: exit $rc"; show "$tmp/contra.out"; fi
check_nothing_left "$tmp/contra" "contradicting script"

echo
if [[ $failed -eq 0 ]]; then echo "ps_run_test: all checks passed"; else echo "ps_run_test: FAILED"; fi
exit $failed
