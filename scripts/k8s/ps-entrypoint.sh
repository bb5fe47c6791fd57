#!/usr/bin/env bash
# The container entrypoint of every role (installed as /usr/local/bin/ps-entrypoint):
#
#   ps-entrypoint BINARY [FLAGS...]      BINARY: ps_scheduler, ps_server, ps_worker or ps_exact_sum
#   ps-entrypoint run COMMAND [ARGS...]  a worker that is a program of your own (ps.connect())
#
# does what a pod needs before BINARY starts, then execs it with FLAGS and
# what it added:
#
#   * keys: Secret volumes are group-readable (kubelet adds the group bits
#     when the pod has an fsGroup, and the pod needs one to read them as a
#     non-root user), and every role refuses a secret key file that group or
#     others may read. So --secret_key_file=FILE is replaced by a copy made
#     with umask 077 in $PS_RUN_DIR (an in-memory emptyDir: never on disk).
#     A missing FILE stops the pod with how to create the Secrets.
#   * PS_INSECURE=true (ConfigMap ps-security): the key flags are dropped and
#     --insecure added: plaintext, for a cluster network of your own only.
#   * ps_scheduler with --state_file=F: --restore when F exists, so that a
#     restarted scheduler takes the job back instead of forming a new one.
#   * ps_server: --rank=<the pod's StatefulSet ordinal>, so that pod
#     ps-server-N is server rank N from the job's formation on. With
#     --checkpoint_dir=D (the pod's own volume, volumeClaimTemplates): when
#     D/server-N.ckpt exists (a restart), --restore_dir=D too, and the server
#     takes its rank back with its state; a volume holding another rank's
#     checkpoint and not N's is refused (a claim bound to the wrong pod).
#     A container restarted inside the same pod has the same IP and port; it
#     first waits $PS_SAME_ADDRESS_WAIT_S (7) seconds, longer than the
#     scheduler's heartbeat timeout (5 s) plus a heartbeat, so that the old
#     server is declared dead before the new one listens at its address
#     (docs/fault-tolerance.md).
#   * ps_server with PS_ELASTIC=true (the scheduler runs with --elastic, or
#     --replicas >= 2) and PS_FORMED_SERVERS=S (the scheduler's
#     --num_servers): --drain, so that scaling the StatefulSet down (SIGTERM
#     to the highest ordinals) moves a server's slices away before it exits;
#     and a pod of ordinal >= S, added by scaling up, joins the running job
#     (--join: the scheduler gives it the next rank) or, when its volume
#     holds a checkpoint (the pod restarted), takes that checkpoint's rank
#     back (--restore_dir alone: the rank is read from the file). A drained
#     server removes its checkpoint, so a pod scaled up again later joins.
#
#   * run: COMMAND gets the job in its environment, as scripts/ps_run gives
#     it: PS_SCHEDULER (required, e.g. ps-scheduler:9000), PS_RANK (default
#     JOB_COMPLETION_INDEX: an Indexed Job's pod I is rank I), and
#     PS_SECRET_KEY_FILE replaced by a private copy as above (with
#     PS_SCHEDULER_PUBLIC_KEY handed on); PS_INSECURE=true drops both keys.
#
# Environment: PS_BIN_DIR (where BINARY is; default: this script's folder),
# PS_RUN_DIR (default /run/ps), PS_INSECURE (true|false, default false),
# PS_SAME_ADDRESS_WAIT_S, and for ps_server POD_NAME (default $HOSTNAME),
# whose last '-' field is the ordinal. Exit code 2: refused to start.
set -euo pipefail

me=ps-entrypoint
bin_dir="${PS_BIN_DIR:-$(cd "$(dirname "$0")" && pwd)}"
run_dir="${PS_RUN_DIR:-/run/ps}"
args=()

die() { echo "$me: $*" >&2; exit 2; }
say() { echo "$me: $*" >&2; }

# flag_value NAME: the value of the last --NAME=VALUE in args (empty if none).
flag_value() {
  local a value=""
  for a in "${args[@]}"; do
    [[ "$a" == "--$1="* ]] && value="${a#--"$1"=}"
  done
  printf '%s' "$value"
}

