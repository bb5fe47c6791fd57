#!/usr/bin/env bash
# Pipeline stages as the README documents them: scripts/train_fashion_mnist.sh
# --workers 4 --stages 2 (2 groups of 2 pipeline stages), sync, 10 epochs,
# must reach test accuracy >= 0.88; the launcher names each worker's group,
# stage and layers, and summary.json counts each group's samples once. Then
# the same through launch_job.py --secure (CurveZMQ on the stage links too),
# async, with the layers split by hand and placed a layer per server, for 2
# epochs; and the bad flags: workers not a multiple of the stages,
# --stages=0, a split by hand that does not add up, and --micro_batches
# larger than the batch.
#
#   tests/pipeline_script_test.sh [BIN_DIR]     (default: build/bin)
#
# Takes about a minute.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_job_test pipeline_script_test "${1:-}"
py=/usr/bin/python3

# summary.json's FIELD of run DIR.
field() { "$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1/summary.json" "$2"; }

echo "(a) train_fashion_mnist.sh --workers 4 --stages 2, 10 epochs"
if "$root/scripts/train_fashion_mnist.sh" --workers 4 --stages 2 --bin-dir "$bin" --out "$tmp/a" >"$tmp/a.out" 2>&1; then
  acc="$(field "$tmp/a" test_accuracy)"
  if "$py" -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0.88 else 1)" "$acc"; then
    pass "test accuracy $acc >= 0.88"
  else
    fail "test accuracy $acc < 0.88"; show "$tmp/a.out"
  fi
  for w in 0 1 2 3; do
    want="group $((w / 2)) stage $((w % 2)) of 2"
    grep -q "^worker-$w: .*$want" "$tmp/a.out" && pass "worker-$w: $want" ||
      { fail "worker-$w's start line does not say '$want'"; show "$tmp/a.out"; }
  done
  samples="$(field "$tmp/a" samples)"
  # 2 groups x 30000 images x 10 epochs, each group counted once.
  [[ "$samples" == 600000 ]] && pass "summary.json: $samples samples" || fail "summary.json: $samples samples, not 600000"
else
  fail "the job failed"; show "$tmp/a.out"
fi

echo "(b) launch_job.py --secure --consistency async --stages 2 --placement layer -- --stage_layers=2,1, 2 epochs"
if "$py" "$root/scripts/launch_job.py" --secure --consistency async --workers 2 --stages 2 --micro-batches 8 --epochs 2 \
    --servers 2 --placement layer --bin-dir "$bin" --out "$tmp/b" -- --stage_layers=2,1 >"$tmp/b.out" 2>&1; then
  acc="$(field "$tmp/b" test_accuracy)"
  "$py" -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0.84 else 1)" "$acc" &&
    pass "secure, async, 8 micro-batches: test accuracy $acc >= 0.84" || fail "secure: test accuracy $acc < 0.84"
  grep -q "zap\[stage link\]: admitted key" "$tmp/b/worker-1.log" && pass "stage 1 admitted stage 0's key on its link" ||
    fail "worker-1.log shows no admitted key"
  grep -q "^worker-0: .*stage 0 of 2 (layers 0..1, 533248 parameters," "$tmp/b.out" &&
    pass "--stage_layers=2,1: stage 0 holds layers 0..1" || { fail "worker-0 does not hold layers 0..1"; show "$tmp/b.out"; }
  grep -q "^model: 535818 parameters; placement: .*fc1.weight -> server 1 \[0, 131072)" "$tmp/b.out" &&
    pass "--placement layer: fc1 whole on server 1" || { fail "the layer placement is not the model's"; show "$tmp/b.out"; }
else
  fail "the secure job failed"; show "$tmp/b.out"
fi

echo "(c) bad flags"
expect_refusal() {  # want, command...
  local want="$1" out rc; shift
  out="$("$@" 2>&1)"; rc=$?
  if [[ $rc -eq 2 && "$out" == *"$want"* ]]; then pass "exit 2: $want"; else fail "exit $rc, wanted 2 and '$want': $out"; fi
}
expect_refusal "--workers 3 is not a multiple of --stages 2" \
  "$root/scripts/train_fashion_mnist.sh" --workers 3 --stages 2 --bin-dir "$bin" --out "$tmp/c"
expect_refusal "stages: 0 not in [1, 64]" "$bin/ps_worker" --scheduler=127.0.0.1:1 --stages=0
expect_refusal "stage_layers: the stages hold 2 layers; the model has 3" "$bin/ps_worker" --scheduler=127.0.0.1:1 \
  --stages=2 --stage_layers=1,1
expect_refusal "micro_batches: 65 not in [1, 64]" "$bin/ps_worker" --scheduler=127.0.0.1:1 --stages=2 --micro_batches=65
exit "$failed"
