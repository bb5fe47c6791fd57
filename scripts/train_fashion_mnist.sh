#!/usr/bin/env bash
# Trains the Fashion-MNIST MLP with a whole job on this machine: one scheduler,
# S servers and W ps_worker processes on 127.0.0.1, and reports the final test
# accuracy, the wall time, the throughput and a plot of test accuracy against
# wall time.
#
#   scripts/train_fashion_mnist.sh [--workers N] [--servers S]
#       [--consistency sync|async|ssp:K] [--epochs E] [--device cpu|cuda|null]
#       [--placement auto|layer|FILE] [--stages K [--micro-batches M]]
#       [--out DIR] [--bin-dir DIR]
#       [--scheduler-flag F]... [--server-flag F]... [--worker-binary NAME]
#       [--table-disk-dir DIR] [--network loopback|emulated [--rate R] [--delay-ms D]]
#       [-- EXTRA_PS_WORKER_FLAGS...]
#
# Defaults: 2 workers, 2 servers, sync, 10 epochs, cpu, auto placement,
# out/train-<YYYYmmdd-HHMMSS> in the repository, build/bin. Options take their
# value as the next word or after '=' (--workers=4). Everything after '--' goes
# to every worker (see build/bin/ps_worker --help; --worker-binary picks another
# worker program in the bin directory, as scripts/train_torch.sh does), e.g.
#   scripts/train_fashion_mnist.sh --workers 4 -- --lr=0.002 --eval_every=100
#
# --table-disk-dir DIR gives server I a table disk tier in DIR/server-I: rows
# beyond its memory budget (--server-flag=--max_memory_mb=M) kept on disk.
#
# --stages K splits the model's layers over groups of K workers (model
# parallelism: worker I is stage I % K of group I / K; the workers must be a
# multiple of K), each step pipelined as M micro-batches (default 4).
#
# --network emulated runs every process in its own network namespace, each
# link shaped to --rate (default 1gbit) with --delay-ms one-way (default 0.2;
# needs root; scripts/launch_job.py). With compression:
#   scripts/train_fashion_mnist.sh --workers 4 --servers 2 --network emulated --rate 1gbit -- --compression=bf16
#
# DIR gets summary.json, metrics.csv, events.jsonl, accuracy.png, pids.txt and
# one log per process. Exit codes: 0 done, 1 the job failed (the failed process
# is named with the end of its log), 2 bad option or nothing built, 130
# interrupted. Every process of the job is stopped before it returns.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
me="train_fashion_mnist"

usage() { sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "$me: $*" >&2; echo "($me --help for usage)" >&2; exit 2; }

workers=2
servers=2
consistency=sync
epochs=10
device=cpu
placement=auto
out=""
bin_dir="$root/build/bin"
worker_binary=ps_worker
stages=1
micro_batches=4
sched_flags=()
server_flags=()
network_flags=()
while [[ $# -gt 0 ]]; do
  opt="$1"
  case "$opt" in
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    --*=*) name="${opt%%=*}"; val="${opt#*=}"; shift ;;
    --*)
      name="$opt"
      case "$name" in
        --workers|--servers|--consistency|--epochs|--device|--placement|--out|--bin-dir|--scheduler-flag|--server-flag|--worker-binary|--stages|--micro-batches|--table-disk-dir|--network|--rate|--delay-ms)
          [[ $# -ge 2 ]] || die "option $name needs a value"
          val="$2"; shift 2 ;;
        *) die "unknown option '$opt'" ;;
      esac ;;
    *) die "unexpected argument '$opt' (extra worker flags go after '--')" ;;
  esac
  case "$name" in
    --workers) workers="$val" ;;
    --servers) servers="$val" ;;
    --consistency) consistency="$val" ;;
    --epochs) epochs="$val" ;;
    --device) device="$val" ;;
    --placement) placement="$val" ;;
    --stages) stages="$val" ;;
    --micro-batches) micro_batches="$val" ;;
    --out) out="$val" ;;
    --bin-dir) bin_dir="$val" ;;
    --worker-binary) worker_binary="$val" ;;
    --scheduler-flag) sched_flags+=("--scheduler-flag=$val") ;;
    --server-flag) server_flags+=("--server-flag=$val") ;;
    --table-disk-dir) server_flags+=("--table-disk-dir=$val") ;;
    --network|--rate|--delay-ms) network_flags+=("$name=$val") ;;
    *) die "unknown option '$name'" ;;
  esac
done

[[ "$workers" =~ ^[1-9][0-9]*$ ]] || die "--workers must be a positive integer, got '$workers'"
[[ "$servers" =~ ^[1-9][0-9]*$ ]] || die "--servers must be a positive integer, got '$servers'"
[[ "$epochs" =~ ^[1-9][0-9]*$ ]] || die "--epochs must be a positive integer, got '$epochs'"
[[ "$stages" =~ ^[1-9][0-9]*$ ]] || die "--stages must be a positive integer, got '$stages'"
[[ "$micro_batches" =~ ^[1-9][0-9]*$ ]] || die "--micro-batches must be a positive integer, got '$micro_batches'"
(( workers % stages == 0 )) || die "--workers $workers is not a multiple of --stages $stages"
[[ "$consistency" =~ ^(sync|async|ssp:[0-9]+)$ ]] ||
  die "--consistency must be sync, async or ssp:K (K >= 0), got '$consistency'"
[[ "$device" =~ ^(cpu|cuda|null)$ ]] || die "--device must be cpu, cuda or null, got '$device'"
if [[ "$placement" != auto && "$placement" != layer ]]; then
  [[ -f "$placement" && -r "$placement" ]] ||
    die "--placement must be auto, layer or a readable file, got '$placement'"
  placement="$(cd "$(dirname "$placement")" && pwd)/$(basename "$placement")"
fi
[[ -n "$bin_dir" ]] || die "--bin-dir must not be empty"
# Every program the job runs (launch_job.py checks them again), before any starts.
/usr/bin/python3 "$here/launch/preflight.py" "$me" --bin-dir "$bin_dir" \
  --bin ps_scheduler --bin ps_server --bin "$worker_binary" --bin ps_export || exit 2
if [[ -z "$out" ]]; then
  # out/train-..., or out/spam-... for ps_spam_worker, out/torch-... for ps_torch_worker
  job=train
  [[ "$worker_binary" == ps_worker ]] || { job="${worker_binary#ps_}"; job="${job%_worker}"; }
  out="$root/out/$job-$(date +%Y%m%d-%H%M%S)"
  base="$out"; n=2
  while [[ -e "$out" ]]; do out="$base-$n"; n=$((n + 1)); done
fi

exec /usr/bin/python3 "$here/launch_job.py" --out="$out" --bin-dir="$bin_dir" \
  --workers="$workers" --servers="$servers" --consistency="$consistency" --epochs="$epochs" \
  --device="$device" --placement="$placement" --worker-binary="$worker_binary" \
  --stages="$stages" --micro-batches="$micro_batches" \
  "${network_flags[@]}" "${sched_flags[@]}" "${server_flags[@]}" -- "$@"
