#!/usr/bin/env bash
# The GPU figures, on a machine with an NVIDIA GPU, in one go of at most 8
# minutes: builds the project with CUDA (or takes programs built with it),
# runs the CUDA tests, then measures, each against a reference measured in the
# same run on the same machine:
#   - a cuda worker of the MLP (batch 64), 1 worker x 1 server (train_bench) and
#     2 x 2 (scripts/launch_job.py), against the compute-free ceiling
#     (train_bench --device=null) at the same shapes;
#   - the MLP of 51 M parameters through a server against the same model trained
#     locally on the GPU (train_bench --device=cuda --layers=...);
#   - a PyTorch module on cuda under scripts/ps_run against the same module
#     trained locally on the GPU (benchmarks/gpu/torch_module.py; needs a
#     torch with CUDA for /usr/bin/python3, otherwise skipped, saying why).
#
#   benchmarks/gpu/run.sh [--out DIR] [--bin-dir DIR] [--build-dir DIR] [--nvidia-smi PATH] [--rehearse]
#
#   --out DIR          default benchmarks/results/DATE-gpu-DEVICE (DEVICE from
#                      nvidia-smi --query-gpu=name, e.g. nvidia-h200)
#   --bin-dir DIR      programs already built with CUDA: no build (their
#                      libps_cuda.so beside them)
#   --build-dir DIR    where to build (default build-gpu): cmake with
#                      -DCMAKE_CUDA_COMPILER=nvcc -DCMAKE_CUDA_ARCHITECTURES=native
#   --nvidia-smi PATH  the tool that lists the GPUs (default: nvidia-smi on PATH)
#   --rehearse         no GPU needed: every step with --device=cpu instead of cuda,
#                      with --bin-dir, into --out (a check of this script, not a figure)
#
# Without a GPU it prints "gpu/run.sh: skipped: no GPU (REASON)" and exits 0;
# without nvcc (and no --bin-dir) "gpu/run.sh: skipped: no CUDA compiler
# (REASON)", exit 0. Exit 1 when the build, a test or a measurement failed (the
# folder says which), 2 for a bad option.
set -uo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
py=/usr/bin/python3
invocation="benchmarks/gpu/run.sh${*:+ $*}"
out="" bin="" build="$root/build-gpu" smi=nvidia-smi rehearse=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out|--bin-dir|--build-dir|--nvidia-smi)
      [[ $# -ge 2 ]] || { echo "gpu/run.sh: $1 needs a value" >&2; exit 2; }
      case "$1" in --out) out="$2" ;; --bin-dir) bin="$2" ;; --build-dir) build="$2" ;; --nvidia-smi) smi="$2" ;; esac
      shift 2 ;;
    --rehearse) rehearse=1; shift ;;
    -h|--help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu/run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
start=$SECONDS
say() { printf '[%d:%02d] %s\n' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) "$*"; }

# --- is there a GPU? ---------------------------------------------------------
device=cuda gpu=""
if [[ $rehearse -eq 1 ]]; then
  [[ -n "$bin" && -n "$out" ]] || { echo "gpu/run.sh: --rehearse needs --bin-dir and --out" >&2; exit 2; }
  device=cpu gpu="cpu"
else
  if ! command -v "$smi" >/dev/null 2>&1; then
    echo "gpu/run.sh: skipped: no GPU ($smi not found)"
    exit 0
  fi
  listed="$("$smi" --query-gpu=name --format=csv,noheader 2>&1)"
  smi_rc=$?
  gpu="$(head -1 <<<"$listed")"
  if [[ $smi_rc -ne 0 || -z "$gpu" || "$gpu" == *"failed"* || "$gpu" == *"No devices"* ]]; then
    echo "gpu/run.sh: skipped: no GPU ($smi lists none: exit $smi_rc, ${gpu:-no output})"
    exit 0
  fi
