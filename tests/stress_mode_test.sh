#!/usr/bin/env bash
# scripts/test.sh --stress as the README documents it, small: a bad count is
# refused before anything is installed or built; ctest's own repeated,
# shuffled output (of a two-test project made here, not the build's: its
# logs belong to the ctest running this) is what stress_report.py reads, one
# line per test run, and failures are reported test by test (exit 1).
#
#   tests/stress_mode_test.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py=/usr/bin/python3
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_test stress_mode_test

out="$("$root/scripts/test.sh" --stress nope 2>&1)"
rc=$?
if [[ $rc -eq 2 && "$out" == *"--stress needs a repeat count"* ]]; then pass "--stress nope: exit 2, named"
else fail "--stress nope: exit $rc: $out"; fi

mkdir -p "$tmp/project"
cat >"$tmp/project/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.22)
project(stress_mode_probe NONE)
enable_testing()
add_test(NAME passes COMMAND true)
add_test(NAME fails COMMAND false)
CMAKE
cmake -S "$tmp/project" -B "$tmp/project/build" >/dev/null 2>&1 || die "cmake of the probe project failed"
(cd "$tmp/project/build" && ctest --repeat until-fail:3 --schedule-random) >"$tmp/ctest.log" 2>&1
report="$("$py" "$root/scripts/stress_report.py" "$tmp/ctest.log")"
rc=$?
if [[ $rc -eq 1 && "$report" == *"stress: 2 tests, 4 runs, 1 failed"* && "$report" == *"FAILED fails: 1 failed of 1 runs"* ]]
then pass "ctest's own output: $(echo "$report" | head -1)"
else fail "report of ctest's output: exit $rc: $report"; show "$tmp/ctest.log"; fi

cat >"$tmp/failed.log" <<'LOG'
    Test #3: flaky ............................***Failed    0.01 sec
2/3 Test #3: flaky ............................   Passed    0.01 sec
3/3 Test #5: slow .............................***Timeout 600.00 sec
1/3 Test #1: fine .............................   Passed    0.00 sec
LOG
report="$("$py" "$root/scripts/stress_report.py" "$tmp/failed.log")"
rc=$?
if [[ $rc -eq 1 && "$report" == *"FAILED flaky: 1 failed of 2 runs"* && "$report" == *"FAILED slow: 1 timeout of 1 runs"* ]]
then pass "failures reported test by test"
else fail "report of failures: exit $rc: $report"; fi
exit $failed
