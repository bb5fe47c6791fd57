#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions called through trap
# Checks scripts/train_spam.sh end to end on the real SpamAssassin corpus:
#   (a) sync and (b) async, 2 workers and 2 servers, 2 epochs each: exit 0,
#       summary.json with test accuracy >= 0.985 and AUC >= 0.998 (the goal
#       of the example), table_rows > 0 and a positive throughput; metrics.csv
#       with its test_auc column; a PNG plot; every process of pids.txt gone;
#   (c) a bad option exits 2 naming the option;
#   (d) the table mostly on the servers' disk tier, the same checks;
#   (e) build/bin/spam_local, the model in one process, 1 epoch: its epoch
#       line with accuracy >= 0.985 and AUC >= 0.998.
# Skips (exit 77) when the corpus is not installed.
#
#   tests/train_spam_test.sh [BIN_DIR]     (default: build/bin)
#
# Takes about 15 s.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
train="$root/scripts/train_spam.sh"
corpus=/usr/local/share/datasets/spam-assassin
py=/usr/bin/python3
if [[ ! -d "$corpus" ]]; then
  echo "SKIP: the SpamAssassin corpus is not installed at $corpus (scripts/fetch_spam_assassin.sh installs it)"
  exit 77
fi
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_job_test train_spam_test "${1:-}"

