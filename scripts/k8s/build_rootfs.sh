#!/usr/bin/env bash
# Builds the image of scripts/k8s/Dockerfile on Debian 12 with no container
# registry, only Debian's apt archive (and the npm registry, which
# scripts/install_deps.sh uses for the SpamAssassin corpus):
#
#   scripts/k8s/build_rootfs.sh [--out FILE] [--tag NAME] [--context DIR] [--work DIR] [--keep-work]
#                               [--host-ca]
#
#   1. mmdebstrap makes a minimal Debian 12 root filesystem (what the
#      debian:12 image holds) from the apt archive;
#   2. buildah imports it, in a private store, as docker.io/library/debian:12,
#      so that the Dockerfile's FROM finds it there and pulls nothing;
#   3. buildah builds the Dockerfile (both stages; RUN steps with chroot
#      isolation) from --context (default: the repository's working tree);
#   4. the image goes to FILE as an OCI archive (default
#      out/k8s-image/ps-image.oci.tar), tagged NAME (default localhost/ps:latest),
#      for `podman load -i FILE`, `skopeo copy oci-archive:FILE docker://REGISTRY/ps:TAG`,
#      `ctr -n k8s.io images import FILE` or `kind load image-archive FILE`.
#
# --host-ca: behind a proxy that intercepts TLS, the build's npm must trust
# the proxy's CA as this machine does: every RUN step then sees this machine's
# /usr/local/share/ca-certificates (installed with the ca-certificates
# package inside the build) and /etc/npmrc, read-only; they are mounts, not
# part of any layer, so the image does not keep them.
#
# Needs root and the Debian packages mmdebstrap and buildah. The work folder
# (default: a new one under /var/tmp; about 20 GB: buildah's vfs store copies
# each layer whole) is removed at the end unless --keep-work; given again with
# --work, a kept folder is reused: the base and the cached layers (--layers)
# are not made again. Measured on a 2-core machine busy with another build:
# about 16 min (mmdebstrap 1-1.5 min, install_deps.sh in the build stage
# 4.5-11.5 min, the five binaries 4 min, the runtime stage 0.5 min, writing
# the archive 2 min); a 395 MB image (build stage 3.35 GB), a 189 MB archive.
# Exit codes: 0 built, 1 a step failed, 2 bad option or a tool missing.
set -euo pipefail

me=build_rootfs
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$root/out/k8s-image/ps-image.oci.tar"
tag="localhost/ps:latest"
context="$root"
work=""
keep=0
host_ca=()
mirror_lines=(
  "deb http://deb.debian.org/debian bookworm main"
  "deb http://deb.debian.org/debian bookworm-updates main"
  "deb http://deb.debian.org/debian-security bookworm-security main"
)

die() { echo "$me: $*" >&2; exit 2; }
step() { echo "$me: [$(date +%T)] $*"; }

parse_args() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --out) out="$2"; shift 2 ;;
      --tag) tag="$2"; shift 2 ;;
      --context) context="$(cd "$2" && pwd)"; shift 2 ;;
      --work) work="$2"; shift 2 ;;
      --keep-work) keep=1; shift ;;
      --host-ca) host_ca=(--volume /usr/local/share/ca-certificates:/usr/local/share/ca-certificates:ro
                          --volume /etc/npmrc:/etc/npmrc:ro); shift ;;
      -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
      *) die "unknown option '$1' (--help)" ;;
    esac
  done
  [[ $(id -u) -eq 0 ]] || die "needs root (mmdebstrap and buildah's chroot isolation)"
  local t
  for t in mmdebstrap buildah; do
    command -v "$t" >/dev/null || die "$t not found: apt-get install --no-install-recommends mmdebstrap buildah"
  done
  [[ -f "$context/scripts/k8s/Dockerfile" ]] || die "$context is not the repository (no scripts/k8s/Dockerfile)"
}

cleanup() {
  [[ -n "$work" && -d "$work" ]] || return 0
  if [[ $keep -eq 1 ]]; then echo "$me: work folder kept: $work"; return 0; fi
  # The store holds read-only layers and may still have mounts: unmount first.
  bah unmount --all >/dev/null 2>&1 || true
  rm -rf "$work"
}

# buildah on a store of its own in the work folder: nothing is left in the
# machine's /var/lib/containers, and vfs needs no overlay support.
bah() { buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs "$@"; }

make_base() {
  if bah inspect --type image docker.io/library/debian:12 >/dev/null 2>&1; then
    step "reusing the base image of $work"
    return 0
  fi
  step "mmdebstrap: Debian 12 (minbase) from the apt archive"
  mmdebstrap --variant=minbase --format=tar bookworm "$work/base.tar" "${mirror_lines[@]}"
  step "importing it as docker.io/library/debian:12 ($(du -h "$work/base.tar" | cut -f1))"
  local c mnt
  c="$(bah from scratch)"
  mnt="$(bah mount "$c")"
  tar -C "$mnt" -xf "$work/base.tar"
  bah unmount "$c" >/dev/null
  bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd bash "$c"
  bah commit --quiet "$c" docker.io/library/debian:12 >/dev/null
  bah rm "$c" >/dev/null
  rm -f "$work/base.tar"
}

build_image() {
  step "buildah: scripts/k8s/Dockerfile from $context"
  bah bud --pull=never --isolation=chroot --layers "${host_ca[@]}" \
    -f "$context/scripts/k8s/Dockerfile" --ignorefile "$context/scripts/k8s/Dockerfile.dockerignore" \
    -t "$tag" "$context"
  mkdir -p "$(dirname "$out")"
  rm -f "$out"
  step "writing $out"
  bah push --quiet "$tag" "oci-archive:$out:$tag"
}

main() {
  parse_args "$@"
  if [[ -z "$work" ]]; then work="$(mktemp -d /var/tmp/ps-image.XXXXXX)"; else mkdir -p "$work"; fi
  trap cleanup EXIT
  local t0=$SECONDS t1
  make_base
  t1=$SECONDS
  build_image
  step "done: base $((t1 - t0)) s, image $((SECONDS - t1)) s; $(du -h "$out" | cut -f1) archive"
  bah images
}

main "$@"
