#!/usr/bin/env bash
# Checks scripts/bench_vs_ddp.sh end to end, small: one repetition of 1
# epoch on 4,000 images through 2 servers and with PyTorch DDP writes
# results.json (both sides' samples/s positive, ratio = their quotient, both
# accuracies above 0.6: both learn) and results.png, and leaves no process
# behind (the job's pids.txt, and no DDP worker of this run); a bad option
# exits 2 naming it.
#
#   tests/bench_vs_ddp_test.sh [BIN_DIR]     (default: build/bin)
#
# Takes about 20 s.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
py=/usr/bin/python3
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
# shellcheck disable=SC2317  # called by end_test
extra_cleanup() { pkill -f -- "--ddp=file://$tmp/" 2>/dev/null; }
begin_job_test bench_vs_ddp_test "${1:-}"

echo "(a) 1 repetition, 1 epoch on 4000 images, 2 workers, 2 servers; --out relative to the working directory"
(cd "$tmp" && timeout -k 5 240 "$root/scripts/bench_vs_ddp.sh" --bin-dir "$bin" --out out --epochs 1 --reps 1 \
  --train_limit 4000 >"$tmp/a.out" 2>&1)
rc=$?
if [[ $rc -eq 0 ]]; then pass "exit code 0"; else fail "exit code $rc"; tail -n 15 "$tmp/a.out"; fi
if "$py" - "$tmp/out" <<'PY'; then pass "results.json and results.png"; else fail "outputs"; tail -n 15 "$tmp/a.out"; fi
import json, os, sys
out = sys.argv[1]
r = json.load(open(os.path.join(out, "results.json")))
print(f"    ps {r['ps_samples_per_s']} samples/s, ddp {r['ddp_samples_per_s']}, ratio {r['ratio']}; "
      f"accuracy {r['ps_test_accuracy']:.4f} vs {r['ddp_test_accuracy']:.4f}")
assert r["ps_samples_per_s"] > 0 and r["ddp_samples_per_s"] > 0, r
assert abs(r["ratio"] - r["ps_samples_per_s"] / r["ddp_samples_per_s"]) < 1e-3, r
assert r["ps_test_accuracy"] > 0.6 and r["ddp_test_accuracy"] > 0.6, r
assert len(r["runs"]["ps"]) == 1 and len(r["runs"]["ddp"]) == 1 and r["runs"]["ddp"][0]["curve"], r["runs"]
assert os.path.getsize(os.path.join(out, "results.png")) > 0
PY
left=0
while read -r _name pid; do kill -0 "$pid" 2>/dev/null && left=$((left + 1)); done < <(cat "$tmp"/out/ps-0/pids.txt 2>/dev/null)
ddp_left=$(pgrep -c -f -- "--ddp=file://$tmp/")
if [[ -s "$tmp/out/ps-0/pids.txt" && $left -eq 0 && $ddp_left -eq 0 ]]; then pass "no process of the job or of DDP alive"
else fail "$left processes of the job and $ddp_left DDP workers left"; fi

echo "(b) bad option"
"$root/scripts/bench_vs_ddp.sh" --bin-dir "$bin" --out "$tmp/b" --reps 0 >"$tmp/b.out" 2>&1
rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--reps" "$tmp/b.out"; then pass "--reps 0: exit 2"; else fail "exit $rc"; cat "$tmp/b.out"; fi

[[ $failed -eq 0 ]] && echo "bench_vs_ddp_test: PASS" || echo "bench_vs_ddp_test: FAIL"
exit $failed
