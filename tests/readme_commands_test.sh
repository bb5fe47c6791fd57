#!/usr/bin/env bash
# What a newcomer runs after the quickstart, as README.md shows it, small,
# with no further build (.ci/run runs it on a clean checkout between the
# quickstart and the tests):
#   (a) the quickstart's job left out/train-*/ with summary.json and model.npz
#       (the MLP's 535,818 parameters, numpy reads them);
#   (b) README's PyTorch script (its ```python block) under scripts/ps_run, 2 workers;
#   (c) worker/python/examples/my_model.py under scripts/ps_run: exit 0, a state_dict;
#   (d) scripts/train_torch.sh, 1 epoch on 2,000 images: summary.json, model.pt, model.npz;
#   (e) scripts/bench_sync_vs_async.sh, sync and async, 1 epoch on 2,000 images: results.json.
# Nothing here builds: a program missing is a failure of the quickstart.
#
#   tests/readme_commands_test.sh [BIN_DIR]     (default: build/bin)
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
py=/usr/bin/python3
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_job_test readme_commands_test "${1:-}"
cd "$root"

echo "(a) the quickstart's outputs"
run="$(ls -td out/train-*/ 2>/dev/null | head -n 1)"
if [[ -n "$run" ]] && "$py" - "$run" <<'PY'; then pass "model.npz and summary.json in $run"; else fail "quickstart outputs in '${run:-out/train-*}'"; fi
import json, os, sys
import numpy as np
d = sys.argv[1]
s = json.load(open(os.path.join(d, "summary.json")))
m = np.load(os.path.join(d, "model.npz"))
n = sum(m[k].size for k in m.files)
print(f"    test_accuracy {s['test_accuracy']:.4f}; model.npz: {len(m.files)} arrays, {n} values")
assert s["test_accuracy"] > 0.7, s["test_accuracy"]
assert n == 535818, n
PY

echo "(b) README's PyTorch script under scripts/ps_run"
"$py" - README.md "$tmp/readme_script.py" <<'PY' || die "README.md has no \`\`\`python block"
import re, sys
blocks = re.findall(r"```python\n(.*?)```", open(sys.argv[1]).read(), re.S)
open(sys.argv[2], "w").write(blocks[0])
PY
if timeout -k 5 300 scripts/ps_run --workers 2 --servers 2 --out "$tmp/b" -- "$py" "$tmp/readme_script.py" \
    >"$tmp/b.out" 2>&1; then
  pass "exit 0: $(grep -c '' "$tmp/b.out") lines; last: $(tail -n 1 "$tmp/b.out")"
else
  fail "README's script under ps_run"; show "$tmp/b.out"
fi

echo "(c) worker/python/examples/my_model.py under scripts/ps_run"
if timeout -k 5 300 scripts/ps_run --workers 2 --servers 2 --out "$tmp/c" -- \
    "$py" worker/python/examples/my_model.py "$tmp/my.pt" 1 4000 >"$tmp/c.out" 2>&1 &&
    "$py" -c "import sys, torch; sd = torch.load(sys.argv[1]); print('    state_dict:', len(sd), 'entries')" "$tmp/my.pt"; then
  pass "exit 0 and a state_dict"
else
  fail "my_model.py under ps_run"; show "$tmp/c.out"
fi

echo "(d) scripts/train_torch.sh, small"
if timeout -k 5 300 scripts/train_torch.sh --epochs 1 --out "$tmp/d" -- --train_limit=2000 --test_limit=500 \
    >"$tmp/d.out" 2>&1 && [[ -s "$tmp/d/summary.json" && -s "$tmp/d/model.pt" && -s "$tmp/d/model.npz" ]]; then
  pass "summary.json, model.pt, model.npz"
else
  fail "train_torch.sh"; show "$tmp/d.out"
fi

echo "(e) scripts/bench_sync_vs_async.sh, small"
if timeout -k 5 600 scripts/bench_sync_vs_async.sh --epochs 1 --modes sync,async --train-limit 2000 \
    --test-limit 500 --out "$tmp/e" >"$tmp/e.out" 2>&1 && [[ -s "$tmp/e/results.json" ]]; then
  pass "results.json"
else
  fail "bench_sync_vs_async.sh"; show "$tmp/e.out"
fi

exit "$failed"
