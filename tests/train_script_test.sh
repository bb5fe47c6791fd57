#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions called through trap and poll
# Checks scripts/train_fashion_mnist.sh and scripts/launch_job.py end to end:
#   (a) a tiny job succeeds and writes summary.json, metrics.csv, accuracy.png;
#   (b) a worker killed with SIGKILL makes the launcher stop every process of
#       the job, name the dead worker and exit non-zero;
#   (c) a bad option exits 2 naming the option;
#   (d) a job started with --init_from from (a)'s model.npz evaluates first as (a) ended;
#   (e) the README's compressed run over emulated links, small (where network
#       namespaces can be made; the reason printed otherwise).
#
#   tests/train_script_test.sh [BIN_DIR]     (default: build/bin)
#
# Takes about 10 s. Every wait polls for its condition with a deadline.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
train="$root/scripts/train_fashion_mnist.sh"
py=/usr/bin/python3
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
launcher_pid=""
# The launcher of (b), if it is still there (the job's processes go by the
# pids.txt files, in end_test).
# shellcheck disable=SC2317  # called by end_test
extra_cleanup() {
  if [[ -n "$launcher_pid" ]] && kill -0 "$launcher_pid" 2>/dev/null; then
    echo "cleanup: stopping launcher (pid $launcher_pid)"
    kill -TERM "$launcher_pid" 2>/dev/null   # it stops its job, SIGKILL after 3 s
    poll 6 pid_gone "$launcher_pid" || kill -9 "$launcher_pid" 2>/dev/null
  fi
}
begin_job_test train_script_test "${1:-}"


# ---------------------------------------------------------------------------
echo "(a) tiny job: 2 workers, 1 server, 1 epoch on 4000 images; expects exit 0, summary.json," \
  "metrics.csv with >= 2 rows, a PNG plot"
out_a="$tmp/a"
timeout -k 5 60 "$train" --bin-dir "$bin" --workers 2 --servers 1 --epochs 1 --out "$out_a" \
  -- --train_limit=4000 --test_limit=1000 --eval_every=20 >"$tmp/a.out" 2>&1
rc=$?
if [[ $rc -eq 0 ]]; then pass "exit code 0"; else fail "exit code $rc"; show "$tmp/a.out"; fi
if "$py" - "$out_a" <<'EOF'; then pass "summary.json, metrics.csv, events.jsonl and accuracy.png are right"; else fail "outputs of the run"; show "$tmp/a.out"; fi
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
keys = ["test_accuracy", "epochs", "wall_s", "samples_per_s", "workers", "servers", "consistency", "device", "placement"]
check(all(k in s for k in keys), f"summary.json has {', '.join(keys)} (missing: {[k for k in keys if k not in s]})")
check(isinstance(s.get("test_accuracy"), (int, float)) and s["test_accuracy"] > 0.5,
      f"test_accuracy {s.get('test_accuracy')} > 0.5")
check((s.get("workers"), s.get("servers"), s.get("epochs"), s.get("consistency"), s.get("device"), s.get("placement"))
      == (2, 1, 1, "sync", "cpu", "auto"), f"setup recorded: {s}")
check(s.get("wall_s", 0) > 0 and s.get("samples_per_s", 0) > 0, "wall_s and samples_per_s positive")
try:
    rows = list(csv.reader(open(os.path.join(out, "metrics.csv"))))
except OSError as e:
    rows = []
    print(f"    FAIL: metrics.csv: {e}")
check(rows[:1] == [["wall_s", "epoch", "step", "train_loss", "test_accuracy"]], f"metrics.csv header: {rows[:1]}")
check(len(rows) - 1 >= 2, f"metrics.csv has {len(rows) - 1} rows (>= 2)")
check(all(len(r) == 5 and all(float(x) >= 0 for x in r) for r in rows[1:]), "metrics.csv rows are 5 numbers")
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
# The trained model came out (model.npz, from the servers' final checkpoints):
# a numpy forward pass of the MLP as the README documents it (fcI.weight is
# [in, out], x @ W + b, ReLU between layers, pixels / 255) gives the job's
# final test accuracy on the same 1000 test images.
if "$py" - "$out_a" <<'EOF'; then pass "model.npz: a numpy forward pass reproduces the final test accuracy"; else fail "model.npz"; show "$tmp/a.out"; fi
import gzip, json, os, sys
import numpy as np
out = sys.argv[1]
m = np.load(os.path.join(out, "model.npz"))
final = json.load(open(os.path.join(out, "summary.json")))["test_accuracy"]
def idx(name):
    data = gzip.open(f"/usr/share/datasets/fashion-mnist/{name}-ubyte.gz").read()
    return np.frombuffer(data, np.uint8, offset=4 + 4 * data[3])
