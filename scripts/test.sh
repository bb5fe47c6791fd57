#!/usr/bin/env bash
# Installs what is missing, builds every program and every test into build/
# (cmake --build build --target all ps_tests), and runs every test under ctest.
#
#   scripts/test.sh [CTEST_ARGS...]            the suite once (what .ci/run runs)
#   scripts/test.sh --stress N [CTEST_ARGS...]  the suite under contention: one
#       busy process per core runs beside it (started and stopped by pid), the
#       tests run in random order and each up to N times (ctest --repeat
#       until-fail:N --schedule-random); prints each test that failed and how
#       often, and exits 1 if any did.
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
cd "$(dirname "$0")/.."
root="$PWD"
stress=0
if [[ "${1:-}" == "--stress" ]]; then
  [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "test.sh: --stress needs a repeat count (a positive integer)" >&2; exit 2; }
  stress="$2"
  shift 2
fi
./scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)" --target all ps_tests
cd build
if [[ "$stress" == 0 ]]; then
  exec ctest --output-on-failure --timeout 600 -j2 "$@"
fi

busy=()
stop_busy() { if ((${#busy[@]})); then kill "${busy[@]}" 2>/dev/null || true; wait "${busy[@]}" 2>/dev/null || true; fi; }
trap stop_busy EXIT
for ((i = 0; i < $(nproc); i++)); do
  (while :; do :; done) &
  busy+=($!)
done
echo "test.sh: stress: ${#busy[@]} busy processes (pids ${busy[*]}), each test up to $stress times in random order"
mkdir -p Testing  # ctest makes it only once it runs; tee opens the log before that
log="$PWD/Testing/stress.log"
rc=0
ctest --output-on-failure --timeout 600 -j2 --repeat until-fail:"$stress" --schedule-random "$@" 2>&1 |
  tee "$log" || rc=$?
stop_busy
busy=()
/usr/bin/python3 "$root/scripts/stress_report.py" "$log" || rc=1
exit "$rc"
