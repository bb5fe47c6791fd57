#!/usr/bin/env bash
# benchmarks/headline.sh --quick: every step on a tiny budget (about 80 s on
# 2 cores; the steps over emulated links only as root with network
# namespaces, else skipped with the reason). Checks the folder it writes:
# README.md with the command and the machine, steps.jsonl with every step ok
# or skipped with a reason, the steps' JSON lines, summary.json and
# summary.md with a figure per step, the plots; and that a bad option exits 2.
#
#   tests/headline_test.sh [BIN_DIR]     (default: build/bin)
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
py=/usr/bin/python3
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_job_test headline_test "${1:-}"

echo "benchmarks/headline.sh --quick"
if timeout -k 10 240 "$root/benchmarks/headline.sh" --quick --bin-dir "$bin" --out "$tmp/out" >"$tmp/stdout" 2>&1; then
  pass "exit 0"
else
  fail "exit $?"; tail -30 "$tmp/stdout"
fi
if grep -q "^\[0:00 elapsed, about .* left\] step 1/" "$tmp/stdout"; then pass "a progress line per step"; else fail "no progress lines"; fi

if "$py" - "$tmp/out" <<'PY'; then pass "README.md, steps.jsonl, JSON lines, summary.json, summary.md, plots"; else fail "outputs"; fi
import json, os, sys
out = sys.argv[1]
errors = []
def need(cond, what):
    if not cond:
        errors.append(what)
files = set(os.listdir(out))
for f in ("README.md", "steps.jsonl", "machine.json", "summary.json", "summary.md", "pushpull.jsonl", "update_bench.jsonl",
          "train_bench.jsonl", "ceiling.jsonl", "torch_vs_ddp.json", "sync_vs_async.json", "ctr.json",
          "table_bench.jsonl", "table_disk_bench.jsonl", "control_plane.jsonl", "pushpull.png", "train_bench.png",
          "sync_vs_async.png", "ratios.png"):
    need(f in files, f"{f} missing")
steps = [json.loads(l) for l in open(os.path.join(out, "steps.jsonl"))]
need(len(steps) >= 17, f"{len(steps)} steps in steps.jsonl")
for s in steps:
    need(s["status"] in ("ok", "skipped"), f"step {s['step']}: {s['status']} ({s.get('reason')})")
    need(s["status"] != "skipped" or s.get("reason"), f"step {s['step']} skipped without a reason")
    need(s["status"] != "ok" or s["commands"], f"step {s['step']} ran no command")
for name in ("pushpull.jsonl", "update_bench.jsonl", "train_bench.jsonl", "ceiling.jsonl"):
    if name in files:
        rows = [json.loads(l) for l in open(os.path.join(out, name)) if l.strip()]
        need(rows and all("bench" in r for r in rows), f"{name}: not JSON lines of a benchmark")
summary = json.load(open(os.path.join(out, "summary.json")))
figures = summary.get("figures", [])
ok_steps = {s["step"] for s in steps if s["status"] == "ok"} - {"pushpull_sizes"}  # that one is pushpull.png
with_figure = {f["step"] for f in figures if f["ratio"] or f["status"] == "ok"}
need(ok_steps <= with_figure, f"steps without a figure: {sorted(ok_steps - with_figure)}")
for f in figures:
    if f["status"] == "ok" and f["ratio_value"] is not None:
        need(f["ratio_value"] > 0 and f["ours"] and f["reference"], f"figure without ours/reference/ratio: {f}")
need(summary["machine"]["nproc"] >= 1 and summary["machine"]["quick"] is True, "machine.json in summary.json")
md = open(os.path.join(out, "summary.md")).read()
need(md.startswith("| what | ours | reference"), "summary.md is not the table")
readme = open(os.path.join(out, "README.md")).read()
for text in ("benchmarks/headline.sh --quick", "cores", "GiB", "commit", "## Figures", "push+pull", "build/bin/"):
    need(text in readme, f"README.md lacks {text!r}")
for e in errors:
    print("   ", e)
sys.exit(1 if errors else 0)
PY

grep -q "^headline: .*steps in " "$tmp/stdout" && pass "the total time printed" || fail "no total time"
if grep -q "logs are kept in" "$tmp/stdout"; then fail "a step failed (its scratch directory kept)"; fi

"$root/benchmarks/headline.sh" --steps nosuchstep --out "$tmp/bad" >"$tmp/bad.out" 2>&1; rc=$?
if [[ $rc -eq 2 ]] && grep -q "no step 'nosuchstep'" "$tmp/bad.out"; then pass "--steps nosuchstep: exit 2"; else fail "--steps nosuchstep: exit $rc"; fi
"$root/benchmarks/headline.sh" --quick --out "$tmp/out" >"$tmp/again.out" 2>&1; rc=$?
if [[ $rc -eq 2 ]] && grep -q "already holds a summary.json" "$tmp/again.out"; then pass "an existing result not rewritten: exit 2"; else fail "rerun into the same folder: exit $rc"; fi

[[ $failed -eq 0 ]] && echo "headline_test: PASS" || echo "headline_test: FAIL"
exit $failed
