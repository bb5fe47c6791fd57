#!/usr/bin/env bash
# Fails, naming each file, when clang-format (with the tree's .clang-format)
# would change a C++ source of the project; exits 77 saying why without
# clang-format. Fix with: git ls-files '*.cc' '*.h' '*.cu' | xargs clang-format -i
#
#   scripts/check_format.sh [SOURCE_ROOT]
set -uo pipefail
root="$(cd "${1:-$(dirname "$0")/..}" && pwd)"
cd "$root" || exit 1
command -v clang-format >/dev/null || { echo "SKIP: no clang-format (scripts/install_deps.sh installs it)"; exit 77; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' 2>/dev/null || find common server scheduler worker tests benchmarks -name '*.cc' -o -name '*.h' -o -name '*.cu')
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
for f in "${bad[@]}"; do echo "check_format: $f is not as clang-format writes it (clang-format -i $f)"; done
echo "check_format: ${#files[@]} files, ${#bad[@]} not formatted"
[[ ${#bad[@]} -eq 0 ]]
