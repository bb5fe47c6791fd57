#!/bin/bash
# The binaries the GPU check needs, stripped, with the shared libraries they link (not libc's, not the driver's),
# iproute2's ip and tc with theirs (for an image without them), and Fashion-MNIST, into .device/ (git-ignored).
set -eu
R="$(cd "$(dirname "$0")/../../.." && pwd)"; S=$(mktemp -d); mkdir -p $S/bin $S/lib $S/ipbin $S/iplib
for b in ps_scheduler ps_server ps_worker ps_export cuda_backend_test libps_cuda.so; do
  cp "$R/build/bin/$b" $S/bin/; strip $S/bin/$b
done
libs() { ldd "$1" | awk '/=> \//{print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libcuda|libcublas[^/]*)\.so'; }
for b in $S/bin/*; do libs "$b" | while read -r l; do cp -n "$l" $S/lib/; done; done
for t in ip tc; do
  cp "$(command -v $t)" $S/ipbin/$t.real
  libs "$(command -v $t)" | while read -r l; do cp -n "$l" $S/iplib/; done
  # Its libraries before the caller's: `ip netns exec` passes the environment on to the programs it starts.
  printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/dev/iplib:$LD_LIBRARY_PATH exec /tmp/dev/ipbin/%s.real "$@"\n' $t > $S/ipbin/$t
  chmod +x $S/ipbin/$t
done
mkdir -p "$R/.device"; tar -C $S -cJf "$R/.device/bundle.tar.xz" bin lib ipbin iplib; rm -rf $S
rm -rf "$R/.device/fashion"; cp -r /usr/share/datasets/fashion-mnist "$R/.device/fashion"
grep -qx '/.device/' "$R/.git/info/exclude" 2>/dev/null || echo '/.device/' >> "$R/.git/info/exclude"
du -sh "$R/.device"/*
