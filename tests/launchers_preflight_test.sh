#!/usr/bin/env bash
# Every launcher checks what it will run before it starts anything: run
# before the build (a --bin-dir that does not exist), with a program missing
# (ps_export), or with the Python package missing, each says so in one line
# naming it and what to run, exits 2, and starts no process.
#
#   tests/launchers_preflight_test.sh [BIN_DIR]     (default: build/bin)
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_job_test launchers_preflight_test "${1:-}"
cd "$root"

# A bin directory with every program but `$1` (links to the real ones), and no Python package beside it.
partial() {
  local dir="$tmp/$2/bin" f
  mkdir -p "$dir"
  for f in "$bin"/*; do [[ "$(basename "$f")" == "$1" ]] || ln -s "$f" "$dir/"; done
  echo "$dir"
}
no_export="$(partial ps_export no-export)"
no_python="$(partial none no-python)"

# expect NAME WANT CMD...: CMD exits 2 with one line on stderr that contains WANT, and no traceback.
expect() {
  local name="$1" want="$2"; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local rc=$? lines
  lines="$(grep -c '' "$tmp/err")"
  if [[ $rc -eq 2 && $lines -eq 1 ]] && grep -qF -- "$want" "$tmp/err" && ! grep -q Traceback "$tmp/err"; then
    pass "$name: exit 2, $(cat "$tmp/err")"
  else
    fail "$name: exit $rc, $lines lines on stderr (want one naming '$want'):"; sed 's/^/  | /' "$tmp/err" | head -5
  fi
}

nowhere="$tmp/not-built/bin"
echo "(a) run before the build: --bin-dir names no directory"
expect train_fashion_mnist.sh "is not a directory" scripts/train_fashion_mnist.sh --bin-dir "$nowhere" --out "$tmp/a1"
expect train_torch.sh "is not a directory" scripts/train_torch.sh --bin-dir "$nowhere" --out "$tmp/a2"
expect ps_run "is not a directory" scripts/ps_run --bin-dir "$nowhere" -- /usr/bin/python3 -c pass
expect bench_sync_vs_async.sh "is not a directory" scripts/bench_sync_vs_async.sh --bin-dir "$nowhere" --out "$tmp/a3"
expect bench_vs_ddp.sh "is not a directory" scripts/bench_vs_ddp.sh --bin-dir "$nowhere" --out "$tmp/a4"
expect train_ctr.sh "is not a directory" scripts/train_ctr.sh --bin-dir "$nowhere" --out "$tmp/a5"
expect pipeline_bench.py "is not a directory" /usr/bin/python3 benchmarks/pipeline_bench.py --bin-dir "$nowhere"
expect metrics_overhead.sh "is not a directory" benchmarks/metrics_overhead.sh --bin-dir "$nowhere" --out "$tmp/a6"
expect launch_job.py "is not a directory" /usr/bin/python3 scripts/launch_job.py --bin-dir "$nowhere" --out "$tmp/a7"

echo "(b) a program missing: ps_export, which writes model.npz after the training"
expect train_fashion_mnist.sh "ps_export is not built: run \`cmake --build build\`" \
  scripts/train_fashion_mnist.sh --bin-dir "$no_export" --out "$tmp/b1"
expect bench_sync_vs_async.sh "ps_export is not built" scripts/bench_sync_vs_async.sh --bin-dir "$no_export" --out "$tmp/b2"

echo "(c) the Python package missing beside the programs"
expect train_torch.sh "the Python package ps is not built" scripts/train_torch.sh --bin-dir "$no_python" --out "$tmp/c1"
expect ps_run "the Python package ps is not built" \
  scripts/ps_run --bin-dir "$no_python" -- /usr/bin/python3 worker/python/examples/my_model.py "$tmp/c.pt"

if compgen -G "$tmp/*/pids.txt" >/dev/null || compgen -G "$tmp/*/*.log" >/dev/null; then
  fail "a launcher started processes: $(ls "$tmp"/*/pids.txt "$tmp"/*/*.log 2>/dev/null | head -3)"
else
  pass "no launcher started a process"
fi
exit "$failed"