has_flag() {
  local a
  for a in "${args[@]}"; do
    [[ "$a" == "--$1" || "$a" == "--$1="* ]] && return 0
  done
  return 1
}

# drop_flags NAME...: removes every --NAME and --NAME=VALUE from args.
drop_flags() {
  local a n keep=() drop
  for a in "${args[@]}"; do
    drop=0
    for n in "$@"; do [[ "$a" == "--$n" || "$a" == "--$n="* ]] && drop=1; done
    [[ $drop -eq 1 ]] || keep+=("$a")
  done
  args=("${keep[@]}")
}

# private_key_copy SRC: copies SRC into run_dir readable by this user only;
# prints the copy's path. Re-copied on every start (a rotated Secret wins).
private_key_copy() {
  local src="$1" dst
  [[ -f "$src" ]] || die "secret key file $src is missing: create the Secrets" \
    "(scripts/k8s/make_secrets.sh --servers S --workers W | kubectl apply -f -)," \
    "or set insecure: \"true\" in ConfigMap ps-security (no encryption: trusted networks only)"
  mkdir -p "$run_dir"
  chmod 700 "$run_dir"
  dst="$run_dir/$(basename "$src")"
  rm -f "$dst"
  # umask 077: the copy is never readable by group or others, not even while it is written.
  (umask 077 && cp "$src" "$dst")
  printf '%s' "$dst"
}

security_args() {
  case "${PS_INSECURE:-false}" in
    true)
      say "PS_INSECURE=true: plaintext, no keys (--insecure); anyone who reaches the pods can join the job"
      drop_flags secret_key_file authorized_keys scheduler_public_key insecure
      args+=(--insecure) ;;
    false)
      local key
      key="$(flag_value secret_key_file)"
      [[ -z "$key" ]] && return 0
      key="$(private_key_copy "$key")"
      drop_flags secret_key_file
      args+=("--secret_key_file=$key") ;;
    *) die "PS_INSECURE must be true or false, got '${PS_INSECURE}'" ;;
  esac
}

scheduler_args() {
  local state
  state="$(flag_value state_file)"
  if [[ -n "$state" && -s "$state" ]] && ! has_flag restore; then
    say "$state exists: taking the job back (--restore)"
    args+=(--restore)
  fi
}