fi
slug="$(echo "$gpu" | tr 'A-Z' 'a-z' | sed 's/[^a-z0-9]\+/-/g; s/^-//; s/-$//')"

# --- the programs --------------------------------------------------------------
build_log=""
if [[ -z "$bin" ]]; then
  nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  if [[ ! -x "$nvcc" ]]; then
    echo "gpu/run.sh: skipped: no CUDA compiler (nvcc is neither on PATH nor in /usr/local/cuda/bin; or pass --bin-dir)"
    exit 0
  fi
fi
[[ -z "$out" ]] && out="$root/benchmarks/results/$(date +%F)-gpu-$slug"
mkdir -p "$out" || exit 2
out="$(cd "$out" && pwd)"
work="$(mktemp -d /tmp/gpu-run.XXXXXX)"
: >"$out/steps.jsonl"
failed=0

# step NAME SECONDS CMD...: one command with a deadline, its stdout to
# $work/NAME.out, its stderr to $work/NAME.log; recorded in OUT/steps.jsonl.
step() {
  local name="$1" limit="$2"
  shift 2
  say "$name: $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" </dev/null >"$work/$name.out" 2>"$work/$name.log"
  local rc=$?
  "$py" -c 'import json, sys; print(json.dumps({"step": sys.argv[2], "rc": int(sys.argv[3]), "seconds": int(sys.argv[4]),
      "command": " ".join(sys.argv[5:]).replace(sys.argv[1] + "/", "")}))' \
    "$root" "$name" "$rc" "$((SECONDS - t0))" "$@" >>"$out/steps.jsonl" 2>/dev/null ||
    echo "{\"step\": \"$name\", \"rc\": $rc}" >>"$out/steps.jsonl"
  if [[ $rc -ne 0 ]]; then
    say "$name: FAILED (exit $rc$([[ $rc -eq 124 ]] && echo ", over its $limit s")); the end of its log:"
    tail -8 "$work/$name.log" | sed 's/^/    /'
    failed=1
  fi
  return $rc
}

if [[ -z "$bin" ]]; then
  cuda_flags=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=native)
  step configure 120 cmake -S "$root" -B "$build" "${cuda_flags[@]}" || { say "the configure failed"; exit 1; }
  targets=(ps_scheduler_bin ps_server_bin ps_worker_bin ps_export_bin train_bench cuda_backend_test)
  # The Python package and its workers, where pybind11 is there to build them.
  cmake --build "$build" --target help 2>/dev/null | grep -q ps_torch_workers && targets+=(ps_torch_workers)
  step build 300 cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" || { say "the build failed"; exit 1; }
  build_log="$(grep -m1 'PS_HAVE_CUDA' "$work/configure.out")"
  bin="$build/bin"
fi
bin="$(cd "$bin" && pwd)" || exit 2
if [[ $rehearse -eq 0 && ! -e "$bin/libps_cuda.so" ]]; then
  say "$bin has no libps_cuda.so: built without CUDA ($build_log)"
  exit 1
fi

# --- the CUDA tests ------------------------------------------------------------
if [[ -f "$build/CTestTestfile.cmake" && "$bin" == "$build/bin" ]]; then
  step cuda_tests 90 ctest --test-dir "$build" -R cuda --output-on-failure
else
  step cuda_tests 90 "$bin/cuda_backend_test"
fi
grep -hE '^\[  (PASSED|SKIPPED|FAILED) |tests? passed|tests? failed' "$work/cuda_tests.out" >"$out/cuda_tests.txt"

# --- the figures ---------------------------------------------------------------
tb="$bin/train_bench"
step ceiling 60 "$tb" --device=null --configs=1x1,2x2 --transports=shm --train_limit=60000
cp "$work/ceiling.out" "$out/ceiling.jsonl"
step worker_1x1 90 "$tb" --device="$device" --train_limit=60000
cp "$work/worker_1x1.out" "$out/worker_1x1.jsonl"
step worker_2x2 120 "$py" "$root/scripts/launch_job.py" --out "$work/job-2x2" --bin-dir "$bin" --workers 2 \
  --servers 2 --epochs 1 --device "$device" -- --batch_size=64 --seed=1