x = idx("t10k-images-idx3").reshape(-1, 784)[:1000].astype(np.float32) / 255
y = idx("t10k-labels-idx1")[:1000]
layers = len([k for k in m.files if k.endswith(".weight")])
for i in range(layers):
    x = x @ m[f"fc{i}.weight"] + m[f"fc{i}.bias"]
    x = np.maximum(x, 0) if i + 1 < layers else x
acc = float((x.argmax(1) == y).mean())
print(f"    numpy forward pass: {acc:.4f}; the job's final evaluation: {final:.4f}; arrays {sorted(m.files)}")
sys.exit(0 if abs(acc - final) <= 1e-3 else 1)
EOF
if grep -q "^test accuracy 0\.[0-9]" "$tmp/a.out" && grep -q "^plot: $out_a/accuracy.png" "$tmp/a.out"; then
  pass "output gives the test accuracy and where the plot is"
else
  fail "output lacks 'test accuracy' or 'plot:'"; show "$tmp/a.out"
fi

# ---------------------------------------------------------------------------
echo "(b) failure: 2 workers, 3 epochs on 20000 images; kill -9 worker-1 once it trains; expects a" \
  "non-zero exit within 20 s naming worker-1, and no process of the job left"
out_b="$tmp/b"
"$train" --bin-dir "$bin" --workers 2 --servers 1 --epochs 3 --out "$out_b" \
  -- --train_limit=20000 --test_limit=1000 >"$tmp/b.out" 2>&1 &
launcher_pid=$!
worker_pid() { awk '$1 == "worker-1" { print $2 }' "$out_b/pids.txt" 2>/dev/null; }
launcher_alive() { kill -0 "$launcher_pid" 2>/dev/null; }
launcher_gone() { ! launcher_alive; }
known() { [[ -n "$(worker_pid)" ]] || ! launcher_alive; }
training() { grep -q '"event":"progress"' "$out_b/events.jsonl" 2>/dev/null || ! launcher_alive; }
victim=""
if ! poll 30 known || ! launcher_alive; then
  fail "pids.txt never named worker-1 (or the launcher ended first)"; show "$tmp/b.out"
