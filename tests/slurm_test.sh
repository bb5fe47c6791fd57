#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions called through trap and poll
# Checks scripts/slurm/train.sbatch on a real one-node Slurm cluster that this
# test starts in a temp dir (munged, slurmctld, slurmd; ports picked free on
# 127.0.0.1; the node is "localhost" at 127.0.0.1 with 2 CPUs):
#   (a) a secured job (keys made by scripts/slurm/make_keys.sh): 1 server,
#       2 workers, sync, 1 epoch of Fashion-MNIST: COMPLETED with exit code 0,
#       rank 0's final test accuracy >= 0.84 (0.8578 measured) in the job's
#       output and in summary.json, each process's log in the output dir and
#       CurveZMQ on, the server's checkpoint written at the orderly shutdown,
#       no process of the job left;
#   (b) scancel: a 30-epoch job cancelled once the workers report progress:
#       every process of the job ends within 20 s, the server writes its
#       final checkpoint on SIGTERM (log line, and the file written after the
#       cancel), the batch script waits for them and reports exit code 143;
#   (c) a keys directory without the job's keys: the job fails with exit code
#       2 before starting anything, naming make_keys.sh;
#   (d) --command: a Python script of the user's own as the workers, joining
#       through the environment: COMPLETED, both workers' exact sums, no
#       process left.
# Skips (exit 77, saying why) without root or without Slurm and munge
# (Debian: slurmctld slurmd slurm-client munge).
#
#   tests/slurm_test.sh [BIN_DIR]     (default: build/bin)
#
# Takes about 30 s (45 s on a busy machine). Every wait polls for its
# condition with a deadline. The daemons and every process of the jobs are
# stopped by pid on exit, also when a check fails (outputs are then kept in
# the temp dir).
set -Eeuo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"  # poll, pid_gone, pass, fail, show
sbatch_script="$root/scripts/slurm/train.sbatch"
py=/usr/bin/python3
ACCURACY_MIN=0.84  # 1 epoch, sync, seed 1: 0.8578 in every run so far

skip_unless_runnable() {
  if [[ "$(id -u)" != 0 ]]; then
    echo "SKIP: needs root (slurmd must run as root to launch jobs)"; exit 77
  fi
  local c missing=()
  for c in munged munge slurmctld slurmd sbatch srun scontrol scancel sinfo getent "$py"; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "SKIP: not installed: ${missing[*]} (Debian: apt-get install slurmctld slurmd slurm-client munge)"
    exit 77
  fi
}
skip_unless_runnable

bin="${1:-$root/build/bin}"
bin="$(cd "$bin" && pwd)" || { echo "FAIL: bin dir '${1:-}' not found"; exit 1; }
for b in ps_scheduler ps_server ps_worker ps_keygen; do
  [[ -x "$bin/$b" ]] || { echo "FAIL: $bin/$b not built"; exit 1; }
done
# Nothing of a Slurm job this test may run inside leaks into its own cluster.
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM|SBATCH|SALLOC|SRUN)_' || true)
tmp="$(mktemp -d /tmp/slurm_test.XXXXXX)"
chmod 755 "$tmp"  # munged wants its socket's directories searchable by all
conf="$tmp/slurm.conf"
# Slurm commands and daemons get our slurm.conf by SLURM_CONF in their
# environment (a job inherits it from sbatch, slurmstepd from slurmd), which
# is how cleanup finds whatever they started; this shell does not export it,
# so that its own children are not taken for theirs.
sl() { SLURM_CONF="$conf" "$@"; }
munge_pid="" ctld_pid="" slurmd_pid="" jobs=() failed=0



alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }

# Pids of the processes whose environment holds NAME=VALUE (one grep over
# every /proc/PID/environ; a process gone meanwhile is no match).
procs_with_env() {  # NAME=VALUE
  grep -lzx -- "$1" /proc/[0-9]*/environ 2>/dev/null | sed -n 's|^/proc/\([0-9]*\)/environ$|\1|p' |
    grep -vx "$$" || true
}

# ---------------------------------------------------------------------------
# The cluster