cp "$work/job-2x2/summary.json" "$out/worker_2x2.json" 2>/dev/null
big_limit=(--train_limit=5120 --warmup_steps=10)
[[ $rehearse -eq 1 ]] && big_limit=(--train_limit=640 --warmup_steps=2)  # 2 cpu cores, not a GPU
step model_51m 120 "$tb" --device="$device" --layers=784,5120,5120,4096,10 "${big_limit[@]}"
cp "$work/model_51m.out" "$out/model_51m.jsonl"

torch_reason=""
if ! "$py" -c "import torch, sys; sys.exit(0 if '$device' == 'cpu' or torch.cuda.is_available() else 1)" 2>/dev/null; then
  torch_reason="$("$py" -c 'import torch; print(f"torch {torch.__version__} for /usr/bin/python3 has no CUDA")' 2>&1 | tail -1)"
elif [[ ! -x "$bin/ps_torch_worker" ]]; then
  torch_reason="the Python package ps is not built beside $bin (pybind11-dev missing at the build)"
fi
if [[ -z "$torch_reason" ]]; then
  step torch_ps 90 "$root/scripts/ps_run" --workers 1 --servers 1 --bin-dir "$bin" --out "$work/torch-ps" -- \
    "$py" "$root/benchmarks/gpu/torch_module.py" --device "$device"
  step torch_local 60 "$py" "$root/benchmarks/gpu/torch_module.py" --device "$device" --local
  sed 's/^\[rank[0-9]*\]: //' "$work/torch_ps.out" "$work/torch_local.out" | grep '^{' >"$out/torch_module.jsonl"
else
  say "torch module: skipped: $torch_reason"
fi

# --- the folder ----------------------------------------------------------------
{
  [[ $rehearse -eq 0 ]] && "$smi" --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "nproc $(nproc)"
  grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /cpu /'
  awk '/MemTotal/ {printf "memory %.1f GiB\n", $2 / 1048576}' /proc/meminfo
  echo "kernel $(uname -r)"
  echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown), $(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null | wc -l) tracked files changed"
  [[ -n "$build_log" ]] && echo "build: $build_log"
} >"$out/machine.txt" 2>&1
"$py" - "$out" "$gpu" "$device" "$invocation" "$torch_reason" "$((SECONDS - start))" <<'PY' || failed=1
import json, os, statistics, sys
out, gpu, device, command, torch_reason, wall = sys.argv[1:]

def lines(name):
    p = os.path.join(out, name)
    return [json.loads(x) for x in open(p) if x.startswith("{")] if os.path.exists(p) else []

rows = []
ceil = {(x["workers"], x["servers"]): x for x in lines("ceiling.jsonl") if x.get("bench") == "train_ceiling"}
one = next((x for x in lines("worker_1x1.jsonl") if x.get("mode") == "ps"), None)
if one and (1, 1) in ceil:
    c = ceil[(1, 1)]
    steps = one["samples_per_s"] / one["batch"]
    rows.append((f"a {device} worker of the MLP, batch 64, 1 worker x 1 server (train_bench)",
                 f"{steps:,.0f} steps/s ({one['samples_per_s']:,.0f} samples/s; {one.get('ratio_vs_local', 0):.2f} of "
                 f"training locally on the {device})", f"the ceiling, --device=null: {c['steps_per_s']:,.0f} steps/s",
                 f"{steps / c['steps_per_s']:.2f}"))
