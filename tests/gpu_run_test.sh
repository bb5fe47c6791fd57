#!/usr/bin/env bash
# benchmarks/gpu/run.sh where there is no GPU: one line "gpu/run.sh: skipped:
# no GPU (REASON)", exit 0, nothing written. On a machine with a GPU the same
# is checked with --nvidia-smi naming a tool that lists none. A bad option
# exits 2.
#
#   tests/gpu_run_test.sh
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=tests/lib.sh
source "$root/tests/lib.sh"
begin_test gpu_run_test

args=(--out "$tmp/out")
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  args+=(--nvidia-smi /bin/false)  # a GPU here: check the same path with a tool that lists none
fi
echo "benchmarks/gpu/run.sh ${args[*]}"
timeout 60 "$root/benchmarks/gpu/run.sh" "${args[@]}" >"$tmp/stdout" 2>&1; rc=$?
if [[ $rc -eq 0 ]]; then pass "exit 0"; else fail "exit $rc"; show "$tmp/stdout"; fi
if [[ $(wc -l <"$tmp/stdout") -eq 1 ]] && grep -qE '^gpu/run\.sh: skipped: no GPU \(.+\)$' "$tmp/stdout"; then
  pass "one line: $(cat "$tmp/stdout")"
else
  fail "not the one skipped line"; show "$tmp/stdout"
fi
if [[ ! -e "$tmp/out" ]]; then pass "nothing written"; else fail "$tmp/out written"; fi

"$root/benchmarks/gpu/run.sh" --no-such-flag >"$tmp/bad.out" 2>&1; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--no-such-flag" "$tmp/bad.out"; then pass "a bad option: exit 2"; else fail "a bad option: exit $rc"; fi
"$root/benchmarks/gpu/run.sh" --rehearse >"$tmp/bad2.out" 2>&1; rc=$?
if [[ $rc -eq 2 ]] && grep -q -- "--bin-dir" "$tmp/bad2.out"; then pass "--rehearse without --bin-dir: exit 2"; else fail "--rehearse alone: exit $rc"; fi

[[ $failed -eq 0 ]] && echo "gpu_run_test: PASS" || echo "gpu_run_test: FAIL"
exit $failed
