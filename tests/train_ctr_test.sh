#!/usr/bin/env bash
# Checks scripts/train_ctr.sh end to end, small: the three runs (sync and
# hybrid through the servers with their rows on the disk tier, PyTorch alone
# with hashed tables) finish; summary.json has each run's test AUC (above
# chance) and samples/s, the ratios, table_rows beyond the servers' budget
# and rows on disk; metrics.csv has a row per run and epoch; auc.png is a
# PNG; no process is left. Bad options exit 2 naming the option.
#
#   tests/train_ctr_test.sh BIN_DIR
set -uo pipefail

bin="${1:?usage: $0 BIN_DIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
py=/usr/bin/python3
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_test train_ctr_test

echo "(a) 2 workers, 2 servers of 8 MiB, 12,000 samples, runs sync, hybrid, torch"
timeout -k 5 300 "$root/scripts/train_ctr.sh" --bin-dir "$bin" --train-samples 12000 --test-samples 4000 \
  --budget-mb 8 --out "$tmp/a" >"$tmp/a.out" 2>&1
rc=$?
if [[ $rc -eq 0 ]]; then pass "exit code 0"; else fail "exit code $rc"; show "$tmp/a.out"; fi
if "$py" - "$tmp/a" <<'PY'; then pass "summary.json, metrics.csv and auc.png"; else fail "outputs"; show "$tmp/a.out"; fi
import csv, json, os, sys
out = sys.argv[1]
ok = True
def check(cond, what):
    global ok
    print(f"    {'ok' if cond else 'FAIL'}: {what}")
    ok = ok and cond
s = json.load(open(os.path.join(out, "summary.json")))
runs = s.get("runs", {})
check(sorted(runs) == ["hybrid", "sync", "torch"], f"runs {sorted(runs)}")
for name, r in runs.items():
    check(0.55 < r.get("test_auc", 0) <= 1 and r.get("samples_per_s", 0) > 0,
          f"{name}: test AUC {r.get('test_auc')} above chance, {r.get('samples_per_s')} samples/s")
for name in ("sync", "hybrid"):
    r = runs.get(name, {})
    check(r.get("table_disk_rows", 0) > 0 and r.get("table_rows", 0) > r.get("table_disk_rows", 0),
          f"{name}: {r.get('table_disk_rows')} of {r.get('table_rows')} rows on the servers' disk tiers")
for k in ("test_auc", "table_rows", "samples_per_s", "torch_test_auc", "auc_minus_torch", "samples_per_s_vs_torch",
          "hybrid_vs_sync_samples_per_s", "hybrid_auc_minus_sync", "rows_over_budget", "torch_buckets"):
    check(k in s, f"summary has {k}: {s.get(k)}")
check(s.get("rows_over_budget", 0) > 1, f"the tables outgrow the servers' memory: {s.get('rows_over_budget')}x")
rows = list(csv.reader(open(os.path.join(out, "metrics.csv"))))
check(rows[:1] == [["run", "epoch", "step", "wall_s", "test_auc", "test_accuracy", "test_loss"]], f"header {rows[:1]}")
check(sorted(r[0] for r in rows[1:]) == ["hybrid", "sync", "torch"], f"one row per run: {[r[0] for r in rows[1:]]}")
check(open(os.path.join(out, "auc.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n", "auc.png is a PNG")
sys.exit(0 if ok else 1)
PY
alive=()
for f in "$tmp"/a/sync/pids.txt "$tmp"/a/hybrid/pids.txt; do
  while read -r pname pid; do kill -0 "$pid" 2>/dev/null && alive+=("$pname (pid $pid)"); done < <(cat "$f" 2>/dev/null)
done
if pgrep -f "ddp=file://$tmp/a/torch" >/dev/null; then alive+=("a torch worker"); fi
if [[ ${#alive[@]} -eq 0 ]]; then pass "no process of the runs is left"; else fail "still alive: ${alive[*]}"; fi

echo "(b) bad options: exit 2 naming them"
"$root/scripts/train_ctr.sh" --bin-dir "$bin" --runs sync,ssd --out "$tmp/b" >"$tmp/b.out" 2>&1; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--runs" "$tmp/b.out"; then pass "--runs sync,ssd: exit 2"; else fail "--runs: exit $rc"; show "$tmp/b.out"; fi
"$root/scripts/train_ctr.sh" --bin-dir "$bin" --budget-mb 4 --out "$tmp/b" >"$tmp/b2.out" 2>&1; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--budget-mb" "$tmp/b2.out"; then pass "--budget-mb 4: exit 2"; else fail "--budget-mb: exit $rc"; show "$tmp/b2.out"; fi
"$bin/ps_torch_ctr_worker" --scheduler=127.0.0.1:1 --zipf_s=1 >"$tmp/b3.out" 2>&1; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--zipf_s" "$tmp/b3.out"; then pass "worker --zipf_s=1: exit 2"; else fail "worker --zipf_s: exit $rc"; show "$tmp/b3.out"; fi

[[ $failed -eq 0 ]] && echo "train_ctr_test: PASS" || echo "train_ctr_test: FAIL"
exit $failed
