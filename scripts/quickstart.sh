#!/usr/bin/env bash
# The main job: installs what is missing, builds every program (cmake
# --build build: the roles, the tools, the benchmarks, the Python package and
# its PyTorch workers; the tests are built by scripts/test.sh), and trains the
# Fashion-MNIST MLP with a local job (1 scheduler, 2 servers, 2 workers, sync,
# 5 epochs), then prints the final test accuracy, the wall time, the
# throughput, where the plot of test accuracy against wall time is and where
# the trained model is (out/train-<time>/accuracy.png, model.npz).
# Arguments go to scripts/train_fashion_mnist.sh, e.g.
#   ./scripts/quickstart.sh --epochs 1
#   ./scripts/quickstart.sh --consistency ssp:2 -- --lr=0.002
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
echo "quickstart: configuring build/"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
echo "quickstart: building every program into build/bin and the Python package into build/python"
# Progress: one line per target built; the whole output in build/build.log.
set +e
cmake --build build -j"$(nproc)" 2>&1 | tee build/build.log | grep --line-buffered -E '^\[ *[0-9]+%\] Built target'
status=${PIPESTATUS[0]}
set -e
if [[ $status -ne 0 ]]; then
  grep -E 'error|Error' build/build.log | head -20 >&2
  echo "quickstart: the build failed (exit $status); the whole output is in build/build.log" >&2
  exit 1
fi
exec scripts/train_fashion_mnist.sh --workers 2 --servers 2 --consistency sync --epochs 5 "$@"
