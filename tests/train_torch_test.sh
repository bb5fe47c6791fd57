#!/usr/bin/env bash
# Checks scripts/train_torch.sh end to end: a PyTorch CNN trained by two
# ps_torch_worker processes through two servers (1 epoch on 6,000 images)
# exits 0 and writes summary.json (test accuracy above 0.6: the CNN learns;
# 2 workers; a positive throughput), metrics.csv and a PNG plot, model.pt
# (loads with strict=True, evaluates to the final test accuracy) and
# model.npz (the same values), and leaves no process behind; a bad option
# exits 2 naming it.
#
#   tests/train_torch_test.sh [BIN_DIR]     (default: build/bin)
#
# Takes about 15 s.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
py=/usr/bin/python3
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_job_test train_torch_test "${1:-}"

echo "(a) 2 ps_torch_worker, 2 servers, sync, 1 epoch on 6000 images"
timeout -k 5 120 "$root/scripts/train_torch.sh" --bin-dir "$bin" --epochs 1 --out "$tmp/a" \
  -- --train_limit=6000 --test_limit=1000 >"$tmp/a.out" 2>&1
rc=$?
if [[ $rc -eq 0 ]]; then pass "exit code 0"; else fail "exit code $rc"; tail -n 15 "$tmp/a.out"; fi
if "$py" - "$tmp/a" <<'PY'; then pass "summary.json, metrics.csv and accuracy.png"; else fail "outputs"; tail -n 15 "$tmp/a.out"; fi
import json, os, sys
out = sys.argv[1]
s = json.load(open(os.path.join(out, "summary.json")))
print(f"    test_accuracy {s['test_accuracy']:.4f}, {s['samples_per_s']} samples/s, {s['workers']} workers")
assert s["test_accuracy"] > 0.6 and s["workers"] == 2 and s["samples_per_s"] > 0, s
rows = open(os.path.join(out, "metrics.csv")).read().splitlines()
assert rows[0].startswith("wall_s,epoch,step,train_loss,test_accuracy") and len(rows) >= 2, rows
assert os.path.getsize(os.path.join(out, "accuracy.png")) > 0
PY
if PYTHONPATH="$root/worker/python/examples:$(dirname "$bin")/python" "$py" - "$tmp/a" <<'PY'; then pass "model.pt loads strictly and evaluates to the final test accuracy; model.npz holds the same values"; else fail "model.pt / model.npz"; tail -n 15 "$tmp/a.out"; fi
import json, os, sys
import numpy as np
import torch
import ps_torch_worker as w
out = sys.argv[1]
final = json.load(open(os.path.join(out, "summary.json")))["test_accuracy"]
net = w.make_model("cnn")
state = torch.load(os.path.join(out, "model.pt"))
net.load_state_dict(state, strict=True)
tx, ty = w.load(w.FASHION_MNIST, "t10k", 1000)
acc, _ = w.evaluate(net, tx, ty)
exported = np.load(os.path.join(out, "model.npz"))
same = all(np.array_equal(exported[n].reshape(v.shape), v.numpy().astype(np.float32)) for n, v in state.items())
print(f"    model.pt: {len(state)} entries, test accuracy {acc:.4f} (the job's final: {final:.4f}); model.npz the same: {same}")
sys.exit(0 if abs(acc - final) <= 1e-4 and same and sorted(exported.files) == sorted(state) else 1)
PY
left=0
while read -r _name pid; do kill -0 "$pid" 2>/dev/null && left=$((left + 1)); done < <(cat "$tmp/a/pids.txt" 2>/dev/null)
if [[ -s "$tmp/a/pids.txt" && $left -eq 0 ]]; then pass "no process of pids.txt alive"; else fail "$left processes left"; fi

echo "(b) bad option"
"$root/scripts/train_torch.sh" --bin-dir "$bin" --workers zero >"$tmp/b.out" 2>&1
rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--workers" "$tmp/b.out"; then pass "--workers zero: exit 2"; else fail "exit $rc"; fi

[[ $failed -eq 0 ]] && echo "train_torch_test: PASS" || echo "train_torch_test: FAIL"
exit $failed
