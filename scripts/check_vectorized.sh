#!/usr/bin/env bash
# Checks that GCC vectorises the update loop of each server optimizer (and the
# 16-bit conversions of the compressors, common/compress_*.cc), and on
# x86-64 that it does so for each CPU the loop is cloned for (PS_CPU_CLONES in
# common/base/cpu_clones.h): 32-byte (AVX2) and 16-byte (baseline SSE) vectors.
#
# Usage: scripts/check_vectorized.sh [REPO_ROOT]
#   REPO_ROOT defaults to the parent of this script's folder.
#
# Compiles each optimizer file with the flags server/CMakeLists.txt gives it
# plus -fopt-info-vec-optimized, and counts the distinct source locations in
# that file that GCC reports as "loop vectorized" (a vectorised epilogue or a
# second template instantiation of the same loop counts once). Prints one line
# per file; exits 1 naming every file that failed to compile or has no
# vectorised loop, 0 otherwise.
set -uo pipefail

root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
files=(server/optim/sgd.cc server/optim/momentum.cc server/optim/adam.cc server/optim/adagrad.cc server/optim/ftrl.cc server/store/slice_state.cc
       server/store/slice_store.cc common/compress/compress_bf16.cc common/compress/compress_fp16.cc
       common/compress/compress_onebit.cc)
widths=()
[[ "$(uname -m)" == x86_64 ]] && widths=(32 16)
flags=(-std=c++20 -O3 -fno-math-errno -fno-trapping-math -fopt-info-vec-optimized)

failed=()
for file in "${files[@]}"; do
  name="$(basename "$file")"
  if ! report="$(g++ "${flags[@]}" -I"$root" -c -o /dev/null "$root/$file" 2>&1)"; then
    echo "$name: compile failed"
    printf '%s\n' "$report" >&2
    failed+=("$name")
    continue
  fi
  # Only lines located in this file: a loop inlined from a header does not count.
  loops="$(printf '%s\n' "$report" | awk -v src="$root/$file:" '
    index($0, src) == 1 && /: optimized: loop vectorized/ {
      split(substr($0, length(src) + 1), pos, ":")
      if (!((pos[1] ":" pos[2]) in seen)) { seen[pos[1] ":" pos[2]] = 1; n++ }
    }
    END { print n + 0 }')"
  missing=()
  for w in "${widths[@]}"; do
    grep -q "^$root/$file:.*loop vectorized using $w byte vectors" <<<"$report" || missing+=("$w-byte")
  done
  if [[ "$loops" -gt 0 && ${#missing[@]} -eq 0 ]]; then
    echo "$name: vectorized ($loops loops${widths:+, ${widths[*]}-byte vectors})"
  elif [[ "$loops" -gt 0 ]]; then
    echo "$name: NOT vectorized with ${missing[*]} vectors (a CPU clone missing)"
    failed+=("$name")
  else
    echo "$name: NOT vectorized"
    failed+=("$name")
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "check_vectorized: no vectorised loop in: ${failed[*]}" >&2
  exit 1
fi
