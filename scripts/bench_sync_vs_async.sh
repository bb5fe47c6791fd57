#!/usr/bin/env bash
# Fashion-MNIST training once per update mode (sync, async, ssp:1, ssp:4),
# compared: see scripts/bench_sync_vs_async.py --help. Builds first if needed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [[ ! -x "$here/../build/bin/ps_worker" && " $* " != *" --bin-dir "* ]]; then
  "$here/install_deps.sh" >&2
  cmake -S "$here/.." -B "$here/../build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
  cmake --build "$here/../build" -j"$(nproc)" >&2
fi
exec /usr/bin/python3 "$here/bench_sync_vs_async.py" "$@"
