#!/usr/bin/env bash
# Trains the SpamAssassin spam/ham text classifier with a whole job on this
# machine: one scheduler, S servers and W ps_spam_worker processes on
# 127.0.0.1 (token embeddings in the servers' table "tokens"), and reports
# the final test accuracy and AUC, the wall time, the throughput, the table's
# rows and a plot of test accuracy and AUC against wall time.
#
#   scripts/train_spam.sh [--workers N] [--servers S]
#       [--consistency sync|async|ssp:K] [--epochs E] [--out DIR] [--bin-dir DIR]
#       [--scheduler-flag F]... [--server-flag F]... [-- EXTRA_PS_SPAM_WORKER_FLAGS...]
#
# Defaults: 2 workers, 2 servers, sync, 3 epochs, out/spam-<YYYYmmdd-HHMMSS>
# in the repository, build/bin. Options take their value as the next word or
# after '=' (--workers=4). Everything after '--' goes to every worker (see
# build/bin/ps_spam_worker --help), e.g.
#   scripts/train_spam.sh --consistency async -- --dim=64 --row_lr=0.1
# With the default build/bin, the binaries that are missing are built first
# (cmake, into build/); the corpus must be installed (scripts/install_deps.sh,
# or scripts/fetch_spam_assassin.sh) unless --data_dir is passed on.
#
# DIR gets summary.json (test_accuracy, test_auc, samples_per_s, table_rows,
# ...), metrics.csv, events.jsonl, accuracy.png, pids.txt and one log per
# process. Exit codes: 0 done, 1 the job failed (the failed process is named
# with the end of its log), 2 bad option, nothing built or no corpus, 130
# interrupted. Every process of the job is stopped before it returns.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
me="train_spam"
corpus=/usr/local/share/datasets/spam-assassin  # ps::kDefaultSpamDir

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "$me: $*" >&2; echo "($me --help for usage)" >&2; exit 2; }

workers=2
servers=2
consistency=sync
epochs=3
out=""
bin_dir="$root/build/bin"
sched_flags=()
server_flags=()
while [[ $# -gt 0 ]]; do
  opt="$1"
  case "$opt" in
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    --*=*) name="${opt%%=*}"; val="${opt#*=}"; shift ;;
    --*)
      name="$opt"
      case "$name" in
        --workers|--servers|--consistency|--epochs|--out|--bin-dir|--scheduler-flag|--server-flag)
          [[ $# -ge 2 ]] || die "option $name needs a value"
          val="$2"; shift 2 ;;
        *) die "unknown option '$opt'" ;;
      esac ;;
    *) die "unexpected argument '$opt' (extra ps_spam_worker flags go after '--')" ;;
  esac
  case "$name" in
    --workers) workers="$val" ;;
    --servers) servers="$val" ;;
    --consistency) consistency="$val" ;;
    --epochs) epochs="$val" ;;
    --out) out="$val" ;;
    --bin-dir) bin_dir="$val" ;;
    --scheduler-flag) sched_flags+=("--scheduler-flag=$val") ;;
    --server-flag) server_flags+=("--server-flag=$val") ;;
    *) die "unknown option '$name'" ;;
  esac
done

[[ "$workers" =~ ^[1-9][0-9]*$ ]] || die "--workers must be a positive integer, got '$workers'"
[[ "$servers" =~ ^[1-9][0-9]*$ ]] || die "--servers must be a positive integer, got '$servers'"
[[ "$epochs" =~ ^[1-9][0-9]*$ ]] || die "--epochs must be a positive integer, got '$epochs'"
[[ "$consistency" =~ ^(sync|async|ssp:[0-9]+)$ ]] ||
  die "--consistency must be sync, async or ssp:K (K >= 0), got '$consistency'"
[[ -n "$bin_dir" ]] || die "--bin-dir must not be empty"

# The corpus, unless the workers are given another one.
if [[ " $* " != *" --data_dir"* && ! -d "$corpus" ]]; then
  echo "$me: the SpamAssassin corpus is not installed at $corpus" \
    "(scripts/fetch_spam_assassin.sh installs it)" >&2
  exit 2
fi

# Build what is missing (only into the default build/; another --bin-dir
# must hold the binaries already).
missing=()
for pair in ps_scheduler:ps_scheduler_bin ps_server:ps_server_bin ps_spam_worker:ps_spam_worker; do
  [[ -x "$bin_dir/${pair%%:*}" ]] || missing+=("$pair")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ "$(cd "$bin_dir" 2>/dev/null && pwd)" != "$root/build/bin" ]]; then
    echo "$me: $bin_dir/${missing[0]%%:*} not built (cmake --build build --target ${missing[0]#*:})" >&2
    exit 2
  fi
  targets=()
  for pair in "${missing[@]}"; do targets+=("${pair#*:}"); done
  echo "$me: building ${targets[*]} into $root/build" >&2
  [[ -f "$root/build/CMakeCache.txt" ]] ||
    cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
  cmake --build "$root/build" -j"$(nproc)" --target "${targets[@]}" >&2
fi
if [[ -z "$out" ]]; then
  out="$root/out/spam-$(date +%Y%m%d-%H%M%S)"
  base="$out"; n=2
  while [[ -e "$out" ]]; do out="$base-$n"; n=$((n + 1)); done
fi

exec /usr/bin/python3 "$here/launch_job.py" --out="$out" --bin-dir="$bin_dir" --worker-binary=ps_spam_worker \
  --workers="$workers" --servers="$servers" --consistency="$consistency" --epochs="$epochs" \
  "${sched_flags[@]}" "${server_flags[@]}" -- "$@"