else
  victim="$(worker_pid)"
  pass "worker-1 has pid $victim"
  if poll 20 training && launcher_alive; then
    pass "the job is training (a progress event arrived)"
  else
    fail "no progress event within 20 s (or the launcher ended first)"
  fi
  kill -9 "$victim" 2>/dev/null && echo "  killed worker-1 (pid $victim) with SIGKILL"
  t0=$SECONDS
  if poll 20 launcher_gone; then
    wait "$launcher_pid"
    rc=$?
    launcher_pid=""
    if [[ $rc -ne 0 ]]; then pass "launcher exited with code $rc after $((SECONDS - t0)) s"; else fail "launcher exited 0"; fi
    if grep -q "worker-1 (pid $victim.*killed by signal 9" "$tmp/b.out"; then
      pass "output names the dead worker: $(grep -m1 "worker-1 (pid $victim" "$tmp/b.out")"
    else
      fail "output does not name worker-1 (pid $victim) as killed by signal 9"; show "$tmp/b.out"
    fi
  else
    fail "launcher still running 20 s after the kill"; show "$tmp/b.out"
  fi
fi
alive=()
while read -r name pid; do
  kill -0 "$pid" 2>/dev/null && alive+=("$name (pid $pid)")
done < <(cat "$out_b/pids.txt" 2>/dev/null)
n="$(wc -l <"$out_b/pids.txt" 2>/dev/null || echo 0)"
if [[ ${#alive[@]} -eq 0 && $n -eq 4 ]]; then
  pass "none of the $n processes of pids.txt is alive"
else
  fail "pids.txt lists $n processes (expected 4); still alive: ${alive[*]:-none}"
fi

# ---------------------------------------------------------------------------
echo "(d) --init_from: a new job started from (a)'s model.npz with a learning rate of 1e-30; expects its first" \
  "evaluation to be (a)'s final one (SGD at 1e-30: two steps that change no weight above 1e-23)"
out_d="$tmp/d"
timeout -k 5 60 "$train" --bin-dir "$bin" --workers 2 --servers 1 --epochs 1 --out "$out_d" \
  -- --train_limit=640 --test_limit=1000 --eval_every=2 --optimizer=sgd --lr=1e-30 --init_from="$out_a/model.npz" \
  >"$tmp/d.out" 2>&1
rc=$?
if [[ $rc -eq 0 ]]; then pass "exit code 0"; else fail "exit code $rc"; show "$tmp/d.out"; fi
if "$py" - "$out_a" "$out_d" <<'EOF'; then pass "the first evaluation is the exported model's"; else fail "--init_from"; show "$tmp/d.out"; fi
import json, os, sys
a, d = sys.argv[1], sys.argv[2]
final_a = json.load(open(os.path.join(a, "summary.json")))["test_accuracy"]
evals = [json.loads(l) for l in open(os.path.join(d, "events.jsonl")) if '"event":"eval"' in l]
first = evals[0]["test_accuracy"] if evals else None
print(f"    (a)'s final evaluation {final_a}; (d)'s first {first}")
sys.exit(0 if first == final_a else 1)
EOF

# ---------------------------------------------------------------------------
echo "(e) README's compressed run, small: 2 workers, 1 server over emulated 1 Gbit/s links, --compression=bf16;" \
  "expects exit 0, the network and the compression recorded, a trained model"
if reason="$("$py" "$root/scripts/netns.py" check 2>&1)"; then
  out_e="$tmp/e"
  timeout -k 5 90 "$train" --bin-dir "$bin" --workers 2 --servers 1 --epochs 1 --network emulated --rate 1gbit \
    --out "$out_e" -- --compression=bf16 --train_limit=2000 --test_limit=500 >"$tmp/e.out" 2>&1
  rc=$?
  if [[ $rc -eq 0 ]]; then pass "exit code 0"; else fail "exit code $rc"; show "$tmp/e.out"; fi
  if "$py" - "$out_e" <<'EOF'; then pass "emulated links and bf16 recorded, accuracy > 0.5"; else fail "(e)'s outputs"; show "$tmp/e.out"; fi
import json, os, sys
s = json.load(open(os.path.join(sys.argv[1], "summary.json")))
starts = [json.loads(l) for l in open(os.path.join(sys.argv[1], "events.jsonl")) if '"event":"start"' in l]
print(f"    network {s['network'].get('kind')} at {s['network'].get('rate')}, accuracy {s['test_accuracy']}, "
      f"compression {[e.get('compression') for e in starts]}")
ok = (s["network"].get("kind"), s["network"].get("rate")) == ("emulated", "1gbit") and s["test_accuracy"] > 0.5
sys.exit(0 if ok and starts and all(e.get("compression") == "bf16" for e in starts) else 1)
EOF
else
  echo "  skipped (e): no network namespaces here: $reason"
fi

# ---------------------------------------------------------------------------
echo "(c) bad option: --workers 0; expects exit 2 and a message naming --workers"
"$train" --bin-dir "$bin" --workers 0 --out "$tmp/c" >"$tmp/c.out" 2>&1
rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--workers" "$tmp/c.out"; then
  pass "exit 2: $(head -n 1 "$tmp/c.out")"
else
  fail "exit code $rc (expected 2), output: $(cat "$tmp/c.out")"
fi
if [[ ! -e "$tmp/c" ]]; then pass "no job was started"; else fail "$tmp/c was created"; fi

echo
if [[ $failed -eq 0 ]]; then echo "train_script_test: all checks passed"; else echo "train_script_test: FAILED"; fi
exit $failed