job = json.load(open(os.path.join(out, "worker_2x2.json"))) if os.path.exists(os.path.join(out, "worker_2x2.json")) else None
if job and (2, 2) in ceil:
    c = ceil[(2, 2)]
    per = job.get("worker_samples_per_s") or [job["samples_per_s"] / 2] * 2
    steps = statistics.mean(per) / 64
    rows.append((f"{device} workers of the MLP, batch 64, 2 workers x 2 servers, 1 epoch (launch_job)",
                 f"{steps:,.0f} steps/s per worker, test accuracy {job['test_accuracy']:.4f}",
                 f"the ceiling, --device=null (train_bench): {c['steps_per_s']:,.0f} steps/s per worker",
                 f"{steps / c['steps_per_s']:.2f}"))
big = next((x for x in lines("model_51m.jsonl") if x.get("mode") == "ps"), None)
local = next((x for x in lines("model_51m.jsonl") if x.get("mode") == "local"), None)
if big and local:
    rows.append((f"the MLP of 51 M parameters on the {device}, through 1 server (train_bench)",
                 f"{big['samples_per_s']:,.0f} samples/s", f"the same model trained locally on the {device}: "
                 f"{local['samples_per_s']:,.0f} samples/s", f"{big['ratio_vs_local']:.2f}"))
tm = {x["mode"]: x for x in lines("torch_module.jsonl")}
if "ps" in tm and "local" in tm:
    rows.append((f"a PyTorch MLP on {device} under scripts/ps_run, 1 worker, 1 server",
                 f"{tm['ps']['samples_per_s']:,.0f} samples/s", f"the same module trained locally on {device} "
                 f"(torch.optim.Adam): {tm['local']['samples_per_s']:,.0f} samples/s",
                 f"{tm['ps']['samples_per_s'] / tm['local']['samples_per_s']:.2f}"))
elif torch_reason:
    rows.append((f"a PyTorch MLP on {device} under scripts/ps_run", f"skipped: {torch_reason}", "", ""))
steps = [json.loads(x) for x in open(os.path.join(out, "steps.jsonl"))]
date = os.path.basename(out)[:10]
machine = open(os.path.join(out, "machine.txt")).read().strip()
md = [f"# GPU figures on {gpu}" + (" (rehearsal: the cpu backend, not a GPU figure)" if device == "cpu" else ""), "",
      "Measured by one command, every process on this machine:", "", f"    {command}", "", "Machine:", "",
      *[f"    {l}" for l in machine.splitlines()], "", f"{int(wall) // 60} min {int(wall) % 60} s in all.", "",
      "| what | ours | reference (measured in the same run) | ratio |", "|---|---|---|---|",
      *[f"| {a} | {b} | {c} | {'**' + d + '**' if d else ''} |" for a, b, c, d in rows], "",
      "CUDA tests (`cuda_tests.txt`): " + ", ".join(open(os.path.join(out, "cuda_tests.txt")).read().split("\n")[-3:]).strip(", ")
      if os.path.exists(os.path.join(out, "cuda_tests.txt")) else "", "",
      "Steps (`steps.jsonl`), exit code and seconds:", "",
      *[f"- {s['step']}: exit {s['rc']}, {s.get('seconds', '?')} s: `{s.get('command', '')}`" for s in steps], "",
      "Files: `ceiling.jsonl`, `worker_1x1.jsonl` and `model_51m.jsonl` (train_bench's lines), `worker_2x2.json` "
      "(launch_job's summary), `torch_module.jsonl`, `cuda_tests.txt`, `machine.txt`, `summary.json`.", ""]
open(os.path.join(out, "README.md"), "w").write("\n".join(md))
json.dump({"gpu": gpu, "device": device, "command": command, "wall_s": int(wall),
           "figures": [dict(zip(("what", "ours", "reference", "ratio"), r)) for r in rows], "steps": steps},
          open(os.path.join(out, "summary.json"), "w"), indent=1)
PY
say "done: $out/README.md$([[ $failed -eq 1 ]] && echo "; a step failed, its logs are in $work")"
[[ $failed -eq 0 ]] && rm -rf "$work"
exit $failed