# has_checkpoint DIR ORDINAL: whether DIR holds this rank's checkpoint (a
# restart); refuses a DIR that holds only other ranks' checkpoints.
has_checkpoint() {
  local dir="$1" ordinal="$2" f others=()
  [[ -f "$dir/server-$ordinal.ckpt" ]] && return 0
  for f in "$dir"/server-*.ckpt; do
    [[ "$(basename "$f")" =~ ^server-([0-9]+)\.ckpt$ ]] && others+=("${BASH_REMATCH[1]}")
  done
  [[ ${#others[@]} -eq 0 ]] ||
    die "$dir holds checkpoints of ranks ${others[*]} and none of rank $ordinal (this pod's ordinal): the wrong volume?"
  return 1
}

# scaled_server_args ORDINAL DIR: a pod added by scaling up (PS_ELASTIC): the
# one checkpoint DIR holds (a restart: its rank), or a join.
scaled_server_args() {
  local ordinal="$1" dir="$2" found=() f
  [[ -n "$dir" ]] && for f in "$dir"/server-*.ckpt; do [[ -f "$f" ]] && found+=("$f"); done
  [[ ${#found[@]} -le 1 ]] || die "$dir holds ${#found[@]} checkpoints (${found[*]}); a server's volume holds one"
  if [[ ${#found[@]} -eq 1 ]]; then
    say "pod $ordinal, added by scaling up, restarting from ${found[0]} (its rank)"
    args+=("--restore_dir=$dir")
  else
    say "pod $ordinal >= PS_FORMED_SERVERS=$PS_FORMED_SERVERS: joining the running job (--join) under a new rank"
    args+=(--join)
  fi
}

server_args() {
  local dir pod ordinal marker wait_s elastic="${PS_ELASTIC:-false}"
  pod="${POD_NAME:-${HOSTNAME:-}}"
  ordinal="${pod##*-}"
  [[ "$ordinal" =~ ^[0-9]+$ ]] || die "cannot tell the StatefulSet ordinal from pod name '$pod' (POD_NAME)"
  [[ "$elastic" == true || "$elastic" == false ]] || die "PS_ELASTIC must be true or false, got '$elastic'"
  [[ "$elastic" == false || "${PS_FORMED_SERVERS:-}" =~ ^[0-9]+$ ]] ||
    die "PS_ELASTIC=true needs PS_FORMED_SERVERS: the scheduler's --num_servers, the pods the job forms with"
  drop_flags rank
  dir="$(flag_value checkpoint_dir)"
  has_flag restore_dir && die "--restore_dir is set by $me from what the checkpoint directory holds; remove it"
  if [[ "$elastic" == true ]]; then
    has_flag drain || args+=(--drain)
  fi
  if [[ "$elastic" == true ]] && (( ordinal >= PS_FORMED_SERVERS )); then
    scaled_server_args "$ordinal" "$dir"
  else
    args+=("--rank=$ordinal")
    [[ -n "$dir" ]] || return 0
    if has_checkpoint "$dir" "$ordinal"; then
      say "restarting from $dir/server-$ordinal.ckpt as rank $ordinal"
      args+=("--restore_dir=$dir")
    else
      say "no checkpoint in $dir: first start, as rank $ordinal"
    fi
  fi
  marker="$run_dir/server-started"
  if [[ -e "$marker" ]]; then
    wait_s="${PS_SAME_ADDRESS_WAIT_S:-7}"
    say "restarted in the same pod (same address): waiting ${wait_s}s for the old server to be declared dead"
    sleep "$wait_s"
  fi
  mkdir -p "$run_dir" && touch "$marker"
}

# run COMMAND...: a user's worker program, the job in its environment.
run_command() {
  [[ $# -ge 1 ]] || die "usage: $me run COMMAND [ARGS...]"
  [[ -n "${PS_SCHEDULER:-}" ]] || die "run: set PS_SCHEDULER (the scheduler's HOST:PORT) in the pod's env"
  export PS_RANK="${PS_RANK:-${JOB_COMPLETION_INDEX:-}}"
  [[ "$PS_RANK" =~ ^[0-9]+$ ]] || die "run: no rank: set PS_RANK, or run as an Indexed Job (JOB_COMPLETION_INDEX)"
  case "${PS_INSECURE:-false}" in
    true)
      say "PS_INSECURE=true: plaintext, no keys"
      unset PS_SECRET_KEY_FILE PS_SCHEDULER_PUBLIC_KEY ;;
    false)
      [[ -z "${PS_SECRET_KEY_FILE:-}" ]] || PS_SECRET_KEY_FILE="$(private_key_copy "$PS_SECRET_KEY_FILE")" ;;
    *) die "PS_INSECURE must be true or false, got '${PS_INSECURE}'" ;;
  esac
  say "exec $* as rank $PS_RANK of the job at $PS_SCHEDULER"
  exec "$@"
}

main() {
  [[ $# -ge 1 ]] || die "usage: $me BINARY [FLAGS...] | $me run COMMAND [ARGS...]"
  local binary="$1"
  shift
  [[ "$binary" != run ]] || run_command "$@"
  case "$binary" in
    ps_scheduler | ps_server | ps_worker | ps_exact_sum) ;;
    *) die "unknown binary '$binary' (ps_scheduler, ps_server, ps_worker or ps_exact_sum)" ;;
  esac
  [[ -x "$bin_dir/$binary" ]] || die "$bin_dir/$binary not found"
  args=("$@")
  security_args
  [[ "$binary" == ps_scheduler ]] && scheduler_args
  [[ "$binary" == ps_server ]] && server_args
  say "exec $binary ${args[*]}"
  exec "$bin_dir/$binary" "${args[@]}"
}

main "$@"
