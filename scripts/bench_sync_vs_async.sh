#!/usr/bin/env bash
# Fashion-MNIST training once per update mode (sync, async, ssp:1, ssp:4),
# compared: see scripts/bench_sync_vs_async.py --help. Needs the programs
# built (./scripts/quickstart.sh, or cmake --build build); says so otherwise.
set -euo pipefail
exec /usr/bin/python3 "$(dirname "$0")/bench_sync_vs_async.py" "$@"
