#!/bin/bash
# The binaries a GPU check needs, stripped, with the shared libraries they link (not libc's, not the driver's).
set -eu
R="$(cd "$(dirname "$0")/.." && pwd)"; S=$(mktemp -d); mkdir -p $S/bin $S/lib
for b in ps_scheduler ps_server ps_worker cuda_backend_test ps_export libps_cuda.so; do
  cp "$R/build/bin/$b" $S/bin/; strip $S/bin/$b
done
for b in $S/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libcuda|libcublas[^/]*)\.so' \
    | while read -r l; do cp -n "$l" $S/lib/; done
done
tar -C $S -cJf "$R/.device/bundle.tar.xz" bin lib; rm -rf $S; ls -la "$R/.device/bundle.tar.xz"
