#!/usr/bin/env bash
# Every figure of README.md's "When to choose it" table and docs/benchmarks.md's
# headline table, each next to its reference measured in the same run, in one
# go (about 15 minutes on 2 cores; --quick: every step tiny, about 90 seconds):
#
#   benchmarks/headline.sh [--out DIR] [--quick] [--steps A,B,...] [--bin-dir DIR] [--list]
#
#   --out DIR      where the results go (default benchmarks/results/DATE-headline,
#                  DATE-headline-quick with --quick); must not hold a summary.json yet
#   --quick        every step on a tiny budget: a smoke test of the whole run (its
#                  figures mean nothing)
#   --steps LIST   run only these steps (names from --list)
#   --bin-dir DIR  the programs (default build/bin; build them with cmake --build build)
#   --list         print the steps with what each measures, then exit
#
# DIR gets README.md (what ran, the exact commands, the machine, the figures),
# summary.json and summary.md (figure, ours, reference, ratio), one JSON-lines
# or JSON file per step, and PNG plots (gnuplot). Progress, one line per step
# with the elapsed time and an estimate of what is left, goes to stdout. Steps
# that need root and network namespaces (scripts/netns.py) are skipped, with
# the reason, when those are not available. The GPU figures are
# benchmarks/gpu/run.sh's, on a GPU machine.
#
# Exit 0 when every step ran or was skipped with its reason, 1 when a step
# failed (the others still run; the summary says which), 2 for a bad option or
# a program not built.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
py=/usr/bin/python3
invocation="benchmarks/headline.sh${*:+ $*}"
quick=0 out="" only="" bin="$root/build/bin" list=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out|--steps|--bin-dir)
      [[ $# -ge 2 ]] || { echo "headline: $1 needs a value" >&2; exit 2; }
      case "$1" in --out) out="$2" ;; --steps) only="$2" ;; --bin-dir) bin="$2" ;; esac
      shift 2 ;;
    --out=*) out="${1#*=}"; shift ;;
    --steps=*) only="${1#*=}"; shift ;;
    --bin-dir=*) bin="${1#*=}"; shift ;;
    --quick) quick=1; shift ;;
    --list) list=1; shift ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "headline: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

# The steps in order: NAME|SECONDS (full)|SECONDS (quick)|NEEDS|WHAT. NEEDS is
# "root" for emulated links (network namespaces) or "-".
STEPS=(
  "pushpull|35|1|-|push+pull of 4 KiB and 4 MiB, 1 worker, 2 servers, one and two copies, tcp and shm, against raw ZeroMQ"
  "pushpull_sizes|20|1|-|push+pull from 4 KiB to 16 MiB through 1 server, tcp, ipc, shm, against raw ZeroMQ and memcpy (pushpull.png)"
  "update|55|1|-|the servers' update rules on 2, 64 and 256 MiB against memcpy"
  "train|20|3|-|the MLP through 1 server against the same training locally, checkpoints on against off (3 runs)"
  "ceiling|140|9|-|the trainer computing nothing (--device=null), MLP and 51 M parameters, against the data plane's bound"
  "ddp|90|9|-|a PyTorch MLP through 2 servers and 2 workers against PyTorch DDP (gloo)"
  "sync_vs_async|40|5|-|sync, async, ssp:1, ssp:4 on one machine (shared memory), 2 workers, 2 servers"
  "straggler|65|5|-|the same with worker 1 three times slower"
  "sync_vs_async_1gbit|90|7|root|sync, async, ssp:1, ssp:4 over emulated 1 Gbit/s links"
  "replicas|35|5|-|the MLP with two copies of every slice against one, sync and async"
  "compression|160|8|root|compressors (bf16, top-k 1 %, top-k with delta pulls) against none over emulated 100 Mbit/s and 1 Gbit/s, 4 workers"
  "ctr|140|6|-|the click-through job with tables beyond the servers' memory against PyTorch DDP with hashed tables"
  "table|10|1|-|embedding-table rows through 2 servers and 2 workers against one in-process table (3 runs)"
  "table_disk|30|1|-|a table many times its server's memory on the disk tier against all in memory"
  "control_plane|45|4|-|the scheduler with 64 to 4,096 simulated workers and 64 servers (absolute figures)"
  "elastic_table|20|8|root|a table job grown from 1 to 4 servers over emulated 1 Gbit/s against one started with 4"
  "elastic_training|30|15|-|servers joining and draining while 2 workers train (replication_test), the longest step"
)

