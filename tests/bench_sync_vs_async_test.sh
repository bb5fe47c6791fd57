#!/usr/bin/env bash
# Smoke run of scripts/bench_sync_vs_async.sh on a tiny budget: two modes, a
# 2x straggler, 2000 images. Checks that every output appears and parses: one
# JSON line per mode on stdout with every field, results.json, summary.md with
# a row per mode, accuracy_vs_time.png (a PNG); and that a bad flag is refused
# naming it.
#
#   tests/bench_sync_vs_async_test.sh [BIN_DIR]     (default: build/bin)
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
py=/usr/bin/python3
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
# launch_job.py stops its own jobs; end_test catches anything a killed run left.
begin_job_test bench_sync_vs_async_test "${1:-}"

"$root/scripts/bench_sync_vs_async.sh" --bin-dir "$bin" --out "$tmp/out" --modes sync,async --epochs 1 \
  --train-limit 2000 --test-limit 500 --evals 3 --straggler 1:2 >"$tmp/stdout" 2>"$tmp/stderr" \
  || { tail -20 "$tmp/stderr"; die "the benchmark exited non-zero"; }

"$py" - "$tmp/stdout" "$tmp/out" <<'PY' || die "outputs are incomplete (see above)"
import json, os, sys
stdout, out = sys.argv[1], sys.argv[2]
lines = [json.loads(l) for l in open(stdout) if l.strip()]
assert [l["mode"] for l in lines] == ["sync", "async"], [l.get("mode") for l in lines]
keys = {"final_accuracy", "time_to_0.80_s", "time_to_0.85_s", "samples_per_s", "worker_samples_per_s",
        "wait_s_mean", "wait_share", "staleness_mean", "staleness_p99", "staleness_max", "straggler"}
for l in lines:
    missing = keys - set(l)
    assert not missing, f"{l['mode']}: missing {missing}"
    assert 0.3 < l["final_accuracy"] <= 1, l["final_accuracy"]   # 10 classes: chance is 0.1
    assert len(l["worker_samples_per_s"]) == 2 and all(r > 0 for r in l["worker_samples_per_s"])
    assert l["straggler"] == "1:2"
# Sync applies every update at staleness 0; async's are at least as stale.
assert lines[0]["staleness_max"] == 0, lines[0]
assert lines[1]["staleness_mean"] >= 0
results = json.load(open(os.path.join(out, "results.json")))
assert [m["mode"] for m in results["modes"]] == ["sync", "async"]
md = open(os.path.join(out, "summary.md")).read()
assert "| sync |" in md and "| async |" in md, md
png = open(os.path.join(out, "accuracy_vs_time.png"), "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000, len(png)
for mode in ("sync", "async"):
    assert os.path.isfile(os.path.join(out, "runs", mode, "summary.json")), mode
print("outputs ok:", [(l["mode"], l["final_accuracy"], l["samples_per_s"]) for l in lines])
PY

"$root/scripts/bench_sync_vs_async.sh" --bin-dir "$bin" --out "$tmp/bad" --straggler 5:3 >"$tmp/bad.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] || die "--straggler 5:3 with 2 workers: exit $rc, want 2"
grep -q "straggler rank 5 does not exist" "$tmp/bad.out" || { cat "$tmp/bad.out"; die "no message naming --straggler"; }

# --replicas: sync once with one copy of each slice and once with two; the
# second line compares its samples/s with the first's.
"$root/scripts/bench_sync_vs_async.sh" --bin-dir "$bin" --out "$tmp/rep" --modes sync --replicas 1,2 --epochs 1 \
  --train-limit 2000 --test-limit 500 --evals 2 >"$tmp/rep.stdout" 2>"$tmp/rep.stderr" \
  || { tail -20 "$tmp/rep.stderr"; die "the benchmark with --replicas 1,2 exited non-zero"; }
"$py" - "$tmp/rep.stdout" "$tmp/rep" <<'PY' || die "--replicas outputs are incomplete (see above)"
import json, os, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert [(l["mode"], l["replicas"]) for l in lines] == [("sync", 1), ("sync", 2)], lines
assert "ratio_vs_1_replica" not in lines[0] and lines[1]["ratio_vs_1_replica"] > 0, lines
assert all(0.3 < l["final_accuracy"] <= 1 for l in lines), lines
assert os.path.isfile(os.path.join(sys.argv[2], "runs", "sync-k2", "summary.json"))
assert "| sync K=2 |" in open(os.path.join(sys.argv[2], "summary.md")).read()
print("replicas ok:", [(l["replicas"], l["samples_per_s"]) for l in lines])
PY
"$root/scripts/bench_sync_vs_async.sh" --bin-dir "$bin" --out "$tmp/bad3" --replicas 1,3 >"$tmp/bad3.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] || die "--replicas 1,3 with 2 servers: exit $rc, want 2"
grep -q "more copies than the 2 servers" "$tmp/bad3.out" || { cat "$tmp/bad3.out"; die "no message naming --replicas"; }
# --compressions: sync uncompressed, with bf16 pushes and pulls, and with top-k
# after a warm-up and delta pulls; the later lines compare with the first, and
# compression.png plots them.
"$root/scripts/bench_sync_vs_async.sh" --bin-dir "$bin" --out "$tmp/cmp" --modes sync \
  --compressions 'none,bf16,topk:0.1,pull=delta,warmup=10' \
  --compress-min-bytes 4096 --epochs 1 --train-limit 2000 --test-limit 500 --evals 2 >"$tmp/cmp.stdout" \
  2>"$tmp/cmp.stderr" || { tail -20 "$tmp/cmp.stderr"; die "the benchmark with --compressions exited non-zero"; }
"$py" - "$tmp/cmp.stdout" "$tmp/cmp" <<'PY' || die "--compressions outputs are incomplete (see above)"
import json, os, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert [l["compression"] for l in lines] == ["none", "bf16", "topk:0.1,pull=delta,warmup=10"], lines
assert "ratio_vs_uncompressed" not in lines[0] and lines[1]["ratio_vs_uncompressed"] > 0, lines
assert lines[2]["ratio_vs_uncompressed"] > 0 and lines[2]["final_accuracy"] > 0.3, lines
assert abs(lines[1]["accuracy_delta_vs_uncompressed"]) < 0.2, lines
assert os.path.isfile(os.path.join(sys.argv[2], "runs", "sync-bf16", "summary.json"))
png = open(os.path.join(sys.argv[2], "compression.png"), "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000, len(png)
print("compressions ok:", [(l["compression"], l["samples_per_s"], l["final_accuracy"]) for l in lines])
PY
"$root/scripts/bench_sync_vs_async.sh" --bin-dir "$bin" --out "$tmp/bad4" --compressions none,gzip >"$tmp/bad4.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] || die "--compressions none,gzip: exit $rc, want 2"
grep -q "compressions must be a comma list" "$tmp/bad4.out" || { cat "$tmp/bad4.out"; die "no message naming --compressions"; }
"$root/scripts/bench_sync_vs_async.sh" --bin-dir "$bin" --out "$tmp/bad5" --rates 1gbit,10gbit >"$tmp/bad5.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] || die "--rates on loopback: exit $rc, want 2"
grep -q -- "--rates needs --network emulated" "$tmp/bad5.out" || { cat "$tmp/bad5.out"; die "no message naming --rates"; }
echo "PASS"
