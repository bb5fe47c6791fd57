#!/usr/bin/env bash
# The installed C++ client, as another project uses it: `cmake --install
# BUILD_DIR --prefix P`, then a project of its own with find_package(ps),
# target_link_libraries(app ps::client) and #include <ps/kv_client.h> builds,
# and its KVClient::Connect to an address where nothing listens returns its
# error within the registration timeout; the same program built with
# pkg-config's flags (ps.pc) does too.
#
#   tests/install_package_test.sh BUILD_DIR
set -euo pipefail
build="$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)"
tmp="$(mktemp -d /tmp/install_package_test.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/P" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
for f in include/ps/kv_client.h include/ps/kv_stats.h include/ps/push_buffers.h lib/libps.so lib/cmake/ps/psConfig.cmake lib/pkgconfig/ps.pc; do
  [ -f "$tmp/P/$f" ] || { echo "FAIL: the install has no $f"; exit 1; }
done
mkdir -p "$tmp/app"
cat >"$tmp/app/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(app CXX)
find_package(ps REQUIRED)
add_executable(app main.cc)
target_link_libraries(app ps::client)
CMAKE
cat >"$tmp/app/main.cc" <<'CC'
#include <ps/kv_client.h>

#include <cstdio>

#include "absl/time/clock.h"

// Nothing listens at 127.0.0.1:1: Connect must give up with an error once
// its registration timeout has passed, not hang.
int main() {
  ps::KVClientOptions options;
  options.scheduler = "127.0.0.1:1";
  options.register_timeout = absl::Seconds(2);
  const absl::Time t0 = absl::Now();
  absl::StatusOr<std::unique_ptr<ps::KVClient>> client = ps::KVClient::Connect(options);
  const double took = absl::ToDoubleSeconds(absl::Now() - t0);
  if (client.ok()) {
    std::printf("FAIL: connected to a scheduler that is not there\n");
    return 1;
  }
  std::printf("Connect after %.1f s: %s\n", took, client.status().ToString().c_str());
  return took < 10 && client.status().code() == absl::StatusCode::kDeadlineExceeded ? 0 : 1;
}
CC
cmake -S "$tmp/app" -B "$tmp/app/build" -DCMAKE_PREFIX_PATH="$tmp/P" >"$tmp/app.log" 2>&1 &&
  cmake --build "$tmp/app/build" >>"$tmp/app.log" 2>&1 || { echo "FAIL: find_package(ps) project:"; cat "$tmp/app.log"; exit 1; }
timeout 60 "$tmp/app/build/app" || { echo "FAIL: the find_package(ps) program"; exit 1; }
echo "ok: find_package(ps), ps::client, <ps/kv_client.h>"
# shellcheck disable=SC2046  # pkg-config's flags are words
g++ -o "$tmp/app2" "$tmp/app/main.cc" $(PKG_CONFIG_PATH="$tmp/P/lib/pkgconfig" pkg-config --cflags --libs ps) ||
  { echo "FAIL: building with pkg-config --cflags --libs ps"; exit 1; }
timeout 60 "$tmp/app2" || { echo "FAIL: the pkg-config program"; exit 1; }
echo "ok: pkg-config ps"