# One job; checks its exit code, its outputs and that nothing of it runs on.
run_job() {  # name consistency [launcher options...]
  local name="$1" mode="$2" out="$tmp/$1" rc
  shift 2
  echo "($name) $mode: 2 workers, 2 servers, 2 epochs; expects exit 0, accuracy >= 0.985, AUC >= 0.998," \
    "table_rows > 0, metrics.csv, a PNG plot, no process left"
  timeout -k 5 90 "$train" --bin-dir "$bin" --workers 2 --servers 2 --epochs 2 --consistency "$mode" \
    --out "$out" "$@" -- --progress_every=100s >"$tmp/$name.out" 2>&1
  rc=$?
  if [[ $rc -eq 0 ]]; then pass "exit code 0"; else fail "exit code $rc"; show "$tmp/$name.out"; fi
  if "$py" - "$out" "$mode" <<'EOF'; then pass "summary.json, metrics.csv, events.jsonl and accuracy.png are right"; else fail "outputs of the run"; show "$tmp/$name.out"; fi
import csv, json, os, sys
out, mode = sys.argv[1], sys.argv[2]
ok = True
def check(cond, what):
    global ok
    print(f"    {'ok' if cond else 'FAIL'}: {what}")
    ok = ok and cond
try:
    s = json.load(open(os.path.join(out, "summary.json")))
except (OSError, ValueError) as e:
    print(f"    FAIL: summary.json: {e}")
    sys.exit(1)
num = lambda k: s.get(k) if isinstance(s.get(k), (int, float)) else -1
check(num("test_accuracy") >= 0.985, f"test_accuracy {s.get('test_accuracy')} >= 0.985")
check(num("test_auc") >= 0.998, f"test_auc {s.get('test_auc')} >= 0.998")
check(num("table_rows") > 0, f"table_rows {s.get('table_rows')} > 0")
import numpy as np
try:
    m = np.load(os.path.join(out, "model.npz"))
    ids, rows = m["tokens.ids"], m["tokens.rows"]
    check(len(ids) == num("table_rows") and rows.shape == (len(ids), s.get("table_dim", rows.shape[1]))
          and len(set(ids.tolist())) == len(ids),
          f"model.npz holds the table: {len(ids)} distinct ids (table_rows {s.get('table_rows')}), rows {rows.shape}")
except (OSError, KeyError, ValueError) as e:
    check(False, f"model.npz with tokens.ids and tokens.rows: {e}")
check(num("samples_per_s") > 0 and num("wall_s") > 0, f"samples_per_s {s.get('samples_per_s')}, wall_s {s.get('wall_s')} positive")
check((s.get("workers"), s.get("servers"), s.get("epochs"), s.get("consistency")) == (2, 2, 2, mode),
      f"setup recorded: workers {s.get('workers')}, servers {s.get('servers')}, epochs {s.get('epochs')}, {s.get('consistency')}")
try:
    rows = list(csv.reader(open(os.path.join(out, "metrics.csv"))))
except OSError as e:
    rows = []
    print(f"    FAIL: metrics.csv: {e}")
check(rows[:1] == [["wall_s", "epoch", "step", "train_loss", "test_accuracy", "test_auc"]], f"metrics.csv header: {rows[:1]}")
check(len(rows) - 1 == 2 and all(len(r) == 6 and 0.9 <= float(r[5]) <= 1 for r in rows[1:]),
      f"metrics.csv has one row per epoch with an AUC: {rows[1:]}")
events = [json.loads(line) for line in open(os.path.join(out, "events.jsonl"))]
done = sorted(e["rank"] for e in events if e.get("event") == "done")
check(done == [0, 1], f"events.jsonl has a done event of ranks 0 and 1 (got {done})")
try:
    head = open(os.path.join(out, "accuracy.png"), "rb").read(8)
except OSError as e:
    head = b""
    print(f"    FAIL: accuracy.png: {e}")
check(head == b"\x89PNG\r\n\x1a\n", "accuracy.png starts with the PNG magic bytes")
sys.exit(0 if ok else 1)
EOF
  if grep -q "^test AUC 0\.99" "$tmp/$name.out" && grep -q "^table rows [1-9]" "$tmp/$name.out"; then
    pass "output gives the test AUC and the table rows"
  else
    fail "output lacks 'test AUC' or 'table rows'"; show "$tmp/$name.out"
  fi
  local alive=() n pname pid
  while read -r pname pid; do
    kill -0 "$pid" 2>/dev/null && alive+=("$pname (pid $pid)")
  done < <(cat "$out/pids.txt" 2>/dev/null)
  n="$(wc -l <"$out/pids.txt" 2>/dev/null || echo 0)"
  if [[ ${#alive[@]} -eq 0 && $n -eq 5 ]]; then
    pass "none of the $n processes of pids.txt is alive"
  else
    fail "pids.txt lists $n processes (expected 5); still alive: ${alive[*]:-none}"
  fi
}

run_job a sync
run_job b async
# The table (907,239 rows, about 290 MB) on servers of 64 MiB: most rows on
# the disk tier, the same accuracy, and model.npz (checked above) holds every
# row, the disk's included.
run_job d async --table-disk-dir "$tmp/d/tables" --server-flag=--max_memory_mb=64 --server-flag=--table_disk_cache_mb=8
if grep -q '"table_disk_rows": [1-9][0-9]\{5\}' "$tmp/d/summary.json" &&
   [[ -d "$tmp/d/tables/server-0/live" && -d "$tmp/d/tables/server-1/live" ]]; then
  pass "(d) $(grep -o '"table_disk_rows": [0-9]*' "$tmp/d/summary.json") over 100,000, one store per server"
else
  fail "(d) the table did not go to the disk tier"; grep table "$tmp/d/summary.json"
fi

# The same model in one process, the reference the jobs are measured against (docs/examples.md).
echo "(e) spam_local, 1 epoch: exit 0, an epoch line with accuracy >= 0.985 and AUC >= 0.998"
if timeout -k 5 60 "$bin/spam_local" --epochs=1 >"$tmp/e.out" 2>&1 && "$py" - "$tmp/e.out" <<'EOF'; then
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
epochs = [e for e in lines if "epoch" in e]
assert [e["epoch"] for e in epochs] == [1], epochs
e = epochs[0]
assert e["test_accuracy"] >= 0.985 and e["test_auc"] >= 0.998 and e["rows"] > 0, e
print(f"    test_accuracy {e['test_accuracy']}, test_auc {e['test_auc']}, {e['rows']} rows")
EOF
  pass "spam_local's epoch line"
else
  fail "spam_local"; show "$tmp/e.out"
fi

# ---------------------------------------------------------------------------
echo "(c) bad option: --epochs 0; expects exit 2 and a message naming --epochs"
"$train" --bin-dir "$bin" --epochs 0 --out "$tmp/c" >"$tmp/c.out" 2>&1
rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--epochs" "$tmp/c.out"; then
  pass "exit 2: $(head -n 1 "$tmp/c.out")"
else
  fail "exit code $rc (expected 2), output: $(cat "$tmp/c.out")"
fi
if [[ ! -e "$tmp/c" ]]; then pass "no job was started"; else fail "$tmp/c was created"; fi

echo
if [[ $failed -eq 0 ]]; then echo "train_spam_test: all checks passed"; else echo "train_spam_test: FAILED"; fi
exit $failed