free_ports() {  # N: N ports free on 127.0.0.1 now
  "$py" -c 'import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}

start_munge() {
  mkdir -p "$tmp/munge"
  head -c 1024 /dev/urandom >"$tmp/munge/munge.key"
  chmod 600 "$tmp/munge/munge.key"
  munged -F --socket="$tmp/munge/socket" --key-file="$tmp/munge/munge.key" --pid-file="$tmp/munge/munged.pid" \
    --log-file="$tmp/munge/munged.log" --seed-file="$tmp/munge/munged.seed" >"$tmp/munge/munged.out" 2>&1 &
  munge_pid=$!
  munge_up() { munge --socket="$tmp/munge/socket" -n </dev/null >/dev/null 2>&1 || ! alive "$munge_pid"; }
  if ! poll 10 munge_up || ! alive "$munge_pid"; then
    echo "FAIL: munged did not start"; show "$tmp/munge/munged.out"; exit 1
  fi
}

# The daemons bind the address their host name resolves to where that is
# loopback (CommunicationParameters=NoInAddrAny); elsewhere they would bind
# it and not 127.0.0.1, so they listen on every address (munge still
# authenticates every message).
write_conf() {
  local ctld_port="$1" slurmd_port="$2" comm=""
  [[ "$(getent ahostsv4 "$(hostname)" | awk 'NR == 1 { print $1 }')" == 127.* ]] &&
    comm="CommunicationParameters=NoInAddrAny,NoCtldInAddrAny"
  mkdir -p "$tmp/state" "$tmp/spool" "$tmp/log"
  cat >"$conf" <<EOF
ClusterName=pstest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/socket
$comm
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
KillWait=15
NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=2 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=10 State=UP
EOF
}

node_idle() { [[ "$(sl sinfo -h -N -o %T 2>/dev/null)" == idle ]] || ! alive "$ctld_pid" || ! alive "$slurmd_pid"; }

start_slurm() {
  local ports ctld_port slurmd_port
  ports="$(free_ports 2)"
  read -r ctld_port slurmd_port <<<"$ports"
  write_conf "$ctld_port" "$slurmd_port"
  SLURM_CONF="$conf" slurmctld -D >"$tmp/log/slurmctld.out" 2>&1 &
  ctld_pid=$!
  SLURM_CONF="$conf" slurmd -D -N localhost >"$tmp/log/slurmd.out" 2>&1 &
  slurmd_pid=$!
  if poll 30 node_idle && alive "$ctld_pid" && alive "$slurmd_pid"; then
    pass "slurmctld (pid $ctld_pid) and slurmd (pid $slurmd_pid) up, node localhost idle (ports $ports)"
  else
    fail "the node is not idle within 30 s: $(sl sinfo -h -N -o %T 2>&1)"
    show "$tmp/log/slurmctld.out"; show "$tmp/log/slurmd.out"; exit 1
  fi
}

# ---------------------------------------------------------------------------
# Cleanup: the jobs, whatever our cluster started (it all carries our
# SLURM_CONF in its environment), then the daemons; all by pid.

ppid() { awk '/^PPid:/ { print $2 }' "/proc/$1/status" 2>/dev/null || true; }

stop_pids() {  # seconds pid...: SIGTERM, then SIGKILL to those left after the deadline
  local limit="$1" p; shift
  [[ $# -gt 0 ]] || return 0
  kill -TERM "$@" 2>/dev/null || true
  none_alive() { for p in "$@"; do alive "$p" && return 1; done; return 0; }
  poll "$limit" none_alive "$@" || { echo "cleanup: SIGKILL to $*"; kill -KILL "$@" 2>/dev/null || true; }
}

# What our cluster started that is still running, but the daemons and their
# own children (slurmctld's slurmscriptd), which stop with them.
leftovers() {
  local daemons=" $munge_pid $ctld_pid $slurmd_pid " p
  procs_with_env "SLURM_CONF=$conf" | while read -r p; do
    [[ "$daemons" == *" $p "* || "$daemons" == *" $(ppid "$p") "* ]] || echo "$p"
  done
}
no_leftovers() { [[ -z "$(leftovers)" ]]; }

cleanup() {
  local j p left
  if alive "$ctld_pid"; then
    for j in "${jobs[@]}"; do sl scancel "$j" 2>/dev/null || true; done
  fi
  # A cancelled job ends by itself (its servers checkpoint) within KillWait.
  poll 20 no_leftovers || true
  mapfile -t left < <(leftovers)
  if [[ ${#left[@]} -gt 0 ]]; then echo "cleanup: stopping ${#left[@]} processes of the jobs"; fi
  stop_pids 5 "${left[@]}"
  mapfile -t left < <(for p in "$slurmd_pid" "$ctld_pid"; do [[ -z "$p" ]] || echo "$p"; done)
  stop_pids 10 "${left[@]}"
  [[ -z "$munge_pid" ]] || stop_pids 5 "$munge_pid"
  wait 2>/dev/null || true
  if [[ $failed -eq 0 ]]; then rm -rf "$tmp"; else echo "outputs kept in $tmp"; fi
}
trap cleanup EXIT
trap 'echo "interrupted"; failed=1; exit 130' INT TERM
trap 'failed=1; echo "FAIL: line $LINENO: unexpected error (exit $?)"' ERR

# ---------------------------------------------------------------------------
# Jobs

submit() {  # name ntasks train.sbatch args...: sets jid
  local name="$1" ntasks="$2"; shift 2
  jid="$(sl sbatch --parsable --job-name="ps-$name" --nodes=1 --ntasks="$ntasks" --overcommit --time=5 \
    --chdir="$tmp" --output="$tmp/$name.out" "$sbatch_script" --bin-dir "$bin" --out "$tmp/$name" "$@")"
  jobs+=("$jid")
}

job_state() { sl scontrol show job "$1" -o 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
job_exit() { sl scontrol show job "$1" -o 2>/dev/null | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p'; }
job_ended() { [[ "$(job_state "$1")" =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED)$ ]]; }

# Waits for job $1 to end; checks its state and exit code (STATE CODE).
expect_end() {  # jid seconds state exit_code
  local state code
  if ! poll "$2" job_ended "$1"; then
    fail "job $1 still $(job_state "$1") after $2 s"; return 1
  fi
  state="$(job_state "$1")" code="$(job_exit "$1")"
  # shellcheck disable=SC2053  # $4 may be a pattern ('*')
  if [[ "$state" == "$3" && "$code" == $4 ]]; then pass "job $1 $state, exit code $code"
  else fail "job $1 $state, exit code $code (expected $3, $4)"; return 1
  fi
}

# No process of the job is left: neither one of pids-*.txt (checked to be
# still this build's binary, as pids may be reused) nor anything carrying
# the job's id in its environment (batch script, srun, tasks).
job_procs_left() {  # jid out
  local name pid f
  for f in "$2"/pids-*.txt; do
    [[ -f "$f" ]] || continue
    while read -r name pid; do
      [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$bin/"* ]] && echo "$name:$pid"
    done <"$f"
  done
  procs_with_env "SLURM_JOB_ID=$1"
}
no_job_procs() { [[ -z "$(job_procs_left "$1" "$2")" ]]; }

expect_no_procs() {  # jid out seconds
  local n
  n="$(cat "$2"/pids-*.txt 2>/dev/null | wc -l)"
  if poll "$3" no_job_procs "$1" "$2"; then
    pass "none of the $n processes of pids-*.txt, nor any other process of job $1, is left"
  else
    fail "processes of job $1 still running after $3 s: $(job_procs_left "$1" "$2" | tr '\n' ' ')"
  fi
}

# Rank 0's final accuracy: printed in the job's output, the same in summary.json.
expect_accuracy() {  # name
  local out="$tmp/$1" acc
  acc="$(sed -n 's/^train.sbatch: test accuracy \([0-9.]*\) (rank 0, final evaluation)$/\1/p' "$tmp/$1.out")"
  if [[ -n "$acc" ]] && "$py" - "$out/summary.json" "$acc" "$ACCURACY_MIN" <<'PY'; then
import json, sys
s = json.load(open(sys.argv[1]))
acc, least = float(sys.argv[2]), float(sys.argv[3])
ok = s["test_accuracy"] == acc and acc >= least and s["exit_code"] == 0 and (s["servers"], s["workers"]) == (1, 2)
print(f"    summary.json: test_accuracy {s['test_accuracy']}, exit_code {s['exit_code']}, "
      f"{s['servers']} server, {s['workers']} workers, {s['wall_s']} s; {s['security']}")
sys.exit(0 if ok else 1)
PY
    pass "test accuracy $acc >= $ACCURACY_MIN, in the job's output and in summary.json"
  else
    fail "no test accuracy >= $ACCURACY_MIN (got '${acc}') in $tmp/$1.out and summary.json"; show "$tmp/$1.out"
  fi
}

expect_logs() {  # name
  local out="$tmp/$1" missing=() n
  for n in scheduler server-0 worker-0 worker-1; do [[ -s "$out/$n.log" ]] || missing+=("$n.log"); done
  if [[ ${#missing[@]} -eq 0 ]]; then pass "scheduler, server-0, worker-0 and worker-1 logs in $out"
  else fail "missing logs in $out: ${missing[*]}"
  fi
}

expect_checkpoint() {  # name why not_before_s
  local ckpt="$tmp/$1-ckpt/server-0.ckpt" log="$tmp/$1/server-0.log" line
  line="$(grep -m1 "server 0: checkpoint [0-9]* ($2)" "$log" || true)"
  if [[ -n "$line" && -s "$ckpt" && "$(stat -c %Y "$ckpt")" -ge "$3" ]]; then
    pass "server-0 wrote $ckpt ($(stat -c %s "$ckpt") bytes): ${line#*] }"
  else
    fail "no checkpoint '($2)' at or after $3 in $ckpt"; show "$log"
    if grep -q "zmq::error_t" "$log"; then
      echo "  (ps_server died of an uncaught zmq::error_t: a signal interrupting zmq::poll in" \
        "PollSet::Wait, common/net/poll_set.cc, throws EINTR)"
    fi
  fi
}

# ---------------------------------------------------------------------------

case_a() {
  echo "(a) secured job, 1 server, 2 workers, sync, 1 epoch: expects COMPLETED, exit 0, test accuracy" \
    ">= $ACCURACY_MIN, the logs, the shutdown checkpoint, no process left"
  local t0 keys="$tmp/keys"
  "$root/scripts/slurm/make_keys.sh" --keys-dir "$keys" --servers 1 --workers 2 --bin-dir "$bin" | sed 's/^/  /'
  t0="$(date +%s)"
  submit a 3 --servers 1 --checkpoint-dir "$tmp/a-ckpt" --keys-dir "$keys" -- --epochs=1
  expect_end "$jid" 90 COMPLETED 0:0 || show "$tmp/a.out"
  expect_accuracy a
  expect_logs a
  if grep -q "CurveZMQ on" "$tmp/a/server-0.log" && grep -q "CurveZMQ on" "$tmp/a/worker-0.log"; then
    pass "CurveZMQ on in the server's and worker-0's logs"
  else
    fail "no 'CurveZMQ on' in server-0.log and worker-0.log"
  fi
  expect_checkpoint a "orderly shutdown" "$t0"
  expect_no_procs "$jid" "$tmp/a" 5
}

case_b() {
  echo "(b) scancel: 30 epochs, cancelled once training runs: expects every process gone within 20 s," \
    "the server's final checkpoint, exit code 143 in summary.json"
  submit b 3 --servers 1 --checkpoint-dir "$tmp/b-ckpt" -- --epochs=30 --progress_every=0.5s
  local t_cancel
  training() { grep -q '"event":"progress"' "$tmp/b/events.jsonl" 2>/dev/null || job_ended "$jid"; }
  if poll 60 training && ! job_ended "$jid"; then pass "the workers report progress"
  else fail "no progress from job $jid within 60 s (state $(job_state "$jid"))"; show "$tmp/b.out"; return
  fi
  t_cancel="$(date +%s)"
  sl scancel "$jid"
  expect_no_procs "$jid" "$tmp/b" 20
  expect_end "$jid" 20 CANCELLED '*' || show "$tmp/b.out"
  expect_checkpoint b "final, before stopping" "$t_cancel"
  if grep -q '"exit_code": 143' "$tmp/b/summary.json" 2>/dev/null &&
    grep -q "^train.sbatch: stopped by signal 15" "$tmp/b.out"; then
    pass "the batch script waited for the job and reported exit code 143"
  else
    fail "summary.json or the job's output lacks the stop by SIGTERM"; show "$tmp/b.out"
  fi
}

case_c() {
  echo "(c) --keys-dir without the job's keys: expects the job to fail with exit code 2 naming make_keys.sh"
  mkdir -p "$tmp/no-keys"
  submit c 3 --servers 1 --keys-dir "$tmp/no-keys" -- --epochs=1
  expect_end "$jid" 30 FAILED 2:0 || true
  if grep -q "scheduler.key or .pub is missing: scripts/slurm/make_keys.sh" "$tmp/c.out" && [[ ! -e "$tmp/c" ]]; then
    pass "$(head -n 1 "$tmp/c.out")"
  else
    fail "the job's output does not name the missing keys, or it created $tmp/c"; show "$tmp/c.out"
  fi
}

echo "slurm_test: a one-node cluster in $tmp"
start_munge
start_slurm
case_d() {
  echo "(d) --command: a user's script (tests/exact_sum_script.py) as the 2 workers: expects COMPLETED, exit 0," \
    "each worker's exact sum in the job's output, no process left"
  submit d 3 --servers 1 --command "$py $root/tests/exact_sum_script.py"
  expect_end "$jid" 60 COMPLETED 0:0 || show "$tmp/d.out"
  local sums
  sums="$(grep -c "^sum 96 expected 96$" "$tmp/d/events.jsonl" 2>/dev/null || true)"
  if [[ "$sums" == 2 ]] && grep -q "every worker's command exited 0" "$tmp/d.out"; then
    pass "both workers pulled the exact sum (sum 96 expected 96) and the job says so"
  else
    fail "$sums of 2 exact sums in $tmp/d/events.jsonl"; show "$tmp/d.out"; show "$tmp/d/events.jsonl"
  fi
  expect_no_procs "$jid" "$tmp/d" 5
}

case_a
case_b
case_c
case_d
echo
if [[ $failed -eq 0 ]]; then echo "slurm_test: all checks passed in $SECONDS s"; else echo "slurm_test: FAILED"; fi
exit $failed
