#!/usr/bin/env bash
# Smoke test of train_bench (docs/benchmarks.md) on a tiny budget: it runs
# as documented, exits 0, and prints its two JSON lines ("local" and "ps")
# with the keys the README lists, the ps line with checkpoints on against off;
# --device=null (the ceiling) prints one line per configuration and
# transport, each with a positive ratio_vs_bound; --overlap prints its line
# and the timeline of 3 steps, which scripts/plot_timeline.py draws.
#
#   tests/train_bench_smoke_test.sh TRAIN_BENCH
set -uo pipefail
bench="${1:?usage: $0 TRAIN_BENCH}"
out="$(mktemp /tmp/train_bench_smoke.XXXXXX)"
tcp="$(mktemp /tmp/train_bench_smoke.XXXXXX)"
ceiling="$(mktemp /tmp/train_bench_smoke.XXXXXX)"
overlap="$(mktemp /tmp/train_bench_smoke.XXXXXX)"
trap 'rm -f "$out" "$out.err" "$out.png" "$tcp" "$ceiling" "$overlap" "$overlap.trace" "$overlap.png"' EXIT
if ! timeout 120 "$bench" --train_limit=640 --epochs=1 --warmup_steps=2 >"$out"; then
  echo "FAIL: train_bench exited non-zero"; cat "$out"; exit 1
fi
if ! timeout 120 "$bench" --train_limit=640 --epochs=1 --warmup_steps=2 --skip_local --shm=false --caller_spin=0us >"$tcp"; then
  echo "FAIL: train_bench --shm=false exited non-zero"; cat "$tcp"; exit 1
fi
# The ceiling, as the docs run it, on a small budget.
if ! timeout 300 "$bench" --device=null --train_limit=2560 --warmup_steps=5 >"$ceiling"; then
  echo "FAIL: train_bench --device=null exited non-zero"; cat "$ceiling"; exit 1
fi
if ! timeout 300 "$bench" --overlap --shm=false --train_limit=1280 --warmup_steps=5 --trace_out="$overlap.trace" \
    >"$overlap"; then
  echo "FAIL: train_bench --overlap exited non-zero"; cat "$overlap"; exit 1
fi
# A warm-up as long as the run is refused before anything runs.
if timeout 60 "$bench" --train_limit=640 --epochs=1 >/dev/null 2>"$out.err"; then
  echo "FAIL: train_bench took --warmup_steps=50 for a run of 10 steps"; exit 1
fi
if ! grep -q "warmup_steps=50 must be in \[0, 10)" "$out.err"; then
  echo "FAIL: the refusal does not say why:"; cat "$out.err"; exit 1
fi
if timeout 60 "$bench" --caller_spin=-5us >/dev/null 2>"$out.err" || ! grep -q -- "--caller_spin" "$out.err"; then
  echo "FAIL: train_bench --caller_spin=-5us was not refused by name:"; cat "$out.err"; exit 1
fi
/usr/bin/python3 - "$out" "$tcp" "$ceiling" "$overlap" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tcp = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
ceiling = [json.loads(l) for l in open(sys.argv[3]) if l.strip()]
[overlap] = [json.loads(l) for l in open(sys.argv[4]) if l.strip()]
for key in ("compute_ms", "comm_ms", "step_ms_pieces", "step_ms_whole"):
    if not overlap[key] > 0:
        sys.exit(f"FAIL: --overlap {key} in {overlap}")
bound = max(overlap["compute_ms"], overlap["comm_ms"])
if abs(overlap["ratio_pieces_vs_max"] - overlap["step_ms_pieces"] / bound) > 0.01 or overlap["pieces"] != "fc0.weight:2":
    sys.exit(f"FAIL: --overlap line {overlap}")
spans = [json.loads(l) for l in open(sys.argv[4] + ".trace") if l.strip()]
steps = sorted({s["step"] for s in spans})
kinds = {(s["step"], s["what"]) for s in spans}
if len(steps) != 3 or any((step, k) not in kinds for step in steps for k in ("compute", "wait", "push")):
    sys.exit(f"FAIL: the trace of --overlap holds {sorted(kinds)}")
# Each traced step pushes every layer: 3 layers, the first in 2 pieces and its bias.
if any(sum(1 for s in spans if s["step"] == step and s["what"] == "push") != 5 for step in steps):
    sys.exit(f"FAIL: pushes per traced step: {[s for s in spans if s['what'] == 'push']}")
print("ok: --overlap", overlap["ratio_pieces_vs_max"], "of max(compute, communication) with pieces; traced", steps)
runs = sorted((l["workers"], l["servers"], l["transport"]) for l in ceiling)
if runs != [(1, 1, "shm"), (1, 1, "tcp"), (2, 2, "shm"), (2, 2, "tcp")]:
    sys.exit(f"FAIL: --device=null ran {runs}, not 1x1 and 2x2 over shm and tcp")
for l in ceiling:
    if not (l["steps_per_s"] > 0 and l["bound_steps_per_s"] > 0 and l["ratio_vs_bound"] > 0 and
            l["params"] == 535818 and l["data_plane"] == l["transport"]):
        sys.exit(f"FAIL: ceiling line {l}")
print("ok: the ceiling's ratio_vs_bound:", [(l["workers"], l["servers"], l["transport"], l["ratio_vs_bound"]) for l in ceiling])
planes = [(l.get("data_plane"), l.get("caller_spin_us")) for l in lines + tcp if l.get("mode") == "ps"]
if planes != [("shm", 100), ("tcp", 0)]:
    sys.exit(f"FAIL: data_plane, caller_spin of the default run and of --shm=false --caller_spin=0us: {planes}")
modes = {l.get("mode"): l for l in lines if l.get("bench") == "train"}
need = {"local": {"batch", "samples_per_s"},
        "ps": {"servers", "workers", "batch", "consistency", "data_plane", "pipeline", "samples_per_s", "wait_share",
               "test_accuracy", "ratio_vs_local", "samples_per_s_ckpt_on", "ratio_ckpt_on_vs_off"}}
for mode, keys in need.items():
    if mode not in modes:
        sys.exit(f"FAIL: no {mode} line in {lines}")
    missing = keys - modes[mode].keys()
    if missing:
        sys.exit(f"FAIL: {mode} line lacks {sorted(missing)}")
    if not modes[mode]["samples_per_s"] > 0:
        sys.exit(f"FAIL: {mode} samples_per_s is {modes[mode]['samples_per_s']}")
print("ok: train_bench printed", ", ".join(sorted(modes)), "and data_plane shm, then tcp with --shm=false")
PY
[ $? -eq 0 ] || exit 1
# The plot of docs/benchmarks.md, from both runs' lines.
here="$(cd "$(dirname "$0")/.." && pwd)"
cat "$tcp" >> "$out"
if ! /usr/bin/python3 "$here/scripts/plot_train_bench.py" "$out" "$out.png"; then
  echo "FAIL: scripts/plot_train_bench.py failed"; exit 1
fi
if [ "$(head -c 8 "$out.png" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then
  echo "FAIL: $out.png is not a PNG"; exit 1
fi
echo "ok: scripts/plot_train_bench.py drew $out.png"
if ! /usr/bin/python3 "$here/scripts/plot_timeline.py" "$overlap.trace" "$overlap.png" ||
    [ "$(head -c 8 "$overlap.png" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then
  echo "FAIL: scripts/plot_timeline.py drew no PNG"; exit 1
fi
echo "ok: scripts/plot_timeline.py drew $overlap.png"
