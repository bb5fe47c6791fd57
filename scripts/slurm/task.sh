#!/usr/bin/env bash
# One process of a Slurm training job. scripts/slurm/train.sbatch runs it, not
# you: once as the scheduler (--role=scheduler, in the batch step on the first
# node), then once per task of one `srun` step (--role=task), where the task's
# SLURM_PROCID picks the role:
#
#   SLURM_PROCID 0 .. S-1        server-I       (I = SLURM_PROCID)
#   SLURM_PROCID S .. S+W-1      worker-J       (J = SLURM_PROCID - S, started with --rank=J)
#
#   task.sh --role=scheduler|task --out=DIR --bin-dir=DIR --servers=S --workers=W
#           --addrs=NODE=IP[,NODE=IP...] [--scheduler=ENDPOINT] [--port=P]
#           [--keys-dir=DIR] [--insecure] [--checkpoint-dir=DIR] [--worker-binary=NAME] [--command=CMD]
#           [--scheduler-flag=F]... [--server-flag=F]... [--worker-flag=F]...
#
# Each process binds the address of its node (NODE=IP from --addrs, found by
# SLURMD_NODENAME; the batch script resolves every node's NodeAddr once), so
# that the other nodes can reach it. Its log goes to DIR/<name>.log on the
# node it runs on (appended, behind a header line, so that a requeued job
# keeps the earlier run's log); a worker's stdout (its JSON-line events)
# stays on the task's stdout, which srun brings back to the batch script.
# Each process appends "name pid" to DIR/pids-<node>.txt. The binary replaces
# this shell (exec), so that the SIGTERM of scancel reaches it directly.
set -euo pipefail

me="slurm/task.sh"
die() { echo "$me: $*" >&2; exit 2; }

role="" out="" bin_dir="" servers="" workers="" addrs="" scheduler="" port=0
keys_dir="" insecure=0 checkpoint_dir="" worker_binary=ps_worker command="" consistency=""
sched_flags=() server_flags=() worker_flags=()

parse_args() {
  local opt
  for opt in "$@"; do
    case "$opt" in
      --role=*) role="${opt#*=}" ;;
      --out=*) out="${opt#*=}" ;;
      --bin-dir=*) bin_dir="${opt#*=}" ;;
      --servers=*) servers="${opt#*=}" ;;
      --workers=*) workers="${opt#*=}" ;;
      --addrs=*) addrs="${opt#*=}" ;;
      --scheduler=*) scheduler="${opt#*=}" ;;
      --port=*) port="${opt#*=}" ;;
      --keys-dir=*) keys_dir="${opt#*=}" ;;
      --insecure) insecure=1 ;;
      --consistency=*) consistency="${opt#*=}" ;;
      --checkpoint-dir=*) checkpoint_dir="${opt#*=}" ;;
      --worker-binary=*) worker_binary="${opt#*=}" ;;
      --command=*) command="${opt#*=}" ;;
      --scheduler-flag=*) sched_flags+=("${opt#*=}") ;;
      --server-flag=*) server_flags+=("${opt#*=}") ;;
      --worker-flag=*) worker_flags+=("${opt#*=}") ;;
      *) die "unknown argument '$opt'" ;;
    esac
  done
  [[ "$role" == scheduler || "$role" == task ]] || die "--role must be scheduler or task"
  [[ -n "$out" && -n "$bin_dir" && -n "$servers" && -n "$workers" && -n "$addrs" ]] ||
    die "--out, --bin-dir, --servers, --workers and --addrs are required"
  [[ "$role" == scheduler || -n "$scheduler" ]] || die "--scheduler is required for --role=task"
}

