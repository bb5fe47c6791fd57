#!/usr/bin/env bash
# Runs a whole job on this machine as separate processes: one scheduler, S
# servers and W workers, all on 127.0.0.1 with ephemeral ports.
#
#   scripts/local_cluster.sh [--servers S] [--workers W] [--out DIR] [--secure]
#                            [--scheduler-flag F]... [--server-flag F]...
#                            -- WORKER_BINARY [WORKER_FLAGS...]
#
# Worker I gets --scheduler=ADDRESS and --rank=I (ps_worker and ps_exact_sum
# take both) before WORKER_FLAGS, so that "worker I" and its logs name its rank. With --secure,
# every process gets a throwaway CurveZMQ key pair made by ps_keygen in
# DIR/keys (replaced on each run) and the flags to use it: every socket is
# authenticated and encrypted, and only the job's own keys are admitted
# (docs/security.md). Logs go to DIR
# (default: a fresh directory under /tmp). Worker output is streamed with a
# "[worker N]" prefix. If any process fails, the others are stopped (by pid),
# the script says which one died and how, and exits non-zero. Nothing is left
# running when it returns, also when interrupted.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bin="${PS_BIN_DIR:-$here/../build/bin}"
servers=2
workers=2
out=""
sched_flags=()
server_flags=()
secure=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --servers) servers="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --secure) secure=1; shift ;;
    --scheduler-flag) sched_flags+=("$2"); shift 2 ;;
    --server-flag) server_flags+=("$2"); shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "local_cluster: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[[ $# -ge 1 ]] || { echo "local_cluster: missing '-- WORKER_BINARY [flags]'" >&2; exit 2; }
[[ "$servers" =~ ^[1-9][0-9]*$ ]] || { echo "local_cluster: --servers must be a positive integer, got '$servers'" >&2; exit 2; }
[[ "$workers" =~ ^[1-9][0-9]*$ ]] || { echo "local_cluster: --workers must be a positive integer, got '$workers'" >&2; exit 2; }
worker_bin="$1"; shift
[[ "$worker_bin" == */* ]] || worker_bin="$bin/$worker_bin"
need=(--bin ps_scheduler --bin ps_server)
((secure)) && need+=(--bin ps_keygen)
/usr/bin/python3 "$(dirname "$0")/launch/preflight.py" local_cluster --bin-dir "$bin" "${need[@]}" || exit 2
[[ -x "$worker_bin" ]] || { echo "local_cluster: $worker_bin is not built: run \`cmake --build build\`" >&2; exit 2; }
out="${out:-$(mktemp -d /tmp/ps_job_XXXXXX)}"
mkdir -p "$out"

# key_flags ROLE NAME: sets kf to the security flags of one process (none
# without --secure).
keys="$out/keys"
key_flags() {
  kf=()
  [[ $secure -eq 1 ]] || return 0
  kf+=("--secret_key_file=$keys/$2.key")
  [[ "$1" == worker ]] || kf+=("--authorized_keys=$keys")
  [[ "$1" == scheduler ]] || kf+=("--scheduler_public_key=$keys/scheduler.pub")
}
if [[ $secure -eq 1 ]]; then
  rm -f "$keys"/*.key "$keys"/*.pub  # throwaway keys of an earlier run in this directory
  names=(scheduler)
  for ((i = 0; i < servers; i++)); do names+=("server-$i"); done
  for ((i = 0; i < workers; i++)); do names+=("worker-$i"); done
  for name in "${names[@]}"; do
    "$bin/ps_keygen" --out_dir="$keys" --name="$name" >/dev/null 2>"$out/keygen.log" ||
      { echo "local_cluster: ps_keygen failed:" >&2; cat "$out/keygen.log" >&2; exit 1; }
  done
  echo "local_cluster: CurveZMQ on; throwaway keys in $keys"
fi

declare -A name_of=()
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'echo "local_cluster: interrupted; stopping every process" >&2; exit 130' INT TERM

start() {  # name log cmd...
  local name="$1" log="$2"; shift 2
  "$@" >"$log" 2>&1 &
  pids+=($!)
  name_of[$!]="$name"
}

rm -f "$out/scheduler.endpoint"
key_flags scheduler scheduler
start scheduler "$out/scheduler.log" "$bin/ps_scheduler" --port=0 --num_servers="$servers" \
  --num_workers="$workers" --endpoint_file="$out/scheduler.endpoint" "${kf[@]}" "${sched_flags[@]}"
for _ in $(seq 100); do
  [[ -s "$out/scheduler.endpoint" ]] && break
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 0.1
done
if [[ ! -s "$out/scheduler.endpoint" ]]; then
  echo "local_cluster: scheduler did not start; its log:" >&2; tail -5 "$out/scheduler.log" >&2; exit 1
fi
endpoint="$(cat "$out/scheduler.endpoint")"
echo "local_cluster: scheduler at $endpoint; $servers servers, $workers workers; logs in $out"
for ((i = 0; i < servers; i++)); do
  key_flags server "server-$i"
  start "server $i" "$out/server-$i.log" "$bin/ps_server" --scheduler="$endpoint" "${kf[@]}" "${server_flags[@]}"
done
for ((i = 0; i < workers; i++)); do
  # Worker stdout is shown live with a prefix; its stderr (logs) goes to a file.
  key_flags worker "worker-$i"
  ( "$worker_bin" --scheduler="$endpoint" --rank="$i" "${kf[@]}" "$@" 2>"$out/worker-$i.log" | tee "$out/worker-$i.out" |
      sed -u "s/^/[worker $i] /" ) &
  pids+=($!)
  name_of[$!]="worker $i"
done

status=0
declare -A live=()
for p in "${pids[@]}"; do live[$p]=1; done
while [[ ${#live[@]} -gt 0 ]]; do
  set +e
  wait -n -p done_pid "${!live[@]}"
  code=$?
  set -e
  unset "live[$done_pid]"
  name="${name_of[$done_pid]:-?}"
  if [[ $code -ne 0 ]]; then
    echo "local_cluster: $name (pid $done_pid) failed with exit code $code; stopping the others" >&2
    log="$out/${name// /-}.log"
    [[ -f "$log" ]] && { echo "--- last lines of $log:" >&2; tail -5 "$log" >&2; }
    status=1
    break
  fi
done
if [[ $status -eq 0 ]]; then
  echo "local_cluster: job finished; every process exited 0"
fi
exit $status