step_field() { local IFS='|'; read -r -a f <<<"$1"; echo "${f[$2]}"; }

if [[ $list -eq 1 ]]; then
  for s in "${STEPS[@]}"; do
    printf '%-20s %4ss  %s%s\n' "$(step_field "$s" 0)" "$(step_field "$s" 1)" "$(step_field "$s" 4)" \
      "$([[ $(step_field "$s" 3) == root ]] && echo " (root)")"
  done
  exit 0
fi

if [[ -n "$only" ]]; then
  for name in ${only//,/ }; do
    found=0
    for s in "${STEPS[@]}"; do [[ "$(step_field "$s" 0)" == "$name" ]] && found=1; done
    [[ $found -eq 1 ]] || { echo "headline: --steps: no step '$name' (see --list)" >&2; exit 2; }
  done
fi
selected() { [[ -z "$only" || ",$only," == *",$1,"* ]]; }

# Every program a step runs, checked before the first (exit 2 naming what is missing).
bin="$(cd "$bin" 2>/dev/null && pwd)" || { echo "headline: --bin-dir: no such directory" >&2; exit 2; }
"$py" "$root/scripts/launch/preflight.py" headline --bin-dir "$bin" \
  --bin pushpull_bench --bin update_bench --bin train_bench --bin table_bench --bin table_disk_bench \
  --bin control_plane_bench --bin ps_scheduler --bin ps_server --bin ps_worker --bin ps_export \
  --bin ps_torch_worker --bin ps_torch_ctr_worker --python-package || exit 2
command -v gnuplot >/dev/null || { echo "headline: gnuplot is not installed (scripts/install_deps.sh installs it)" >&2; exit 2; }

if [[ -z "$out" ]]; then
  out="$root/benchmarks/results/$(date +%F)-headline$([[ $quick -eq 1 ]] && echo -quick)"
fi
mkdir -p "$out" || exit 2
out="$(cd "$out" && pwd)"
if [[ -e "$out/summary.json" ]]; then
  echo "headline: $out already holds a summary.json: a new measurement gets a new directory" >&2
  exit 2
fi
work="$(mktemp -d /tmp/headline.XXXXXX)"
mkdir -p "$work/logs" "$work/cmds"

# The steps run the programs as they are now: hard links (copies across file
# systems) in WORK/bin, so that a build during the run cannot mix two builds'
# figures or catch a program half written. replication_test is the exception:
# it starts the servers of the build it belongs to.
PROGRAMS=(pushpull_bench update_bench train_bench table_bench table_disk_bench control_plane_bench ps_scheduler
          ps_server ps_worker ps_export ps_keygen ps_torch_worker ps_torch_ctr_worker replication_test)
bin_src="$bin"
mkdir -p "$work/bin"
for p in "${PROGRAMS[@]}"; do
  [[ -e "$bin_src/$p" ]] || continue
  ln "$bin_src/$p" "$work/bin/$p" 2>/dev/null || cp -p "$bin_src/$p" "$work/bin/$p"
done
ln -s "$(cd "$bin_src/.." && pwd)/python" "$work/python"  # the Python package beside bin/, as the launchers expect
bin="$work/bin"
: >"$out/steps.jsonl"

# Why the steps that need root cannot run here, or "" when they can.
root_reason=""
if [[ $(id -u) -ne 0 ]]; then
  root_reason="needs root for network namespaces (scripts/netns.py); run as root"
elif ! netns_check="$("$py" "$root/scripts/netns.py" check 2>&1)"; then
  root_reason="network namespaces do not work here: $(echo "$netns_check" | tail -1)"
fi

q() { [[ $quick -eq 1 ]]; }

# SIGINT, SIGTERM: the running command gets SIGTERM (timeout passes it on; the
# launchers stop their jobs and remove their namespaces), then exit 130.
child=""
on_signal() {
  trap - INT TERM
  [[ -n "$child" ]] && kill -TERM "$child" 2>/dev/null && wait "$child" 2>/dev/null
  echo "headline: interrupted; what ran so far is in $out, the logs in $work"
  exit 130
}
trap on_signal INT TERM

# shown ARGS...: the command as a shell would take it, quoting only the words that need it.
shown() {
  local w words=()
  for w in "$@"; do
    if [[ "$w" =~ ^[A-Za-z0-9_./=:,@%+-]+$ ]]; then words+=("$w"); else words+=("'${w//\'/\'\\\'\'}'"); fi
  done
  echo "${words[*]}"
}

# run OUTFILE PROG ARGS...: one command of the current step, recorded for the
# README; its stdout appended to OUTFILE ("-": the step's log), its stderr to
# the step's log. Each command has a deadline (10 minutes, 2 with --quick).
run() {
  local dest="$1" shown
  shift
  shown="$(shown "$@")"
  shown="${shown//$work\/bin/$bin_src}"; shown="${shown//$work/WORK}"; shown="${shown//$out/OUT}"
  shown="${shown//$root\//}"
  echo "$shown" >>"$work/cmds/$step"
  local limit=600
  q && limit=120
  # In the background and waited for, so that a signal to this script reaches it at once (on_signal).
  if [[ "$dest" == - ]]; then
    timeout -k 10 "$limit" "$@" </dev/null >>"$log" 2>&1 &
  else
    timeout -k 10 "$limit" "$@" </dev/null >>"$dest" 2>>"$log" &
  fi
  child=$!
  wait "$child"
  local rc=$?
  child=""
  [[ $rc -eq 0 ]] || echo "headline: exit $rc from: $shown" >>"$log"
  return $rc
}

# keep SRC DEST: a summary file of a script's output directory, at the top of OUT.
keep() { [[ -f "$1" ]] && cp "$1" "$out/$2"; }

sva() {  # sva NAME ARGS...: scripts/bench_sync_vs_async.sh into OUT/NAME.{jsonl,json,md,png}
  local name="$1"
  shift
  local limits=()
  q && limits=(--epochs 1 --train-limit 1280 --test-limit 500 --evals 3)
  run "$out/$name.jsonl" "$root/scripts/bench_sync_vs_async.sh" --bin-dir "$bin" --out "$work/$name" "$@" "${limits[@]}"
  local rc=$?
  keep "$work/$name/results.json" "$name.json"
  keep "$work/$name/summary.md" "$name.md"
  keep "$work/$name/accuracy_vs_time.png" "$name.png"
  keep "$work/$name/compression.png" "${name}_rates.png"
  return $rc
}

step_pushpull() {
  if q; then
    run "$out/pushpull.jsonl" "$bin/pushpull_bench" --sizes=4096,1048576 --servers=2 --workers=1 --replicas=1,2 \
      --transports=tcp,shm --reps=1 --iters_bytes=1
  else
    run "$out/pushpull.jsonl" "$bin/pushpull_bench" --sizes=4096,4194304 --servers=2 --workers=1 --replicas=1,2 \
      --transports=tcp,shm --reps=5
  fi
}

step_pushpull_sizes() {
  if q; then
    run "$out/pushpull_sizes.jsonl" "$bin/pushpull_bench" --sizes=4096,65536 --transports=tcp,shm --reps=1 --iters_bytes=1
  else
    run "$out/pushpull_sizes.jsonl" "$bin/pushpull_bench" --sizes=4096,65536,1048576,4194304,16777216 \
      --transports=tcp,ipc,shm --reps=1
  fi || return
  run - "$py" "$root/scripts/plot_pushpull.py" "$out/pushpull_sizes.jsonl" "$out/pushpull.png"
}

step_update() {
  if q; then
    run "$out/update_bench.jsonl" "$bin/update_bench" --sizes_mb=1 --reps=1 --min_ms=0
  else
    run "$out/update_bench.jsonl" "$bin/update_bench" --sizes_mb=2,64,256
  fi
}

step_train() {
  local i
  if q; then
    run "$out/train_bench.jsonl" "$bin/train_bench" --train_limit=2000 --warmup_steps=5 || return
  else
    for i in 1 2 3; do run "$out/train_bench.jsonl" "$bin/train_bench" --train_limit=40000 || return; done
  fi
  run - "$py" "$root/scripts/plot_train_bench.py" "$out/train_bench.jsonl" "$out/train_bench.png"
}

step_ceiling() {
  if q; then
    run "$out/ceiling.jsonl" "$bin/train_bench" --device=null --train_limit=2000 --warmup_steps=5 --configs=1x1 \
      --transports=shm || return
    run "$out/ceiling.jsonl" "$bin/train_bench" --device=null --layers=784,5120,5120,4096,10 --train_limit=640 \
      --warmup_steps=2 --configs=1x1 --transports=shm
  else
    run "$out/ceiling.jsonl" "$bin/train_bench" --device=null --train_limit=60000 || return
    run "$out/ceiling.jsonl" "$bin/train_bench" --device=null --layers=784,5120,5120,4096,10 --train_limit=5120 \
      --warmup_steps=10
  fi
}

step_ddp() {
  local limits=(--epochs 3 --reps 3)
  q && limits=(--epochs 1 --reps 1 --train_limit 1280)
  run - "$root/scripts/bench_vs_ddp.sh" --bin-dir "$bin" --out "$work/ddp" "${limits[@]}"
  local rc=$?
  keep "$work/ddp/results.json" torch_vs_ddp.json
  keep "$work/ddp/results.png" torch_vs_ddp.png
  return $rc
}

step_sync_vs_async() {
  if q; then sva sync_vs_async --modes sync,async; else sva sync_vs_async --epochs 3; fi
}

step_straggler() {
  if q; then sva straggler --modes sync,async --straggler 1:3; else sva straggler --epochs 3 --straggler 1:3; fi
}

step_sync_vs_async_1gbit() {
  if q; then
    sva sync_vs_async_1gbit --modes sync,async --network emulated --rate 1gbit
  else
    sva sync_vs_async_1gbit --epochs 1 --network emulated --rate 1gbit
  fi
}

step_replicas() {
  if q; then sva replicas --modes sync --replicas 1,2; else sva replicas --modes sync,async --replicas 1,2 --epochs 2; fi
}

step_compression() {
  if q; then
    sva compression --workers 4 --servers 2 --modes sync --network emulated --rates 1gbit \
      --compressions 'none,topk:0.01,pull=delta'
  else
    sva compression --workers 4 --servers 2 --epochs 1 --train-limit 16000 --modes sync --network emulated \
      --rates 100mbit,1gbit --compressions 'none,bf16,topk:0.01,topk:0.01,pull=delta'
  fi
}

step_ctr() {
  local limits=()
  q && limits=(--train-samples 6000 --test-samples 2000 --budget-mb 8 --runs sync,torch)
  run - "$root/scripts/train_ctr.sh" --bin-dir "$bin" --out "$work/ctr" "${limits[@]}"
  local rc=$?
  keep "$work/ctr/summary.json" ctr.json
  keep "$work/ctr/metrics.csv" ctr.csv
  keep "$work/ctr/auc.png" ctr.png
  return $rc
}

step_table() {
  if q; then
    run "$out/table_bench.jsonl" "$bin/table_bench" --configs=2x2 --table_shards=0 --batch=2048 --steps=3 \
      --memory_rows=20000
  else
    run "$out/table_bench.jsonl" "$bin/table_bench" --configs=2x2,2x2,2x2 --table_shards=0 --steps=30
  fi
}

step_table_disk() {
  if q; then
    run "$out/table_disk_bench.jsonl" "$bin/table_disk_bench" --steps=30 --batch=2048 --budget_mb=6 --cache_mb=2 \
      --check_rows=3000 --dir="$work/table_disk"
  else
    run "$out/table_disk_bench.jsonl" "$bin/table_disk_bench" --dir="$work/table_disk"
  fi
}

step_control_plane() {
  if q; then
    run "$out/control_plane.jsonl" "$bin/control_plane_bench" --workers=16 --servers=4 --window=1s \
      --heartbeat_interval=200ms --heartbeat_timeout=1s
  else
    run "$out/control_plane.jsonl" "$bin/control_plane_bench" --workers=64,512,4096 --servers=64 --window=5s
  fi
}

step_elastic_table() {
  local prefix="hl$(($$ % 100000))g"  # netns.py: a letter, up to 9 more, not ending in a digit
  if q; then
    run "$out/elastic_table.jsonl" "$py" "$root/scripts/netns.py" run --prefix "$prefix" --hosts 5 --rate 1gbit -- \
      "$bin/table_bench" --netns="$prefix" --configs='2x2,1>2x2' --table_shards=8 --batch=2048 --steps=3 --memory_rows=0
  else
    run "$out/elastic_table.jsonl" "$py" "$root/scripts/netns.py" run --prefix "$prefix" --hosts 9 --rate 1gbit -- \
      "$bin/table_bench" --netns="$prefix" --configs='4x4,1>4x4' --table_shards=64 --memory_rows=0
  fi
}

step_elastic_training() {
  if [[ ! -x "$bin/replication_test" ]]; then  # a test binary: scripts/test.sh builds it, the quickstart does not
    echo "$bin_src/replication_test is not built (cmake --build build --target replication_test)" >"$work/skip"
    return 77
  fi
  local filter='*OneServerGrows*'
  q && filter='*OneServerGrows*/sync'
  run "$work/replication_test.out" "$bin/replication_test" --gtest_filter="$filter"
  local rc=$?
  grep '^{' "$work/replication_test.out" >"$out/elastic_training.jsonl"
  return $rc
}

# Machine and tree, for the README.
{
  echo "{"
  echo "  \"date\": \"$(date +%F)\","
  echo "  \"started\": \"$(date -Iseconds)\","
  echo "  \"nproc\": $(nproc),"
  echo "  \"cpu\": \"$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //; s/"/\\"/g')\","
  echo "  \"memory_gib\": $(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo),"
  echo "  \"kernel\": \"$(uname -r)\","
  echo "  \"load_average_at_start\": \"$(cut -d' ' -f1-3 /proc/loadavg)\","
  echo "  \"commit\": \"$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)\","
  echo "  \"tracked_files_changed\": $(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null | wc -l),"
  echo "  \"bin_dir\": \"${bin_src#"$root"/}\","
  echo "  \"programs_built\": \"$(find "$bin" -maxdepth 1 -type f -printf '%TY-%Tm-%Td %TH:%TM\n' | sort | tail -1)\","
  echo "  \"quick\": $([[ $quick -eq 1 ]] && echo true || echo false),"
  echo "  \"command\": \"$invocation\","
  echo "  \"root_reason\": \"${root_reason//\"/\\\"}\""
  echo "}"
} >"$out/machine.json"

total=0 n=0
for s in "${STEPS[@]}"; do
  selected "$(step_field "$s" 0)" || continue
  total=$((total + $(step_field "$s" $((quick ? 2 : 1)))))
  n=$((n + 1))
done
clock() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }
echo "headline: $n steps$([[ $quick -eq 1 ]] && echo ", quick"), about $(clock "$total") on this machine; results in $out"
[[ -n "$root_reason" ]] && echo "headline: the steps over emulated links will be skipped: $root_reason"

