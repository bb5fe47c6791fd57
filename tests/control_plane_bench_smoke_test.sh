#!/usr/bin/env bash
# Smoke test of control_plane_bench, small: jobs of 16 and 128 simulated
# workers (4 servers, a model of 128 slices with 2 copies each) against a
# real ps_scheduler form, heartbeat, pass a barrier, lose a worker and take
# it back, lose a server (its slices get their copies again) and take a new
# one. Every stdout line is a JSON object with the keys
# docs/benchmarks.md documents; each death or join costs each node about
# the same bytes at both sizes (a change to the view, not the whole view),
# while the whole view the servers get at formation grows with the job.
# Bad flags exit 2.
#
#   tests/control_plane_bench_smoke_test.sh CONTROL_PLANE_BENCH
#
# Takes about 10 seconds (four heartbeat timeouts of 1 s, two windows of 1 s).
set -uo pipefail

bench="${1:?usage: $0 CONTROL_PLANE_BENCH}"
py=/usr/bin/python3
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_test control_plane_bench_smoke

echo "control_plane_bench, 16 and 128 workers, 4 servers"
if timeout 120 "$bench" --workers=16,128 --servers=4 --window=1s --heartbeat_interval=0.2s --heartbeat_timeout=1s \
     >"$tmp/out.jsonl" 2>"$tmp/err"; then
  if "$py" - "$tmp/out.jsonl" <<'PY'
import json, sys
keys = {"bench", "workers", "servers", "heartbeat_interval_s", "heartbeat_timeout_s", "formation_s",
        "formation_bytes_per_node", "heartbeat_cpu_fraction", "barrier_s", "death_to_view_s",
        "death_bytes_per_node", "rejoin_to_view_s", "rejoin_bytes_per_node", "replicas", "slices", "define_model_s",
        "server_death_to_view_s", "server_death_to_copies_again_s", "server_death_bytes_per_node",
        "server_join_to_view_s", "server_join_bytes_per_node"}
lines = [json.loads(l) for l in open(sys.argv[1])]
errors = []
if [o.get("workers") for o in lines] != [16, 128]:
    errors.append(f"lines for {[o.get('workers') for o in lines]} workers, want 16 and 128")
for o in lines:
    if keys - o.keys():
        errors.append(f"missing {sorted(keys - o.keys())}")
    elif not (o["formation_s"] > 0 and o["death_to_view_s"] >= 1.0 and o["rejoin_to_view_s"] > 0
              and o["server_death_to_view_s"] >= 0.5
              and o["server_death_to_copies_again_s"] >= o["server_death_to_view_s"] and o["server_join_to_view_s"] > 0):
        errors.append(f"times: {o}")
if len(lines) == 2 and not errors:
    small, big = lines
    for k in ("death_bytes_per_node", "rejoin_bytes_per_node", "server_death_bytes_per_node",
              "server_join_bytes_per_node"):
        if not 0 < big[k] < 1.5 * small[k] + 64:
            errors.append(f"{k}: {small[k]} with 16 workers, {big[k]} with 128: grows with the job")
    if not big["formation_bytes_per_node"] > small["formation_bytes_per_node"]:
        errors.append("formation bytes per node do not grow with the job")
for e in errors:
    print("   ", e)
sys.exit(1 if errors else 0)
PY
  then pass "two jobs; a death and a rejoin cost each node the same bytes at 16 and 128 workers"; else fail "control_plane_bench lines"; fi
else
  fail "control_plane_bench exited $?"; tail -5 "$tmp/err"
fi

echo "bad flags"
"$bench" --workers=0 >/dev/null 2>"$tmp/bad.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--workers" "$tmp/bad.err"; then pass "--workers=0: exit 2"; else fail "--workers=0: exit $rc"; fi
"$bench" --heartbeat_interval=2s --heartbeat_timeout=3s >/dev/null 2>"$tmp/bad2.err"; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--heartbeat_interval" "$tmp/bad2.err"; then pass "an interval over half the timeout: exit 2"
else fail "--heartbeat_interval=2s --heartbeat_timeout=3s: exit $rc"; fi

[[ $failed -eq 0 ]] && echo "control_plane_bench_smoke_test: PASS" || echo "control_plane_bench_smoke_test: FAIL"
exit $failed
