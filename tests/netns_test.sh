#!/usr/bin/env bash
# Checks scripts/netns.py where network namespaces can be made (root, iproute2):
#   (a) `up` with 2 hosts: JSON with the hosts, delay_applied and the
#       measured RTT/bandwidth; the hosts reach each other over TCP; the
#       measured bandwidth respects the rate; `down` leaves nothing; a second
#       `down` succeeds;
#   (b) `up` killed with SIGTERM mid-setup cleans up after itself;
#   (c) `up` killed with SIGKILL mid-setup leaves a partial network that
#       `down` removes;
#   (d) an exception inside `with Network(...)`, and SIGTERM while a script
#       is inside the block, leave nothing behind;
#   (e) with PUSHPULL_BENCH given: `netns.py run ... -- pushpull_bench --netns`
#   (f) with TABLE_BENCH given too: `netns.py run ... -- table_bench --netns`
#       runs a cluster across the namespaces and the network is gone after.
# Where namespaces cannot be made, prints the reason and exits 77 (skipped).
#
#   tests/netns_test.sh [PUSHPULL_BENCH]
#
# Takes about 10 s.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
netns="$root/scripts/netns.py"
bench="${1:-}"
table_bench="${2:-}"
py=/usr/bin/python3
p="nt$((RANDOM % 10000))x"   # prefix of this run; must not end in a digit
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
bg_pid=""
# shellcheck disable=SC2317  # called by end_test
extra_cleanup() {
  if [[ -n "$bg_pid" ]] && kill -0 "$bg_pid" 2>/dev/null; then kill -9 "$bg_pid" 2>/dev/null; fi
  "$py" "$netns" down --prefix "$p" >/dev/null 2>&1
}
begin_test netns_test

reason="$("$py" "$netns" check 2>&1)" || skip "$reason"

# What of prefix $p exists now (namespaces, links, state file), one per line.
leftovers() {
  ip netns list | awk '{print $1}' | grep -E "^${p}[0-9]+$"
  ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^${p}([vp][0-9]+|br)$"
  ls "/run/ps-netns/$p.json" 2>/dev/null
}

assert_clean() {  # what
  local left
  left="$(leftovers | tr '\n' ' ')"
  if [[ -z "$left" ]]; then pass "$1: nothing left"; else fail "$1: left behind: $left"; fi
}

# Polls up to $1 seconds for a command to succeed.
poll() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    [[ $SECONDS -ge $deadline ]] && return 1
    sleep 0.01
  done
}

echo "(a) up, reach, down"
if "$py" "$netns" up --prefix "$p" --hosts 2 --rate 100mbit --delay-ms 0.5 >"$tmp/up.json" 2>"$tmp/up.err"; then
  if "$py" - "$tmp/up.json" "$p" <<'PY'
import json, sys
info = json.load(open(sys.argv[1])); p = sys.argv[2]
assert [h["ns"] for h in info["hosts"]] == [p + "0", p + "1"], info["hosts"]
assert [h["ip"] for h in info["hosts"]] == ["10.77.0.1", "10.77.0.2"], info["hosts"]
assert isinstance(info["delay_applied"], bool), info
assert info["delay_applied"] or info["delay_error"], info
assert info["rtt_p50_us"] > 0, info
# 100 Mbit/s links: the bulk transfer must not beat the rate.
assert 10 < info["bandwidth_mbit"] <= 110, info["bandwidth_mbit"]
print(f"    rtt p50 {info['rtt_p50_us']} us, {info['bandwidth_mbit']} Mbit/s, delay_applied {info['delay_applied']}")
PY
  then pass "up: JSON with hosts, delay_applied, RTT, rate-limited bandwidth"; else fail "up JSON: $(cat "$tmp/up.json")"; fi
  if ! grep -q '"delay_applied": true' "$tmp/up.json"; then
    if grep -q "WARNING" "$tmp/up.err"; then pass "no delay: warned on stderr"; else fail "no delay and no warning"; fi
  fi
  # A TCP exchange from host 0 to host 1, each side inside its namespace.
  ip netns exec "${p}1" "$py" -c '
import socket
s = socket.socket(); s.bind(("10.77.0.2", 47100)); s.listen(1); s.settimeout(10); print("ready", flush=True)
c, _ = s.accept(); c.sendall(c.recv(5).upper())' >"$tmp/srv.out" 2>&1 &
  bg_pid=$!
  poll 5 grep -qs ready "$tmp/srv.out"
  got="$(ip netns exec "${p}0" "$py" -c '
import socket
c = socket.create_connection(("10.77.0.2", 47100), timeout=5); c.sendall(b"hello"); print(c.recv(5).decode())' 2>&1)"
  wait "$bg_pid" 2>/dev/null; bg_pid=""
  if [[ "$got" == "HELLO" ]]; then pass "${p}0 reaches ${p}1 over TCP"; else fail "exchange: '$got'"; fi
  # The bridge needs no address: the root namespace has none on the subnet.
  if ! ip -o addr show | grep -q "10.77.0."; then pass "root namespace has no bridge address"; else fail "root namespace got an address"; fi
else
  fail "up exited $?: $(cat "$tmp/up.err")"
fi
if "$py" "$netns" down --prefix "$p" 2>"$tmp/down.err"; then pass "down"; else fail "down: $(cat "$tmp/down.err")"; fi
assert_clean "after down"
if "$py" "$netns" down --prefix "$p" 2>"$tmp/down2.err"; then pass "second down"; else fail "second down: $(cat "$tmp/down2.err")"; fi