start=$SECONDS done_est=0 i=0 failed=0
for s in "${STEPS[@]}"; do
  step="$(step_field "$s" 0)"
  selected "$step" || continue
  est="$(step_field "$s" $((quick ? 2 : 1)))"
  i=$((i + 1))
  elapsed=$((SECONDS - start))
  # What is left, scaled by how the steps so far compared with their estimates
  # once a fifth of the run is behind.
  left=$((total - done_est))
  [[ $((done_est * 5)) -ge $total ]] && left=$((left * elapsed / done_est))
  echo "[$(clock $elapsed) elapsed, about $(clock "$left") left] step $i/$n $step: $(step_field "$s" 4)"
  log="$work/logs/$step.log"
  : >"$log"
  t0=$SECONDS status=ok reason=""
  if [[ "$(step_field "$s" 3)" == root && -n "$root_reason" ]]; then
    status=skipped reason="$root_reason"
    echo "    skipped: $reason"
  else
    rm -f "$work/skip"
    "step_$step"
    rc=$?
  fi
  if [[ $status == skipped ]]; then
    :
  elif [[ $rc -eq 0 ]]; then
    echo "    done in $((SECONDS - t0)) s"
  elif [[ $rc -eq 77 && -s "$work/skip" ]]; then
    status=skipped reason="$(cat "$work/skip")"
    echo "    skipped: $reason"
  else
    # Why, in the words of the program that failed: the last error line before the exit.
    # A glog error line (E...) first, else any line saying it failed.
    reason="$( { grep -E '^E[0-9]{8} ' "$log" || grep -v '^headline: exit' "$log" | grep -iE 'error|fail'; } | tail -1 |
      sed -E 's/^E[0-9]{8} [0-9:.]+ +[0-9]+ [a-z_]+\.cc:[0-9]+\] //' | cut -c1-300)"
    status=failed reason="${reason:-exit $rc}"
    failed=1
    echo "    FAILED after $((SECONDS - t0)) s; the end of $log:"
    tail -5 "$log" | sed 's/^/      /'
  fi
  "$py" - "$step" "$status" "$((SECONDS - t0))" "$reason" "$work/cmds/$step" >>"$out/steps.jsonl" <<'PY'
