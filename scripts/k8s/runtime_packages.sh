#!/usr/bin/env bash
# Prints, one per line, the Debian packages that hold the shared libraries the
# given binaries load (ldd, then dpkg), so that the image's runtime stage
# installs exactly what the binaries need and no compiler: the list follows
# the build (a new library, such as prometheus-cpp, is picked up by itself).
#
#   scripts/k8s/runtime_packages.sh BINARY...
#
# Exit code 1: a library is not found, or no package holds it.
set -euo pipefail

me=runtime_packages

# owner LIB: the package that holds LIB. Debian 12 has merged /usr, so dpkg
# may know the file under /lib or /usr/lib: try the path, its target, and both
# with and without the /usr prefix.
owner() {
  local lib="$1" real p candidate
  real="$(readlink -f "$lib")"
  for candidate in "$lib" "$real" "${lib#/usr}" "${real#/usr}" "/usr$lib" "/usr$real"; do
    p="$(dpkg-query -S "$candidate" 2>/dev/null | grep -v '^diversion' | head -n1 | cut -d: -f1)" || true
    if [[ -n "$p" ]]; then printf '%s\n' "$p"; return 0; fi
  done
  echo "$me: no Debian package holds $lib" >&2
  return 1
}

main() {
  [[ $# -ge 1 ]] || { echo "usage: $me BINARY..." >&2; exit 2; }
  local out lib
  out="$(ldd "$@")"
  if grep -q 'not found' <<<"$out"; then
    echo "$me: missing libraries:" >&2
    grep 'not found' <<<"$out" >&2
    exit 1
  fi
  for lib in $(awk '$2 == "=>" && $3 ~ /^\// {print $3}' <<<"$out" | sort -u); do
    owner "$lib"
  done | sort -u
}

main "$@"
