#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in their own build directory and
# fuzzes each for a fixed time. Fails (exit 1) on any crash, leak, timeout,
# out-of-memory or allocation over the malloc limit, printing the input that
# did it; exit 77 (a skip for ctest) where clang or libFuzzer is missing.
#
#   tests/fuzz/run_fuzz.sh [--build-dir DIR] [--seconds N] [--target NAME]... [-- LIBFUZZER_FLAGS...]
#
# DIR (default build-fuzz) holds the clang build, the growing corpus
# (DIR/corpus/NAME, seeded from tests/fuzz/corpus) and crash inputs
# (DIR/artifacts). Targets: codec_fuzzer, push_fuzzer, shm_fuzzer (default: all).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build_dir=$root/build-fuzz
seconds=20
targets=()
extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --target) targets+=("$2"); shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_fuzz: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ ${#targets[@]} -gt 0 ]] || targets=(codec_fuzzer push_fuzzer shm_fuzzer)

if ! command -v clang++ >/dev/null || ! command -v clang >/dev/null; then
  echo "run_fuzz: SKIP: clang/clang++ not found (scripts/install_deps.sh installs clang)"
  exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe/p.cc"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" 2> "$probe/err"; then
  echo "run_fuzz: SKIP: clang++ cannot link libFuzzer (install libclang-rt-dev):"
  cat "$probe/err"
  exit 77
fi

# Every object is instrumented (coverage and sanitizers); only the fuzz
# targets link libFuzzer's main. CUDA is of no use here.
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
mkdir -p "$build_dir"
cmake -S "$root" -B "$build_dir" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="$flags" -DPS_FUZZ=ON -DPS_ENABLE_CUDA=OFF > "$build_dir/configure.log" 2>&1 \
  || { cat "$build_dir/configure.log"; exit 1; }
cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}"

# libFuzzer's limits: an input that allocates more than 256 MB at once or
# makes the process grow past 2 GB fails the run, as does one that takes 10 s.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in "${targets[@]}"; do
  seeds=$here/corpus/${t%_fuzzer}
  work=$build_dir/corpus/$t
  artifacts=$build_dir/artifacts/$t
  log=$build_dir/$t.log
  mkdir -p "$work" "$artifacts"
  echo "run_fuzz: $t for ${seconds}s (corpus $work, seeds $seeds, regressions $here/corpus_regressions)"
  set +e
  "$build_dir/bin/$t" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=256 \
    -timeout=10 -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "${extra[@]}" \
    "$work" "$seeds" "$here/corpus_regressions" > "$log" 2>&1
  rc=$?
  set -e
  if [[ $rc -ne 0 ]]; then
    # The report without libFuzzer's progress lines.
    grep -vE '^#[0-9]+' "$log" | tail -n 80
    echo "run_fuzz: FAIL: $t exited $rc; full log $log; the input that did it:" >&2
    grep -E '^(artifact_prefix|Test unit written to)' "$log" >&2 || ls -l "$artifacts" >&2
    status=1
  else
    grep -E 'INITED|DONE|^stat::' "$log" || true
  fi
done
exit $status
