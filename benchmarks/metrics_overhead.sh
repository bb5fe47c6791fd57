#!/usr/bin/env bash
# What Prometheus metrics cost a training job: scripts/train_fashion_mnist.sh
# (W workers, S servers, sync) run alternately without metrics and with
# --metrics_port=0 on every role while a scraper GETs every endpoint every
# second (as a Prometheus would), REPS times each. Prints one JSON line per
# run and a summary line with the medians and their ratio (metrics on / off,
# same run):
#
#   benchmarks/metrics_overhead.sh [--reps N] [--epochs E] [--workers W] [--servers S]
#       [--bin-dir DIR] [--out DIR] [-- EXTRA_PS_WORKER_FLAGS...]
#
# Defaults: 3 reps, 3 epochs, 2 workers, 2 servers, build/bin, a temporary
# directory (removed) unless --out names one. Exit 1 when a run fails or a
# run with metrics was never scraped.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
py=/usr/bin/python3
reps=3 epochs=3 workers=2 servers=2 bin="$root/build/bin" out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps|--epochs|--workers|--servers|--bin-dir|--out)
      [[ $# -ge 2 ]] || { echo "metrics_overhead: $1 needs a value" >&2; exit 2; }
      case "$1" in
        --reps) reps="$2" ;; --epochs) epochs="$2" ;; --workers) workers="$2" ;;
        --servers) servers="$2" ;; --bin-dir) bin="$2" ;; --out) out="$2" ;;
      esac
      shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "metrics_overhead: unknown option '$1'" >&2; exit 2 ;;
  esac
done
extra=("$@")
"$py" "$root/scripts/launch/preflight.py" metrics_overhead --bin-dir "$bin" \
  --bin ps_scheduler --bin ps_server --bin ps_worker --bin ps_export || exit 2
if [[ -z "$out" ]]; then
  out="$(mktemp -d /tmp/metrics_overhead.XXXXXX)"
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
scraper_pid=""
trap '[[ -n "$scraper_pid" ]] && kill "$scraper_pid" 2>/dev/null; exit 130' INT TERM

# scrape DIR: GETs every metrics URL the job's logs name, once a second,
# until killed; writes the scrapes that answered 200, per URL, to
# DIR/scrapes.json. Every role runs with --metrics_linger, so none exits
# before this has scraped it once: a job shorter than a second is seen too.
scrape() {  # run with &: exec makes the background job the scraper itself, so its pid kills it
  exec "$py" - "$1" <<'EOF'
import glob, json, os, re, sys, time, urllib.request
d, ok = sys.argv[1], {}
while True:
    for log in glob.glob(d + "/*.log"):
        for u in re.findall(r"metrics at (http://[0-9.:]+/metrics)", open(log, errors="replace").read()):
            ok.setdefault(u, 0)
    for u in ok:
        try:
            urllib.request.urlopen(u, timeout=1).read()
            ok[u] += 1
        except Exception:
            pass
    with open(d + "/scrapes.json.tmp", "w") as f:
        json.dump(ok, f)
    os.replace(d + "/scrapes.json.tmp", d + "/scrapes.json")
    time.sleep(1)  # the scrape interval
EOF
}

# run NAME METRICS(0|1): one job; prints its JSON line.
run() {
  local dir="$out/$1" flags=() wflags=()
  if [[ "$2" == 1 ]]; then
    flags=(--scheduler-flag=--metrics_port=0 --server-flag=--metrics_port=0
           --scheduler-flag=--metrics_linger=60s --server-flag=--metrics_linger=60s)
    wflags=(--metrics_port=0 --metrics_linger=60s)
    mkdir -p "$dir"
    scrape "$dir" & scraper_pid=$!
  fi
  "$root/scripts/train_fashion_mnist.sh" --bin-dir "$bin" --workers "$workers" --servers "$servers" \
    --epochs "$epochs" --out "$dir" "${flags[@]}" -- "${extra[@]}" "${wflags[@]}" >"$out/$1.log" 2>&1 || {
    echo "metrics_overhead: run $1 failed; see $out/$1.log" >&2; exit 1; }
  if [[ -n "$scraper_pid" ]]; then kill "$scraper_pid" 2>/dev/null; wait "$scraper_pid" 2>/dev/null || true; fi
  scraper_pid=""
  "$py" -c '
import json, os, sys
d, name, on = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
s = json.load(open(d + "/summary.json"))
per_url = json.load(open(d + "/scrapes.json")) if os.path.exists(d + "/scrapes.json") else {}
print(json.dumps({"bench": "metrics_overhead", "run": name, "metrics": on, "workers": s["workers"],
                  "servers": s["servers"], "samples_per_s": s["samples_per_s"],
                  "scrapes": sum(per_url.values()), "endpoints": len(per_url),
                  "endpoints_scraped": sum(1 for n in per_url.values() if n > 0),
                  "test_accuracy": s["test_accuracy"]}))' "$dir" "$1" "$2"
}

for ((i = 1; i <= reps; i++)); do
  run "off-$i" 0
  run "on-$i" 1
done | tee "$out/runs.jsonl"
"$py" - "$out/runs.jsonl" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
off = statistics.median(r["samples_per_s"] for r in runs if not r["metrics"])
on = statistics.median(r["samples_per_s"] for r in runs if r["metrics"])
print(json.dumps({"bench": "metrics_overhead", "summary": True, "reps": len(runs) // 2,
                  "median_samples_per_s_off": off, "median_samples_per_s_on": on,
                  "ratio_on_vs_off": round(on / off, 3),
                  "scrapes_per_run": [r["scrapes"] for r in runs if r["metrics"]]}))
for r in runs:
    roles = 1 + r["servers"] + r["workers"]
    if r["metrics"] and (r["endpoints"] != roles or r["endpoints_scraped"] != roles):
        sys.exit(f"metrics_overhead: run {r['run']}: {r['endpoints_scraped']} of {roles} roles' metrics scraped "
                 f"({r['endpoints']} endpoints found in the logs)")
EOF
