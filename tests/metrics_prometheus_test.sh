#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions called through trap and poll
# Prometheus metrics scraped by a real Prometheus (Debian's `prometheus`):
# a job (scripts/train_fashion_mnist.sh: 1 scheduler, 1 server, 2 workers)
# runs with --metrics_port=0 on every role; Prometheus scrapes their ports
# every second (loopback only) and the test asks its HTTP API for
#   - every target up;
#   - ps_server_pushes_total non-zero, then larger at a later scrape;
#   - ps_worker_requests_total and the sync-wait histogram of both workers;
#   - ps_scheduler_nodes: 1 server and 2 workers alive;
#   - a checkpoint counted (the server checkpoints every second);
#   - every query of scripts/metrics/grafana_dashboard.json valid PromQL
#     with series (embedding-table panels: valid; this job has no table).
# Then stops the job (the launcher stops every process it started) and
# Prometheus, by pid. Skipped (77) where /usr/bin/prometheus is missing.
#
#   tests/metrics_prometheus_test.sh [BIN_DIR]     (default: build/bin)
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
py=/usr/bin/python3
prometheus=/usr/bin/prometheus
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
if [[ ! -x "$prometheus" ]]; then
  echo "SKIP: $prometheus not installed (scripts/install_deps.sh installs Debian's prometheus)"
  exit 77
fi
begin_job_test metrics_prometheus_test "${1:-}"
launcher_pid=""
prom_pid=""

extra_cleanup() {
  for pid in "$launcher_pid" "$prom_pid"; do
    if [[ -z "$pid" ]] || pid_gone "$pid"; then continue; fi
    kill -TERM "$pid" 2>/dev/null
    poll 10 pid_gone "$pid" || kill -9 "$pid" 2>/dev/null
  done
}


job="$tmp/job"
# Four URLs in the logs: the scheduler, the server, two workers.
metrics_urls() { grep -ho "metrics at http://[0-9.:]*/metrics" "$job"/*.log 2>/dev/null | sort -u | awk '{print $3}'; }
four_urls() { [[ $(metrics_urls | wc -l) -eq 4 ]]; }

echo "== job with metrics on every role"
"$root/scripts/train_fashion_mnist.sh" --bin-dir "$bin" --workers 2 --servers 1 --epochs 30 --out "$job" \
  --scheduler-flag=--metrics_port=0 \
  --server-flag=--metrics_port=0 --server-flag=--checkpoint_dir="$tmp/ckpt" --server-flag=--checkpoint_every=1s \
  -- --metrics_port=0 >"$tmp/launcher.log" 2>&1 &
launcher_pid=$!
if ! poll 60 four_urls; then
  fail "the job did not print four metrics URLs"; show "$tmp/launcher.log"; exit 1
fi
pass "metrics served at $(metrics_urls | tr '\n' ' ')"

echo "== Prometheus scraping them"
prom_port="$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
targets="$(metrics_urls | sed -E 's|http://([0-9.:]*)/metrics|"\1"|' | paste -sd, -)"
cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: ps
    static_configs:
      - targets: [$targets]
EOF
"$prometheus" --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
prom_pid=$!

# query EXPR: the API's result as "labels value" lines (python parses the JSON).
query() {
  "$py" - "$prom_port" "$1" <<'EOF'
import json, sys, urllib.parse, urllib.request
url = "http://127.0.0.1:%s/api/v1/query?query=%s" % (sys.argv[1], urllib.parse.quote(sys.argv[2]))
try:
    r = json.load(urllib.request.urlopen(url, timeout=5))
except Exception as e:
    sys.exit("query failed: %s" % e)
for s in r["data"]["result"]:
    print(json.dumps(s["metric"], sort_keys=True), s["value"][1])
EOF
}
value() { query "$1" 2>/dev/null | awk 'NR==1 {print $NF}'; }
positive() { local v; v="$(value "$1")"; [[ -n "$v" ]] && "$py" -c "import sys; sys.exit(not float('$v') > 0)"; }
greater() { local v; v="$(value "$1")"; [[ -n "$v" ]] && "$py" -c "import sys; sys.exit(not float('$v') > float('$2'))"; }

if poll 60 positive 'ps_server_pushes_total'; then
  first="$(value ps_server_pushes_total)"; pass "ps_server_pushes_total = $first"
else
  fail "Prometheus has no non-zero ps_server_pushes_total"; show "$tmp/prometheus.log"; show "$tmp/launcher.log"
  exit 1
fi
if poll 30 greater 'ps_server_pushes_total' "$first"; then
  pass "ps_server_pushes_total increased to $(value ps_server_pushes_total) at a later scrape"
else
  fail "ps_server_pushes_total stayed at $first"
fi
up="$(value 'sum(up)')"
[[ "$up" == 4 ]] && pass "all 4 targets up" || fail "sum(up) = '$up', want 4"
workers="$(value 'count(ps_worker_requests_total{op="pushpull"} > 0)')"
[[ "$workers" == 2 ]] && pass "both workers count push+pull requests" || fail "workers with requests: '$workers'"
waits="$(value 'count(ps_worker_wait_seconds_count > 0)')"
[[ "$waits" == 2 ]] && pass "both workers report their sync waits" || fail "workers with waits: '$waits'"
alive="$(value 'sum(ps_scheduler_nodes{state="alive"})')"
[[ "$alive" == 3 ]] && pass "the scheduler sees 3 nodes alive" || fail "alive nodes: '$alive', want 3"
if poll 30 positive 'ps_server_checkpoints_total'; then pass "a checkpoint was counted"; else fail "no checkpoint counted"; fi

echo "== the Grafana dashboard's queries"
# Each target's expr: the API must accept it; all but the table panels must
# find series in this job. A rate() needs two samples of its series in its
# window: until a worker has been scraped twice its panels have none (a
# loaded machine can answer the dashboard's queries before that), so the
# check is polled and its failures printed only at the last try.
dashboard_queries() {
  "$py" - "$prom_port" "$root/scripts/metrics/grafana_dashboard.json" "$1" <<'EOF'
import json, sys, urllib.parse, urllib.request
port, path, verbose = sys.argv[1], sys.argv[2], sys.argv[3] == "verbose"
bad = 0
for panel in json.load(open(path))["panels"]:
    for t in panel["targets"]:
        url = "http://127.0.0.1:%s/api/v1/query?query=%s" % (port, urllib.parse.quote(t["expr"]))
        try:
            r = json.load(urllib.request.urlopen(url, timeout=5))
        except Exception as e:
            verbose and print("  FAIL: %r: %s" % (t["expr"], e)); bad += 1; continue
        if not r["data"]["result"] and "table" not in t["expr"]:
            verbose and print("  FAIL: no series for %r" % t["expr"]); bad += 1
sys.exit(bad)
EOF
}
if poll 30 dashboard_queries quiet || dashboard_queries verbose; then
  pass "every dashboard query is valid and finds its series"
else
  fail "dashboard queries (above)"
fi

echo "== stopping the job and Prometheus"
kill -TERM "$launcher_pid"
poll 30 pid_gone "$launcher_pid" && pass "the launcher stopped its job" || fail "the launcher did not stop in 30 s"
while read -r name pid; do
  pid_gone "$pid" || fail "$name (pid $pid) still running"
done <"$job/pids.txt"
kill -TERM "$prom_pid"
poll 20 pid_gone "$prom_pid" || fail "prometheus did not stop"
exit $failed
