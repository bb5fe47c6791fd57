#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions called through trap
# Checks scripts/train_torch_spam.sh (the SpamAssassin classifier written in
# PyTorch, worker/python/examples/ps_torch_spam.py) end to end on the real corpus:
#   (a) 2 ps_torch_spam_worker, 2 servers, sync, 1 epoch on the first 1,200
#       training and 400 test messages: exit 0; summary.json with test
#       accuracy >= 0.9 and AUC >= 0.95 (a model that learns nothing gets
#       the share of ham, about 0.68, and an AUC near 0.5), table_rows > 0,
#       a positive throughput and the setup; metrics.csv with its test_auc
#       column; done events of ranks 0 and 1; a PNG plot; every process of
#       pids.txt gone;
#   (b) the worker's pure parts: the split and token rules of the C++
#       worker (4,810 training and 1,236 test messages, 395 of them spam),
#       the exact ROC AUC against counting pairs (ties included);
#   (c) bad options exit 2 naming the option (the script's --epochs 0, the
#       worker's --batch_size=0), and a missing or short corpus exits 2
#       naming its directory, before any job forms.
# Skips (exit 77) when the corpus is not installed.
#
#   tests/train_torch_spam_test.sh [BIN_DIR]     (default: build/bin)
#
# Takes about 15 s.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
train="$root/scripts/train_torch_spam.sh"
corpus=/usr/local/share/datasets/spam-assassin
py=/usr/bin/python3
if [[ ! -d "$corpus" ]]; then
  echo "SKIP: the SpamAssassin corpus is not installed at $corpus (scripts/fetch_spam_assassin.sh installs it)"
  exit 77
fi
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_job_test train_torch_spam_test "${1:-}"
worker="$bin/ps_torch_spam_worker"

# ---------------------------------------------------------------------------
echo "(a) 2 ps_torch_spam_worker, 2 servers, sync, 1 epoch on 1200 training and 400 test messages"
out="$tmp/a"
timeout -k 5 120 "$train" --bin-dir "$bin" --workers 2 --servers 2 --epochs 1 --out "$out" \
  -- --train_limit=1200 --test_limit=400 --progress_every=100s >"$tmp/a.out" 2>&1
rc=$?
if [[ $rc -eq 0 ]]; then pass "exit code 0"; else fail "exit code $rc"; show "$tmp/a.out"; fi
if "$py" - "$out" <<'PY'; then pass "summary.json, metrics.csv, events.jsonl and accuracy.png are right"; else fail "outputs of the run"; show "$tmp/a.out"; fi
import csv, json, os, sys
out = sys.argv[1]
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
check(num("test_accuracy") >= 0.9, f"test_accuracy {s.get('test_accuracy')} >= 0.9")
check(num("test_auc") >= 0.95, f"test_auc {s.get('test_auc')} >= 0.95")
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
check(num("samples") == 1200 and num("samples_per_s") > 0 and num("wall_s") > 0,
      f"samples {s.get('samples')} == 1200, samples_per_s {s.get('samples_per_s')} and wall_s {s.get('wall_s')} positive")
check((s.get("workers"), s.get("servers"), s.get("epochs"), s.get("consistency")) == (2, 2, 1, "sync"),
      f"setup recorded: workers {s.get('workers')}, servers {s.get('servers')}, epochs {s.get('epochs')}, {s.get('consistency')}")
try:
    rows = list(csv.reader(open(os.path.join(out, "metrics.csv"))))
except OSError as e:
    rows = []
    print(f"    FAIL: metrics.csv: {e}")
check(rows[:1] == [["wall_s", "epoch", "step", "train_loss", "test_accuracy", "test_auc"]], f"metrics.csv header: {rows[:1]}")
check(len(rows) == 2 and all(len(r) == 6 and 0.95 <= float(r[5]) <= 1 for r in rows[1:]),
      f"metrics.csv has one row with an AUC: {rows[1:]}")
events = [json.loads(line) for line in open(os.path.join(out, "events.jsonl"))]
done = sorted(e["rank"] for e in events if e.get("event") == "done")
check(done == [0, 1], f"events.jsonl has a done event of ranks 0 and 1 (got {done})")
start = [e for e in events if e.get("event") == "start" and e.get("rank") == 0]
check(len(start) == 1 and start[0].get("table") == "tokens" and start[0].get("test_messages") == 400,
      "rank 0's start event names the table and the 400 test messages")
try:
    head = open(os.path.join(out, "accuracy.png"), "rb").read(8)
except OSError as e:
    head = b""
    print(f"    FAIL: accuracy.png: {e}")
check(head == b"\x89PNG\r\n\x1a\n", "accuracy.png starts with the PNG magic bytes")
sys.exit(0 if ok else 1)
PY
if grep -q "^test AUC 0\.9" "$tmp/a.out" && grep -q "^table rows [1-9]" "$tmp/a.out"; then
  pass "output gives the test AUC and the table rows"