echo "(b) up interrupted by SIGTERM"
"$py" "$netns" up --prefix "$p" --hosts 12 --no-measure >"$tmp/b.out" 2>"$tmp/b.err" &
bg_pid=$!
if poll 10 test -e "/var/run/netns/${p}1"; then
  kill -TERM "$bg_pid"
  wait "$bg_pid"; rc=$?; bg_pid=""
  if [[ $rc -eq 143 ]]; then pass "up exited 143 on SIGTERM"; else fail "up exited $rc on SIGTERM: $(cat "$tmp/b.err")"; fi
  assert_clean "after SIGTERM"
else
  fail "setup never started"
fi

echo "(c) up killed with SIGKILL, then down"
"$py" "$netns" up --prefix "$p" --hosts 12 --no-measure >/dev/null 2>&1 &
bg_pid=$!
if poll 10 test -e "/var/run/netns/${p}1"; then
  kill -KILL "$bg_pid"; wait "$bg_pid" 2>/dev/null; bg_pid=""
  if [[ -n "$(leftovers)" ]]; then pass "a partial network was left"; else fail "nothing left to test down on"; fi
  if "$py" "$netns" down --prefix "$p" 2>"$tmp/c.err"; then pass "down"; else fail "down: $(cat "$tmp/c.err")"; fi
  assert_clean "down after SIGKILL"
else
  fail "setup never started"
fi

echo "(d) Network context: exception, SIGTERM"
PYTHONPATH="$root/scripts" "$py" - "$p" <<'PY' >"$tmp/d.out" 2>&1
import os, sys, netns
p = sys.argv[1]
try:
    with netns.Network(p, 2, measure_network=False) as hosts:
        assert os.path.exists("/var/run/netns/" + hosts[0]["ns"])
        assert "delay_applied" in hosts.info
        raise RuntimeError("boom")
except RuntimeError as e:
    assert str(e) == "boom"
left = netns.leftovers(p)
assert not left, left
print("clean")
PY
if grep -q clean "$tmp/d.out"; then pass "exception inside the block"; else fail "exception case: $(cat "$tmp/d.out")"; fi
assert_clean "after the exception"
PYTHONPATH="$root/scripts" "$py" -c '
import sys, time, netns
with netns.Network(sys.argv[1], 2, measure_network=False):
    print("inside", flush=True)
    time.sleep(60)' "$p" >"$tmp/d2.out" 2>&1 &
bg_pid=$!
if poll 10 grep -qs inside "$tmp/d2.out"; then
  kill -TERM "$bg_pid"; wait "$bg_pid"; rc=$?; bg_pid=""
  if [[ $rc -eq 143 ]]; then pass "SIGTERM inside the block: exit 143"; else fail "exit $rc: $(cat "$tmp/d2.out")"; fi
  assert_clean "after SIGTERM inside the block"
else
  fail "never got inside the block: $(cat "$tmp/d2.out")"
fi

if [[ -n "$bench" ]]; then
  echo "(e) pushpull_bench across namespaces"
  if timeout 120 "$py" "$netns" run --prefix "$p" --hosts 5 --rate 1gbit --no-measure -- \
       "$bench" --netns="$p" --transports=tcp --servers=1,2 --workers=2 --sizes=4096,4194304 --iters_bytes=1 \
       >"$tmp/e.jsonl" 2>"$tmp/e.err"; then
    if "$py" - "$tmp/e.jsonl" "$p" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
p = sys.argv[2]
assert lines[0]["bench"] == "netns" and len(lines[0]["hosts"]) == 5, lines[0]
pp = [l for l in lines if l["bench"] == "pushpull"]
assert len(pp) == 4 and all(l["network"] == "netns:" + p for l in pp), pp
assert all(l["workers"] == 2 for l in pp), pp
PY
    then pass "netns lines"; else fail "netns lines: $(cat "$tmp/e.jsonl")"; fi
  else
    fail "netns.py run pushpull_bench exited $?: $(tail -5 "$tmp/e.err")"
  fi
  assert_clean "after netns.py run"
fi

if [[ -n "$table_bench" ]]; then
  echo "(f) table_bench across namespaces"
  if timeout 120 "$py" "$netns" run --prefix "$p" --hosts 5 --rate 1gbit --no-measure -- \
       "$table_bench" --netns="$p" --configs=1x1,2x2 --batch=1024 --steps=3 --memory_rows=0 \
       >"$tmp/f.jsonl" 2>"$tmp/f.err"; then
    if "$py" - "$tmp/f.jsonl" "$p" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
p = sys.argv[2]
t = [l for l in lines if l["bench"] == "table"]
assert [(l["servers"], l["workers"]) for l in t] == [(1, 1), (2, 2)], t
assert all(l["network"] == "netns:" + p and l["rows_per_s"] > 0 and l["table_rows"] > 0 for l in t), t
PY
    then pass "table lines"; else fail "table lines: $(cat "$tmp/f.jsonl")"; fi
  else
    fail "netns.py run table_bench exited $?: $(tail -5 "$tmp/f.err")"
  fi
  assert_clean "after netns.py run table_bench"
fi

[[ $failed -eq 0 ]] && echo "netns_test: PASS" || echo "netns_test: FAIL"
exit $failed
