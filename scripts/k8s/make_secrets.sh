#!/usr/bin/env bash
# Makes a CurveZMQ key pair per node of the job with ps_keygen and prints the
# Kubernetes Secrets the manifests in scripts/k8s/base mount:
#
#   scripts/k8s/make_secrets.sh [--servers S] [--workers W] [--bin-dir DIR] | kubectl apply -f -
#
#   ps-scheduler-key   ps-scheduler.key                    the scheduler's key pair
#   ps-server-keys     ps-server-0.key ... ps-server-S-1   one per StatefulSet pod
#   ps-worker-keys     ps-worker-0.key ... ps-worker-W-1   one per Job index
#   ps-public-keys     every NAME.pub                      the scheduler's and servers'
#                                                          --authorized_keys; ps-scheduler.pub
#                                                          is everyone's --scheduler_public_key
#
# S and W (default 2 and 2) must match the StatefulSet's replicas and the
# Job's completions. Each node's NAME is its pod's name (the worker's with its
# index), so a refusal in a log names the pod. The keys are made in a private
# temporary folder that is removed before the script returns: the secret keys
# exist only in the output. Running it again makes new keys for every node:
# apply them, then restart the scheduler and the servers (they read keys at
# start). DIR (default build/bin) holds ps_keygen.
# Exit codes: 0 done, 1 ps_keygen failed, 2 bad option.
set -euo pipefail

me=make_secrets
root="$(cd "$(dirname "$0")/../.." && pwd)"
servers=2
workers=2
bin_dir="$root/build/bin"
tmp=""

die() { echo "$me: $*" >&2; exit 2; }

parse_args() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --servers) [[ $# -ge 2 ]] || die "--servers needs a value"; servers="$2"; shift 2 ;;
      --workers) [[ $# -ge 2 ]] || die "--workers needs a value"; workers="$2"; shift 2 ;;
      --bin-dir) [[ $# -ge 2 ]] || die "--bin-dir needs a value"; bin_dir="$2"; shift 2 ;;
      --servers=* | --workers=* | --bin-dir=*) local n="${1%%=*}"; set -- "$n" "${1#*=}" "${@:2}" ;;
      -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
      *) die "unknown option '$1' (--help)" ;;
    esac
  done
  [[ "$servers" =~ ^[1-9][0-9]*$ ]] || die "--servers must be a positive integer, got '$servers'"
  [[ "$workers" =~ ^[1-9][0-9]*$ ]] || die "--workers must be a positive integer, got '$workers'"
  [[ -x "$bin_dir/ps_keygen" ]] || die "$bin_dir/ps_keygen not found (build it, or give --bin-dir)"
}

# node_names: every node's name, one per line.
node_names() {
  local i
  echo ps-scheduler
  for ((i = 0; i < servers; i++)); do echo "ps-server-$i"; done
  for ((i = 0; i < workers; i++)); do echo "ps-worker-$i"; done
}

# secret NAME FILE...: one Secret whose keys are the files' names.
secret() {
  local name="$1" f
  shift
  printf -- '---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n' "$name"
  printf '  labels:\n    app.kubernetes.io/part-of: ps\ntype: Opaque\ndata:\n'
  for f in "$@"; do
    printf '  %s: %s\n' "$(basename "$f")" "$(base64 -w0 <"$f")"
  done
}

main() {
  parse_args "$@"
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/ps-secrets.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  local name
  for name in $(node_names); do
    "$bin_dir/ps_keygen" --out_dir="$tmp/keys" --name="$name" >/dev/null ||
      { echo "$me: ps_keygen --name=$name failed" >&2; exit 1; }
  done
  echo "# Made by scripts/k8s/make_secrets.sh --servers $servers --workers $workers: secret keys; keep private."
  secret ps-scheduler-key "$tmp/keys/ps-scheduler.key"
  secret ps-server-keys "$tmp"/keys/ps-server-*.key
  secret ps-worker-keys "$tmp"/keys/ps-worker-*.key
  secret ps-public-keys "$tmp"/keys/*.pub
}

main "$@"