else
  fail "output lacks 'test AUC' or 'table rows'"; show "$tmp/a.out"
fi
alive=()
while read -r pname pid; do
  kill -0 "$pid" 2>/dev/null && alive+=("$pname (pid $pid)")
done < <(cat "$out/pids.txt" 2>/dev/null)
n="$(wc -l <"$out/pids.txt" 2>/dev/null || echo 0)"
if [[ ${#alive[@]} -eq 0 && $n -eq 5 ]]; then
  pass "none of the $n processes of pids.txt is alive"
else
  fail "pids.txt lists $n processes (expected 5); still alive: ${alive[*]:-none}"
fi

# ---------------------------------------------------------------------------
echo "(b) the split, the tokens and the ROC AUC of ps_torch_spam.py"
if PYTHONPATH="$(dirname "$bin")/python" "$py" - "$corpus" <<'PY'; then pass "split, tokens and AUC"; else fail "split, tokens or AUC"; fi
import itertools, sys
import numpy as np
import ps_torch_spam as s
import ps_worker_events as events
train, test = s.split(s.read_corpus(sys.argv[1]))
sizes = (len(train), len(test), sum(m.label for m in test))
print(f"    {sizes[0]} training, {sizes[1]} test messages ({sizes[2]} spam)")
assert sizes == (4810, 1236, 395), sizes
assert all(int(m.md5, 16) % 5 == 0 for m in test) and [m.md5 for m in test] == sorted(m.md5 for m in test)
tokens = s.TOKEN.findall(b"Subject: FREE $$$ now!!! at 50% off".lower())
assert tokens == [b"subject", b"free", b"$$$", b"now", b"!!!", b"at", b"50", b"off"], tokens
ids = s.TokenIds()(b"free money free money")  # u0 u1 b01 u2 b12 u3 b23
assert len(ids) == 7 and ids[0] == ids[3] and ids[1] == ids[5] and ids[2] == ids[6] and len(set(ids)) == 4, ids
one = lambda t: s.TokenIds()(t)[0]
assert list(s.TokenIds(bigrams=False)(b"A, b!")) == [one(b"a"), one(b"b"), one(b"!")]
assert list(s.keep_distinct_prefix(np.array([5, 5, 7, 5, 9, 7]), 2)) == [5, 5, 7, 5]
rng = np.random.default_rng(3)
for n in (2, 7, 50):
    scores, labels = rng.integers(0, 4, n).astype(float), rng.integers(0, 2, n).astype(float)
    labels[:2] = (0, 1)
    pairs = [(p > q) + 0.5 * (p == q) for p, q in itertools.product(scores[labels == 1], scores[labels == 0])]
    assert abs(events.roc_auc(scores, labels) - sum(pairs) / len(pairs)) < 1e-12, (scores, labels)
assert events.roc_auc(np.array([1.0, 2.0]), np.array([1.0, 1.0])) is None
PY

# ---------------------------------------------------------------------------
echo "(c) bad options and corpora: exit 2 naming the option or the directory"
expect_exit2() {  # what pattern command...: exit 2 with `pattern` in its output
  local what="$1" pattern="$2" rc
  shift 2
  "$@" >"$tmp/c.out" 2>&1
  rc=$?
  if [[ $rc -eq 2 ]] && grep -q -- "$pattern" "$tmp/c.out"; then
    pass "$what: exit 2: $(grep -m 1 -- "$pattern" "$tmp/c.out")"
  else
    fail "$what: exit code $rc (expected 2 naming '$pattern'), output: $(cat "$tmp/c.out")"
  fi
}
expect_exit2 "script --epochs 0" "--epochs" "$train" --bin-dir "$bin" --epochs 0 --out "$tmp/c"
if [[ ! -e "$tmp/c" ]]; then pass "no job was started"; else fail "$tmp/c was created"; fi
expect_exit2 "worker --batch_size=0" "error: .*--batch_size" "$worker" --scheduler=127.0.0.1:1 --batch_size=0
expect_exit2 "missing corpus" "$tmp/none" "$worker" --scheduler=127.0.0.1:1 --data_dir="$tmp/none"
mkdir -p "$tmp/short"
for g in easy-ham-1 easy-ham-2 hard-ham-1 spam-1 spam-2; do
  mkdir "$tmp/short/$g"
  for f in $(find "$corpus/$g" -name '*.txt' | sort | head -n 2); do ln -s "$f" "$tmp/short/$g/"; done
done
expect_exit2 "short corpus" "$tmp/short: 10 messages" "$worker" --scheduler=127.0.0.1:1 --data_dir="$tmp/short"

echo
if [[ $failed -eq 0 ]]; then echo "train_torch_spam_test: all checks passed"; else echo "train_torch_spam_test: FAILED"; fi
exit $failed
