#!/usr/bin/env bash
# scripts/local_cluster.sh as the README documents it: a job of 2 servers and
# 2 ps_exact_sum workers on 127.0.0.1, plain and with --secure, each also
# with --replicas=2 (every update forwarded between the servers, through
# shared memory, or their sockets with --shm=false); --consistency reaching
# workers given no mode, and refusing one that names another. Each worker's
# exact-sum check must pass ("exact_sum OK"), worker I must be rank I (its
# log file says so), and no server or worker of the job may be left.
#
#   tests/local_cluster_test.sh BIN_DIR
set -euo pipefail
bin="${1:?usage: $0 BIN_DIR}"
here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d /tmp/local_cluster_test.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

run() {  # label, then local_cluster.sh flags before --
  local label="$1"; shift
  local out="$tmp/$label"
  if ! PS_BIN_DIR="$bin" timeout 120 "$here/../scripts/local_cluster.sh" --out "$out" "$@" -- \
      "$bin/ps_exact_sum" --consistency=sync --steps=5 >"$tmp/$label.stdout" 2>&1; then
    echo "FAIL ($label): local_cluster.sh failed:"; tail -20 "$tmp/$label.stdout"; exit 1
  fi
  for i in 0 1; do
    grep -q "exact_sum OK" "$out/worker-$i.out" ||
      { echo "FAIL ($label): worker $i did not print 'exact_sum OK':"; cat "$out/worker-$i.out"; exit 1; }
    grep -q "worker $i joined" "$out/worker-$i.log" ||
      { echo "FAIL ($label): worker-$i.log is not worker rank $i:"; grep -m3 "joined" "$out/worker-$i.log"; exit 1; }
  done
  # Every server and worker names the scheduler's endpoint on its command line.
  local endpoint
  endpoint="$(grep -o 'scheduler at [^;]*' "$tmp/$label.stdout" | cut -d' ' -f3)"
  [[ -n "$endpoint" ]] || { echo "FAIL ($label): no 'scheduler at' line"; cat "$tmp/$label.stdout"; exit 1; }
  if pgrep -f -- "--scheduler=$endpoint" >/dev/null; then
    echo "FAIL ($label): processes of the job are still running:"; pgrep -af -- "--scheduler=$endpoint"; exit 1
  fi
  echo "ok ($label): 2 servers, 2 workers, exact sums, worker I is rank I"
}

run plain
run secure --secure
# Two copies of every slice (docs/fault-tolerance.md): the servers forward every
# update to each other, with CurveZMQ between them in the secure run.
run replicated --scheduler-flag --replicas=2
run replicated-secure --secure --scheduler-flag --replicas=2
# Servers on one host forward through shared memory; with it off, through
# their sockets (the backup refuses the offer). Options in the --opt=VALUE
# form: the scheduler gets --replicas=2 and every server --shm=false.
run replicated-socket --servers=2 --scheduler-flag=--replicas=2 --server-flag=--shm=false
forwards() {  # label, how: the servers' logs say how each reaches its backup
  for i in 0 1; do
    grep -q "backup server [01] is reached through $2" "$tmp/$1/server-$i.log" ||
      { echo "FAIL ($1): server $i does not reach its backup through $2:"; grep -m3 "backup server" "$tmp/$1/server-$i.log"; exit 1; }
  done
  echo "ok ($1): the servers forward through $2"
}
forwards replicated "shared memory"
forwards replicated-socket "its socket"

# --consistency is the job's mode: workers given none take it; one given
# another is refused by the scheduler, naming both.
out="$tmp/async"
PS_BIN_DIR="$bin" timeout 120 "$here/../scripts/local_cluster.sh" --out "$out" --consistency async -- \
  "$bin/ps_exact_sum" --steps=5 >"$tmp/async.stdout" 2>&1 ||
  { echo "FAIL (async): local_cluster.sh --consistency async failed:"; tail -20 "$tmp/async.stdout"; exit 1; }
for i in 0 1; do
  grep -q "exact_sum OK .*consistency=async" "$out/worker-$i.out" ||
    { echo "FAIL (async): worker $i did not run async:"; cat "$out/worker-$i.out"; exit 1; }
done
echo "ok (async): --consistency async reached workers given no mode"
set +e
PS_BIN_DIR="$bin" timeout 120 "$here/../scripts/local_cluster.sh" --out "$tmp/contra" --consistency=async -- \
  "$bin/ps_exact_sum" --consistency=sync --steps=5 >"$tmp/contra.stdout" 2>&1
rc=$?
set -e
want="registered a model with consistency sync, but the job runs with consistency async"
[[ $rc -ne 0 ]] && grep -rq "$want" "$tmp/contra.stdout" "$tmp/contra" ||
  { echo "FAIL (contra): exit $rc, no '$want':"; tail -20 "$tmp/contra.stdout"; exit 1; }
echo "ok (contra): a worker registering sync under --consistency=async is refused (exit $rc), naming both"

# More copies than servers: refused at start, naming the flag.
set +e
"$bin/ps_scheduler" --num_servers=2 --replicas=3 >"$tmp/k3.out" 2>&1
rc=$?
set -e
[[ $rc -eq 2 ]] || { echo "FAIL: ps_scheduler --num_servers=2 --replicas=3 exited $rc, want 2"; exit 1; }
grep -q "replicas: 3 not in \[1, 2\]" "$tmp/k3.out" || { echo "FAIL: no message naming --replicas:"; cat "$tmp/k3.out"; exit 1; }
echo "ok: --replicas=3 with 2 servers refused"