import json, os, sys
step, status, seconds, reason, cmds = sys.argv[1:]
commands = open(cmds).read().splitlines() if os.path.exists(cmds) else []
print(json.dumps({"step": step, "status": status, "seconds": int(seconds), "reason": reason or None,
                  "commands": commands}))
PY
  done_est=$((done_est + est))
done

wall=$((SECONDS - start))
warning="" changed=()
for p in "${PROGRAMS[@]}"; do
  [[ -e "$bin/$p" && ! "$bin/$p" -ef "$bin_src/$p" && "$(stat -c %Y "$bin/$p")" != "$(stat -c %Y "$bin_src/$p" 2>/dev/null)" ]] &&
    changed+=("$p")
done
if [[ ${#changed[@]} -gt 0 ]]; then
  warning="${bin_src#"$root"/} was rebuilt during the run (${changed[*]}); the steps ran the programs as they were at the start, except the servers replication_test starts"
  echo "headline: $warning"
fi
"$py" "$root/benchmarks/headline_summary.py" "$out" --wall-s "$wall" ${warning:+--warning "$warning"} || failed=1
echo "headline: $n steps in $(clock $wall); $out/README.md, summary.md, summary.json"
if [[ $failed -eq 0 ]]; then
  rm -rf "$work"
else
  echo "headline: a step failed; its logs are kept in $work"
fi
exit $failed