# This node's IP address, from --addrs (NODE=IP pairs) by Slurm's node name.
node_addr() {
  local node="${SLURMD_NODENAME:?$me: SLURMD_NODENAME is not set: run under Slurm}" pair
  for pair in ${addrs//,/ }; do
    if [[ "${pair%%=*}" == "$node" ]]; then echo "${pair#*=}"; return 0; fi
  done
  die "node $node is not in --addrs=$addrs"
}

# Sets kf to the CurveZMQ flags of one process (KIND NAME): its own key pair,
# the public keys it admits (scheduler and servers: every *.pub of the keys
# directory), the scheduler's public key (servers and workers). With no keys
# directory: --insecure when the batch script was told to run insecure, else
# nothing (the binaries then allow loopback addresses only).
key_flags() {
  local kind="$1" name="$2"
  kf=()
  if [[ -z "$keys_dir" ]]; then
    if [[ $insecure -eq 1 ]]; then kf=(--insecure); fi
    return 0
  fi
  [[ -r "$keys_dir/$name.key" ]] ||
    die "$keys_dir/$name.key is missing or unreadable on node ${SLURMD_NODENAME:-?} (scripts/slurm/make_keys.sh makes it)"
  kf+=("--secret_key_file=$keys_dir/$name.key")
  [[ "$kind" == worker ]] || kf+=("--authorized_keys=$keys_dir")
  [[ "$kind" == scheduler ]] || kf+=("--scheduler_public_key=$keys_dir/scheduler.pub")
}

# Creates DIR on this node, opens DIR/NAME.log and records NAME's pid, which
# the exec that follows keeps.
start_log() {
  local name="$1"
  mkdir -p "$out"
  log="$out/$name.log"
  echo "=== $me: $name, job ${SLURM_JOB_ID:-?}, node ${SLURMD_NODENAME:-?}, pid $$, $(date '+%F %T')" >>"$log"
  echo "$name $$" >>"$out/pids-${SLURMD_NODENAME:-local}.txt"
}

run_scheduler() {
  local addr
  addr="$(node_addr)"
  key_flags scheduler scheduler
  start_log scheduler
  exec "$bin_dir/ps_scheduler" --host="$addr" --advertise_host="$addr" --port="$port" \
    --endpoint_file="$out/scheduler.endpoint" --num_servers="$servers" --num_workers="$workers" \
    ${consistency:+--consistency="$consistency"} "${kf[@]}" "${sched_flags[@]}" >>"$log" 2>&1
}

# A server applies updates on as many threads as Slurm gave its task CPUs.
run_server() {
  local i="$1" addr ckpt=()
  addr="$(node_addr)"
  key_flags server "server-$i"
  [[ -z "$checkpoint_dir" ]] || { mkdir -p "$checkpoint_dir"; ckpt=("--checkpoint_dir=$checkpoint_dir"); }
  start_log "server-$i"
  exec "$bin_dir/ps_server" --scheduler="$scheduler" --host="$addr" --advertise_host="$addr" \
    --num_threads="${SLURM_CPUS_PER_TASK:-1}" "${ckpt[@]}" "${kf[@]}" "${server_flags[@]}" >>"$log" 2>&1
}

# stdout (the JSON events) is left to srun; stderr (glog) goes to the log.
# With --command, the user's program with the job in its environment.
run_worker() {
  local j="$1"
  key_flags worker "worker-$j"
  start_log "worker-$j"
  # The job's mode, for a worker given none (ps_worker's --consistency, register_model).
  [[ -z "$consistency" ]] || export PS_CONSISTENCY="$consistency"
  if [[ -n "$command" ]]; then
    export PS_SCHEDULER="$scheduler" PS_RANK="$j" PS_NUM_WORKERS="$workers" PS_NUM_SERVERS="$servers"
    export PYTHONPATH="$(dirname "$bin_dir")/python${PYTHONPATH:+:$PYTHONPATH}"
    if [[ -n "$keys_dir" ]]; then
      export PS_SECRET_KEY_FILE="$keys_dir/worker-$j.key" PS_SCHEDULER_PUBLIC_KEY="$keys_dir/scheduler.pub"
    fi
    [[ $insecure -eq 0 ]] || export PS_INSECURE=1
    exec bash -c "$command" 2>>"$log"
  fi
  exec "$bin_dir/$worker_binary" --scheduler="$scheduler" --rank="$j" "${kf[@]}" "${worker_flags[@]}" 2>>"$log"
}

main() {
  parse_args "$@"
  if [[ "$role" == scheduler ]]; then run_scheduler; fi
  local id="${SLURM_PROCID:?$me: SLURM_PROCID is not set: run under srun}"
  if ((id < servers)); then run_server "$id"; fi
  if ((id < servers + workers)); then run_worker "$((id - servers))"; fi
  die "task $id has no role: the step has more than $servers servers + $workers workers tasks"
}

main "$@"
