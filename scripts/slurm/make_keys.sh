#!/usr/bin/env bash
# Makes the CurveZMQ key pairs of a secured Slurm job (scripts/slurm/train.sbatch
# --keys-dir DIR), one per process, with ps_keygen:
#
#   scripts/slurm/make_keys.sh --keys-dir DIR --servers S --workers W [--bin-dir DIR]
#
# DIR gets scheduler.key/.pub, server-I.key/.pub (I < S) and worker-J.key/.pub
# (J < W): NAME.key is the secret (mode 0600, never overwritten), NAME.pub the
# public key. Pairs already there are kept, so a larger job can reuse DIR. The
# job's scheduler and servers admit every *.pub of DIR; delete a .pub file to
# withdraw that key. DIR must be at the same path on every node of the job
# (shared filesystem, or copied with the modes kept: scp -rp) and readable only
# by the job's user. Exit codes: 0 done, 1 ps_keygen failed, 2 bad option.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
me="slurm/make_keys.sh"
die() { echo "$me: $*" >&2; exit 2; }

keys_dir="" servers="" workers="" bin_dir="$here/../../build/bin"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --keys-dir|--servers|--workers|--bin-dir)
      [[ $# -ge 2 ]] || die "option $1 needs a value"
      case "$1" in
        --keys-dir) keys_dir="$2" ;;
        --servers) servers="$2" ;;
        --workers) workers="$2" ;;
        --bin-dir) bin_dir="$2" ;;
      esac
      shift 2 ;;
    *) die "unknown option '$1'" ;;
  esac
done
[[ -n "$keys_dir" ]] || die "--keys-dir is required"
[[ "$servers" =~ ^[1-9][0-9]*$ ]] || die "--servers must be a positive integer, got '$servers'"
[[ "$workers" =~ ^[1-9][0-9]*$ ]] || die "--workers must be a positive integer, got '$workers'"
[[ -x "$bin_dir/ps_keygen" ]] || die "$bin_dir/ps_keygen not built (--bin-dir names where it is)"

names=(scheduler)
for ((i = 0; i < servers; i++)); do names+=("server-$i"); done
for ((j = 0; j < workers; j++)); do names+=("worker-$j"); done
made=0
for name in "${names[@]}"; do
  [[ -e "$keys_dir/$name.key" && -e "$keys_dir/$name.pub" ]] && continue
  if ! err="$("$bin_dir/ps_keygen" --out_dir="$keys_dir" --name="$name" 2>&1 >/dev/null)"; then
    echo "$me: ps_keygen failed for $name: $err" >&2
    exit 1
  fi
  made=$((made + 1))
done
echo "$me: $made key pairs made, $((${#names[@]} - made)) kept, in $keys_dir"
